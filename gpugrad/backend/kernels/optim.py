"""Launchers of optim.cu: the single-tensor SGD and Adam updates and the multi-tensor SGD, Adam/AdamW, RMSprop and
Adagrad steps, all in place; the asynchronous hyperparameter upload."""
from __future__ import annotations

from gpugrad.backend.kernels.names import _expr
from gpugrad.backend.kernels.runtimes import runtime
from gpugrad.backend.kernels.validate import CALLS, _check_float, _check_shapes, _describe
from gpugrad.backend.reference.float16 import opmath_all

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


def _multi_in(name, hyper, n, tensors, float_runs, counts=False, n_hyper=6):
    """Validate a multi-tensor call whose ``tensors`` are runs of n arrays: parameters, gradients, then state
    arrays (``float_runs`` counts allowed for these float runs), then int64 0-d step counts when ``counts``;
    ``hyper``: the kernel's float64 options array of ``n_hyper`` entries.
    Returns (runtime, C type, contiguous hyper, runs, write-backs): parameters and states are updated in place, in
    contiguous work copies for non-contiguous ones (the (array, copy) write-backs), gradients may have any layout."""
    n_runs = len(tensors) // n if n else 0
    if len(tensors) != n_runs * n or (n and n_runs - counts not in float_runs):
        kinds = " or ".join(str(k + counts) for k in float_runs)
        raise ValueError(f"{name}: expected {kinds} runs of {n} arrays, got {len(tensors)} arrays")
    runs = [list(tensors[k * n:(k + 1) * n]) for k in range(n_runs)]
    floats = runs[:len(runs) - counts]
    ctype = _check_float(name, *(a for run in floats for a in run)) if n else None
    for i in range(n):
        _check_shapes(name, runs[0][i].shape, *(run[i] for run in floats[1:]))
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
    return rt, ctype, rt.ascontiguousarray(hyper), runs, back


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


def sgd_multi_update_(xp, hyper, first_steps, *tensors):
    """sgd_update_ of n = len(first_steps) tensors at once: ``tensors`` = n parameters, their n gradients and, for
    momentum, their n momentum buffers (given buffers mean momentum is applied); ``hyper`` = float64 [lr, momentum,
    dampening, weight_decay, nesterov, maximize] on the device, read by the kernel; ``first_steps[i]``: buffer i
    starts as d."""
    name = "sgd_multi_update_"
    n = len(first_steps)
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, n, tensors, (2, 3))
    bufs = runs[2] if len(runs) == 3 else [None] * n
    slots = [(p, g, b, p.size, int(bool(f))) for p, g, b, f in zip(runs[0], runs[1], bufs, first_steps)]
    _multi_launch(rt, name, ctype, (hyper,), slots, [p.size for p in runs[0]], (None, None, None, 0, 0), False, back)


def _ticket(rt, name, ticket):
    if ticket is None:
        return rt.zeros((1,), "uint32")
    if ticket.dtype != "uint32" or ticket.shape != (1,):
        raise TypeError(f"{name}: ticket must be a uint32 array of shape (1,), got {_describe([ticket])}")
    return ticket


def adam_multi_update_(xp, hyper, ticket, decoupled, amsgrad, *tensors):
    """adam_update_ of n tensors at once: ``tensors`` = n parameters, n gradients, n exp_avg, n exp_avg_sq, (with
    ``amsgrad``) n max_exp_avg_sq and n step counts (int64 0-d arrays, the steps taken so far: this is step count + 1,
    and every count advances by one, on the device); ``hyper`` = float64 [lr, beta1, beta2, eps, weight_decay,
    maximize] on the device, read by the kernel; ``ticket``: a zero uint32 (1,) array the kernel counts finished
    blocks in (left 0), or None for a fresh one."""
    name, n = "adam_multi_update_", len(tensors) // (5 + bool(amsgrad))
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, n, tensors, (4 + bool(amsgrad),), counts=True)
    ticket = _ticket(rt, name, ticket)
    vmax = runs[4] if amsgrad else [None] * n
    slots = [(p, g, m, v, vm, s, p.size) for p, g, m, v, vm, s in zip(*runs[:4], vmax, runs[-1])]
    _multi_launch(rt, name, ctype, (hyper, ticket, int(bool(decoupled))), slots, [s[-1] for s in slots],
                  (None,) * 6 + (0,), True, back)


def rmsprop_multi_update_(xp, hyper, centered, momentum, *tensors):
    """torch.optim.RMSprop's step of n tensors at once: ``tensors`` = n parameters, n gradients, n square_avg, (when
    ``centered``) n grad_avg and (with ``momentum``) n momentum buffers; ``hyper`` = float64 [lr, alpha, eps,
    weight_decay, momentum, maximize] on the device, read by the kernel."""
    name, runs_n = "rmsprop_multi_update_", 3 + bool(centered) + bool(momentum)
    n = len(tensors) // runs_n
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, n, tensors, (runs_n,))
    ga = runs[3] if centered else [None] * n
    bufs = runs[-1] if momentum else [None] * n
    slots = [(p, g, sq, a, b, p.size) for p, g, sq, a, b in zip(*runs[:3], ga, bufs)]
    _multi_launch(rt, name, ctype, (hyper,), slots, [s[-1] for s in slots], (None,) * 5 + (0,), False, back)


def adagrad_multi_update_(xp, hyper, ticket, *tensors):
    """torch.optim.Adagrad's step of n tensors at once: ``tensors`` = n parameters, n gradients, n sums of squares
    and n step counts (int64 0-d arrays, advanced by one on the device, as Adam's); ``hyper`` = float64 [lr,
    lr_decay, weight_decay, eps, maximize] on the device; ``ticket`` as adam_multi_update_'s."""
    name = "adagrad_multi_update_"
    rt, ctype, hyper, runs, back = _multi_in(name, hyper, len(tensors) // 4, tensors, (3,), counts=True, n_hyper=5)
    ticket = _ticket(rt, name, ticket)
    slots = [(p, g, s, c, p.size) for p, g, s, c in zip(*runs)]
    _multi_launch(rt, name, ctype, (hyper, ticket), slots, [s[-1] for s in slots], (None,) * 4 + (0,), True, back)


def set_hyper_(xp, hyper, values):
    """hyper[:] = values (a host float64 array of the same shape) by an asynchronous copy on the current stream:
    a few bytes, no host sync, no kernel. The optimizers call it only when a hyperparameter changed."""
    hyper.set(values, stream=xp.cuda.get_current_stream())

opmath_all(globals())  # float16 in float32, exactly as the references (reference.opmath)
