"""References of optim.cu: torch.optim's SGD, Adam/AdamW, RMSprop and Adagrad updates, in place."""
from __future__ import annotations

import numpy as np

from gpugrad.backend import blas1, threads
from gpugrad.backend.reference.common import _s
from gpugrad.backend.reference.float16 import LOW, float16_params_error, opmath_all


def sgd_update_(xp, p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """torch.optim.SGD: d = g + wd * p; buf = d (first step) or momentum * buf + (1 - dampening) * d;
    d = d + momentum * buf (nesterov) or buf; p -= lr * d."""
    _sgd(p, g, buf if momentum != 0 else None, lr, momentum, dampening, weight_decay, nesterov, first_step)


# Elements per piece of an update (128 KB of float32): a piece's temporaries stay in the core's L2 cache, so a large
# tensor's update reads and writes each array once from memory, not once per NumPy operation (on a 1024 x 1024
# float32 weight, SGD's p -= lr * g takes 0.65 ms whole and 0.43 ms in pieces).
_PIECE = 32768


def _in_pieces(update, *arrays):
    """``update(*arrays)`` elementwise, in pieces of _PIECE elements when the arrays (None for an absent state) are
    all C-contiguous and large: the same operations on each element, so the same bits.  A large update's pieces
    are shared among the threads that BLAS may use (threads.split_count), as torch spreads its update over its
    intra-op threads: on 2 cores SGD over the MLP's 1.86M parameters took 1.1 ms on one, torch 0.5 ms on two."""
    live = [a for a in arrays if a is not None]
    n = live[0].size
    if n <= 2 * _PIECE or not all(a.flags.c_contiguous and a.size == n for a in live):
        update(*arrays)
        return
    flat = [None if a is None else a.reshape(-1) for a in arrays]
    # NOTE: host arrays only: CuPy's current device and stream belong to the calling thread
    split = threads.split_count(n) if isinstance(live[0], np.ndarray) else 1
    # Shared among threads, pieces are 4x larger: each piece holds the GIL for its Python-level operations, and
    # 128k-element pieces halve SGD's 1M-element update on 2 cores where 32k-element ones gain nothing
    piece = _PIECE if split == 1 else 4 * _PIECE

    def run(first, stop):
        for i in range(first * piece, min(n, stop * piece), piece):
            update(*[None if a is None else a[i:i + piece] for a in flat])

    threads.run_split(run, -(-n // piece), split)


def _sgd(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """sgd_update_ of one tensor; buf None: no momentum."""
    if _sgd_blas(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
        return
    _in_pieces(lambda p, g, buf: _sgd_piece(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step),
               p, g, buf)


def _sgd_blas(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    """_sgd as torch's own steps (``add_(x, alpha=a)``: one fused multiply-add per element) through BLAS axpy and
    scal, which also share a large update among the BLAS pool's threads; False, nothing written, where BLAS cannot
    (then _sgd_piece's formulas round each product and sum apart, and may differ from torch in the last bit)."""
    state = () if buf is None else (buf,)
    blas = blas1.level1(p, g, *state)
    scale = 1.0 - dampening if buf is not None and not first_step else 1.0
    if blas is None or lr == 0 or scale == 0:
        return False
    axpy, scal = blas
    threads.fit(np, p.size)  # the pool sized for how busy the machine is, as before a matrix product
    d = g
    if weight_decay != 0:
        d = g.copy()
        axpy(weight_decay, p, d)
    if buf is not None:
        if first_step:
            buf[...] = d
        else:
            scal(momentum, buf)
            axpy(scale, d, buf)
        if nesterov:
            d = d.copy() if d is g else d
            axpy(momentum, buf, d)
        else:
            d = buf
    axpy(-lr, d, p)
    return True


def _sgd_piece(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step):
    # In-place updates (same roundings as the out-of-place formulas): the CPU step allocates only d's temporaries.
    d = g + _s(p, weight_decay) * p if weight_decay != 0 else g
    if buf is not None:
        mom = _s(p, momentum)
        if first_step:
            buf[...] = d
        else:
            buf *= mom
            buf += d if dampening == 0 else _s(p, 1.0 - dampening) * d
        d = d + mom * buf if nesterov else buf
    p -= _s(p, lr) * d


def adam_update_(xp, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """torch.optim.Adam (L2: g += wd * p) or AdamW (decoupled: p *= 1 - lr * wd), then
    m = lerp(m, g, 1 - beta1), v = beta2 * v + (1 - beta2) * g^2,
    p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), bc_k = 1 - beta_k ** step (step counts from 1)."""
    _adam(xp, p, g, m, v, None, step, lr, beta1, beta2, eps, weight_decay, decoupled)


def _adam(xp, p, g, m, v, vmax, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    """adam_update_, and with amsgrad (``vmax`` not None): vmax = max(vmax, v), read in place of v."""
    _in_pieces(lambda p, g, m, v, vmax: _adam_piece(xp, p, g, m, v, vmax, step, lr, beta1, beta2, eps, weight_decay,
                                                    decoupled), p, g, m, v, vmax)


def _adam_piece(xp, p, g, m, v, vmax, step, lr, beta1, beta2, eps, weight_decay, decoupled):
    bc1, bc2 = 1.0 - beta1**step, 1.0 - beta2**step
    if weight_decay != 0:
        if decoupled:
            p[...] = p * _s(p, 1.0 - lr * weight_decay)
        else:
            g = g + _s(p, weight_decay) * p
    _lerp(m, g, _s(p, 1.0 - beta1))
    v *= _s(p, beta2)
    v += _s(p, 1.0 - beta2) * g * g
    if vmax is not None:
        xp.maximum(vmax, v, out=vmax)
    p += _s(p, -lr / bc1) * (m / (xp.sqrt(v if vmax is None else vmax) / _s(p, bc2**0.5) + _s(p, eps)))



# Multi-tensor updates (kernels/optim.py: one launch per 16 tensors): the per-tensor math over runs of n arrays, the
# hyperparameters read from `hyper` and Adam's step counts kept in int64 0-d arrays, as the kernels do on the device.
def _skipped(skip):
    """GradScaler's found_inf (a float32 (1,) array, or None): nonzero skips the whole step, as the kernels do."""
    return skip is not None and bool(skip[0] != 0)


def _described(arrays):
    return ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in arrays)


def _masters_in(xp, name, tensors, n, low_params, counts=0):
    """The master-weight form (``low_params``: n float16 or bfloat16 parameters; the first run of ``tensors`` their
    float32 masters, the second the gradients in the parameters' dtype, the other float runs float32 state, then
    ``counts`` runs of step counts): each master first restarts from its parameter's value wherever that is no longer
    the master's rounding (the parameter was changed outside the optimizer; optim.cu master_in), then ``tensors`` is
    returned with the gradients widened to float32 (exact), so the float32 update below is the update of a float32
    parameter with those gradients. Without ``low_params``, ``tensors`` as it is: low-precision arrays are refused."""
    if low_params is None:
        half = next((a for a in tensors if a.dtype in LOW), None)
        if half is not None:
            raise float16_params_error(name, half.shape, half.dtype)
        return tensors
    if len(low_params) != n:
        raise ValueError(f"{name}: expected {n} low_params (one per master), got {len(low_params)}")
    masters, grads = tensors[:n], tensors[n:2 * n]
    state = tensors[2 * n:len(tensors) - counts * n]
    dt = low_params[0].dtype if n else None
    if (any(a.dtype != dt for a in (*low_params, *grads)) or dt not in LOW
            or any(a.dtype != np.float32 for a in (*masters, *state))):
        raise TypeError(f"{name}: low_params (float16 or bfloat16 parameters updated through float32 masters) need "
                        "gradients of their dtype and float32 masters and state; got low_params "
                        f"{_described(low_params)}, gradients {_described(grads)}, masters and state "
                        f"{_described((*masters, *state))}: give the gradients in the parameters' dtype and make the "
                        "masters with p.astype(float32)")
    for i, (m, q) in enumerate(zip(masters, low_params)):
        if any(tuple(a.shape) != tuple(m.shape) for a in (q, grads[i], *state[i::n])):
            raise ValueError(f"{name}: master {i} has shape {tuple(m.shape)}, its parameter, gradient and state "
                             f"{[tuple(a.shape) for a in (q, grads[i], *state[i::n])]}")
        bits = np.uint16  # both low dtypes are 16-bit: compared as bits, so NaN and -0 compare as stored
        xp.copyto(m, q.astype(np.float32), where=m.astype(q.dtype).view(bits) != q.view(bits))
    return (*masters, *(g.astype(np.float32) for g in grads), *tensors[2 * n:])


def _masters_out(tensors, low_params):
    """Each updated master, rounded to nearest even, into its low-precision parameter."""
    for m, q in zip(tensors, low_params or ()):
        q[...] = m.astype(q.dtype)


def _runs(name, tensors, n, kinds):
    """``tensors`` as its runs of n arrays (parameters, gradients, states), there being one of ``kinds`` runs."""
    if len(tensors) != n * (len(tensors) // n if n else 0) or (n and len(tensors) // n not in kinds):
        raise ValueError(f"{name}: expected {' or '.join(map(str, kinds))} runs of {n} arrays, got {len(tensors)}")
    return [tensors[k * n:(k + 1) * n] for k in range(len(tensors) // n if n else 0)]


def sgd_multi_update_(xp, hyper, first_steps, *tensors, skip=None, low_params=None, unwritten=None, ticket=None):
    """sgd_update_ of n = len(first_steps) tensors: ``tensors`` = n parameters, n gradients and, for momentum, n
    momentum buffers (given buffers mean momentum is applied); hyper = [lr, momentum, dampening, weight_decay,
    nesterov, maximize] (float64); ``first_steps[i]``: buffer i starts as d; maximize: g = -g first. ``unwritten``:
    n int32 (1,) flags or Nones: nonzero, buffer i also starts as d, and a step that runs zeroes every flag (a step
    GradScaler skips leaves them); ``ticket``: the kernel's block counter (unused here). ``low_params``: the
    master-weight form (:func:`_masters_in`)."""
    if _skipped(skip):
        return
    tensors = _masters_in(xp, "sgd_multi_update_", tensors, len(first_steps), low_params)
    runs = _runs("sgd_multi_update_", tensors, len(first_steps), (2, 3))
    flags = [None] * len(first_steps) if unwritten is None else list(unwritten)
    lr, momentum, dampening, weight_decay, nesterov, maximize = (float(h) for h in hyper)
    for i, (first, flag) in enumerate(zip(first_steps, flags)):
        buf = runs[2][i] if len(runs) == 3 else None
        g = -runs[1][i] if maximize else runs[1][i]
        _sgd(runs[0][i], g, buf, lr, momentum, dampening, weight_decay, nesterov != 0,
             first or (flag is not None and bool(flag[0] != 0)))
    for flag in flags:
        if flag is not None:
            flag[...] = 0
    _masters_out(runs[0], low_params)


def adam_multi_update_(xp, hyper, ticket, decoupled, amsgrad, *tensors, skip=None, low_params=None):
    """adam_update_ of n tensors: ``tensors`` = n parameters, n gradients, n exp_avg, n exp_avg_sq, (``amsgrad``) n
    max_exp_avg_sq and n step counts (int64 0-d arrays, the steps taken so far: this is step count + 1, and each
    count advances by one); hyper = [lr, beta1, beta2, eps, weight_decay, maximize] (float64); ``ticket``: the
    kernel's block counter (unused here). ``low_params``: the master-weight form (:func:`_masters_in`)."""
    if _skipped(skip):
        return
    k = 5 + bool(amsgrad)
    tensors = _masters_in(xp, "adam_multi_update_", tensors, len(tensors) // k, low_params, counts=1)
    runs = _runs("adam_multi_update_", tensors, len(tensors) // k, (k,))
    lr, beta1, beta2, eps, weight_decay, maximize = (float(h) for h in hyper)
    for p, g, m, v, *vmax, step in zip(*runs):
        t = int(step) + 1
        _adam(xp, p, -g if maximize else g, m, v, vmax[0] if vmax else None, t, lr, beta1, beta2, eps, weight_decay,
              decoupled)
        step[...] = t
    _masters_out(runs[0], low_params)


def rmsprop_multi_update_(xp, hyper, ticket, centered, momentum, *tensors, skip=None, low_params=None):
    """torch.optim.RMSprop of n tensors: ``tensors`` = n parameters, n gradients, n square_avg, (``centered``) n
    grad_avg, (``momentum``) n momentum buffers and n step counts (as adam_multi_update_'s, which the math does not
    read); ``ticket`` as adam_multi_update_'s; hyper = [lr, alpha, eps, weight_decay, momentum, maximize]:
    g = -g (maximize); g += wd * p; sq = alpha * sq + (1 - alpha) * g^2; centered: ga = lerp(ga, g, 1 - alpha),
    avg = sqrt(sq - ga^2) + eps, else sqrt(sq) + eps; buf = momentum * buf + g / avg, p -= lr * buf, or
    p -= lr * g / avg. ``low_params``: the master-weight form (:func:`_masters_in`)."""
    if _skipped(skip):
        return
    k = 4 + bool(centered) + bool(momentum)
    tensors = _masters_in(xp, "rmsprop_multi_update_", tensors, len(tensors) // k, low_params, counts=1)
    runs = _runs("rmsprop_multi_update_", tensors, len(tensors) // k, (k,))
    lr, alpha, eps, weight_decay, mom, maximize = (float(h) for h in hyper)
    def piece(p, g, sq, ga, buf):
        g = -g if maximize else g
        g = g + _s(p, weight_decay) * p if weight_decay != 0 else g
        sq *= _s(p, alpha)
        sq += _s(p, 1.0 - alpha) * g * g
        var = sq
        if ga is not None:
            _lerp(ga, g, _s(p, 1.0 - alpha))
            var = sq - ga * ga
        avg = xp.sqrt(var) + _s(p, eps)
        if buf is not None:
            buf *= _s(p, mom)
            buf += g / avg
            p -= _s(p, lr) * buf
        else:
            p -= _s(p, lr) * (g / avg)

    for p, g, sq, *rest, step in zip(*runs):
        step[...] = int(step) + 1
        _in_pieces(piece, p, g, sq, rest[0] if centered else None, rest[-1] if momentum else None)
    _masters_out(runs[0], low_params)


def adagrad_multi_update_(xp, hyper, ticket, *tensors, skip=None, low_params=None):
    """torch.optim.Adagrad of n tensors: ``tensors`` = n parameters, n gradients, n sums and n step counts (as
    adam_multi_update_'s); hyper = [lr, lr_decay, weight_decay, eps, maximize]: g = -g (maximize); g += wd * p;
    clr = lr / (1 + (step - 1) * lr_decay); sum += g^2; p -= clr * g / (sqrt(sum) + eps). ``low_params``: the
    master-weight form (:func:`_masters_in`)."""
    if _skipped(skip):
        return
    tensors = _masters_in(xp, "adagrad_multi_update_", tensors, len(tensors) // 4, low_params, counts=1)
    runs = _runs("adagrad_multi_update_", tensors, len(tensors) // 4, (4,))
    lr, lr_decay, weight_decay, eps, maximize = (float(h) for h in hyper)
    def piece(p, g, total, clr):
        g = -g if maximize else g
        g = g + _s(p, weight_decay) * p if weight_decay != 0 else g
        total += g * g
        p -= _s(p, clr) * (g / (xp.sqrt(total) + _s(p, eps)))

    for p, g, total, step in zip(*runs):
        clr = lr / (1 + int(step) * lr_decay)
        _in_pieces(lambda p, g, total: piece(p, g, total, clr), p, g, total)
        step[...] = int(step) + 1
    _masters_out(runs[0], low_params)


def _lerp(a, b, w):
    """a = lerp(a, b, w) in place, torch.lerp's two-sided formula (exact at w = 1)."""
    if w < 0.5:
        a += w * (b - a)
    else:
        a[...] = b - (b - a) * (1 - w)


def amp_unscale_multi_(xp, scale, found_inf, *grads):
    """torch's _amp_foreach_non_finite_check_and_unscale_: each gradient times inv_scale = 1/scale (in double, rounded
    to float32, then to the gradient's dtype) in place; found_inf = 1 when any element of any gradient was inf or NaN
    before the multiply."""
    inv = np.float32(1.0 / float(scale.reshape(-1)[0]))
    for g in grads:
        if not xp.isfinite(g).all():
            found_inf.reshape(-1)[0] = 1.0
        g *= g.dtype.type(inv)


def amp_update_scale_(xp, scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """torch's _amp_update_scale_: after an inf or NaN (found_inf != 0), scale *= backoff and the tracker resets;
    else the tracker counts the clean step, and at growth_interval the scale grows (if still finite) and it resets."""
    s, t = scale.reshape(-1), tracker.reshape(-1)
    if found_inf.reshape(-1)[0] != 0:
        s[0], t[0] = np.float32(float(s[0]) * backoff_factor), 0  # in double, as the kernel
        return
    successful = int(t[0]) + 1
    if successful == growth_interval:
        with np.errstate(over="ignore"):  # an overflowing growth is dropped below, as the kernel drops it
            grown = np.float32(float(s[0]) * growth_factor)
        if np.isfinite(grown):
            s[0] = grown
        t[0] = 0
    else:
        t[0] = successful


def set_hyper_(xp, hyper, values):
    """hyper[:] = values (the CUDA version is an asynchronous host-to-device copy)."""
    hyper[...] = values


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
