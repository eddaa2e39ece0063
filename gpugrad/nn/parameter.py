"""``Parameter``: a leaf Tensor that a Module registers as one of its trainable weights."""
from __future__ import annotations

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of
from gpugrad.core.tensor import init, make, to_array


class Parameter(Tensor):
    """A Tensor that, assigned to a Module attribute, is registered in ``module.parameters()``.

    Wraps ``data`` without copying when it is a Tensor or an array (as torch does), so
    ``Parameter(t)`` shares memory with ``t``; other array-likes are converted like ``gpugrad.tensor``.

    >>> w = nn.Parameter(gpugrad.zeros(2, 3))
    >>> w.requires_grad, w.is_leaf
    (True, True)
    """

    __slots__ = ()  # Tensor is slotted: an empty __slots__ keeps Parameter as small as a Tensor

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = np.empty((0,), np.float32)
        if isinstance(data, Tensor):
            array, be = data._data, data._backend
        else:
            try:
                array, be = data, backend_of(data)  # an ndarray / CuPy array: share it
            except TypeError:
                array, be = to_array(data)  # lists, scalars: convert as gpugrad.tensor does (a fresh buffer)
        init(self, array, be)
        if requires_grad:
            self.requires_grad_(True)

    def __deepcopy__(self, memo):
        # NOTE: Tensor has no pickling support (its backend holds the array module), so copy.deepcopy(model)
        # needs this: fresh buffers, same device, dtype, requires_grad and gradient values.
        new = Parameter(self._data.copy(), self._requires_grad)
        if self._grad is not None:
            new._grad = make(self._grad._data.copy(), self._backend)
        memo[id(self)] = new
        return new

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)
