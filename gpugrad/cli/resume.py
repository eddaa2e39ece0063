"""What ``gpugrad train --resume`` reads back: the progress record a checkpoint holds (:class:`Progress`), and the
checks that a loaded checkpoint (gpugrad/cli/checkpoint.py reads the file) holds what the command line would
accept: the config by train_args.RULES, the progress record, the generator state, finite weights, and optimizer
state that the run's own optimizer could have written.  Each failure is a CheckpointError naming the field."""
from __future__ import annotations

import math

import numpy as np

from gpugrad import Tensor
from gpugrad.backend import CPU
from gpugrad.cli.checkpoint import CheckpointError
from gpugrad.cli.train_args import RULES
from gpugrad.random import generator

METRICS = ("epoch", "train_loss", "test_loss", "test_acc", "samples_per_s", "train_time_s", "eval_time_s")


class Progress:
    """Where a run stands: the epoch being trained (0-based), batches done in it, and what they added up to."""

    def __init__(self, epoch=0, batch=0, samples=0, train_time=0.0, loss_sum=None, history=()):
        self.epoch, self.batch, self.samples, self.train_time = epoch, batch, samples, train_time
        self.loss_sum = loss_sum  # device scalar: summing on the device avoids a sync per batch
        self.history = list(history)
        self.rng = None  # the CPU generator's state at the last committed step (None: at an epoch boundary)

    def state(self):
        return {"epoch": self.epoch, "batch": self.batch, "samples": self.samples, "train_time": self.train_time,
                "loss_sum": self.loss_sum, "history": self.history}


def _short(value, width=60):
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _host(v):
    """A Tensor (state dicts hold them, as torch's) as a host array; anything else as it is."""
    return v.detach().cpu().numpy() if isinstance(v, Tensor) else v


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_array(v, kinds="fiub"):
    return isinstance(v, np.ndarray) and v.dtype.kind in kinds and bool(np.isfinite(v).all())


def _same(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):  # e.g. an array where a number belongs
        return False


def _loss_sum(v):
    """None, or what summing cross-entropies on the device gives: a 0-d real float tensor, finite and >= 0."""
    if v is None:
        return True
    a = _host(v)
    return isinstance(v, Tensor) and a.shape == () and _finite_array(a, "f") and a >= 0


def _record(m):
    """One epoch's metrics as train_epoch makes them: finite numbers >= 0, an accuracy <= 1."""
    return isinstance(m, dict) and set(m) == set(METRICS) and all(
        _is_number(x) and 0 <= x < math.inf for x in m.values()) and m["test_acc"] <= 1


MAX_STEP = 2**63 - 1  # a step count is an int64 on the device (optim/adam.py)
# what a resumed progress record may hold: field -> (test, what it must be)
PROGRESS_RULES = {
    "epoch": (_is_count, "an integer >= 0"), "batch": (_is_count, "an integer >= 0"),
    "samples": (_is_count, "an integer >= 0"),
    "train_time": (lambda v: _is_number(v) and 0 <= v < math.inf, "a finite number of seconds >= 0"),
    "loss_sum": (_loss_sum, "None or a 0-d real floating tensor with a finite value >= 0"),
    "history": (lambda v: isinstance(v, list) and all(map(_record, v)) and all(
        m["epoch"] == i for i, m in enumerate(v, 1)), f"a list of per-epoch records (epochs 1, 2, ...) of the "
        f"finite numbers >= 0 {', '.join(METRICS)}"),
}
# the per-parameter state each optimizer's step writes: name -> "step" (a count) or "like" (an array of the
# parameter's shape); a parameter's state is all of it or, before its first step, none
OPTIMIZER_STATE = {"SGD": {"momentum_buffer": "like"},
                   "Adam": {"step": "step", "exp_avg": "like", "exp_avg_sq": "like"}}
OPTIMIZER_STATE["AdamW"] = OPTIMIZER_STATE["Adam"]


def check_resumable(saved, path):
    """Raise CheckpointError unless ``saved`` holds what ``gpugrad train --resume`` reads, with values the command
    line would accept: the config (by RULES), the progress record, the generator state, finite model weights."""
    saved = saved if isinstance(saved, dict) else {}
    config, progress = saved.get("config"), saved.get("progress")
    missing = [k for k in ("config", "model", "optimizer", "progress") if not isinstance(saved.get(k), dict)]
    missing += [f"config/{k}" for k in RULES if isinstance(config, dict) and k not in config]
    missing += [f"progress/{k}" for k in Progress().state() if isinstance(progress, dict) and k not in progress]
    if missing:
        raise CheckpointError(f"{path}: not a checkpoint of `gpugrad train` (no {', '.join(missing)})")
    check_config(config, path)
    check_progress(progress, path, config["batch_size"])
    for key in ("device", "gpugrad_version"):  # what the run was: read by people, so only strings
        if not isinstance(saved.get(key, ""), str):
            raise CheckpointError(f"{path}: {key} is {_short(saved[key])}; it must be a string")
    if saved.get("rng") is not None:
        kind = type(generator(CPU).bit_generator)
        try:
            kind().state = saved["rng"]["numpy"]  # a scratch generator: the state must be one it accepts
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as e:
            raise CheckpointError(f"{path}: rng/numpy is not a state of NumPy's {kind.__name__} "
                                  f"({type(e).__name__}: {e})") from None
    if saved.get("scaler") is not None:
        check_scaler(saved["scaler"], path)
    for name, value in saved["model"].items():
        value = _host(value)
        if not _finite_array(value, "f"):
            what = f"a {type(value).__name__}, not an array" if not isinstance(value, np.ndarray) else \
                f"{value.dtype} values, not floating point ones" if value.dtype.kind != "f" else \
                "NaN or infinite values"
            raise CheckpointError(f"{path}: model/{name} holds {what}; this checkpoint cannot be resumed")


# what a resumed GradScaler state (--amp fp16; torch's keys) may hold: a zero, negative or infinite scale would zero
# or overflow every gradient of the resumed run
SCALER_RULES = {
    "scale": (lambda v: _is_number(v) and 0 < v < math.inf, "a finite number > 0"),
    "growth_factor": (lambda v: _is_number(v) and 1 < v < math.inf, "a finite number > 1"),
    "backoff_factor": (lambda v: _is_number(v) and 0 < v < 1, "a number in (0, 1)"),
    "growth_interval": (lambda v: _is_count(v) and v > 0, "an integer > 0"),
    "_growth_tracker": (_is_count, "an integer >= 0"),
}


def check_scaler(state, path):
    """Raise CheckpointError unless ``state`` is a GradScaler state_dict that GradScaler would accept and train with."""
    if not isinstance(state, dict) or set(state) != set(SCALER_RULES):
        raise CheckpointError(f"{path}: scaler is {_short(state)}; it must be a GradScaler state_dict with the keys "
                              f"{', '.join(SCALER_RULES)}")
    for key, (test, what) in SCALER_RULES.items():
        if not test(state[key]):
            raise CheckpointError(f"{path}: scaler/{key} is {_short(state[key])}; it must be {what}")


def check_config(config, where):
    """Raise CheckpointError naming the first field of a checkpoint's ``config`` that the command line would
    refuse (or that it does not know); ints stand in for floats, as JSON may write them."""
    unknown = sorted(str(k) for k in config if k not in RULES)
    if unknown:
        raise CheckpointError(f"{where}: config has unknown field(s) {', '.join(unknown)}")
    for key, (kind, test, what) in RULES.items():
        value = config[key]
        if key == "data" and value is None:  # the embedded digits
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = config[key] = float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool) or not test(value):
            raise CheckpointError(f"{where}: config/{key} is {_short(value)}, but --{key.replace('_', '-')} must be "
                                  f"{what}")


def check_progress(progress, path, batch_size):
    """Raise CheckpointError naming the first field of a checkpoint's progress record that PROGRESS_RULES refuse,
    or that disagrees with the rest: one history record per finished epoch, and ``batch`` batches of at most
    ``batch_size`` (the global batch) rows having given ``samples`` rows and a loss sum (none at batch 0)."""
    for key, value in progress.items():
        if key not in PROGRESS_RULES:
            raise CheckpointError(f"{path}: progress has unknown field(s) {key}")
        test, what = PROGRESS_RULES[key]
        if not test(value):
            raise CheckpointError(f"{path}: progress/{key} is {_short(value)}; it must be {what}")
    epoch, batch, samples, loss_sum = (progress[k] for k in ("epoch", "batch", "samples", "loss_sum"))
    if len(progress["history"]) != epoch:
        raise CheckpointError(f"{path}: progress/history has {len(progress['history'])} records for progress/epoch "
                              f"{epoch}; it must have one per finished epoch")
    if not batch <= samples <= batch * batch_size or (batch == 0) != (loss_sum is None):
        raise CheckpointError(f"{path}: progress/samples {samples} and progress/loss_sum {_short(loss_sum)} cannot "
                              f"come from {batch} batches of at most {batch_size} rows")


def check_optimizer_state(state, optimizer, path):
    """Raise CheckpointError unless ``state`` (a checkpoint's ``optimizer``) could come from ``optimizer``, which
    was built from the checkpoint's validated config: the same parameter groups and options (a NaN learning rate
    in the optimizer's own copy is caught here), and per-parameter state of the names its step writes (as
    OPTIMIZER_STATE says): finite float arrays and whole step counts in [0, MAX_STEP]."""
    def bad(where, what):
        return CheckpointError(f"{path}: optimizer/{where} {what}; this checkpoint cannot be resumed")

    fresh, groups, per_param = optimizer.state_dict()["param_groups"], state.get("param_groups"), state.get("state")
    if set(state) != {"param_groups", "state"} or not isinstance(groups, list) or not isinstance(per_param, dict):
        raise bad("", "must hold exactly param_groups (a list) and state (a dict)")
    if len(groups) != len(fresh):
        raise bad("param_groups", f"has {len(groups)} groups, `gpugrad train` makes {len(fresh)}")
    for i, (group, own) in enumerate(zip(groups, fresh)):
        group = group if isinstance(group, dict) else {"(group)": group}
        for key in sorted(set(group) | set(own)):
            if not _same(group.get(key), own.get(key)):
                raise bad(f"param_groups/{i}/{key}", f"is {_short(group.get(key))}, but the run's config gives "
                          f"{_short(own.get(key))}")
    n_params = sum(len(g["params"]) for g in optimizer.param_groups)  # state_dict numbers them 0, 1, ...
    spec = OPTIMIZER_STATE[type(optimizer).__name__]
    for idx, st in per_param.items():
        if not (_is_count(idx) and idx < n_params):
            raise bad(f"state/{_short(idx)}", f"names no parameter (the run has {n_params})")
        if not isinstance(st, dict) or st and set(st) != set(spec):
            raise bad(f"state/{idx}", f"holds {_short(sorted(st) if isinstance(st, dict) else st)}, but "
                      f"{type(optimizer).__name__} keeps {', '.join(spec)} per parameter (or, before its first "
                      "step, nothing)")
        for name, value in st.items():
            _check_state_value(bad, f"state/{idx}/{name}", value, spec[name])


def _check_state_value(bad, where, saved, kind):
    """A step count, or a finite float array (whose shape load_state_dict checks against the parameter's: a
    mismatch there means the data changed, which _restore says)."""
    value = _host(saved)
    if kind == "step":
        count = value.item() if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "fiu" \
            else value
        if not (_is_number(count) and 0 <= count <= MAX_STEP and count == int(count)):
            raise bad(where, f"is {_short(saved)}, not a whole number of steps in [0, 2**63 - 1]")
    elif not _finite_array(value, "f"):
        what = f"is {_short(saved)}" if not isinstance(value, np.ndarray) else \
            f"holds {value.dtype} values" if value.dtype.kind != "f" else "holds NaN or infinite values"
        raise bad(where, f"{what}, not finite floating point values")
