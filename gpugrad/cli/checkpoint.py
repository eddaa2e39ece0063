"""Checkpoints: a nested dict of arrays and plain values in one ``.npz``, written atomically, read without pickle.

Every array-valued leaf (a Tensor, a NumPy or CuPy array, a NumPy scalar) is stored as its own ``.npy`` member
under its flattened path (``model/0.weight``, ``optimizer/state/0/exp_avg``); everything else (the tree's shape,
ints, floats, strings, lists, tuples, dicts with int keys) goes into one JSON document stored as the uint8 member
``__meta__``.  Loading uses ``numpy.load(allow_pickle=False)``, so a checkpoint can never run code.

Writes go to a temporary file in the target's directory, are fsynced and then ``os.replace``d over the target,
so an interrupted or failed save leaves the previous checkpoint untouched; a symlink is written through (its
target is replaced, the link stays).

>>> save("run.ckpt", {"model": model.state_dict(), "epoch": 3})           # doctest: +SKIP
>>> load("run.ckpt", device="cpu")["epoch"]                               # doctest: +SKIP
3
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

FORMAT = "gpugrad-checkpoint"
VERSION = 1
META = "__meta__"


class CheckpointError(ValueError):
    """A file that is not a readable gpugrad checkpoint."""


# -- tree <-> (arrays, JSON skeleton) ------------------------------------------------------------------------------
def _flatten(tree):
    """(dict path -> host array, JSON-able skeleton with {"__array__": path, "as": kind} at array leaves)."""
    from gpugrad._tensor import Tensor
    from gpugrad.backend import backend_of

    arrays = {}

    def leaf(value, path, kind):
        key = path or "root"
        while key in arrays:  # paths are unique unless keys themselves contain "/"
            key += "+"
        arrays[key] = value
        return {"__array__": key, "as": kind}

    def walk(v, path):
        if isinstance(v, Tensor):
            return leaf(np.asarray(v.detach()), path, "tensor")
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


def _unflatten(skeleton, arrays, device):
    from gpugrad.backend import get_backend
    from gpugrad.creation import tensor

    def walk(v):
        if isinstance(v, list):
            return [walk(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "__array__" in v:
            a, kind = arrays[v["__array__"]], v["as"]
            if kind == "tensor":
                return tensor(a, device=device)
            if kind == "scalar":
                return a[()]
            return get_backend(device).asarray(a) if kind == "array" else a
        if "__tuple__" in v:
            return tuple(walk(x) for x in v["__tuple__"])
        if "__dict__" in v:
            return {k: walk(x) for k, x in v["__dict__"]}
        return {k: walk(x) for k, x in v.items()}

    return walk(skeleton)


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


def atomic_write(path, write, what="output"):
    """Call ``write(file)`` on a temporary file next to ``path``, fsync it, then rename it over ``path``.

    A symlink at ``path`` is written through (its target is replaced); a directory or other non-file there is an
    OutputPathError.  On any exception (KeyboardInterrupt included) the temporary file is removed and ``path``
    is untouched.
    """
    path = output_path(path, what)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):  # mkstemp makes 0600; use the mode a plain open() would (POSIX only)
                os.fchmod(f.fileno(), _file_mode(path))
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # NOTE: the rename itself is durable only once the directory entry is flushed (POSIX; not on Windows)
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def _file_mode(path):
    """The target's current mode, or 0666 less the umask for a new file."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def save(path, tree, what="checkpoint") -> Path:
    """Write ``tree`` (nested dicts/lists/tuples of Tensors, arrays and JSON values) to ``path`` atomically."""
    arrays, skeleton = _flatten(tree)
    meta = json.dumps({"format": FORMAT, "version": VERSION, "tree": skeleton}).encode()
    members = {META: np.frombuffer(meta, np.uint8), **arrays}
    return atomic_write(path, lambda f: np.savez(f, **members), what)


def load(path, device=None):
    """The tree saved by :func:`save`; Tensors are created on ``device`` (None: the default device)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    if not zipfile.is_zipfile(path):  # NOTE: np.load would try pickle next and blame allow_pickle
        raise CheckpointError(f"not a gpugrad checkpoint: {path} (not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as z:
            if META not in z.files:
                raise CheckpointError(f"not a gpugrad checkpoint: {path} (no {META} member)")
            meta = json.loads(z[META].tobytes().decode())
            arrays = {k: z[k] for k in z.files if k != META}
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        meta = meta if isinstance(meta, dict) else {}
        raise CheckpointError(f"{path}: format {meta.get('format')!r} version {meta.get('version')!r}; "
                              f"this gpugrad reads {FORMAT!r} version {VERSION}")
    return _unflatten(meta["tree"], arrays, device)
