"""The dependency rule of docs/architecture.md, read from the imports themselves.

Every ``import`` and ``from … import`` in the package counts, lazy ones inside functions and
``TYPE_CHECKING`` blocks included: a lazy import is still an arrow in the design. The layers, from
the bottom:

- ``core``: pure data and rules. Imports nothing else of the package, and none of the libraries
  that do I/O or belong to a face (pynvml, psutil, IPython, ipykernel, ipywidgets, tornado,
  jupyter_server, jupyterhub).
- ``plan``: the GPU plan. Imports only ``core``.
- ``sources.processes``: who a PID is (``/proc``, psutil). Imports only ``core``.
- ``simulate``: simulated GPUs beneath pynvml. Imports ``core`` and ``sources.processes``.
- ``sources``: what reads NVML, the OS and other processes' files. Imports ``core``, ``simulate``.
- ``frameworks``: one adapter per framework. Imports ``core`` and ``plan``.
- ``doctor``: ``jupyter-gpu doctor``'s checks and report. Imports everything above except the faces.
- ``session``: the plan as a process lives with it (the plan session, the ``--wait`` loop, the plan's
  printed text, the defaults, a child's environment), shared by the kernel's magics and
  ``jupyter-gpu run``. Imports what ``doctor`` does; no face library.
- faces (``kernel``, ``panel``, ``server``, ``hub``, ``cli``, and the ``_startup`` hook the ``.pth``
  file runs): import anything below them. Nothing imports a face, except that the kernel
  extension shows the panel (``kernel`` → ``panel``).

And no module imports itself back through others (no cycles).
"""

from __future__ import annotations

import ast
import concurrent.futures
import functools
from pathlib import Path

import jupyter_gpu

PACKAGE = Path(jupyter_gpu.__file__).parent
FACE_LIBRARIES = ("pynvml", "psutil", "IPython", "ipykernel", "ipywidgets", "tornado", "jupyter_server", "jupyterhub")

#: layer -> the layers it may import (besides itself)
MAY_IMPORT = {
    "core": set(),
    "plan": {"core"},
    "processes": {"core"},
    "simulate": {"core", "processes"},
    "sources": {"core", "processes", "simulate"},
    "frameworks": {"core", "plan"},
    "doctor": {"core", "plan", "processes", "simulate", "sources", "frameworks"},
    "session": {"core", "plan", "processes", "simulate", "sources", "frameworks"},
    "panel": {"core", "plan", "processes", "simulate", "sources", "frameworks"},
    "kernel": {"core", "plan", "processes", "simulate", "sources", "frameworks", "session", "panel", "doctor"},
    "server": {"core", "plan", "processes", "simulate", "sources", "frameworks"},
    "hub": {"core", "plan", "processes", "simulate", "sources", "frameworks"},
    "entry": {
        "core",
        "plan",
        "processes",
        "simulate",
        "sources",
        "frameworks",
        "doctor",
        "session",
        "panel",
        "kernel",
        "server",
        "hub",
    },
}


def layer(module: str) -> str:
    parts = module.split(".")
    if module == "jupyter_gpu.sources.processes":
        return "processes"
    if len(parts) == 1 or parts[1] in ("cli", "_startup", "_moved", "__main__"):
        return "entry"  # the package's lazy entry points, the CLI, the .pth hook, the old paths
    return parts[1] if parts[1] in MAY_IMPORT else "entry"


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "labextension" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the package and every top-level library that ``module`` imports."""
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return found


@functools.lru_cache(maxsize=1)
def graph() -> dict[str, set[str]]:
    """The package's import graph, read once per test process (callers must not change it).

    Parsed on a thread of its own: CPython 3.11's AST constructor keeps a recursion count per thread,
    and a RecursionError an earlier test provoked on the main thread of the same worker (the hostile
    JSON tests nest thousands of brackets) can leave it off by the time this runs ("SystemError: AST
    constructor recursion depth mismatch")."""
    known = modules()

    def read() -> dict[str, set[str]]:
        return {module: imports(module, path, set(known)) for module, path in known.items()}

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(read).result()


def test_every_module_has_a_layer() -> None:
    for module in modules():
        assert layer(module) in MAY_IMPORT, module


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in graph().items():
        own = layer(module)
        for target in targets:
            if not target.startswith("jupyter_gpu"):
                continue
            other = layer(target)
            if other != own and other not in MAY_IMPORT[own]:
                wrong.append(f"{module} ({own}) imports {target} ({other})")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_core_and_the_plan_import_no_io_or_face_library() -> None:
    wrong = []
    for module, targets in graph().items():
        if layer(module) not in ("core", "plan"):
            continue
        for target in targets:
            if target.split(".")[0] in FACE_LIBRARIES:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


#: What no module of the session layer imports: it sits below every face (``jupyter-gpu run`` and the kernel).
FACE_ONLY_LIBRARIES = ("IPython", "ipykernel", "ipywidgets", "tornado", "jupyter_server", "jupyterhub")


def test_the_session_imports_no_face_library() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        if layer(module) == "session"
        for target in targets
        if target.split(".")[0] in FACE_ONLY_LIBRARIES
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles() -> None:
    edges = {module: {t for t in targets if t in modules() and t != module} for module, targets in graph().items()}
    index = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_rule_test_sees_lazy_imports() -> None:
    """The reader is not blind: a known lazy import (inside a function) is in the graph."""
    assert "jupyter_gpu.sources.nvml" in graph()["jupyter_gpu"]
    assert layer("jupyter_gpu.kernel.magics") == "kernel"
    assert layer("jupyter_gpu.sources.processes") == "processes"


#: The faces' pure rules, kept apart from their wiring (hub/core.py, hub/reports.py from hub/service.py).
PURE_FACE_MODULES = (
    "jupyter_gpu.hub.core",
    "jupyter_gpu.hub.reports",
    "jupyter_gpu.hub.accounting",
    "jupyter_gpu.hub.page",
    "jupyter_gpu.server.hub_report",
    "jupyter_gpu.server.answer",
    "jupyter_gpu.server.attribution",
    "jupyter_gpu.server.cull",
    "jupyter_gpu.session.report",
)


def test_the_faces_pure_rules_import_no_io_or_face_library() -> None:
    known = graph()
    wrong = [
        f"{module} imports {target}"
        for module in PURE_FACE_MODULES
        for target in known[module]
        if target.split(".")[0] in FACE_LIBRARIES
    ]
    assert not wrong, "\n".join(sorted(wrong))


MAX_MODULE_LINES = 900
MAX_CLASS_LINES = 400


def test_no_module_over_900_lines_and_no_class_over_400() -> None:
    """Monoliths hide seams: a module is one idea its name says, a class one job."""
    too_big = []
    for module, path in modules().items():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_big.append(f"{module}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_big.append(f"{module}.{node.name}: {size} lines")
    assert not too_big, "\n".join(too_big)
