"""``gpugrad.compile``: torch.compile's signature, accepted and given back unchanged.

gpugrad runs eagerly, op by op; it has no graph compiler. ``gpugrad.compile(model)`` (or ``fn``, or as a decorator
with or without arguments) returns what it was given, so scripts that compile their model run as they are. To cut
the per-step launch overhead on a GPU, capture the step with ``gpugrad.cuda.graph`` instead (see the README).
"""
from __future__ import annotations


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
            disable=False, **kwargs):
    """``model`` itself (a Module or a function): gpugrad executes eagerly. Called without a model, a decorator."""
    if model is None:
        return lambda fn: compile(fn)
    if not callable(model):  # torch's check and error type
        raise AssertionError(f"A callable function is expected, but {type(model)} is provided.")  # noqa: TRY004
    return model
