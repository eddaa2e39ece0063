"""New tensors with this one's dtype and device (torch's ``new_*``), and random fills in place."""
from __future__ import annotations

from gpugrad import creation
from gpugrad.backend import on
from gpugrad.core.tensor import make


class CreationMethods:
    __slots__ = ()

    def _new_like(self, fn, *args, dtype=None, device=None, **kw):
        return fn(*args, dtype=self.dtype if dtype is None else dtype, device=device or self.device, **kw)

    def new_zeros(self, *size, **kw): return self._new_like(creation.zeros, *size, **kw)
    def new_ones(self, *size, **kw): return self._new_like(creation.ones, *size, **kw)
    def new_empty(self, *size, **kw): return self._new_like(creation.empty, *size, **kw)
    def new_full(self, size, fill_value, **kw): return self._new_like(creation.full, size, fill_value, **kw)
    def new_tensor(self, data, **kw): return self._new_like(creation.tensor, data, **kw)

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        return self._random_fill("standard_normal", generator, lambda z: z * std + mean)

    def uniform_(self, a=0.0, b=1.0, *, generator=None):
        """Uniform draws in [a, b) (torch's ``from`` and ``to``)."""
        return self._random_fill("random", generator, lambda u: u * (b - a) + a)

    def _random_fill(self, draw, generator, scale):
        d = creation.floating(self.dtype, draw)
        with on(self._backend):
            z = scale(creation.draw(draw, self._backend, generator, self._data.shape, d)).astype(d, copy=False)
        return self.copy_(make(z, self._backend))
