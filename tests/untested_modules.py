"""Count the product's modules that no test imports directly (issue 33's "39 of 180 modules are imported by no test").

    python tests/untested_modules.py            # the counts, then each module no test imports (and whether one names
    it)
    python tests/untested_modules.py --max 30   # exit 1 when more than 30 modules are imported by no test

A module is every .py file but __init__.py under asymspec_vl/, vllm_patches/, captioners/, evals/ and demo/ (the
last three also import as asymspec_vl.<folder>.*). A test imports it when a file under tests/ has `import M`,
`from M import ...`, `from P import m` (m the module's last name), `from P import Name` where package P's __init__
re-exports Name from M (`from .m import Name`, or a lazy table of "Name": ".m") or `importlib.import_module("M")`
(read with ast);
it names it when its dotted name or its path appears anywhere in a test file's text (a subprocess `-m M`, a
monkeypatch target, a mutant list's `file`), or when it registers a command (`add_parser("NAME")`) that a test runs
(`main(["NAME", ...])`, `[script, "NAME", ...]`, `"asymspec-vl", "NAME"`). Named-only modules are exercised through a
subprocess or a string at
most; the rest no test reaches by name at all. Named run.py-like (not test_*.py): pytest never collects it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("asymspec_vl", "vllm_patches", "captioners", "evals", "demo")
NAMESPACED = ("captioners", "evals", "demo")  # installed under asymspec_vl (setup.py)


def modules(root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """Each module's path (relative, posix) -> the dotted names it imports as."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root)
            dotted = ".".join(rel.with_suffix("").parts)
            out[rel.as_posix()] = (
                (dotted, f"asymspec_vl.{dotted}")
                if package in NAMESPACED
                else (dotted,)
            )
    return out


def imported_names(source: str) -> set[str]:
    """Dotted names a file imports: `import M`, `from M import x` (M and M.x), import_module("M")."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value))
    return names


def reexports(root: Path = ROOT) -> dict[str, str]:
    """ "package.Name" -> the dotted module a package's __init__ takes Name from (`from .m import Name`, or a
    lazy-import table's "Name": ".m" entries)."""
    out = {}
    for package in PACKAGES:
        for init in (root / package).rglob("__init__.py"):
            dotted = ".".join(init.parent.relative_to(root).parts)
            for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                    out.update(
                        {
                            f"{dotted}.{a.name}": f"{dotted}.{node.module}"
                            for a in node.names
                        }
                    )
                elif isinstance(node, ast.Dict):
                    out.update(
                        {
                            f"{dotted}.{k.value}": f"{dotted}{v.value}"
                            for k, v in zip(node.keys, node.values)
                            if isinstance(k, ast.Constant)
                            and isinstance(v, ast.Constant)
                            and str(v.value).startswith(".")
                        }
                    )
    for name, module in list(
        out.items()
    ):  # the namespaced folders import under asymspec_vl too
        if name.split(".")[0] in NAMESPACED:
            out[f"asymspec_vl.{name}"] = f"asymspec_vl.{module}"
    return out


def commands(source: str) -> set[str]:
    """The command names a module registers: the first argument of its add_parser(...) calls."""
    return {
        str(node.args[0].value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "add_parser"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def runs_command(name: str, corpus: str) -> bool:
    """Whether a test runs command `name`: main(["name", ...]), [SCRIPT, "name", ...] or "asymspec-vl", "name"."""
    quoted = re.escape(f'"{name}"')
    return (
        re.search(
            rf'main\(\[\s*{quoted}|\[\s*{quoted}[,\]]|(asymspec-vl"|SCRIPT\)|bin_dir, "asymspec-vl"),\s*{quoted}',
            corpus,
        )
        is not None
    )


def survey(root: Path = ROOT) -> dict[str, str]:
    """Each module's path -> "imported", "named" or "untouched" by the files under tests/."""
    texts = {
        p: p.read_text(encoding="utf-8")
        for p in (root / "tests").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    texts.pop(Path(__file__).resolve(), None)  # this script names no module on purpose
    imported = set().union(*(imported_names(t) for t in texts.values()))
    table = reexports(root)
    imported |= {table[n] for n in imported if n in table}
    corpus = "\n".join(texts.values()) + "\n".join(
        p.read_text(encoding="utf-8") for p in (root / "tests").rglob("*.toml")
    )
    out = {}
    for path, names in modules(root).items():
        if imported & set(names):
            out[path] = "imported"
        elif (
            path in corpus
            or any(n in corpus for n in names)
            or any(
                runs_command(c, corpus)
                for c in commands((root / path).read_text(encoding="utf-8"))
            )
        ):
            out[path] = "named"
        else:
            out[path] = "untouched"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--max",
        type=int,
        default=None,
        help="exit 1 when more modules than this are imported by no test",
    )
    ap.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the checkout to survey (e.g. an older commit's export)",
    )
    args = ap.parse_args()
    result = survey(args.root)
    missing = sorted(p for p, kind in result.items() if kind != "imported")
    named = sum(result[p] == "named" for p in missing)
    print(
        f"{len(missing)} of {len(result)} modules are imported by no test ({named} named by one, "
        f"{len(missing) - named} not even named)"
    )
    for path in missing:
        print(f"  {result[path]:9} {path}")
    return 1 if args.max is not None and len(missing) > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
