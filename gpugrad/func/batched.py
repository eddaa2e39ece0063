"""Batched tensors: how ``vmap`` shows a function one sample while it computes all of them at once.

Design. vmap is a functional transform: inside the function a tensor looks unbatched (``x.shape``, ``x.dim()``,
``x.size(0)`` are the sample's), yet each op runs once over the whole batch. gpugrad does it with a wrapper, as
functorch does, rather than with a flag that ops consult, because gpugrad's frontends and methods read a tensor's
shape (and sometimes its array) before they reach ``Op.apply``; only a tensor that *is* different can answer those
reads with the sample's view. So:

- A ``BatchedTensor`` is a ``gpugrad.Tensor`` whose ``_value`` is an ordinary tensor holding every sample, with one
  leading dim per vmap level it is batched at (``_levels``, outermost first, in that order). Its ``_data`` is a
  ``SampleArray``: the sample's shape, dtype and strides, so every metadata read (``shape``, ``ndim``, ``numel``,
  ``dtype``, ``is_contiguous``) sees one sample with no code of its own. Reading its values raises
  ``NeedsPerSample``, which the vmap of that level catches to run its function once per sample: a frontend that
  computes on arrays (``sort``, ``max(dim)``, ``nonzero``) still gives the right answer, slowly, and says so once.
- ``Op.apply`` hands every op to ``dispatch.dispatch`` while a vmap runs (``core/batching.py``): the op's batching
  rule (``rules.py``) computes on the ``_value``s, or a loop over the samples does. The autograd graph and the
  forward-mode tangents live on the ``_value``s, so reverse and forward mode work unchanged underneath; the
  transforms (``grad``, ``vjp``, ``jvp``) move levels between a wrapper and its value's dims where they need to.
- In-place ops on a batched tensor write into its value (``_inplace``), with the value's own version counter and
  view tracking.
"""
from __future__ import annotations

import math

from gpugrad._tensor import Tensor
from gpugrad.core.tensor import TensorBase, as_operand, make
from gpugrad.func.levels import SIZES, NeedsPerSample, check_alive, entry_point


def needs_per_sample(owner):
    check_alive(owner._levels)
    return NeedsPerSample(owner._levels, f"{entry_point()} reads the values of a batched tensor, which has no "
                          "batching rule")


class SampleArray:
    """A batched tensor's ``_data``: one sample's metadata, and its reshapes and casts (those of the tensor); any read
    of values raises ``NeedsPerSample``."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        self.owner = owner

    @property
    def _array(self):
        return self.owner._value._data

    @property
    def dtype(self):
        return self._array.dtype

    @property
    def shape(self):
        return self._array.shape[len(self.owner._levels):]

    @property
    def ndim(self):
        return self._array.ndim - len(self.owner._levels)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def itemsize(self):
        return self._array.itemsize

    @property
    def nbytes(self):
        return self.size * self._array.itemsize

    @property
    def strides(self):
        return self._array.strides[len(self.owner._levels):]

    @property
    def flags(self):
        return self._array.flags

    @property
    def base(self):  # the memory it views, so shares_memory (reshape's view test) sees the samples' buffer
        return self._array

    def reshape(self, *shape):  # the array of the batched tensor reshaped (the reshape rule makes it)
        return self.owner.reshape(*shape)._data

    def astype(self, dtype, copy=True):
        return self.owner.to(dtype=dtype)._data

    def _refuse(self, *args, **kwargs):
        raise needs_per_sample(self.owner)

    __array__ = __array_function__ = __array_ufunc__ = __getitem__ = __setitem__ = __iter__ = __len__ = _refuse
    __bool__ = __float__ = __int__ = __index__ = __neg__ = __pos__ = __abs__ = __invert__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refuse
    __hash__ = object.__hash__

    @property
    def __cuda_array_interface__(self):  # CuPy asks for it first (hasattr lets this through)
        raise needs_per_sample(self.owner)

    def __getattr__(self, name):  # copy, sum, take, ...: all read values
        if name.startswith("__"):
            raise AttributeError(name)
        raise needs_per_sample(self.owner)


_ITEM = ("vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over calling .item() on a "
         "Tensor, please try to rewrite what you're doing with other operations.")


class BatchedTensor(Tensor):
    """A tensor batched at some vmap levels, seen as one sample (see the module docstring)."""

    __slots__ = ("_levels", "_value")

    @property
    def _data(self):
        return SampleArray(self)

    @_data.setter
    def _data(self, array):
        raise RuntimeError("vmap: a batched tensor's memory cannot be swapped (Tensor.data = ...) inside vmap")

    @property
    def _fw_grad(self):  # forward mode's tangents live on the value (gpugrad.func.jvp puts them there)
        return None

    @_fw_grad.setter
    def _fw_grad(self, tangent):
        if tangent is not None:
            raise RuntimeError("vmap: forward_ad.make_dual of a batched tensor is not supported inside vmap; use "
                               "gpugrad.func.jvp instead")

    def __repr__(self):
        return f"BatchedTensor(levels={self._levels}, value={self._value!r})"

    # -- values: torch refuses them inside vmap -------------------------------------------------------------------
    def item(self):
        raise RuntimeError(_ITEM)

    def tolist(self):
        raise RuntimeError(_ITEM)

    def __bool__(self):
        raise RuntimeError("vmap: It looks like you're attempting to use a Tensor in some data-dependent control "
                           "flow. We don't support that yet, please shout over at "
                           "https://github.com/pytorch/functorch/issues/257 .")

    def numpy(self, *args, **kwargs):
        raise RuntimeError("vmap: numpy() of a batched tensor reads every sample; return the tensor from the "
                           "vmapped function and convert the result instead")

    __array__ = __dlpack__ = __reduce__ = numpy

    # -- autograd: the graph lives on the value -----------------------------------------------------------------
    @property
    def requires_grad(self):
        return self._value.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._value.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        self._value.requires_grad_(requires_grad)
        return self

    @property
    def grad_fn(self):
        return self._value.grad_fn

    @property
    def is_leaf(self):
        return self._value.is_leaf

    @property
    def grad(self):
        return None

    @grad.setter
    def grad(self, value):
        raise RuntimeError("vmap: a batched tensor has no .grad; compute gradients with gpugrad.func.grad or vjp")

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        raise RuntimeError("vmap: backward() is not supported inside vmap; compute gradients with gpugrad.func.grad "
                           "or gpugrad.func.vjp inside the vmapped function instead")

    def register_hook(self, *args, **kwargs):
        raise RuntimeError("vmap: hooks on batched tensors are not supported inside vmap")

    retain_grad = register_post_accumulate_grad_hook = register_hook

    @property
    def data(self):
        return batched(self._levels, self._value.data)

    @data.setter
    def data(self, value):
        self._data = value

    def detach(self):
        return batched(self._levels, self._value.detach())

    def detach_(self):
        self._value.detach_()
        return self

    # -- in place: written into the value ---------------------------------------------------------------------
    def _check_inplace(self, op, others=()):
        return False  # the value's own _inplace decides

    def _inplace(self, op, result_fn, others=(), fits=None):
        result = result_fn()
        if any(lv not in self._levels for lv in levels_of(result)):
            raise RuntimeError(
                f"vmap: {op}(self, *extra_args) is not possible because there exists a Tensor `other` in extra_args "
                "that has more elements than `self`. This happened due to `other` being vmapped over but `self` not "
                f"being vmapped over in a vmap; write out of place instead: `self = self.{op.rstrip('_')}(...)`")
        if tuple(result.shape) != tuple(self.shape):
            raise RuntimeError(f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(result.shape)}")
        value = full(result, self._levels)
        self._value._inplace(op, lambda: value, (value,))
        return self

    def _fill(self, value, op):
        if isinstance(value, TensorBase):
            return self._inplace(op, lambda: value.to(dtype=self.dtype).expand(self.shape))
        self._value._fill(value, op)
        return self

    # -- values without a graph: comparisons, tests and index reductions ---------------------------------------------
    def _compare(self, o, fn):
        return array_op(fn, (self, as_operand(o, self)))

    def __invert__(self):
        return array_op(lambda a: ~a, (self,))

    def _values(self, name, *others, **kw):
        axis = kw.pop("axis", False)
        if axis is False:  # elementwise: isnan, logical_and, ...
            return array_op(lambda *a: getattr(self._backend.xp, name)(*a, **kw), (self, *others))
        return array_reduce(self, name, axis, kw.get("keepdims", False))


def batched(levels, value):
    """``value`` (one leading dim per level) seen as one sample; ``value`` itself when ``levels`` is empty."""
    if not levels:
        return value
    t = object.__new__(BatchedTensor)
    t._value, t._levels, t._backend = value, levels, value._backend
    t._requires_grad = False
    t._grad = t._grad_fn = t._accumulator = t._base = t._view_fn = t._base_fn = t._fw_grad = None
    t._post_acc_hooks = None
    t._version_counter = value._version_counter
    t._inference = value._inference
    return t


def levels_of(x):
    return x._levels if type(x) is BatchedTensor else ()


def merge(a, b):
    return a if a == b or not b else b if not a else tuple(sorted(set(a) | set(b)))


def sizes(levels):
    check_alive(levels)
    return tuple(SIZES[lv] for lv in levels)


def aligned(x, levels):
    """x's value with one leading dim per level of ``levels`` (a superset of x's): size 1 where x is not batched."""
    own = levels_of(x)
    v = x._value if own else x
    if own == levels:
        return v
    it = iter(v.shape[:len(own)])
    return v.reshape(*(next(it) if lv in own else 1 for lv in levels), *v.shape[len(own):])


def full(x, levels):
    """``aligned``, with the size-1 dims expanded to the batch sizes."""
    a = aligned(x, levels)
    want = sizes(levels)
    return a if tuple(a.shape[:len(levels)]) == want else a.expand(*want, *a.shape[len(levels):])


def add_level(x, dim, level):
    """x (plain, or batched at older levels) batched at ``level`` along its sample dim ``dim``."""
    own = levels_of(x)
    v, k = (x._value if own else x), len(own)
    return batched(own + (level,), v.movedim(k + dim, k) if dim else v)


def remove_level(x, level, size, out_dim):
    """The inverse of add_level: ``level``'s dim becomes sample dim ``out_dim``; an output not batched there is
    expanded to ``size`` along it, as torch's vmap does."""
    own = levels_of(x)
    v, k = (x._value if own else x), len(own)
    n = v.ndim - k + 1
    if not -n <= out_dim < n:
        raise IndexError(f"vmap: out_dim {out_dim} is out of range for an output of {n - 1} dims (expected one in "
                         f"[{-n}, {n - 1}])")
    d = out_dim % n
    if level not in own:
        u = v.unsqueeze(k + d)
        return batched(own, u.expand(*u.shape[:k + d], size, *u.shape[k + d + 1:]))
    i = own.index(level)
    rest = own[:i] + own[i + 1:]
    return batched(rest, v.movedim(i, len(rest) + d))


def padded(array, k, ndim):
    """An array with k leading batch dims and its sample dims padded with leading 1s to ``ndim``."""
    n = array.ndim - k
    return array if n >= ndim else array.reshape(array.shape[:k] + (1,) * (ndim - n) + array.shape[k:])


def array_op(fn, operands):
    """``fn`` on the arrays of batched and plain operands broadcast per sample (no graph: comparisons, tests)."""
    levels = ()
    for o in operands:
        levels = merge(levels, levels_of(o))
    k = len(levels)
    arrays = [aligned(o, levels)._data if type(o) is BatchedTensor else o._data if isinstance(o, TensorBase)
              else o for o in operands]
    ndim = max((a.ndim - (k if type(o) is BatchedTensor else 0) for o, a in zip(operands, arrays)
                if isinstance(o, TensorBase)), default=0)
    arrays = [padded(a, k, ndim) if type(o) is BatchedTensor else a for o, a in zip(operands, arrays)]
    be = operands[0]._backend
    out = be.as_array(fn(*arrays))
    return batched(levels, make(out, be).expand(*sizes(levels), *out.shape[k:]) if out.shape[:k] != sizes(levels)
                   else make(out, be))


def array_reduce(x, name, axis, keepdims):
    """argmax/argmin/all/any/count_nonzero of each sample over ``axis`` (None: all of it)."""
    k, n = len(x._levels), x.ndim
    a = x._value._data
    xp = x._backend.xp
    if axis is None and name in ("argmax", "argmin"):  # over the flattened sample
        out = getattr(xp, name)(a.reshape(a.shape[:k] + (-1,)), axis=-1)
        out = out.reshape(out.shape + (1,) * n) if keepdims else out
    else:
        axes = tuple(range(k, k + n)) if axis is None else tuple(
            k + d % max(n, 1) for d in (axis if isinstance(axis, tuple) else (axis,))) if n else ()
        kw = {"keepdims": keepdims} if name != "count_nonzero" else {}
        out = getattr(xp, name)(a, axis=axes[0] if name in ("argmax", "argmin") else axes, **kw)
    return batched(x._levels, make(x._backend.as_array(out), x._backend))
