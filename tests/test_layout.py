"""The tree's habits, counted as a new maintainer counts them (issue 36): no two modules a reader could confuse by
their file name, and every import left inside a function says why it is lazy."""

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("asymspec_vl", "vllm_patches", "captioners", "evals", "demo")
# a package's own entry points, one per package by design
SHARED_NAMES = {"__init__.py", "__main__.py", "cli.py"}


def sources():
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def repeated_basenames(paths, root: Path = ROOT) -> dict[str, list[str]]:
    """File name -> the modules that carry it, where more than one does."""
    names = Counter(p.name for p in paths if p.name not in SHARED_NAMES)
    return {
        n: sorted(str(p.relative_to(root)) for p in paths if p.name == n)
        for n, c in names.items()
        if c > 1
    }


def test_no_two_modules_share_a_file_name():
    assert repeated_basenames(list(sources())) == {}


def test_the_basename_count_sees_a_repeat(tmp_path):
    paths = [
        tmp_path / "a" / "rows.py",
        tmp_path / "b" / "rows.py",
        tmp_path / "a" / "cli.py",
        tmp_path / "b" / "cli.py",
    ]
    assert repeated_basenames(paths, tmp_path) == {
        "rows.py": ["a/rows.py", "b/rows.py"]
    }


def test_every_mutant_names_code_and_tests_that_exist():
    """A refactor that moves a mutated line or renames a killing test leaves a mutant that mutates nothing or is
    killed by nothing: the lists in tests/mutants/ must follow the code."""
    import tomllib

    stale = []
    for path in sorted((ROOT / "tests" / "mutants").glob("*.toml")):
        for i, m in enumerate(tomllib.loads(path.read_text())["mutant"], 1):
            source = ROOT / m["file"]
            if not source.is_file() or source.read_text().count(m["old"]) != 1:
                stale.append(
                    f"{path.name}#{i}: {m['file']} holds {m['old'][:60]!r} not exactly once"
                )
            for test in m["tests"]:
                file, _, name = test.partition("::")
                found = (ROOT / file).is_file() and (
                    not name
                    or f"def {name.split('[')[0]}(" in (ROOT / file).read_text()
                )
                if not found:
                    stale.append(f"{path.name}#{i}: no test {test}")
    assert stale == []


def function_level_imports(path: Path):
    """(line, has a reason) of every import statement inside a function: a `# lazy: ...` comment on its line or
    on the line above it."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    here = " ".join(lines[inner.lineno - 1 : inner.end_lineno])
                    above = lines[inner.lineno - 2].strip() if inner.lineno > 1 else ""
                    yield inner.lineno, "# lazy:" in here or above.startswith("# lazy:")


def test_an_import_inside_a_function_says_why_it_is_lazy():
    """Imports sit at the top of their module, except where a heavy or optional dependency (vLLM, torch,
    transformers, gradio, easyocr, ...) must stay out of the module's import: each such place says so."""
    silent = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in sources()
        for line, why in function_level_imports(p)
        if not why
    ]
    assert silent == []


def test_the_lazy_import_check_sees_a_silent_one(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text(
        "def f():\n    import json\n\n\ndef g():\n    import torch  # lazy: loads torch\n"
    )
    assert list(function_level_imports(path)) == [(2, False), (6, True)]


def attribute_chains(path: Path, base: str) -> list[list[str]]:
    """Every attribute chain read from the name `base`: runner.drafter.full.x -> ["drafter", "full", "x"]."""
    chains = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        parts, x = [], node
        while isinstance(x, ast.Attribute):
            parts.append(x.attr)
            x = x.value
        if (
            parts
            and isinstance(x, ast.Name)
            and x.id == base
            and not isinstance(node.ctx, ast.Store)
        ):
            chains.append(parts[::-1])
    return chains


def test_hooks_call_the_proposer_and_views_hold_no_proposer():
    """Issue 36: the worker's hooks call one proposer method each (no runner.drafter.<x>.<y> reach-ins), the
    views and passes read a DrafterHandle (no proposer.<attr> back-references), one function per job."""
    hooks = ROOT / "vllm_patches" / "hooks"
    reach_ins = [
        c
        for p in hooks.glob("*.py")
        for c in attribute_chains(p, "runner")
        if len(c) >= 3 and c[0] == "drafter"
    ]
    assert reach_ins == []
    views = ("full_view.py", "comp_view.py", "drafter_pass.py")
    back = [
        c
        for v in views
        for c in attribute_chains(ROOT / "vllm_patches" / "drafter" / v, "proposer")
    ]
    assert back == []
    defs = [
        p for p in sources() if "def decoding_config(" in p.read_text(encoding="utf-8")
    ]
    assert len(defs) == 1


def dataclass_fields(path: Path, name: str) -> set[str]:
    """The annotated field names of class `name` in the module at `path` (ast: nothing imported)."""
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return {
        s.target.id
        for s in cls.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
    }


def test_a_requests_x_full_state_has_one_holder():
    """Issue 36: one request's x_full state (ledger, positions, M-RoPE delta, whether it sees an image) lives in
    FullView's FullRow only, never again on the proposer's RowState."""
    full = dataclass_fields(ROOT / "vllm_patches/drafter/full_view.py", "FullRow")
    row = dataclass_fields(ROOT / "vllm_patches/requests/rows.py", "RowState")
    assert {"ledger", "positions", "delta", "sees_image"} <= full
    assert full & row == set()
