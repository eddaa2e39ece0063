"""CuPy's public surface as data: which names, methods and keyword arguments CuPy 14 offers.

The simulated device (``cuda_sim``) exposes only what is listed in ``cupy_namespace.json``, so code that works on
it cannot lean on a NumPy-only function or keyword.  The file is generated from an installed CuPy (which imports
without a GPU) by ``python -m gpugrad.testing.cuda_sim.namespace --write``; ``tests/cuda/test_cuda_sim.py`` checks it
against the installed CuPy wherever CuPy imports.

A signature is ``{"params": [...], "kwonly": [...], "posonly": n, "varargs": bool, "varkw": bool}``, read with
``inspect.signature`` where CuPy's functions are Python, else from the first docstring line that Cython writes.
"""
from __future__ import annotations

import inspect
import json
import re
import sys
from functools import cache
from pathlib import Path

PATH = Path(__file__).with_name("cupy_namespace.json")


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def _from_text(params_text: str) -> dict:
    sig = {"params": [], "kwonly": [], "posonly": 0, "varargs": False, "varkw": False}
    kwonly = False
    for p in _split_top(params_text.replace("\\*", "*")):
        name = p.split("=", 1)[0].split(":", 1)[0].strip()
        if name == "/":
            sig["posonly"] = len(sig["params"])
        elif name == "*":
            kwonly = True
        elif name.startswith("**"):
            sig["varkw"] = True
        elif name.startswith("*"):
            sig["varargs"], kwonly = True, True
        else:
            name = name.split()[-1]  # Cython writes "str code=None": the type comes first
            if name != "self":
                sig["kwonly" if kwonly else "params"].append(name)
    return sig


def _from_inspect(s: inspect.Signature) -> dict:
    sig = {"params": [], "kwonly": [], "posonly": 0, "varargs": False, "varkw": False}
    for p in s.parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.POSITIONAL_ONLY:
            sig["params"].append(p.name)
            sig["posonly"] = len(sig["params"])
        elif p.kind is p.POSITIONAL_OR_KEYWORD:
            sig["params"].append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            sig["varargs"] = True
        elif p.kind is p.KEYWORD_ONLY:
            sig["kwonly"].append(p.name)
        else:
            sig["varkw"] = True
    return sig


def signature_of(obj, name: str) -> dict | None:
    try:
        return _from_inspect(inspect.signature(obj))
    except (TypeError, ValueError):
        pass
    for line in (getattr(obj, "__doc__", None) or "").strip().splitlines()[:3]:
        m = re.match(rf"^[\w.]*\b{re.escape(name)}\((.*)\)", line.strip())
        if m:
            return _from_text(m.group(1))
    return None


def _public(obj):
    return sorted(n for n in dir(obj) if not n.startswith("_"))


def generate() -> dict:
    """The namespace of the installed CuPy (imports it; needs no GPU)."""
    import warnings

    import cupy
    import cupy.cuda
    import cupy.cuda.runtime
    import cupy.linalg
    import cupy.random

    with warnings.catch_warnings():  # NOTE: imported lazily by CuPy; it warns when libnccl is missing (no GPU)
        warnings.simplefilter("ignore")
        import cupy.cuda.nccl  # noqa: F401  (the simulator has it, for gpugrad.distributed's "nccl" backend)

    ufunc_type = type(cupy.add)
    functions, ufuncs, classes, constants = {}, {}, {}, []
    for n in _public(cupy):
        obj = getattr(cupy, n)
        if isinstance(obj, ufunc_type):
            ufuncs[n] = {"nin": obj.nin, "nout": obj.nout, "sig": signature_of(obj, n)}
        elif inspect.isclass(obj):
            classes[n] = signature_of(obj, n)
        elif callable(obj) and not inspect.ismodule(obj):
            functions[n] = signature_of(obj, n)
        elif obj is None or isinstance(obj, (int, float)):
            constants.append(n)
    methods, attributes = {}, []
    for n in _public(cupy.ndarray):
        obj = getattr(cupy.ndarray, n)
        if callable(obj):
            methods[n] = signature_of(obj, n)
        else:
            attributes.append(n)
    dunders = sorted(n for n in dir(cupy.ndarray) if n.startswith("__") and n.endswith("__"))
    return {
        "cupy_version": cupy.__version__,
        "functions": functions,
        "ufuncs": ufuncs,
        "classes": classes,
        "constants": constants,
        "ndarray_methods": methods,
        "ndarray_attributes": attributes,
        "ndarray_dunders": dunders,
        "ufunc_methods": {n: signature_of(getattr(ufunc_type, n), n) for n in _public(ufunc_type)
                          if callable(getattr(ufunc_type, n))},
        "random": {n: signature_of(getattr(cupy.random, n), n) for n in _public(cupy.random)
                   if callable(getattr(cupy.random, n))},
        "random_generator": {n: signature_of(getattr(cupy.random.Generator, n), n)
                             for n in _public(cupy.random.Generator)},
        "linalg": {n: signature_of(getattr(cupy.linalg, n), n) for n in _public(cupy.linalg)
                   if callable(getattr(cupy.linalg, n)) and not inspect.isclass(getattr(cupy.linalg, n))},
        "cuda": _public(cupy.cuda),
        "cuda_runtime": _public(cupy.cuda.runtime),
        "cuda_device": _public(cupy.cuda.Device),
        "cuda_stream": _public(cupy.cuda.Stream),
        "cuda_event": _public(cupy.cuda.Event),
    }


@cache
def load() -> dict:
    return json.loads(PATH.read_text())


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    data = generate()
    if "--write" in argv:
        PATH.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
        print(f"wrote {PATH} (CuPy {data['cupy_version']}: {len(data['functions'])} functions, "
              f"{len(data['ufuncs'])} ufuncs, {len(data['ndarray_methods'])} ndarray methods)")
    else:
        print(json.dumps(data, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
