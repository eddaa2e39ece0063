"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad``, ``step`` and state_dict round trips.

A step is one multi-tensor kernel launch per parameter group and (device, dtype), for up to 16 tensors
(``sgd_multi_update_`` / ``adam_multi_update_`` in kernels/optim.cu, PyTorch's fused-optimizer design). A subclass
says what its kernel needs in two hooks: ``_hyper_values(group)`` (the group's options as the floats the kernel
reads) and ``_update(be, params, states, group, hyper)`` (create missing state, launch).

The options stay Python floats in ``param_groups`` (PyTorch's API) and are mirrored in one small float64 array per
group and device, which the kernel reads: it is written (a host-to-device copy of a few bytes, never a sync) only
when a value changed, so a step whose options did not change copies nothing to the device and can be captured in a
CUDA graph, and a replay of that graph reads the options current at replay time (LR schedulers refresh them right
after they change lr; see :meth:`Optimizer.refresh_hyperparameters`). Adam's step counts live on the device too.

float16 and bfloat16 parameters are updated through float32 master weights, as mixed-precision training keeps them:
their state holds ``state[p]["master_param"]``, a float32 copy made from the parameter at its first step (or taken
from a loaded state dict), and float32 optimizer state. Each step runs the float32 update on the master, with the
parameter's low-precision gradient widened, exactly as for a float32 parameter, and writes the new master rounded to
nearest even into the parameter, so a step below half an ulp of the parameter is kept in the master instead of being
rounded away. A parameter changed outside the optimizer (``p.data.copy_(...)``, a model's ``load_state_dict``, an
init) is re-read: at every step, each element whose value is no longer its master's rounding restarts its master
from that value (in the update kernel itself, so writes through ``.data``, which no version counter sees, and changes
between replays of a captured step are caught; the elements left alone keep their master's extra bits).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from gpugrad._tensor import Tensor
from gpugrad.backend import backend_of, capture as _capture, on
from gpugrad.backend.reference import LOW
from gpugrad.core.backprop import clear_grad
from gpugrad.core.grad_mode import enable_grad, no_grad
from gpugrad.creation import tensor
from gpugrad.dtypes import is_float

MASTER = "master_param"  # the float32 master copy of a float16 or bfloat16 parameter, in its state


def _is_array(v):
    try:
        backend_of(v)
        return True
    except TypeError:
        return False


def _saved(name, v):
    """A state value as state_dict holds it, as torch's: a Tensor copy of each array on its device (never the live
    buffer), the step count a float32 0-d CPU Tensor (a device count is read: a transfer)."""

    if name == "step":
        return tensor(float(backend_of(v).to_host(v)) if _is_array(v) else float(v), dtype=np.float32, device="cpu")
    if not _is_array(v):
        return v
    with on(backend_of(v)):
        return Tensor._wrap(v.copy(), backend_of(v))


def _state_dtype(p):
    """The dtype of ``p``'s optimizer state: float32 for float16 and bfloat16 parameters (with their master copy)."""
    return np.dtype(np.float32) if p._data.dtype in LOW else p._data.dtype


def check_options(group, *names):
    """torch's checks of options that must be >= 0, with its messages."""
    for n in names:
        if not group[n] >= 0:
            what = {"lr": "learning rate", "eps": "epsilon value"}.get(n, n + " value")
            raise ValueError(f"Invalid {what}: {group[n]}")



class Optimizer:
    """Base class: ``params`` is an iterable of Tensors, of (name, Tensor) pairs (``named_parameters()``: the
    groups keep ``param_names``) or of dicts (parameter groups with their own options).

    torch's ``foreach``, ``fused`` and ``capturable`` are accepted and kept in the groups but change nothing: every
    step is already one fused multi-tensor launch that reads its options and step counts from the device.

    Every step is one multi-tensor launch per group and (device, dtype): the pointers travel as kernel arguments,
    so neither scattered nor freshly allocated gradient buffers cost anything. (A ``flat=True`` mode that re-homed
    parameters and gradients into one buffer was removed: with these kernels it kept only a one-fill
    ``zero_grad``, and backward then added into the zeroed views instead of handing fresh gradients over: on the
    784-1024-1024-10 MLP at batch 64 a whole step was 18 launches per tensor against 25 flat on the simulated
    device, and flat was 6-11% slower on the CPU.)
    """

    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = defaultdict(dict)  # parameter -> {name: array or number}; Tensors hash by identity
        self.param_groups = []
        self._found_inf = None  # backend -> GradScaler's found_inf during a scaled step (see _skip)
        self._hyper = {}  # (group index, backend) -> [the options last copied, their float64 array on that device]
        self._tickets = {}  # backend -> the kernels' uint32 block counter (0 between launches)
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
        if params and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in params):
            group["param_names"], params = [n for n, _ in params], [p for _, p in params]  # named_parameters()
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if not is_float(p.dtype):
                raise TypeError(f"optimizer can only optimize floating-point Tensors, got {p.dtype}")
        if len(set(params)) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        taken = {p for g in self.param_groups for p in g["params"]}
        if any(p in taken for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        group["params"] = params
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        if group.get("differentiable"):
            raise ValueError(f"{type(self).__name__}: differentiable=True (steps recorded by autograd) is not "
                             "supported: gpugrad's steps are fused in-place kernels; update by hand under autograd")
        self._validate(group)
        self.param_groups.append(group)
        self._init_state(group)

    def _validate(self, group):
        pass

    _state_made_lazily = True  # torch makes a parameter's state at its first step that runs (Adagrad: at __init__)

    def _init_state(self, group):
        """Made at construction for optimizers whose state torch makes there (Adagrad); others make it lazily."""
    # -- gradients ------------------------------------------------------------------------------------------------
    def zero_grad(self, set_to_none=True):
        """Reset gradients: None (``set_to_none``, the default: backward then hands its fresh gradients over) or
        zeros in the existing buffers."""

        for g in self.param_groups:
            for p in g["params"]:
                clear_grad(p, set_to_none)

    # -- the step -------------------------------------------------------------------------------------------------
    def step(self, closure=None):
        """One update of every parameter that has a gradient (in place; parameters without one are skipped): one
        multi-tensor launch per group and (device, dtype), no host sync, and no host-to-device copy unless an option
        changed since the last step (or this is the first)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for gi, group in enumerate(self.param_groups):
                buckets = {}  # (backend, dtype) -> the group's parameters there that have a gradient
                for p in group["params"]:
                    if p._grad is not None:
                        self._check_grad(p)
                        buckets.setdefault((p._backend, p.dtype), []).append(p)
                for (be, _), ps in buckets.items():
                    try:
                        with on(be):  # state is made and updated on the parameters' device
                            self._update(be, ps, [self.state.setdefault(p, {}) for p in ps], group,
                                         self._device_hyper(gi, be))
                    except Exception as e:
                        if _capture.CAPTURING:  # the refusals below name the step already; others get its name
                            raise _capture.capture_error(self._step_name(), e) from e
                        raise
                    for p in ps:  # a graph that saved p before this step must not backprop through new values
                        p._version_counter[0] += 1
        return loss

    def refresh_hyperparameters(self):
        """Copy the group options that changed (``lr``, ...) to the arrays the kernels read: a few bytes per group
        and device, no sync, nothing at all when none changed. ``step()`` does it itself; call it after changing
        ``param_groups[i]["lr"]`` between replays of a CUDA graph that captured ``step()`` (replays do not run
        ``step()``'s Python). The LR schedulers call it whenever they set lr."""
        for gi, be in list(self._hyper):
            with on(be):
                self._device_hyper(gi, be)

    def _skip(self, be):
        """GradScaler's found_inf on ``be``'s device while it runs this step (the kernels skip themselves when it is
        nonzero, so the scaler never reads it back), else None."""
        return None if self._found_inf is None else self._found_inf.get(be)

    def _step_name(self):
        return f"{type(self).__name__}.step()"

    def _device_hyper(self, gi, be):
        values = tuple([float(v) for v in self._hyper_values(self.param_groups[gi])])
        entry = self._hyper.get((gi, be))
        if entry is None:  # the group's first step on this device: one allocation
            _capture.refuse_missing(self._step_name(), f"the device copy of parameter group {gi}'s options on "
                                                       f"{be.device}")
            entry = self._hyper[gi, be] = [values, be.asarray(np.array(values, np.float64))]
        elif entry[0] != values:
            if _capture.CAPTURING:  # the copy would be recorded: every replay would write these values back
                raise _capture.refusal(self._step_name(), f"parameter group {gi}'s options changed since they were "
                                       f"last copied to the device ({entry[0]} -> {values}); change options between "
                                       "replays (the LR schedulers do, calling refresh_hyperparameters()), not inside"
                                       " the capture")
            be.kernels.set_hyper_(be.xp, entry[1], np.array(values, np.float64))
            entry[0] = values
        return entry[1]

    def _check_grad(self, p):
        # NOTE: checked at each step: Module.to(dtype) or p.data = ... may cast a parameter after its gradient was made
        g = p._grad._data
        if g.dtype != p._data.dtype:
            raise TypeError(f"{self._step_name()}: a parameter of shape {tuple(p.shape)} and dtype {p.dtype} has a "
                            f"gradient of dtype {g.dtype}; the gradient must have the parameter's dtype (float16 and "
                            "bfloat16 parameters are updated through float32 masters from gradients of their own "
                            "dtype): set p.grad = None before the next backward, or cast it with "
                            "p.grad = p.grad.to(p.dtype)")

    def _targets(self, params, states):
        """(the arrays the update kernel updates as the parameters, its ``low_params``) for ``params`` of one dtype:
        the parameters themselves and None, or for float16 and bfloat16 parameters their float32 masters (made
        from the parameters at their first step) and the parameters, which the kernel writes the masters into."""
        if params[0]._data.dtype not in LOW:
            for st in states:  # a parameter cast back to float32 or float64 is its own master again
                st.pop(MASTER, None)
            return [p._data for p in params], None
        for p, st in zip(params, states):
            m = st.get(MASTER)
            if m is None or tuple(m.shape) != tuple(p.shape):
                _capture.refuse_missing(self._step_name(), f"the float32 master copy of a {p.dtype} parameter of "
                                                           f"shape {tuple(p.shape)}")
                st[MASTER] = p._backend.xp.array(p._data, dtype=np.float32, order="C")
        return [st[MASTER] for st in states], [p._data for p in params]

    # hooks, see the module docstring
    def _hyper_values(self, group):
        raise NotImplementedError

    def _update(self, be, params, states, group, hyper):
        raise NotImplementedError

    def _zeros(self, p, value=0):
        """A new state buffer for ``p``. NOTE: inside a capture it would be a recorded fill, so every replay would
        reset it (CuPy captures fills and memsets): refused."""
        _capture.refuse_missing(self._step_name(), f"the state of a parameter of shape {tuple(p.shape)}")
        return p._backend.xp.full(p.shape, value, dtype=_state_dtype(p))  # C-contiguous: updated in place

    def _ticket(self, be):
        """The block counter of the kernels that advance step counts on ``be``'s device."""
        if be not in self._tickets:
            _capture.refuse_missing(self._step_name(), f"the step-count ticket on {be.device}")
            self._tickets[be] = be.xp.zeros(1, np.uint32)
        return self._tickets[be]

    def _count(self, be, st):
        """``st["step"]`` as the int64 0-d array on the device that the kernels advance (new or loaded: a number)."""
        if not isinstance(st["step"], be.array_type):
            _capture.refuse_missing(self._step_name(), "the step count of a parameter on the device")
            st["step"] = be.asarray(np.array(int(st["step"]), np.int64))
        return st["step"]

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def state_dict(self):
        """{"state": {index: {name: host array or number}}, "param_groups": [{options, "params": [index]}]},
        parameters numbered in group order (as torch does), so it loads into an optimizer built the same way."""
        index, groups = {}, []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = [index.setdefault(p, len(index)) for p in g["params"]]
            groups.append(packed)
        state = {}
        for p, st in self.state.items():
            if p in index:
                saved = {k: _saved(k, v) for k, v in st.items()}
                if self._state_made_lazily and "step" in saved and float(saved["step"]) == 0:
                    continue  # made for steps GradScaler skipped on the device: torch, which skips step(), has none
                state[index[p]] = saved
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore options and state (copied onto each parameter's device and state dtype: float32 for float16 and
        bfloat16 parameters); the step count, momentum and moment buffers continue exactly where the saved optimizer
        stopped. A float16 or bfloat16 parameter's master copy is restored too; a state dict without one (saved by
        torch, or for a float32 parameter) makes it from the parameter at the next step."""
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
        state = defaultdict(dict)
        for idx, st in state_dict["state"].items():
            if idx not in ids:
                raise ValueError(f"loaded state dict has state for parameter {idx}, which is in no parameter group")
            p = ids[idx]
            state[p] = {k: self._load_value(p, idx, k, v) for k, v in st.items()}
        self.state = state
        for saved, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in saved.items() if k != "params"})

    @staticmethod
    def _load_value(p, idx, name, v):
        v = v._data if isinstance(v, Tensor) else v
        if not _is_array(v):
            return int(v) if name == "step" else v
        src = backend_of(v)
        if name == "step" or v.ndim == 0 and v.dtype.kind in "iu":  # a step count saved as an array or Tensor
            return int(src.to_host(v))
        if tuple(v.shape) != tuple(p.shape):
            raise ValueError(f"loaded state {name!r} of parameter {idx} has shape {tuple(v.shape)}, but the "
                             f"parameter has shape {tuple(p.shape)}")
        dtype = _state_dtype(p)
        with on(p._backend):  # a fresh, contiguous buffer in the state's dtype on the parameter's device
            if src is p._backend:
                return src.xp.array(v, dtype=dtype, order="C", copy=True)
            return p._backend.asarray(np.array(src.to_host(v), dtype=dtype, copy=True))
