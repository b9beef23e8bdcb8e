"""README.md and docs/*.md as tests. Every code block that can run on the CPU runs as written: a page's ```python
blocks in order and in one namespace, each ```bash command from the repository root (`runs/` moved to a temporary
folder); the ```text block that follows a block is its expected stdout (`...` matches any text within a line, a
line `...` any lines). A block that cannot run here carries `<!-- readme-test: skip: reason -->` on the line
before; a code block neither run nor marked fails (`python tests/test_readme_examples.py` prints the count). Every
block, run or not, and every inline code span are checked for what does not exist: asymspec-vl
subcommands and their flags (parsed by the real parser), `python -m` modules and their flags, repository files,
dotted names under asymspec_vl / vllm_patches, attributes of vl / res / stream, and links between the pages."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(?P<reason>[^>]*?)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
REPO_PATH = re.compile(
    r"(?<![\w./~-])((?:asymspec_vl|demo|evals|tests|docs|captioners|vllm_patches|\.ci)/[\w./-]*\w"
    r"|setup\.sh|constraints-cpu\.txt|pyproject\.toml)(?![\w<*])"
)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    skip: str | None
    expected: str | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse(page: Path) -> tuple[list[Block], str]:
    """The page's fenced blocks (a ```text block right after another is its expected output, not a block of its
    own) and its prose (the text outside blocks)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, prose, i, last_end = [], [], 0, -10
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            prose.append(lines[i])
            i += 1
            continue
        j = i + 1
        while not lines[j].startswith("```"):
            j += 1
        prev = next((p for p in reversed(lines[:i]) if p.strip()), "")
        skip = SKIP.search(prev)
        code = "\n".join(lines[i + 1 : j])
        follows = (
            blocks
            and last_end >= 0
            and not any(s.strip() for s in lines[last_end + 1 : i])
        )
        if fence["lang"] == "text" and follows and blocks[-1].expected is None:
            blocks[-1].expected = code
        else:
            blocks.append(
                Block(
                    page,
                    i + 1,
                    fence["lang"],
                    code,
                    skip["reason"] if skip else None,
                    None,
                )
            )
        last_end, i = j, j + 1
    return blocks, "\n".join(prose)


PARSED = {page: parse(page) for page in PAGES}
BLOCKS = [b for page in PAGES for b in PARSED[page][0]]
RUN_LANGS = ("python", "bash")
RUNNABLE = [b for b in BLOCKS if b.skip is None and b.lang in RUN_LANGS]
# a line that would run if pasted: a command, a python statement (a diagram or a listing has none)
CODE_LINE = re.compile(
    r"^\s*(\$ |\.?/|\.venv/|[A-Z_]+=\S+ |asymspec-vl\b|python\d?\b|pip\b|curl\b|import \w|from \w+ import"
    r"|\w+ = \w+\(|print\()"
)


def kind(block: Block) -> str:
    """What the test does with a block: "run", "marked" (a skip with its reason), "text" (prose in a fence: a
    diagram, a listing) or "unchecked" (code in a language the test does not run, or a fence without a language
    holding a command, with no marker: neither run nor marked, which fails)."""
    if block.skip is not None:
        return "marked"
    if block.lang in RUN_LANGS:
        return "run"
    if block.lang == "text" or (
        block.lang == ""
        and not any(CODE_LINE.match(ln) for ln in block.code.splitlines())
    ):
        return "text"
    return "unchecked"


def census() -> dict[str, int]:
    """How many blocks of the pages the test runs and how many carry a skip with its reason."""
    kinds = [kind(b) for b in BLOCKS]
    elsewhere = sum(bool(re.search(r"tests/\S+\.py", b.skip or "")) for b in BLOCKS)
    return {
        "blocks": len(BLOCKS),
        **{k: kinds.count(k) for k in ("run", "marked", "text", "unchecked")},
        "marked, naming the test that runs it or its like": elsewhere,
    }


def matches(expected: str, actual: str) -> bool:
    pattern = ""
    for line in expected.splitlines():
        if line.strip() == "...":
            pattern += r"(?:.*\n)*?"
        else:
            pattern += (
                ".*?".join(re.escape(part) for part in line.rstrip().split("..."))
                + r"[ \t]*\n"
            )
    return (
        re.fullmatch(
            pattern, "".join(line.rstrip() + "\n" for line in actual.splitlines())
        )
        is not None
    )


def commands(code: str) -> list[str]:
    """The shell commands of a bash block: continuation lines joined, comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [
        c
        for c in (line.strip() for line in joined.splitlines())
        if c and not c.startswith("#")
    ]


# -- the blocks run ------------------------------------------------------------------------------------------
NAMESPACES: dict[Path, dict] = {}


def test_every_page_has_examples_and_every_skip_its_reason():
    assert len(PAGES) >= 9 and all(
        PARSED[p][0] for p in PAGES if p.name in ("README.md", "python-api.md")
    )
    assert all(b.skip.strip() for b in BLOCKS if b.skip is not None), (
        "a skip needs its reason"
    )
    assert (
        sum(b.lang == "python" for b in RUNNABLE) >= 9
        and sum(b.lang == "bash" for b in RUNNABLE) >= 2
    )


def test_every_block_is_run_or_marked_with_its_reason():
    """A code block is run, or carries `<!-- readme-test: skip: reason -->`: one in another language (```sh,
    ```console, ```py) or an unlabelled fence holding a command would otherwise pass unread."""
    unchecked = [f"{b.id} (```{b.lang})" for b in BLOCKS if kind(b) == "unchecked"]
    assert not unchecked, (
        "neither run nor marked: make it ```python / ```bash or add a skip with its reason:\n"
        + "\n".join(unchecked)
    )
    counts = census()
    assert (
        counts["run"] + counts["marked"] + counts["text"] == counts["blocks"]
        and counts["run"] >= 16
    ), counts


def _with_marks(block: Block):
    """A block that starts a vLLM engine carries the suite's `vllm` mark."""
    uses_vllm = re.search(
        r"""backend=["']vllm|--backend vllm|import vllm""", block.code
    )
    return pytest.param(block, marks=pytest.mark.vllm) if uses_vllm else block


@pytest.mark.parametrize(
    "block", [_with_marks(b) for b in RUNNABLE], ids=lambda b: b.id
)
def test_the_example_runs_and_prints_what_the_page_shows(
    block, tmp_path, monkeypatch, capfd
):
    if block.lang == "python":
        monkeypatch.chdir(
            ROOT
        )  # the examples name files relative to the repository root
        if _with_marks(block) is not block:
            # vLLM's log handler keeps the sys.stdout of vLLM's import: import it before this test's capture
            import vllm.logger  # noqa: F401
        capfd.readouterr()
        # stdout as a file with a descriptor, as a user's has: vLLM's engine start calls sys.stdout.fileno()
        exec(
            compile(block.code, block.id, "exec"), NAMESPACES.setdefault(block.page, {})
        )
        printed = capfd.readouterr().out
    else:
        printed = ""
        for command in commands(block.code):
            done = subprocess.run(
                ["bash", "-c", command.replace("runs/", f"{tmp_path}/")],
                cwd=ROOT,
                env=ENV,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, f"{block.id}: {command}\n{done.stderr[-3000:]}"
            printed += done.stdout
    if block.expected is not None:
        assert matches(block.expected, printed), (
            f"{block.id} printed:\n{printed}\nthe page shows:\n{block.expected}"
        )


# -- nothing named that does not exist -----------------------------------------------------------------------
def spans(page: Path) -> list[str]:
    return INLINE.findall(PARSED[page][1])


def cli_problem(argv: list[str]) -> str | None:
    """Why `asymspec-vl argv` does not parse (an unknown command, flag or choice), or None."""
    from asymspec_vl.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


@pytest.fixture(scope="module")
def module_help():
    cache: dict[str, str] = {}

    def get(module: str) -> str:
        if module not in cache:
            cache[module] = subprocess.run(
                [sys.executable, "-m", module, "--help"],
                capture_output=True,
                text=True,
                env=ENV,
                timeout=300,
                cwd=ROOT,
            ).stdout
        return cache[module]

    return get


def command_problems(command: str, module_help, mention: bool = False) -> list[str]:
    """What does not exist in one command line; a mention in prose (`asymspec-vl toy heavy`) may leave out
    required arguments."""
    try:
        argv = shlex.split(command, comments=True)
    except ValueError:
        return []
    while argv and re.fullmatch(r"\w+=\S*", argv[0]):
        argv = argv[1:]
    problems = []
    if argv and argv[0].endswith("asymspec-vl"):
        problem = cli_problem(argv[1:])
        if problem and not (mention and "arguments are required" in problem):
            problems.append(f"{command}: {problem}")
    elif (
        len(argv) > 2
        and argv[0].endswith("python")
        and argv[1] == "-m"
        and argv[2] != "pytest"
    ):
        module = argv[2]
        if importlib.util.find_spec(module) is None:
            return [f"{command}: no module {module}"]
        if module == "asymspec_vl.cli":
            problem = cli_problem(argv[3:])
            return [f"{command}: {problem}"] if problem else []
        flags = [a.split("=")[0] for a in argv[3:] if a.startswith("--")]
        problems += [
            f"{command}: {module} has no {f}"
            for f in flags
            if f not in module_help(module)
        ]
    return problems


def test_every_command_parses(module_help):
    problems = []
    for block in BLOCKS:
        if block.lang == "bash":
            for command in commands(block.code):
                for part in re.split(r"&&|\|\||;|\|", command):
                    problems += [
                        f"{block.id}: {p}"
                        for p in command_problems(part.strip(), module_help)
                    ]
    for page in PAGES:
        for span in spans(page):
            if re.match(r"(\.venv/bin/)?asymspec-vl \w|python -m asymspec_vl", span):
                problems += [
                    f"{page.name}: {p}"
                    for p in command_problems(span, module_help, mention=True)
                ]
    assert not problems, "\n".join(problems)


def test_every_file_and_link_exists():
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path in set(REPO_PATH.findall(text)):
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
        for target in LINK.findall(text):
            if (
                not target.startswith(("http://", "https://"))
                and not (page.parent / target).exists()
            ):
                missing.append(f"{page.name}: link {target}")
    assert not missing, "\n".join(missing)


def _resolve(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _attribute_owners():
    """What `vl.`, `res.`, `stream.` ... name in the pages: the classes (and instance attributes) behind them."""
    from dataclasses import fields

    from asymspec_vl import AsymSpecVL, GenerationResult
    from asymspec_vl.backends.hf.hf_backend import HFBackend
    from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend
    from asymspec_vl.core.trace import Stats
    from asymspec_vl.pair.model_pair import ModelPair
    from asymspec_vl.stream import TextStream

    def names(*classes, extra=()):
        out = set(extra)
        for c in classes:
            out |= set(dir(c)) | (
                {f.name for f in fields(c)}
                if hasattr(c, "__dataclass_fields__")
                else set()
            )
        return out

    return {
        "vl": names(AsymSpecVL, extra=("pair", "backend", "names")),
        "vl.backend": names(
            HFBackend, VLLMBackend, extra=("pair", "models", "device", "engines")
        ),
        "vl.pair": names(
            ModelPair,
            extra=("processor", "tokenizer", "vocab_size", "eos_ids", "pad_id"),
        ),
        "res": names(GenerationResult),
        "res.stats": names(Stats),
        "s": names(Stats),
        "stream": names(TextStream, extra=("result",)),
        "stream.result": names(GenerationResult),
    }


def test_every_name_exists():
    owners, missing = _attribute_owners(), []
    for page in PAGES:
        for span in spans(page):
            name = re.split(r"[(\[ ]", span)[0]
            if re.fullmatch(
                r"(asymspec_vl|vllm_patches)(\.\w+)+", name
            ) and not _resolve(name):
                missing.append(f"{page.name}: {name}")
            head = re.fullmatch(
                r"((?:vl|res|stream|s)(?:\.(?:backend|pair|stats|result))?)\.(\w+)",
                name,
            )
            if head and head[1] in owners and head[2] not in owners[head[1]]:
                missing.append(f"{page.name}: {name}")
    assert not missing, "\n".join(missing)


def test_the_checks_catch_what_the_issue_found():
    """The drift that was in the README once, each caught by the checks above."""
    owners = _attribute_owners()
    assert "engine_order" not in owners["vl.backend"] and _resolve(
        "asymspec_vl.core.methods.engine_order"
    )
    assert cli_problem(["serve", "--no-such-flag"]) and cli_problem(
        ["eval", "score", "x", "--protocol", "a|b"]
    )
    assert not (ROOT / "chart.png").exists() and REPO_PATH.findall(
        "`demo/examples/chart.png`"
    )
    assert matches("a ... b\n...\nz", "a 1.5 b\nx\ny\nz\n") and not matches(
        "a 1 b", "a 2 c"
    )
    page = ROOT / "README.md"
    assert kind(Block(page, 1, "sh", "asymspec-vl eval toy", None, None)) == "unchecked"
    assert (
        kind(Block(page, 1, "", ".venv/bin/asymspec-vl eval toy", None, None))
        == "unchecked"
    )
    assert (
        kind(Block(page, 1, "", "from asymspec_vl import AsymSpecVL", None, None))
        == "unchecked"
    )
    assert (
        kind(
            Block(
                page, 1, "", "image + question ──► captioners/ ──► prompts", None, None
            )
        )
        == "text"
    )
    assert (
        kind(Block(page, 1, "bash", "asymspec-vl eval toy", "a GPU", None)) == "marked"
    )


if __name__ == "__main__":  # the counts: .venv/bin/python tests/test_readme_examples.py
    print(census())
    for b in BLOCKS:
        print(f"{kind(b):9} {b.id:28} {b.skip or ''}")
