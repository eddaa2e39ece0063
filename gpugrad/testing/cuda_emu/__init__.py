"""Run the exact source of ``kernels/*.cu`` on the CPU: g++ compiles it against ``cuda_emu.h`` and each CUDA
thread becomes a fiber (see runtime.cpp), launched from Python over NumPy arrays.

    mod = EmuModule(source, ["softmax_fwd<float>"], include_dirs=[kernel_dir])
    mod.get_function("softmax_fwd<float>")(grid=(rows,), block=(256,), args=(x, y, cols), schedule="reverse")

Divergent barriers, divergent warp ops and deadlocks raise EmulationError naming kernel, block and threads;
running under the "forward", "reverse" and "random" schedules makes missing barriers show as wrong results.
Those keep all warps of a block in lock-step (every warp op is a rendezvous); "warp-serial", "warp-reverse" and
"warp-random" run one warp at a time up to the next block barrier, so races between warps (a __shared__ buffer
reused by a second block reduction without a barrier between) show too (see runtime.cpp).
EmuRuntime mimics the slice of CuPy that the kernel launchers use (RawModule kernels, ElementwiseKernel).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["EmuModule", "EmuFunction", "EmuRuntime", "EmulationError", "compiler_available"]

_HERE = Path(__file__).resolve().parent
_HEADER = _HERE / "cuda_emu.h"
_RUNTIME_SRC = _HERE / "runtime.cpp"
# -O2 costs ~40% more compile time for no test-visible gain. Stack-clash protection probes every page of a big
# frame, so a kernel with large local arrays hits its fiber's guard page instead of a neighbour fiber's stack.
_FLAGS = ("-O1", "-fPIC", "-shared", "-pthread", "-fstack-clash-protection")
# Thread order within a block (and block order): ascending, descending, seeded shuffle; the warp-* variants use
# the same order per warp and run each warp alone until it reaches a block barrier (runtime.cpp decodes % 3, >= 3).
_SCHEDULES = {"forward": 0, "reverse": 1, "random": 2, "warp-serial": 3, "warp-reverse": 4, "warp-random": 5}
# nvcc/NVRTC-only options that mean nothing to g++ (CuPy launchers may pass them through).
_DEVICE_ONLY_OPTIONS = ("-arch", "--gpu-architecture", "-use_fast_math", "--use_fast_math", "--fmad", "-lineinfo",
                        "--generate-line-info", "-G", "--device-debug", "-rdc", "--relocatable-device-code",
                        "-dopt", "--extra-device-vectorization", "-default-device", "--dlink-time-opt", "-dlto")


class EmulationError(RuntimeError):
    """A kernel failed to compile or to run correctly under emulation (message from g++ or the scheduler)."""


def compiler_available() -> bool:
    return shutil.which(_cxx()) is not None


def _cxx() -> str:
    return os.environ.get("GPUGRAD_EMU_CXX", "g++")


def _cache_dir() -> Path:
    d = Path(os.environ.get("GPUGRAD_EMU_CACHE") or Path.home() / ".cache" / "gpugrad" / "emu")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def _run_compiler(cmd: list[str]) -> None:
    """The only place g++ runs (tests count calls through it)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise EmulationError(f"g++ failed (exit {r.returncode}):\n{r.stderr}\ncommand: {' '.join(cmd)}")


_lock = threading.Lock()
_compiler_id: str | None = None
_runtime: tuple[Path, ctypes.CDLL] | None = None
_modules: dict[str, ctypes.CDLL] = {}  # in-process memo; the on-disk cache is keyed the same way


def _compiler_version() -> str:
    global _compiler_id
    if _compiler_id is None:
        r = subprocess.run([_cxx(), "--version"], capture_output=True, text=True)
        _compiler_id = _cxx() + "\n" + r.stdout
    return _compiler_id


def _publish(tmp: Path, built: Path, final: Path) -> None:
    # os.replace is atomic, so concurrent test processes never load a half-written library.
    os.replace(built, final)
    shutil.rmtree(tmp, ignore_errors=True)


def _load_runtime() -> tuple[Path, ctypes.CDLL]:
    """libggemu-<hash>.so: fibers and scheduler, shared by every kernel module; compiled once per cache."""
    global _runtime
    with _lock:
        if _runtime is None:
            key = _sha(_RUNTIME_SRC.read_text(), _HEADER.read_text(), _compiler_version())[:16]
            path = _cache_dir() / f"libggemu-{key}.so"
            if not path.exists():
                tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix="build-"))
                out = tmp / path.name
                _run_compiler([_cxx(), "-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", str(_RUNTIME_SRC),
                               f"-Wl,-soname,{path.name}", "-o", str(out)])
                _publish(tmp, out, path)
            # RTLD_GLOBAL: kernel modules find gg_emu::run_grid and the TLS variables in this copy.
            _runtime = (path, ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL))
        return _runtime


def _std_and_options(options: Iterable[str]) -> list[str]:
    std, out = "-std=c++17", []
    for o in options:
        if o.startswith(("-std=", "--std=")):
            v = o.split("=", 1)[1]
            if v not in ("c++03", "c++11", "c++14"):  # the header itself needs C++17
                std = "-std=" + v
        elif not o.startswith(_DEVICE_ONLY_OPTIONS):
            out.append(o)
    return [std, *out]


def _launcher_code(names: Sequence[str]) -> str:
    lines = ['\n#line 1 "<cuda_emu launchers>"']
    for i, n in enumerate(names):
        lit = json.dumps(n)  # a valid C string literal for the characters a name expression can hold
        lines.append(f'extern "C" int gg_emu_launch_{i}(const int64_t* cfg, void** slots, const int* tags, int n, '
                     f'char* err, int errlen) {{ return ::gg_emu::launch(&({n}), {lit}, cfg, slots, tags, n, err, '
                     f'errlen); }}')
    return "\n".join(lines) + "\n"


def _parse_deps(text: str) -> list[str]:
    text = text.replace("\\\n", " ")
    toks = re.split(r"(?<!\\)\s+", text.split(":", 1)[1] if ":" in text else "")
    return [t.replace("\\ ", " ") for t in toks if t]


def _file_sha(path: str) -> str | None:
    try:
        return _sha(Path(path).read_bytes())
    except OSError:
        return None


def _build_module(source: str, names: Sequence[str], include_dirs: Sequence[str], options: Sequence[str],
                  source_name: str) -> ctypes.CDLL:
    rt_path, _ = _load_runtime()
    incs = [str(Path(d).resolve()) for d in include_dirs]
    opts = _std_and_options(options)
    key = _sha(source, json.dumps(list(names)), _HEADER.read_text(), rt_path.name, json.dumps(incs),
               json.dumps(opts), source_name, json.dumps(_FLAGS))[:24]
    with _lock:
        if key in _modules:
            return _modules[key]
    cache = _cache_dir()
    index = cache / f"mod-{key}.json"
    # The key covers the source text; headers it includes (common.cuh) are checked by content on every lookup.
    try:
        meta = json.loads(index.read_text())
        if (cache / meta["so"]).exists() and all(_file_sha(p) == h for p, h in meta["deps"].items()):
            return _remember(key, cache / meta["so"])
    except (OSError, ValueError, KeyError):
        pass
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix="build-"))
    src = tmp / source_name
    src.write_text(source + _launcher_code(names))
    out, depfile = tmp / "module.so", tmp / "module.d"
    _run_compiler([_cxx(), *opts, *_FLAGS, "-include", str(_HEADER), *(f"-I{d}" for d in incs),
                   "-MMD", "-MF", str(depfile), "-x", "c++", str(src), "-x", "none", str(rt_path),
                   f"-Wl,-rpath,{rt_path.parent}", "-o", str(out)])
    deps = {}
    for p in _parse_deps(depfile.read_text()):
        p = str(Path(p).resolve())
        if not p.startswith(str(tmp)) and p != str(_HEADER):
            deps[p] = _file_sha(p)
    # A new file name per header content: dlopen would hand back an already-loaded library of the same path.
    so = f"mod-{key}-{_sha(json.dumps(deps, sort_keys=True))[:8]}.so"
    _publish_module(tmp, out, cache / so, index, {"so": so, "deps": deps})
    return _remember(key, cache / so)


def _publish_module(tmp: Path, out: Path, so: Path, index: Path, meta: dict) -> None:
    os.replace(out, so)
    (tmp / "index.json").write_text(json.dumps(meta))
    os.replace(tmp / "index.json", index)
    shutil.rmtree(tmp, ignore_errors=True)


def _remember(key: str, so: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(so))
    with _lock:
        return _modules.setdefault(key, lib)


class EmuModule:
    """The emulated cupy.RawModule: ``source`` (a whole .cu file) compiled once per name-expression set."""

    def __init__(self, source: str, name_expressions: Sequence[str], include_dirs: Sequence[str] = (),
                 options: Sequence[str] = (), source_name: str = "kernel.cu"):
        self.name_expressions = tuple(name_expressions)
        self._lib = _build_module(source, self.name_expressions, tuple(map(str, include_dirs)), tuple(options),
                                  source_name)

    def get_function(self, name: str) -> "EmuFunction":
        try:
            i = self.name_expressions.index(name)
        except ValueError:
            raise KeyError(f"{name!r} is not one of this module's name expressions {self.name_expressions}") from None
        fn = getattr(self._lib, f"gg_emu_launch_{i}")
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        return EmuFunction(name, fn)


# Argument tags, decoded by gg_emu::decode in cuda_emu.h:
# kind | readonly << 4 | (int >= 2**63) << 5 | byte size << 8 | array element kind << 16.
_PTR, _INT, _FLOAT, _NULL = 1, 2, 3, 4
_ELEM = {"f": ord("f"), "i": ord("i"), "u": ord("i"), "b": ord("i"), "c": ord("c")}


def _pack_args(args: Sequence) -> tuple:
    n = len(args)
    slots = (ctypes.c_uint64 * max(n, 1))()
    tags = (ctypes.c_int * max(n, 1))()
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous:
                raise ValueError(f"argument {i}: array of shape {a.shape} and strides {a.strides} is not "
                                 f"C-contiguous (pass xp.ascontiguousarray(...))")
            slots[i] = a.ctypes.data
            tags[i] = _PTR | (not a.flags.writeable) << 4 | (a.dtype.itemsize & 255) << 8 | _ELEM.get(a.dtype.kind, ord("V")) << 16
        elif a is None:
            tags[i] = _NULL
        elif isinstance(a, (bool, np.bool_, int, np.integer)):
            v = int(a)
            if not -(2**63) <= v < 2**64:
                raise OverflowError(f"argument {i}: {v} does not fit 64 bits")
            slots[i] = v & (2**64 - 1)  # two's complement, as the int64 slot is read in C++
            size = 1 if isinstance(a, (bool, np.bool_)) else (a.dtype.itemsize if isinstance(a, np.integer) else 8)
            tags[i] = _INT | (v >= 2**63) << 5 | size << 8
        elif isinstance(a, (float, np.floating)):
            slots[i] = struct.unpack("<Q", struct.pack("<d", float(a)))[0]
            tags[i] = _FLOAT | (a.dtype.itemsize if isinstance(a, np.floating) else 8) << 8
        else:
            raise TypeError(f"argument {i}: unsupported kernel argument type {type(a).__name__}")
    base = ctypes.addressof(slots)
    ptrs = (ctypes.c_void_p * max(n, 1))(*[base + 8 * i for i in range(n)])
    return slots, ptrs, tags


def _dims(v, what: str) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise ValueError(f"{what} must be 1 to 3 positive sizes, got {v!r}")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))


def _default_threads() -> int:
    return int(os.environ.get("GPUGRAD_EMU_THREADS") or min(2, os.cpu_count() or 1))


class EmuFunction:
    """One kernel; calling it runs the whole grid synchronously (CuPy RawKernel call convention)."""

    def __init__(self, name: str, fn):
        self.name, self._fn = name, fn

    def __call__(self, grid, block, args, shared_mem: int = 0, schedule: str = "forward", seed: int = 0,
                 threads: int | None = None) -> None:
        if schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {list(_SCHEDULES)}, got {schedule!r}")
        args = tuple(args)
        cfg = (ctypes.c_int64 * 10)(*_dims(grid, "grid"), *_dims(block, "block"), int(shared_mem),
                                    _SCHEDULES[schedule], int(seed) & (2**63 - 1), threads or _default_threads())
        slots, ptrs, tags = _pack_args(args)
        err = ctypes.create_string_buffer(4096)
        if self._fn(cfg, ptrs, tags, len(args), err, len(err)) != 0:  # ctypes releases the GIL meanwhile
            raise EmulationError(err.value.decode(errors="replace"))


# ---- EmuRuntime: the CuPy slice the launchers use -----------------------------------------------------------
_CTYPES = {"bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
           "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int", "int64": "long long",
           "uint64": "unsigned long long", "float32": "float", "float64": "double"}
_DTYPE_CTYPE = {np.dtype(k): v for k, v in _CTYPES.items()}


def _parse_params(spec: str) -> list[tuple[str, str]]:
    out = []
    for p in spec.split(","):
        toks = p.split()
        if not toks:
            continue
        if toks[0] == "raw":
            raise NotImplementedError(f"raw parameters are not emulated: {p.strip()!r}")
        if len(toks) != 2:
            raise ValueError(f"cannot parse parameter {p.strip()!r}")
        out.append((toks[0], toks[1]))
    return out


class _Elementwise:
    """cupy.ElementwiseKernel(in_params, out_params, operation, name, preamble=source(family)) on the emulator."""

    def __init__(self, rt: "EmuRuntime", family: str, in_params: str, out_params: str, operation: str, name: str):
        self.rt, self.family, self.operation, self.name = rt, family, operation, name
        self.ins, self.outs = _parse_params(in_params), _parse_params(out_params)

    def __call__(self, *args):
        nin, nout = len(self.ins), len(self.outs)
        if len(args) not in (nin, nin + nout):
            raise TypeError(f"{self.name}: takes {nin} inputs (+ {nout} optional outputs), got {len(args)} arguments")
        inputs, outs = list(args[:nin]), list(args[nin:]) or [None] * nout
        # Type placeholders bind to the first array that uses them, then to scalars (Python float -> float64).
        bound: dict[str, np.dtype] = {}
        for (t, n), a in zip(self.ins + self.outs, inputs + outs):
            if t not in _CTYPES and isinstance(a, np.ndarray):
                if t in bound and bound[t] != a.dtype:
                    raise TypeError(f"{self.name}: type {t} is bound to both {bound[t]} and {a.dtype} ({n})")
                bound.setdefault(t, a.dtype)
        for (t, n), a in zip(self.ins, inputs):
            if t not in _CTYPES and t not in bound:
                bound[t] = np.result_type(a)

        def dtype_of(t, n):
            dt = np.dtype(t) if t in _CTYPES else bound.get(t)
            if dt is None:
                raise TypeError(f"{self.name}: cannot infer type {t} of {n}")
            if dt not in _DTYPE_CTYPE:
                raise TypeError(f"{self.name}: dtype {dt} of {n} is not emulated")
            return dt

        shape = np.broadcast_shapes(*(np.shape(a) for a in inputs), *(o.shape for o in outs if o is not None))
        arrays = []
        for (t, n), a in zip(self.ins, inputs):
            dt = dtype_of(t, n)
            if isinstance(a, np.ndarray) and not np.can_cast(a.dtype, dt, "same_kind"):
                raise TypeError(f"{self.name}: input {n} of dtype {a.dtype} cannot be cast to {dt}")
            arrays.append(np.ascontiguousarray(np.broadcast_to(np.asarray(a, dtype=dt), shape)))
        work, copy_back = [], []
        for (t, n), o in zip(self.outs, outs):
            dt = dtype_of(t, n)
            if o is None:
                o = np.empty(shape, dt)
            elif o.dtype != dt or o.shape != shape:
                raise TypeError(f"{self.name}: output {n} must be {dt} of shape {shape}, got {o.dtype} {o.shape}")
            w = o if o.flags.c_contiguous and o.flags.writeable else np.ascontiguousarray(o)
            work.append(w)
            copy_back.append((o, w))
        size = math.prod(shape)
        if size:
            ctypes_of = {t: _DTYPE_CTYPE[dt] for t, dt in bound.items()}
            kernel = self.rt._elementwise_kernel(self.family, self._code(ctypes_of), self.name)
            threads = 128
            kernel((min(-(-size // threads), 32),), (threads,), (*arrays, *work, size))
        results = []
        for o, w in copy_back:
            if w is not o:
                o[...] = w
            results.append(o)
        return results[0] if nout == 1 else tuple(results)

    def _code(self, ctypes_of: dict[str, str]) -> str:
        def ct(t):
            return _CTYPES.get(t) or t  # placeholders stay as names: the typedefs below define them
        params = [f"const {ct(t)}* __restrict__ _gg_in_{n}" for t, n in self.ins]
        params += [f"{ct(t)}* _gg_out_{n}" for t, n in self.outs] + ["long long _gg_n"]
        body = [f"const {ct(t)} {n} = _gg_in_{n}[_gg_k];" for t, n in self.ins]
        body += [f"{ct(t)}& {n} = _gg_out_{n}[_gg_k];" for t, n in self.outs]
        typedefs = "".join(f"typedef {c} {t};\n" for t, c in ctypes_of.items() if t not in _CTYPES)
        return (typedefs + self.rt._source(self.family) + f'\n#line 1 "<elementwise {self.name}>"\n'
                f'extern "C" __global__ void {self.name}({", ".join(params)}) {{\n'
                f"  for (long long _gg_k = (long long)blockIdx.x * blockDim.x + threadIdx.x; _gg_k < _gg_n;"
                f" _gg_k += (long long)blockDim.x * gridDim.x) {{\n"
                f"    const ptrdiff_t i = _gg_k;\n    " + "\n    ".join(body) +
                f"\n    {self.operation};\n  }}\n}}\n")


class EmuRuntime:
    """The CuPy slice the kernel launchers use, on the emulator: ``xp`` is NumPy, kernels come from the family's
    source. ``schedule`` and ``seed`` apply to every launch and may be changed between launches."""

    xp = np

    def __init__(self, source_for_family: Callable[[str], str], include_dirs: Sequence[str] = (),
                 schedule: str = "forward", seed: int = 0, options: Sequence[str] = ()):
        self._source = source_for_family
        self.include_dirs, self.options = tuple(map(str, include_dirs)), tuple(options)
        self.schedule, self.seed = schedule, seed
        self._kernels: dict = {}

    def _function(self, family: str, source: str, name_expr: str) -> EmuFunction:
        # One module per (source, kernel): the cache key then never depends on which kernels ran before.
        key = (source, name_expr)
        if key not in self._kernels:
            mod = EmuModule(source, [name_expr], self.include_dirs, self.options, source_name=f"{family}.cu")
            self._kernels[key] = mod.get_function(name_expr)
        return self._kernels[key]

    def _launcher(self, fn: EmuFunction):
        def k(grid, block, args, shared_mem: int = 0):
            fn(grid, block, args, shared_mem=shared_mem, schedule=self.schedule, seed=self.seed)
        k.name = fn.name
        return k

    def raw_kernel(self, family: str, name_expr: str):
        """``k(grid, block, args, shared_mem=0)``, as a kernel of ``cupy.RawModule(code=source(family))``."""
        return self._launcher(self._function(family, self._source(family), name_expr))

    def _elementwise_kernel(self, family: str, code: str, name: str):
        return self._launcher(self._function(family, code, name))

    def elementwise(self, family: str, in_params: str, out_params: str, operation: str, name: str):
        """``cupy.ElementwiseKernel(in_params, out_params, operation, name, preamble=source(family))``."""
        return _Elementwise(self, family, in_params, out_params, operation, name)

    def empty(self, shape, dtype=np.float32):
        return np.empty(shape, dtype)

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype)

    def ascontiguousarray(self, a, dtype=None):
        return np.ascontiguousarray(a, dtype=dtype)
