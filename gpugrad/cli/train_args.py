"""The command line of ``gpugrad train``: its options, one rule per option (shared with a resumed checkpoint's
config, so a checkpoint cannot hold what the command line refuses), the defaults, and the run's configuration
resolved from them."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from gpugrad.cli import (EXIT_INTERRUPTED,  # EXIT_INTERRUPTED: 128 + SIGINT, what shells report for Ctrl-C
                         amp as amp_cli)

# Defaults, tuned on the digits split: inputs standardized, 64-512-256-10 ReLU, AdamW(lr 1e-3, wd 0.1), batch 64,
# 30 epochs -> 97.78% test accuracy with seed 0 (>= 97% for 5 of seeds 0-5) in ~2 s of CPU training.
DEFAULTS = {"data": None, "hidden": [512, 256], "activation": "relu", "epochs": 30, "batch_size": 64, "lr": 1e-3,
            "optimizer": "adamw", "momentum": 0.9, "weight_decay": None, "standardize": True, "seed": 0}
# A resumed run keeps these from its checkpoint; a different value on the command line is an error.
FIXED_ON_RESUME = ("data", "hidden", "activation", "batch_size", "lr", "optimizer", "momentum", "weight_decay",
                   "standardize", "seed")
ADAMW_WEIGHT_DECAY = 0.1  # decoupled; tuned on the digits split (torch's AdamW default is 0.01)
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid")
OPTIMIZERS = ("sgd", "adam", "adamw")
EXIT_ERROR = 1
EXIT_DIVERGED = 3  # the loss became non-finite; nothing from the diverged epoch is saved
EXIT_TERMINATED = 143  # 128 + SIGTERM (kill, timeout, docker stop, Slurm)
INT64_MAX = 2**63 - 1  # sizes and counts NumPy and the loader index with


class CliError(Exception):
    """A problem with the command line or its inputs: reported as one line, exit code 1."""


# field -> (type, test, what a valid value is)
RULES = {
    "data": (str, bool, "a directory path"),
    "hidden": (list, lambda v: bool(v) and all(type(s) is int and 1 <= s <= INT64_MAX for s in v),
               "comma-separated positive layer sizes like 256,128"),
    "activation": (str, ACTIVATIONS.__contains__, f"one of {', '.join(ACTIVATIONS)}"),
    "epochs": (int, lambda v: v > 0, "a positive integer"),
    "batch_size": (int, lambda v: 0 < v <= INT64_MAX, "a positive integer that fits in int64"),
    "lr": (float, lambda v: 0 < v < math.inf, "a positive finite number"),  # NOTE: NaN fails every comparison
    "optimizer": (str, OPTIMIZERS.__contains__, f"one of {', '.join(OPTIMIZERS)}"),
    "momentum": (float, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "weight_decay": (float, lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "standardize": (bool, lambda v: True, "true or false"),
    "seed": (int, lambda v: v >= 0, "an integer >= 0"),
}


def _layer_sizes(text):
    return [int(s) for s in text.replace(" ", "").split(",") if s]


def _arg(field):
    """The argparse ``type`` for ``field``: parse the text, then apply the field's rule."""
    kind, test, what = RULES[field]

    def parse(text):
        try:
            value = _layer_sizes(text) if kind is list else kind(text)
        except ValueError:
            value = None
        if value is None or not test(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = field
    return parse


def add_arguments(p):
    d = DEFAULTS
    add = p.add_argument
    add("--data", metavar="DIR", help="MNIST-format IDX directory (train-images-idx3-ubyte[.gz], ...); "
        "default: the embedded 8x8 digits")
    add("--hidden", type=_arg("hidden"), metavar="N,N", help="hidden layer sizes (default: 512,256)")
    add("--activation", choices=ACTIVATIONS, help=f"hidden activation (default: {d['activation']})")
    add("--epochs", type=_arg("epochs"), metavar="N", help=f"total number of epochs (default: {d['epochs']})")
    add("--batch-size", type=_arg("batch_size"), metavar="N", help=f"training batch size (default: {d['batch_size']})")
    add("--lr", type=_arg("lr"), metavar="LR", help=f"learning rate (default: {d['lr']})")
    add("--optimizer", choices=OPTIMIZERS, help=f"sgd (with --momentum), adam or adamw (default: {d['optimizer']})")
    add("--momentum", type=_arg("momentum"), metavar="M", help=f"SGD momentum (default: {d['momentum']})")
    add("--weight-decay", type=_arg("weight_decay"), metavar="WD",
        help=f"weight decay (default: {ADAMW_WEIGHT_DECAY} for adamw, else 0)")
    add("--standardize", action=argparse.BooleanOptionalAction, default=None,
        help="scale each feature to zero mean, unit std over the training set (default: on)")
    add("--device", metavar="DEV", help="cpu, cuda or cuda:N (default: CUDA when available, else CPU)")
    add("--seed", type=_arg("seed"), metavar="N", help=f"seed for init and shuffling (default: {d['seed']})")
    add("--checkpoint", metavar="PATH", help="save a checkpoint here after every epoch and on Ctrl-C (an existing "
        "file is an error unless --resume or --overwrite is given)")
    add("--overwrite", action="store_true", help="let --checkpoint replace an existing file from another run")
    add("--resume", metavar="PATH", help="continue the run saved in this checkpoint (and keep saving to it unless "
        "--checkpoint says otherwise)")
    add("--metrics-json", metavar="PATH", help="write config, per-epoch and final metrics, timings")
    add("--plot", metavar="PATH.png", help="save loss and accuracy curves (needs matplotlib)")
    add("--quiet", action="store_true", help="print only the final result")
    add("--distributed", action="store_true", help="data-parallel over the ranks of `mpiexec -n N gpugrad train "
        "--distributed` (CPU processes, or one GPU per rank with --device cuda); --batch-size is then per rank, "
        "and N ranks train as one process with N times the batch")
    add("--dist-timeout", type=_arg("lr"), default=300.0, metavar="S", help="with --distributed: stop with an "
        "error naming the lost rank when a rank waits this long for the others (default: 300 s)")
    add("--cuda-graph", action="store_true", help="capture the training step once as a CUDA graph and replay it "
        "for every full batch (CUDA only; same results as without)")
    amp_cli.add_arguments(p)  # --amp, --tf32
    p.epilog = (f"exit codes: 0 done, {EXIT_ERROR} error, 2 bad command line, {EXIT_DIVERGED} training diverged "
                f"(the loss became NaN or infinite; the last good checkpoint is kept), {EXIT_INTERRUPTED} interrupted "
                f"(Ctrl-C), {EXIT_TERMINATED} terminated (SIGTERM); both save a checkpoint at the batch boundary first")


def resolve_config(args, saved=None, ranks=1):
    """The run's configuration: the checkpoint's when resuming (only --epochs may change), else args + defaults.
    ``batch_size`` is the global batch: --batch-size (per rank) x ``ranks``."""
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k, None) is not None}
    if saved is None or "batch_size" in given:
        given["batch_size"] = given.get("batch_size", DEFAULTS["batch_size"]) * ranks
    if "data" in given:
        given["data"] = str(Path(given["data"]).expanduser().resolve())
    if saved is None:
        config = {**DEFAULTS, **given}
        if config["weight_decay"] is None:
            config["weight_decay"] = ADAMW_WEIGHT_DECAY if config["optimizer"] == "adamw" else 0.0
        return config
    config = dict(saved)
    for key in FIXED_ON_RESUME:
        if key in given and given[key] != saved[key]:
            per_rank = f" (--batch-size {given[key] // ranks} per rank x {ranks} ranks)" if key == "batch_size" and \
                ranks > 1 else ""
            raise CliError(f"{as_flag(key, given[key])}{per_rank} differs from the checkpoint's "
                           f"{as_flag(key, saved[key])}; a resumed run keeps its configuration (only --epochs and "
                           "output options may change)")
    config["epochs"] = given.get("epochs", saved["epochs"])
    return config


def describe_setting(key, value, ranks=1):
    """A setting of a --distributed rank as its command line gave it (``batch_size`` is the global batch: shown
    per rank; ``resumed_at`` is the (epoch, batch) a resumed checkpoint starts from, or None)."""
    if key == "resumed_at":
        return "a fresh start" if not value else f"resuming at epoch {value[0] + 1}, batch {value[1]}"
    if key == "batch_size":
        value //= ranks
    return as_flag(key, value)


def as_flag(key, value):
    """``key=value`` as it is typed on the command line: ``--no-standardize``, ``--hidden 512,256``."""
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    if value is None:  # only a checkpoint's: --data unset (the digits)
        return f"(no {flag})"
    return f"{flag} {','.join(map(str, value)) if isinstance(value, list) else value}"
