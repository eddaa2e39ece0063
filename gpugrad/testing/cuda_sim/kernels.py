"""``cupy.RawModule``, ``RawKernel`` and ``ElementwiseKernel`` on the simulated device: the exact CUDA source runs
on the CPU emulator (``gpugrad.testing.cuda_emu``), launched with CuPy's calling conventions.

What a real GPU would get silently wrong is an error here: a raw kernel handed a non-contiguous array (CuPy passes
the bare pointer, so the kernel would read the wrong elements), an array on another device, or host memory.
"""
from __future__ import annotations

import numpy as np

from gpugrad.testing.cuda_sim import _state
from gpugrad.testing.cuda_sim.array import make, ndarray, new, unwrap
from gpugrad.testing.cuda_sim.cuda import CompileException


def _emu_runtime(code, options):
    from gpugrad.testing.cuda_emu import EmuRuntime

    include_dirs = [o[2:] for o in options if o.startswith("-I")]
    rest = [o for o in options if not o.startswith("-I")]
    return EmuRuntime(source_for_family=lambda _family: code, include_dirs=include_dirs, options=rest)


def _compiled(build, what):
    from gpugrad.testing.cuda_emu import EmulationError

    try:
        return build()
    except EmulationError as e:
        if str(e).startswith("g++ failed"):
            raise CompileException(f"{what} failed to compile (gpugrad cuda_sim, g++ under the emulator):\n{e}") \
                from e
        raise


def _kernel_arg(name, i, a):
    if type(a) is ndarray:
        host = unwrap(a)  # checks the device
        if not host.flags.c_contiguous:
            raise ValueError(f"{name}: argument {i} is a non-contiguous array (shape {a.shape}, strides "
                             f"{a.strides}); a raw kernel gets only its pointer and would read the wrong elements "
                             "on a GPU. Pass cupy.ascontiguousarray(...)")
        return host
    if isinstance(a, np.ndarray):
        raise TypeError(f"{name}: argument {i}: Unsupported type {type(a)} (host memory passed to a kernel)")
    return a


class RawKernel:
    """One kernel of a module: ``k(grid, block, args, shared_mem=0)``, run synchronously by the emulator."""

    def __init__(self, code, name, options=(), backend="nvrtc", translate_cucomplex=False, *,
                 enable_cooperative_groups=False, jitify=None, _module=None):
        self.code, self.name, self.options = code, name, tuple(options)
        self._module = _module or RawModule(code=code, options=options)
        self._fn = None

    def _function(self):
        if self._fn is None:
            rt = self._module._rt
            self._fn = _compiled(lambda: rt.raw_kernel("module", self.name), f"kernel {self.name}")
        return self._fn

    def compile(self, log_stream=None):
        self._function()

    def __call__(self, grid, block, args, *, shared_mem=0, enable_cooperative_groups=False):
        if not isinstance(args, tuple):
            raise TypeError(f"{self.name}: args must be a tuple, got {type(args).__name__}")
        fn = self._function()
        hosts = tuple(_kernel_arg(self.name, i, a) for i, a in enumerate(args))
        _state.run(self.name, lambda: fn(grid, block, hosts, shared_mem=shared_mem))


class RawModule:
    """cupy.RawModule(code=..., options=..., name_expressions=...): compiled (by g++) at first ``get_function``."""

    def __init__(self, code=None, *, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=None):
        if (code is None) == (path is None):
            raise TypeError("One of `code` and `path` should be given.")
        if path is not None:
            with open(path) as f:
                code = f.read()
        self.code, self.options = code, tuple(options)
        self.name_expressions = None if name_expressions is None else tuple(name_expressions)
        self._rt = _emu_runtime(code, self.options)
        self._kernels = {}

    def get_function(self, name):
        if "<" in name and (self.name_expressions is None or name not in self.name_expressions):
            raise KeyError(f"{name!r}: a template kernel must be one of the module's name_expressions "
                           f"{self.name_expressions}")
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = RawKernel(self.code, name, self.options, _module=self)
            k.compile()
        return k


class ElementwiseKernel:
    """cupy.ElementwiseKernel over the emulator: inputs broadcast, outputs allocated on the current device (or
    written into the given ones), type placeholders bound from the arguments as CuPy binds them."""

    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True, preamble="",
                 no_return=False, return_tuple=False, **kwargs):
        unknown = set(kwargs) - {"options", "loop_prep", "after_loop"}
        if unknown:
            raise TypeError(f"ElementwiseKernel() got unexpected keyword arguments {sorted(unknown)}")
        if kwargs.get("loop_prep") or kwargs.get("after_loop"):
            raise NotImplementedError("gpugrad cuda_sim: loop_prep/after_loop are not simulated")
        self.in_params, self.out_params, self.operation, self.name = in_params, out_params, operation, name
        self.no_return, self.return_tuple = no_return, return_tuple
        self._rt = _emu_runtime(preamble, tuple(kwargs.get("options", ())))
        self._emu = self._rt.elementwise("elementwise", in_params, out_params, operation, name)
        self.nin, self.nout = len(self._emu.ins), len(self._emu.outs)

    def __call__(self, *args, size=None, block_size=None):
        if size is not None:
            raise NotImplementedError("gpugrad cuda_sim: ElementwiseKernel(size=) is not simulated")
        if len(args) not in (self.nin, self.nin + self.nout):
            raise TypeError(f"Wrong number of arguments for {self.name!r}")
        hosts = []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                raise TypeError(f"{self.name}: argument {i}: Unsupported type {type(a)}")
            hosts.append(unwrap(a))
        given = args[self.nin:]
        if given:  # writes into the caller's arrays: run now, or record under capture
            _state.run(self.name, lambda: _compiled(lambda: self._emu(*hosts), f"elementwise kernel {self.name}"))
            out = tuple(given)
        else:
            result = _compiled(lambda: self._emu(*hosts), f"elementwise kernel {self.name}")
            fresh = list(result) if self.nout > 1 else [result]
            out = tuple(new(r, self.name) for r in fresh)
            _state.launch(self.name, replay=lambda: self._emu(*hosts, *fresh), outputs=fresh)
        if self.no_return:
            return None
        return out if (self.nout > 1 or self.return_tuple) else out[0]


__all__ = ["RawModule", "RawKernel", "ElementwiseKernel", "make"]
