"""The README's Python API examples run as tests: every ```python block of the sections below, in order, in one
namespace, on the embedded models (hub ids and the example local path substituted); skips are marked and reasoned."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTIONS = ("Python API", "Python API for caption-only verifier stacks")
SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(?P<reason>[^>]*?)\s*-->\s*$")
FENCE = re.compile(r"^```python\s*$")


def substitutions() -> dict[str, str]:
    """README names -> what the tests load instead (the offline embedded pair)."""
    from asymspec_vl.defaults import embedded_models

    return {"Qwen/Qwen3-VL-2B-Instruct": "embedded", "Qwen/Qwen3-32B": "embedded",
            "/models/my-verifier": embedded_models()["verifier"]}


def section_lines(text: str, title: str) -> list[tuple[int, str]]:
    """(line number, line) of one '## title' section, up to the next '## ' heading."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == f"## {title}"]
    assert len(starts) == 1, f"README.md must have exactly one '## {title}' section"
    out = []
    for i in range(starts[0] + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        out.append((i + 1, lines[i]))
    return out


def python_blocks(text: str) -> list[dict]:
    """Every ```python block of SECTIONS: {line, code, skip (the marker's reason or None)}."""
    blocks = []
    for title in SECTIONS:
        lines = section_lines(text, title)
        i = 0
        while i < len(lines):
            lineno, line = lines[i]
            if FENCE.match(line):
                prev = next((p for _, p in reversed(lines[:i]) if p.strip()), "")
                skip = SKIP.search(prev)
                j = i + 1
                while not lines[j][1].startswith("```"):
                    j += 1
                blocks.append({"line": lineno, "code": "\n".join(l for _, l in lines[i + 1:j]),
                               "skip": skip.group("reason") if skip else None})
                i = j
            i += 1
    return blocks


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))
NAMESPACE: dict = {}


def test_the_readme_has_its_examples():
    run = [b for b in BLOCKS if b["skip"] is None]
    assert len(run) >= 6, "the API examples went missing from README.md"
    assert all(b["skip"].strip() for b in BLOCKS if b["skip"] is not None), "a skip needs its reason"
    code = "\n".join(b["code"] for b in run)
    for name in substitutions():  # a stale substitution would leave the README's names untested
        assert name in code, f"{name!r} no longer appears in the README examples"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b["skip"] is None], ids=lambda b: f"README.md:{b['line']}")
def test_readme_example_runs(block, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name files relative to the repository root
    code = block["code"]
    for name, replacement in substitutions().items():
        code = code.replace(name, replacement)
    exec(compile(code, f"README.md:{block['line']}", "exec"), NAMESPACE)
