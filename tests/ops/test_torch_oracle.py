"""Values and gradients against PyTorch, for every op case that names its torch equivalent (skipped without torch).

Every row of the op table names one (``torch_fn``) but those listed in NO_TORCH, with the reason; where torch has
no such op (gpugrad's fused bias_act and token_logprob, dropout with given randoms) the equivalent is torch's
unfused composition, still an independent value.  Without torch, tests/ops/test_closed_forms.py is the oracle.
"""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from gpugrad.ops import REGISTRY
from tests.op_cases import CASES, case_inputs

PARAMS = [(c, i) for c in CASES if c.torch_fn for i in range(len(c.shapes))]
# rows without a torch equivalent, and why
NO_TORCH = {
    "floordiv_op": "torch's a // b (floor_divide) has no derivative: its backward raises; gpugrad gives 0, as "
                   "torch's div(rounding_mode='floor'), whose row (floor_divide) is compared",
}


def test_every_row_names_its_torch_equivalent():
    missing = sorted(c.name for c in CASES if c.torch_fn is None and c.name not in NO_TORCH)
    assert not missing, f"op-table rows without a torch_fn (add one, or list the row in NO_TORCH with why): {missing}"
    stale = sorted(n for n in NO_TORCH if n not in {c.name for c in CASES if c.torch_fn is None})
    assert not stale, f"NO_TORCH lists rows that have a torch_fn or do not exist: {stale}"


def test_every_registered_op_is_compared_to_torch():
    compared = {c.op for c in CASES if c.torch_fn is not None}
    assert set(REGISTRY) <= compared, f"registered ops no row compares to torch: {sorted(set(REGISTRY) - compared)}"


@pytest.mark.parametrize("case,k", PARAMS, ids=[f"{c.name}-{i}" for c, i in PARAMS])
def test_matches_torch(case, k, torch):
    arrays = case_inputs(case, case.shapes[k])
    ours = [gpugrad.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = case.fn(*ours), case.torch_fn(*theirs)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    u = np.random.default_rng(1).standard_normal(ty.shape)
    y.backward(gpugrad.tensor(u))
    ty.backward(torch.tensor(u))
    for a, b in zip(ours, theirs):
        want = b.grad.numpy() if b.grad is not None else np.zeros(b.shape)
        np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-10, atol=1e-12)
