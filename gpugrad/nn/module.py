"""``Module``: the base class of layers.  Attributes that are Parameters, Modules or buffers are registered by
``__setattr__``, so ``parameters()``, ``state_dict()``, ``to()`` and ``train()`` find them without boilerplate."""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of, get_backend, on
from gpugrad.core import trace as _trace
from gpugrad.core.backprop import clear_grad
from gpugrad.dtypes import is_dtype, to_np
from gpugrad.nn import hooks as _hooks
from gpugrad.nn.parameter import Parameter


class _IncompatibleKeys(NamedTuple):
    missing_keys: list
    unexpected_keys: list

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys}, unexpected_keys={self.unexpected_keys})"


IncompatibleKeys = _IncompatibleKeys


def _array_on(value, be):
    """A checkpoint value (Tensor, NumPy / CuPy array, list) as an array on backend ``be`` (no copy when it is one
    there already: the caller copies it into place)."""
    array = value._data if isinstance(value, Tensor) else value
    try:
        src = backend_of(array)
    except TypeError:
        return be.asarray(np.asarray(array))
    return array if src is be else be.asarray(src.to_host(array))


def _moved(array, be, dtype):
    """``array`` on backend ``be`` (a copy only when the device or dtype changes)."""
    src = backend_of(array)
    if src is not be:
        array = be.asarray(src.to_host(array))
    if dtype is not None and array.dtype.kind in "fV" and array.dtype != dtype:
        array = array.astype(dtype)  # like torch: module.to(dtype) casts floating-point tensors only
    return array


class Module:
    """Base class of all layers: subclass it, assign Parameters / Modules in ``__init__``, define ``forward``.

    >>> class Affine(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = nn.Parameter(gpugrad.ones(3))
    ...     def forward(self, x):
    ...         return x * self.w
    >>> [n for n, _ in Affine().named_parameters()]
    ['w']
    """

    def __init__(self):
        # object.__setattr__: our own __setattr__ needs these dicts to exist already
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_hook_dicts", _hooks.new_hooks())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        hooked = any(self.__dict__.get("_hook_dicts", {}).values())
        stack = _trace.WATCH.modules  # a list only inside autograd.record(): explain/draw know who made each node
        if stack is None:
            return _hooks.call(self, self.forward, args, kwargs) if hooked else self.forward(*args, **kwargs)
        stack.append(self)
        try:
            return _hooks.call(self, self.forward, args, kwargs) if hooked else self.forward(*args, **kwargs)
        finally:
            stack.pop()

    # -- hooks (torch's; each returns a handle whose remove() unregisters it) -------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` -> None or new args (``with_kwargs``: ``hook(module, args, kwargs)`` -> None or
        (args, kwargs)), before each forward."""
        return _hooks.add(self, "forward_pre", hook, prepend, with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` -> None or a new output (``with_kwargs``: ``hook(module, args, kwargs,
        output)``), after each forward (``always_call``: also when forward raises, with output None)."""
        return _hooks.add(self, "forward", hook, prepend, with_kwargs=with_kwargs, always_call=always_call)

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` -> None or new grad_input, once the gradients of the positional
        Tensor inputs are computed (tuples as torch: None for inputs without a gradient)."""
        return _hooks.add(self, "backward", hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` -> None or new grad_output, when the outputs' gradients arrive."""
        return _hooks.add(self, "backward_pre", hook, prepend)

    # -- registration ---------------------------------------------------------------------------------------------
    def _registry(self):
        d = self.__dict__.get("_parameters")
        if d is None:
            raise AttributeError(f"cannot assign to {type(self).__name__} before Module.__init__() is called "
                                 "(call super().__init__() first)")
        return d

    def _forget(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            d.pop(name, None)
        self._non_persistent.discard(name)
        self.__dict__.pop(name, None)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._registry()
            if name not in self._parameters:  # reassigning keeps the slot: parameters()/state_dict order is stable
                self._forget(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._registry()
            if name not in self._modules:
                self._forget(name)
            self._modules[name] = value
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as parameter {name!r} "
                                "(an nn.Parameter or None is expected)")
            self._parameters[name] = None
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module {name!r} "
                                "(an nn.Module or None is expected)")
            self._modules[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (a Tensor or None is "
                                "expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):  # only called when normal lookup fails
        for key in ("_parameters", "_buffers", "_modules"):
            d = self.__dict__.get(key)
            if d is not None and name in d:
                return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name):
        if name in self._parameters or name in self._buffers or name in self._modules:
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}): expected an nn.Parameter or None, "
                            f"got {type(param).__name__}")
        self._registry()
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that is state but not trained (running statistics): moved by ``to()``, saved by
        ``state_dict()`` unless ``persistent=False``."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer({name!r}): expected a Tensor or None, got {type(tensor).__name__}")
        self._registry()
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module({name!r}): expected an nn.Module or None, got {type(module).__name__}")
        self._registry()
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # -- traversal ------------------------------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix=""):
        """(dotted name, module) for self and every descendant, each module once."""
        memo = set() if memo is None else memo
        stack = [(prefix, self)]  # explicit stack: deep Sequentials must not hit the recursion limit
        while stack:
            name, m = stack.pop()
            if m in memo:
                continue
            memo.add(m)
            yield name, m
            kids = [(f"{name}.{k}" if name else k, c) for k, c in m._modules.items() if c is not None]
            stack.extend(reversed(kids))

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named(self, attr, prefix, recurse):
        seen = set()  # shared (tied) tensors are listed once, under their first name
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for name, t in getattr(m, attr).items():
                if t is not None and t not in seen:
                    seen.add(t)
                    yield (f"{mname}.{name}" if mname else name), t

    def named_parameters(self, prefix="", recurse=True):
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        """Call ``fn(m)`` on every submodule (children first) and on self, e.g. for custom init."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -- modes and gradients --------------------------------------------------------------------------------------
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Drop the gradients (``set_to_none``) or zero them in place, keeping each ``.grad`` buffer."""
        for p in self.parameters():
            clear_grad(p, set_to_none)

    # -- state ----------------------------------------------------------------------------------------------------
    def _state_items(self, prefix=""):
        """(name, tensor) of every parameter and persistent buffer, torch's order; a shared tensor appears under
        each of its names (as in torch.state_dict), so a checkpoint never depends on which name came first."""
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            dot = f"{name}." if name else ""
            for k, p in m._parameters.items():
                if p is not None:
                    yield dot + k, p
            for k, b in m._buffers.items():
                if b is not None and k not in m._non_persistent:
                    yield dot + k, b
            stack.extend(reversed([(dot + k, c) for k, c in m._modules.items() if c is not None]))

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """name -> every parameter and persistent buffer, as Tensors detached from the graph that share their
        storage (the parameters themselves with ``keep_vars``), in torch's order."""
        out = OrderedDict() if destination is None else destination
        for name, t in self._state_items():
            out[prefix + name] = t if keep_vars else t.detach()
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy ``state_dict`` values (Tensors, or NumPy / CuPy arrays) into the existing tensors in place, with a
        cast to their dtype and device (optimizers keep their references); ``assign=True`` puts the given Tensors
        themselves in place instead, as torch.

        Shape mismatches always raise; missing / unexpected keys raise when ``strict``.  All problems are
        reported together, in torch's words.  Returns ``(missing_keys, unexpected_keys)``.
        """
        own = OrderedDict(self._state_items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors, values = [], {}
        for name, t in own.items():
            if name in state_dict:
                value = state_dict[name]
                shape = tuple(getattr(value, "shape", np.shape(value)))
                if shape != tuple(t.shape):
                    errors.append(f"size mismatch for {name}: copying a param with shape {shape} from "
                                  f"checkpoint, the shape in current model is {tuple(t.shape)}.")
                values[name] = value
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        for name, value in values.items():
            t = own[name]
            if assign and isinstance(value, Tensor):
                t.data = value._data  # the given tensor's storage, as torch's assign=True
            else:
                t._data[...] = _array_on(value, t._backend)  # in place; casts to the tensor's dtype like copy_
                t._version_counter[0] += 1
        return _IncompatibleKeys(missing, unexpected)

    # -- devices and dtypes ---------------------------------------------------------------------------------------
    def to(self, device=None, dtype=None):
        """Move (and/or cast) every parameter and buffer in place: the Parameter objects stay the same, their
        ``.data`` (and ``.grad``) are replaced, so build optimizers after moving (as in torch)."""
        if is_dtype(device) and dtype is None:  # model.to(gpugrad.float64)
            device, dtype = None, device
        dtype = None if dtype is None else to_np(dtype)
        if dtype is not None and dtype.kind not in "fV":
            raise TypeError(f"Module.to only accepts floating point dtypes, got {dtype}")
        for m in self.modules():
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                if t is None:
                    continue
                be = t._backend if device is None else get_backend(device)
                t.data = _moved(t._data, be, dtype)
                if t._grad is not None:
                    t._grad = Tensor._wrap(_moved(t._grad._data, be, dtype), be)
        return self

    def cuda(self, device=None):
        return self.to("cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device))

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(dtype=np.float32)

    def double(self):
        return self.to(dtype=np.float64)

    # -- printing -------------------------------------------------------------------------------------------------
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = ([extra] if extra else []) + lines
        return f"{type(self).__name__}(\n  " + "\n  ".join(body) + "\n)"
