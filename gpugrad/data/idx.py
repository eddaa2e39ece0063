"""IDX files, the format MNIST ships in: read a directory of them, write small ones for tests and fixtures.

Layout (big-endian throughout)::

    bytes 0-1   0x00 0x00
    byte  2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
    byte  3     ndim
    4 * ndim    dimensions, uint32 each
    rest        the elements, row-major, prod(dims) of them

Files may be gzip-compressed (detected by content, not by name).  Every error names the file.

>>> x_train, y_train, x_test, y_test = load_idx_dir("~/data/mnist")   # doctest: +SKIP
>>> x_train.shape, x_train.dtype, y_train.dtype                     # doctest: +SKIP
((60000, 784), dtype('float32'), dtype('int64'))
"""
from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

# element type code -> big-endian dtype
DTYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
          0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_CODES = {dt.newbyteorder("="): code for code, dt in DTYPES.items()}

SPLITS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class IdxError(ValueError):
    """A file that is not valid IDX, or a set of IDX files that do not belong together."""


def _read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:  # truncated or corrupt gzip stream
        raise IdxError(f"{path}: corrupt gzip data ({e})") from None


def read_idx(path) -> np.ndarray:
    """One IDX file (raw or gzip) as a NumPy array in native byte order."""
    path = Path(path)
    buf = _read_bytes(path)
    if len(buf) < 4:
        raise IdxError(f"{path}: truncated header: {len(buf)} bytes, an IDX file starts with a 4-byte magic number")
    zero, code, ndim = buf[:2], buf[2], buf[3]
    if zero != b"\x00\x00" or code not in DTYPES:
        raise IdxError(f"{path}: bad magic number 0x{buf[:4].hex()}: expected 0x0000TTNN with type TT in "
                       f"{{{', '.join(f'{c:02x}' for c in DTYPES)}}} (is this an IDX file?)")
    if ndim == 0:
        raise IdxError(f"{path}: magic number 0x{buf[:4].hex()} declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(buf) < header:
        raise IdxError(f"{path}: truncated header: {ndim} dimensions need {header} bytes, the file has {len(buf)}")
    dims = tuple(int(d) for d in np.frombuffer(buf, ">u4", ndim, offset=4))
    dtype = DTYPES[code]
    expected = math.prod(dims) * dtype.itemsize  # Python ints: 65536**4 elements must not wrap around to 0
    have = len(buf) - header
    if have < expected:
        raise IdxError(f"{path}: truncated data: shape {dims} of {dtype.newbyteorder('=')} needs {expected} bytes "
                       f"after the header, the file has {have}")
    if have > expected:
        raise IdxError(f"{path}: {have - expected} unexpected trailing bytes after the data of shape {dims}")
    return np.frombuffer(buf, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path, array) -> Path:
    """Write ``array`` as an IDX file; gzip-compressed when ``path`` ends in ``.gz``."""
    path = Path(path)
    array = np.asarray(array)
    code = _CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        raise TypeError(f"write_idx: IDX has no element type for {array.dtype}; "
                        f"use one of {sorted(str(d) for d in _CODES)}")
    if array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"write_idx: IDX stores 1 to 255 dimensions, got {array.ndim}")
    body = (bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
            + np.ascontiguousarray(array, DTYPES[code]).tobytes())
    # NOTE: mtime=0 makes .gz output byte-for-byte reproducible.
    path.write_bytes(gzip.compress(body, mtime=0) if path.suffix == ".gz" else body)
    return path


def find_idx(directory, name) -> Path:
    """``directory/name`` or ``directory/name.gz``, whichever exists (raw first)."""
    directory = Path(directory)
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{directory}: missing IDX file {name} (or {name}.gz)")


def load_idx_pair(directory, split="train"):
    """(images float32 (N, H*W) in [0, 1], labels int64 (N,)) for split 'train' or 't10k'/'test'."""
    images_name, labels_name = SPLITS["test" if split == "t10k" else split]
    images_path, labels_path = find_idx(directory, images_name), find_idx(directory, labels_name)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim < 2:
        raise IdxError(f"{images_path}: images need at least 2 dimensions (N, ...), got shape {images.shape}")
    if labels.ndim != 1:
        raise IdxError(f"{labels_path}: labels need 1 dimension (N,), got shape {labels.shape}")
    if len(images) != len(labels):
        raise IdxError(f"{images_path} has {len(images)} images but {labels_path} has {len(labels)} labels")
    if labels.dtype.kind not in "iu":
        raise IdxError(f"{labels_path}: labels must be integers, got {labels.dtype}")
    if len(labels) and labels.min() < 0:
        raise IdxError(f"{labels_path}: negative label {labels.min()}")
    x = images.reshape(len(images), math.prod(images.shape[1:]))
    # uint8 pixels are 0..255 (MNIST); other element types are taken as already scaled.
    x = x.astype(np.float32) / np.float32(255) if x.dtype == np.uint8 else x.astype(np.float32)
    return x, labels.astype(np.int64)


def load_idx_dir(path):
    """(x_train, y_train, x_test, y_test) from an MNIST-format directory; images flattened, float32 in [0, 1].

    Looks for ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
    ``t10k-labels-idx1-ubyte``, each raw or ``.gz``.
    """
    path = Path(os.path.expanduser(str(path)))
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected MNIST-format IDX files in it)")
    x_train, y_train = load_idx_pair(path, "train")
    x_test, y_test = load_idx_pair(path, "test")
    for split, x in (("train", x_train), ("test", x_test)):
        if not len(x):
            raise IdxError(f"{find_idx(path, SPLITS[split][0])}: no images; the {split} split needs at least one")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise IdxError(f"{path}: train images have {x_train.shape[1]} values each but test images have "
                       f"{x_test.shape[1]}")
    return x_train, y_train, x_test, y_test


def write_idx_dir(path, x_train, y_train, x_test, y_test, gz=False) -> Path:
    """Write the four MNIST-named files (``gz=True``: ``.gz`` variants) into ``path``, creating it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for (images_name, labels_name), (x, y) in zip(SPLITS.values(), ((x_train, y_train), (x_test, y_test))):
        write_idx(path / f"{images_name}{suffix}", x)
        write_idx(path / f"{labels_name}{suffix}", y)
    return path
