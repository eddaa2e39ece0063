"""torch's type promotion of an op's operands: which dtype an op computes in, and the casts that get it there.

Tensors with dimensions decide; 0-d tensors count only when of a higher category (float over int); Python numbers
likewise, and they stay Python numbers (weakly typed, as NumPy 2 and torch treat them). ``Op.apply`` calls
:func:`promoted` only off its fast path (a dtype that is not float, or two dtypes).
"""
from __future__ import annotations

import builtins
import numbers

import numpy as np

from gpugrad.core.grad_mode import STATE as GRAD
from gpugrad.core.tensor import TensorBase
from gpugrad.dtypes import DEFAULTS, as_dtype, combine_categories, default_complex, promote_np


def _np_result_type(operands):
    dim = zero = number = None
    for x in operands:
        if isinstance(x, TensorBase):
            if x._data.ndim:
                dim = promote_np(dim, x._data.dtype)
            else:
                zero = promote_np(zero, x._data.dtype)
        elif isinstance(x, (builtins.bool, np.bool_)):
            number = promote_np(number, np.dtype(np.bool_))
        elif isinstance(x, numbers.Integral):
            number = promote_np(number, np.dtype(np.int64))
        elif isinstance(x, numbers.Real):
            number = promote_np(number, DEFAULTS.float)
        elif isinstance(x, numbers.Complex):
            number = promote_np(number, default_complex())
        else:
            raise TypeError(f"result_type: expected Tensors or numbers, got {type(x).__name__}")
    return combine_categories(dim, combine_categories(zero, number))


def result_type(tensor1, tensor2):
    """The dtype an arithmetic op on these operands gives, as torch.result_type: dimensioned tensors decide, 0-d
    tensors only when of a higher category (float over int), Python numbers likewise (a float is the default
    dtype, an int int64)."""
    return as_dtype(_np_result_type((tensor1, tensor2)))


def promoted(op, args):
    """``args`` with their Tensors cast to the dtype torch computes ``op`` in (``op.promotes``: True, "float" for
    ops whose integer inputs compute in the default float dtype (true division, exp), "same" for ops that refuse
    mixed dtypes (matmul)). Python numbers stay numbers: NumPy treats them as weak, as torch does."""
    first, same = None, True
    for a in args:  # fast path: one floating dtype and real numbers, nothing to do
        if isinstance(a, TensorBase):
            d = a._data.dtype
            if first is None:
                first = d
            elif d != first:
                same = False
        elif isinstance(a, complex):
            same = False
    if same and first is not None and first.kind in "fV":
        return args
    refuse = getattr(op, "refuses_bool", None)
    if refuse is not None:
        bools = sum(isinstance(a, TensorBase) and a._data.dtype == np.bool_ for a in args)
        if bools:
            raise RuntimeError(refuse.format("two bool tensors" if bools == 2 else "a bool tensor"))
    mode = op.promotes
    if mode == "same":
        dts = [a._data.dtype for a in args if isinstance(a, TensorBase)]
        if len(set(dts)) > 1:
            raise RuntimeError(f"{op.op_name}: expected both operands to have the same dtype, but got "
                               f"{' and '.join(str(as_dtype(d)) for d in dts)}; convert one with .to(dtype)")
        return args
    want = _np_result_type(args)
    if mode == "float" and want.kind in "biu":
        want = DEFAULTS.float
    if want.kind == "c" and GRAD.enabled and any(isinstance(a, TensorBase) and a._requires_grad for a in args):
        # NOTE: torch differentiates complex results (Wirtinger calculus); gpugrad has no complex autograd, and a
        # complex result would silently leave the graph (README: differences from torch)
        raise RuntimeError(f"{op.op_name}: the result would be complex ({as_dtype(want)}), and gpugrad has no complex "
                           "autograd while an input requires grad; compute on x.detach(), or under gpugrad.no_grad()")
    return tuple((_cast_for(a, want) if a._data.dtype != want else a) if isinstance(a, TensorBase) else _wrapped(a, want)
                 for a in args)


def _cast_for(tensor, want):
    """``tensor`` in the dtype an op computes in. The copy shares the original's version counter: torch's op saves the
    original and casts in backward, so changing the original in place before backward is an error there too."""
    cast = tensor.to(dtype=want)
    cast._version_counter = tensor._version_counter
    return cast


def _wrapped(number, want):
    """A Python int out of an integer dtype's range wraps around, as in torch (NumPy would raise): uint8 - 2."""
    if want.kind in "iu" and type(number) is int and not np.iinfo(want).min <= number <= np.iinfo(want).max:
        return np.array(number).astype(want)[()]
    return number
