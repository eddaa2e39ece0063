"""``gpugrad train``: train an MLP classifier on the embedded 8x8 digits or an MNIST-format directory.

    gpugrad train                                     # digits, defaults below, best device
    gpugrad train --data ~/mnist --epochs 10 --checkpoint run.ckpt --metrics-json run.json --plot run.png
    gpugrad train --resume run.ckpt --epochs 20       # continue (also after Ctrl-C) up to 20 epochs in total

Reproducible: the same seed gives bitwise-identical losses on the same device, and a run resumed from a
checkpoint (written at the end of every epoch, or on Ctrl-C mid-epoch) repeats exactly what an uninterrupted run
does: the loader's order depends only on (seed, epoch), gpugrad's generators are reseeded from (seed, epoch) at
the start of each epoch, and the checkpoint holds model, optimizer, position within the epoch and the CPU
generator's state.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

DEFAULTS = {"data": None, "hidden": [256, 128], "activation": "relu", "epochs": 20, "batch_size": 64, "lr": 1e-3,
            "optimizer": "adam", "momentum": 0.9, "weight_decay": None, "seed": 0}
# A resumed run keeps these from its checkpoint; a different value on the command line is an error.
FIXED_ON_RESUME = ("data", "hidden", "activation", "batch_size", "lr", "optimizer", "momentum", "weight_decay",
                   "seed")
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid")
OPTIMIZERS = ("sgd", "adam", "adamw")
EVAL_BATCH = 1000
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class CliError(Exception):
    """A problem with the command line or its inputs: reported as one line, exit code 1."""


# -- arguments -----------------------------------------------------------------------------------------------------
def _positive(kind):
    def parse(text):
        value = kind(text)
        if not value > 0 or (kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _non_negative(kind):
    def parse(text):
        value = kind(text)
        if value < 0 or (kind is float and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    parse.__name__ = f"non-negative {kind.__name__}"
    return parse


def _hidden(text):
    try:
        sizes = [int(s) for s in text.replace(" ", "").split(",") if s]
    except ValueError:
        sizes = None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive layer sizes like 256,128, got {text!r}")
    return sizes


def add_arguments(p):
    d = DEFAULTS
    p.add_argument("--data", metavar="DIR", help="MNIST-format IDX directory (train-images-idx3-ubyte[.gz], ...); "
                   "default: the embedded 8x8 digits")
    p.add_argument("--hidden", type=_hidden, metavar="N,N", help="hidden layer sizes (default: 256,128)")
    p.add_argument("--activation", choices=ACTIVATIONS, help=f"hidden activation (default: {d['activation']})")
    p.add_argument("--epochs", type=_positive(int), help=f"total number of epochs (default: {d['epochs']})")
    p.add_argument("--batch-size", type=_positive(int), help=f"training batch size (default: {d['batch_size']})")
    p.add_argument("--lr", type=_positive(float), help=f"learning rate (default: {d['lr']})")
    p.add_argument("--optimizer", choices=OPTIMIZERS, help=f"(default: {d['optimizer']})")
    p.add_argument("--momentum", type=_non_negative(float), help=f"SGD momentum (default: {d['momentum']})")
    p.add_argument("--weight-decay", type=_non_negative(float),
                   help="weight decay (default: the optimizer's own: 0.01 for adamw, else 0)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: CUDA when available, else CPU)")
    p.add_argument("--seed", type=_non_negative(int), help=f"seed for init and shuffling (default: {d['seed']})")
    p.add_argument("--checkpoint", metavar="PATH", help="save a checkpoint here after every epoch and on Ctrl-C")
    p.add_argument("--resume", metavar="PATH", help="continue the run saved in this checkpoint (and keep saving "
                   "to it unless --checkpoint says otherwise)")
    p.add_argument("--metrics-json", metavar="PATH", help="write config, per-epoch and final metrics, timings")
    p.add_argument("--plot", metavar="PATH.png", help="save loss and accuracy curves (needs matplotlib)")
    p.add_argument("--quiet", action="store_true", help="print only the final result")


def resolve_config(args, saved=None):
    """The run's configuration: the checkpoint's when resuming (only --epochs may change), else args + defaults."""
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k, None) is not None}
    if "data" in given:
        given["data"] = str(Path(given["data"]).expanduser().resolve())
    if saved is None:
        config = {**DEFAULTS, **given}
        if config["weight_decay"] is None:
            config["weight_decay"] = 0.01 if config["optimizer"] == "adamw" else 0.0
        return config
    config = dict(saved)
    for key in FIXED_ON_RESUME:
        if key in given and given[key] != saved[key]:
            raise CliError(f"--{key.replace('_', '-')} {given[key]} differs from the checkpoint's {saved[key]}; "
                           "a resumed run keeps its configuration (only --epochs and output options may change)")
    config["epochs"] = given.get("epochs", saved["epochs"])
    return config


# -- pieces of a run -----------------------------------------------------------------------------------------------
def load_data(config):
    """(x_train, y_train, x_test, y_test, description) as float32 features in [0, 1] and int64 labels."""
    from gpugrad.data import digits_split, load_idx_dir

    if config["data"] is None:
        return (*digits_split(), "digits (embedded 8x8, UCI optdigits, CC BY 4.0)")
    return (*load_idx_dir(config["data"]), f"IDX directory {config['data']}")


def build_model(config, n_in, n_out, device):
    """The MLP, initialised on the CPU from the run's seed (same values on every device), then moved."""
    import gpugrad
    from gpugrad import nn

    gpugrad.manual_seed(config["seed"])
    model = nn.MLP([n_in, *config["hidden"], n_out], activation=config["activation"])
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
    loss, correct, n = 0.0, 0, 0
    with gpugrad.no_grad():
        for xb, yb in loader:
            logits = model(xb)
            loss += F.cross_entropy(logits, yb, reduction="sum").item()
            correct += int((logits.argmax(axis=1).numpy() == yb.numpy()).sum())
            n += len(yb)
    model.train()
    return loss / max(n, 1), correct / max(n, 1)


class Progress:
    """Where a run stands: the epoch being trained (0-based), batches done in it, and what they added up to."""

    def __init__(self, epoch=0, batch=0, samples=0, train_time=0.0, loss_sum=None, history=()):
        self.epoch, self.batch, self.samples, self.train_time = epoch, batch, samples, train_time
        self.loss_sum = loss_sum  # device scalar: summing on the device avoids a sync per batch
        self.history = list(history)

    def state(self):
        return {"epoch": self.epoch, "batch": self.batch, "samples": self.samples, "train_time": self.train_time,
                "loss_sum": self.loss_sum, "history": self.history}


class _SigintFlag:
    """The first Ctrl-C asks the loop to stop at the next batch boundary (so the checkpoint is consistent);
    a second one raises KeyboardInterrupt at once.  Only installed in the main thread."""

    def __init__(self, quiet):
        self.requested, self.quiet, self._old = False, quiet, None

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\ninterrupt: stopping after this batch (Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)

    def check(self):
        if self.requested:
            raise KeyboardInterrupt


def _progress_bar(total, initial, desc, disable):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but a missing bar must not stop training
        return None
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, leave=False, unit="batch",
                dynamic_ncols=True, disable=disable)


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
    except (CliError, CheckpointError, IdxError, FileNotFoundError, PlotUnavailable) as e:
        print(f"gpugrad train: error: {e}", file=sys.stderr)
        return 1


def train(args) -> int:
    import gpugrad
    from gpugrad.backend import get_backend
    from gpugrad.cli import checkpoint
    from gpugrad.data import DataLoader, TensorDataset
    from gpugrad.nn import functional as F
    from gpugrad.random import generator

    t_start = time.perf_counter()
    quiet = args.quiet
    if args.plot:
        from gpugrad.cli.plot import require_matplotlib

        require_matplotlib()  # fail before training, not after it
    try:
        device = get_backend(args.device).device
    except (RuntimeError, ValueError, TypeError) as e:
        raise CliError(f"--device {args.device}: {e}") from None

    saved = checkpoint.load(args.resume, device=device) if args.resume else None
    config = resolve_config(args, saved and saved["config"])
    ckpt_path = args.checkpoint or args.resume

    x_train, y_train, x_test, y_test, data_desc = load_data(config)
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    model = build_model(config, x_train.shape[1], n_classes, device)
    if saved:
        model.load_state_dict(saved["model"])
    optimizer = build_optimizer(config, model.parameters())
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
    progress = Progress(**saved["progress"]) if saved else Progress()

    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=config["batch_size"], shuffle=True,
                              seed=config["seed"], device=device)
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=EVAL_BATCH, device=device)
    n_params = sum(p.numel() for p in model.parameters())
    sizes = "-".join(str(s) for s in [x_train.shape[1], *config["hidden"], n_classes])
    _say(quiet, f"data: {data_desc}: {len(x_train)} train / {len(x_test)} test, {x_train.shape[1]} features, "
                f"{n_classes} classes")
    _say(quiet, f"model: MLP {sizes} ({config['activation']}), {n_params:,} parameters; {config['optimizer']} "
                f"lr={config['lr']:g} weight_decay={config['weight_decay']:g}"
                + (f" momentum={config['momentum']:g}" if config["optimizer"] == "sgd" else "")
                + f"; batch {config['batch_size']}, {config['epochs']} epochs, seed {config['seed']}, device {device}")
    if saved:
        _say(quiet, f"resumed from {args.resume} at epoch {progress.epoch + 1}, batch {progress.batch}")
    t_setup = time.perf_counter() - t_start

    def save_checkpoint():
        checkpoint.save(ckpt_path, {
            "config": config, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "progress": progress.state(), "rng": {"numpy": generator(np).bit_generator.state},
            "device": str(device), "gpugrad_version": gpugrad.__version__})

    def report(interrupted):
        if args.metrics_json:
            write_metrics(args.metrics_json, config, device, data_desc, progress, interrupted,
                          {"setup_s": t_setup, "total_s": time.perf_counter() - t_start})
        if args.plot and progress.history:
            from gpugrad.cli.plot import plot_history

            plot_history(progress.history, args.plot, title=f"gpugrad train: MLP {sizes}, {config['optimizer']}")

    epochs = config["epochs"]
    width = len(str(epochs))
    with _SigintFlag(quiet) as stop:
        try:
            while progress.epoch < epochs:
                epoch = progress.epoch
                gpugrad.manual_seed(epoch_seed(config["seed"], epoch))
                if progress.batch and saved and saved.get("rng"):  # mid-epoch resume: the generator went on
                    generator(np).bit_generator.state = saved["rng"]["numpy"]
                train_loader.set_epoch(epoch, progress.batch)
                bar = _progress_bar(len(train_loader), progress.batch, f"epoch {epoch + 1}/{epochs}",
                                    quiet or not sys.stderr.isatty())
                model.train()
                base_time, t0 = progress.train_time, time.perf_counter()
                for xb, yb in train_loader:
                    loss = F.cross_entropy(model(xb), yb)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    # the step is done: commit it to the progress record (what a checkpoint saves)
                    with gpugrad.no_grad():
                        weighted = loss.detach() * len(yb)
                        progress.loss_sum = weighted if progress.loss_sum is None else progress.loss_sum + weighted
                    progress.batch += 1
                    progress.samples += len(yb)
                    progress.train_time = base_time + time.perf_counter() - t0
                    if bar is not None:
                        bar.update(1)
                        if not bar.disable and bar.n % 10 == 0:
                            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
                    stop.check()
                train_loss = progress.loss_sum.item() / progress.samples if progress.samples else float("nan")
                progress.train_time = base_time + time.perf_counter() - t0  # .item() waited for the device
                if bar is not None:
                    bar.close()
                t_eval = time.perf_counter()
                test_loss, test_acc = evaluate(model, test_loader)
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
            where = f"epoch {progress.epoch + 1}, batch {progress.batch}"
            if ckpt_path:
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
              f"{last['epoch']} epochs on {device} ({train_s:.2f} s training, {total:.2f} s total)", flush=True)
    return 0


def write_metrics(path, config, device, data_desc, progress, interrupted, timings):
    """Config, device, per-epoch metrics, final metrics and timings as JSON (written atomically)."""
    import gpugrad
    from gpugrad.cli.checkpoint import atomic_write

    history = progress.history
    doc = {
        "gpugrad_version": gpugrad.__version__, "config": config, "device": str(device), "data": data_desc,
        "interrupted": interrupted, "epochs": history,
        "final": ({k: history[-1][k] for k in ("epoch", "train_loss", "test_loss", "test_acc")} if history else None),
        "timings": {**timings, "train_s": sum(m["train_time_s"] for m in history),
                    "eval_s": sum(m["eval_time_s"] for m in history)},
    }
    text = json.dumps(doc, indent=2) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()))
