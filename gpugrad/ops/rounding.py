"""Rounding divisions: ``//`` and ``div(rounding_mode=...)``, ``%`` (Python's, the divisor's sign) and fmod (C's, the
dividend's sign).  Integers stay integers, as in torch."""
from __future__ import annotations

from gpugrad.backend import deferred, reference as R
from gpugrad.core import tensor_xp
from gpugrad.core.op import Op
from gpugrad.core.registry import composite, register
from gpugrad.core.tensor import as_operand


@register("rounding_div")
class RoundingDiv(Op):
    """y = floor(a / b) (mode "floor", Python's //) or trunc(a / b) (mode "trunc").  Piecewise constant: VJP 0 for
    both inputs (torch's div(rounding_mode=...) gives 0; NOTE: its ``//`` raises at backward instead)."""
    formula = "ga = 0, gb = 0"
    elementwise = double_backward = promotes = True
    node_name = "DivBackward2"

    def forward(self, xp, a, b):
        _integer_zero(xp, a, b)
        with R._quiet(xp):  # floats by 0: +-inf or NaN, quietly, as torch
            if self.mode == "floor":
                return xp.floor_divide(a, b)
            q = xp.trunc(xp.true_divide(a, b))
        kind = xp.result_type(a, b)
        return q.astype(kind) if q.dtype != kind else q

    def backward(self, xp, gy):
        return tuple(xp.zeros_like(gy) if need else None for need in self.needs_input_grad)


def _integer_zero(xp, a, b):
    """torch's integer //, %, fmod and div(rounding_mode=) by zero raise (NumPy's give 0 with a warning): now on the CPU,
    at the next host read on CUDA (a device-side check, no sync: backend/deferred.py)."""
    if xp.result_type(a, b).kind not in "iu":
        return
    if not hasattr(b, "shape"):
        if b == 0:
            raise RuntimeError("ZeroDivisionError")
        return
    deferred.check_range(xp.where(b == 0, 1, 0), 1, RuntimeError, "ZeroDivisionError")


@composite("floor_divide", inplace=True)
def floor_divide(input, other):
    """floor(input / other), as Python's // (integers stay integers)."""
    return RoundingDiv.apply(input, as_operand(other, input), mode="floor")


@register("remainder", inplace=True)
class Remainder(Op):
    """y = a - floor(a / b) * b: the sign of b, as Python's %.  VJP: ga = gy, gb = -gy * floor(a / b)."""
    formula = "ga = gy, gb = -gy * floor(a / b)"
    elementwise = double_backward = promotes = True
    number_edges = False  # as torch's remainder.Scalar: a Python number is no input of the node

    def forward(self, xp, a, b):
        self._name = self.node_name[:-1] + ("1" if isinstance(b, xp.ndarray) else "0")  # torch: .Tensor / .Scalar
        _integer_zero(xp, a, b)
        if self.needs_input_grad[1]:  # only b's gradient reads the inputs (a's is gy): torch saves nothing else
            self.save_for_backward(a, b)
        with R._quiet(xp):  # floats by 0: NaN, quietly, as torch
            return xp.remainder(a, b) if self.op_name == "remainder" else xp.fmod(a, b)

    def backward(self, xp, gy):
        if not self.needs_input_grad[1]:
            return gy, None
        a, b = self.saved
        mode = "floor" if self.op_name == "remainder" else "trunc"
        if xp is tensor_xp:  # create_graph: the quotient as one node with a zero derivative, as torch's
            # div(rounding_mode=): a / b then trunc would send trunc's zero through a / b's VJP, a graph of zeros
            # that requires grad where torch's second derivative is a constant
            return gy, -gy * RoundingDiv.apply(a, b, mode=mode)
        with R._quiet(xp):
            return gy, -gy * (a // b if mode == "floor" else xp.trunc(a / b))

    @staticmethod
    def remainder(input, other):
        return Remainder.apply(input, as_operand(other, input))


@register("fmod", inplace=True)
class Fmod(Remainder):
    """y = a - trunc(a / b) * b: the sign of a, as C's fmod.  VJP: ga = gy, gb = -gy * trunc(a / b)."""
    formula = "ga = gy, gb = -gy * trunc(a / b)"

    @staticmethod
    def fmod(input, other):
        return Fmod.apply(input, as_operand(other, input))
