"""``draw(t, path)``: the graph ``explain`` reports, as Graphviz (the ``graphviz`` package: ``pip install
'gpugrad[graph]'``).  Leaves are ellipses, ops boxes, the root a double octagon; edges run forward (input to op) and
carry the gradient sent back along them; a cut input is a dashed edge.  For large graphs, the nodes of repeated
``nn.Module`` layers (``layers.0``, ``layers.1``, ... made under ``record()``) collapse into one node per container,
other module calls become labelled clusters, and at most ``max_nodes`` are drawn, the nearest the root, with one
"... N more nodes" node standing for the rest.
"""
from __future__ import annotations

import contextlib
import re
import shutil
import warnings
from pathlib import Path

from gpugrad.autograd.explain import explain, fmt

NO_DOT = ("{dot} written, but not {out}: Graphviz's `dot` program is not installed (Debian/Ubuntu: apt-get install "
          "graphviz; the Python side is the PyPI package graphviz: pip install 'gpugrad[graph]')")
SHAPE = {"leaf": ("ellipse", "lightblue"), "op": ("box", "white"), "root": ("doubleoctagon", "gold")}


def draw(t, path, *, max_nodes=200, collapse=True, names=None, report=None) -> Path:
    """Write the graph behind ``t`` to ``path``: the ``.dot`` source always (next to it), and ``.svg``/``.png``/``.pdf``
    rendered by Graphviz's ``dot`` when it is installed (else a warning says what to install).  Returns the file
    written.  ``report``: an ``explain`` report to draw instead of making one; ``names`` labels tensors, as there."""
    try:
        import graphviz
    except ImportError as e:
        raise ImportError("draw() needs the graphviz package: pip install 'gpugrad[graph]' (or pip install graphviz)"
                          ) from e
    nodes = (report or explain(t, names=names)).nodes
    group, families = _families(nodes) if collapse else (dict.fromkeys(range(len(nodes))), {})
    item = {k: f or f"n{k}" for k, f in group.items()}  # what each node is drawn as
    shown = set(list(dict.fromkeys(item[n.index] for n in reversed(nodes)))[:max_nodes])  # the root's side first
    hidden = sum(1 for n in nodes if item[n.index] not in shown)
    g = graphviz.Digraph("gpugrad", graph_attr={"rankdir": "LR"}, node_attr={"fontsize": "10"},
                          edge_attr={"fontsize": "10"})
    for n in nodes:
        if item[n.index] in shown and not group[n.index]:
            shape, color = SHAPE[n.kind]
            cluster = g.subgraph(name=f"cluster_{n.module}") if n.module else contextlib.nullcontext(g)
            with cluster as c:  # the nodes one module call made share a cluster (DOT merges same-named ones)
                if n.module:
                    c.attr(label=f"{n.module} ({n.modules[-1][1]})", style="rounded")
                c.node(item[n.index], f"{n.label + ': ' if n.label else ''}{n.name}\\n= {fmt(n.value)}\\n"
                       f"{n.dtype}{list(n.shape)}", shape=shape, style="filled", fillcolor=color)
    for fam, label in families.items():
        if fam in shown:
            g.node(fam, label, shape="box3d")
    if hidden:
        g.node("more", f"... {hidden} more nodes", shape="note", style="dashed")
    edges = set()
    for n in nodes:
        for k, i in enumerate(n.inputs):
            dst = item[n.index] if item[n.index] in shown else "more"
            if i.cut and dst != "more":
                g.node(f"cut{n.index}_{k}", "cut", shape="point")
                g.edge(f"cut{n.index}_{k}", dst, style="dashed", label="detached / no grad")
            if i.node is None:
                continue
            src = item[i.node] if item[i.node] in shown else "more"
            single = not {src, dst} & (families.keys() | {"more"})  # x * x: two edges between single nodes
            if src == dst or not single and (src, dst) in edges:  # inside a family, or one edge between two
                continue
            edges.add((src, dst))
            g.edge(src, dst, label=f"grad {fmt(i.sent)}" if single and i.sent is not None else "")
    path = Path(path)
    dot = path if path.suffix == ".dot" else path.with_suffix(".dot")
    g.save(dot)
    if path.suffix == ".dot":
        return path
    if shutil.which("dot") is None:
        warnings.warn(NO_DOT.format(dot=dot, out=path), stacklevel=2)
        return dot
    g.render(filename=dot, outfile=path, format=path.suffix[1:], quiet=True)
    return path


def _families(nodes):
    """({node index: "Net.layers.*" or None}, {family: label}): nodes made inside repeated layers (two or more calls
    of one module class under one numbered container: Sequential, ModuleList) draw as one node per container.
    A parameter that only one family uses joins it."""
    group, kinds, layers = {}, {}, {}
    for n in nodes:
        # the outermost numbered module on the call stack: ("Net.layers.3", "Block") -> family "Net.layers.*"
        p, k = next(((p, k) for p, k in n.modules if re.search(r"\.\d+$", p)), (None, None))
        group[n.index] = p and re.sub(r"\d+$", "*", p)
        if p:
            kinds.setdefault(group[n.index], set()).add(k)
            layers.setdefault(group[n.index], set()).add(p)
    keep = {f for f, ks in kinds.items() if len(ks) == 1 and len(layers[f]) > 1}
    group = {i: f if f in keep else None for i, f in group.items()}
    users = {}
    for u in nodes:
        for i in u.inputs:
            users.setdefault(i.node, set()).add(group[u.index])
    for n in nodes:
        fams = users.get(n.index, {None})
        if n.kind == "leaf" and len(fams) == 1 and None not in fams:
            group[n.index] = next(iter(fams))
    size = {f: sum(1 for v in group.values() if v == f) for f in keep}
    return group, {f: f"{f}\\n{len(layers[f])} x {kinds[f].pop()}\\n{size[f]} nodes" for f in keep}
