"""DLPack for bfloat16 on the CPU, which NumPy's own DLPack refuses ("Unsupported dtype in DLTensor"): gpugrad makes
and reads the (unversioned) ``dltensor`` capsule itself, per the DLPack spec (dlpack.h: DLManagedTensor, kDLBfloat =
4; python_spec.rst: a consumer renames the capsule "used_dltensor" and calls the deleter when done; an unconsumed
capsule's destructor calls it). CUDA arrays need none of this: CuPy 14 exports and imports bfloat16 itself
(cupy/_core/dlpack.pyx)."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
KDL_CPU, KDL_BFLOAT = 1, 4
_NAME, _USED = b"dltensor", b"used_dltensor"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_api = ctypes.pythonapi
_api.PyCapsule_New.restype, _api.PyCapsule_New.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                                                 ctypes.c_void_p]
_api.PyCapsule_IsValid.restype, _api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype, _api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                                          ctypes.c_char_p]
_api.PyCapsule_SetName.restype, _api.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
# the same C function with a raw-pointer argument, for the capsule destructor (which must not make an object of it)
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer",
                                                                                         _api))
_exported: dict = {}  # address of a DLManagedTensor -> what it points into, alive until its deleter runs


@_DELETER
def _delete(managed):
    _exported.pop(ctypes.addressof(managed.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):  # NOTE: a raw pointer: the capsule is being freed, it must not become an object
    if _api.PyCapsule_IsValid(capsule, _NAME):  # never consumed: its owner is this capsule
        managed = _Managed.from_address(_get_pointer_raw(capsule, _NAME))
        managed.deleter(ctypes.pointer(managed))


def export_bf16(array: np.ndarray):
    """A ``dltensor`` capsule of a bfloat16 NumPy array (zero copy; the array lives until the consumer is done)."""
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(array.ndim, 1))(*(s // array.itemsize for s in array.strides))
    managed = _Managed()
    t = managed.dl_tensor
    t.data, t.ndim, t.byte_offset = array.ctypes.data or None, array.ndim, 0
    t.device, t.dtype = _Device(KDL_CPU, 0), _DataType(KDL_BFLOAT, 16, 1)
    t.shape, t.strides = shape, strides
    managed.deleter = _delete
    _exported[ctypes.addressof(managed)] = (managed, shape, strides, array)
    return _api.PyCapsule_New(ctypes.addressof(managed), _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def import_bf16(producer):
    """A bfloat16 NumPy array sharing a CPU producer's memory (``torch.bfloat16`` tensors), or None when the producer's
    capsule holds another dtype (NumPy's from_dlpack reads those)."""
    capsule = producer.__dlpack__()
    managed = _Managed.from_address(_api.PyCapsule_GetPointer(capsule, _NAME))
    t = managed.dl_tensor
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (KDL_BFLOAT, 16, 1) or t.device.device_type != KDL_CPU:
        return None  # the capsule is unconsumed: its destructor frees it
    _api.PyCapsule_SetName(capsule, _USED)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] * 2 for i in range(t.ndim)) if t.strides else None
    extent = (sum((n - 1) * s for n, s in zip(shape, strides or ())) + 2) if all(shape) else 0
    if strides is None:
        extent = 2 * int(np.prod(shape))
    buffer = (ctypes.c_char * max(extent, 1)).from_address((t.data or 0) + t.byte_offset) if extent else None
    owner = _Consumed(managed, capsule)
    if buffer is None:
        return np.empty(shape, BF16)
    buffer.owner = owner  # the array keeps the buffer, the buffer keeps the producer's tensor until both are gone
    flat = np.frombuffer(buffer, np.uint16)
    view = np.lib.stride_tricks.as_strided(flat, shape, strides or np.empty(shape, np.uint16).strides)
    return view.view(BF16)


class _Consumed:
    """Calls the producer's deleter when the imported array is freed (the DLPack consumer's duty)."""

    def __init__(self, managed, capsule):
        self.managed, self.capsule = managed, capsule

    def __del__(self):
        if self.managed.deleter:
            self.managed.deleter(ctypes.pointer(self.managed))
