"""Pointwise ops that combine several tensors with options: ``addcmul`` and ``addcdiv`` (input + value * t1 op t2),
``lerp`` (a weighted step from start towards end) and ``atan2`` (the angle of (other, input)).

Each is elementwise, so its JVP is the sum of its VJPs of the tangents (``Op.elementwise``), and each VJP uses only
operations that Tensors have too, so create_graph differentiates it again.  The engine sums broadcast dims.
"""
from __future__ import annotations

import math
import numbers

from gpugrad.core.names import type_name
from gpugrad.core.op import Op
from gpugrad.core.registry import composite, register
from gpugrad.core.tensor import TensorBase, as_operand


def _check_broadcast(*tensors):
    """torch's error for shapes that do not broadcast (NumPy would raise a ValueError deep inside the op)."""
    shape = ()
    for k, t in enumerate(tensors):
        a, b = shape, tuple(t.shape)
        for d in range(1, min(len(a), len(b)) + 1):
            if a[-d] != b[-d] and 1 not in (a[-d], b[-d]):
                raise RuntimeError(f"The size of tensor a ({a[-d]}) must match the size of tensor b ({b[-d]}) at "
                                   f"non-singleton dimension {max(len(a), len(b)) - d}")
        n = max(len(a), len(b))
        a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
        shape = tuple(max(x, y) if 1 in (x, y) else x for x, y in zip(a, b))


def _tensor_argument(op, name, position, value):
    if not isinstance(value, TensorBase):
        raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not {type(value).__name__}")


@register("addcmul", inplace=True)
class Addcmul(Op):
    """y = input + value * t1 * t2.  VJP: g_input = gy, g_t1 = gy * value * t2, g_t2 = gy * value * t1."""
    formula = "g_input = gy, g_t1 = gy * value * t2, g_t2 = gy * value * t1"
    promotes = True
    double_backward = elementwise = True

    def forward(self, xp, a, b, c):
        ng = self.needs_input_grad
        self.save_for_backward(c if ng[1] else None, b if ng[2] else None)
        return a + self.value * (b * c) if self.value != 1 else a + b * c

    def backward(self, xp, gy):
        c, b = self.saved
        gv = gy * self.value if self.value != 1 else gy
        return gy, (gv * c if c is not None else None), (gv * b if b is not None else None)

    @staticmethod
    def addcmul(input, tensor1, tensor2, *, value=1):
        """input + value * tensor1 * tensor2, broadcast."""
        _tensor_argument("addcmul", "tensor1", 2, tensor1)
        _tensor_argument("addcmul", "tensor2", 3, tensor2)
        _check_broadcast(input, tensor1, tensor2)
        if all(t.dtype.kind in "biu" for t in (input, tensor1, tensor2)) and isinstance(value, numbers.Integral):
            value = int(value)
        return Addcmul.apply(input, tensor1, tensor2, value=value)


@register("addcdiv", inplace=True)
class Addcdiv(Op):
    """y = input + value * t1 / t2.  VJP: g_input = gy, g_t1 = gy * value / t2, g_t2 = -gy * value * t1 / t2²."""
    formula = "g_input = gy, g_t1 = gy * value / t2, g_t2 = -gy * value * t1 / t2²"
    promotes = True
    double_backward = elementwise = True

    def forward(self, xp, a, b, c):
        ng = self.needs_input_grad
        self.save_for_backward(b if ng[2] else None, c)
        return a + self.value * (b / c) if self.value != 1 else a + b / c

    def backward(self, xp, gy):
        b, c = self.saved
        gv = gy * self.value if self.value != 1 else gy
        g1 = gv / c if self.needs_input_grad[1] else None
        g2 = -gv * b / (c * c) if b is not None else None
        return gy, g1, g2

    @staticmethod
    def addcdiv(input, tensor1, tensor2, *, value=1):
        """input + value * tensor1 / tensor2, broadcast (a true division: integer tensor1 and tensor2 refuse)."""
        _tensor_argument("addcdiv", "tensor1", 2, tensor1)
        _tensor_argument("addcdiv", "tensor2", 3, tensor2)
        _check_broadcast(input, tensor1, tensor2)
        if tensor1.dtype.kind in "biu" and tensor2.dtype.kind in "biu":
            raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future release addcdiv "
                               "will perform a true division of tensor1 and tensor2. Compute it as "
                               "input + value * (tensor1 / tensor2) for a true division, or convert them with .float()")
        return Addcdiv.apply(input, tensor1, tensor2, value=value)


@register("lerp", inplace=True)
class Lerp(Op):
    """y = start + weight * (end - start), computed as torch computes it (end - (end - start) * (1 - weight) for
    |weight| >= 1/2, so weight = 1 gives end exactly); weight a number (LerpBackward0) or a tensor (LerpBackward1).

    VJP: g_start = gy * (1 - weight), g_end = gy * weight, g_weight = gy * (end - start).
    """
    formula = "g_start = gy * (1 - weight), g_end = gy * weight, g_weight = gy * (end - start)"
    promotes = "same"  # as torch: start, end (and a tensor weight) of one dtype
    double_backward = elementwise = True

    def forward(self, xp, a, b, w=None):
        ng, given = self.needs_input_grad, w is not None
        self._name = "LerpBackward1" if given else "LerpBackward0"
        w = w if given else self.weight
        keep = given and ng[2]  # the weight's gradient reads start and end
        self.save_for_backward(w if given and (ng[0] or ng[1]) else None, a if keep else None, b if keep else None)
        d = b - a
        return xp.where(abs(w) < 0.5, a + w * d, b - d * (1 - w))

    def backward(self, xp, gy):
        w, a, b = self.saved
        ng = self.needs_input_grad
        w = w if len(ng) == 3 else self.weight
        ga = gy * (1 - w) if ng[0] else None
        gb = gy * w if ng[1] else None
        return (ga, gb) if len(ng) == 2 else (ga, gb, gy * (b - a) if a is not None else None)

    @staticmethod
    def lerp(input, end, weight):
        """input + weight * (end - input): weight a number or a Tensor (broadcast)."""
        _tensor_argument("lerp", "end", 2, end)
        for t in (input, end):
            if t.dtype.kind not in "fV":  # bfloat16 is ml_dtypes' kind "V"
                raise NotImplementedError(f"\"lerp_kernel_scalar\" not implemented for '{type_name(t.dtype)}'")
        if end.dtype != input.dtype:
            raise RuntimeError(f"expected dtype {input.dtype} for `end` but got dtype {end.dtype}")
        _check_broadcast(input, end, *([weight] if isinstance(weight, TensorBase) else []))
        if isinstance(weight, TensorBase):
            if weight.ndim == 0 and weight.dtype != input.dtype:
                weight = weight.to(dtype=input.dtype)  # a 0-d weight of another float dtype, as torch accepts
            return Lerp.apply(input, end, weight)
        return Lerp.apply(input, end, weight=weight)


@register("atan2", inplace=True)
class Atan2(Op):
    """y = atan2(input, other), the angle of the point (other, input) in (-pi, pi].

    VJP: g_input = gy * other / r², g_other = -gy * input / r² with r² = input² + other² (0 at the origin, as torch).
    """
    formula = "g_input = gy * other / r², g_other = -gy * input / r², r² = input² + other²"
    promotes = "float"  # integer inputs compute in the default float dtype
    double_backward = elementwise = True

    def forward(self, xp, a, b):
        self.save_for_backward(a, b)
        return xp.arctan2(a, b)

    def backward(self, xp, gy):
        a, b = self.saved
        r2 = a * a + b * b
        at_origin = r2 == 0
        scale = xp.where(at_origin, 0, gy / xp.where(at_origin, 1, r2))
        return (scale * b if self.needs_input_grad[0] else None), (-scale * a if self.needs_input_grad[1] else None)

    def jvp(self, xp, ins, out, ts):  # torch's (other t_input - input t_other) / r²: NaN at the origin, unlike the VJP
        (a, b), (ta, tb) = ins, ts
        num = b * ta if tb is None else -a * tb if ta is None else b * ta - a * tb
        r2 = a * a + b * b
        at_origin = r2 == 0  # 0 / 0 there, spelled out: on Tensors NumPy's warning could not be silenced
        return xp.where(at_origin, math.nan, num / xp.where(at_origin, 1.0, r2))

    @staticmethod
    def atan2(input, other):
        """The elementwise angle of (other, input): atan(input / other) in the right quadrant."""
        _tensor_argument("atan2", "other", 2, other)
        _check_broadcast(input, other)
        return Atan2.apply(input, as_operand(other, input))


@composite("arctan2", inplace=True)
def arctan2(input, other):
    """torch's alias of atan2."""
    return Atan2.atan2(input, other)
