"""Imports run one way: captioners -> prompts -> backends -> loop -> evals / demo, with the command line on top.

Every import statement of every module is read (lazy ones inside functions included); a module of a lower
layer that names a higher one fails the test with the module and the line."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = {"asymspec_vl": ROOT / "asymspec_vl", "asymspec_vl.captioners": ROOT / "captioners",
           "asymspec_vl.evals": ROOT / "evals", "asymspec_vl.demo": ROOT / "demo", "vllm_patches": ROOT / "vllm_patches"}
HIGH = ("asymspec_vl.evals", "asymspec_vl.demo")  # the layers nothing below them may import
CORE_OF_CAPTIONERS = ("asymspec_vl.inputs.prompts", "asymspec_vl.backends", "asymspec_vl.core.loop", "asymspec_vl.api")


def modules():
    """(dotted name, path) of every module; a `cli.py` is the command line, above every layer."""
    for package, folder in PACKAGE.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            if package == "asymspec_vl" and parts[0] in ("captioners", "evals", "demo"):
                continue  # never under asymspec_vl/ (they install there from their own folders)
            yield name, path


def imported(name: str, path: Path):
    """(line, absolute module name) of every import in the module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations():
    for name, path in modules():
        if path.name == "cli.py":
            continue
        if under(name, ("asymspec_vl.captioners",)):
            forbidden = HIGH + CORE_OF_CAPTIONERS
        elif under(name, ("asymspec_vl.evals",)):
            forbidden = ("asymspec_vl.demo",)
        elif under(name, ("asymspec_vl.demo",)):
            forbidden = ("asymspec_vl.evals",)
        else:  # the core and vllm_patches
            forbidden = HIGH
        for line, module in imported(name, path):
            if under(module, forbidden):
                yield f"{path.relative_to(ROOT)}:{line} ({name}) imports {module}"


def test_no_module_imports_a_layer_above_it():
    assert list(violations()) == []


def test_the_scan_sees_relative_and_lazy_imports(tmp_path):
    """The check itself: a relative import inside a function, resolved against its package."""
    path = tmp_path / "mod.py"
    path.write_text("def f():\n    from ..evals.runner import Job\n")
    found = list(imported("asymspec_vl.toy.mod", path))
    assert (2, "asymspec_vl.evals.runner.Job") in found and under("asymspec_vl.evals.runner", HIGH)


def test_the_kernels_read_the_gate_and_the_gate_reads_no_kernel():
    """core/kernels/dispatch.py runs gate.py's reference off CUDA: gate.py (the math) imports nothing of kernels/."""
    path = ROOT / "asymspec_vl" / "gate.py"
    assert [m for _, m in imported("asymspec_vl.core.gate", path) if under(m, ("asymspec_vl.core.kernels",))] == []


def test_the_kernels_hold_no_command_line():
    """kernels/ is kernels and their checks; their command line is doctor_kernels.py's."""
    found = [f"{name}:{line}" for name, path in modules() if under(name, ("asymspec_vl.core.kernels",))
             for line, module in imported(name, path) if module == "argparse"]
    assert found == []
