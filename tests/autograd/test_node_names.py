"""Node names and edges against torch: every op-table row that has a torch twin records the node torch records
(``grad_fn.name()``), and a few binary ops, reflected ones included, lead to their inputs by the same
``next_functions`` (number of edges, which are None, in order).

Known mismatches are strict xfails with the reason (what torch records and why): node names are to be generated from
the registered names by torch's rule, which removes them one by one (a strict xfail that starts passing fails, so
its entry must go).  Rows whose torch twin is a stand-in composition for an op torch lacks are not compared.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from tests.op_cases import CASES, case_inputs

# torch_fn is torch's unfused composition standing in for an op torch does not have: its last node is another op
STAND_INS = {
    **{c.name: "torch has no fused bias + activation: act(x + b)" for c in CASES if c.op == "bias_act"},
    "dropout": "torch draws its own mask: the stand-in multiplies by the given one (F.dropout is compared below)",
    "dropout_ties": "as dropout",
    "dropout_p0": "torch's dropout(p=0) returns its input (no node)",
    "token_logprob": "torch has no fused token log-probability: -cross_entropy(reduction='none')",
    "to_device": "a CPU -> CPU copy here: torch's .to('cpu') of a CPU tensor is a no-op (ToCopyBackward0 needs a GPU)",
}

_EINSUM = "torch's einsum is composed of other ops (permute, bmm, view, sum), the last of which names its node ({}); " \
          "gpugrad records one EinsumBackward0"
_BATCH = "{}: torch folds the batch into one {} and views the result back (UnsafeViewBackward0); gpugrad BmmBackward0"
# "<row>-<shape index>": why gpugrad's node name differs from torch's
NAME_MISMATCHES = {
    **{f"{n}-0": _EINSUM.format(t) for n, t in (
        ("einsum", "ViewBackward0"), ("einsum_batch", "ViewBackward0"), ("einsum_diag", "PermuteBackward0"),
        ("einsum_trace", "SumBackward1"), ("einsum_sum", "SumBackward1"), ("einsum_ellipsis", "ViewBackward0"),
        ("einsum_three", "ViewBackward0"), ("einsum_broadcast", "ViewBackward0"))},
    "matmul-3": "vector @ matrix: torch unsqueezes, runs mm and squeezes back (SqueezeBackward4); gpugrad BmmBackward0",
    "matmul-4": _BATCH.format("(2, 3, 4) @ (4, 5)", "mm"),
    "matmul-5": _BATCH.format("(2, 1, 3, 4) @ (3, 4, 2), a broadcast batch", "bmm"),
    "linear-1": "linear of a 3-D input: torch folds it into addmm and views the result back (ViewBackward0); "
                "gpugrad AddmmBackward0",
    "cross_entropy_smoothing-0": "label smoothing: torch adds a smoothing term to nll_loss (AddBackward0); gpugrad "
                                 "one fused node (NllLossBackward0)",
    "cross_entropy_smoothing_mean-0": "as cross_entropy_smoothing-0",
    "cross_entropy_probs-0": "probability targets: torch's composition ends in a division (DivBackward1), gpugrad's "
                             "in a mean (MeanBackward0)",
}


def _param(case, k):
    key = f"{case.name}-{k}"
    marks = [pytest.mark.xfail(strict=True, reason=NAME_MISMATCHES[key])] if key in NAME_MISMATCHES else []
    return pytest.param(case, k, id=key, marks=marks)


PARAMS = [_param(c, k) for c in CASES if c.torch_fn is not None and c.name not in STAND_INS
          for k in range(len(c.shapes))]


def torch_names(node):
    """torch's name of a node both ways: ``name()`` (C++ nodes carry a namespace: torch::autograd::CopySlices) and
    the Python type's."""
    return {node.name(), type(node).__name__}


@pytest.mark.parametrize("case, k", PARAMS)
def test_node_name_matches_torch(case, k, torch):
    arrays = case_inputs(case, case.shapes[k])
    ours = case.fn(*[gpugrad.tensor(a, requires_grad=True) for a in arrays])
    theirs = case.torch_fn(*[torch.tensor(a, requires_grad=True) for a in arrays])
    assert ours.grad_fn.name() in torch_names(theirs.grad_fn), \
        f"{case.name}: gpugrad records {ours.grad_fn.name()}, torch {type(theirs.grad_fn).__name__}"


def test_mismatch_lists_name_real_rows():
    rows = {f"{c.name}-{k}" for c in CASES if c.torch_fn is not None for k in range(len(c.shapes))}
    assert not set(NAME_MISMATCHES) - rows, f"stale entries: {sorted(set(NAME_MISMATCHES) - rows)}"
    assert not set(STAND_INS) - {c.name for c in CASES}, f"stale entries: {sorted(set(STAND_INS) - {c.name for c in CASES})}"


def test_dropout_node_name_matches_torch(torch):
    """F.dropout itself (random masks: names only)."""
    x, tx = gpugrad.ones(3, 4, requires_grad=True), torch.ones(3, 4, requires_grad=True)
    assert gpugrad.nn.functional.dropout(x, 0.3).grad_fn.name() in \
        torch_names(torch.nn.functional.dropout(tx, 0.3).grad_fn)


# (expression over lib and b, reason if gpugrad differs)
EDGE_CASES = [
    ("b.sin() * 2", None), ("b.sin() * b", None), ("b.sin() + 1", None), ("b.sin() + b.cos()", None),
    ("b.sin() - b", None), ("b.sin() - 2", None), ("b.sin() / 2", None), ("b.sin() / b", None),
    ("b.sin() @ b", None), ("b.sin().maximum(b)", None), ("-b.sin()", None), ("lib.cat([b.sin(), b], 0)", None),
    ("lib.stack([b, b.sin()])", None), ("b.sin() * lib.tensor(np.array([1.0, 2.0]))", None),
    ("lib.where(lib.tensor(np.array([True, False])), b.sin(), b)", None),
    ("2 * b.sin()", None), ("1 + b.sin()", None), ("2 / b.sin()", None), ("b ** 2", None), ("2 ** b", None),
    ("b ** b.sin()", None), ("b.sin().clamp(0, 1)", None), ("b.sin() % 2", None),
    ("2 - b.sin()", "torch records RsubBackward1 with the tensor's edge only; gpugrad names the node RsubBackward1 "
                    "but keeps the number's edge ((None, 0), (SinBackward0, 0)): Sub is a linear op, whose inputs "
                    "Transposed fills by position"),
]


def _graph(lib, expr):
    b = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
    node = eval(expr, {"lib": lib, "b": b, "np": np}).grad_fn
    edges = [(None if f is None else f.name() if lib is gpugrad else type(f).__name__, i)
             for f, i in node.next_functions]
    return node.name() if lib is gpugrad else type(node).__name__, edges


@pytest.mark.parametrize("expr", [pytest.param(e, id=e, marks=[pytest.mark.xfail(strict=True, reason=r)] if r else [])
                                  for e, r in EDGE_CASES])
def test_next_functions_match_torch(expr, torch):
    assert _graph(gpugrad, expr) == _graph(torch, expr)
