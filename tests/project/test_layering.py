"""The structure ARCHITECTURE.md describes, checked on the source: layers import downward only, no import cycle, no
imports inside functions (but for the few listed with their reasons), the backend never imports test code, every
public Tensor method is named in ``gpugrad/_tensor.pyi``, and the package ships ``py.typed``."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpugrad
from gpugrad.testing import stubgen

PKG = Path(gpugrad.__file__).resolve().parent

# Lowest first. A module belongs to the longest prefix that names it.
LAYERS = [
    ("gpugrad.dtypes", "gpugrad.backend", "gpugrad.ops.declarations", "gpugrad.return_types"),
    ("gpugrad.core",),
    ("gpugrad.ops",),
    ("gpugrad.random", "gpugrad.creation", "gpugrad.functional", "gpugrad.methods", "gpugrad._tensor"),
    ("gpugrad", "gpugrad.toplevel", "gpugrad.autograd", "gpugrad.nn", "gpugrad.optim", "gpugrad.utils", "gpugrad.data",
     "gpugrad.serialization", "gpugrad.distributed", "gpugrad.cuda", "gpugrad.backends", "gpugrad.func"),
    ("gpugrad.cli", "gpugrad.bench", "gpugrad.__main__"),
]
TESTING = "gpugrad.testing"  # test tooling: imports anything, imported by nothing but tests
TOOLING = ("gpugrad.cli", "gpugrad.bench", TESTING)  # may import lazily (start-up time, optional dependencies)

# Imports inside functions that the layering allows, each with its reason.
ALLOWED_INNER = {
}


def _modules():
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _targets(module, node):
    """The gpugrad modules an import statement names (a name imported from a package that is a module counts as
    that module; the implicit import of parent packages does not)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("gpugrad")]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if not str(MODULES[module]).endswith("__init__.py"):
            parts = parts[:-1]
        base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
    if not base.startswith("gpugrad"):
        return []
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _edges():
    """(importer, imported, line, inside a function) for every import of a gpugrad module."""
    edges = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())

        def walk(node, inner):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    edges.extend((module, t, child.lineno, inner) for t in _targets(module, child) if t in MODULES)
                walk(child, inner or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

        walk(tree, False)
    return edges


EDGES = _edges()


def layer(module):
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if not m.startswith(TESTING) and layer(m) is None]


def test_layers_import_downward_only():
    upward = [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)}) at line {line}"
              for a, b, line, _ in EDGES if not a.startswith(TESTING) and not b.startswith(TESTING)
              and layer(a) < layer(b)]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    graph = {}
    for a, b, _, _ in EDGES:
        if a != b and not a.startswith(TESTING) and not b.startswith(TESTING):
            graph.setdefault(a, set()).add(b)
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components, iteratively deep enough for ~150 modules
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_no_imports_inside_functions():
    inner = [(a, b) for a, b, _, inside in EDGES if inside and not a.startswith(TOOLING)]
    unexplained = sorted({f"{a} imports {b} inside a function" for a, b in inner if (a, b) not in ALLOWED_INNER})
    assert not unexplained, "\n".join(unexplained)
    stale = [k for k in ALLOWED_INNER if k not in inner]
    assert not stale, f"allowed inner imports that no longer exist: {stale}"


def test_the_backend_never_imports_test_code():
    assert not [(a, b) for a, b, _, _ in EDGES if a.startswith("gpugrad.backend") and b.startswith(TESTING)]


def test_nothing_but_tests_imports_test_tooling():
    assert not [(a, b) for a, b, _, _ in EDGES if b.startswith(TESTING) and not a.startswith(TESTING)]


def test_the_tensor_stub_is_current():
    want = stubgen.stub(gpugrad.Tensor)
    have = stubgen.path().read_text()
    assert have == want, "gpugrad/_tensor.pyi is out of date: run `python -m gpugrad.testing.stubgen`"


def test_every_public_method_is_in_the_stub():
    names = {n for n in dir(gpugrad.Tensor) if not n.startswith("_")}
    text = stubgen.path().read_text()
    missing = [n for n in names if f"def {n}(" not in text and f"    {n}:" not in text]
    assert not missing


@pytest.mark.parametrize("name", ["py.typed", "_tensor.pyi"])
def test_typing_files_ship_with_the_package(name):
    assert (PKG / name).is_file()
