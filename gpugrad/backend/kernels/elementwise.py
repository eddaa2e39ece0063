"""Launchers of elementwise.cu: every declared pointwise op forward and backward, bias + activation, dropout,
accumulate_ and copy_."""
from __future__ import annotations

import inspect
import math

from gpugrad.backend import reference
from gpugrad.backend.kernels.launch import _column_out, _column_plan, _column_sum
from gpugrad.backend.kernels.names import ELEMENTWISE, _saves_x
from gpugrad.backend.kernels.runtimes import runtime
from gpugrad.backend.kernels.validate import CALLS, _check_float, _check_shapes, _contiguous, _describe
from gpugrad.backend.reference.float16 import opmath_all
from gpugrad.ops.declarations import ACTIVATIONS, KERNEL_OPS, POINTWISE


def _ew(key):
    return runtime().elementwise("elementwise", *ELEMENTWISE[key], f"gg_{key}")

# Contiguous arrays take the vectorized raw kernel pointwise<Op> (elementwise.cu); strided, broadcast and other
# layouts the ElementwiseKernel of the same formula. (A contiguous view at an odd offset takes the raw kernel,
# whose scalar path handles pointers that are not 16-byte aligned.)
_EW_BLOCK = 256  # = GG_EW_BLOCK in elementwise.cu
# Grid: at most one full wave of an H200, 132 SMs x 4 resident blocks (which __launch_bounds__(256, 4) guarantees
# by capping registers at 64); each thread then loops grid-stride. Smaller arrays get one block per 256 x kVecs
# vectors. More blocks than fit at once would only add a partial second wave; a GPU with fewer SMs runs this grid
# in a few waves.
_EW_MAX_GRID = 132 * 4


def _launch_pointwise(op, a, b, outs, cols=1, s0=0.0, s1=0.0, in_place=False):
    """pointwise<op> over the C-contiguous a (and b) into the C-contiguous outs, (y,) or (y, z); returns y or
    (y, z). Unused slots get a and y again (the kernel never touches them)."""
    y = outs[0]
    if y.size:
        per_vector = 16 // y.itemsize  # elements of one 16-byte vector; vectors per thread as PointwiseOp::kVecs:
        loads = per_vector * (a.itemsize + (0 if b is None else b.itemsize) + (y.itemsize if in_place else 0))
        per_block = _EW_BLOCK * max(1, min(4, 64 // loads))  # 64 bytes of loads in flight per thread
        grid = (min(-(-max(1, y.size // per_vector) // per_block), _EW_MAX_GRID),)
        runtime().raw_kernel("elementwise", f"pointwise<{op}>")(
            grid, (_EW_BLOCK,), (a, a if b is None else b, y, outs[-1], y.size, int(cols), float(s0), float(s1)))
    return y if len(outs) == 1 else tuple(outs)


def _pointwise_launcher(op, direction):
    """The launcher ``<op>_fwd(xp, x, *params)`` or ``<op>_bwd(xp, saved, g, *params)`` of a declared pointwise op."""
    name = f"{op}_{direction}"
    decl = POINTWISE[op]

    def launch(xp, *args):
        n = 1 if direction == "fwd" else 2
        arrays, params = args[:n], args[n:]
        if len(params) != len(decl.params):
            raise TypeError(f"{name}: expected parameters {tuple(p for p, _ in decl.params)}, got {params}")
        ctype = _check_float(name, *arrays, low=True)  # float16 / bfloat16 arrive only contiguous (NATIVE_LOW)
        _check_shapes(name, arrays[0].shape, *arrays)
        CALLS[name] += 1
        p0, p1 = (tuple(float(p) for p in params) + (0.0, 0.0))[:2]
        if not _contiguous(*arrays):
            t = arrays[0].dtype.type
            return _ew(name)(*arrays, t(p0), t(p1))
        functor = f"{'ActFwd' if direction == 'fwd' else 'ActBwd'}<{ctype}, pw::{op}>"
        y = runtime().empty(arrays[0].shape, arrays[0].dtype)
        return _launch_pointwise(functor, arrays[0], arrays[1] if n > 1 else None, (y,), s0=p0, s1=p1)

    launch.__name__ = launch.__qualname__ = name
    launch.__signature__ = inspect.signature(getattr(reference, name))
    launch.__doc__ = f"{name}: the pw::{op} kernel of elementwise.cu (its reference: reference.{name})."
    return launch


POINTWISE_LAUNCHERS = tuple(f"{d.name}_{direction}" for d in KERNEL_OPS for direction in ("fwd", "bwd"))
for _name in POINTWISE_LAUNCHERS:
    globals()[_name] = _pointwise_launcher(*_name.rsplit("_", 1))


def _check_act(name, act, params):
    if act not in ACTIVATIONS:
        raise ValueError(f"{name}: act must be one of {ACTIVATIONS}, got {act!r}")
    want = POINTWISE[act].params if act in POINTWISE else ()
    if len(params) != len(want):
        raise TypeError(f"{name}: activation {act!r} takes parameters {tuple(p for p, _ in want)}, got {params}")
    return (tuple(float(p) for p in params) + (0.0, 0.0))[:2]


def bias_act_fwd(xp, x, b, act, *params):
    """(y, saved) with y = act(x + b), b (C,) broadcast over x's last axis; saved = z = x + b for an act whose
    backward reads its input, else y."""
    p0, p1 = _check_act("bias_act_fwd", act, params)
    ctype = _check_float("bias_act_fwd", x, b, low=True)
    if x.ndim < 1 or b.shape != (x.shape[-1],):
        raise ValueError(f"bias_act_fwd: expected x (..., C) and b (C,), got {_describe([x, b])}")
    CALLS["bias_act_fwd"] += 1
    saves_x = _saves_x(act)
    if _contiguous(x, b) and x.shape[-1] < 2**31:  # (the kernel's bias columns are 32-bit)
        rt = runtime()
        y = rt.empty(x.shape, x.dtype)
        z = rt.empty(x.shape, x.dtype) if saves_x else y
        return _launch_pointwise(f"BiasActFwd<{ctype}, pw::{act}, {str(saves_x).lower()}>", x, b, (y, z),
                                 cols=max(1, x.shape[-1]), s0=p0, s1=p1)
    t = x.dtype.type
    out = _ew(f"bias_{act}_fwd")(x, b, t(p0), t(p1))
    return out if saves_x else (out, out)


def bias_act_bwd(xp, x_or_y, gy, act, *params):
    """(gz, gb): gz = dL/d(x + b) from what bias_act_fwd saved, gb = gz summed over all leading axes."""
    name = "bias_act_bwd"
    p0, p1 = _check_act(name, act, params)
    ctype = _check_float(name, x_or_y, gy, low=True)
    _check_shapes(name, gy.shape, x_or_y)
    if gy.ndim < 1:
        raise ValueError(f"{name}: expected arrays of shape (..., C), got {_describe([gy])}")
    rt = runtime()
    CALLS[name] += 1
    cols = gy.shape[-1]
    rows = math.prod(gy.shape[:-1])
    gz = rt.empty(gy.shape, gy.dtype)
    if rows == 0 or cols == 0:
        return gz, rt.zeros((cols,), gy.dtype)
    saved2 = rt.ascontiguousarray(x_or_y).reshape(rows, cols)
    gy2 = rt.ascontiguousarray(gy).reshape(rows, cols)
    grid, per_chunk = _column_plan(rows, cols)
    partial, gb = _column_out(rt, grid, cols, gy.dtype)
    rt.raw_kernel("elementwise", f"{name}<{ctype}, pw::{act}>")(
        grid, (32, 8), (saved2, gy2, gz.reshape(rows, cols), partial, rows, cols, per_chunk, p0, p1))
    # float16 / bfloat16: the column sums are float32 (launch._column_out), rounded once here or in _column_sum
    return gz, (gb.astype(gy.dtype, copy=False) if gb is not None else _column_sum(rt, partial, gy.dtype))


def _dropout_scale(name, p):
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: p must be in [0, 1], got {p}")
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)  # p == 1 drops everything: y = 0, not 0 * inf


def dropout_fwd(xp, x, p, u):
    """(y, mask): mask = u >= p (bool), y = x * mask / (1 - p); u uniform [0, 1) randoms of x's shape."""
    ctype, utype = _check_float("dropout_fwd", x), _check_float("dropout_fwd", u)
    _check_shapes("dropout_fwd", x.shape, u)
    scale = _dropout_scale("dropout_fwd", p)
    CALLS["dropout_fwd"] += 1
    if _contiguous(x, u):
        rt = runtime()
        y, mask = rt.empty(x.shape, x.dtype), rt.empty(x.shape, bool)
        return _launch_pointwise(f"DropoutFwd<{ctype}, {utype}>", x, u, (y, mask), s0=float(p), s1=scale)
    # NOTE: p is compared in u's dtype and scale applied in x's, exactly as the reference does.
    return _ew("dropout_fwd")(x, u, u.dtype.type(p), x.dtype.type(scale))


def dropout_bwd(xp, gy, mask, p):
    """gx = gy * mask / (1 - p)."""
    ctype = _check_float("dropout_bwd", gy)
    _check_shapes("dropout_bwd", gy.shape, mask)
    if mask.dtype != bool:
        mask = mask.astype(bool)
    scale = _dropout_scale("dropout_bwd", p)
    CALLS["dropout_bwd"] += 1
    if _contiguous(gy, mask):
        return _launch_pointwise(f"DropoutBwd<{ctype}>", gy, mask, (runtime().empty(gy.shape, gy.dtype),), s0=scale)
    return _ew("dropout_bwd")(gy, mask, gy.dtype.type(scale))


def accumulate_(xp, acc, g):
    """acc += g in place (same shape and dtype); returns acc."""
    ctype = _check_float("accumulate_", acc, g, low=True)
    _check_shapes("accumulate_", acc.shape, g)
    CALLS["accumulate_"] += 1
    if _contiguous(acc, g):
        _launch_pointwise(f"Accumulate<{ctype}>", g, None, (acc,), in_place=True)
    else:
        _ew("accumulate_")(g, acc)
    return acc


def copy_(xp, dst, src):
    """dst[...] = src in place (same shape and dtype); returns dst. Contiguous arrays take the vectorized kernel
    (the identity activation), which ``gpugrad bench`` also times as the vectorized-copy bandwidth peak."""
    ctype = _check_float("copy_", dst, src, low=True)
    _check_shapes("copy_", dst.shape, src)
    CALLS["copy_"] += 1
    if _contiguous(dst, src):
        _launch_pointwise(f"ActFwd<{ctype}, pw::identity>", src, None, (dst,))
    else:
        _ew("copy_")(src, dst)
    return dst


# float16 and bfloat16 kernels of their own (contiguous arrays; names.LOW_OPS): the activations, their backward, bias +
# activation both ways, gradient accumulation and copies
NATIVE_LOW = (*POINTWISE_LAUNCHERS, "bias_act_fwd", "bias_act_bwd", "accumulate_", "copy_")
opmath_all(globals(), native=dict.fromkeys(NATIVE_LOW, "same"))  # the others: float16 / bfloat16 in float32
