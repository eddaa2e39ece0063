"""``gpugrad.save`` / ``gpugrad.load``: torch.save / torch.load's habits in a format that cannot run code on load.

A file is one safetensors file (https://github.com/huggingface/safetensors): the Tensors and NumPy arrays of the
saved object, each once (a Tensor saved twice comes back as one Tensor), and, in its metadata, a JSON manifest of
the object's structure: dicts and OrderedDicts (any keys of the kinds below, int keys of optimizer states included),
lists, tuples, ``gpugrad.Size``, gpugrad's ``return_types`` (``x.max(1)``), numbers, strings, None and bools, with
references to the arrays. complex128 arrays, which safetensors lacks, are stored as float64 (real, imaginary) pairs.
``save`` refuses, naming the place and the type, whatever ``load`` could not rebuild exactly without running code
(other tuple, list, dict or number subclasses, named tuples, other dtypes), so it never writes a file ``load``
refuses. Loading parses JSON and copies bytes; nothing is unpickled, so a crafted file cannot run code, and anything
that is not a gpugrad save, or any inconsistency in one, is a :class:`SerializationError` naming the file.

Saving to a path is atomic: a temporary file in the target's directory (a symlink's target: the link stays), fsynced
and renamed over the target, keeping an existing file's mode (a new one gets the umask's, as ``open()`` gives). A
failed save (a full disk, Ctrl-C) leaves the old file as it was and no temporary file behind. Loading reads the
8-byte header first and checks every declared size against the file and against ``MAX_BYTES`` (2 GiB of arrays;
``GPUGRAD_MAX_CHECKPOINT_BYTES=<bytes>`` changes it, as for the CLI's checkpoints) before it allocates anything.

>>> gpugrad.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, "ckpt.pt")
>>> ckpt = gpugrad.load("ckpt.pt", map_location="cpu")
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import stat
from collections import OrderedDict

import numpy as np

from gpugrad import return_types
from gpugrad._tensor import Tensor
from gpugrad.backend import get_backend, parse_device
from gpugrad.creation import as_tensor
from gpugrad.data.idx import byte_limit, read_into
from gpugrad.dtypes import BF16, Size
from gpugrad.nn.parameter import Parameter

FORMAT = "gpugrad.save/1"  # the metadata's "format" entry
MAX_BYTES = 2 << 30  # default cap on a file's arrays, for gpugrad.load and `gpugrad train`'s checkpoints alike
MAX_BYTES_ENV = "GPUGRAD_MAX_CHECKPOINT_BYTES"  # overrides MAX_BYTES (here and for `gpugrad train`'s checkpoints)
MAX_HEADER = 100_000_000  # bytes of JSON header: safetensors' own limit
_SCALARS = (type(None), bool, int, float, str)
# the sequence types load rebuilds, by the manifest entry's name (the names save has always written)
_SEQUENCES = {"list": list, "tuple": tuple, "Size": Size, **{n: getattr(return_types, n) for n in return_types.__all__}}
_SEQUENCE_NAMES = {kind: name for name, kind in _SEQUENCES.items()}
# safetensors' dtype codes gpugrad reads, little-endian as the format is
_DTYPES = {"BOOL": "?", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "F16": "<f2", "U32": "<u4", "I32": "<i4",
           "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8", "C64": "<c8", "BF16": BF16}
_STORABLE = {np.dtype(d).newbyteorder("=") for d in _DTYPES.values()}
_NODE_FIELDS = {"tensor": {"tensor": str, "device": str, "requires_grad": bool, "parameter": bool},
                "ndarray": {"ndarray": str, "scalar": bool}, "dict": {"dict": list, "ordered": bool}}


class SerializationError(RuntimeError):
    """A file that is not a readable gpugrad save."""


def _st():
    try:
        import safetensors.numpy
    except ImportError as e:  # a dependency of gpugrad: only a broken install gets here
        raise ImportError("gpugrad.save / gpugrad.load need the safetensors package: pip install safetensors") from e
    return safetensors


def _host(a, path):
    """The array safetensors stores for ``a``, and the manifest's ``dtype`` entry when it is not ``a``'s own."""
    if a.dtype.hasobject:
        raise TypeError(f"gpugrad.save: {path} is an object array, which needs pickle to store")
    if a.dtype.newbyteorder("=") == np.complex128:  # NOTE: safetensors has complex64 only
        return np.stack([a.real, a.imag], axis=-1), "complex128"
    if a.dtype.newbyteorder("=") not in _STORABLE:
        raise TypeError(f"gpugrad.save: cannot store {path}, an array of dtype {a.dtype}: a safetensors file holds "
                        "bool, (u)int8-64, float16/32/64, bfloat16 and complex64/128; convert it first (e.g. .astype(float))")
    return np.require(a, requirements="C"), None  # (ascontiguousarray makes 0-d 1-d)


def _manifest(obj):
    """(JSON-able manifest, {key: host array}) for ``obj``."""
    arrays, keys = {}, {}  # keys: id(object) -> (its key, its dtype entry) (each Tensor / array stored once)

    def store(v, host, path):
        if id(v) not in keys:
            array, dtype = _host(host, path)
            keys[id(v)] = key, _ = str(len(arrays)), dtype
            arrays[key] = array
        key, dtype = keys[id(v)]
        return {"tensor" if isinstance(v, Tensor) else "ndarray": key, **({"dtype": dtype} if dtype else {})}

    def walk(v, path, depth):
        if depth > 256:
            raise ValueError(f"gpugrad.save: {path} is nested more than 256 deep")
        if isinstance(v, Tensor):
            return {**store(v, v.detach().cpu().numpy(), path), "device": str(v.device),
                    "requires_grad": v.requires_grad, "parameter": isinstance(v, Parameter)}
        if isinstance(v, (np.ndarray, np.generic)):
            return {**store(v, np.asarray(v), path), "scalar": isinstance(v, np.generic)}
        if type(v) in _SCALARS:
            return v
        if type(v) in (dict, OrderedDict):
            return {"dict": [[walk(k, f"{path} key {k!r}", depth + 1), walk(x, f"{path}[{k!r}]", depth + 1)]
                             for k, x in v.items()], "ordered": type(v) is OrderedDict}
        if type(v) in _SEQUENCE_NAMES:
            return {_SEQUENCE_NAMES[type(v)]: [walk(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]}
        kind = f"{type(v).__module__}.{type(v).__qualname__}"
        if isinstance(v, (*_SCALARS, dict, list, tuple)):  # a subclass: load could rebuild only its base
            base = next(b for b in (bool, int, float, str, dict, list, tuple) if isinstance(v, b)).__name__
            how = "._asdict() (a dict) or tuple(...)" if hasattr(v, "_fields") else f"{base}(...)"
            raise TypeError(f"gpugrad.save: cannot store {path}, a {kind} (a {base} subclass): gpugrad.load could "
                            f"rebuild it only as a plain {base}, and importing its class would mean running code; "
                            f"convert it with {how} first")
        raise TypeError(f"gpugrad.save: cannot store {path}, a {kind}: only Tensors, NumPy arrays, numbers, "
                        "strings, None, bools and dicts, lists, tuples and gpugrad.Size of them (gpugrad saves without "
                        "pickle, so that loading a file cannot run code)")

    return walk(obj, "the object", 0), arrays


def save(obj, f):
    """Write ``obj`` (e.g. a state_dict, or a dict of them) to ``f``: a path (written atomically, through a
    symlink, keeping the file's mode) or a binary file."""
    tree, arrays = _manifest(obj)
    data = _st().numpy.save(arrays, metadata={"format": FORMAT, "manifest": json.dumps(tree)})
    if (n := int.from_bytes(data[:8], "little")) > MAX_HEADER:
        raise ValueError(f"gpugrad.save: the object's structure takes {n:,} bytes of JSON, more than the "
                         f"{MAX_HEADER:,} a safetensors header may hold; store long lists of numbers as an array")
    if hasattr(f, "write"):
        f.write(data)
    else:
        write_atomically(os.fspath(f), data)


class WriteError(OSError):
    """A failed atomic write: ``errno`` and ``filename`` as the cause's; its text is one sentence naming the file."""

    def __str__(self):
        return self.strerror


def write_atomically(path, data, *, by="gpugrad.save", kind="file"):
    """``data`` (bytes, or a function writing into a binary file) into ``path``'s file (a symlink's target) as one
    rename, keeping an existing file's mode.  On any exception (KeyboardInterrupt too) the target stays as it was
    and no temporary file is left; an OSError becomes a WriteError: "<by> could not write <path>: <reason>; the
    previous <kind> there is intact" (or "no <kind> was written").  A temporary file a killed writer left
    (``.<name>.<pid>.<8 hex digits>.tmp``, that pid no longer running) is removed first."""
    target = os.path.realpath(path)
    folder, name = os.path.split(target)
    for stale in _stale_temps(folder, name):
        with contextlib.suppress(OSError):
            os.unlink(stale)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    made, mode = False, None
    try:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            pass  # NOTE: os.open's 0o666 then gets the umask (and a default ACL) applied, as open()'s does
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        made = True
        with os.fdopen(fd, "wb") as out:
            if mode is not None and hasattr(os, "fchmod"):
                os.fchmod(out.fileno(), mode)
            if callable(data):
                data(out)
            else:
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        if made:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, OSError):
            where = path if target == os.path.abspath(path) else f"{path} (-> {target})"
            kept = f"the previous {kind} there is intact" if mode is not None else f"no {kind} was written"
            raise WriteError(e.errno, f"{by} could not write {where}: {e.strerror or e}; {kept}".lstrip(),
                             os.fspath(path)) from None
        raise
    with contextlib.suppress(OSError):  # NOTE: the rename is durable once the directory entry is flushed (POSIX)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return target


def _stale_temps(folder, name):
    """Temporary files of ``write_atomically`` into ``folder/name`` whose writer is gone: regular files named
    ``.<name>.<pid>.<8 chars>.tmp`` with no running process ``pid``."""
    if os.name != "posix":  # NOTE: os.kill(pid, 0) would terminate the process on Windows; keep everything
        return []
    pattern = re.compile(re.escape(f".{name}.") + r"(\d+)\.[a-z0-9_]{8}\.tmp")
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [e.path for e in entries if (m := pattern.fullmatch(e.name)) and e.is_file(follow_symlinks=False)
            and not _running(int(m.group(1)))]


def _running(pid):
    """Whether ``pid`` may still be writing (this process, another thread, counts as running)."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # someone else's process (EPERM), or no valid pid: leave its file alone
        pass
    return True


def _device_for(saved, map_location, bad):
    """Where a Tensor saved on ``saved`` goes: the saved device, or as ``map_location`` (a device, a string or a
    {saved: target} dict) says."""

    try:
        parse_device(saved)
    except (RuntimeError, ValueError):
        raise bad(f"a tensor on an unknown device {saved!r}") from None
    if isinstance(map_location, dict):
        map_location = map_location.get(saved, saved)
    target = saved if map_location is None else map_location
    try:
        return get_backend(target).device
    except (RuntimeError, ValueError) as e:
        if map_location is None:
            raise RuntimeError(f"Attempting to deserialize a Tensor saved on {saved}, which is not available here "
                               f"({e}); pass map_location='cpu' (or another device) to gpugrad.load") from None
        raise


class _Reader:
    """``readinto`` for a file object that has only ``read``."""
    def __init__(self, f):
        self.read = f.read

    def readinto(self, view):
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)


def _open_regular(path):
    """``path`` opened for reading, refused unless it is a regular file (a FIFO, a device, a directory would block,
    never end or not be a file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))  # FIFOs: no wait
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "gpugrad.load: a directory, not a file gpugrad.save wrote", path)
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "not a plain file")
        raise SerializationError(f"{path} is {kind}, not a regular file; gpugrad.load reads files gpugrad.save wrote "
                                 "(or a binary file object)")
    return os.fdopen(fd, "rb")


def _remaining(f):
    """Bytes left in the file object ``f``, or None when it cannot tell."""
    try:
        if not f.seekable():
            return None
        here = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


def _read_arrays(f, size, exact, bad, name):
    """(metadata, {key: array}) of the safetensors file ``f``: header first, every declared size checked against
    ``size`` (the bytes left in ``f``, all of them the file's when ``exact``; None: unknown) and the byte limit
    before an array is allocated, then each array read into its own buffer."""
    limit = byte_limit(None, MAX_BYTES_ENV, MAX_BYTES, SerializationError)
    head = np.empty(8, np.uint8)
    if read_into(f, head) < 8:
        raise bad("shorter than a safetensors header")
    n = int.from_bytes(head.tobytes(), "little")
    if n > MAX_HEADER or size is not None and 8 + n > size:
        raise bad(f"a header of {n:,} bytes, past the end of the file or safetensors' limit of {MAX_HEADER:,}")
    text = np.empty(n, np.uint8)
    if read_into(f, text) < n:
        raise bad("its header is cut short")
    header = json.loads(text.tobytes())
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("manifest"), str):
        raise bad("no gpugrad manifest" if meta is None or isinstance(meta, dict) else "bad metadata")
    entries, end = sorted(_entry(key, info, bad) for key, info in header.items()), 0
    for begin, stop, key, _, _ in entries:
        if begin != end:  # NOTE: as safetensors requires: no gaps, no overlaps (no two arrays sharing bytes)
            raise bad(f"array {key!r} starts at byte {begin:,} of the data, not at {end:,}")
        end = stop
    if size is not None and (8 + n + end != size if exact else 8 + n + end > size):
        raise bad(f"the header declares {end:,} bytes of arrays, the file holds {size - 8 - n:,}")
    if end > limit:
        raise SerializationError(f"{name}: its arrays take {end:,} bytes, more than gpugrad.load reads ({limit:,}); "
                                 f"set {MAX_BYTES_ENV}=<bytes> to load it")
    arrays = {}
    try:
        for begin, stop, key, dtype, shape in entries:
            buf = np.empty(stop - begin, np.uint8)
            if read_into(f, buf) < stop - begin:
                raise bad(f"array {key!r} is cut short")
            if dtype == np.bool_ and (buf > 1).any():
                raise bad(f"bool array {key!r} holds bytes other than 0 and 1")
            arrays[key] = buf.view(dtype).reshape(shape)
    except MemoryError:
        raise SerializationError(f"{name}: not enough memory to load its {end:,} bytes of arrays") from None
    return meta, arrays


def _entry(key, info, bad):
    """(begin, end, key, dtype, shape) of one header entry, its byte count checked against its shape."""
    if not isinstance(info, dict) or info.get("dtype") not in _DTYPES:
        raise bad(f"array {key!r} has dtype {info.get('dtype') if isinstance(info, dict) else info!r}, not one of "
                  f"{', '.join(_DTYPES)}")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) \
            or not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets):
        raise bad(f"array {key!r} has a malformed shape {shape!r} or data_offsets {offsets!r}")
    dtype = np.dtype(_DTYPES[info["dtype"]])
    begin, end = offsets
    if not 0 <= begin <= end or end - begin != math.prod(shape) * dtype.itemsize:
        raise bad(f"array {key!r} of shape {shape} and dtype {info['dtype']} declares bytes {begin}..{end}")
    return begin, end, key, dtype, tuple(shape)


def load(f, map_location=None, *, weights_only=True, mmap=None):
    """The object :func:`save` wrote to ``f`` (a path or a binary file). Tensors come back on the device they were
    saved from, or as ``map_location`` says; ``weights_only`` is accepted for torch's sake: no gpugrad file can hold
    code, whatever its value. ``mmap`` is accepted and ignored (the file is read into memory)."""

    if callable(map_location):
        raise TypeError("gpugrad.load: map_location must be a device, a device string or a dict of them "
                        "(a function of torch storages has no meaning here)")
    name = os.fspath(f) if not hasattr(f, "read") else str(getattr(f, "name", "the file"))

    def bad(why):
        return SerializationError(f"{name} is not a file written by gpugrad.save ({why}); gpugrad.load reads only "
                                  "those (a plain .safetensors file: safetensors.numpy.load_file)")

    try:
        if hasattr(f, "read"):
            meta, arrays = _read_arrays(f if hasattr(f, "readinto") else _Reader(f), _remaining(f), False, bad, name)
        else:
            with _open_regular(name) as file:
                meta, arrays = _read_arrays(file, os.fstat(file.fileno()).st_size, True, bad, name)
        tree = json.loads(meta["manifest"])
    except SerializationError:
        raise
    except (ValueError, RecursionError) as e:  # JSON that does not parse or nests past the recursion limit
        raise bad(f"{type(e).__name__}: {e}") from None
    made = {}

    def array(node, kind):
        key, dtype = node[kind], node.pop("dtype", None)
        if key not in arrays:
            raise bad(f"the manifest names an array {key!r} the file does not hold")
        a = arrays[key]
        if dtype == "complex128" and a.dtype == np.float64 and a.ndim and a.shape[-1] == 2:
            return a.view(np.complex128)[..., 0]
        if dtype is not None:
            raise bad(f"array {key!r} of dtype {a.dtype} and shape {a.shape} marked as {dtype!r}")
        return a

    def fields(node):
        """The kind of a manifest entry, its fields checked."""
        kinds = [k for k in node if k in _NODE_FIELDS or k in _SEQUENCES]
        if len(kinds) != 1:
            raise bad(f"unknown manifest entry with keys {sorted(node)[:4]}")
        want = _NODE_FIELDS.get(kinds[0], {kinds[0]: list})
        extra = set(node) - set(want) - ({"dtype"} if kinds[0] in ("tensor", "ndarray") else set())
        wrong = [k for k, t in want.items() if not isinstance(node.get(k), t)]
        if extra or wrong:
            raise bad(f"a {kinds[0]!r} manifest entry with {'unknown' if extra else 'missing or mistyped'} fields "
                      f"{sorted(extra or wrong)}")
        return kinds[0]

    def walk(node):
        if type(node) in _SCALARS:
            return node
        if not isinstance(node, dict):
            raise bad(f"unexpected {type(node).__name__} in the manifest")
        kind = fields(node)
        if kind == "tensor":
            key = node["tensor"]
            if key not in made:
                a = array(node, kind)
                if node["requires_grad"] and a.dtype.kind not in "fV":
                    raise bad(f"a {a.dtype} tensor {key!r} marked requires_grad (only floating point tensors can "
                              "require gradients)")
                t = as_tensor(a, device=_device_for(node["device"], map_location, bad))
                made[key] = Parameter(t, node["requires_grad"]) if node["parameter"] \
                    else t.requires_grad_(node["requires_grad"])
            return made[key]
        if kind == "ndarray":
            a = array(node, kind)
            if node["scalar"] and a.ndim:
                raise bad(f"a scalar of shape {a.shape}")
            return a[()] if node["scalar"] else a
        if kind == "dict":
            if not all(isinstance(kv, list) and len(kv) == 2 for kv in node["dict"]):
                raise bad("a dict entry that is not a [key, value] pair")
            items = [(walk(k), walk(v)) for k, v in node["dict"]]
            return OrderedDict(items) if node["ordered"] else dict(items)
        return _SEQUENCES[kind](walk(x) for x in node[kind])

    try:
        return walk(tree)
    except RecursionError:
        raise bad("its manifest is nested too deep") from None
    except (TypeError, ValueError) as e:  # an unhashable key, a return type of the wrong length
        raise bad(f"{type(e).__name__}: {e}") from None
