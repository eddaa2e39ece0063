"""``gpugrad.autograd.explain``: values, local derivatives and gradients checked number by number through the report's
data (never its text), against hand-derived values and against what ``backward()`` puts in ``.grad``."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
import gpugrad.nn as nn
from gpugrad.autograd import explain, record
from gpugrad.core import trace
from tests.autograd.test_engine import Cube  # a custom autograd.Function (x^3)
from tests.op_cases import CASES, case_inputs


def scalars(*values):
    return [gpugrad.tensor(float(v), requires_grad=True) for v in values]


def test_seed_example_e_is_ab_plus_c():
    a, b, c = scalars(2, -3, 10)
    ab = a * b
    e = ab + c
    r = explain(e, names={"a": a, "b": b, "c": c})
    root, mul = r.of(e), r.of(ab)
    assert (root.name, root.kind, root.value) == ("AddBackward0", "root", 4)
    assert r.nodes[-1] is root and len(r.nodes) == 5
    assert mul.name == "MulBackward0" and mul.value == -6
    # de/d(ab) = 1, d(ab)/da = b = -3, d(ab)/db = a = 2
    assert [i.node for i in root.inputs] == [mul.index, r.of(c).index]
    assert [float(i.local) for i in root.inputs] == [1, 1]
    assert [float(i.local) for i in mul.inputs] == [-3, 2]
    assert mul.inputs[0].formula == "ga = gy * b" and mul.inputs[1].formula.startswith("gb = gy * a")
    assert (float(root.grad), float(mul.grad)) == (1, 1)
    assert [float(i.sent) for i in mul.inputs] == [-3, 2]
    assert [float(r.of(t).grad) for t in (a, b, c)] == [-3, 2, 1]
    assert [r.of(t).value for t in (a, b, c)] == [2, -3, 10]
    assert [r.of(t).label for t in (a, b, c)] == ["a", "b", "c"]
    assert r.of(a).received == [(mul.index, 0, -3)]
    text = str(r)
    assert "MulBackward0 = -6" in text and "AddBackward0 (root) = 4" in text
    assert a.grad is None and b.grad is None and c.grad is None  # explain's own backward leaves .grad alone


def test_a_value_reused_along_two_paths_shows_both_terms_and_their_sum():
    (x,) = scalars(3)
    xx = x * x
    y = xx + x
    r = explain(y)
    leaf, mul, add = r.of(x), r.of(xx), r.of(y)
    assert float(leaf.grad) == 7
    terms = sorted((s, float(c)) for s, _, c in leaf.received)
    assert terms == [(mul.index, 3), (mul.index, 3), (add.index, 1)]  # x*x sends 3 along each edge: 6 in all
    assert [float(i.local) for i in mul.inputs] == [3, 3] and [float(i.sent) for i in add.inputs] == [1, 1]
    assert "grad 7 = 6 (from #1: 3 + 3) + 1 (from #2)" in str(r)


def test_a_detached_branch_is_marked_cut():
    a, b = scalars(2, -3)
    with record():  # keeps the product's value, which has a cut input and so cannot be recomputed
        prod = a * b.detach()
        y = prod + b
    r = explain(y)
    mul = r.of(prod)
    assert mul.value == -6 and [i.cut for i in mul.inputs] == [False, True]
    assert mul.inputs[1].node is None and mul.inputs[1].sent is None
    assert (float(r.of(a).grad), float(r.of(b).grad)) == (-3, 1)
    with gpugrad.no_grad():
        c = b * 2
    z = a * c
    assert [i.cut for i in explain(z).of(z).inputs] == [False, True]
    k = a * 2  # a Python constant is no cut input
    assert [(i.cut, i.node) for i in explain(k).of(k).inputs][1] == (False, None)


def test_values_unknown_without_record_are_recomputed_or_marked():
    a, b = scalars(2, -3)
    t1 = a * b  # recomputable: every input is in the graph
    t2 = t1 + 1  # takes a Python constant: its value is gone once the forward has moved on
    y = t2 * a
    r = explain(y)
    assert r.of(t1).value == -6 and r.of(t2).value is None and "record()" in r.of(t2).note
    assert r.of(y).value == -10


def test_non_scalar_root_seeds_ones_and_tensor_nodes_show_formulas():
    x = gpugrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.exp() * x
    r = explain(y)
    np.testing.assert_allclose(r.of(x).grad, np.exp([1, 2, 3]) * (1 + np.array([1, 2, 3])), rtol=1e-6)
    mul = r.of(y)
    assert mul.inputs[0].local is None and mul.inputs[0].formula == "ga = gy * b"
    np.testing.assert_allclose(mul.value, np.exp([1, 2, 3]) * [1, 2, 3], rtol=1e-6)
    s = y.sum()
    np.testing.assert_array_equal(explain(s).of(s).inputs[0].local, [1, 1, 1])  # d sum / d y, from the VJP


def test_formula_attribute_wins_over_the_docstring(monkeypatch):
    from gpugrad.ops.arith import Mul

    monkeypatch.setattr(Mul, "formula", "ga = gy * b, gb = gy * a", raising=False)
    a, b = scalars(2, 5)
    y = a * b
    assert [i.formula for i in explain(y).of(y).inputs] == ["ga = gy * b", "gb = gy * a"]


def test_large_values_are_summarised_on_their_device():
    x = gpugrad.tensor(np.linspace(-1, 1, 70_000), requires_grad=True)
    y = x * 2
    r = explain(y)
    v = r.of(y).value
    assert (v.min, v.max) == (-2, 2) and abs(v.mean) < 1e-12
    assert v.norm == pytest.approx(np.linalg.norm(np.linspace(-2, 2, 70_000)))
    assert "norm" in str(r)


def test_forward_only_report_and_a_freed_graph():
    a, b = scalars(2, -3)
    y = a * b
    r = explain(y, after_backward=False)
    assert r.of(y).grad is None and r.of(a).grad is None and [float(i.local) for i in r.of(y).inputs] == [-3, 2]
    y.backward()  # frees the saved values: explain recomputes them from the leaves, as they still are
    r = explain(y)
    assert "freed" in r.note and float(r.of(a).grad) == -3 and float(r.of(b).grad) == 2 and r.of(y).value == -6
    assert [float(i.local) for i in r.of(y).inputs] == [-3, 2]
    with gpugrad.no_grad():
        a.add_(1)  # an optimizer step: the recomputed values would no longer be those backward() saw
    r = explain(y)
    assert "changed since" in r.note and "retain_graph=True" in r.note and r.of(a).grad is None


def test_explain_after_backward_shows_paths_and_their_sum():
    """After a plain backward(): every node's incoming gradient and each path's share, equal to those of a retained
    graph (and to .grad), for a graph with a shared leaf, an op that saves its output, and a reduction."""
    def build():
        x = gpugrad.tensor([0.5, -1.0, 2.0], dtype=gpugrad.float64, requires_grad=True)
        w = gpugrad.tensor(1.5, dtype=gpugrad.float64, requires_grad=True)
        return x, w, ((x * w).exp() + x.sin() * w).sum()

    x, w, y = build()
    kept = explain(y)  # the graph still holds its saved values
    y.backward()
    r = explain(y)
    assert "freed" in r.note
    for t in (x, w):
        np.testing.assert_allclose(r.of(t).grad, kept.of(t).grad, rtol=1e-12)
        np.testing.assert_allclose(r.of(t).grad, t.grad.numpy(), rtol=1e-12)
        assert [(s, k, c.tolist()) for s, k, c in r.of(t).received] == \
            [(s, k, c.tolist()) for s, k, c in kept.of(t).received]
    assert len(r.of(x).received) == 2  # one contribution per path, from exp(x * w) and from sin(x) * w
    xs, ws = x.detach().numpy(), float(w)
    np.testing.assert_allclose(x.grad.numpy(), ws * np.exp(xs * ws) + ws * np.cos(xs), rtol=1e-12)


def test_the_graph_and_user_state_survive_explain():
    a, b = scalars(2, -3)
    h = a * b
    h.retain_grad()
    seen = []
    a.register_hook(lambda g: seen.append(float(g)) or g * 10)  # hooks run: explain shows what backward gives
    y = h * h
    assert float(explain(y).of(a).grad) == 10 * 2 * -6 * -3
    assert h.grad is None and a.grad is None and trace.WATCH.observer is None and seen == [36]
    y.backward()  # the graph was kept
    assert float(a.grad) == 360 and float(h.grad) == -12 and float(b.grad) == 2 * -6 * 2


def test_in_place_op_on_a_non_leaf():
    x = gpugrad.tensor([1.0, 2.0], requires_grad=True)
    with record():
        h = x * 3
        h.mul_(2)
        y = (h * x).sum()
    r = explain(y)
    old = r.of(x)  # x feeds the first Mul (now overwritten), and the last Mul
    assert any("overwritten in place" in n.note for n in r.nodes if n.name == "MulBackward0")
    np.testing.assert_allclose(r.of(h).value, [6, 12])
    y.backward()
    np.testing.assert_allclose(old.grad, x.grad.numpy())
    np.testing.assert_allclose(old.grad, [12, 24])  # y = 6x * x


def test_views():
    x = gpugrad.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    h = x * 1
    v = h[1:3]
    v.mul_(10)
    y = (h * h).sum()
    r = explain(y)
    assert "CopySlices" in [n.name for n in r.nodes]
    y.backward()
    np.testing.assert_allclose(r.of(x).grad, x.grad.numpy())
    w = x.reshape(2, 2).T
    z = w.sum(0)
    np.testing.assert_allclose(explain(z).of(x).grad, [1, 1, 1, 1])


def test_ten_thousand_nodes_without_recursion():
    x = gpugrad.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y + x
    r = explain(y)
    assert len(r.nodes) == 10_001 and float(r.of(x).grad) == 10_001 and r.of(y).value == 10_001
    assert len(str(r).splitlines()) == 10_002


def test_record_keeps_module_paths_and_restores_the_constructor():
    gpugrad.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    before = trace.WATCH.recording
    with record():
        assert trace.WATCH.recording is not None and trace.ACTIVE == 1
        y = net(gpugrad.randn(2, 3)).sum()
    assert trace.WATCH.recording is before is None and trace.WATCH.modules is None and trace.ACTIVE == 0
    r = explain(y)
    assert [(n.name, n.module) for n in r.nodes if n.kind != "leaf"] == [
        ("AddmmBackward0", "Sequential.0"), ("ReluBackward0", "Sequential.1"), ("AddmmBackward0", "Sequential.2"),
        ("SumBackward0", "")]
    assert r.nodes[-2].modules == (("Sequential", "Sequential"), ("Sequential.2", "Linear"))
    assert all(n.value is not None for n in r.nodes)


def test_a_tensor_without_graph():
    assert explain(gpugrad.tensor(1.0)).nodes == []
    (a,) = scalars(5)
    r = explain(a)
    assert len(r.nodes) == 1 and r.nodes[0].kind == "leaf" and float(r.nodes[0].grad) == 1


PARAMS = [(c, k) for c in CASES for k in range(len(c.shapes))]


@pytest.mark.parametrize("case,k", PARAMS, ids=[f"{c.name}-{k}" for c, k in PARAMS])
def test_every_op_case_explains_with_the_gradients_backward_gives(case, k, tmp_path):
    from gpugrad.autograd import draw

    xs = [gpugrad.tensor(a, requires_grad=case.grad) for a in case_inputs(case, case.shapes[k])]
    with record():
        out = case.fn(*xs)
    if not out.requires_grad:
        pytest.skip(f"{case.name} records no graph")
    r = explain(out)
    assert str(r) and draw(out, tmp_path / "g.dot", report=r).exists()
    np.testing.assert_allclose(r.of(out).value, out.detach().numpy(), rtol=1e-12, equal_nan=True)
    out.backward(gpugrad.ones_like(out))
    for x in xs:
        if x.grad is not None:
            np.testing.assert_allclose(r.of(x).grad, x.grad.numpy(), rtol=1e-12, atol=0, equal_nan=True)


def test_custom_functions_and_named_intermediates():
    (x,) = scalars(2)
    c = Cube.apply(x)
    y = c * x
    r = explain(y, names={"x": x, "cube": c, "y": y})
    node = r.of(c)
    assert (node.name, node.label, float(node.inputs[0].local), float(node.inputs[0].sent)) == ("CubeBackward", "cube",
                                                                                                 12, 24)
    assert float(r.of(x).grad) == 4 * 2 ** 3 and r.of(y).label == "y"
    with pytest.raises(KeyError):
        r.of(gpugrad.tensor(1.0))


def test_every_op_says_its_vjp_in_a_formula():
    """explain shows an op's ``formula`` (never its docstring): every registered op has one, a term per input."""
    from gpugrad.ops import REGISTRY

    missing = sorted(n for n, cls in REGISTRY.items() if not getattr(cls, "formula", None))
    assert not missing, f"registered ops without a formula: {missing}"
