"""Ops that move data between dtypes, devices and buffers."""
from __future__ import annotations

from gpugrad.backend import CPU
from gpugrad.core.op import Op
from gpugrad.core.registry import register
from gpugrad.core.views import OVERLAP, overlaps


@register("cast")
class Cast(Op):
    """y = x.astype(dtype).  VJP: gy cast back (the engine casts every gradient to its input's dtype)."""
    formula = "gx = gy cast back to x's dtype"
    linear = batched_jvp = True  # no axes: B tangents at once as they are
    double_backward = True
    node_name = "ToCopyBackward0"

    def forward(self, xp, x):
        if xp.dtype(self.dtype).kind == "c" and self.needs_input_grad[0]:
            raise RuntimeError(_NO_COMPLEX.format(what=f"cast a tensor of {x.dtype} to {xp.dtype(self.dtype)}"))
        return x.astype(self.dtype)

    def backward(self, xp, gy):
        return gy


# NOTE: torch differentiates through complex tensors (Wirtinger calculus); gpugrad has no complex autograd, so a cast
# of a tensor with a graph (or a tangent) into a complex dtype is refused rather than silently detached (README).
_NO_COMPLEX = ("{what}: gpugrad has no complex autograd, and this tensor requires grad (or carries a forward-mode "
               "tangent); cast x.detach(), or compute under gpugrad.no_grad()")


@register("to_device")
class ToDevice(Op):
    """y = x copied to another device.  VJP: gy copied back to x's device."""
    formula = "gx = gy copied back to x's device"
    linear = batched_jvp = True  # no axes: B tangents at once as they are
    changes_device = True
    node_name = "ToCopyBackward0"

    def forward(self, xp, x):
        return _move(x, self.source, self.target)

    def backward(self, xp, gy):
        return _move(gy, self.target, self.source)


def _move(array, source, target):
    return source.to_host(array) if target is CPU else target.asarray(array)


@register("clone")
class Copy(Op):
    """y = a copy of x in a fresh buffer, in x's layout (clone) or C order (``order="C"``: contiguous()).
    VJP: gx = gy.  CloneBackward0 as in torch."""
    formula = "gx = gy"
    linear = batched_jvp = True  # no axes: B tangents at once as they are
    double_backward = True
    order = "K"

    def forward(self, xp, x):
        return xp.array(x, copy=True, order=self.order)

    def backward(self, xp, gy):
        return gy

    @staticmethod
    def clone(input, *, memory_format=None):
        """A copy in fresh memory that stays in the graph (CloneBackward0)."""
        return Copy.apply(input)


@register("index_place")
class IndexPlace(Op):
    """y = zeros(shape) with y[key] = value (the value side of ``t[key] = value``).  VJP: gvalue = gy[key]."""
    formula = "gvalue = gy[key]"
    linear = True
    node_name = "IndexPutBackward0"

    def forward(self, xp, value):
        y = xp.zeros(self.shape, dtype=value.dtype)
        y[self.key] = value
        return y

    def backward(self, xp, gy):
        return gy[self.key]


@register("as_view")
class AsView(Op):
    """y = view_fn(x): a view of x re-derived after x was changed in place (basic slices, reshapes, transposes and
    expands; ``view_fn`` maps an array to the view).  VJP: gx = zeros with gy written into the view, or added where
    the view repeats elements (an expand)."""
    formula = "gx = zeros with gy written into the view (added where it repeats elements)"
    linear = True
    node_name = "AsStridedBackward0"

    def forward(self, xp, x):
        self.in_shape = x.shape
        return self.view_fn(x)

    def backward(self, xp, gy):
        gx = xp.zeros(self.in_shape, dtype=gy.dtype)
        view = self.view_fn(gx)
        if not overlaps(view):
            view[...] = gy
            return gx
        flat = gx.reshape(-1)  # each view element's position in x, from the same view of x's positions
        xp.add.at(flat, self.view_fn(xp.arange(flat.size).reshape(self.in_shape)), gy)
        return flat.reshape(self.in_shape)


@register("copy_slices")
class CopySlices(Op):
    """y = base with its region ``view_fn(base)`` replaced by value: an in-place op on a view, as a graph node
    of the base (torch's CopySlices).  VJP: gbase = gy with that region zeroed; gvalue = gy's region."""
    formula = "gbase = gy with the region zeroed, gvalue = gy's region"
    linear = True
    node_name = "CopySlices"

    def forward(self, xp, base, value):
        out = base.copy()
        self.view_fn(out)[...] = value
        return out

    def backward(self, xp, gy):
        gbase = gy.copy()
        region = self.view_fn(gbase)
        if overlaps(region):  # fill_ / zero_ of an expand: torch's forward allows it, its backward raises
            raise RuntimeError(OVERLAP)
        region[...] = 0
        return gbase, self.view_fn(gy)


@register("overwrite")
class Overwrite(Op):
    """y = src (a Tensor or a scalar) broadcast to old's shape, in old's dtype: old's values replaced by copy_,
    fill_ or zero_ on a tensor with a graph (torch's CopyBackwards, FillBackward2, ZeroBackward0).

    VJP: gold = 0, a constant: the replaced values get a zero gradient and, under create_graph, no edge into their
    history (a second-order pass never reaches it); gsrc = gy (the engine sums and casts it back to src)."""
    formula = "gold = 0, gsrc = gy"
    linear = True
    double_backward = True
    node_name = "CopyBackwards"

    def forward(self, xp, old, src):
        out = xp.empty(old.shape, dtype=old.dtype)
        out[...] = src
        return out

    def backward(self, xp, gy):
        return (xp.zeros_like(gy) if self.needs_input_grad[0] else None), gy
