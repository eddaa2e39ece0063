"""``gpugrad.autocast``: torch's autocast context manager and decorator, and its state functions
(``is_autocast_enabled``, ``get_autocast_dtype``, ...). The casting itself is ``core/autocast.py``."""
from __future__ import annotations

import functools
import warnings

from gpugrad.core import autocast as _ac
from gpugrad.dtypes import as_dtype


class autocast:  # noqa: N801 - torch's name
    """Run the ops of a block (or of a decorated function) in mixed precision on ``device_type`` ("cpu" or "cuda"):
    matrix products in ``dtype`` (float16 on CUDA, bfloat16 on the CPU by default), precision-sensitive ops
    (losses, and on CUDA softmax, exp, log, sums, layer norm) in float32, as torch's op lists say.

    >>> with gpugrad.autocast("cpu", dtype=gpugrad.bfloat16):
    ...     y = model(x)                      # linear layers in bfloat16
    >>> y.dtype, model[0].weight.grad is None   # weights stay float32
    (gpugrad.bfloat16, True)
    """

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = _ac.check_device(device_type)
        self.fast_dtype = _ac.STATE.dtypes[self.device] if dtype is None else as_dtype(dtype).dtype
        self._enabled = bool(enabled)
        self._cache_enabled = _ac.STATE.cache_enabled if cache_enabled is None else bool(cache_enabled)
        if self._enabled and self.fast_dtype not in _ac.SUPPORTED[self.device]:
            names = ", ".join(str(as_dtype(d)) for d in _ac.SUPPORTED[self.device])
            warnings.warn(f"In {self.device.upper()} autocast, but the target dtype {as_dtype(self.fast_dtype)} is "
                          f"not supported. Disabling autocast.\n{self.device.upper()} Autocast only supports dtypes "
                          f"of {names} currently.")
            self._enabled = False

    def __enter__(self):
        st = _ac.STATE
        self._prev = (st.devices[self.device], st.dtypes[self.device], st.cache_enabled)
        st.devices[self.device], st.dtypes[self.device] = self._enabled, self.fast_dtype
        st.cache_enabled = self._cache_enabled
        st.nesting += 1
        st.refresh()
        return self

    def __exit__(self, *exc):
        st = _ac.STATE
        st.nesting -= 1
        if st.nesting == 0:  # the weights' casts live as long as the outermost block, as torch's cache
            st.cache.clear()
        st.devices[self.device], st.dtypes[self.device], st.cache_enabled = self._prev
        st.refresh()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorated(*args, **kwargs):
            with autocast(self.device, dtype=self.fast_dtype, enabled=self._enabled,
                          cache_enabled=self._cache_enabled):
                return func(*args, **kwargs)
        return decorated


def _legacy(device, default_dtype):
    class legacy_autocast(autocast):  # noqa: N801 - torch.cuda.amp.autocast / torch.cpu.amp.autocast
        def __init__(self, enabled=True, dtype=default_dtype, cache_enabled=True):
            warnings.warn(f"`gpugrad.{device}.amp.autocast(args...)` is deprecated. Please use "
                          f"`gpugrad.amp.autocast('{device}', args...)` instead.", FutureWarning, stacklevel=2)
            super().__init__(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    legacy_autocast.__name__ = legacy_autocast.__qualname__ = "autocast"
    return legacy_autocast


def is_autocast_enabled(device_type="cuda"):
    """Whether autocast is on for ``device_type`` (torch's default is CUDA's state)."""
    return _ac.STATE.devices[_ac.check_device(device_type)]


def set_autocast_enabled(device_type, enabled):
    _ac.STATE.devices[_ac.check_device(device_type)] = bool(enabled)
    _ac.STATE.refresh()


def get_autocast_dtype(device_type):
    return as_dtype(_ac.STATE.dtypes[_ac.check_device(device_type)])


def set_autocast_dtype(device_type, dtype):
    _ac.STATE.dtypes[_ac.check_device(device_type)] = as_dtype(dtype).dtype


def is_autocast_cache_enabled():
    return _ac.STATE.cache_enabled


def set_autocast_cache_enabled(enabled):
    _ac.STATE.cache_enabled = bool(enabled)


def clear_autocast_cache():
    _ac.STATE.cache.clear()


def is_autocast_available(device_type):
    return device_type in _ac.STATE.devices
