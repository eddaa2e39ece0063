"""Views and indexing: ``view``, ``flatten``, ``transpose``/``T``/``mT``/``t``, ``expand_as``, ``x[key]``."""
from __future__ import annotations

from gpugrad.core.args import basic_key, check_index_shapes, index_key
from gpugrad.core.views import mark_view
from gpugrad.ops.movement import Index


class MovementMethods:
    __slots__ = ()

    def view(self, *shape):
        """Same memory, new shape: never copies.  Raises (as torch) where the strides do not allow it, e.g. a
        transposed tensor flattened; ``reshape`` copies then."""
        out = self.reshape(*shape)
        if out._base is None and self._data.size:  # reshape had to copy
            raise RuntimeError(f"view size is not compatible with input tensor's size and stride: shape {out.shape} "
                               f"cannot view a tensor of shape {self.shape} and strides {self._data.strides} (at least "
                               "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
        return out

    def view_as(self, other):
        return self.view(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, size):
        return self.expand(size)

    @property
    def T(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def take_along_axis(self, index, axis):
        return self.gather(axis, index)

    def __getitem__(self, key):
        key = index_key(key, self)
        if not basic_key(key):
            check_index_shapes(key)
            return Index.apply(self, key=key)
        keys, lone = (key if isinstance(key, tuple) else (key,)), isinstance(key, slice)
        if Ellipsis not in keys:
            key = keys + (Ellipsis,)  # x[0] of a 1-D array is a scalar copy; x[0, ...] is a 0-d view
        return mark_view(Index.apply(self, key=key, lone_slice=lone), self, lambda a: a[key])
