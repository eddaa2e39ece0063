"""The runtime every launch goes through: :class:`CupyRuntime` on a GPU (and on the simulated device), or what
:func:`use_runtime` installs (the CPU emulator in tests). See the package docstring for the protocol."""
from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import os

from gpugrad.backend.cuda import cupy_module
from gpugrad.backend.kernels.names import NAME_EXPRESSIONS, instantiations
from gpugrad.backend.kernels.sources import OPTIONS, source

_LISTED = {family: frozenset(names) for family, names in NAME_EXPRESSIONS.items()}


class CupyRuntime:
    """The real GPU path: one RawModule per kernel instantiation and device, built at its first launch (or by
    :meth:`warm`), and ElementwiseKernels per spec (CuPy caches their binaries per device and dtype itself).

    NOTE: one RawModule per instantiation, not per family: NVRTC compiles every name expression a module lists, so
    the whole optim.cu cost 51 s of CPU cold where an SGD step launches one instantiation of 2.4 s (README, "Cold
    compiles").
    CuPy 14.2 keys its disk cache on the name expressions too (cupy/cuda/compiler.py, _compile_with_cache_cuda:
    ``key_src += '\\0'.join(sorted(name_expressions))``), so each instantiation is cached on its own."""

    def __init__(self):
        self.cupy = self.xp = cupy_module()  # CuPy, or the simulated device under GPUGRAD_CUDA_SIM
        self._functions, self._elementwise = {}, {}

    def raw_kernel(self, family, name_expr):
        dev = self.cupy.cuda.Device().id
        fn = self._functions.get((family, name_expr, dev))
        if fn is None:
            fn = self._functions[family, name_expr, dev] = self._build(family, name_expr)
        return fn

    def _build(self, family, name_expr):
        """The compiled (or disk-cached) and loaded kernel, on the current device."""
        if name_expr not in _LISTED.get(family, ()):
            raise KeyError(f"{family}:{name_expr} is not in kernels.NAME_EXPRESSIONS[{family!r}]: add the "
                           "instantiation there (the NVRTC check compiles that list)")
        mod = self.cupy.RawModule(code=source(family), options=OPTIONS, name_expressions=(name_expr,))
        return mod.get_function(name_expr)  # CuPy compiles and loads the module here

    def warm(self, pairs, workers=None):
        """Build the raw kernels ``pairs`` ((family, name expression), ...) not built yet on the current device,
        ``workers`` at a time (default: one per CPU, at most 16); returns how many were built.
        NOTE: threads help because CuPy 14.2 releases the GIL around the compile itself
        (cupy_backends/cuda/libs/nvrtc.pyx, compileProgram: ``with nogil: nvrtcCompileProgram``), its kernel memo
        keeps one result per key (cupy/_util.pyx memoize: ``m.setdefault``) and its disk cache writes a temporary
        file and renames it (cupy/cuda/_compiler_cache.py, save: ``os.replace``). NVRTC itself is thread-safe
        per CUDA's NVRTC guide (to confirm on a GPU: only the CPU-side compile has been run in threads here)."""
        dev = self.cupy.cuda.Device().id
        todo = [p for p in dict.fromkeys(pairs) if (*p, dev) not in self._functions]
        if not todo:
            return 0

        def build(pair):
            with self.cupy.cuda.Device(dev):  # a fresh thread's current device is 0 (CUDA's is per thread)
                return self._build(*pair)

        with concurrent.futures.ThreadPoolExecutor(workers or min(16, os.cpu_count() or 1, len(todo))) as pool:
            for pair, fn in zip(todo, pool.map(build, todo)):
                self._functions[(*pair, dev)] = fn
        return len(todo)

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


def warm_up(launchers=None, dtypes=("float32",), workers=None):
    """Compile the raw kernels that ``launchers`` (names of kernel launchers; every one when None) can launch on
    ``dtypes``, in parallel on ``workers`` threads, for the current device, so that the first step does not compile
    them one after another; returns how many were built. A runtime without ``warm`` (the emulator) builds them in
    turn. Compiled kernels land in CuPy's disk cache (CUPY_CACHE_DIR), where later processes find them."""
    rt = runtime()
    pairs = instantiations(launchers, dtypes)
    if hasattr(rt, "warm"):
        return rt.warm(pairs, workers)
    for pair in pairs:
        rt.raw_kernel(*pair)
    return len(pairs)
