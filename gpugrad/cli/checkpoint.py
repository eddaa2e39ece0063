"""Checkpoints: a nested dict of arrays and plain values in one ``.npz``, written atomically, read without pickle.

Every array-valued leaf (a Tensor, a NumPy or CuPy array, a NumPy scalar) is stored as its own ``.npy`` member
under its flattened path (``model/0.weight``, ``optimizer/state/0/exp_avg``); everything else (the tree's shape,
ints, floats, strings, lists, tuples, dicts with int keys) goes into one JSON document stored as the uint8 member
``__meta__``.  Loading uses ``numpy.load(allow_pickle=False)``, so a checkpoint can never run code.

Writes are gpugrad.save's (``gpugrad.serialization.write_atomically``): a temporary file in the target's directory,
fsynced and then ``os.replace``d over the target, so an interrupted or failed save leaves the previous checkpoint
untouched and says so, naming the file; a symlink is written through (its target is replaced, the link stays).  A
temporary file left by a killed save (``.<name>.<pid>.<random>.tmp``, its pid no longer running) is removed by the
next save of the same target.

Loading never trusts a declared size: every array's shape is checked against the bytes its member holds, and all
members together against a cap, ``MAX_BYTES`` (2 GiB uncompressed; set ``GPUGRAD_MAX_CHECKPOINT_BYTES=<bytes>`` or
pass ``load(..., max_bytes=...)`` to change it), before anything is allocated; members are read in chunks, never
decompressed past their declared size.  Whatever is wrong with a file is a CheckpointError naming it.

>>> save("run.ckpt", {"model": model.state_dict(), "epoch": 3})           # doctest: +SKIP
>>> load("run.ckpt", device="cpu")["epoch"]                               # doctest: +SKIP
3
"""
from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of, get_backend
from gpugrad.creation import tensor
from gpugrad.data.idx import byte_limit, read_into
# NOTE: one byte cap for every checkpoint gpugrad reads (2 GiB of arrays, uncompressed: AdamW state of ~170M
# parameters); load(max_bytes=...) overrides both
from gpugrad.serialization import MAX_BYTES, MAX_BYTES_ENV, write_atomically

FORMAT = "gpugrad-checkpoint"
VERSION = 1
META = "__meta__"
KINDS = ("tensor", "numpy", "scalar", "array")  # how an array leaf comes back (the skeleton's "as")
MAX_DEPTH = 64  # nesting of the saved tree; `gpugrad train`'s is 5 deep


class CheckpointError(ValueError):
    """A file that is not a readable gpugrad checkpoint."""


# -- tree <-> (arrays, JSON skeleton) ------------------------------------------------------------------------------
def _flatten(tree):
    """(dict path -> host array, JSON-able skeleton with {"__array__": path, "as": kind} at array leaves)."""
    arrays = {}

    def leaf(value, path, kind):
        key = path or "root"
        while key in arrays:  # paths are unique unless keys themselves contain "/"
            key += "+"
        arrays[key] = value
        return {"__array__": key, "as": kind}

    def walk(v, path):
        if isinstance(v, Tensor):
            return leaf(v.detach().cpu().numpy(), path, "tensor")  # a CUDA one (optimizer state) too
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:  # would need pickle to store, and pickle is what this format avoids
                raise TypeError(f"checkpoint: object array at {path or '/'} cannot be stored without pickle")
            return leaf(v, path, "numpy")
        if isinstance(v, np.generic):
            return leaf(np.asarray(v), path, "scalar")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, dict):
            items = [(k, walk(x, f"{path}/{k}" if path else str(k))) for k, x in v.items()]
            for k, _ in items:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"checkpoint: dict key {k!r} at {path or '/'} must be a str or int")
            if all(isinstance(k, str) and not k.startswith("__") for k, _ in items):
                return dict(items)
            return {"__dict__": [[k, x] for k, x in items]}  # int keys (optimizer state) survive JSON
        if isinstance(v, (list, tuple)):
            out = [walk(x, f"{path}/{i}") for i, x in enumerate(v)]
            return {"__tuple__": out} if isinstance(v, tuple) else out
        try:  # a raw device array (e.g. CuPy) held in an optimizer's state
            be = backend_of(v)
        except TypeError:
            raise TypeError(f"checkpoint: cannot store {type(v).__name__} at {path or '/'}") from None
        return leaf(be.to_host(v), path, "array")

    return arrays, walk(tree, "")


def _unflatten(skeleton, arrays, device, path):
    """The tree ``_flatten`` made, from its skeleton; anything a save never writes is a CheckpointError."""
    def bad(where, what):
        where = where if len(where) <= 60 else f"{where[:57]}..."
        return CheckpointError(f"{path}: corrupt checkpoint: {what} at {where or '/'}")

    def walk(v, where, depth):
        if depth > MAX_DEPTH:
            raise bad(where, f"nesting deeper than {MAX_DEPTH} levels")
        if isinstance(v, list):
            return [walk(x, f"{where}/{i}", depth + 1) for i, x in enumerate(v)]
        if not isinstance(v, dict):
            return v
        if "__array__" in v:
            key, kind = v["__array__"], v.get("as")
            if not isinstance(key, str) or key not in arrays:
                raise bad(where, f"array member {key!r} is missing")
            if kind not in KINDS:
                raise bad(where, f"unknown array kind {kind!r} (expected one of {', '.join(KINDS)})")
            a = arrays[key]
            if kind == "tensor":
                return tensor(a, device=device)
            if kind == "scalar":
                return a[()]
            return get_backend(device).asarray(a) if kind == "array" else a
        if "__tuple__" in v:
            if not isinstance(v["__tuple__"], list):
                raise bad(where, "a tuple that is not a list")
            return tuple(walk(x, f"{where}/{i}", depth + 1) for i, x in enumerate(v["__tuple__"]))
        if "__dict__" in v:
            items = v["__dict__"]
            if not isinstance(items, list) or not all(
                    isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], (str, int))
                    and not isinstance(kv[0], bool) for kv in items):
                raise bad(where, "a dict that is not a list of [str or int key, value] pairs")
            return {k: walk(x, f"{where}/{k}", depth + 1) for k, x in items}
        return {k: walk(x, f"{where}/{k}", depth + 1) for k, x in v.items()}

    return walk(skeleton, "", 0)


# -- files ---------------------------------------------------------------------------------------------------------
class OutputPathError(OSError):
    """An output path that cannot be written: a directory or other non-file there, or no way to make its parent."""


def output_path(path, what="output") -> Path:
    """``path`` with symlinks resolved (so a write replaces the link's target, not the link), its parent created.

    Raises OutputPathError naming ``what`` (e.g. ``--checkpoint``) when the target exists but is not a regular file
    or its directory cannot be made; run it on every output before any long work, so a bad path fails at once.
    """
    real = Path(os.path.realpath(path))
    if os.path.lexists(real) and not real.is_file():
        kind = "is a directory" if real.is_dir() else "is not a regular file"
        via = f" (a link to {real})" if os.path.islink(path) else ""
        raise OutputPathError(f"{what} {path}{via} {kind}; give a file path")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{what} {path}: cannot create its directory {real.parent}: "
                              f"{e.strerror or e}") from None
    if not os.access(real.parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path}: directory {real.parent} is not writable")
    return real


def atomic_write(path, write, what="output", kind="file"):
    """Call ``write(file)`` on a temporary file next to ``path``, fsync it, then rename it over ``path``
    (gpugrad.serialization.write_atomically, after ``output_path``'s checks and its parent made).

    A symlink at ``path`` is written through (its target is replaced); a directory or other non-file there is an
    OutputPathError.  On any exception (KeyboardInterrupt included) ``path`` is untouched and no temporary file is
    left; an OSError says so in one line naming the file ("... the previous <kind> there is intact").
    """
    output_path(path, what)
    return Path(write_atomically(path, write, by="", kind=kind))


def save(path, tree, what="checkpoint") -> Path:
    """Write ``tree`` (nested dicts/lists/tuples of Tensors, arrays and JSON values) to ``path`` atomically."""
    arrays, skeleton = _flatten(tree)
    meta = json.dumps({"format": FORMAT, "version": VERSION, "tree": skeleton}).encode()
    members = {META: np.frombuffer(meta, np.uint8), **arrays}
    return atomic_write(path, lambda f: np.savez(f, **members), what, kind="checkpoint")


def load(path, device=None, max_bytes=None):
    """The tree saved by :func:`save`; Tensors are created on ``device`` (None: the default device).

    ``max_bytes`` caps the arrays' total size, uncompressed (default: ``GPUGRAD_MAX_CHECKPOINT_BYTES``, else
    ``MAX_BYTES``).
    Raises CheckpointError naming ``path`` for anything that is not a checkpoint ``save`` could have written.
    """
    path = Path(path)
    limit = byte_limit(max_bytes, MAX_BYTES_ENV, MAX_BYTES, CheckpointError)
    members = {}
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    if not zipfile.is_zipfile(path):  # NOTE: np.load would try pickle next and blame allow_pickle
        raise CheckpointError(f"not a gpugrad checkpoint: {path} (not an .npz archive)")
    try:
        with zipfile.ZipFile(path) as z:
            members = _members(z, path, limit)
            if META not in members:
                raise CheckpointError(f"not a gpugrad checkpoint: {path} (no {META} member)")
            text = _read_member(z, members.pop(META), path).tobytes().decode()
            try:
                meta = json.loads(text)
            except RecursionError:  # json's C scanner gives up on very deep nesting
                raise CheckpointError(f"{path}: corrupt checkpoint: {META} is nested too deeply") from None
            arrays = {k: _read_member(z, info, path) for k, info in members.items()}
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, zlib.error, RuntimeError, NotImplementedError) as e:
        # NOTE: RuntimeError: an encrypted member; NotImplementedError: an unknown compression method
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None
    except MemoryError:
        raise CheckpointError(f"{path}: not enough memory to load its {_total(members):,} bytes of arrays") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        meta = meta if isinstance(meta, dict) else {}
        raise CheckpointError(f"{path}: format {meta.get('format')!r} version {meta.get('version')!r}; "
                              f"this gpugrad reads {FORMAT!r} version {VERSION}")
    if "tree" not in meta:
        raise CheckpointError(f"{path}: corrupt checkpoint: {META} has no 'tree'")
    return _unflatten(meta["tree"], arrays, device, path)


def _total(members):
    return sum(info.file_size for info in members.values())


def _members(z, path, limit):
    """array name -> ZipInfo for every member (all must be ``<name>.npy``), their total size checked against
    ``limit`` before anything is read."""
    members = {}
    for info in z.infolist():
        name = info.filename
        if not name.endswith(".npy") or name[:-4] in members:
            what = "a second member" if name[:-4] in members else "a member that is not a .npy array"
            raise CheckpointError(f"{path}: corrupt checkpoint: {what}: {name!r}")
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise CheckpointError(f"{path}: corrupt checkpoint: member {name!r} declares {info.file_size} bytes "
                                  f"but stores {info.compress_size}")
        members[name[:-4]] = info
    total = _total(members)
    if total > limit:
        raise CheckpointError(f"{path}: its arrays declare {total:,} bytes (uncompressed), more than the limit of "
                              f"{limit:,}; if you trust the file, raise the limit with {MAX_BYTES_ENV}=<bytes>")
    return members


def _read_member(z, info, path):
    """One ``.npy`` member as an array: its header's shape and dtype must account for exactly the member's
    (already capped) size, so nothing larger than the member is ever allocated."""
    name = info.filename
    with z.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f".npy format version {version[0]}.{version[1]} (save writes 1.0)")
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
        except (ValueError, SyntaxError, TypeError) as e:
            raise CheckpointError(f"{path}: corrupt checkpoint: member {name!r} has a bad .npy header ({e})") from None
        if dtype.hasobject:  # would need pickle, which this format never uses
            raise CheckpointError(f"{path}: corrupt checkpoint: member {name!r} holds Python objects ({dtype})")
        count = math.prod(shape)
        stored = info.file_size - f.tell()
        if min(shape, default=0) < 0 or count * dtype.itemsize != stored:
            raise CheckpointError(f"{path}: corrupt checkpoint: member {name!r} declares shape {shape} of {dtype} "
                                  f"({count * dtype.itemsize:,} bytes) but holds {stored:,} bytes")
        array = np.empty(count, dtype)
        if read_into(f, array) != stored:
            raise CheckpointError(f"{path}: corrupt checkpoint: member {name!r} is truncated")
        f.read()  # reaches the member's end, where zipfile checks its CRC
    return array.reshape(shape, order="F" if fortran else "C")
