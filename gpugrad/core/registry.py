"""The op registry: every differentiable op class by its registered name, and every user-facing function built from
one (its Tensor method, top-level function and in-place form), so one registration does the bookkeeping.

    @register("sum")                           # op class: node name SumBackward0, gpugrad.sum, Tensor.sum
    class Sum(Op):
        @staticmethod
        def sum(input, dim=None, keepdim=False, *, dtype=None):   # the frontend: torch's signature
            return Sum.apply(input, axis=dim, keepdims=keepdim)

    @composite("prod", inplace=False)          # a function of other ops: the same bindings, no op class
    def prod(input, dim=None, keepdim=False, *, dtype=None): ...

``gpugrad/_tensor.py`` binds every entry of ``FRONTENDS`` onto Tensor (and writes ``_tensor.pyi`` from them), and
``gpugrad/functional.py`` makes the top-level functions; ``tests/op_cases.py`` must have a row for every op.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

REGISTRY: dict[str, type] = {}


@dataclass(frozen=True)
class Frontend:
    """How a function appears to users: ``fn(input, *args, **kwargs)`` as ``Tensor.<name>`` (``method``), as
    ``gpugrad.<name>`` (``function``) and as ``Tensor.<name>_`` (``inplace``: computed out of place, then written
    into the tensor with the in-place checks and version bump)."""
    name: str
    fn: Callable
    method: bool = True
    function: bool = True
    inplace: bool = False
    number_input: bool = False  # gpugrad.<name> also takes a Python number as input (torch.pow(2, x))


FRONTENDS: dict[str, Frontend] = {}


def node_name(name: str) -> str:
    """torch's node name for an op name: its parts title-cased (``log1p`` -> ``Log1PBackward0``, ``log_softmax`` ->
    ``LogSoftmaxBackward0``), as torch's autograd codegen names them; the 0 is torch's first overload."""
    return "".join(p.title() for p in name.split("_")) + "Backward0"


def _add_frontend(front: Frontend):
    if front.name in FRONTENDS:
        raise ValueError(f"frontend {front.name!r} registered twice")
    front.fn.__name__ = front.fn.__qualname__ = front.name
    FRONTENDS[front.name] = front


def register(name: str, *, method=None, function=None, inplace=False, node: str | None = None, number_input=False):
    """Class decorator: ``name`` is the op's registered name. Its frontend is the static method of the same name if
    the class defines one (else ``apply``); ``method``/``function`` default to whether it defines one, so internal
    ops (kernel fusions, casts) get no bindings. ``node`` overrides the node name where torch's differs."""
    def deco(cls):
        if name in REGISTRY:
            raise ValueError(f"op {name!r} registered twice")
        REGISTRY[name] = cls
        cls.op_name = name
        if node is not None:
            cls.node_name = node
        elif "node_name" not in cls.__dict__:
            cls.node_name = node_name(name)
        front = cls.__dict__.get(name)
        fn = front.__func__ if isinstance(front, staticmethod) else None
        public = fn is not None
        on_tensor = method if method is not None else public
        if on_tensor or function:
            _add_frontend(Frontend(name, fn or _applier(cls), on_tensor, public if function is None else function,
                                   inplace, number_input))
        return cls

    return deco


def composite(name: str, *, method=True, function=True, inplace=False):
    """Function decorator: a user-facing function written with other ops, bound like an op's frontend."""
    def deco(fn):
        _add_frontend(Frontend(name, fn, method, function, inplace))
        return fn

    return deco


def _applier(cls):
    def apply(input, *args, **params):
        return cls.apply(input, *args, **params)

    return apply
