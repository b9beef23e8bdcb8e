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
    return {n: sorted(str(p.relative_to(root)) for p in paths if p.name == n) for n, c in names.items() if c > 1}


def test_no_two_modules_share_a_file_name():
    assert repeated_basenames(list(sources())) == {}


def test_the_basename_count_sees_a_repeat(tmp_path):
    paths = [tmp_path / "a" / "rows.py", tmp_path / "b" / "rows.py", tmp_path / "a" / "cli.py",
             tmp_path / "b" / "cli.py"]
    assert repeated_basenames(paths, tmp_path) == {"rows.py": ["a/rows.py", "b/rows.py"]}
