"""The runtime every launch goes through: :class:`CupyRuntime` on a GPU (and on the simulated device), or what
:func:`use_runtime` installs (the CPU emulator in tests). See the package docstring for the protocol."""
from __future__ import annotations

import contextlib
import contextvars

from gpugrad.backend.kernels.names import NAME_EXPRESSIONS
from gpugrad.backend.kernels.sources import OPTIONS, source


class CupyRuntime:
    """The real GPU path: RawModules memoized per (family, device), ElementwiseKernels per spec (CuPy caches
    their binaries per device and dtype itself)."""

    def __init__(self):
        from gpugrad.backend.cuda import cupy_module  # lazy: only a CUDA launch gets here

        self.cupy = self.xp = cupy_module()  # CuPy, or the simulated device under GPUGRAD_CUDA_SIM
        self._modules, self._functions, self._elementwise = {}, {}, {}

    def raw_kernel(self, family, name_expr):
        dev = self.cupy.cuda.Device().id
        fn = self._functions.get((family, name_expr, dev))
        if fn is None:
            mod = self._modules.get((family, dev))
            if mod is None:
                mod = self._modules[family, dev] = self.cupy.RawModule(
                    code=source(family), options=OPTIONS, name_expressions=NAME_EXPRESSIONS[family])
            fn = self._functions[family, name_expr, dev] = mod.get_function(name_expr)
        return fn

    def elementwise(self, family, in_params, out_params, operation, name):
        key = (family, in_params, out_params, operation, name)
        k = self._elementwise.get(key)
        if k is None:
            k = self._elementwise[key] = self.cupy.ElementwiseKernel(
                in_params, out_params, operation, name, preamble=source(family), options=OPTIONS)
        return k

    def empty(self, shape, dtype):
        return self.cupy.empty(shape, dtype)

    def zeros(self, shape, dtype):
        return self.cupy.zeros(shape, dtype)

    def ascontiguousarray(self, a):
        return self.cupy.ascontiguousarray(a)


_default_runtime = None
_runtime_override: contextvars.ContextVar = contextvars.ContextVar("gpugrad_kernel_runtime", default=None)


def runtime():
    """The runtime launchers use: the innermost :func:`use_runtime`, else the (lazily built) CupyRuntime."""
    global _default_runtime
    rt = _runtime_override.get()
    if rt is not None:
        return rt
    if _default_runtime is None:
        _default_runtime = CupyRuntime()
    return _default_runtime


@contextlib.contextmanager
def use_runtime(rt):
    token = _runtime_override.set(rt)
    try:
        yield rt
    finally:
        _runtime_override.reset(token)
