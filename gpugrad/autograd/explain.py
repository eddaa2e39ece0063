"""``explain(t)``: the graph behind ``t`` as text, one node per line, and as data a test can check value by value.

For each node: its forward value; the local derivative with respect to each input (the number when the node's
output is a scalar, from its VJP with gy = 1, else the op's formula); and, from a backward run here, the gradient
that flowed into it and what it sent to each input, so a leaf reached along two paths shows both terms and their sum.

The backward shown is explain's own: it keeps the graph (retain_graph=True) and captures the leaves' gradients
instead of adding them into ``.grad`` (as ``autograd.grad`` does), so nothing the user sees changes; tensor hooks run
as in any backward, so the gradients shown are the ones ``backward()`` gives. After a ``backward()`` that freed the
graph, the nodes' saved values are recomputed from their inputs' values (the leaves as they are now), where every
input of a node is known, and the backward runs on those copies.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import numpy as np

from gpugrad.backend import backend_of, on
from gpugrad.core import engine, trace
from gpugrad.core.node import AccumulateGrad
from gpugrad.core.views import fresh

SHOWN = 8  # text: arrays of up to this many elements are printed whole, larger ones summarised
KEPT = 1 << 16  # data: arrays of up to this many elements come to the host whole, larger ones as a Summary
NOT_KEPT = "not kept: build the graph inside gpugrad.autograd.record() to see it"


@dataclass
class Summary:
    """A large array summarised on its device, so only four numbers cross to the host."""
    min: float
    max: float
    mean: float
    norm: float

    def __str__(self):
        return f"(min {self.min:.4g}, max {self.max:.4g}, mean {self.mean:.4g}, norm {self.norm:.4g})"


@dataclass
class Input:
    """One positional input of a node.  Arrays are host NumPy arrays (float64), or a Summary when large."""
    node: int | None  # index in Report.nodes of the node its gradient goes to; None: a constant or a cut input
    cut: bool  # a tensor that records no gradient (detach(), made under no_grad, requires_grad=False)
    formula: str | None = None  # the op's VJP term for this input, e.g. "ga = gy * b"
    local: object = None  # d(output)/d(input) when the output is a scalar: the VJP of gy = 1
    sent: object = None  # the gradient this node sent along this edge in the backward


@dataclass
class NodeInfo:
    index: int
    name: str  # as grad_fn.name(): "MulBackward0", "AccumulateGrad"; "UnbindBackward0 output 1" for an OutputSlot
    node: object  # the graph node itself
    kind: str  # "leaf", "op" or "root"
    shape: tuple
    dtype: np.dtype
    value: object = None  # the forward value, None when unknown (``note`` says why)
    note: str = ""
    label: str = ""  # the name given in explain(names=)
    modules: tuple = ()  # under record(): the nn.Module calls that made it, outermost first: (("Net", "Net"),
    #                      ("Net.layers.0", "Block"), ...) as (path, class name)

    @property
    def module(self) -> str:
        return self.modules[-1][0] if self.modules else ""
    inputs: list = field(default_factory=list)
    grad: object = None  # the gradient that flowed into the node
    received: list = field(default_factory=list)  # (sender's index, its input position, contribution)


class Report:
    """``str(report)`` is the text; ``report.nodes`` (inputs first, the root last) the data."""

    def __init__(self, nodes, note=""):
        self.nodes, self.note = nodes, note

    def of(self, t) -> NodeInfo:
        """The node that made tensor ``t`` (a leaf: its AccumulateGrad)."""
        node = fresh(t)._grad_fn
        found = [n for n in self.nodes if n.node is node or (node is None and getattr(n.node, "variable", 0) is t)]
        if not found:
            raise KeyError(f"no node of this graph made the tensor of shape {t.shape}")
        return found[0]

    def __str__(self):
        lines = [f"graph of {len(self.nodes)} nodes, inputs first; #k is node k"] + [self.note] * bool(self.note)
        return "\n".join(lines + [_line(n, self.nodes) for n in self.nodes])


def explain(t, *, after_backward=True, names=None) -> Report:
    """Explain the graph behind ``t``: forward values, local derivatives and (``after_backward``) gradients.

    The gradients are those of ``t.backward(ones_like(t))`` (of ``t.sum()`` for a non-scalar ``t``), computed by a
    backward of explain's own that leaves every ``.grad`` as it was.  ``names`` ({"a": a, ...}) labels tensors.
    Values it cannot know (a temporary fed a Python constant, an input cut by detach) are recomputed from the
    inputs where possible, else marked; ``with gpugrad.autograd.record():`` around the forward keeps them all.

    >>> e = a * b + c                   # a, b, c = 2, -3, 10
    >>> explain(e).of(a).grad           # array(-3.)
    """
    t = fresh(t)
    root = t._grad_fn or (AccumulateGrad.of(t) if t._requires_grad else None)
    if root is None:
        return Report([], "the tensor does not require grad: it has no graph")
    order = engine.toposort([root])[::-1]  # iterative; reversed, it lists inputs before the nodes they feed
    index = {n: i for i, n in enumerate(order)}
    meta = {root: (t.shape, t.dtype)}  # each node's output shape and dtype, as its consumers recorded them
    for n in order:
        for (p, _), m in zip(n.next_functions, getattr(n, "_in_meta", ())):
            if p is not None:
                meta.setdefault(p, m)
    values, notes = {root: t._data}, {}
    for n in order:
        if isinstance(n, AccumulateGrad):
            values[n] = n.variable._data
        elif n is not root:
            values[n], notes[n] = _value(n, values)
    grads, sent, note, revived = {}, {}, "", {}
    if after_backward:
        result = _backward(root, t, order, index, values)
        if isinstance(result, str):
            note = result
        else:
            grads, sent, note, revived = result
    labels = {(v._grad_fn if v._grad_fn is not None else id(v)): k for k, v in (names or {}).items()}
    mod_names, infos = {}, []
    for i, n in enumerate(order):
        shape, dtype = meta[n]
        ins = list(zip(n.next_functions, getattr(n, "_in_meta", ())))
        local = _locals(revived.get(n, n), shape, dtype, values.get(n)) if ins and int(np.prod(shape)) == 1 else None
        arrays = [values.get(n), grads.get(n)] + list(local or [None] * len(ins)) + list(sent.get(n, [None] * len(ins)))
        host = _host(arrays)
        leaf = isinstance(n, AccumulateGrad)
        mods = (getattr(n, "_rec", None) or (None,) * 4)[3]
        name = n.name() + (f" output {n.k}" if n.routes_output else "")  # one output of a node with several
        info = NodeInfo(i, name, n, "leaf" if leaf else "root" if n is root else "op", tuple(shape),
                        np.dtype(dtype), host[0], notes.get(n, ""), grad=host[1],
                        label=labels.get(id(n.variable) if leaf else n, ""),
                        modules=_module_paths(mods, mod_names))
        formulas = _formulas(n, len(ins))
        for k, ((p, _), m) in enumerate(ins):
            info.inputs.append(Input(index.get(p), p is None and m is not None, formulas[k], host[2 + k],
                                     host[2 + len(ins) + k]))
        infos.append(info)
    for info in infos:
        for k, inp in enumerate(info.inputs):
            if inp.node is not None and inp.sent is not None:
                infos[inp.node].received.append((info.index, k, inp.sent))
    return Report(infos, note)


def _value(node, values):
    """A node's forward value: as record() kept it, else recomputed from its inputs' values."""
    rec = getattr(node, "_rec", None)
    if rec is not None and rec[1][0] == rec[2]:
        return rec[0], ""
    why = "overwritten in place after it was made" if rec is not None else NOT_KEPT
    again = _rerun(node, values)
    return (None, why) if again is None else (again[1], "recomputed from its inputs")


def _rerun(node, values):
    """(a copy of ``node`` that ran its forward again on its inputs' values, the output), or None where an input's
    value is not in the graph (a Python constant, a cut input) or the forward cannot run again (a custom Function's
    node keeps no forward; dropout's randoms are consumed). The copy holds what the forward saved."""
    ins = []
    for (p, _), m in zip(node.next_functions, getattr(node, "_in_meta", ())):
        if m is None or values.get(p) is None:
            return None
        ins.append(values[p])
    be = getattr(node, "_be", None)
    if be is None or not hasattr(node, "forward"):
        return None
    # A copy runs the forward: ops save arrays on their node, and the graph's node must stay as it was.
    fn = copy.copy(node)
    try:
        with on(be), np.errstate(all="ignore"):
            out = (getattr(fn, be.forward_name, None) or fn.forward)(be.xp, *ins)
    except Exception:  # noqa: BLE001 - the value is just not shown
        return None
    return fn, (np.asarray(out) if isinstance(out, np.generic) else out)


def _backward(root, t, order, index, values):
    """Run an observed backward: ({node: gradient in}, {node: [gradient sent per input]}, note, {node: its revived
    copy}), or why it could not. After a backward() that freed the graph, it runs over copies of the nodes whose
    forward ran again (_revive)."""
    run_root, original, note, revived = root, {}, "", {}
    if any(getattr(n, "_released", False) for n in order):
        revived = _revive(order, values, root, t)
        if isinstance(revived, str):
            return revived
        run_root, original = revived.get(root, root), {c: n for n, c in revived.items()}
        note = ("an earlier backward() freed this graph: its saved values were recomputed from the inputs' values "
                "(now) to show the gradients")
    grads, sent = {}, {}

    def observe(node, gy, gxs):
        node = original.get(node, node)
        if node in index:
            be = node._be
            grads[node] = gy if not isinstance(gy, list) else None  # a node of several outputs: see its slots
            # Copies: the engine may later add another path's gradient into these arrays in place.
            sent[node] = [None if p is None or gx is None else engine.unbroadcast(be.as_array(gx), m).copy()
                          for (p, _), gx, m in zip(node.next_functions, gxs, node._in_meta)]

    leaves = {n: None for n in order if isinstance(n, AccumulateGrad)}
    retained = [(n, n._retain) for n in order if n._retain is not None]
    for n, _ in retained:  # retain_grad() would add this backward's gradient into the tensor's .grad
        n._retain = None
    try:
        with trace.observing(observe), on(t._backend):
            engine.run([(run_root, t._backend.xp.ones_like(t._data))], retain_graph=True, capture=leaves)
    except RuntimeError as e:  # e.g. a saved tensor changed in place since: backward() itself would raise this
        if not grads:
            return f"no gradients: {e}"
        note = f"gradients only down to where the backward stopped: {e}"
    finally:
        for n, r in retained:
            n._retain = r
    grads.update(leaves)
    return grads, sent, note, revived


def _revive(order, values, root, t):
    """{node: a copy to run backward on}: every op node copied (inputs first) with its edges to the copies, and those
    whose saved values were freed refilled by running their forward again on their inputs' values. A node that cannot
    run again stays freed (the backward stops there). Or why nothing can be shown."""
    check = _rerun(root, values)  # the root's value from the inputs as they are now, against the one t holds
    if check is not None and not np.allclose(*_host([check[1], t._data]), equal_nan=True):
        return ("no gradients: an earlier backward() freed this graph, and its inputs have changed since (an optimizer "
                "step?): explain before changing them, or call backward() with retain_graph=True")
    copies = {}
    for n in order:
        if isinstance(n, AccumulateGrad):
            continue
        c = None
        if getattr(n, "_released", False):
            again = _rerun(n, values)
            if again is not None:
                c = again[0]
                c._released, c._saved_refs = False, None
        c = c if c is not None else copy.copy(n)
        c.next_functions = tuple((copies.get(p, p), nr) for p, nr in n.next_functions)
        c._retain = None
        copies[n] = c
    return copies


def _locals(node, shape, dtype, value):
    """d(output)/d(input) per input of a scalar-output node: its VJP at gy = 1, summed to each input's shape."""
    if getattr(node, "_released", False):
        return None
    be = backend_of(value) if value is not None else node._be  # a device copy's output is on its target device
    try:
        with on(be), np.errstate(all="ignore"):
            gxs = node.run_backward(be.xp.ones(shape, dtype), False)
    except Exception:  # noqa: BLE001 - e.g. a saved input changed in place: no local derivative to show
        return None
    return [None if gx is None or m is None else engine.unbroadcast(node._be.as_array(gx), m)
            for gx, m in zip(gxs, node._in_meta)]


def _host(arrays):
    """A node's arrays on the host: one device-to-host copy per device, never one per array or element."""
    out, groups = [None] * len(arrays), {}
    for i, a in enumerate(arrays):
        if a is not None:
            groups.setdefault(backend_of(a), []).append(i)
    for be, idx in groups.items():
        xp = be.xp
        with on(be), np.errstate(all="ignore"):
            parts = [arrays[i].astype(xp.float64).ravel() if arrays[i].size <= KEPT else
                     xp.stack([arrays[i].min(), arrays[i].max(), arrays[i].mean(),
                               xp.sqrt((arrays[i].astype(xp.float64) ** 2).sum())]).astype(xp.float64)
                     for i in idx]
            flat = be.to_host(xp.concatenate(parts) if len(parts) > 1 else parts[0])
        at = 0
        for i, p in zip(idx, parts):
            chunk, at = flat[at:at + p.size], at + p.size
            out[i] = chunk.reshape(arrays[i].shape) if arrays[i].size <= KEPT else Summary(*chunk.tolist())
    return out


def _formulas(node, n):
    """The op's VJP, split per input: its ``formula`` attribute ("ga = ..., gb = ...")."""
    f = getattr(node, "formula", None)
    if not f:
        return [None] * n
    # one "g<input> = ..." term per input, less a trailing remark in words: "(as torch does)"
    parts = [re.sub(r"\s+\((?:[a-z']+\s+){2,}[^()]*\)$", "", p) for p in re.split(r",\s*(?=g\w*\s*=)", f)]
    return parts if len(parts) == n else [f] * n


def _module_paths(mods, cache):
    """(("Net", "Net"), ("Net.layers.2", "Block"), ...) for a module call stack, named from the outermost."""
    if not mods:
        return ()
    top = mods[0]
    if id(top) not in cache:
        cache[id(top)] = {id(m): k for k, m in top.named_modules()}
    return tuple((".".join(filter(None, (type(top).__name__, cache[id(top)].get(id(m), "")))), type(m).__name__)
                 for m in mods)


def fmt(v) -> str:
    """A value as the report prints it: the number, a small array, or a summary."""
    if v is None:
        return "?"
    if isinstance(v, Summary):
        return str(v)
    if v.size == 1:
        return f"{v.item():.6g}"
    if v.size <= SHOWN:
        return " ".join(np.array2string(v, separator=", ", formatter={"float_kind": "{:.4g}".format}).split())
    with np.errstate(all="ignore"):
        return str(Summary(v.min(), v.max(), v.mean(), float(np.sqrt((v ** 2).sum())))) if v.size else "[]"


def _who(nodes, k) -> str:
    n = nodes[k]
    return f"#{k} {n.label}" if n.label else f"#{k}"


def _line(n, nodes) -> str:
    head = f"#{n.index} {n.name}" + f" {n.label}" * bool(n.label) + f" [{n.module}]" * bool(n.module)
    value = fmt(n.value) if n.value is not None else f"? ({n.note})"
    parts = [f"{head}{' (root)' if n.kind == 'root' else ''} = {value}  {n.dtype}{list(n.shape)}"]
    for k, inp in enumerate(n.inputs):
        if inp.cut:
            parts.append(f"input {k} cut: no gradient (detached, no_grad or requires_grad=False)")
        elif inp.node is not None:
            d = f" = {fmt(inp.local)}" if inp.local is not None else ""
            parts.append(f"∂/∂{_who(nodes, inp.node)}{d}" + f" [{inp.formula}]" * bool(inp.formula))
    if n.grad is not None:
        g = f"grad {fmt(n.grad)}"
        senders = {}
        for s, _, c in n.received:
            senders.setdefault(s, []).append(c)
        if len(n.received) > 1 and not any(isinstance(c, Summary) for _, _, c in n.received):
            g += " = " + " + ".join(f"{fmt(sum(cs))} (from #{s}" + (": " + " + ".join(map(fmt, cs))) * (len(cs) > 1)
                                    + ")" for s, cs in senders.items())
        elif n.received:
            g += f" (from #{n.received[0][0]})"
        sends = [f"{_who(nodes, i.node)}: {fmt(i.sent)}" for i in n.inputs if i.node is not None and i.sent is not None]
        parts.append(g + (" -> " + ", ".join(sends)) * bool(sends))
    return " | ".join(parts)
