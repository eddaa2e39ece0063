"""torch's names for dtypes where its messages use them ("expected ... Got Long", ``x.type()`` ->
``'torch.FloatTensor'``): the ScalarType names of torch's C++ core."""
from __future__ import annotations

import numpy as np

TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long", "int32": "Int",
              "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool", "complex64": "ComplexFloat",
              "complex128": "ComplexDouble", "bfloat16": "BFloat16"}


def type_name(dtype) -> str:
    """torch's ScalarType name of a NumPy or gpugrad dtype: float32 -> "Float", int64 -> "Long"."""
    return TYPE_NAMES.get(np.dtype(dtype).name, np.dtype(dtype).name)
