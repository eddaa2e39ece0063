"""``gpugrad.Tensor``: the tensor state of ``core/tensor.py`` with its methods.

The methods come from two places: the families of ``gpugrad/methods/`` (written as ``def``s), and the registry
(``core/registry.py``): every op frontend and composite registered as a method becomes ``Tensor.<name>``, and its
in-place form ``Tensor.<name>_`` where torch has one. ``_tensor.pyi`` lists them all with their signatures (written
by ``python -m gpugrad.testing.stubgen``; ``tests/project/test_layering.py`` keeps it current).
"""
from __future__ import annotations

from gpugrad import functional  # noqa: F401  (registers the composites bound below)
from gpugrad.core.registry import FRONTENDS
from gpugrad.core.tensor import TensorBase, set_tensor_class
from gpugrad.methods.arithmetic import ArithmeticMethods
from gpugrad.methods.autograd import AutogradMethods
from gpugrad.methods.conversion import ConversionMethods
from gpugrad.methods.creation import CreationMethods
from gpugrad.methods.inplace import InplaceMethods
from gpugrad.methods.movement import MovementMethods
from gpugrad.methods.printing import PrintingMethods
from gpugrad.ops import catalog  # noqa: F401  (registers every op and its frontend)


class Tensor(AutogradMethods, ArithmeticMethods, MovementMethods, InplaceMethods, ConversionMethods, CreationMethods,
             PrintingMethods, TensorBase):
    """An n-dimensional array on a device that can record the ops applied to it.

    >>> x = gpugrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4., 6.])
    """

    __slots__ = ()

    def where(self, condition, other):
        """``condition ? self : other`` (torch's Tensor.where)."""
        return functional.where(condition, self, other)


def _method(front):
    fn = front.fn

    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = front.name
    method.__doc__, method.__wrapped__ = fn.__doc__, fn
    return method


def _inplace_method(front):
    fn, name = front.fn, front.name + "_"

    def method(self, *args, **kwargs):
        return self._inplace(name, lambda: fn(self, *args, **kwargs),
                             tuple(a for a in (*args, *kwargs.values()) if isinstance(a, TensorBase)))

    method.__name__ = method.__qualname__ = name
    method.__doc__, method.__wrapped__ = f"In-place {front.name}: see ``{front.name}``.", fn
    return method


def bind_frontends(cls):
    """Give ``cls`` a method for every registered frontend (a ``def`` in the class body wins)."""
    for front in FRONTENDS.values():
        if front.method and not hasattr(cls, front.name):
            setattr(cls, front.name, front.fn if _binds_as_is(front.fn) else _method(front))
        if front.inplace and not hasattr(cls, front.name + "_"):
            setattr(cls, front.name + "_", _inplace_method(front))


def _binds_as_is(fn):
    # A plain function whose first parameter is the tensor works as a method unwrapped: one call less per use.
    return getattr(fn, "__code__", None) is not None and fn.__code__.co_argcount >= 1


bind_frontends(Tensor)
set_tensor_class(Tensor)
