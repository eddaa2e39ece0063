"""Shape and indexing ops.  Views where the backend gives views; VJPs undo the movement."""
from __future__ import annotations

from gpugrad.backend import deferred
from gpugrad.core.args import basic_key, canonical_axis, dims, index_array, sizes
from gpugrad.core.node import Node, SeveralOutputs, grad_edge
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.core.tensor import TensorBase, make, new
from gpugrad.core.views import mark_view, shares_memory, writable_broadcast


@register("reshape")
class Reshape(Op):
    """y = x viewed with a new shape.  VJP: gx = gy reshaped back.  ViewBackward0 as in torch."""
    formula = "gx = gy reshaped back"
    linear = True
    double_backward = True
    node_name = "ViewBackward0"

    def forward(self, xp, x):
        self.in_shape = x.shape
        try:
            return x.reshape(self.shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) "
                             f"into {self.shape}") from None

    def backward(self, xp, gy):
        return gy.reshape(self.in_shape)

    def jvp_batched(self, ts, out, batch):
        return ts[0].reshape((batch, *out.shape))

    @staticmethod
    def reshape(input, *shape):
        """The same elements in a new shape: a view when the strides allow it (it shares memory), else a copy."""
        out = Reshape.apply(input, shape=sizes(shape))
        if not shares_memory(out, input):  # reshaping a non-contiguous tensor copies: that is no view
            return out
        new_shape = out.shape
        return mark_view(out, input, lambda a: a.reshape(new_shape))


@register("permute")
class Permute(Op):
    """y = x with axes permuted.  VJP: gx = gy permuted by the inverse permutation."""
    formula = "gx = gy permuted back"
    linear = True
    double_backward = True

    def forward(self, xp, x):
        if sorted(a % max(x.ndim, 1) for a in self.axes) != list(range(x.ndim)):
            raise ValueError(f"permute: {self.axes} is not a permutation of the {x.ndim} axes of shape {x.shape}")
        self.axes = tuple(a % x.ndim for a in self.axes)
        return xp.transpose(x, self.axes)

    def backward(self, xp, gy):
        inverse = [0] * len(self.axes)
        for i, a in enumerate(self.axes):
            inverse[a] = i
        return xp.transpose(gy, tuple(inverse))

    def jvp_batched(self, ts, out, batch):
        return ts[0].permute((0, *(a + 1 for a in self.axes)))

    @staticmethod
    def permute(input, *dims):
        """A view with the axes in the order ``dims``."""
        if not dims:
            raise TypeError('permute() missing 1 required positional arguments: "dims"')
        axes = sizes(dims)
        out = Permute.apply(input, axes=axes)
        normalized = tuple(a % max(input.ndim, 1) for a in axes)
        return mark_view(out, input, lambda a: a.transpose(normalized))


@register("expand", function=False)
class Expand(Op):
    """y = x broadcast to ``shape`` (a view).  VJP: gy itself: the engine sums it back to x's shape."""
    formula = "gx = gy summed over the expanded axes"
    linear = True
    double_backward = True

    def forward(self, xp, x):
        lead = len(self.shape) - x.ndim  # new leading axes; -1 ("keep this size") only names an existing one
        if lead < 0:
            raise ValueError(f"expand: shape {x.shape} cannot be expanded to {self.shape}: give at least "
                             f"{x.ndim} sizes")
        if -1 in self.shape[:lead]:
            raise ValueError(f"expand: shape {x.shape} cannot be expanded to {self.shape}: -1 keeps an existing "
                             f"axis' size, but the first {lead} sizes are new leading axes")
        shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(self.shape))
        try:
            y = xp.broadcast_to(x, shape)
        except ValueError:
            raise ValueError(f"expand: shape {x.shape} cannot be expanded to {self.shape}") from None
        # No axis grew (only size-1 axes added): a plain, writable view, as torch lets in-place ops write into it.
        return x.reshape(shape) if y.size == x.size else y

    def backward(self, xp, gy):
        return gy

    def jvp_batched(self, ts, out, batch):
        t = ts[0]
        lead = out.ndim - (t.ndim - 1)  # the new leading axes go after the batch axis
        return t.reshape((batch, *(1,) * lead, *t.shape[1:])).expand((batch, *out.shape))

    @staticmethod
    def expand(input, *shape):
        """A view broadcast to ``shape`` (-1 keeps a size); writable where no element repeats, as torch's."""
        out = Expand.apply(input, shape=sizes(shape))
        if not isinstance(out._data, input._backend.array_type):  # batched by gpugrad.func.vmap: its rule made it
            return out
        new_shape, xp = out.shape, input._backend.xp
        out._data = writable_broadcast(xp, input._data, new_shape)
        return mark_view(out, input, lambda a: writable_broadcast(xp, a, new_shape))


@register("squeeze")
class Squeeze(Op):
    """Drop size-1 axes (all, or the given ones).  VJP: reshape back.  SqueezeBackward0/1 as in torch."""
    formula = "gx = gy reshaped back"
    linear = True
    double_backward = True

    def forward(self, xp, x):
        self.in_shape = x.shape
        if self.axis is None:
            self._name = "SqueezeBackward0"
            return x.reshape(tuple(n for n in x.shape if n != 1))
        self._name = "SqueezeBackward1"
        axes = self.axis if isinstance(self.axis, tuple) else (self.axis,)
        axes = {canonical_axis(a, x.ndim, "squeeze") for a in axes}
        # torch semantics: naming an axis that is not of size 1 leaves it alone
        return x.reshape(tuple(n for i, n in enumerate(x.shape) if not (i in axes and n == 1)))

    def backward(self, xp, gy):
        return gy.reshape(self.in_shape)

    jvp_batched = Reshape.jvp_batched

    @staticmethod
    def squeeze(input, dim=None, **kw):
        return _reshaped_view(Squeeze.apply(input, axis=dims(dim, False, kw, "squeeze")["axis"]), input)


@register("unsqueeze")
class Unsqueeze(Op):
    """Insert a size-1 axis.  VJP: reshape back."""
    formula = "gx = gy reshaped back"
    linear = True
    double_backward = True

    def forward(self, xp, x):
        self.in_shape = x.shape
        return xp.expand_dims(x, canonical_axis(self.axis, x.ndim, "unsqueeze", new=1))

    def backward(self, xp, gy):
        return gy.reshape(self.in_shape)

    jvp_batched = Reshape.jvp_batched

    @staticmethod
    def unsqueeze(input, dim=None, **kw):
        return _reshaped_view(Unsqueeze.apply(input, axis=dims(dim, False, kw, "unsqueeze")["axis"]), input)


@register("diagonal")
class Diagonal(Op):
    """y = the diagonal of the planes (dim1, dim2) of x (``offset`` above the main one if > 0, below if < 0), as the
    last dim: a view, so writes into x show in y and writes into y reach x, as torch's.
    VJP: gx = zeros of x's shape with gy written on that diagonal."""
    formula = "gx = zeros of x's shape, gy on the diagonal"
    linear = True

    def forward(self, xp, x):
        self.in_shape = x.shape
        if x.ndim < 2:
            raise RuntimeError(f"diagonal(): expected a tensor with at least 2 dimensions, got shape {x.shape}")
        self.d1, self.d2 = (canonical_axis(d, x.ndim, "diagonal") for d in (self.dim1, self.dim2))
        if self.d1 == self.d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {self.dim1}, {self.dim2}")
        return diagonal_view(x, self.offset, self.d1, self.d2)

    def backward(self, xp, gy):
        gx = xp.zeros(self.in_shape, dtype=gy.dtype)
        diagonal_view(gx, self.offset, self.d1, self.d2)[...] = gy
        return gx

    def jvp_batched(self, ts, out, batch):
        return Diagonal.apply(ts[0], offset=self.offset, dim1=self.d1 + 1, dim2=self.d2 + 1)

    @staticmethod
    def diagonal(input, offset=0, dim1=0, dim2=1):
        """The diagonal ``offset`` of the planes (dim1, dim2) as the last dim: a view (DiagonalBackward0)."""
        out = Diagonal.apply(input, offset=offset, dim1=dim1, dim2=dim2)
        d1, d2 = dim1 % input.ndim, dim2 % input.ndim
        return mark_view(out, input, lambda a: diagonal_view(a, offset, d1, d2))


def diagonal_view(a, offset, d1, d2):
    """``a.diagonal(...)``, writable where ``a`` is: NumPy marks its diagonals read-only (CuPy's are writable)."""
    y = a.diagonal(offset, d1, d2)
    if not getattr(y.flags, "writeable", True) and a.flags.writeable:
        y.flags.writeable = True
    return y


def _reshaped_view(out, input):
    shape = out.shape
    return mark_view(out, input, lambda a: a.reshape(shape))


@register("index", method=False)  # Tensor.__getitem__ (methods/movement.py)
class Index(Op):
    """y = x[key] (slices, integers, integer arrays, boolean masks).

    VJP: scatter-add gy into zeros of x's shape, so repeated integer indices add up (``xp.add.at``).
    """
    formula = "gx = gy scattered (added) back to the indexed positions"
    linear = True
    lone_slice = False  # x[a:b] (not x[a:b, ...]): named as torch names it

    def forward(self, xp, x):
        self.in_shape = x.shape
        if basic_key(self.key):
            self._name = "SliceBackward0" if self.lone_slice else _basic_name(self.key, x.shape)
            return x[self.key]
        # a copy in C order, as torch's (NumPy's advanced indexing along a later axis may give another layout, and
        # .view() of it would then fail where torch's succeeds)
        return xp.ascontiguousarray(x[self.key])

    def backward(self, xp, gy):
        gx = xp.zeros(self.in_shape, dtype=gy.dtype)
        if basic_key(self.key):
            gx[self.key] = gy  # a basic index never repeats an element: plain assignment is exact
        else:
            xp.add.at(gx, self.key, gy)
        return gx

    def jvp_batched(self, ts, out, batch):  # a basic key indexes the same way behind a leading batch axis
        if not basic_key(self.key):
            return None
        return ts[0][(slice(None),) + (self.key if isinstance(self.key, tuple) else (self.key,))]


def _basic_name(key, shape):
    """torch's node for a basic index: the last view it applies (Select, Slice, Unsqueeze); a slice over a whole
    dim applies none, and with none at all the result is an alias (x[:, :], x[...]); torch's path for a lone slice
    (x[:]) always slices."""
    keys = key if isinstance(key, tuple) else (key,)
    name, dim = "AliasBackward0", 0
    for k in keys:
        if k is Ellipsis:
            dim += len(shape) - sum(isinstance(j, (int, slice)) for j in keys)
        elif k is None:
            name = "UnsqueezeBackward0"
        else:
            if isinstance(k, int):
                name = "SelectBackward0"
            elif k.indices(shape[dim]) != (0, shape[dim], 1):
                name = "SliceBackward0"
            dim += 1
    return name


def tensors_of(xs, op):
    """A sequence argument (cat, stack) as Tensors: other array-likes join as tensors on the first one's device."""
    xs = list(xs)
    if not xs:  # torch's errors: cat's a ValueError, the stacks' a RuntimeError
        if op == "cat":
            raise ValueError("gpugrad.cat(): expected a non-empty list of Tensors")
        raise RuntimeError(f"{op} expects a non-empty TensorList")
    device = xs[0].device if isinstance(xs[0], TensorBase) else None
    return [x if isinstance(x, TensorBase) else new(x, device=device) for x in xs]


def _dim0(dim, axis, op):
    d = dims(dim, False, {} if axis is None else {"axis": axis}, op)["axis"]
    return 0 if d is None else d


@register("cat", method=False, function=True)
class Cat(Op):
    """y = concatenate(xs, axis).  VJP: gy split back into the inputs' extents."""
    formula = "gx_i = gy's slice of input i along the axis"
    linear = promotes = True
    double_backward = True

    def forward(self, xp, *xs):
        # as torch: 1-D empty tensors are skipped beside tensors of other ranks (their gradient is empty too)
        ref = next((x for x in xs if not _legacy_empty(x)), xs[0])
        self.skip = [x is not ref and _legacy_empty(x) and ref.ndim != 1 for x in xs]
        kept = [x for x, s in zip(xs, self.skip) if not s]
        if _legacy_empty(ref):  # every input a 1-D empty: torch checks no dim, the result is (0,)
            self.axis = 0
        self.axis = _check_cat(kept, self.axis)
        self.sizes = [0 if s else x.shape[self.axis] for x, s in zip(xs, self.skip)]
        self.ndim = ref.ndim
        return xp.concatenate(kept, axis=self.axis)

    def jvp_batched(self, ts, out, batch):
        return Cat.apply(*ts, axis=self.axis % self.ndim + 1)

    def backward(self, xp, gy):
        out, start = [], 0
        axis = self.axis % gy.ndim
        for n, skipped in zip(self.sizes, getattr(self, "skip", [False] * len(self.sizes))):
            if n == 0 and (gy.ndim == 1 or skipped):  # torch's cat_tensors_backward: a constant for a (0,) input
                out.append(xp.zeros_like(gy).reshape(-1)[:0])
                continue
            out.append(gy[(slice(None),) * axis + (slice(start, start + n),)])
            start += n
        return tuple(out)

    @staticmethod
    def cat(tensors, dim=None, *, axis=None):
        """Concatenate along an existing dim (default 0).  NumPy's ``axis=`` is an alias of ``dim``."""
        return Cat.apply(*tensors_of(tensors, "cat"), axis=_dim0(dim, axis, "cat"))


def _legacy_empty(x):
    """A (0,) tensor: torch's cat skips those (its old stand-in for an empty tensor of any rank)."""
    return x.ndim == 1 and x.shape[0] == 0


def _check_cat(xs, axis):
    """torch's checks of cat's operands (each of rank >= 1, one rank, equal sizes but along ``axis``): the axis."""
    for i, x in enumerate(xs):
        if x.ndim == 0:
            raise RuntimeError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated")
    axis = canonical_axis(axis, xs[0].ndim, "cat")  # torch wraps the dim against the first tensor, then checks ranks
    for x in xs[1:]:
        if x.ndim != xs[0].ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {xs[0].ndim} and {x.ndim}")
    for i, x in enumerate(xs[1:], 1):
        for d, (a, b) in enumerate(zip(xs[0].shape, x.shape)):
            if d != axis and a != b:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {axis}. Expected size {a} but "
                                   f"got size {b} for tensor number {i} in the list.")
    return axis


@register("stack", method=False, function=True)
class Stack(Op):
    """y = stack(xs, axis).  VJP: gx_i = gy taken at i along axis."""
    formula = "gx_i = gy at i along the axis"
    linear = promotes = True
    double_backward = True

    def forward(self, xp, *xs):
        for i, x in enumerate(xs[1:], 1):
            if x.shape != xs[0].shape:
                raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(xs[0].shape)} at entry "
                                   f"0 and {list(x.shape)} at entry {i}")
        self.axis = canonical_axis(self.axis, xs[0].ndim, "stack", new=1)
        return xp.stack(xs, axis=self.axis)

    def backward(self, xp, gy):
        return tuple(gy[(slice(None),) * self.axis + (i,)] for i in range(gy.shape[self.axis]))

    def jvp_batched(self, ts, out, batch):
        return Stack.apply(*ts, axis=self.axis + 1)

    @staticmethod
    def stack(tensors, dim=None, *, axis=None):
        """Stack along a new dim (default 0).  NumPy's ``axis=`` is an alias of ``dim``."""
        return Stack.apply(*tensors_of(tensors, "stack"), axis=_dim0(dim, axis, "stack"))


@register("gather")
class Gather(Op):
    """torch.gather: y[i][j] = x[index[i][j]][j] for axis 0, and so on.

    index has x's number of axes and is no larger than x along the others, where x is cut to index's extent
    (so y has index's shape).  VJP: scatter-add gy into zeros of x's shape at the same positions.
    """
    formula = "gx = gy scattered (added) back to the gathered positions"
    linear = True

    def forward(self, xp, x):
        index = self.index
        self.in_shape = x.shape
        axis = self.axis = canonical_axis(self.axis, x.ndim, "gather")
        if index.dtype.kind not in "iu":
            raise TypeError(f"gather: index must hold integers, got dtype {index.dtype}")
        if index.ndim != x.ndim:
            raise ValueError(f"gather: index of shape {index.shape} must have as many axes as the input {x.shape}")
        if index.size and any(i > n for d, (i, n) in enumerate(zip(index.shape, x.shape)) if d != axis):
            raise ValueError(f"gather: index of shape {index.shape} must be no larger than the input {x.shape} "
                             f"along every axis but {axis}")
        if x.ndim == 0:  # torch takes a 0-d input as one element along axis 0
            x, self.index = x.reshape(1), index.reshape(1)
        # Cut x to index's extent on the other axes: take_along_axis would broadcast index against x there instead.
        x = x[tuple(slice(None) if d == axis else slice(0, i) for d, i in enumerate(self.index.shape))]
        n = x.shape[axis]
        # An id outside [0, n) is an error, not a wrap-around (negative ids) or an out-of-bounds read: raised now on
        # the CPU, and on CUDA at the next read, checked by a kernel without a sync (backend/deferred.py).
        deferred.check_range(index, n, RuntimeError, f"gather(): index {{bad}} is out of bounds for dimension {axis} "
                             f"with size {n} (input of shape {self.in_shape})")
        return xp.take_along_axis(x, self.index, axis=axis).reshape(index.shape)

    def backward(self, xp, gy):
        index, axis = self.index, self.axis
        full = []
        for d, n in enumerate(index.shape):
            if d == axis:
                full.append(index)
            else:
                shape = [1] * index.ndim
                shape[d] = n
                full.append(xp.arange(n).reshape(shape))
        # arange(index.shape[d]) spans only the part of x that forward kept: the rest of gx stays 0
        gx = xp.zeros(self.in_shape or (1,), dtype=gy.dtype)
        xp.add.at(gx, tuple(full), gy.reshape(index.shape))
        return gx.reshape(self.in_shape)

    @staticmethod
    def gather(input, dim=None, index=None, **kw):
        """torch.gather: ``out[i][j] = input[index[i][j]][j]`` for dim 0, and so on."""
        idx = index_array(index, input, "gather")
        return Gather.apply(input, index=idx, axis=dims(dim, False, kw, "gather")["axis"])


class Pieces(SeveralOutputs, Node):
    """The one node of the views ``unbind`` and ``split`` return, as torch's (UnbindBackward0, SplitBackward0,
    SplitWithSizesBackward0): each piece is one of its outputs, so a hook on a piece that got no gradient is called
    with None when another piece's gradient arrives, as in torch.  VJP: the pieces' gradients (zeros where one got
    none) stacked (unbind) or concatenated (split) along the axis."""

    def __init__(self, input, pieces, axis, stacked, name):
        self._be, self.axis, self.stacked, self._name = input._backend, axis, stacked, name
        self.n_outputs = len(pieces)
        self.next_functions = ((grad_edge(input), 0),)
        self._in_meta = ((input._data.shape, input._data.dtype),)
        self._metas = [(p._data.shape, p._data.dtype) for p in pieces]
        for k, p in enumerate(pieces):
            p._grad_fn = self.output_slot(k, self._metas[k])

    def name(self):
        return self._name

    def run_backward(self, grads, create_graph):
        self.call_hooks_of_unused_outputs(grads)
        xp = self._be.xp
        if create_graph:
            parts = [g if g is not None else make(xp.zeros(*m), self._be) for g, m in zip(grads, self._metas)]
            return ((Stack if self.stacked else Cat).apply(*parts, axis=self.axis),)
        parts = [g if g is not None else xp.zeros(*m) for g, m in zip(grads, self._metas)]
        return ((xp.stack if self.stacked else xp.concatenate)(parts, axis=self.axis),)
