"""Moving a tensor between dtypes and devices (differentiably), and its layout."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import get_backend
from gpugrad.backend.deferred import raise_pending
from gpugrad.core.names import TYPE_NAMES as _TYPE_NAMES
from gpugrad.core.tensor import TensorBase
from gpugrad.dtypes import BF16, as_dtype, is_dtype
from gpugrad.ops.convert import Cast, Copy, ToDevice


class ConversionMethods:
    __slots__ = ()

    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
        """Copy to another device and/or dtype (differentiable), as torch: ``to(dtype)``, ``to(device, dtype)``,
        ``to(other)`` (other's device and dtype). Returns self when nothing changes, unless ``copy=True``."""
        for a in args:
            if isinstance(a, TensorBase):
                device, dtype = a.device, a.dtype
            elif is_dtype(a):
                dtype = a
            elif not isinstance(a, bool):  # a positional non_blocking
                device = a
        out = self
        if dtype is not None and as_dtype(dtype) != self._data.dtype:
            out = Cast.apply(out, dtype=as_dtype(dtype).dtype)
        if device is not None:
            be = get_backend(device)
            if be is not out._backend:
                if be.name == "cpu":
                    raise_pending(out._backend, "copying a tensor to the CPU (Tensor.cpu(), .to('cpu'))")
                out = ToDevice.apply(out, source=out._backend, target=be)
        return out.clone() if copy and out is self else out

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device))

    def float(self):
        return self.to(dtype=np.float32)

    def double(self):
        return self.to(dtype=np.float64)

    def half(self):
        return self.to(dtype=np.float16)

    def bfloat16(self):
        return self.to(dtype=BF16)

    def long(self):
        return self.to(dtype=np.int64)

    def int(self):
        return self.to(dtype=np.int32)

    def short(self):
        return self.to(dtype=np.int16)

    def char(self):
        return self.to(dtype=np.int8)

    def byte(self):
        return self.to(dtype=np.uint8)

    def bool(self):
        return self.to(dtype=np.bool_)

    def type_as(self, other):
        return self.to(dtype=other.dtype)

    def contiguous(self, memory_format=None):
        """Self if its memory is C-ordered, else a C-ordered copy (differentiable)."""
        return self if self.is_contiguous() else Copy.apply(self, order="C")

    def type(self, dtype=None):
        """``type()``: the legacy type name (``gpugrad.FloatTensor``, ``gpugrad.cuda.LongTensor``); ``type(dtype)``:
        a cast."""
        if dtype is None:
            name = _TYPE_NAMES.get(self._data.dtype.name, "Unknown")
            return f"gpugrad.{'cuda.' if self.is_cuda else ''}{name}Tensor"
        return self.to(dtype=dtype)

    astype = type
