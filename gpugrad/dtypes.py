"""Types as torch has them: dtype objects (``gpugrad.float32`` prints as such), ``Size``, ``finfo``/``iinfo``, the
default dtype, and torch's type promotion (``promote_types``, ``result_type``, ``can_cast``).

A ``dtype`` wraps a NumPy dtype and goes wherever NumPy or CuPy take one: they read its ``.dtype`` attribute, so
``np.zeros(2, dtype=gpugrad.float16)`` works; ``kind``, ``name``, ``type``, ... are NumPy's, and it equals the NumPy
dtype it wraps (``gpugrad.float32 == np.float32``). bfloat16 is ``ml_dtypes.bfloat16``, NumPy's extension dtype,
on both devices: CuPy 14 takes it when ml_dtypes is installed (``cupy/_core/_scalar.pyx:274-289`` at v14.2.0).
Its NumPy kind is "V", so floating dtypes are told by :func:`is_float` (kind in "fV"), never by ``kind == "f"``.
"""
from __future__ import annotations

import builtins
import types

import ml_dtypes
import numpy as np


class dtype:  # noqa: N801 - torch's name
    """One element type: ``is_floating_point``, ``is_complex``, ``is_signed``, ``itemsize``, ``to_real()``,
    ``to_complex()`` as torch's; NumPy's attributes (``kind``, ``name``, ``type``, ``char``) for array code.

    >>> gpugrad.float32, gpugrad.float32.itemsize, np.dtype(gpugrad.int64)
    (gpugrad.float32, 4, dtype('int64'))
    """

    __slots__ = ("dtype", "_name")

    def __init__(self, np_dtype, name):
        self.dtype, self._name = np.dtype(np_dtype), name

    def __getattr__(self, name):  # kind, name, type, char, ... of the NumPy dtype
        if name.startswith("_") or name == "dtype":  # unset slots (a half-built object) must not recurse
            raise AttributeError(name)
        return getattr(self.dtype, name)

    def __repr__(self):
        return f"gpugrad.{self._name}"

    def __eq__(self, other):
        # Equal to itself and to the NumPy dtype it wraps (internal code compares with np.float32); like torch's,
        # never equal to a string or a Python type (np.dtype(None) would even be float64).
        if isinstance(other, (dtype, np.dtype)) or isinstance(other, type) and issubclass(other, np.generic):
            return self.dtype == np.dtype(other)
        return NotImplemented

    def __hash__(self):
        return hash(self.dtype)

    def __reduce__(self):  # copies and pickles are the one object
        return _named, (self._name,)

    is_floating_point = property(lambda self: self.dtype.kind in "fV")
    is_complex = property(lambda self: self.dtype.kind == "c")
    is_signed = property(lambda self: self.dtype.kind in "ifcV")
    itemsize = property(lambda self: self.dtype.itemsize)

    def to_real(self):
        return as_dtype(np.empty(0, self.dtype).real.dtype)

    def to_complex(self):
        return as_dtype(np.result_type(self.dtype, np.complex64))


_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "complex64", "complex128")
BF16 = np.dtype(ml_dtypes.bfloat16)
_BY_NP = {np.dtype(n): dtype(n, n) for n in _NAMES}
_BY_NP[BF16] = dtype(BF16, "bfloat16")
_NAMES = (*_NAMES, "bfloat16")
DTYPES = {d._name: d for d in _BY_NP.values()}
# torch's aliases: gpugrad.float is float32, gpugrad.long int64, ...
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "short": "int16", "int": "int32",
           "long": "int64", "cfloat": "complex64", "cdouble": "complex128"}
DTYPES.update({a: DTYPES[n] for a, n in ALIASES.items()})
_PY = {builtins.float: "float64", builtins.int: "int64", builtins.bool: "bool", builtins.complex: "complex128"}


def is_float(np_dtype) -> bool:
    """A real floating NumPy dtype: float16/32/64 (kind "f") or bfloat16 (ml_dtypes' kind "V")."""
    return np_dtype.kind in "fV"


def _named(name):
    return DTYPES[name]


def as_dtype(d) -> dtype:
    """A gpugrad dtype from anything naming one: a gpugrad dtype, a NumPy dtype or type, a Python type (float is
    float64 as in torch), or a name ("float32")."""
    if isinstance(d, dtype):
        return d
    if d in _PY:
        return DTYPES[_PY[d]]
    try:
        np_d = np.dtype(d) if not isinstance(d, str) else DTYPES[d].dtype
    except (TypeError, KeyError):
        raise TypeError(f"{d!r} is not a dtype: pass one of gpugrad's ({', '.join(_NAMES)})") from None
    got = _BY_NP.get(np_d)
    if got is None:
        got = _BY_NP.get(np_d.newbyteorder("="))  # a big-endian array's type: the same type, read natively
        if got is None:
            raise TypeError(f"dtype {np_d} is not supported: gpugrad has {', '.join(_NAMES)}")
    return got


def is_dtype(d) -> bool:
    """Whether ``d`` names a dtype (``Tensor.to`` tells dtypes from devices with it)."""
    return isinstance(d, (dtype, np.dtype)) or isinstance(d, type) and (issubclass(d, np.generic) or d in _PY)


def to_np(d):
    """The NumPy dtype for a dtype spec (None stays None)."""
    return None if d is None else as_dtype(d).dtype


def of_array(array) -> dtype:
    """The gpugrad dtype of an array (``Tensor.dtype``)."""
    got = _BY_NP.get(array.dtype)
    return got if got is not None else as_dtype(array.dtype)


DEFAULTS = types.SimpleNamespace(float=np.dtype(np.float32))  # set_default_dtype's choice


def set_default_dtype(d):
    """The dtype of Python floats in ``tensor()``, of ``zeros``/``rand``/... and of true division of integers."""
    d = as_dtype(d)
    if not is_float(d.dtype):
        raise TypeError(f"set_default_dtype: only floating-point types are supported as the default type, got {d}")
    DEFAULTS.float = d.dtype


def get_default_dtype() -> dtype:
    return as_dtype(DEFAULTS.float)


def default_complex():
    return np.dtype(np.complex128) if DEFAULTS.float == np.float64 else np.dtype(np.complex64)


# -- promotion of NumPy dtypes (an op's operands: core/promotion.py) ---------------------------------------
_CAT = {"b": 0, "u": 1, "i": 1, "f": 2, "V": 2, "c": 3}


_SCALAR_TYPES = {np.dtype(k): v for k, v in (("float16", "Half"), ("float32", "Float"), ("float64", "Double"),
                                             ("int8", "Char"), ("uint8", "Byte"), ("int16", "Short"), ("int32", "Int"),
                                             ("int64", "Long"), ("bool", "Bool"), ("complex64", "ComplexFloat"),
                                             ("complex128", "ComplexDouble"))}


def scalar_type_name(d) -> str:
    """torch's C++ name of a dtype (Float, Double, Long, ...), as its error messages spell it."""
    return _SCALAR_TYPES.get(np.dtype(to_np(d)), str(d))


def promote_np(a, b):
    """torch.promote_types on NumPy dtypes: within integers, or within floats and complex, as NumPy; across them,
    the floating type wins (int64 with float16 is float16; NumPy would widen to float64)."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    ca, cb = _CAT[a.kind], _CAT[b.kind]
    if (ca > 1) == (cb > 1):
        return np.promote_types(a, b)
    return a if ca > cb else b


def combine_categories(higher, lower):
    """torch's combine_categories: a lower tier (0-d tensors, then Python numbers) counts only where its category
    is higher than the tier above's."""
    if higher is None:
        return lower
    if lower is None or higher.kind == "c":
        return higher
    if lower.kind == "c":
        return np.result_type(higher, np.complex64) if is_float(higher) else lower
    if is_float(higher):
        return higher
    if higher.kind == "b" or is_float(lower):
        return promote_np(higher, lower)
    return higher


def promote_types(type1, type2) -> dtype:
    """The smallest dtype both ``type1`` and ``type2`` convert to, as torch.promote_types."""
    return as_dtype(promote_np(to_np(type1), to_np(type2)))


def can_cast(from_, to) -> bool:
    """torch.can_cast: False where the cast would drop a category (float to int, complex to float, to bool)."""
    a, b = to_np(from_), to_np(to)
    return _CAT[a.kind] <= _CAT[b.kind] or b.kind == "i" and a.kind == "u"


class Size(tuple):
    """A tensor's shape, as torch.Size: a tuple that prints as ``gpugrad.Size([2, 3])`` and counts its elements.

    >>> gpugrad.zeros(2, 3).shape
    gpugrad.Size([2, 3])
    """

    def __repr__(self):
        return f"gpugrad.Size({list(self)})"

    __str__ = __repr__

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):
        got = tuple.__getitem__(self, key)
        return Size(got) if isinstance(key, slice) else got

    def __add__(self, other):
        return Size(tuple(self) + tuple(other)) if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self)) if isinstance(other, tuple) else NotImplemented

    def __mul__(self, n):
        return Size(tuple(self) * n)

    __rmul__ = __mul__

    def __reduce__(self):
        return Size, (tuple(self),)


class finfo:  # noqa: N801 - torch's name
    """Machine limits of a floating dtype, as torch.finfo: ``bits eps max min tiny smallest_normal resolution``."""

    def __init__(self, type=None):
        d = to_np(type) if type is not None else DEFAULTS.float
        if d.kind not in "fcV":
            raise TypeError(f"finfo: expected a floating-point dtype, got {as_dtype(d)}")
        f = ml_dtypes.finfo(d)  # NumPy's finfo for NumPy's types, and bfloat16's
        self.bits, self.dtype = f.bits, f.dtype.name
        self.eps, self.max, self.min = (builtins.float(v) for v in (f.eps, f.max, f.min))
        self.resolution = 10.0 ** -f.precision  # NumPy's, exactly; bfloat16's would be 0.01 rounded to bfloat16
        self.tiny = self.smallest_normal = builtins.float(f.smallest_normal)

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, "
                f"smallest_normal={self.tiny}, tiny={self.tiny}, dtype={self.dtype})")


class iinfo:  # noqa: N801 - torch's name
    """Limits of an integer dtype, as torch.iinfo: ``bits max min``."""

    def __init__(self, type):
        d = to_np(type)
        if d.kind not in "iub":
            raise TypeError(f"iinfo: expected an integer dtype, got {as_dtype(d)}")
        i = np.iinfo(d if d.kind != "b" else np.uint8)
        self.bits, self.max, self.min, self.dtype = i.bits, builtins.int(i.max), builtins.int(i.min), d.name

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
