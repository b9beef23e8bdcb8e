"""The tree's habits, counted as a new maintainer counts them (issue 36): no two modules a reader could confuse by
their file name, and every import left inside a function says why it is lazy."""

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
    return {n: sorted(str(p.relative_to(root)) for p in paths if p.name == n) for n, c in names.items() if c > 1}


def test_no_two_modules_share_a_file_name():
    assert repeated_basenames(list(sources())) == {}


def test_the_basename_count_sees_a_repeat(tmp_path):
    paths = [tmp_path / "a" / "rows.py", tmp_path / "b" / "rows.py", tmp_path / "a" / "cli.py",
             tmp_path / "b" / "cli.py"]
    assert repeated_basenames(paths, tmp_path) == {"rows.py": ["a/rows.py", "b/rows.py"]}


def test_every_mutant_names_code_and_tests_that_exist():
    """A refactor that moves a mutated line or renames a killing test leaves a mutant that mutates nothing or is
    killed by nothing: the lists in tests/mutants/ must follow the code."""
    import tomllib

    stale = []
    for path in sorted((ROOT / "tests" / "mutants").glob("*.toml")):
        for i, m in enumerate(tomllib.loads(path.read_text())["mutant"], 1):
            source = ROOT / m["file"]
            if not source.is_file() or source.read_text().count(m["old"]) != 1:
                stale.append(f"{path.name}#{i}: {m['file']} holds {m['old'][:60]!r} not exactly once")
            for test in m["tests"]:
                file, _, name = test.partition("::")
                found = (ROOT / file).is_file() and (not name or f"def {name.split('[')[0]}(" in (ROOT / file).read_text())
                if not found:
                    stale.append(f"{path.name}#{i}: no test {test}")
    assert stale == []
