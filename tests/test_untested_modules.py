"""tests/untested_modules.py, the count of modules no test imports, on a small made-up checkout: a module imported
directly, through a package's re-export or a lazy table is "imported"; one only named (a subprocess -m, a path) or
whose command a test runs is "named"; the rest "untouched"; __init__.py files are not counted."""

from untested_modules import survey


def write(root, files: dict) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_each_module_is_classified_by_how_the_tests_reach_it(tmp_path):
    write(
        tmp_path,
        {
            "asymspec_vl/__init__.py": '_HOMES = {"Lazy": ".lazy"}\n',
            "asymspec_vl/direct.py": "",
            "asymspec_vl/lazy.py": "",
            "asymspec_vl/sub/__init__.py": "from .inner import X\n",
            "asymspec_vl/sub/inner.py": "X = 1\n",
            "asymspec_vl/named.py": "",
            "asymspec_vl/alone.py": "",
            "evals/tool.py": "",
            "demo/cmd.py": 'def register(sub):\n    sub.add_parser("frob")\n',
            "tests/test_a.py": "import asymspec_vl.direct\nfrom asymspec_vl import Lazy\n"
            "from asymspec_vl.sub import X\nfrom asymspec_vl.evals import tool\n",
            "tests/test_b.py": 'CMD = ["python", "-m", "asymspec_vl.named"]\nmain(["frob", "--x"])\n',
        },
    )
    assert survey(tmp_path) == {
        "asymspec_vl/alone.py": "untouched",
        "asymspec_vl/direct.py": "imported",
        "asymspec_vl/lazy.py": "imported",
        "asymspec_vl/named.py": "named",
        "asymspec_vl/sub/inner.py": "imported",
        "demo/cmd.py": "named",
        "evals/tool.py": "imported",
    }
