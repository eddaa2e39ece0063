"""IDX files, the format MNIST ships in: read a directory of them, write small ones for tests and fixtures.

Layout (big-endian throughout)::

    bytes 0-1   0x00 0x00
    byte  2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
    byte  3     ndim
    4 * ndim    dimensions, uint32 each
    rest        the elements, row-major, prod(dims) of them

Files may be gzip-compressed (detected by content, not by name).  Every error names the file.  Reading is
bounded: one file's data may take at most ``MAX_BYTES`` (1 GiB; set ``GPUGRAD_MAX_IDX_BYTES=<bytes>`` or pass
``max_bytes=`` to change it), checked against the header before any allocation, and gzip is decompressed as a
stream that stops at the declared size.

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


MAX_BYTES = 1 << 30  # default cap on one file's data (decompressed): 1 GiB; MNIST's largest file holds 47 MB
MAX_BYTES_ENV = "GPUGRAD_MAX_IDX_BYTES"  # raises (or lowers) MAX_BYTES; read_idx(max_bytes=...) overrides both
MAX_NDIM = 32  # the most dimensions every NumPy supports; MNIST files have 1 to 3
_CHUNK = 1 << 24  # bytes per read: a compressed stream never holds more than this besides the result


def byte_limit(max_bytes, env, default, error=ValueError):
    """``max_bytes`` when given, else the environment variable ``env`` (a whole number of bytes), else ``default``.

    A value that is not a whole number >= 0 raises ``error`` naming where it came from.
    """
    where, value = "max_bytes", max_bytes
    if value is None:
        where, value = env, os.environ.get(env, "").strip()
        if not value:
            return default
        try:
            value = int(value)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        given = max_bytes if where == "max_bytes" else os.environ[env]
        raise error(f"{where}={given!r}: expected a whole number of bytes >= 0 (the default is {default})")
    return value


def read_into(f, array) -> int:
    """Fill the contiguous ``array`` from the stream ``f``, at most ``_CHUNK`` bytes per read (so a decompressing
    stream never holds more than one chunk besides ``array``); returns the bytes read, short only at the stream's end.
    """
    if not array.nbytes:
        return 0
    view, pos = memoryview(array.reshape(-1).view(np.uint8)), 0
    while pos < len(view):
        n = f.readinto(view[pos: pos + _CHUNK])
        if not n:
            break
        pos += n
    return pos


def read_idx(path, max_bytes=None) -> np.ndarray:
    """One IDX file (raw or gzip) as a NumPy array in native byte order.

    Memory stays bounded: the declared shape is checked against the file and against ``max_bytes`` (default: the
    environment variable ``GPUGRAD_MAX_IDX_BYTES``, else ``MAX_BYTES``, 1 GiB) before anything is allocated, and
    gzip is decompressed as a stream, never past the declared size (plus one byte, to detect trailing data).
    """
    path = Path(path)
    limit = byte_limit(max_bytes, MAX_BYTES_ENV, MAX_BYTES, IdxError)
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        if not gz:
            return _read_idx_stream(path, raw, os.fstat(raw.fileno()).st_size, limit)
        try:
            with gzip.GzipFile(fileobj=raw) as f:
                return _read_idx_stream(path, f, None, limit)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # truncated or corrupt gzip stream
            raise IdxError(f"{path}: corrupt gzip data ({e})") from None


def _read_idx_stream(path, f, size, limit):
    """The array in the stream ``f``; ``size`` is the file's length (raw files) or None (decompressed on the fly)."""
    magic = f.read(4)
    if len(magic) < 4:
        raise IdxError(f"{path}: truncated header: {len(magic)} bytes, an IDX file starts with a 4-byte magic number")
    zero, code, ndim = magic[:2], magic[2], magic[3]
    if zero != b"\x00\x00" or code not in DTYPES:
        raise IdxError(f"{path}: bad magic number 0x{magic.hex()}: expected 0x0000TTNN with type TT in "
                       f"{{{', '.join(f'{c:02x}' for c in DTYPES)}}} (is this an IDX file?)")
    if ndim == 0:
        raise IdxError(f"{path}: magic number 0x{magic.hex()} declares 0 dimensions")
    if ndim > MAX_NDIM:
        raise IdxError(f"{path}: magic number 0x{magic.hex()} declares {ndim} dimensions; gpugrad reads at most "
                       f"{MAX_NDIM}")
    header = 4 + 4 * ndim
    raw_dims = f.read(4 * ndim)
    if len(raw_dims) < 4 * ndim:
        have = 4 + len(raw_dims) if size is None else size
        raise IdxError(f"{path}: truncated header: {ndim} dimensions need {header} bytes, the file has {have}")
    dims = tuple(int(d) for d in np.frombuffer(raw_dims, ">u4"))
    dtype = DTYPES[code]
    native = dtype.newbyteorder("=")
    expected = math.prod(dims) * dtype.itemsize  # Python ints: 65536**4 elements must not wrap around to 0
    if size is not None:  # a raw file: its length is known, so a wrong shape is caught before reading anything
        have = size - header
        if have < expected:
            raise IdxError(f"{path}: truncated data: shape {dims} of {native} needs {expected} bytes after the "
                           f"header, the file has {have}")
        if have > expected:
            raise IdxError(f"{path}: {have - expected} unexpected trailing bytes after the data of shape {dims}")
    if expected > limit:
        raise IdxError(f"{path}: shape {dims} of {native} declares {expected:,} bytes of data, more than the limit of "
                       f"{limit:,}; if the file is right, raise the limit with {MAX_BYTES_ENV}=<bytes>")
    data = np.empty(math.prod(dims), dtype)  # at most `limit` bytes
    have = read_into(f, data)
    if have < expected:
        raise IdxError(f"{path}: truncated data: shape {dims} of {native} needs {expected} bytes after the header, "
                       f"the file has {have}")
    if f.read(1):  # NOTE: for gzip this also reaches the stream's end, where its CRC is checked
        raise IdxError(f"{path}: unexpected trailing bytes after the data of shape {dims}")
    if not dtype.isnative:
        data = data.byteswap(inplace=True).view(native)  # in place: no second copy of a large file
    return data.reshape(dims)


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


def load_idx_pair(directory, split="train", max_bytes=None):
    """(images float32 (N, H*W) in [0, 1], labels int64 (N,)) for split 'train' or 't10k'/'test'.

    NaN and infinite pixels (or float64 ones beyond float32's range) are an IdxError: training on them only
    produces a NaN loss, many steps later.
    """
    images_name, labels_name = SPLITS["test" if split == "t10k" else split]
    images_path, labels_path = find_idx(directory, images_name), find_idx(directory, labels_name)
    images, labels = read_idx(images_path, max_bytes), read_idx(labels_path, max_bytes)
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
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255), labels.astype(np.int64)
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf, reported just below
        x = x.astype(np.float32)
    if images.dtype.kind == "f" and not np.isfinite(x).all():
        bad = ~np.isfinite(x)
        first = int(np.flatnonzero(bad.any(axis=1))[0])
        kind = "NaN, infinite or beyond float32's range" if images.dtype == np.float64 else "NaN or infinite"
        raise IdxError(f"{images_path}: {int(bad.sum())} pixel value(s) are {kind} (the first in image {first}); "
                       "clean or drop those images")
    return x, labels.astype(np.int64)


def load_idx_dir(path, max_bytes=None):
    """(x_train, y_train, x_test, y_test) from an MNIST-format directory; images flattened, float32 in [0, 1].

    Looks for ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
    ``t10k-labels-idx1-ubyte``, each raw or ``.gz``; ``max_bytes`` caps each file's data (see :func:`read_idx`).
    """
    path = Path(os.path.expanduser(str(path)))
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected MNIST-format IDX files in it)")
    x_train, y_train = load_idx_pair(path, "train", max_bytes)
    x_test, y_test = load_idx_pair(path, "test", max_bytes)
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
