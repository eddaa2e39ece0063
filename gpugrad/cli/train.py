"""``gpugrad train``: train an MLP classifier on the embedded 8x8 digits or an MNIST-format directory.

    gpugrad train                                     # digits, defaults below, best device
    gpugrad train --data ~/mnist --epochs 10 --checkpoint run.ckpt --metrics-json run.json --plot run.png
    gpugrad train --resume run.ckpt --epochs 20       # continue (also after Ctrl-C) up to 20 epochs in total
    mpiexec -n 2 gpugrad train --distributed          # data-parallel: --batch-size per rank (cli/data_parallel.py)

Reproducible: the same seed gives bitwise-identical losses on the same device, and a run resumed from a
checkpoint (written at the end of every epoch, or on Ctrl-C mid-epoch: the first stops after the current batch, a
second at once, but never between a parameter update and its record) repeats exactly what an uninterrupted run
does: the loader's order depends only on (seed, epoch), gpugrad's generators are reseeded from (seed, epoch) at
the start of each epoch, and the checkpoint holds model, optimizer, position within the epoch and the CPU
generator's state.

Exit codes: 0 done; 1 an error (one line on stderr naming the file, option or environment variable at fault);
2 a bad command line (argparse); 3 (``EXIT_DIVERGED``) training diverged: the loss became NaN or infinite, so the
run stopped without saving that epoch, and the last good checkpoint stays as it was; 130 interrupted (Ctrl-C).

A checkpoint is only overwritten by the run that wrote it (``--resume``) or with ``--overwrite``; a resumed
checkpoint's configuration must pass the same checks as the command line.  Input data must be finite.  Loading is
bounded: ``GPUGRAD_MAX_CHECKPOINT_BYTES`` (default 2 GiB) and ``GPUGRAD_MAX_IDX_BYTES`` (default 1 GiB per file)
cap what a checkpoint or an IDX file may declare.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from gpugrad.cli import amp as amp_cli

# Defaults, tuned on the digits split: inputs standardized, 64-512-256-10 ReLU, AdamW(lr 1e-3, wd 0.1), batch 64,
# 30 epochs -> 97.78% test accuracy with seed 0 (>= 97% for 5 of seeds 0-5) in ~2 s of CPU training.
DEFAULTS = {"data": None, "hidden": [512, 256], "activation": "relu", "epochs": 30, "batch_size": 64, "lr": 1e-3,
            "optimizer": "adamw", "momentum": 0.9, "weight_decay": None, "standardize": True, "seed": 0}
# A resumed run keeps these from its checkpoint; a different value on the command line is an error.
FIXED_ON_RESUME = ("data", "hidden", "activation", "batch_size", "lr", "optimizer", "momentum", "weight_decay",
                   "standardize", "seed")
STD_EPS = 0.1  # added to each feature's std: constant pixels (MNIST's borders) stay 0 instead of blowing up
ADAMW_WEIGHT_DECAY = 0.1  # decoupled; tuned on the digits split (torch's AdamW default is 0.01)
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid")
OPTIMIZERS = ("sgd", "adam", "adamw")
EVAL_BATCH = 1000
EXIT_ERROR = 1
EXIT_DIVERGED = 3  # the loss became non-finite; nothing from the diverged epoch is saved
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
METRICS = ("epoch", "train_loss", "test_loss", "test_acc", "samples_per_s", "train_time_s", "eval_time_s")
MAX_CLASSES = 65536  # labels are class indices; a larger one is a wrong file, not a 10^5-way classifier


class CliError(Exception):
    """A problem with the command line or its inputs: reported as one line, exit code 1."""


# -- arguments -----------------------------------------------------------------------------------------------------
# One rule per option, shared by the command line (text) and a resumed checkpoint's config (JSON values), so a
# checkpoint cannot hold what the command line refuses: field -> (type, test, what a valid value is).
RULES = {
    "data": (str, bool, "a directory path"),
    "hidden": (list, lambda v: bool(v) and all(type(s) is int and s >= 1 for s in v),
               "comma-separated positive layer sizes like 256,128"),
    "activation": (str, ACTIVATIONS.__contains__, f"one of {', '.join(ACTIVATIONS)}"),
    "epochs": (int, lambda v: v > 0, "a positive integer"),
    "batch_size": (int, lambda v: v > 0, "a positive integer"),
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


def _short(value, width=60):
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_config(config, where):
    """Raise CheckpointError naming the first field of a checkpoint's ``config`` that the command line would
    refuse (or that it does not know); ints stand in for floats, as JSON may write them."""
    from gpugrad.cli.checkpoint import CheckpointError

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
                f"(the loss became NaN or infinite; the last good checkpoint is kept), {EXIT_INTERRUPTED} interrupted")


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
            raise CliError(f"{_as_flag(key, given[key])}{per_rank} differs from the checkpoint's "
                           f"{_as_flag(key, saved[key])}; a resumed run keeps its configuration (only --epochs and "
                           "output options may change)")
    config["epochs"] = given.get("epochs", saved["epochs"])
    return config


def _as_flag(key, value):
    """``key=value`` as it is typed on the command line: ``--no-standardize``, ``--hidden 512,256``."""
    flag = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    if value is None:  # only a checkpoint's: --data unset (the digits)
        return f"(no {flag})"
    return f"{flag} {','.join(map(str, value)) if isinstance(value, list) else value}"


# -- pieces of a run -----------------------------------------------------------------------------------------------
def load_data(config):
    """(x_train, y_train, x_test, y_test, description) as float32 features in [0, 1] and int64 labels."""
    from gpugrad.data import digits_split, load_idx_dir

    if config["data"] is None:
        x_train, y_train, x_test, y_test = digits_split()
        desc = "digits (embedded 8x8, UCI optdigits, CC BY 4.0)"
    else:
        x_train, y_train, x_test, y_test = load_idx_dir(config["data"])
        desc = f"IDX directory {config['data']}"
    if config["standardize"]:
        x_train, x_test = standardize(x_train, x_test)
    return x_train, y_train, x_test, y_test, desc


def count_classes(config, y_train, y_test):
    """max label + 1, after checking every label is a class index in [0, MAX_CLASSES); warns when most of those
    classes never occur (labels like 0, 255 make a 256-way classifier)."""
    from gpugrad.data.idx import SPLITS, find_idx

    for split, y in (("train", y_train), ("test", y_test)):
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= MAX_CLASSES:
            data = config["data"]
            where = f"digits {split} labels" if data is None else find_idx(data, SPLITS[split][1])
            raise CliError(f"{where}: label {lo if lo < 0 else hi} is not a class index in [0, {MAX_CLASSES})")
    n = max(int(y_train.max()), int(y_test.max())) + 1
    present = len(np.union1d(y_train, y_test))
    if 2 * present < n:
        print(f"warning: labels go up to {n - 1}, so the model gets {n} outputs, but only {present} distinct labels "
              "occur; relabel them 0, 1, ... for a smaller model", file=sys.stderr, flush=True)
    return n


def standardize(x_train, x_test, eps=STD_EPS):
    """(x - mean) / (std + eps) per feature, with mean and std of the training set."""
    mean = x_train.mean(axis=0, dtype=np.float64)
    scale = x_train.std(axis=0, dtype=np.float64) + eps
    return (((x - mean) / scale).astype(np.float32) for x in (x_train, x_test))


def build_model(config, n_in, n_out, device):
    """The MLP, initialised on the CPU from the run's seed (same values on every device), then moved."""
    import gpugrad
    from gpugrad import nn

    gpugrad.manual_seed(config["seed"])
    # NOTE: device="cpu", not the default device: that may be CUDA (other values) or a bad GPUGRAD_DEVICE
    model = nn.MLP([n_in, *config["hidden"], n_out], activation=config["activation"], device="cpu")
    return model.to(device)


def build_optimizer(config, params):
    from gpugrad import optim

    name, lr, wd = config["optimizer"], config["lr"], config["weight_decay"]
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=config["momentum"], weight_decay=wd)
    return (optim.Adam if name == "adam" else optim.AdamW)(params, lr=lr, weight_decay=wd)


def epoch_seed(seed, epoch):
    """The seed gpugrad's generators get at the start of ``epoch`` (a function of (seed, epoch) only)."""
    return int(np.random.SeedSequence((seed, epoch)).generate_state(1)[0])


def evaluate(model, loader):
    """(mean cross-entropy, accuracy) over ``loader``."""
    import gpugrad
    from gpugrad.nn import functional as F

    model.eval()
    loss, correct, n = None, None, 0  # device scalars: summed on the device, read once at the end (no sync per batch)
    with gpugrad.no_grad():
        for xb, yb in loader:
            logits = model(xb)
            batch_loss = F.cross_entropy(logits, yb, reduction="sum")
            hits = (logits.argmax(axis=1) == yb).sum()
            loss = batch_loss if loss is None else loss + batch_loss
            correct = hits if correct is None else correct + hits
            n += len(yb)
    model.train()
    if n == 0:
        return 0.0, 0.0
    return loss.item() / n, correct.item() / n


class GraphedStep:
    """The training step as a CUDA graph: a few eager warm-up steps (they make the gradient buffers and optimizer
    state the graph will write into), then one capture for the full batch shape, then a replay per batch with the
    batch copied into the graph's static inputs. Batches of another shape (the last, short one) run eagerly on the
    same buffers, so the graph stays valid. Gradients are zeroed in place: the graph holds their addresses."""

    WARMUP = 2

    def __init__(self, model, optimizer, mp=None):
        self.model, self.optimizer, self.graph, self.steps = model, optimizer, None, 0
        self.mp = mp or amp_cli.MixedPrecision()

    def _eager(self, xb, yb):
        from gpugrad.nn import functional as F

        self.optimizer.zero_grad(set_to_none=False)
        with self.mp.autocast():
            loss = F.cross_entropy(self.model(xb), yb)
        self.mp.backward(loss)
        return loss

    def forward_backward(self, xb, yb):
        """The loss after forward and backward; ``update()`` then applies the optimizer step."""
        import gpugrad

        self.steps += 1
        if self.graph is None and self.steps > self.WARMUP:
            self.static = (xb.clone(), yb.clone())
            self.graph = gpugrad.cuda.CUDAGraph()
            with gpugrad.cuda.graph(self.graph):
                self.static_loss = self._eager(*self.static)
                self.mp.step(self.optimizer)
        if self.graph is not None and xb.shape == self.static[0].shape:
            self.static[0].copy_(xb)
            self.static[1].copy_(yb)
            self.replay_pending = True
            return self.static_loss
        self.replay_pending = False
        return self._eager(xb, yb)

    def update(self):
        if self.replay_pending:
            self.graph.replay()  # forward, backward and the optimizer step in one launch
        else:
            self.mp.step(self.optimizer)


def train_epoch(model, optimizer, loader, progress, bar, stop, graphed=None, par=None, mp=None):
    """Run the rest of the loader's current epoch, recording each finished step in ``progress``; returns the
    epoch's mean training loss. ``graphed`` (a GraphedStep) replays the step as a CUDA graph; ``par`` (a
    cli.data_parallel.DataParallel) trains this rank's share of each batch."""
    import gpugrad
    from gpugrad.backend import CPU
    from gpugrad.nn import functional as F
    from gpugrad.random import generator

    model.train()
    base_time, t0 = progress.train_time, time.perf_counter()
    for xb, yb in loader:
        summed = None  # the batch's summed loss, when the loss is not its mean (a rank's share)
        if graphed is not None:
            loss = graphed.forward_backward(xb, yb)
        else:
            with mp.autocast() if mp else contextlib.nullcontext():
                loss, summed = par.loss(model, xb, yb) if par else (F.cross_entropy(model(xb), yb), None)
            optimizer.zero_grad(set_to_none=True)
            mp.backward(loss) if mp else loss.backward()
        # NOTE: from the first parameter update to the last field of the progress record, a checkpoint would mix
        # two steps; a second Ctrl-C is held until the whole step is committed
        with stop.critical():
            if graphed is not None:
                graphed.update()
            else:
                mp.step(optimizer) if mp else optimizer.step()
            with gpugrad.no_grad():
                weighted = loss.detach() * len(yb) if summed is None else summed
                progress.loss_sum = weighted if progress.loss_sum is None else progress.loss_sum + weighted
            progress.batch += 1
            progress.samples += len(yb)
            progress.train_time = base_time + time.perf_counter() - t0
            progress.rng = generator(CPU).bit_generator.state  # as of this step, whatever runs before the next
        bar.update(1)
        if not bar.disable and bar.n % 10 == 0:  # .item() syncs a GPU: only for a visible bar, now and then
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        stop.check()
    loss_sum = par.total(progress.loss_sum, model) if par else progress.loss_sum
    train_loss = loss_sum.item() / progress.samples if progress.samples else float("nan")
    progress.train_time = base_time + time.perf_counter() - t0  # .item() waited for the device
    return train_loss


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


class _SigintFlag:
    """The first Ctrl-C asks the loop to stop at the next batch boundary (so the checkpoint is consistent);
    a second one raises KeyboardInterrupt at once, or, inside ``critical()``, as soon as the region ends.
    ``torn`` records a KeyboardInterrupt that escaped a critical region half done (raised by someone else: then
    the model and optimizer no longer match the progress record).  Only installed in the main thread.
    ``agree(flag) -> any rank's flag`` (--distributed) makes the stop collective: ``agreed`` then says every rank
    stopped at the same batch boundary."""

    def __init__(self, agree=None):
        self.requested, self.torn, self._old, self._critical, self._held = False, False, None, False, False
        self.agree, self.agreed = agree, False

    def _handle(self, signum, frame):
        if not self.requested:
            self.requested = True
            print("\ninterrupt: stopping after this batch (Ctrl-C again to stop at once)", file=sys.stderr,
                  flush=True)
        elif self._critical:
            self._held = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self):
        self._critical = True
        try:
            yield
        except BaseException:
            self.torn = True
            raise
        finally:
            self._critical = False
        if self._held:
            raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)

    def check(self):
        if self.requested if self.agree is None else self.agree(self.requested):
            self.agreed = True
            raise KeyboardInterrupt

    def ignore(self):
        if self._old is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class _NoBar:
    disable, n = True, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def update(self, n):
        pass


def _progress_bar(total, initial, desc, disable):
    """A tqdm bar on stderr (a context manager), or a stand-in when disabled or tqdm is missing."""
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but a missing bar must not stop training
        return _NoBar()
    if disable:
        return _NoBar()
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, leave=False, unit="batch",
                dynamic_ncols=True)


def _say(quiet, *parts):
    if not quiet:
        print(*parts, flush=True)


# -- the command ---------------------------------------------------------------------------------------------------
def run(args) -> int:
    from gpugrad.cli.checkpoint import CheckpointError
    from gpugrad.cli.plot import PlotUnavailable
    from gpugrad.data import IdxError

    try:
        return train(args)
    except (CliError, CheckpointError, IdxError, PlotUnavailable, OSError, MemoryError) as e:
        # OSError: missing file, disk full; MemoryError: e.g. --hidden 100000000 (NumPy names the allocation)
        par = getattr(args, "par", None)
        if par is not None and par.rank:
            # NOTE: an error every rank meets is said once: rank 0 says it and aborts the others meanwhile
            sys.stderr = sys.__stderr__
            time.sleep(1.0)
        what = f"not enough memory ({e or 'MemoryError'})" if isinstance(e, MemoryError) else e
        print(f"gpugrad train: error: {what}", file=sys.stderr)
        return EXIT_ERROR if par is None else par.abort(EXIT_ERROR)


def check_outputs(args):
    """Every output path, before any data is read: a file (not a directory) whose directory exists or is created
    here, and matplotlib for --plot; an existing --checkpoint only with --resume or --overwrite.  Raises OSError
    (OutputPathError), CliError or PlotUnavailable with one line."""
    from gpugrad.cli.checkpoint import output_path

    for what, path in (("--checkpoint", args.checkpoint), ("--metrics-json", args.metrics_json)):
        if path:  # NOTE: a --resume file is checked once it is loaded (a finished run writes nothing)
            output_path(path, what)
    if args.checkpoint and not (args.resume or args.overwrite) and Path(args.checkpoint).resolve().is_file():
        raise CliError(f"--checkpoint {args.checkpoint} already exists; pass --resume {args.checkpoint} to continue "
                       "that run, or --overwrite to replace it")
    if args.plot:
        from gpugrad.cli.plot import check_plot_path

        check_plot_path(args.plot)


def check_resumable(saved, path):
    """Raise CheckpointError unless ``saved`` holds what ``gpugrad train --resume`` reads, with values the command
    line would accept: the config (by RULES), the progress record, the generator state, finite model weights."""
    from gpugrad.backend import CPU
    from gpugrad.cli.checkpoint import CheckpointError
    from gpugrad.random import generator

    saved = saved if isinstance(saved, dict) else {}
    config, progress = saved.get("config"), saved.get("progress")
    missing = [k for k in ("config", "model", "optimizer", "progress") if not isinstance(saved.get(k), dict)]
    missing += [f"config/{k}" for k in RULES if isinstance(config, dict) and k not in config]
    missing += [f"progress/{k}" for k in Progress().state() if isinstance(progress, dict) and k not in progress]
    if missing:
        raise CheckpointError(f"{path}: not a checkpoint of `gpugrad train` (no {', '.join(missing)})")
    check_config(config, path)
    check_progress(progress, path)
    if saved.get("rng") is not None:
        kind = type(generator(CPU).bit_generator)
        try:
            kind().state = saved["rng"]["numpy"]  # a scratch generator: the state must be one it accepts
        except (TypeError, ValueError, KeyError, IndexError, OverflowError) as e:
            raise CheckpointError(f"{path}: rng/numpy is not a state of NumPy's {kind.__name__} "
                                  f"({type(e).__name__}: {e})") from None
    for name, value in saved["model"].items():
        value = _host(value)
        if not _finite_array(value):
            what = f"a {type(value).__name__}, not an array" if not isinstance(value, np.ndarray) else \
                "NaN or infinite values"
            raise CheckpointError(f"{path}: model/{name} holds {what}; this checkpoint cannot be resumed")


def _host(v):
    """A Tensor (state dicts hold them, as torch's) as a host array; anything else as it is."""
    from gpugrad import Tensor

    return v.detach().cpu().numpy() if isinstance(v, Tensor) else v


def _is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_array(v):
    return isinstance(v, np.ndarray) and v.dtype.kind in "fiub" and bool(np.isfinite(v).all())


# what a resumed progress record may hold: field -> (test, what it must be)
PROGRESS_RULES = {
    "epoch": (_is_count, "an integer >= 0"), "batch": (_is_count, "an integer >= 0"),
    "samples": (_is_count, "an integer >= 0"),
    "train_time": (lambda v: _is_number(v) and 0 <= v < math.inf, "a finite number of seconds >= 0"),
    "loss_sum": (lambda v: v is None or getattr(v, "shape", None) == () and math.isfinite(v.item()),
                 "None or a 0-d tensor with a finite value"),
    "history": (lambda v: isinstance(v, list) and all(isinstance(m, dict) and set(m) == set(METRICS)
                                                      and all(map(_is_number, m.values())) for m in v),
                f"a list of per-epoch records of the numbers {', '.join(METRICS)}"),
}


def check_progress(progress, path):
    """Raise CheckpointError naming the first field of a checkpoint's progress record that PROGRESS_RULES refuse."""
    from gpugrad.cli.checkpoint import CheckpointError

    for key, value in progress.items():
        if key not in PROGRESS_RULES:
            raise CheckpointError(f"{path}: progress has unknown field(s) {key}")
        test, what = PROGRESS_RULES[key]
        if not test(value):
            raise CheckpointError(f"{path}: progress/{key} is {_short(value)}; it must be {what}")


def _same(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):  # e.g. an array where a number belongs
        return False


def check_optimizer_state(state, optimizer, path):
    """Raise CheckpointError unless ``state`` (a checkpoint's ``optimizer``) could come from ``optimizer``, which
    was built from the checkpoint's validated config: the same parameter groups and options (a NaN learning rate
    in the optimizer's own copy is caught here), and per-parameter state of finite arrays and step counts."""
    from gpugrad.cli.checkpoint import CheckpointError

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
    for idx, st in per_param.items():
        for name, value in (st.items() if isinstance(st, dict) else [("", st)]):
            value = _host(value)
            if not (_is_count(value) or _finite_array(value)):
                what = "holds NaN or infinite values" if isinstance(value, np.ndarray) else f"is {_short(value)}"
                raise bad(f"state/{idx}/{name}", f"{what}, not a finite array or a step count")


def resolve_device(arg):
    """The device ``--device`` (else ``GPUGRAD_DEVICE``, else the best available) names; an error names its source."""
    from gpugrad.backend import get_backend

    env = os.environ.get("GPUGRAD_DEVICE")
    source = f"--device {arg}" if arg is not None else f"GPUGRAD_DEVICE={env!r} (from the environment)" if env \
        else "the default device"
    try:
        return get_backend(arg).device
    except (RuntimeError, ValueError, TypeError) as e:
        raise CliError(f"{source}: {e}") from None


def _all_finite(loss_sum):
    """Whether a device loss sum (or None) is finite; reads it, so call only where a sync is due anyway."""
    return loss_sum is None or math.isfinite(loss_sum.item())


def train(args) -> int:
    import gpugrad
    from gpugrad.backend import CPU
    from gpugrad.cli import checkpoint
    from gpugrad.data import DataLoader, TensorDataset
    from gpugrad.random import generator

    t_start = time.perf_counter()
    quiet = args.quiet
    ckpt_path = args.checkpoint or args.resume
    par = None  # the data-parallel run this process is one rank of (--distributed)
    try:  # a Ctrl-C before the first batch has nothing to save: exit at once, quietly
        if getattr(args, "distributed", False):  # first: then an error below is said once, by rank 0
            from gpugrad.cli.data_parallel import DataParallel

            par = args.par = DataParallel(args, resolve_device, CliError)
            if args.cuda_graph:
                raise CliError("--cuda-graph does not combine with --distributed (a graph cannot hold an all-reduce)")
        check_outputs(args)  # fail before training, not after it
        device = par.device if par else resolve_device(args.device)
        if args.cuda_graph and device.type != "cuda":
            raise CliError(f"--cuda-graph needs a CUDA device, but training runs on {device}; pass --device cuda")

        saved = checkpoint.load(args.resume, device=device) if args.resume else None
        if saved is not None:
            check_resumable(saved, args.resume)
        config = resolve_config(args, saved and saved["config"], par.size if par else 1)
        finished = bool(saved) and saved["progress"]["epoch"] >= config["epochs"]
        if saved and not finished and not args.checkpoint:  # the run saves back into the --resume file
            try:
                checkpoint.output_path(args.resume, "--resume")
            except checkpoint.OutputPathError as e:
                raise CliError(f"{e} (a resumed run saves back to it; pass --checkpoint PATH to save elsewhere)") \
                    from None

        x_train, y_train, x_test, y_test, data_desc = load_data(config)
        n_classes = count_classes(config, y_train, y_test)
        model = build_model(config, x_train.shape[1], n_classes, device)
        net = par.wrap(model) if par else model  # what the training step calls
        optimizer = build_optimizer(config, model.parameters())
        if saved:
            check_optimizer_state(saved["optimizer"], optimizer, args.resume)
        progress = Progress(**saved["progress"]) if saved else Progress()
        if par and par.rank:
            progress.loss_sum = None  # each rank sums its own rows; rank 0 carries what came before
        train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=config["batch_size"], shuffle=True,
                                  seed=config["seed"], device=device)
        test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=EVAL_BATCH, device=device)
        if saved:
            try:
                model.load_state_dict(saved["model"])
                optimizer.load_state_dict(saved["optimizer"])
                train_loader.set_epoch(progress.epoch, progress.batch)
            except (RuntimeError, ValueError, KeyError, TypeError) as e:
                raise CliError(f"the data no longer matches the checkpoint {args.resume}: "
                               + " ".join(str(e).split())) from None
    except KeyboardInterrupt:
        print("\ninterrupted before training started; nothing saved", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED

    if finished:
        config["epochs"] = progress.epoch  # what the output below describes
    epochs = config["epochs"]
    n_params = sum(p.numel() for p in model.parameters())
    sizes = "-".join(str(s) for s in [x_train.shape[1], *config["hidden"], n_classes])
    _say(quiet, f"data: {data_desc}: {len(x_train)} train / {len(x_test)} test, {x_train.shape[1]} features"
                + (" (standardized)" if config["standardize"] else "") + f", {n_classes} classes")
    _say(quiet, f"model: MLP {sizes} ({config['activation']}), {n_params:,} parameters; {config['optimizer']} "
                f"lr={config['lr']:g} weight_decay={config['weight_decay']:g}"
                + (f" momentum={config['momentum']:g}" if config["optimizer"] == "sgd" else "")
                + f"; batch {config['batch_size']}"
                + (f" (~{config['batch_size'] / par.size:g} per rank x {par.size} ranks)" if par else "")
                + f", {epochs} epochs, seed {config['seed']}, device {device}")
    if finished:
        print(f"{args.resume}: already finished {epochs} epochs; nothing to do (pass --epochs > {epochs} to "
              "continue)", file=sys.stderr, flush=True)
    elif saved:
        _say(quiet, f"resumed from {args.resume} at epoch {progress.epoch + 1}, batch {progress.batch}")
    t_setup = time.perf_counter() - t_start

    def save_checkpoint():
        if par and par.rank:
            return
        rng = progress.rng or generator(CPU).bit_generator.state
        checkpoint.save(ckpt_path, {
            "config": config, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "progress": progress.state(), "rng": {"numpy": rng},
            "device": str(device), "gpugrad_version": gpugrad.__version__}, "--checkpoint")

    def report(interrupted, diverged=None):
        if par and par.rank:
            return
        if args.metrics_json:
            write_metrics(args.metrics_json, config, device, data_desc, progress, interrupted,
                          {"setup_s": t_setup, "total_s": time.perf_counter() - t_start}, diverged)
        if args.plot and progress.history:
            from gpugrad.cli.plot import plot_history

            plot_history(progress.history, args.plot, title=f"gpugrad train: MLP {sizes}, {config['optimizer']}")

    def kept(state="good"):
        """What the checkpoint file holds now that nothing more will be saved ("" when there is none)."""
        return f"; {ckpt_path} keeps the last {state} checkpoint" if ckpt_path and Path(ckpt_path).exists() else ""

    def diverged(epoch, train_loss, test_loss):
        print(f"gpugrad train: error: training diverged in epoch {epoch}: train_loss {train_loss:.4g}, test_loss "
              f"{test_loss:.4g} (the loss became NaN or infinite); stopped without saving it{kept()}. Try "
              f"a smaller --lr (this run's is {config['lr']:g}) or check the data for extreme values",
              file=sys.stderr, flush=True)
        report(interrupted=False, diverged={"epoch": epoch, "train_loss": train_loss, "test_loss": test_loss})
        return EXIT_DIVERGED

    width = len(str(epochs))
    mp = amp_cli.MixedPrecision.from_args(args, device)
    _say(quiet, f"precision: {mp.describe()}" + (", TF32 matmuls" if getattr(args, "tf32", False) else ""))
    graphed = GraphedStep(model, optimizer, mp) if args.cuda_graph else None
    # NOTE: NumPy's overflow warnings would only come before the divergence check's own one-line message
    agree = par.any if par else None  # --distributed: all ranks stop at the same batch
    with _SigintFlag(agree) as stop, np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        try:
            while progress.epoch < epochs:
                epoch = progress.epoch
                gpugrad.manual_seed(epoch_seed(config["seed"], epoch))
                if progress.batch and saved and saved.get("rng"):  # mid-epoch resume: the generator went on
                    generator(CPU).bit_generator.state = saved["rng"]["numpy"]
                train_loader.set_epoch(epoch, progress.batch)
                with _progress_bar(len(train_loader), progress.batch, f"epoch {epoch + 1}/{epochs}",
                                   quiet or not sys.stderr.isatty()) as bar:
                    train_loss = train_epoch(net, optimizer, train_loader, progress, bar, stop, graphed, par, mp)
                t_eval = time.perf_counter()
                test_loss, test_acc = evaluate(model, test_loader)
                # NOTE: the epoch's one read of the loss sum (train_epoch) is the check: no extra sync per batch
                if not (math.isfinite(train_loss) and math.isfinite(test_loss)):
                    return diverged(epoch + 1, train_loss, test_loss)
                metrics = {"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
                           "test_acc": test_acc, "samples_per_s": progress.samples / max(progress.train_time, 1e-9),
                           "train_time_s": progress.train_time, "eval_time_s": time.perf_counter() - t_eval}
                progress = Progress(epoch + 1, history=[*progress.history, metrics])
                _say(quiet, f"epoch {epoch + 1:>{width}}/{epochs}  train_loss {train_loss:.4f}  "
                            f"test_loss {test_loss:.4f}  test_acc {100 * test_acc:6.2f}%  "
                            f"{metrics['samples_per_s']:,.0f} samples/s  {metrics['train_time_s']:.2f} s")
                if ckpt_path:
                    save_checkpoint()
                stop.check()
        except KeyboardInterrupt:
            stop.ignore()  # a further Ctrl-C must not break the save below
            where = f"epoch {progress.epoch + 1}, batch {progress.batch}"
            if par and not stop.agreed:  # a second Ctrl-C: the ranks may be at different steps
                print(f"\ninterrupted at once at {where}: nothing saved{kept('consistent')}", file=sys.stderr,
                      flush=True)
                return EXIT_INTERRUPTED
            if par:
                progress.loss_sum = par.total(progress.loss_sum, model)
            if stop.torn:  # the step was cut half way: model and optimizer are neither before nor after it
                print(f"\ninterrupted inside the optimizer step after {where}: nothing saved{kept('consistent')}",
                      file=sys.stderr, flush=True)
            elif not _all_finite(progress.loss_sum):  # diverged mid-epoch: saving would bury the good state
                print(f"\ninterrupted at {where}, but the loss had become NaN or infinite (training diverged): "
                      f"nothing saved{kept()}", file=sys.stderr, flush=True)
                report(interrupted=True)
                return EXIT_DIVERGED
            elif ckpt_path:
                save_checkpoint()
                print(f"\ninterrupted at {where}: checkpoint saved to {ckpt_path}; continue with "
                      f"`gpugrad train --resume {ckpt_path}`", file=sys.stderr, flush=True)
            else:
                print(f"\ninterrupted at {where}; nothing saved (no --checkpoint given)", file=sys.stderr, flush=True)
            report(interrupted=True)
            return EXIT_INTERRUPTED

    report(interrupted=False)
    last = progress.history[-1] if progress.history else None
    total = time.perf_counter() - t_start
    train_s = sum(m["train_time_s"] for m in progress.history)
    if last:
        print(f"final: test_acc {100 * last['test_acc']:.2f}% train_loss {last['train_loss']:.4f} after "
              f"{last['epoch']} epochs on {device} ({train_s:.2f} s training in all, {total:.2f} s wall in this run)",
              flush=True)
    return 0


def _finite(value):
    """``value`` with every NaN and infinity replaced by None (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_metrics(path, config, device, data_desc, progress, interrupted, timings, diverged=None):
    """Config, device, per-epoch metrics, final metrics and timings as strict JSON (NaN and infinities as null),
    written atomically; ``diverged`` is the epoch whose loss became non-finite (None: none did)."""
    import gpugrad
    from gpugrad.cli.checkpoint import atomic_write

    history = progress.history
    doc = {
        "gpugrad_version": gpugrad.__version__, "config": config, "device": str(device), "data": data_desc,
        "interrupted": interrupted, "diverged": diverged, "epochs": history,
        "final": ({k: history[-1][k] for k in ("epoch", "train_loss", "test_loss", "test_acc")} if history else None),
        "timings": {**timings, "train_s": sum(m["train_time_s"] for m in history),
                    "eval_s": sum(m["eval_time_s"] for m in history)},
    }
    text = json.dumps(_finite(doc), indent=2, allow_nan=False) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()), "--metrics-json")
