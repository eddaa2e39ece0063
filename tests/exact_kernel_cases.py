"""Closed-form rows for every kernel function of ``backend/reference.py`` (and so its CUDA twin in kernels.py).

tests/kernel_cases.py holds each launcher to its reference over many shapes and layouts; nothing there says the
reference is right.  These rows do: chosen inputs and the exact result from the function's definition (torch's
documented formulas for activations, losses and optimizer steps), in mpmath at 50 digits (tests/exact.py).  A
backward ``*_bwd`` row's expected value is the VJP by mpmath's numerical derivative of the forward's closed form,
so it checks the hand-derived derivative formula too.  ``args`` holds ``Fl(...)`` for float arrays in the run's
dtype and anything else as it is (ids, masks, status words, hyperparameters); ``after`` gives the expected value of
the arguments a function updates in place, by position (after ``xp``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpugrad.ops.declarations import POINTWISE
from tests.exact import (FLOATS, MP, cross_entropy_mean, cross_entropy_rows, ew, exact, gelu_tanh, layer_norm,
                         log_softmax, lse, sigmoid, softmax, vjp)
from tests.exact_op_cases import LEFT_TAIL, LN2, LN3, POINTWISE_ROWS, tol


@dataclass(frozen=True)
class Fl:
    """A float array argument, built in the run's dtype."""
    values: object


@dataclass(frozen=True)
class KernelExact:
    name: str  # the function in backend/reference.py (and launcher in backend/kernels.py)
    args: tuple  # after xp
    want: object = None  # the return value, or a function of the exact args (Fl -> object arrays of mpf)
    after: dict = field(default_factory=dict)  # {position: value or function of the exact args} for in-place args
    variant: str = ""
    tol: dict | None = None
    dtypes: tuple = FLOATS

    @property
    def id(self):
        return f"{self.name}[{self.variant}]" if self.variant else self.name

    def build(self, dtype):
        """(args for the call, exact args for the closed forms): fresh arrays each time (some are updated)."""
        run = tuple(np.array(a.values, dtype=dtype) if isinstance(a, Fl) else
                    a.copy() if isinstance(a, np.ndarray) else a for a in self.args)
        # copies: the call may update the arguments the closed forms read (steps, status words)
        return run, tuple(exact(a) if isinstance(s, Fl) else a.copy() if isinstance(a, np.ndarray) else a
                          for a, s in zip(run, self.args))

    def expected(self, value, exact_args):
        return value(*exact_args) if callable(value) else value


G = [0.5, -1.5, 2.0, 0.25, -1.0, 3.0, -0.75, 1.25, 1.0, -2.0]  # cotangents, exact in float32


def _gs(n):
    return G[:n]


def _away(xs, kinks, gap=1e-3):
    return [x for x in xs if all(abs(x - k) > gap for k in kinks)]


def _pointwise_rows():
    """<op>_fwd at the op table's points (tests/exact_op_cases.py); <op>_bwd of the ops that save x at the same
    points away from the kinks, against gy * f'(x) by mpmath's derivative of the closed form."""
    out = []
    for row in POINTWISE_ROWS:
        d = POINTWISE[row.op]
        if not d.kernel:
            continue
        f, p = row.f, row.params or d.defaults
        out.append(KernelExact(f"{d.name}_fwd", (Fl(row.inputs[0]), *p), lambda x, *_, f=f: ew(f)(x),
                               variant=row.name, tol=row.tol))
        if d.saves == "x":
            kinks = (p[1] / p[0],) if d.name == "softplus" else d.kinks  # softplus branches at threshold / beta
            xs = _away(row.inputs[0], kinks)
            out.append(KernelExact(f"{d.name}_bwd", (Fl(xs), Fl(_gs(len(xs))), *p),
                                   lambda x, g, *_, f=f: ew(lambda v: MP.diff(f, v))(x) * g,
                                   variant=row.name, tol=BWD_LEFT_TAIL if row.tol is LEFT_TAIL else row.tol or BWD_TOL))
    return out


# f' computed as a difference of terms (gelu's, silu's): a few more ulps than f itself; in gelu's left tail each of
# its two terms carries the rounding of tanh / erf (~1 ulp of 1) times |x|^3-sized factors, absolute (LEFT_TAIL)
BWD_TOL = tol(5e-14, 4e-6, 1e-16, 1e-7)
BWD_LEFT_TAIL = tol(1e-11, 5e-3, 1e-14, 3e-6)


def _at_inverse(f, inverse):
    """gy f'(x) for an op that saves y = f(x): f' at x = inverse(y), by mpmath's derivative."""
    return lambda y, g: ew(lambda v, w: MP.diff(f, inverse(v)) * w)(y, g)


# the ops whose backward reads y = f(x): y chosen, x = f^-1(y)
SAVED_Y_ROWS = [
    KernelExact("relu_bwd", (Fl([0.0, 0.5, 3.0, 1e-30]), Fl([2.0, -1.5, 0.25, 4.0])), [0, -1.5, 0.25, 4.0]),
    KernelExact("sigmoid_bwd", (Fl([0.25, 0.5, 0.9, 1e-12, 1 - 2 ** -20]), Fl(_gs(5))),
                _at_inverse(sigmoid, lambda y: MP.log(y / (1 - y)))),
    KernelExact("tanh_bwd", (Fl([-0.9, 0.0, 0.5, 0.999]), Fl(_gs(4))), _at_inverse(MP.tanh, MP.atanh),
                tol=tol(1e-13, 2e-5)),  # 1 - y^2 at y = 0.999: the rounding of y^2 cancels
    KernelExact("expm1_bwd", (Fl([-0.5, 0.0, 1.0, 100.0]), Fl(_gs(4))), _at_inverse(MP.expm1, MP.log1p)),
]

# subgradients and branch points, by hand (torch's conventions: the branch x > 0 is strict)
KINK_ROWS = [
    KernelExact("leaky_relu_bwd", (Fl([0.0, -1.0, 1.0]), Fl([2.0, 2.0, 2.0]), 0.25), [0.5, 0.5, 2.0], variant="0.25"),
    KernelExact("elu_bwd", (Fl([0.0, -1.0, 1.0]), Fl([2.0, 2.0, 2.0]), 0.5),
                [1.0, MP.exp(-1), 2.0], variant="0.5"),
    # at the threshold the log1p branch: gy sigmoid(beta x)
    KernelExact("softplus_bwd", (Fl([20.0, 20.5]), Fl([2.0, 2.0]), 1.0, 20.0), [2 * sigmoid(MP.mpf(20)), 2],
                variant="threshold"),
    KernelExact("identity_fwd", (Fl([-1.5, 0.0, 2.0]),), [-1.5, 0, 2]),
    KernelExact("identity_bwd", (Fl([9.0, 9.0]), Fl([0.5, -4.0])), [0.5, -4]),
]

X2 = [[0.0, LN2, LN3], [1.0, -1.0, 0.5]]
T2 = np.array([1, 0])
W3 = [0.5, 2.0, 1.0]
SITE = 7


def _status(*words):
    s = np.zeros(4, np.int64)
    s[:len(words)] = words
    return s


def _bias_act_rows():
    x, b = [[1.0, -2.0, 0.5], [-0.5, 0.25, 3.0]], [0.25, 1.0, -1.0]
    z = lambda x, b: x + b  # noqa: E731
    relu = ew(lambda v: max(v, 0))
    return [
        KernelExact("bias_act_fwd", (Fl(x), Fl(b), "identity"), lambda x, b, _: (z(x, b), z(x, b)),
                    variant="identity"),
        # relu saves y, gelu saves z = x + b
        KernelExact("bias_act_fwd", (Fl(x), Fl(b), "relu"), lambda x, b, _: (relu(z(x, b)), relu(z(x, b))),
                    variant="relu"),
        KernelExact("bias_act_fwd", (Fl(x), Fl(b), "gelu"), lambda x, b, _: (ew(gelu_tanh)(z(x, b)), z(x, b)),
                    variant="gelu"),
        KernelExact("bias_act_fwd", (Fl(x), Fl(b), "leaky_relu", 0.25),
                    lambda x, b, *_: (ew(lambda v: v if v > 0 else v / 4)(z(x, b)), z(x, b)), variant="leaky_relu"),
        # gz = gy where y > 0; gb = the column sums of gz
        KernelExact("bias_act_bwd", (Fl([[1.25, 0.0, 0.0], [0.0, 1.25, 2.0]]), Fl([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
                                     "relu"), ([[1, 0, 0], [0, 5, 6]], [1, 5, 6]), variant="relu"),
        KernelExact("bias_act_bwd", (Fl([[1.0, -2.0], [0.5, 3.0]]), Fl([[1.0, 2.0], [-1.0, 0.5]]), "gelu"),
                    lambda s, g, _: (lambda gz: (gz, gz.sum(0)))(ew(lambda v: MP.diff(gelu_tanh, v))(s) * g),
                    variant="gelu", tol=BWD_TOL),
        KernelExact("bias_act_bwd", (Fl([[1.0, -2.0]]), Fl([[3.0, 4.0]]), "identity"), ([[3, 4]], [3, 4]),
                    variant="identity"),
    ]


U4 = np.array([0.1, 0.6, 0.5, 0.9])  # kept where u >= p: 0.5 included at p = 0.5
DROPOUT_ROWS = [
    KernelExact("dropout_fwd", (Fl([1.0, -2.0, 3.0, 0.25]), 0.5, U4), ([0, -4, 6, 0.5], [False, True, True, True]),
                variant="p=0.5"),
    # dropped elements are 0 even where x is inf or NaN (a select, not x * mask)
    KernelExact("dropout_fwd", (Fl([np.inf, -2.0, 3.0, np.nan]), 0.75, U4), ([0, 0, 0, 4 * np.nan], [False, False, False, True]),
                variant="p=0.75-inf-nan"),
    KernelExact("dropout_fwd", (Fl([1.0, -2.0, 3.0, 0.25]), 1.0, U4), ([0, 0, 0, 0], [False] * 4), variant="p=1"),
    KernelExact("dropout_fwd", (Fl([1.0, -2.0]), 0.0, np.zeros(2)), ([1, -2], [True, True]), variant="p=0"),
    KernelExact("dropout_bwd", (Fl([1.0, -2.0, 3.0]), np.array([True, False, True]), 0.25), [MP.mpf(4) / 3, 0, 4],
                variant="p=0.25"),
]

IN_PLACE_ROWS = [
    KernelExact("accumulate_", (Fl([1.0, -2.0, 1e30]), Fl([0.5, 2.0, 1.0])), [1.5, 0, 1e30],
                after={0: lambda acc, g: acc + g}),
    KernelExact("copy_", (Fl([1.0, 2.0]), Fl([-3.0, 0.5])), [-3, 0.5], after={0: [-3, 0.5]}),
    KernelExact("set_hyper_", (Fl([0.0, 0.0, 0.0]), np.array([1e-3, 0.9, 0.999])), None,
                after={0: lambda h, v: v}),
    KernelExact("check_index", (np.array([0, 4, 2]), 5, _status(), SITE), None, after={2: [0, 0, 0, 0]},
                variant="in-range"),
    # the failing site with the min and max of every id checked
    KernelExact("check_index", (np.array([3, -2, 9, 1]), 5, _status(), SITE), None, after={2: [SITE, -2, 9, 0]},
                variant="out-of-range"),
    KernelExact("check_index", (np.array([7]), 5, _status(3, -5, 99), SITE), None, after={2: [3, -5, 99, 0]},
                variant="earlier-failure-kept"),
    # row `node` of flags gets epoch * 2^32 + INT_MAX - (the index of the first array holding a NaN / an inf)
    KernelExact("check_finite", (np.zeros((3, 2), np.int64), 1, 5, Fl([1.0, 2.0]), Fl([np.nan, 0.0]), None,
                                 Fl([np.inf, np.nan])), None,
                after={0: [[0, 0], [(5 << 32) + 2 ** 31 - 2, (5 << 32) + 2 ** 31 - 4], [0, 0]]}),
]

def _floats(a):
    return [float(v) for v in a]


LSE_X = [[0.0, LN2], [-1000.0, -1001.0], [1000.0, 0.0]]
SOFTMAX_ROWS = [
    KernelExact("softmax_fwd", (Fl(LSE_X),), softmax),
    KernelExact("softmax_fwd", (Fl([[0.0, LN2], [-np.inf, 0.0]]),), [[MP.mpf(1) / 3, MP.mpf(2) / 3], [0, 1]],
                variant="thirds/masked", tol=tol(2e-15, 1e-7)),
    KernelExact("softmax_bwd", (Fl([[0.25, 0.75], [0.5, 0.5]]), Fl([[1.0, -2.0], [3.0, 0.5]])),
                lambda y, g: vjp(softmax, [ew(MP.log)(y)], g)[0]),
    KernelExact("log_softmax_fwd", (Fl(LSE_X),), log_softmax, tol=tol(1e-14, 1e-6, 2e-16, 1.2e-7)),
    KernelExact("log_softmax_bwd", (Fl([[-MP.log(4), -MP.log(4) + LN3]]), Fl([[1.0, -2.0]])),
                lambda y, g: vjp(log_softmax, [y], g)[0]),
    KernelExact("logsumexp_fwd", (Fl(LSE_X),), lse),
    KernelExact("logsumexp_fwd", (Fl([[0.0, 0.0, 0.0, 0.0], [-np.inf, -np.inf, -np.inf, -np.inf]]),),
                [MP.log(4), -MP.inf], variant="ln4/all-inf"),
    KernelExact("logsumexp_bwd", (Fl([[0.0, LN2], [1.0, -1.0]]), Fl(_floats(lse(exact([[0.0, LN2], [1.0, -1.0]])))),
                                  Fl([2.0, -1.0])), lambda x, l, g: vjp(lse, [x], g)[0]),
    KernelExact("sum_rows", (Fl([[1.0, 2.0], [3.0, -4.0], [0.5, 0.25]]),), [4.5, -1.75]),
]


def _xent_reduced(t, reduction, w=None, e=0, ignore=None):
    ii = -100 if ignore is None else ignore
    if reduction == "none":
        return lambda x: cross_entropy_rows(x, t, w, e, ii)
    if reduction == "sum":
        return lambda x: cross_entropy_rows(x, t, w, e, ii).sum()
    return lambda x: cross_entropy_mean(x, t, w, e, ii)


def _xent_fwd(t, reduction, w=False, e=0.0, ignore=None, status_after=None):
    """softmax_xent_fwd(x, t, reduction, status, site, w, ignore_index, smoothing) -> (loss, lse, aux)."""
    def want(x, t_, red, status, site, w_, ii, e_):
        w1 = np.ones(x.shape[1], dtype=object) if w_ is None else w_
        den = sum(w1[k] for k in t if k != ignore and 0 <= k < x.shape[1])
        return _xent_reduced(t, reduction, w_, e, ignore)(x), lse(x), [den, w1.sum()]

    return KernelExact("softmax_xent_fwd", (Fl(X2), t, reduction, _status(), SITE, Fl(W3) if w else None, ignore, e),
                       want, after={3: status_after or [0, 0, 0, 0]},
                       variant="/".join(v for v in (reduction, w and "weights", ignore is not None and "ignore",
                                                    e and f"smoothing={e}", status_after and "invalid") if v))


def _xent_bwd(t, reduction, w=False, e=0.0, ignore=None):
    """softmax_xent_bwd(x, t, lse, gloss, reduction, w, ignore_index, smoothing) -> gx."""
    g = Fl([2.0, -0.5] if reduction == "none" else 1.5)
    return KernelExact("softmax_xent_bwd", (Fl(X2), t, Fl(LSE2), g, reduction, Fl(W3) if w else None, ignore, e),
                       lambda x, t_, l, g_, red, w_, ii, e_: vjp(_xent_reduced(t, reduction, w_, e, ignore), [x],
                                                                 g_)[0],
                       variant="/".join(v for v in (reduction, w and "weights", ignore is not None and "ignore",
                                                    e and f"smoothing={e}") if v))


LSE2 = _floats(lse(exact(X2)))  # the forward's saved lse, rounded as the forward would save it
LOSS_ROWS = [
    _xent_fwd(T2, "none"), _xent_fwd(T2, "sum"), _xent_fwd(T2, "mean", w=True),
    _xent_fwd(np.array([2, 1]), "mean", w=True, e=0.25, ignore=1),
    _xent_fwd(np.array([2, 1]), "sum", e=0.1),
    # an id outside [0, C): a NaN row, recorded in the status words (site, min id, max id)
    _xent_fwd(np.array([3, 0]), "none", status_after=[SITE, 0, 3, 0]),
    _xent_bwd(T2, "none"), _xent_bwd(T2, "sum"), _xent_bwd(T2, "mean", w=True),
    _xent_bwd(np.array([2, 1]), "mean", w=True, e=0.25, ignore=1),
    KernelExact("token_logprob_fwd", (Fl(X2), T2, _status(), SITE), lambda x, *_: (-cross_entropy_rows(x, T2), lse(x)),
                after={2: [0, 0, 0, 0]}),
    KernelExact("token_logprob_bwd", (Fl(X2), T2, Fl(LSE2), Fl([2.0, -0.5])),
                lambda x, t, l, g: vjp(lambda x: -cross_entropy_rows(x, T2), [x], g)[0]),
    # (Σ w_t over the rows not ignored, Σ w)
    KernelExact("xent_aux", (Fl(X2), np.array([2, 1]), Fl(W3), 1), [1, MP.mpf(7) / 2]),
    KernelExact("xent_aux", (Fl(X2), T2), [2, 3], variant="unweighted"),
]

LN_X = [[1.0, 2.0, 3.0, 4.0], [-1.0, -1.0, 5.0, 0.5]]
LN_W, LN_B = [2.0, 0.5, -1.0, 1.0], [0.0, 1.0, 0.25, -0.5]


def _moments(x, eps=1e-5):
    n = x.shape[-1]
    mean = x.sum(-1) / n
    var = ((x - mean[:, None]) ** 2).sum(-1) / n
    return mean, ew(lambda v: 1 / MP.sqrt(v + MP.mpf(eps)))(var)


def _ln_bwd(x, w, mean, rstd, gy):
    """(gx, gw, gb) by the derivative of the closed form; without w, gw is still the gradient of a weight of ones."""
    gx, gw = vjp(lambda x, w: layer_norm(x, w), [x, np.ones(x.shape[-1], dtype=object) if w is None else w], gy)
    return gx, gw, gy.sum(0)


LN_MEAN, LN_RSTD = (_floats(m) for m in _moments(exact(LN_X)))
NORM_ROWS = [
    KernelExact("layer_norm_fwd", (Fl(LN_X), Fl(LN_W), Fl(LN_B), 1e-5),
                lambda x, w, b, eps: (layer_norm(x, w, b), *_moments(x))),
    KernelExact("layer_norm_fwd", (Fl([[1.0, 2.0, 3.0, 4.0]]), None, None, 0.0),
                ([[k / MP.sqrt(5) for k in (-3, -1, 1, 3)]], [MP.mpf(5) / 2], [2 / MP.sqrt(5)]), variant="eps=0"),
    KernelExact("layer_norm_fwd", (Fl([[1e6 + 1, 1e6 + 2, 1e6 + 3, 1e6 + 4]]), None, None, 1e-5),
                lambda x, *_: (layer_norm(x), *_moments(x)), variant="near-1e6"),
    KernelExact("layer_norm_bwd", (Fl(LN_X), Fl(LN_W), Fl(LN_MEAN), Fl(LN_RSTD),
                                   Fl([[1.0, -2.0, 0.5, 3.0], [0.25, 1.0, -1.0, 2.0]])), _ln_bwd,
                tol=tol(1e-13, 1e-5, 1e-15, 1e-6)),
    KernelExact("layer_norm_bwd", (Fl(LN_X[:1]), None, Fl(LN_MEAN[:1]), Fl(LN_RSTD[:1]),
                                   Fl([[1.0, -2.0, 0.5, 3.0]])),
                lambda x, w, m, r, g: _ln_bwd(x, None, m, r, g), variant="no-affine", tol=tol(1e-13, 1e-5, 1e-15, 1e-6)),
]


# ---- optimizer steps: torch.optim's documented algorithms, one step by hand ------------------------------------------
def sgd_step(p, g, buf, lr, momentum, dampening, wd, nesterov, first, maximize=False):
    """torch.optim.SGD: d = g + wd p; buf = d (first step) or momentum buf + (1 - dampening) d; d = d + momentum buf
    (nesterov) or buf; p - lr d.  Returns (p, buf)."""
    d = (-g if maximize else g) + wd * p
    if momentum:
        buf = d if first else momentum * buf + (1 - MP.mpf(dampening)) * d
        d = d + momentum * buf if nesterov else buf
    return p - lr * d, buf


def adam_step(p, g, m, v, t, lr, beta1, beta2, eps, wd, decoupled, vmax=None, maximize=False):
    """torch.optim.Adam / AdamW at step t (from 1): L2 (g += wd p) or decoupled (p -= lr wd p) decay;
    m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2; p - lr m_hat / (sqrt(v_hat) + eps) with
    x_hat = x / (1 - beta^t).  amsgrad: the running max of v (as torch keeps it: of v, before bias correction)
    in place of v.  Returns (p, m, v, vmax)."""
    g = -g if maximize else g
    if wd and decoupled:
        p = p * (1 - MP.mpf(lr) * wd)
    elif wd:
        g = g + wd * p
    m = beta1 * m + (1 - MP.mpf(beta1)) * g
    v = beta2 * v + (1 - MP.mpf(beta2)) * g * g
    if vmax is not None:
        vmax = ew(max)(vmax, v)
    bc1, bc2 = 1 - MP.mpf(beta1) ** t, 1 - MP.mpf(beta2) ** t
    den = ew(lambda u: MP.sqrt(u / bc2) + eps)(v if vmax is None else vmax)
    return p - lr * (m / bc1) / den, m, v, vmax


def rmsprop_step(p, g, sq, ga, buf, lr, alpha, eps, wd, momentum, maximize=False):
    """torch.optim.RMSprop: g += wd p; sq = alpha sq + (1 - alpha) g^2; centered (ga given): ga = alpha ga +
    (1 - alpha) g, var = sq - ga^2, else sq; momentum: buf = momentum buf + g / (sqrt(var) + eps), p - lr buf;
    else p - lr g / (sqrt(var) + eps).  Returns (p, sq, ga, buf)."""
    g = (-g if maximize else g) + wd * p
    sq = alpha * sq + (1 - MP.mpf(alpha)) * g * g
    var = sq
    if ga is not None:
        ga = alpha * ga + (1 - MP.mpf(alpha)) * g
        var = sq - ga * ga
    step = g / ew(lambda u: MP.sqrt(u) + eps)(var)
    if momentum:
        buf = momentum * buf + step
        step = buf
    return p - lr * step, sq, ga, buf


def adagrad_step(p, g, total, t, lr, lr_decay, wd, eps, maximize=False):
    """torch.optim.Adagrad at step t (from 1): clr = lr / (1 + (t - 1) lr_decay); g += wd p; sum += g^2;
    p - clr g / (sqrt(sum) + eps).  Returns (p, sum)."""
    g = (-g if maximize else g) + wd * p
    total = total + g * g
    return p - MP.mpf(lr) / (1 + (t - 1) * MP.mpf(lr_decay)) * g / ew(lambda u: MP.sqrt(u) + eps)(total), total


P3, G3, B3 = [1.0, -2.0, 0.5], [0.5, 0.25, -1.0], [0.1, -0.2, 0.0]
M3, V3 = [0.05, -0.1, 0.2], [0.01, 0.04, 0.25]


def _sgd(variant, momentum, dampening, wd, nesterov, first):
    buf = Fl(B3) if momentum else None
    hyper = (0.1, momentum, dampening, wd, nesterov, first)
    step = lambda p, g, b, *_: sgd_step(p, g, b, *hyper)  # noqa: E731
    return KernelExact("sgd_update_", (Fl(P3), Fl(G3), buf, *hyper), None, variant=variant,
                       after=lambda *a: {0: step(*a)[0], **({2: step(*a)[1]} if momentum else {})})


def _adam(variant, p, g, m, v, t, wd, decoupled):
    hyper = (1e-3, 0.9, 0.999, 1e-8, wd, decoupled)
    step = lambda p, g, m, v, t, *_: adam_step(p, g, m, v, t, *hyper)  # noqa: E731
    return KernelExact("adam_update_", (Fl(p), Fl(g), Fl(m), Fl(v), t, *hyper), None, variant=variant,
                       after=lambda *a: dict(zip((0, 2, 3), step(*a)[:3])))


OPTIM_ROWS = [
    _sgd("plain", 0.0, 0.0, 0.0, False, False),
    _sgd("momentum-first", 0.9, 0.0, 0.0, False, True),
    _sgd("momentum-dampening-wd", 0.9, 0.1, 0.01, False, False),
    _sgd("nesterov", 0.9, 0.0, 0.01, True, False),
    # step 1 from m = v = 0: m_hat = g, v_hat = g^2, so p - lr g / (|g| + eps), by hand
    KernelExact("adam_update_", (Fl(P3), Fl(G3), Fl([0.0] * 3), Fl([0.0] * 3), 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, False),
                None, variant="first-step",
                after={0: lambda p, g, *_: p - MP.mpf(1e-3) * g / (ew(abs)(g) + MP.mpf(1e-8)),
                       2: lambda p, g, *_: (1 - MP.mpf(0.9)) * g, 3: lambda p, g, *_: (1 - MP.mpf(0.999)) * g * g}),
    _adam("known-state", P3, G3, M3, V3, 10, 0.0, False),
    _adam("l2", P3, G3, M3, V3, 10, 0.01, False),
    _adam("adamw", P3, G3, M3, V3, 3, 0.01, True),
]


def _zero_d(k):
    return np.array(k, np.int64)


# two tensors (sizes 3 and 1) per run: parameters, gradients, then the states
PS, GS = (Fl(P3), Fl([-3.0])), (Fl(G3), Fl([0.75]))


def _multi_sgd(variant, momentum, dampening, wd, nesterov, maximize=False):
    hyper = np.array([0.1, momentum, dampening, wd, float(nesterov), float(maximize)])
    first = [True, False]
    bufs = (Fl([0.1, -0.2, 0.0]), Fl([0.3])) if momentum else ()

    def after(h, f, *t):
        out = {}
        for i in range(2):
            p, b = sgd_step(t[i], t[2 + i], t[4 + i] if momentum else None, 0.1, momentum, dampening, wd, nesterov,
                            first[i], maximize)
            out[2 + i] = p
            if momentum:
                out[6 + i] = b
        return out

    return KernelExact("sgd_multi_update_", (hyper, first, *PS, *GS, *bufs), None, variant=variant, after=after)


def _multi_adam(variant, wd, decoupled, amsgrad=False, maximize=False):
    hyper = np.array([1e-3, 0.9, 0.999, 1e-8, wd, float(maximize)])
    ms, vs = (Fl(M3), Fl([0.5])), (Fl(V3), Fl([0.125]))
    vmax = (Fl([0.02, 0.01, 0.5]), Fl([0.0])) if amsgrad else ()  # above v for some elements, below for others
    steps = (_zero_d(0), _zero_d(9))  # steps taken so far: this is step 1 of the first tensor, 10 of the second
    k = 5 + amsgrad

    def after(h, ticket, dec, ams, *t):
        out = {1: [0]}
        for i in range(2):
            st = adam_step(t[i], t[2 + i], t[4 + i], t[6 + i], int(t[2 * k - 2 + i]) + 1, 1e-3, 0.9, 0.999, 1e-8, wd,
                           decoupled, t[8 + i] if amsgrad else None, maximize)
            for run, value in enumerate(st[:4 if amsgrad else 3]):
                out[4 + (0 if run == 0 else run + 1) * 2 + i] = value
            out[4 + 2 * (k - 1) + i] = int(t[2 * k - 2 + i]) + 1
        return out

    return KernelExact("adam_multi_update_", (hyper, np.zeros(1, np.uint32), decoupled, amsgrad, *PS, *GS, *ms, *vs,
                                              *vmax, *steps), None, variant=variant, after=after)


def _multi_rmsprop(variant, wd, momentum, centered, maximize=False):
    hyper = np.array([1e-2, 0.9, 1e-8, wd, momentum, float(maximize)])
    sq = (Fl([1.0, 0.5, 2.0]), Fl([1.5]))
    ga = (Fl([0.1, -0.2, 0.3]), Fl([0.5])) if centered else ()
    bufs = (Fl([0.05, 0.0, -0.1]), Fl([0.2])) if momentum else ()
    steps = (_zero_d(0), _zero_d(6))  # counted, never read by the math
    k = 4 + centered + bool(momentum)

    def after(h, ticket, c, mom, *t):
        out = {1: [0]}
        for i in range(2):
            ga_i = t[6 + i] if centered else None
            buf_i = t[6 + 2 * centered + i] if momentum else None
            p, s, a, b = rmsprop_step(t[i], t[2 + i], t[4 + i], ga_i, buf_i, 1e-2, 0.9, 1e-8, wd, momentum, maximize)
            out[4 + i], out[8 + i] = p, s
            if centered:
                out[10 + i] = a
            if momentum:
                out[10 + 2 * centered + i] = b
            out[4 + 2 * (k - 1) + i] = int(t[2 * k - 2 + i]) + 1
        return out

    return KernelExact("rmsprop_multi_update_", (hyper, np.zeros(1, np.uint32), centered, bool(momentum), *PS, *GS,
                                                 *sq, *ga, *bufs, *steps), None, variant=variant, after=after)


def _multi_adagrad(variant, lr_decay, wd, maximize=False):
    hyper = np.array([1e-2, lr_decay, wd, 1e-10, float(maximize)])
    sums = (Fl([0.0, 1.0, 0.25]), Fl([4.0]))
    steps = (_zero_d(0), _zero_d(4))

    def after(h, ticket, *t):
        out = {1: [0]}
        for i in range(2):
            p, s = adagrad_step(t[i], t[2 + i], t[4 + i], int(t[6 + i]) + 1, 1e-2, lr_decay, wd, 1e-10, maximize)
            out[2 + i], out[6 + i], out[8 + i] = p, s, int(t[6 + i]) + 1
        return out

    return KernelExact("adagrad_multi_update_", (hyper, np.zeros(1, np.uint32), *PS, *GS, *sums, *steps), None,
                       variant=variant, after=after)


def _amp_unscale(variant, first):
    """GradScaler's unscale: each gradient times 2^-10 (exact), found_inf 1 iff one held an inf."""
    g0 = [first, -1.5, 2.0]
    return KernelExact("amp_unscale_multi_", (np.array(2.0 ** 10, np.float32), np.zeros(1, np.float32), Fl(g0),
                                              Fl([1024.0])), None, variant=variant,
                       after={1: [float(np.isinf(first))], 2: [v * 2.0 ** -10 for v in g0], 3: [1.0]})


def _amp_update(variant, found, tracker, want_scale, want_tracker, growth=2.0):
    """GradScaler's update from a scale of 1024 with an interval of 3 (torch's _amp_update_scale_)."""
    return KernelExact("amp_update_scale_", (np.array(1024.0, np.float32), np.array(tracker, np.int32),
                                             np.array(found, np.float32), growth, 0.5, 3), None, variant=variant,
                       after={0: want_scale, 1: want_tracker}, dtypes=("float32",))


AMP_ROWS = [_amp_unscale("finite", 0.5), _amp_unscale("inf", np.inf), _amp_unscale("minus-inf", -np.inf),
            _amp_update("backoff", 1.0, 2, 512.0, 0), _amp_update("count", 0.0, 1, 1024.0, 2),
            _amp_update("grow", 0.0, 2, 2048.0, 0), _amp_update("overflow-kept", 0.0, 2, 1024.0, 0, growth=1e300)]

MULTI_OPTIM_ROWS = [
    _multi_sgd("plain", 0.0, 0.0, 0.0, False),
    _multi_sgd("momentum", 0.9, 0.1, 0.01, False),
    _multi_sgd("nesterov-maximize", 0.9, 0.0, 0.01, True, True),
    _multi_adam("adam", 0.0, False),
    _multi_adam("adam-l2", 0.01, False),
    _multi_adam("adamw-amsgrad-maximize", 0.01, True, True, True),
    _multi_rmsprop("plain", 0.0, 0.0, False),
    _multi_rmsprop("centered-wd", 0.01, 0.0, True),
    _multi_rmsprop("centered-momentum-maximize", 0.01, 0.9, True, True),
    _multi_rmsprop("momentum", 0.0, 0.9, False),
    _multi_adagrad("plain", 0.0, 0.0),
    _multi_adagrad("decay-wd-maximize", 0.1, 0.01, True),
]

ROWS = (_pointwise_rows() + SAVED_Y_ROWS + KINK_ROWS + _bias_act_rows() + DROPOUT_ROWS + IN_PLACE_ROWS + SOFTMAX_ROWS
        + LOSS_ROWS + NORM_ROWS + OPTIM_ROWS + MULTI_OPTIM_ROWS + AMP_ROWS)
