"""Values and gradients against PyTorch, for every op case that names its torch equivalent (skipped without torch)."""
from __future__ import annotations

import numpy as np
import pytest

import gpugrad
from tests.op_cases import CASES, case_inputs

PARAMS = [(c, i) for c in CASES if c.torch_fn for i in range(len(c.shapes))]


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
