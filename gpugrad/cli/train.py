"""``gpugrad train``: train an MLP classifier on the embedded 8x8 digits or an MNIST-format directory.

    gpugrad train                                     # digits, defaults (train_args.py), best device
    gpugrad train --data ~/mnist --epochs 10 --checkpoint run.ckpt --metrics-json run.json --plot run.png
    gpugrad train --resume run.ckpt --epochs 20       # continue (also after Ctrl-C) up to 20 epochs in total
    mpiexec -n 2 gpugrad train --distributed          # data-parallel: --batch-size per rank (cli/data_parallel.py)

Reproducible: the same seed gives bitwise-identical losses on the same device, and a run resumed from a
checkpoint (written at the end of every epoch, or on Ctrl-C or SIGTERM mid-epoch: the first stops after the
current batch, a second at once, but never between a parameter update and its record, nor inside a save) repeats
exactly what an uninterrupted run does: the loader's order depends only on (seed, epoch), gpugrad's generators are
reseeded from (seed, epoch) at the start of each epoch, and the checkpoint holds model, optimizer, position within
the epoch and the CPU generator's state.

Exit codes: 0 done; 1 an error (one line on stderr naming the file, option or environment variable at fault);
2 a bad command line (argparse); 3 (``EXIT_DIVERGED``) training diverged: the loss became NaN or infinite, so the
run stopped without saving that epoch, and the last good checkpoint stays as it was; 130 interrupted (Ctrl-C),
143 terminated (SIGTERM: ``kill``, ``timeout``, ``docker stop``, Slurm), each after saving at a batch boundary.

A checkpoint is only overwritten by the run that wrote it (``--resume``) or with ``--overwrite``, and only one run
at a time writes it: the second is refused, naming the first's pid (cli/checkpoint_lock.py); a resumed
checkpoint's configuration must pass the same checks as the command line.  Input data must be finite.  Loading is
bounded: ``GPUGRAD_MAX_CHECKPOINT_BYTES`` (default 2 GiB) and ``GPUGRAD_MAX_IDX_BYTES`` (default 1 GiB per file)
cap what a checkpoint or an IDX file may declare.

Here: the command and its run object (TrainingRun) with the pieces of a run. Beside it: train_args.py (options,
one rule per option, the run's config), checkpoint.py (the file) and resume.py (what a checkpoint must hold to be
resumed), checkpoint_lock.py (one run per checkpoint), sigint.py (Ctrl-C and SIGTERM at a batch boundary),
graphed_step.py (--cuda-graph), data_parallel.py (--distributed).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import gpugrad
from gpugrad import nn, optim
from gpugrad.backend import CPU, get_backend
from gpugrad.cli import checkpoint
from gpugrad.cli.amp import MixedPrecision
from gpugrad.cli.checkpoint_lock import CheckpointLock
from gpugrad.cli.data_parallel import DataParallel
from gpugrad.cli.graphed_step import GraphedStep
from gpugrad.cli.plot import PlotUnavailable, check_plot_path, plot_history
from gpugrad.cli.resume import Progress, check_optimizer_state, check_resumable
from gpugrad.cli.sigint import StopFlag
from gpugrad.cli.train_args import EXIT_DIVERGED, EXIT_ERROR, CliError, add_arguments, describe_setting, resolve_config
from gpugrad.data import DataLoader, IdxError, TensorDataset, digits_split, load_idx_dir
from gpugrad.data.idx import SPLITS, find_idx
from gpugrad.nn import functional as F
from gpugrad.random import generator

try:
    from tqdm import tqdm
except ImportError:  # tqdm is a dependency, but a missing bar must not stop training
    tqdm = None

STD_EPS = 0.1  # added to each feature's std: constant pixels (MNIST's borders) stay 0 instead of blowing up
EVAL_BATCH = 1000
MAX_CLASSES = 65536  # labels are class indices; a larger one is a wrong file, not a 10^5-way classifier

__all__ = ["add_arguments", "run"]  # what a subcommand module has (gpugrad/cli/__init__.py)


# -- the command ---------------------------------------------------------------------------------------------------
def run(args) -> int:
    try:
        return train(args)
    except (CliError, checkpoint.CheckpointError, IdxError, PlotUnavailable, OSError, MemoryError) as e:
        # OSError: missing file, disk full; MemoryError: e.g. --hidden 100000000 (NumPy names the allocation)
        par = getattr(args, "par", None)
        if par is not None and par.rank:
            # NOTE: an error every rank meets is said once: rank 0 says it and aborts the others meanwhile
            sys.stderr = sys.__stderr__
            time.sleep(1.0)
        what = f"not enough memory ({e or 'MemoryError'})" if isinstance(e, MemoryError) else e
        print(f"gpugrad train: error: {what}", file=sys.stderr)
        return EXIT_ERROR if par is None else par.abort(EXIT_ERROR)


def train(args) -> int:
    training = TrainingRun(args)
    try:
        try:  # a Ctrl-C or SIGTERM before the first batch has nothing to save: exit at once, quietly
            with StopFlag(at_once=True) as early:
                training.set_up()
        except KeyboardInterrupt:
            print(f"\n{early.what} before training started; nothing saved", file=sys.stderr, flush=True)
            return early.exit_code
        training.describe()
        return training.train()
    finally:
        training.release()


class TrainingRun:
    """One ``gpugrad train``: ``set_up()`` checks the command line, loads and checks the checkpoint to resume,
    builds data, model and optimizer; ``train()`` runs the epochs left, saving a checkpoint after each, and
    returns the exit code: 0 done, EXIT_DIVERGED, or 128 + the signal after a Ctrl-C (130) or SIGTERM (143).
    ``release()`` drops the checkpoint's lock."""

    def __init__(self, args):
        self.args, self.quiet, self.t_start = args, args.quiet, time.perf_counter()
        self.ckpt_path = args.checkpoint or args.resume
        self.par = None  # the data-parallel run this process is one rank of (--distributed)
        self.rank0 = True  # only rank 0 prints, plots and writes files
        self.lock = None  # on the checkpoint this run writes (cli/checkpoint_lock.py)
        self.saved_at = None  # (epoch, batch) of the checkpoint last saved by this run

    # -- set-up --------------------------------------------------------------------------------------------------
    def set_up(self):
        self.device = self._check_command_line()
        self.saved = self._load_resumed()
        self.config = resolve_config(self.args, self.saved and self.saved["config"], self.par.size if self.par else 1)
        if self.par:  # ranks started with different options would train apart
            at = self.saved and [self.saved["progress"].get(k) for k in ("epoch", "batch")]
            self.par.check_same({**self.config, "dist_timeout": self.args.dist_timeout, "resumed_at": at},
                                lambda key, value: describe_setting(key, value, self.par.size), CliError)
        self.finished = bool(self.saved) and self.saved["progress"]["epoch"] >= self.config["epochs"]
        if self.saved and not self.finished and not self.args.checkpoint:
            self._check_resume_writable()
        self._build()
        if self.saved:
            self._restore()

    def _check_command_line(self):
        """The device to train on, after every check that needs no data."""
        args = self.args
        if getattr(args, "distributed", False):  # first: then an error below is said once, by rank 0
            self.par = args.par = DataParallel(args, resolve_device, CliError)
            self.rank0 = not self.par.rank
            if args.cuda_graph:
                raise CliError("--cuda-graph does not combine with --distributed (a graph cannot hold an all-reduce)")
        if self.ckpt_path and self.rank0:  # NOTE: before check_outputs: a running owner is the news, not the file
            self.lock = CheckpointLock.acquire(self.ckpt_path, "--checkpoint" if args.checkpoint else "--resume")
        check_outputs(args)  # fail before training, not after it
        device = self.par.device if self.par else resolve_device(args.device)
        if args.cuda_graph and device.type != "cuda":
            raise CliError(f"--cuda-graph needs a CUDA device, but training runs on {device}; pass --device cuda")
        return device

    def _load_resumed(self):
        if not self.args.resume:
            return None
        saved = checkpoint.load(self.args.resume, device=self.device)
        check_resumable(saved, self.args.resume)
        return saved

    def _check_resume_writable(self):
        """The run saves back into the --resume file: it must be writable."""
        try:
            checkpoint.output_path(self.args.resume, "--resume")
        except checkpoint.OutputPathError as e:
            raise CliError(f"{e} (a resumed run saves back to it; pass --checkpoint PATH to save elsewhere)") from None

    def _build(self):
        config, device = self.config, self.device
        x_train, y_train, x_test, y_test, self.data_desc = load_data(config)
        self.n_train, self.n_test, self.n_features = len(x_train), len(x_test), x_train.shape[1]
        self.n_classes = count_classes(config, y_train, y_test)
        try:
            self.model = build_model(config, self.n_features, self.n_classes, device)
        except (ValueError, OverflowError) as e:  # NumPy's "array is too big" before it tries to allocate
            raise MemoryError(f"--hidden {','.join(map(str, config['hidden']))}: {e}") from None
        self.net = self.par.wrap(self.model) if self.par else self.model  # what the training step calls
        self.optimizer = build_optimizer(config, self.model.parameters())
        if self.saved:
            check_optimizer_state(self.saved["optimizer"], self.optimizer, self.args.resume)
        self.progress = Progress(**self.saved["progress"]) if self.saved else Progress()
        if not self.rank0:
            self.progress.loss_sum = None  # each rank sums its own rows; rank 0 carries what came before
        self.train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=config["batch_size"], shuffle=True,
                                       seed=config["seed"], device=device)
        self.test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=EVAL_BATCH, device=device)

    def _restore(self):
        """Model, optimizer and the loader's position from the checkpoint being resumed."""
        try:
            self.model.load_state_dict(self.saved["model"])
            self.optimizer.load_state_dict(self.saved["optimizer"])
            self.train_loader.set_epoch(self.progress.epoch, self.progress.batch)
        except (RuntimeError, ValueError, KeyError, TypeError) as e:
            raise CliError(f"the data no longer matches the checkpoint {self.args.resume}: "
                           + " ".join(str(e).split())) from None

    def describe(self):
        """Say what runs: data, model, optimizer, and where a resumed run continues."""
        config, progress = self.config, self.progress
        if self.finished:
            config["epochs"] = progress.epoch  # what the output below describes
        epochs = config["epochs"]
        n_params = sum(p.numel() for p in self.model.parameters())
        self.sizes = "-".join(str(s) for s in [self.n_features, *config["hidden"], self.n_classes])
        per_rank = f" (~{config['batch_size'] / self.par.size:g} per rank x {self.par.size} ranks)" if self.par else ""
        self._say(f"data: {self.data_desc}: {self.n_train} train / {self.n_test} test, {self.n_features} features"
                  + (" (standardized)" if config["standardize"] else "") + f", {self.n_classes} classes")
        self._say(f"model: MLP {self.sizes} ({config['activation']}), {n_params:,} parameters; {config['optimizer']} "
                  f"lr={config['lr']:g} weight_decay={config['weight_decay']:g}"
                  + (f" momentum={config['momentum']:g}" if config["optimizer"] == "sgd" else "")
                  + f"; batch {config['batch_size']}{per_rank}, {epochs} epochs, seed {config['seed']}, "
                  f"device {self.device}")
        if self.finished:
            print(f"{self.args.resume}: already finished {epochs} epochs; nothing to do (pass --epochs > {epochs} to "
                  "continue)", file=sys.stderr, flush=True)
        elif self.saved:
            self._say(f"resumed from {self.args.resume} at epoch {progress.epoch + 1}, batch {progress.batch}")
        self.t_setup = time.perf_counter() - self.t_start

    # -- training ------------------------------------------------------------------------------------------------
    def train(self) -> int:
        self.mp = MixedPrecision.from_args(self.args, self.device)
        if self.saved and self.mp.scaler is not None and self.saved.get("scaler"):
            # the scale a float16 run had found, and how far it was towards growing it: a fresh scaler would start
            # again at 2^16 and skip steps until it backed off to where the run already was
            self.mp.scaler.load_state_dict(self.saved["scaler"])
        self._say(f"precision: {self.mp.describe()}" + (", TF32 matmuls" if getattr(self.args, "tf32", False) else ""))
        graphed = GraphedStep(self.model, self.optimizer, self.mp) if self.args.cuda_graph else None
        # NOTE: NumPy's overflow warnings would only come before the divergence check's own one-line message
        agree = self.par.any if self.par else None  # --distributed: all ranks stop at the same batch
        with StopFlag(agree) as stop, np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            try:
                while self.progress.epoch < self.config["epochs"]:
                    code = self.train_one_epoch(stop, graphed)
                    if code is not None:
                        return code
            except KeyboardInterrupt:
                return self.interrupted(stop)
        return self.finish()

    def train_one_epoch(self, stop, graphed):
        """Train and evaluate the current epoch, record it and save a checkpoint; an exit code if it diverged."""
        config, epoch, epochs = self.config, self.progress.epoch, self.config["epochs"]
        gpugrad.manual_seed(epoch_seed(config["seed"], epoch))
        if self.progress.batch and self.saved and self.saved.get("rng"):  # mid-epoch resume: the generator went on
            generator(CPU).bit_generator.state = self.saved["rng"]["numpy"]
        self.train_loader.set_epoch(epoch, self.progress.batch)
        with _progress_bar(len(self.train_loader), self.progress.batch, f"epoch {epoch + 1}/{epochs}",
                           self.quiet or not sys.stderr.isatty()) as bar:
            train_loss = train_epoch(self.net, self.optimizer, self.train_loader, self.progress, bar, stop, graphed,
                                     self.par, self.mp)
        t_eval = time.perf_counter()
        test_loss, test_acc = evaluate(self.model, self.test_loader)
        # NOTE: the epoch's one read of the loss sum (train_epoch) is the check: no extra sync per batch
        if not (math.isfinite(train_loss) and math.isfinite(test_loss)):
            return self.diverged(epoch + 1, train_loss, test_loss)
        p = self.progress
        metrics = {"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss, "test_acc": test_acc,
                   "samples_per_s": p.samples / max(p.train_time, 1e-9), "train_time_s": p.train_time,
                   "eval_time_s": time.perf_counter() - t_eval}
        self.progress = Progress(epoch + 1, history=[*p.history, metrics])
        self._say(f"epoch {epoch + 1:>{len(str(epochs))}}/{epochs}  train_loss {train_loss:.4f}  "
                  f"test_loss {test_loss:.4f}  test_acc {100 * test_acc:6.2f}%  "
                  f"{metrics['samples_per_s']:,.0f} samples/s  {metrics['train_time_s']:.2f} s")
        if self.ckpt_path:
            with stop.critical(step=False):  # a second stop signal waits for the save
                self.save_checkpoint()
        stop.check()
        return None

    # -- outputs and the ways a run ends -------------------------------------------------------------------------
    def save_checkpoint(self):
        if not self.rank0:
            return
        rng = self.progress.rng or generator(CPU).bit_generator.state
        checkpoint.save(self.ckpt_path, {
            "config": self.config, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "progress": self.progress.state(), "rng": {"numpy": rng}, "scaler": self._scaler_state(),
            "device": str(self.device), "gpugrad_version": gpugrad.__version__}, "--checkpoint")
        self.saved_at = (self.progress.epoch, self.progress.batch)

    def _scaler_state(self):
        """--amp fp16's GradScaler state (torch's keys), or None: read when a float16 run is resumed."""
        mp = getattr(self, "mp", None)
        return mp.scaler.state_dict() if mp is not None and mp.scaler is not None else None

    def release(self):
        if self.lock is not None:
            self.lock.release()

    def report(self, interrupted, diverged=None):
        """--metrics-json and --plot, as far as the run got."""
        if not self.rank0:
            return
        if self.args.metrics_json:
            write_metrics(self.args.metrics_json, self.config, self.device, self.data_desc, self.progress, interrupted,
                          {"setup_s": self.t_setup, "total_s": time.perf_counter() - self.t_start}, diverged)
        if self.args.plot and self.progress.history:
            plot_history(self.progress.history, self.args.plot,
                         title=f"gpugrad train: MLP {self.sizes}, {self.config['optimizer']}")

    def _kept(self, state="good"):
        """What the checkpoint file holds now that nothing more will be saved ("" when there is none)."""
        path = self.ckpt_path
        return f"; {path} keeps the last {state} checkpoint" if path and Path(path).exists() else ""

    def diverged(self, epoch, train_loss, test_loss):
        print(f"gpugrad train: error: training diverged in epoch {epoch}: train_loss {train_loss:.4g}, test_loss "
              f"{test_loss:.4g} (the loss became NaN or infinite); stopped without saving it{self._kept()}. Try "
              f"a smaller --lr (this run's is {self.config['lr']:g}) or check the data for extreme values",
              file=sys.stderr, flush=True)
        self.report(interrupted=False, diverged={"epoch": epoch, "train_loss": train_loss, "test_loss": test_loss})
        return EXIT_DIVERGED

    def interrupted(self, stop):
        """After a Ctrl-C or SIGTERM: save what is consistent, say where the run stopped; the exit code."""
        stop.ignore()  # a further signal must not break the save below
        progress, par, what, code = self.progress, self.par, stop.what, stop.exit_code
        where = f"epoch {progress.epoch + 1}, batch {progress.batch}"
        if par and not stop.agreed:  # a second Ctrl-C: the ranks may be at different steps
            self._warn(f"{what} at once at {where}: nothing saved{self._kept('consistent')}")
            return code
        if par:
            progress.loss_sum = par.total(progress.loss_sum, self.model)
        if stop.torn:  # the step was cut half way: model and optimizer are neither before nor after it
            self._warn(f"{what} inside the optimizer step after {where}: nothing saved{self._kept('consistent')}")
        elif not _all_finite(progress.loss_sum):  # diverged mid-epoch: saving would bury the good state
            self._warn(f"{what} at {where}, but the loss had become NaN or infinite (training diverged): "
                       f"nothing saved{self._kept()}")
            self.report(interrupted=True)
            return EXIT_DIVERGED
        elif self.ckpt_path:
            if self.saved_at != (progress.epoch, progress.batch):  # else the epoch's own save holds this state
                self.save_checkpoint()
            self._warn(f"{what} at {where}: checkpoint saved to {self.ckpt_path}; continue with "
                       f"`gpugrad train --resume {self.ckpt_path}`")
        else:
            self._warn(f"{what} at {where}; nothing saved (no --checkpoint given)")
        self.report(interrupted=True)
        return code

    def finish(self):
        self.report(interrupted=False)
        history = self.progress.history
        total = time.perf_counter() - self.t_start
        train_s = sum(m["train_time_s"] for m in history)
        if history:
            last = history[-1]
            print(f"final: test_acc {100 * last['test_acc']:.2f}% train_loss {last['train_loss']:.4f} after "
                  f"{last['epoch']} epochs on {self.device} ({train_s:.2f} s training in all, {total:.2f} s wall in "
                  "this run)", flush=True)
        return 0

    def _say(self, text):
        if not self.quiet:
            print(text, flush=True)

    @staticmethod
    def _warn(text):
        print(f"\n{text}", file=sys.stderr, flush=True)


# -- pieces of a run -----------------------------------------------------------------------------------------------
def check_outputs(args):
    """Every output path, before any data is read: a file (not a directory) whose directory exists or is created
    here, and matplotlib for --plot; an existing --checkpoint only with --resume or --overwrite.  Raises OSError
    (OutputPathError), CliError or PlotUnavailable with one line."""
    for what, path in (("--checkpoint", args.checkpoint), ("--metrics-json", args.metrics_json)):
        if path:  # NOTE: a --resume file is checked once it is loaded (a finished run writes nothing)
            checkpoint.output_path(path, what)
    if args.checkpoint and not (args.resume or args.overwrite) and Path(args.checkpoint).resolve().is_file():
        raise CliError(f"--checkpoint {args.checkpoint} already exists; pass --resume {args.checkpoint} to continue "
                       "that run, or --overwrite to replace it")
    if args.plot:
        check_plot_path(args.plot)


def resolve_device(arg):
    """The device ``--device`` (else ``GPUGRAD_DEVICE``, else the best available) names; an error names its source."""
    env = os.environ.get("GPUGRAD_DEVICE")
    source = f"--device {arg}" if arg is not None else f"GPUGRAD_DEVICE={env!r} (from the environment)" if env \
        else "the default device"
    try:
        return get_backend(arg).device
    except (RuntimeError, ValueError, TypeError) as e:
        raise CliError(f"{source}: {e}") from None


def load_data(config):
    """(x_train, y_train, x_test, y_test, description) as float32 features in [0, 1] and int64 labels."""
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
    gpugrad.manual_seed(config["seed"])
    # NOTE: device="cpu", not the default device: that may be CUDA (other values) or a bad GPUGRAD_DEVICE
    model = nn.MLP([n_in, *config["hidden"], n_out], activation=config["activation"], device="cpu")
    return model.to(device)


def build_optimizer(config, params):
    name, lr, wd = config["optimizer"], config["lr"], config["weight_decay"]
    if name == "sgd":
        return optim.SGD(params, lr=lr, momentum=config["momentum"], weight_decay=wd)
    return (optim.Adam if name == "adam" else optim.AdamW)(params, lr=lr, weight_decay=wd)


def epoch_seed(seed, epoch):
    """The seed gpugrad's generators get at the start of ``epoch`` (a function of (seed, epoch) only)."""
    return int(np.random.SeedSequence((seed, epoch)).generate_state(1)[0])


def evaluate(model, loader):
    """(mean cross-entropy, accuracy) over ``loader``."""
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


def train_epoch(model, optimizer, loader, progress, bar, stop, graphed=None, par=None, mp=None):
    """Run the rest of the loader's current epoch, recording each finished step in ``progress``; returns the
    epoch's mean training loss. ``graphed`` (a GraphedStep) replays the step as a CUDA graph; ``par`` (a
    cli.data_parallel.DataParallel) trains this rank's share of each batch; ``mp`` (a cli.amp.MixedPrecision) gives
    the step's autocast, backward and optimizer step (float32 when None)."""
    mp = mp or MixedPrecision()
    model.train()
    base_time, t0 = progress.train_time, time.perf_counter()
    for xb, yb in loader:
        summed = None  # the batch's summed loss, when the loss is not its mean (a rank's share)
        if graphed is not None:
            loss = graphed.forward_backward(xb, yb)
        else:
            with mp.autocast():
                loss, summed = par.loss(model, xb, yb) if par else (F.cross_entropy(model(xb), yb), None)
            optimizer.zero_grad(set_to_none=True)
            mp.backward(loss)
        # NOTE: from the first parameter update to the last field of the progress record, a checkpoint would mix
        # two steps; a second Ctrl-C is held until the whole step is committed
        with stop.critical():
            if graphed is not None:
                graphed.update()
            else:
                mp.step(optimizer)
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


def _all_finite(loss_sum):
    """Whether a device loss sum (or None) is finite; reads it, so call only where a sync is due anyway."""
    return loss_sum is None or math.isfinite(loss_sum.item())


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
    if disable or tqdm is None:
        return _NoBar()
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, leave=False, unit="batch",
                dynamic_ncols=True)


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
    history = progress.history
    doc = {
        "gpugrad_version": gpugrad.__version__, "config": config, "device": str(device), "data": data_desc,
        "interrupted": interrupted, "diverged": diverged, "epochs": history,
        "final": ({k: history[-1][k] for k in ("epoch", "train_loss", "test_loss", "test_acc")} if history else None),
        "timings": {**timings, "train_s": sum(m["train_time_s"] for m in history),
                    "eval_s": sum(m["eval_time_s"] for m in history)},
    }
    text = json.dumps(_finite(doc), indent=2, allow_nan=False) + "\n"
    checkpoint.atomic_write(path, lambda f: f.write(text.encode()), "--metrics-json")
