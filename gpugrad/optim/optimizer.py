"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad``, ``step`` and state_dict round trips.

A subclass describes one update as four small hooks (so the same code serves one parameter or a whole flat
segment of many): ``_signature(state)`` (what the kernel needs to know about the state before the step, e.g.
the step count), ``_init_state(p, state, group)`` (create missing state arrays), ``_kernel(be, p, g, arrays,
group, signature)`` (one in-place fused update on arrays) and ``_advance(state)`` (bookkeeping after it).
"""
from __future__ import annotations

import numpy as np

from gpugrad.autograd.grad_mode import enable_grad, no_grad
from gpugrad.backend import backend_of, on
from gpugrad.backend.reference import float16_params_error
from gpugrad.optim.flat import flatten_parameters
from gpugrad._tensor import Tensor


def _is_array(v):
    try:
        backend_of(v)
        return True
    except TypeError:
        return False


def _host(a):
    host = backend_of(a).to_host(a)
    return host.copy() if host is a else host  # never hand out the live state buffer


class Optimizer:
    """Base class: ``params`` is an iterable of Tensors or of dicts (parameter groups with their own options).

    ``flat=True`` re-homes all parameters (and gradients) as views into one buffer per (device, dtype)
    (:func:`gpugrad.optim.flat.flatten_parameters`), so ``zero_grad`` is one fill and ``step`` one fused
    kernel per group and buffer.  In flat mode every trainable parameter keeps a gradient view (``zero_grad``
    zero-fills it); after ``zero_grad(set_to_none=True)`` a view that no backward wrote into still counts as
    "no gradient", so such a parameter is skipped exactly as the non-flat path skips a None gradient.  Frozen
    parameters (``requires_grad=False``) stay out of the buffers and are never updated.
    """

    def __init__(self, params, defaults, flat=False):
        self.defaults = dict(defaults)
        self.state = {}  # parameter -> {name: array or number}; Tensors hash by identity
        self.param_groups = []
        self.flat = None
        self._flat_wanted = bool(flat)
        self._flat_state = {}  # (state name, buffer key) -> one flat array laid out like the flat parameters
        self._segments = []  # per group: the flat.Segment runs it covers
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got a Tensor")
        if isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        for group in (params if isinstance(params[0], dict) else [{"params": params}]):
            self.add_param_group(group)

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines + [")"])

    # -- groups ---------------------------------------------------------------------------------------------------
    def add_param_group(self, group):
        if not isinstance(group, dict):
            raise TypeError(f"a parameter group must be a dict, got {type(group).__name__}")
        group = dict(group)
        params = group.get("params")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections; use a list")
        else:
            params = list(params or ())
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if p.dtype.kind != "f":
                raise TypeError(f"optimizer can only optimize floating-point Tensors, got {p.dtype}")
            self._check_float16(p)
        if len(set(params)) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        taken = {p for g in self.param_groups for p in g["params"]}
        if any(p in taken for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self._validate(group)
        group["params"] = params
        self.param_groups.append(group)
        if self._flat_wanted:
            self._flatten()

    def _validate(self, group):
        pass

    # -- gradients ------------------------------------------------------------------------------------------------
    def zero_grad(self, set_to_none=True):
        """Reset gradients: None (``set_to_none``) or zeros in the existing buffers; flat: one fill per buffer."""
        if self.flat is not None:
            self.flat.zero_grad(set_to_none)
            return
        from gpugrad.nn.module import _zero_grad

        for g in self.param_groups:
            for p in g["params"]:
                _zero_grad(p, set_to_none)

    # -- the step -------------------------------------------------------------------------------------------------
    def step(self, closure=None):
        """One update of every parameter that has a gradient (in place; parameters without one are skipped)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for gi, group in enumerate(self.param_groups):
                todo = group["params"]
                flat = self.flat
                if flat is not None:
                    todo = [p for seg in self._segments[gi] if not self._step_segment(seg, group) for p in seg.params]
                    todo += [p for p in group["params"] if p not in flat.slots]
                for p in todo:
                    if p._grad is not None and (flat is None or flat.received(p)):
                        with on(p._backend):  # state is made and updated on the parameter's device
                            self._step_param(p, group)
        return loss

    def _check_float16(self, p):
        # NOTE: refused on every device, here and in sgd_update_/adam_update_ (see reference._UPDATES for why);
        # checked again at each step because Module.to(dtype) may cast a parameter after the optimizer was built.
        if p.dtype == np.float16:
            raise float16_params_error(type(self).__name__, p.shape, p.dtype)

    def _step_param(self, p, group):
        self._check_float16(p)
        st = self.state.setdefault(p, {})
        sig = self._signature(st)
        self._init_state(p, st, group)
        arrays = {k: v for k, v in st.items() if _is_array(v)}
        self._kernel(p._backend, p._data, p._grad._data, arrays, group, sig)
        self._advance(st)
        p._version_counter[0] += 1  # a graph that saved p before this step must not backprop through new values

    def _step_segment(self, seg, group):
        """One fused update over a contiguous run of flat parameters; False when it cannot be used (a parameter
        without a gradient, a moved parameter, state that differs between parameters), leaving the
        per-parameter path to handle the run with exactly the same arithmetic."""
        flat = self.flat
        if not all(flat.attach_grad(p) for p in seg.params):
            return False
        states = [self.state.setdefault(p, {}) for p in seg.params]
        sig = self._signature(states[0])
        if any(self._signature(st) != sig for st in states[1:]):
            return False
        with on(seg.params[0]._backend):
            for p, st in zip(seg.params, states):
                self._init_state(p, st, group)
        arrays = {name: fs[seg.start:seg.stop] for (name, key), fs in self._flat_state.items()
                  if key == seg.key and name in states[0]}
        data, grad = flat.buffers[seg.key]
        be = seg.params[0]._backend
        with on(be):
            self._kernel(be, data[seg.start:seg.stop], grad[seg.start:seg.stop], arrays, group, sig)
        for p, st in zip(seg.params, states):
            self._advance(st)
            p._version_counter[0] += 1
        return True

    # hooks, see the module docstring
    def _signature(self, state):
        return None

    def _init_state(self, p, state, group):
        pass

    def _kernel(self, be, p, g, arrays, group, signature):
        raise NotImplementedError

    def _advance(self, state):
        pass

    def _zeros(self, p, name):
        """A zero state array shaped like p: a view into the flat state buffer in flat mode."""
        if self.flat is None or p not in self.flat.slots:
            return p._backend.xp.zeros(p.shape, dtype=p.dtype)  # C-contiguous: the fused kernels update it in place
        slot = self.flat.slots[p]
        fs = self._flat_state.get((name, slot.key))
        if fs is None:
            data, _ = self.flat.buffers[slot.key]
            fs = self._flat_state[name, slot.key] = p._backend.xp.zeros(data.shape, dtype=data.dtype)
        return fs[slot.start:slot.stop].reshape(p.shape)

    # -- flat buffers ---------------------------------------------------------------------------------------------
    def _flatten(self):
        self.flat = flatten_parameters([p for g in self.param_groups for p in g["params"]])
        self._segments = [self.flat.segments(g["params"]) for g in self.param_groups]
        self._flat_state = {}
        self._rehome_state()

    def _rehome_state(self):
        """Move every state array into the flat state buffers (after flattening or loading a state_dict)."""
        for p, st in self.state.items():
            for name, v in list(st.items()):
                if _is_array(v):
                    view = self._zeros(p, name)
                    view[...] = v
                    st[name] = view

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def state_dict(self):
        """{"state": {index: {name: host array or number}}, "param_groups": [{options, "params": [index]}]},
        parameters numbered in group order (as torch does), so it loads into an optimizer built the same way."""
        index, groups = {}, []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index.setdefault(p, len(index)) for p in g["params"]]
            groups.append(packed)
        state = {index[p]: {k: _host(v) if _is_array(v) else v for k, v in st.items()}
                 for p, st in self.state.items() if p in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore options and state (copied onto each parameter's device and dtype); the step count, momentum
        and moment buffers continue exactly where the saved optimizer stopped."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(groups)} parameter groups, the optimizer has "
                             f"{len(self.param_groups)}")
        ids = {}
        for i, (saved, own) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(f"loaded state dict contains a parameter group ({i}) of {len(saved['params'])} "
                                 f"parameters that doesn't match the size of optimizer's group "
                                 f"({len(own['params'])})")
            ids.update(zip(saved["params"], own["params"]))
        state = {}
        for idx, st in state_dict["state"].items():
            if idx not in ids:
                raise ValueError(f"loaded state dict has state for parameter {idx}, which is in no parameter group")
            p = ids[idx]
            state[p] = {k: self._load_value(p, idx, k, v) for k, v in st.items()}
        self.state = state
        for saved, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in saved.items() if k != "params"})
        if self.flat is not None:
            self._rehome_state()

    @staticmethod
    def _load_value(p, idx, name, v):
        if not _is_array(v) and not isinstance(v, Tensor):
            return v
        host = v.numpy() if isinstance(v, Tensor) else backend_of(v).to_host(v)
        if tuple(host.shape) != tuple(p.shape):
            raise ValueError(f"loaded state {name!r} of parameter {idx} has shape {tuple(host.shape)}, but the "
                             f"parameter has shape {tuple(p.shape)}")
        return p._backend.asarray(np.array(host, dtype=p.dtype, copy=True))  # a fresh, contiguous buffer
