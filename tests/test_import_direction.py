"""Imports run one way between the floors (docs/architecture.md), and no two modules import each other.

FLOORS lists the floors lowest first. A module may import any module of a lower floor and, on its own floor, only
modules of its own room (a floor of several rooms, e.g. evals and demo, keeps them apart). A module's floor is the
longest prefix of its dotted name in FLOORS. A `cli.py` is the command line: it assembles every floor and sits
above them all. Every import statement of every module is read, lazy ones inside functions included; an upward
import fails with the module and the line, a circle of imports (of any length) fails with its modules."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = {
    "asymspec_vl": ROOT / "asymspec_vl",
    "asymspec_vl.captioners": ROOT / "captioners",
    "asymspec_vl.evals": ROOT / "evals",
    "asymspec_vl.demo": ROOT / "demo",
    "vllm_patches": ROOT / "vllm_patches",
}

# Lowest first; each entry a floor, each name in it a room (a dotted-name prefix).
FLOORS = [
    ("asymspec_vl.core",),  # the math, the methods, the loop, the trace, kernels
    ("asymspec_vl.inputs",),  # views, images, user text, vocabulary, token budget
    ("asymspec_vl.toy",),  # the toy world, tiny models
    ("asymspec_vl.pair",),  # model names, the embedded pair, loading models
    (
        "vllm_patches.version",
        "vllm_patches.switches",
        "vllm_patches.grammar_dead_end",
    ),  # the vLLM version guard, the patch switches, a grammar's dead ends (core's tensors only)
    ("vllm_patches.requests",),  # per-request state of an asymspec engine
    ("vllm_patches.probes",),  # looking inside a running engine
    ("vllm_patches.drafter",),  # the proposer and its two views
    ("vllm_patches.sampler_logprobs",),  # a step's logprobs, a chunk of rows at a time
    ("vllm_patches.sampler",),  # each request's method rule in vLLM's sampler
    # the sampler's worst case on dummy rows, for vLLM's profile
    ("vllm_patches.sampler_profile",),
    ("vllm_patches.hooks",),  # thin adapters onto vLLM's classes
    ("vllm_patches",),  # apply() / register(): installs the hooks
    ("asymspec_vl.backends",),  # the interface both backends implement
    ("asymspec_vl.backends.hf", "asymspec_vl.backends.vllm"),
    ("asymspec_vl",),  # the app: the Python API, its stream, the commands
    ("asymspec_vl.captioners",),  # the verifier's view: OCR, captions
    ("asymspec_vl.serve",),  # `asymspec-vl serve`
    ("asymspec_vl.doctor",),  # `asymspec-vl doctor`
    ("asymspec_vl.evals", "asymspec_vl.demo"),
]
# Captioners read the image alone: never the views, the loop, a backend or the pipeline (the command line's checks
# of a model name they may use).
NOT_BELOW = {
    "asymspec_vl.captioners": (
        "asymspec_vl.inputs.prompts",
        "asymspec_vl.core.loop",
        "asymspec_vl.backends",
        "asymspec_vl.api",
    )
}
# Circles of today, each to be broken by the helper named; the test fails when one is gone (drop its line then).
KNOWN_CIRCLES: list[
    set[str]
] = []  # none: the three the floors' first drawing found are broken (issue 24)


def modules():
    """(dotted name, path) of every module."""
    for package, folder in PACKAGE.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            if package == "asymspec_vl" and parts[0] in ("captioners", "evals", "demo"):
                continue  # never under asymspec_vl/ (they install there from their own folders)
            yield name, path


def statements(name: str, path: Path):
    """(line, base, names) of every import: `import a.b` is (line, "a.b", []); `from ..x import y, z` is resolved
    against the module's package, (line, "pkg.x", ["y", "z"])."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(
                    parts[: len(parts) - node.level + 1]
                    + ([node.module] if node.module else [])
                )
            yield node.lineno, base, [alias.name for alias in node.names]


def imported(name: str, path: Path):
    """(line, absolute module name) of every import in the module."""
    for line, base, names in statements(name, path):
        yield line, base
        yield from ((line, f"{base}.{n}") for n in names)


def under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def room_of(module: str) -> tuple[int, str] | None:
    """(floor index, room) of a dotted name of the tree: its longest prefix in FLOORS."""
    found = [
        (len(room), i, room)
        for i, floor in enumerate(FLOORS)
        for room in floor
        if under(module, (room,))
    ]
    return max(found)[1:] if found else None


def targets(name: str, path: Path, known: set[str]):
    """(line, module) of every import, resolved: `from P import m` names P.m where that is a module, P otherwise."""
    for line, base, names in statements(name, path):
        if not names:
            yield line, base
        for n in names:
            yield line, f"{base}.{n}" if f"{base}.{n}" in known else base


def violations(mods=None):
    mods = list(mods or modules())
    known = {n for n, _ in modules()} | {n for n, _ in mods}
    for name, path in mods:
        if path.name == "cli.py":
            continue
        floor, room = room_of(name)
        for line, module in targets(name, path, known):
            target = room_of(module)
            if target is None:
                continue  # another distribution (torch, vllm, ...)
            upward = target[0] > floor or target[0] == floor and target[1] != room
            if upward or under(module, NOT_BELOW.get(room, ())):
                where = (
                    path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                )
                yield f"{where}:{line} ({name}) imports {module}"


def import_graph(mods) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (an attribute's module where it imports an attribute)."""
    names = {n for n, _ in mods}

    def module_of(dotted: str) -> str | None:
        while dotted and dotted not in names:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph = {n: set() for n in names}
    for name, path in mods:
        for _, module in targets(name, path, names):
            if (m := module_of(module)) and m != name:
                graph[name].add(m)
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def test_every_module_has_a_floor():
    assert [name for name, _ in modules() if room_of(name) is None] == []


def test_no_module_imports_a_floor_above_it():
    assert list(violations()) == []


def test_no_modules_import_each_other():
    found = circles(import_graph(list(modules())))
    assert [sorted(c) for c in found if c not in KNOWN_CIRCLES] == []
    assert [sorted(c) for c in KNOWN_CIRCLES if c not in found] == [], (
        "a known circle is gone: drop its line"
    )


def test_the_scan_sees_relative_and_lazy_imports(tmp_path):
    """The check itself: a relative import inside a function, resolved against its package."""
    path = tmp_path / "mod.py"
    path.write_text("def f():\n    from ..evals.jobs import Job\n")
    found = list(imported("asymspec_vl.toy.mod", path))
    assert (2, "asymspec_vl.evals.jobs.Job") in found


def test_the_check_fails_an_upward_import_and_a_sibling_room(tmp_path):
    """The check itself: the core naming the app, the demo naming the evals, a captioner reading the views."""
    cases = {
        "asymspec_vl.core.mod": "def f():\n    from ..api import AsymSpecVL\n",
        "asymspec_vl.demo.mod": "from asymspec_vl.evals.jobs import Job\n",
        "asymspec_vl.captioners.mod": "from asymspec_vl.inputs.prompts import Request\n",
        "asymspec_vl.serve.mod": "from ..core.gate import fuse\n",
    }
    mods = []
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        mods.append((name, tmp_path / name))
    assert [v.split(" imports ")[1] for v in violations(mods)] == [
        "asymspec_vl.api",
        "asymspec_vl.evals.jobs",
        "asymspec_vl.inputs.prompts",
    ]


def test_the_check_finds_a_circle_through_a_lazy_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [{"a", "b", "c"}]


def test_the_kernels_read_the_gate_and_the_gate_reads_no_kernel():
    """core/kernels/dispatch.py runs gate.py's reference off CUDA: gate.py (the math) imports nothing of kernels/."""
    path = ROOT / "asymspec_vl" / "core" / "gate.py"
    assert [
        m
        for _, m in imported("asymspec_vl.core.gate", path)
        if under(m, ("asymspec_vl.core.kernels",))
    ] == []


def test_the_kernels_hold_no_command_line():
    """kernels/ is kernels and their checks; their command line is doctor_kernels.py's."""
    found = [
        f"{name}:{line}"
        for name, path in modules()
        if under(name, ("asymspec_vl.core.kernels",))
        for line, module in imported(name, path)
        if module == "argparse"
    ]
    assert found == []
