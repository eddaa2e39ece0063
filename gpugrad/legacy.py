"""torch's legacy tensor types: ``FloatTensor``, ``DoubleTensor``, ``HalfTensor``, ``LongTensor``, ``IntTensor``,
``ShortTensor``, ``CharTensor``, ``ByteTensor``, ``BoolTensor`` (and ``gpugrad.cuda``'s, on CUDA).

As torch's, each makes plain Tensors of its dtype (``FloatTensor(2, 3)``: uninitialized; ``LongTensor([1.5, 2])``:
the data cast, truncated) and is not a class of its own: ``isinstance(t, FloatTensor)`` asks whether ``t`` is a
float32 tensor on that device type, ``type(FloatTensor([1]))`` is ``gpugrad.Tensor``.
"""
from __future__ import annotations

from gpugrad.core.tensor import TensorBase, legacy_init, tensor_class
from gpugrad.dtypes import DTYPES

NAMES = {"FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "LongTensor": "int64",
         "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8", "ByteTensor": "uint8",
         "BoolTensor": "bool"}


class LegacyTensorType(type):
    """The type of ``gpugrad.FloatTensor`` and its kin: calling one constructs a Tensor of its dtype, and
    ``isinstance`` checks the dtype and the device type."""

    def __call__(cls, *args, **kwargs):
        t = object.__new__(tensor_class())
        legacy_init(t, args, kwargs, cls.dtype, cls.device_type)
        return t

    def __instancecheck__(cls, obj):
        return isinstance(obj, TensorBase) and obj.dtype == cls.dtype and obj.device.type == cls.device_type

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"


def types(device_type, module):
    """The legacy types on one device type, by name, as ``module``'s attributes (gpugrad, gpugrad.cuda)."""
    return {name: LegacyTensorType(name, (), {"dtype": DTYPES[dt], "device_type": device_type, "__module__": module,
                                              "__doc__": f"torch's legacy {name}: {dt} tensors on {device_type}"})
            for name, dt in NAMES.items()}


CPU_TYPES = types("cpu", "gpugrad")
CUDA_TYPES = types("cuda", "gpugrad.cuda")
