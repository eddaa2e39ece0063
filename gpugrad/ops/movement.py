"""Shape and indexing ops.  Views where the backend gives views; VJPs undo the movement."""
from __future__ import annotations

from gpugrad.autograd.function import Op
from gpugrad.ops import register


@register("reshape")
class Reshape(Op):
    """y = x viewed with a new shape.  VJP: gx = gy reshaped back.  ViewBackward0 as in torch."""
    double_backward = True
    _name = "ViewBackward0"

    def forward(self, xp, x):
        self.in_shape = x.shape
        try:
            return x.reshape(self.shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) "
                             f"into {self.shape}") from None

    def backward(self, xp, gy):
        return gy.reshape(self.in_shape)


@register("permute")
class Permute(Op):
    """y = x with axes permuted.  VJP: gx = gy permuted by the inverse permutation."""
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


@register("expand")
class Expand(Op):
    """y = x broadcast to ``shape`` (a view).  VJP: gy itself: the engine sums it back to x's shape."""
    double_backward = True

    def forward(self, xp, x):
        shape = tuple(x.shape[i - (len(self.shape) - x.ndim)] if s == -1 else s for i, s in enumerate(self.shape))
        try:
            return xp.broadcast_to(x, shape)
        except ValueError:
            raise ValueError(f"expand: shape {x.shape} cannot be expanded to {self.shape}") from None

    def backward(self, xp, gy):
        return gy


@register("squeeze")
class Squeeze(Op):
    """Drop size-1 axes (all, or the given ones).  VJP: reshape back.  SqueezeBackward0/1 as in torch."""
    double_backward = True

    def forward(self, xp, x):
        self.in_shape = x.shape
        if self.axis is None:
            self._name = "SqueezeBackward0"
            return x.reshape(tuple(n for n in x.shape if n != 1))
        self._name = "SqueezeBackward1"
        axes = {a % x.ndim for a in (self.axis if isinstance(self.axis, tuple) else (self.axis,))}
        # torch semantics: naming an axis that is not of size 1 leaves it alone
        return x.reshape(tuple(n for i, n in enumerate(x.shape) if not (i in axes and n == 1)))

    def backward(self, xp, gy):
        return gy.reshape(self.in_shape)


@register("unsqueeze")
class Unsqueeze(Op):
    """Insert a size-1 axis.  VJP: reshape back."""
    double_backward = True

    def forward(self, xp, x):
        self.in_shape = x.shape
        return xp.expand_dims(x, self.axis)

    def backward(self, xp, gy):
        return gy.reshape(self.in_shape)


@register("index")
class Index(Op):
    """y = x[key] (slices, integers, integer arrays, boolean masks).

    VJP: scatter-add gy into zeros of x's shape, so repeated integer indices add up (``xp.add.at``).
    """

    def forward(self, xp, x):
        self.in_shape = x.shape
        return x[self.key]

    def backward(self, xp, gy):
        gx = xp.zeros(self.in_shape, dtype=gy.dtype)
        if _is_basic(self.key):
            gx[self.key] = gy  # a basic index never repeats an element: plain assignment is exact
        else:
            xp.add.at(gx, self.key, gy)
        return gx


def _is_basic(key):
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice)) for k in keys)


@register("cat")
class Cat(Op):
    """y = concatenate(xs, axis).  VJP: gy split back into the inputs' extents."""
    double_backward = True

    def forward(self, xp, *xs):
        self.sizes = [x.shape[self.axis] for x in xs]
        return xp.concatenate(xs, axis=self.axis)

    def backward(self, xp, gy):
        out, start = [], 0
        axis = self.axis % gy.ndim
        for n in self.sizes:
            out.append(gy[(slice(None),) * axis + (slice(start, start + n),)])
            start += n
        return tuple(out)


@register("stack")
class Stack(Op):
    """y = stack(xs, axis).  VJP: gx_i = gy taken at i along axis."""
    double_backward = True

    def forward(self, xp, *xs):
        y = xp.stack(xs, axis=self.axis)
        self.axis %= y.ndim
        return y

    def backward(self, xp, gy):
        return tuple(gy[(slice(None),) * self.axis + (i,)] for i in range(gy.shape[self.axis]))


@register("gather")
class Gather(Op):
    """y = take_along_axis(x, index, axis).  VJP: scatter-add gy back at the same positions."""

    def forward(self, xp, x):
        self.in_shape = x.shape
        return xp.take_along_axis(x, self.index, axis=self.axis)

    def backward(self, xp, gy):
        index, axis = self.index, self.axis % len(self.in_shape)
        full = []
        for d, n in enumerate(index.shape):
            if d == axis:
                full.append(index)
            else:
                shape = [1] * index.ndim
                shape[d] = n
                full.append(xp.arange(n).reshape(shape))
        gx = xp.zeros(self.in_shape, dtype=gy.dtype)
        xp.add.at(gx, tuple(full), gy)
        return gx
