"""``gpugrad.save`` / ``gpugrad.load``: torch.save / torch.load's habits in a format that cannot run code on load.

A file is one safetensors file (https://github.com/huggingface/safetensors): the Tensors and NumPy arrays of the
saved object, each once (a Tensor saved twice comes back as one Tensor), and, in its metadata, a JSON manifest of
the object's structure: dicts (any JSON-able keys, int keys of optimizer states included, OrderedDicts kept),
lists, tuples, numbers, strings, None and bools, with references to the arrays. Loading parses JSON and copies
bytes; nothing is unpickled, so a crafted file cannot run code, and anything that is not a gpugrad save is a
:class:`SerializationError` naming the file.

>>> gpugrad.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, "ckpt.pt")
>>> ckpt = gpugrad.load("ckpt.pt", map_location="cpu")
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import OrderedDict

import numpy as np

FORMAT = "gpugrad.save/1"  # the metadata's "format" entry
_SCALARS = (type(None), bool, int, float, str)


class SerializationError(RuntimeError):
    """A file that is not a readable gpugrad save."""


def _st():
    try:
        import safetensors.numpy
    except ImportError as e:  # a dependency of gpugrad: only a broken install gets here
        raise ImportError("gpugrad.save / gpugrad.load need the safetensors package: pip install safetensors") from e
    return safetensors


def _manifest(obj):
    """(JSON-able manifest, {key: host array}) for ``obj``."""
    from gpugrad._tensor import Tensor
    from gpugrad.nn import Parameter

    arrays, keys = {}, {}  # keys: id(object) -> its key (each Tensor / array stored once)

    def store(v, host):
        if id(v) not in keys:
            keys[id(v)] = key = str(len(arrays))
            arrays[key] = np.require(host, requirements="C")  # (ascontiguousarray makes 0-d 1-d)
        return keys[id(v)]

    def walk(v, path, depth):
        if depth > 256:
            raise ValueError(f"gpugrad.save: {path} is nested more than 256 deep")
        if isinstance(v, Tensor):
            return {"tensor": store(v, v.detach().cpu().numpy()), "device": str(v.device),
                    "requires_grad": v.requires_grad, "parameter": isinstance(v, Parameter)}
        if isinstance(v, (np.ndarray, np.generic)):
            if v.dtype.hasobject:
                raise TypeError(f"gpugrad.save: {path} is an object array, which needs pickle to store")
            return {"ndarray": store(v, np.asarray(v)), "scalar": isinstance(v, np.generic)}
        if isinstance(v, _SCALARS):
            return v
        if isinstance(v, dict):
            return {"dict": [[walk(k, f"{path} key {k!r}", depth + 1), walk(x, f"{path}[{k!r}]", depth + 1)]
                             for k, x in v.items()], "ordered": isinstance(v, OrderedDict)}
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            return {type(v).__name__: [walk(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]}
        raise TypeError(f"gpugrad.save: cannot store {path}, a {type(v).__module__}.{type(v).__qualname__}: only "
                        "Tensors, NumPy arrays, numbers, strings, None, bools and dicts, lists and tuples of them "
                        "(gpugrad saves without pickle, so that loading a file cannot run code)")

    return walk(obj, "the object", 0), arrays


def save(obj, f):
    """Write ``obj`` (e.g. a state_dict, or a dict of them) to ``f``: a path (written atomically) or a binary file."""
    tree, arrays = _manifest(obj)
    data = _st().numpy.save(arrays, metadata={"format": FORMAT, "manifest": json.dumps(tree)})
    if hasattr(f, "write"):
        f.write(data)
        return
    path = os.fspath(f)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _device_for(saved, map_location):
    """Where a Tensor saved on ``saved`` goes: the saved device, or as ``map_location`` (a device, a string or a
    {saved: target} dict) says."""
    from gpugrad.backend import get_backend

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


def load(f, map_location=None, *, weights_only=True, mmap=None):
    """The object :func:`save` wrote to ``f`` (a path or a binary file). Tensors come back on the device they were
    saved from, or as ``map_location`` says; ``weights_only`` is accepted for torch's sake: no gpugrad file can hold
    code, whatever its value. ``mmap`` is accepted and ignored (the file is read into memory)."""
    from gpugrad.creation import as_tensor
    from gpugrad.nn import Parameter

    if callable(map_location):
        raise TypeError("gpugrad.load: map_location must be a device, a device string or a dict of them "
                        "(a function of torch storages has no meaning here)")
    name = os.fspath(f) if not hasattr(f, "read") else str(getattr(f, "name", "the file"))
    if hasattr(f, "read"):
        data = f.read()
    else:
        with open(os.fspath(f), "rb") as file:
            data = file.read()

    def bad(why):
        return SerializationError(f"{name} is not a file written by gpugrad.save ({why}); gpugrad.load reads only "
                                  "those (a plain .safetensors file: safetensors.numpy.load_file)")

    try:
        size = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8:8 + size]).get("__metadata__") or {} if 8 < len(data) and size <= len(data) else {}
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise bad("no gpugrad manifest" if isinstance(meta, dict) else "bad metadata")
        tree, arrays = json.loads(meta["manifest"]), _st().numpy.load(bytes(data))
    except SerializationError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever is wrong with the bytes, say it about this file
        raise bad(f"{type(e).__name__}: {e}") from None
    made = {}

    def array(key):
        if not isinstance(key, str) or key not in arrays:
            raise bad(f"the manifest names an array {key!r} the file does not hold")
        a = arrays[key]
        return a if a.flags.writeable else a.copy()

    def walk(node):
        if isinstance(node, _SCALARS):
            return node
        if not isinstance(node, dict):
            raise bad(f"unexpected {type(node).__name__} in the manifest")
        if "tensor" in node:
            if node["tensor"] not in made:
                device = _device_for(str(node.get("device", "cpu")), map_location)
                t = as_tensor(array(node["tensor"]), device=device)
                made[node["tensor"]] = Parameter(t, bool(node.get("requires_grad"))) if node.get("parameter") \
                    else t.requires_grad_(bool(node.get("requires_grad")))
            return made[node["tensor"]]
        if "ndarray" in node:
            a = array(node["ndarray"])
            return a[()] if node.get("scalar") else a
        if "dict" in node and isinstance(node["dict"], list):
            items = [(walk(k), walk(v)) for k, v in node["dict"]]
            return OrderedDict(items) if node.get("ordered") else dict(items)
        for kind in (list, tuple):
            if isinstance(node.get(kind.__name__), list):
                return kind(walk(x) for x in node[kind.__name__])
        raise bad(f"unknown manifest entry with keys {sorted(node)[:4]}")

    try:
        return walk(tree)
    except RecursionError:
        raise bad("its manifest is nested too deep") from None
    except (TypeError, ValueError) as e:  # e.g. a dict entry that is not a [key, value] pair, an unhashable key
        raise bad(f"{type(e).__name__}: {e}") from None
