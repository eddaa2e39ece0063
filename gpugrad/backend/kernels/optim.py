"""Launchers of optim.cu: the single-tensor SGD and Adam updates and the multi-tensor SGD, Adam/AdamW, RMSprop and
Adagrad steps, all in place; the asynchronous hyperparameter upload."""
from __future__ import annotations

from gpugrad.backend.kernels.names import LOW_CTYPES, _expr
from gpugrad.backend.kernels.runtimes import runtime
from gpugrad.backend.kernels.validate import CALLS, _check_float, _check_shapes, _describe
from gpugrad.backend.reference.float16 import float16_params_error, opmath_all

_OPTIM_BLOCK, _OPTIM_MAX_GRID = 256, 4096


def _optim_in(name, p, g, *state):
    """(runtime, C type, contiguous g, grid, work buffers). The kernels update p and the state in place and need
    them C-contiguous: a non-contiguous one (a transposed or strided parameter view) is updated in a contiguous
    copy that :func:`_write_back` copies into it, so it works as on the CPU and the caller's array keeps its
    identity and memory. g may be any layout."""
    ctype = _check_float(name, p, g, *state)
    _check_shapes(name, p.shape, g, *state)
    rt = runtime()
    CALLS[name] += 1
    grid = (max(1, min(-(-p.size // _OPTIM_BLOCK), _OPTIM_MAX_GRID)),)
    work = [a if a.flags.c_contiguous else rt.ascontiguousarray(a) for a in (p, *state)]
    return rt, ctype, rt.ascontiguousarray(g), grid, work


def _write_back(buffers, work):
    for a, w in zip(buffers, work):
        if w is not a:
            a[...] = w


def sgd_update_(xp, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """torch.optim.SGD step in place on p (and buf, unused and may be None when momentum == 0)."""
    name = "sgd_update_"
    if momentum != 0 and buf is None:
        raise ValueError(f"{name}: momentum={momentum} needs a momentum buffer")
    state = () if buf is None else (buf,)
    rt, ctype, g, grid, work = _optim_in(name, p, g, *state)
    wp, wbuf = work[0], (work[1] if state else work[0])
    if p.size:
        rt.raw_kernel("optim", _expr(name, ctype))(
            grid, (_OPTIM_BLOCK,), (wp, g, wbuf, p.size, float(lr), float(momentum), float(dampening),
                                    float(weight_decay), int(bool(nesterov)), int(bool(first_step))))
    _write_back((p, *state), work)


def adam_update_(xp, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """torch.optim.Adam (decoupled=False, L2) / AdamW (decoupled=True) step in place; step counts from 1."""
    name = "adam_update_"
    if int(step) < 1:
        raise ValueError(f"{name}: step counts from 1 (the value after increment), got {step}")
    rt, ctype, g, grid, (wp, wm, wv) = _optim_in(name, p, g, m, v)
    bc1, bc2 = 1.0 - float(beta1) ** int(step), 1.0 - float(beta2) ** int(step)
    if p.size:
        rt.raw_kernel("optim", _expr(name, ctype))(
            grid, (_OPTIM_BLOCK,), (wp, g, wm, wv, p.size, float(beta1), float(beta2), float(eps), float(weight_decay),
                                    1.0 - float(lr) * float(weight_decay), int(bool(decoupled)), float(lr) / bc1,
                                    bc2 ** 0.5))
    _write_back((p, m, v), (wp, wm, wv))



# Multi-tensor updates: every parameter of one (device, dtype) in ceil(n / _MT_SLOTS) launches, the tensors' pointers
# and sizes passed as kernel arguments (no device-side table, so a new gradient buffer costs no transfer and a
# captured CUDA graph holds the whole step), hyperparameters read from a device array (see optim.Optimizer).
_MT_SLOTS = 16  # = GG_MT_SLOTS in optim.cu


def _master_ctype(name, floats, low_params):
    """The master-weight form's C type (gg::bf16 or gg::f16): ``low_params`` and the gradients (``floats[1]``) all of
    one low-precision dtype, the masters (``floats[0]``) and the state float32."""
    low = [*low_params, *floats[1]]
    dt = low[0].dtype
    wide = [a for k, run in enumerate(floats) if k != 1 for a in run]
    if dt.name not in LOW_CTYPES or any(a.dtype != dt for a in low) or any(a.dtype != "float32" for a in wide):
        raise TypeError(f"{name}: low_params (float16 or bfloat16 parameters updated through float32 masters) need "
                        "gradients of their dtype and float32 masters and state; got low_params "
                        f"{_describe(low_params)}, gradients {_describe(floats[1])}, masters and state "
                        f"{_describe(wide)}: give the gradients in the parameters' dtype and make the masters with "
                        "p.astype(float32)")
    return LOW_CTYPES[dt.name]


def _multi_in(name, hyper, n, tensors, float_runs, counts=False, n_hyper=6, low_params=None):
    """Validate a multi-tensor call whose ``tensors`` are runs of n arrays: parameters, gradients, then state
    arrays (``float_runs`` counts allowed for these float runs), then int64 0-d step counts when ``counts``;
    ``hyper``: the kernel's float64 options array of ``n_hyper`` entries. With ``low_params`` (n float16 or bfloat16
    parameters) the first run holds their float32 masters, the gradients are in the parameters' dtype and the state
    is float32: the master-weight form, whose kernels write each new master, rounded, into its parameter.
    Returns (runtime, C type, contiguous hyper, runs, write-backs, low-precision parameters or Nones): parameters,
    masters, low_params and states are updated in place, in contiguous work copies for non-contiguous ones (the
    (array, copy) write-backs), gradients may have any layout."""
    n_runs = len(tensors) // n if n else 0
    if len(tensors) != n_runs * n or (n and n_runs - counts not in float_runs):
        kinds = " or ".join(str(k + counts) for k in float_runs)
        raise ValueError(f"{name}: expected {kinds} runs of {n} arrays, got {len(tensors)} arrays")
    if low_params is not None and len(low_params) != n:
        raise ValueError(f"{name}: expected {n} low_params (one per master), got {len(low_params)}")
    runs = [list(tensors[k * n:(k + 1) * n]) for k in range(n_runs)]
    floats = runs[:len(runs) - counts]
    if not n:
        ctype = None
    elif low_params is None:
        if any(a.dtype.name in LOW_CTYPES for run in floats for a in run):
            half = next(a for run in floats for a in run if a.dtype.name in LOW_CTYPES)
            raise float16_params_error(name, half.shape, half.dtype)
        ctype = _check_float(name, *(a for run in floats for a in run))
    else:
        ctype = _master_ctype(name, floats, low_params)
    for i in range(n):
        _check_shapes(name, runs[0][i].shape, *(run[i] for run in floats[1:]),
                      *(() if low_params is None else (low_params[i],)))
    if counts and any(s.dtype != "int64" or s.shape != () for s in runs[-1]):
        raise TypeError(f"{name}: step counts must be int64 0-d arrays, got {_describe(runs[-1])}")
    if hyper.dtype != "float64" or hyper.shape != (n_hyper,):  # the kernel reads hyper[0 .. n_hyper - 1]
        raise TypeError(f"{name}: hyper must be a float64 array of shape ({n_hyper},), got {_describe([hyper])}")
    rt = runtime()
    CALLS[name] += 1
    back = []

    def work(a):
        if a.flags.c_contiguous:
            return a
        back.append((a, rt.ascontiguousarray(a)))
        return back[-1][1]

    runs = [[rt.ascontiguousarray(a) for a in run] if k == 1 else [work(a) for a in run] for k, run in enumerate(runs)]
    qs = [None] * n if low_params is None else [work(q) for q in low_params]
    return rt, ctype, rt.ascontiguousarray(hyper), runs, back, qs


def _multi_launch(rt, name, ctype, head, slots, sizes, null_slot, always, back):
    """``head`` arguments, then _MT_SLOTS slots (tensors of ``sizes`` elements) per launch, ``null_slot`` padding
    the last; then the write-backs. A launch whose tensors are all empty is skipped unless ``always`` (Adam still
    counts the step of an empty tensor)."""
    for c in range(0, len(slots), _MT_SLOTS):
        chunk, total = slots[c:c + _MT_SLOTS], sum(sizes[c:c + _MT_SLOTS])
        if total or always:
            args = head + tuple(a for s in chunk for a in s) + null_slot * (_MT_SLOTS - len(chunk))
            grid = (max(1, min(-(-total // _OPTIM_BLOCK), _OPTIM_MAX_GRID)),)
            rt.raw_kernel("optim", _expr(name, ctype))(grid, (_OPTIM_BLOCK,), args)
    for a, w in back:
        a[...] = w


def _skip(rt, name, skip):
    """GradScaler's found_inf (float32, shape (1,), on the device: nonzero skips the step in the kernel), or None."""
    if skip is not None and (skip.dtype != "float32" or skip.shape != (1,)):
        raise TypeError(f"{name}: skip must be a float32 array of shape (1,), got {_describe([skip])}")
    return skip if skip is None else rt.ascontiguousarray(skip)


def sgd_multi_update_(xp, hyper, first_steps, *tensors, skip=None, low_params=None, unwritten=None, ticket=None):
    """sgd_update_ of n = len(first_steps) tensors at once: ``tensors`` = n parameters, their n gradients and, for
    momentum, their n momentum buffers (given buffers mean momentum is applied); ``hyper`` = float64 [lr, momentum,
    dampening, weight_decay, nesterov, maximize] on the device, read by the kernel; ``first_steps[i]``: buffer i
    starts as d. ``unwritten``: n int32 (1,) device flags or Nones (nonzero: buffer i also starts as d; a step that
    runs zeroes them, see optim.cu), which need ``ticket`` (as adam_multi_update_'s). ``low_params``: the
    master-weight form (see :func:`_multi_in`), the kernel ``<gg::bf16>`` or ``<gg::f16>``."""
    name = "sgd_multi_update_"
    n = len(first_steps)
    rt, ctype, hyper, runs, back, qs = _multi_in(name, hyper, n, tensors, (2, 3), low_params=low_params)
    bufs = runs[2] if len(runs) == 3 else [None] * n
    flags = _unwritten(name, unwritten, n, bufs)
    ticket = _ticket(rt, name, ticket) if any(f is not None for f in flags) else None
    slots = [(p, q, g, b, p.size, int(bool(f)), u)
             for p, q, g, b, f, u in zip(runs[0], qs, runs[1], bufs, first_steps, flags)]
    _multi_launch(rt, name, ctype, (hyper, _skip(rt, name, skip), ticket), slots, [p.size for p in runs[0]],
                  (None, None, None, None, 0, 0, None), ticket is not None, back)


def _unwritten(name, unwritten, n, bufs):
    """sgd_multi_update_'s flags, checked: one-element int32 device arrays, only beside momentum buffers."""
    if unwritten is None:
        return [None] * n
    flags = list(unwritten)
    if len(flags) != n:
        raise ValueError(f"{name}: expected {n} unwritten flags (one per parameter), got {len(flags)}")
    for f, b in zip(flags, bufs):
        if f is not None and (f.dtype != "int32" or f.shape != (1,) or b is None):
            raise TypeError(f"{name}: an unwritten flag must be an int32 array of shape (1,) beside a momentum "
                            f"buffer, got {_describe([f])}" + ("" if b is not None else " without a buffer"))
    return flags


def _ticket(rt, name, ticket):
    if ticket is None:
        return rt.zeros((1,), "uint32")
    if ticket.dtype != "uint32" or ticket.shape != (1,):
        raise TypeError(f"{name}: ticket must be a uint32 array of shape (1,), got {_describe([ticket])}")
    return ticket


def adam_multi_update_(xp, hyper, ticket, decoupled, amsgrad, *tensors, skip=None, low_params=None):
    """adam_update_ of n tensors at once: ``tensors`` = n parameters, n gradients, n exp_avg, n exp_avg_sq, (with
    ``amsgrad``) n max_exp_avg_sq and n step counts (int64 0-d arrays, the steps taken so far: this is step count + 1,
    and every count advances by one, on the device); ``hyper`` = float64 [lr, beta1, beta2, eps, weight_decay,
    maximize] on the device, read by the kernel; ``ticket``: a zero uint32 (1,) array the kernel counts finished
    blocks in (left 0), or None for a fresh one. ``low_params``: the master-weight form (see :func:`_multi_in`)."""
    name, n = "adam_multi_update_", len(tensors) // (5 + bool(amsgrad))
    rt, ctype, hyper, runs, back, qs = _multi_in(name, hyper, n, tensors, (4 + bool(amsgrad),), counts=True,
                                                 low_params=low_params)
    ticket = _ticket(rt, name, ticket)
    vmax = runs[4] if amsgrad else [None] * n
    slots = [(p, q, g, m, v, vm, s, p.size) for p, q, g, m, v, vm, s in zip(runs[0], qs, *runs[1:4], vmax, runs[-1])]
    _multi_launch(rt, name, ctype, (hyper, _skip(rt, name, skip), ticket, int(bool(decoupled))), slots,
                  [s[-1] for s in slots],
                  (None,) * 7 + (0,), True, back)


def rmsprop_multi_update_(xp, hyper, ticket, centered, momentum, *tensors, skip=None, low_params=None):
    """torch.optim.RMSprop's step of n tensors at once: ``tensors`` = n parameters, n gradients, n square_avg, (when
    ``centered``) n grad_avg, (with ``momentum``) n momentum buffers and n step counts (int64 0-d arrays, advanced
    by one on the device, as Adam's); ``hyper`` = float64 [lr, alpha, eps, weight_decay, momentum, maximize] on the
    device, read by the kernel; ``ticket`` as adam_multi_update_'s. ``low_params``: the master-weight form (see
    :func:`_multi_in`)."""
    name, runs_n = "rmsprop_multi_update_", 3 + bool(centered) + bool(momentum)
    n = len(tensors) // (runs_n + 1)
    rt, ctype, hyper, runs, back, qs = _multi_in(name, hyper, n, tensors, (runs_n,), counts=True,
                                                 low_params=low_params)
    ticket = _ticket(rt, name, ticket)
    ga = runs[3] if centered else [None] * n
    bufs = runs[3 + bool(centered)] if momentum else [None] * n
    slots = [(p, q, g, sq, a, b, c, p.size) for p, q, g, sq, a, b, c in zip(runs[0], qs, *runs[1:3], ga, bufs,
                                                                            runs[-1])]
    _multi_launch(rt, name, ctype, (hyper, _skip(rt, name, skip), ticket), slots, [s[-1] for s in slots],
                  (None,) * 7 + (0,), True, back)


def adagrad_multi_update_(xp, hyper, ticket, *tensors, skip=None, low_params=None):
    """torch.optim.Adagrad's step of n tensors at once: ``tensors`` = n parameters, n gradients, n sums of squares
    and n step counts (int64 0-d arrays, advanced by one on the device, as Adam's); ``hyper`` = float64 [lr,
    lr_decay, weight_decay, eps, maximize] on the device; ``ticket`` as adam_multi_update_'s. ``low_params``: the
    master-weight form (see :func:`_multi_in`)."""
    name = "adagrad_multi_update_"
    rt, ctype, hyper, runs, back, qs = _multi_in(name, hyper, len(tensors) // 4, tensors, (3,), counts=True,
                                                 n_hyper=5, low_params=low_params)
    ticket = _ticket(rt, name, ticket)
    slots = [(p, q, g, s, c, p.size) for p, q, g, s, c in zip(runs[0], qs, *runs[1:])]
    _multi_launch(rt, name, ctype, (hyper, _skip(rt, name, skip), ticket), slots, [s[-1] for s in slots],
                  (None,) * 5 + (0,), True, back)


def _scaler_arrays(name, **arrays):
    for what, (a, dtype) in arrays.items():
        if a.dtype != dtype or a.size != 1 or not a.flags.c_contiguous:
            raise TypeError(f"{name}: {what} must be a one-element contiguous {dtype} array, got {_describe([a])}")


def amp_unscale_multi_(xp, scale, found_inf, *grads):
    """GradScaler's unscale and check: every gradient (one float dtype) times 1/scale in place, found_inf set to 1
    when any held an inf or NaN; scale and found_inf are one-element float32 device arrays, read and written by the
    kernel (one launch per 16 gradients, no host sync)."""
    name = "amp_unscale_multi_"
    _scaler_arrays(name, scale=(scale, "float32"), found_inf=(found_inf, "float32"))
    if not grads:
        return
    ctype = _check_float(name, *grads, low=True)  # float16 / bfloat16 gradients unscaled in float, rounded once
    rt = runtime()
    CALLS[name] += 1
    back = [(g, rt.ascontiguousarray(g)) for g in grads if not g.flags.c_contiguous]
    work = [dict((id(a), w) for a, w in back).get(id(g), g) for g in grads]
    _multi_launch(rt, name, ctype, (scale, found_inf), [(g, g.size) for g in work], [g.size for g in work],
                  (None, 0), False, back)


def amp_update_scale_(xp, scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """GradScaler's update on the device (torch's _amp_update_scale_): one thread backs the float32 scale off after an
    inf or NaN, or grows it after ``growth_interval`` clean steps; the int32 tracker counts them."""
    name = "amp_update_scale_"
    _scaler_arrays(name, scale=(scale, "float32"), tracker=(tracker, "int32"), found_inf=(found_inf, "float32"))
    rt = runtime()
    CALLS[name] += 1
    rt.raw_kernel("optim", _expr(name, "float"))((1,), (1,), (scale, tracker, found_inf, float(growth_factor),
                                                              float(backoff_factor), int(growth_interval)))


def set_hyper_(xp, hyper, values):
    """hyper[:] = values (a host float64 array of the same shape) by an asynchronous copy on the current stream:
    a few bytes, no host sync, no kernel. The optimizers call it only when a hyperparameter changed."""
    hyper.set(values, stream=xp.cuda.get_current_stream())

# Launchers with float16 and bfloat16 kernels of their own (names.LOW_KERNELS): the unscale of low-precision gradients
# (beside the float32 scale and found_inf). The multi-tensor updates take low precision only in their master-weight
# form (low_params=, kernels <gg::bf16> / <gg::f16>), which reference.opmath hands them as it is (float16._UPDATES):
# they are not listed here, as NATIVE_LOW promises that all-low-precision arguments run as they are.
NATIVE_LOW = ("amp_unscale_multi_",)
opmath_all(globals(), native=dict.fromkeys(NATIVE_LOW, "mixed"))  # the others: float16 / bfloat16 in float32
