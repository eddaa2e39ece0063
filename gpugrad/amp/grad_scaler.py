"""``gpugrad.amp.GradScaler``: torch's dynamic loss scaling, with its decision kept on the device.

torch's ``step()`` reads ``found_inf`` back to the host to decide whether to step (a sync every step). Here the scale,
the growth tracker and found_inf are device arrays; ``unscale_`` multiplies the gradients by 1/scale and records
non-finite ones on the device; the optimizer's update kernels read found_inf and skip themselves
(``kernels/optim.cu``, the ``skip`` argument); ``update()`` grows or backs off the scale on the device. A scaled step
makes no host sync and can be captured by ``gpugrad.cuda.graph``. ``get_scale()`` and ``state_dict()`` read the
scale back, as torch's do. The scale sequence is torch's (``_amp_update_scale_``): an inf or NaN backs the scale off
and resets the tracker; ``growth_interval`` clean steps in a row grow it (unless it would overflow).
"""
from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np

from gpugrad.backend import on
from gpugrad.backend.cuda import is_available as _cuda_available
from gpugrad.core.tensor import TensorBase, make

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


def _fresh_state():
    return {"stage": _READY, "found_inf_per_device": {}}


class GradScaler:
    """Scale the loss so low-precision gradients do not underflow, unscale them before the step, skip steps whose
    gradients overflowed, and adapt the scale: torch.amp.GradScaler's API and scale sequence.

    >>> scaler = gpugrad.amp.GradScaler("cpu")
    >>> scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    """

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device = str(device)
        self._enabled = bool(enabled)
        if self._enabled and self._device.startswith("cuda") and not _cuda_available():
            warnings.warn("gpugrad.amp.GradScaler is enabled, but CUDA is not available.  Disabling.")
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        self._init_scale, self._growth_factor = float(init_scale), float(growth_factor)
        self._backoff_factor, self._growth_interval = float(backoff_factor), int(growth_interval)
        self._init_growth_tracker = 0
        self._scale = self._growth_tracker = self._be = None  # device arrays, made at the first scale()
        self._per_optimizer_states = defaultdict(_fresh_state)

    # -- the scale on the device ----------------------------------------------------------------------------------
    def _lazy_init(self, be):
        with on(be):
            self._scale = be.asarray(np.array(self._init_scale, np.float32))
            self._growth_tracker = be.asarray(np.array(self._init_growth_tracker, np.int32))
        self._be = be

    def scale(self, outputs):
        """``outputs`` (a Tensor, or nested lists/tuples of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, TensorBase):
            if self._scale is None:
                self._lazy_init(outputs._backend)
            return outputs * make(self._scale, self._be)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _check_scale(self, what):
        if self._scale is None:
            raise AssertionError(f"Attempted {what} but _scale is None.  This may indicate your script did not use "
                               "scaler.scale(loss or outputs) earlier in the iteration.")

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale in place and record, on the device, whether any is inf or
        NaN. Called by ``step`` unless called first (to clip gradients between unscaling and stepping)."""
        if not self._enabled:
            return
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        self._check_scale("unscale_")
        be, xp = self._be, self._be.xp
        by_dtype = {}  # the unscale kernel takes one float dtype per launch
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is None:
                    continue
                # torch refuses float16 gradients, as its optimizers would step float16 parameters in float16;
                # gpugrad's update them through float32 master weights (optim.optimizer), so only other
                # optimizers (no _skip hook) keep torch's refusal
                if g._data.dtype == np.float16 and not hasattr(optimizer, "_skip"):
                    raise ValueError("Attempting to unscale FP16 gradients.")
                if g._backend is not be:
                    raise RuntimeError(f"GradScaler: a gradient on {g.device}, the scale on {be.device}; one "
                                       "scaler serves the parameters of one device")
                by_dtype.setdefault(g._data.dtype, []).append(g)
        if not by_dtype:  # nothing to check: step() then refuses, as torch's ("No inf checks were recorded")
            state["stage"] = _UNSCALED
            return
        with on(be):
            found = state["found_inf_per_device"][be] = xp.zeros((1,), np.float32)
            for grads in by_dtype.values():
                # NOTE: one multi-tensor launch per 16 gradients: g *= 1/scale, found = 1 on an inf or NaN
                be.kernels.amp_unscale_multi_(xp, self._scale, found, *(g._data for g in grads))
                for g in grads:
                    g._version_counter[0] += 1
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless the unscaled gradients hold an inf or NaN; decided on the device (the update
        kernels skip themselves), so this makes no host sync. Returns what ``optimizer.step`` returns."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        found = state["found_inf_per_device"]
        if not found:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        if hasattr(optimizer, "_skip"):  # gpugrad's optimizers: their kernels read found_inf
            optimizer._found_inf = found
            try:
                out = optimizer.step(*args, **kwargs)
            finally:
                optimizer._found_inf = None
        else:  # NOTE: any other optimizer: decided on the host, as torch does (one sync)
            out = None if any(float(self._be.to_host(f)[0]) for f in found.values()) else optimizer.step(*args,
                                                                                                          **kwargs)
        state["stage"] = _STEPPED
        return out

    def update(self, new_scale=None):
        """Back the scale off after a skipped step, grow it after ``growth_interval`` clean ones (on the device), or
        set it to ``new_scale`` (a float or a one-element Tensor)."""
        if not self._enabled:
            return
        self._check_scale("update")
        be, xp = self._be, self._be.xp
        with on(be):
            if new_scale is not None:
                if isinstance(new_scale, TensorBase):
                    if new_scale.numel() != 1:
                        raise ValueError("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                                         "torch.FloatTensor with requires_grad=False.")
                    self._scale[...] = new_scale._data.reshape(())
                else:
                    self._scale[...] = float(new_scale)
            else:
                infs = [f for s in self._per_optimizer_states.values() for f in s["found_inf_per_device"].values()]
                if not infs:
                    raise AssertionError("No inf checks were recorded prior to update.")
                total = infs[0] if len(infs) == 1 else sum(infs[1:], infs[0])
                be.kernels.amp_update_scale_(xp, self._scale, self._growth_tracker, total, self._growth_factor,
                                             self._backoff_factor, self._growth_interval)
        self._per_optimizer_states = defaultdict(_fresh_state)

    # -- reading the state back (host reads, as torch's) ----------------------------------------------------------
    def get_scale(self):
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._be.to_host(self._scale))

    def _get_growth_tracker(self):
        if self._growth_tracker is None:
            return self._init_growth_tracker
        return int(self._be.to_host(self._growth_tracker))

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} if disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            with on(self._be):
                self._scale[...] = self._init_scale
                self._growth_tracker[...] = self._init_growth_tracker
