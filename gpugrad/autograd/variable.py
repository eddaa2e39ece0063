"""``torch.autograd.Variable``, the pre-0.4 wrapper: calling it gives a Tensor, and every Tensor is an instance."""
from __future__ import annotations

from gpugrad._tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(t, requires_grad=False)``: ``t`` without its history (sharing memory and version), requiring grad
    or not, as torch's legacy constructor; ``Variable()`` is an empty tensor."""

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if data is None:
            return Tensor([]).requires_grad_(requires_grad)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return data.detach().requires_grad_(requires_grad)
