"""``gpugrad bench``: kernel bandwidth, matmul GFLOP/s, MLP training throughput and engine overhead per device.

Every figure is measured next to its reference in the same run (peak copy bandwidth, a large GEMM, a hand-written
baseline, PyTorch when installed), so the ratios hold on a shared, noisy machine even when absolute times do not.

    gpugrad bench --quick                       # all available devices, small sizes (< 30 s on 2 CPU cores)
    gpugrad bench --device cuda --json out.json --plot out.png
    gpugrad bench --quick --sections kernels,engine     # only those sections (a faster smoke run)
    gpugrad bench --modes --device cpu --plot docs/modes.png   # forward vs reverse mode Jacobians over n x m
    gpugrad bench --distributed --ranks 2       # all-reduce GB/s and data-parallel samples/s at 1 and 2 ranks

The --json file is rewritten after every finished section (kernels, matmul, MLP, engine) of every device, with
``"complete": false`` until the end, so a run cut short (a timeout's SIGINT, an error) keeps what it measured.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys

from tqdm import tqdm

from gpugrad import cuda
from gpugrad.backend import get_backend
from gpugrad.backends import set_float32_matmul_precision
from gpugrad.bench import distributed, memory, modes, report, suites
from gpugrad.bench.suites import SECTIONS
from gpugrad.bench.workloads.torch_peer import torch_for
from gpugrad.cli import amp as amp_cli
from gpugrad.cli.checkpoint import output_path
from gpugrad.cli.plot import PlotUnavailable, check_plot_path

DEVICES = ("cpu", "cuda", "all")


def _shape(text):
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS such as 1024x4096, got {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(f"rows and cols must be positive, got {text!r}")
    return rows, cols


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _sections(text):
    names = {s.strip() for s in text.split(",")} - {""}
    if not names or not names <= set(SECTIONS):
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(SECTIONS)}, got {text!r}")
    return tuple(s for s in SECTIONS if s in names)


def add_arguments(parser):
    parser.description = ("Kernel bandwidth, matmul GFLOP/s, MLP training throughput and engine overhead per device, "
                          "each next to a reference measured in the same run.")
    parser.add_argument("--device", choices=DEVICES, default="all",
                        help="where to measure (default: all: cpu, and cuda when available)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke run)")
    parser.add_argument("--sizes", type=_shape, metavar="ROWSxCOLS",
                        help="shape of the kernel inputs (default: per device, see gpugrad.bench.suites.config_for); "
                        "sizes whose arrays cannot fit in the device's memory are refused")
    parser.add_argument("--sections", type=_sections, default=SECTIONS, metavar="LIST",
                        help=f"comma-separated subset of {','.join(SECTIONS)} to run (default: all)")
    parser.add_argument("--json", metavar="PATH", help="write every figure and the environment as JSON")
    parser.add_argument("--plot", metavar="PATH.png", help="bar chart of fractions of peak (needs matplotlib)")
    parser.add_argument("--torch-threads", type=_positive_int, metavar="N",
                        help="PyTorch intra-op threads for the torch peer (default: PyTorch's own default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    amp_cli.add_arguments(parser)  # --amp: the MLP step under autocast too; --tf32
    parser.add_argument("--modes", action="store_true", help="instead: time a full Jacobian of R^n -> R^m by forward "
                        "and by reverse mode over a grid of n and m (gpugrad.bench.modes); --plot draws their ratio")
    parser.add_argument("--distributed", action="store_true", help="instead: all-reduce bandwidth (algbw, busbw) of "
                        "MPI (cpu) or NCCL (cuda) and DDP training throughput at 1 and --ranks ranks (runs mpiexec)")
    parser.add_argument("--ranks", type=_positive_int, default=2, metavar="N", help="with --distributed: ranks to "
                        "compare with one (default: 2)")


def _devices(choice):
    """([devices to run], {device: reason skipped}); a CUDA request without CUDA raises SystemExit-worthy text."""
    if choice == "cpu":
        return ["cpu"], {}
    if choice == "cuda":
        if not cuda.is_available():
            raise RuntimeError(f"--device cuda: CUDA is not available: {cuda.unavailable_reason()}")
        return ["cuda"], {}
    return (["cpu", "cuda"], {}) if cuda.is_available() else (["cpu"], {"cuda": cuda.unavailable_reason()})


def _progress(total, enabled):
    """A tick(label) callback drawing a tqdm bar on stderr (only on a terminal unless forced), and its closer."""
    if not enabled:
        return (lambda label: None), (lambda: None)
    bar = tqdm(total=total, file=sys.stderr, unit="step", leave=False, disable=None, dynamic_ncols=True)

    def tick(label):
        bar.set_postfix_str(label, refresh=False)
        bar.update(1)

    return tick, bar.close


def _check_outputs(args):
    """Fail before minutes of measuring, not after: matplotlib for --plot, and writable file paths (their
    directories are created here).  Raises PlotUnavailable or OSError with one line."""
    if args.json:
        output_path(args.json, "--json")
    if args.plot:
        check_plot_path(args.plot, "--plot")


def _check_sizes(args, devices):
    """Before anything is allocated: --sizes whose kernel inputs cannot fit in a device's memory are refused."""
    if args.sizes and "kernels" in args.sections and not (args.modes or args.distributed):
        for device in devices:
            memory.check_fits(get_backend(device), args.sizes)


def run(args) -> int:
    try:
        devices, skipped = _devices(args.device)
        _check_outputs(args)
        _check_sizes(args, devices)
    except (RuntimeError, OSError) as e:  # PlotUnavailable and memory.TooLarge are RuntimeErrors
        print(f"gpugrad bench: {e}", file=sys.stderr)
        return 2
    if args.modes:
        return modes.run_cli(args, devices)
    if args.distributed:
        return _run_distributed(args, devices[-1])
    if args.torch_threads is not None:
        th, _ = torch_for(get_backend("cpu"))
        if th is not None:
            th.set_num_threads(args.torch_threads)
    if args.tf32:
        set_float32_matmul_precision("high")
    env = report.environment()
    results = {"environment": env, "quick": bool(args.quick), "amp": args.amp, "tf32": bool(args.tf32),
               "sections": list(args.sections), "complete": False, "devices": {}, "skipped": skipped}

    def save(device=None, result=None):
        """Rewrite --json (with ``device``'s figures so far: run_device calls it before and after each section)."""
        if device:
            results["devices"][device] = result
        if args.json:  # NOTE: a failure here is not fatal: the final write below retries and reports it
            with contextlib.suppress(OSError):
                report.write_json(results, args.json)

    save()  # the environment at once: a run cut short in its first section still says where it ran
    try:
        for device in devices:
            config = dataclasses.replace(suites.config_for(device, quick=args.quick, shape=args.sizes), amp=args.amp)
            tick, close = _progress(config.steps, not args.no_progress)
            try:
                suites.run_device(device, config, tick, args.sections, on_update=functools.partial(save, device))
            finally:
                close()
            print(report.format_device(results["devices"][device], env), flush=True)
            print(flush=True)
    except BaseException as e:  # Ctrl-C, a timeout's SIGINT or a failing section: keep what finished, say why
        results["stopped"] = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        save()
        raise
    results["complete"] = True
    for device, reason in skipped.items():
        print(f"== {device}: skipped: {reason} ==", flush=True)
    code = 0
    for path, write in ((args.json, report.write_json), (args.plot, report.plot_fractions)):
        if not path:
            continue
        try:
            write(results, path)
            print(f"wrote {path}", file=sys.stderr)
        except (OSError, PlotUnavailable) as e:  # e.g. the disk filled up while measuring
            print(f"gpugrad bench: error: writing {path}: {e}", file=sys.stderr)
            code = 1
    return code


def _run_distributed(args, device):
    """``--distributed``: the all-reduce sweep and DDP throughput on ``device`` (CUDA when available by default)."""
    env = report.environment()
    try:
        results = distributed.run(device, args.ranks, args.quick)
    except RuntimeError as e:
        print(f"gpugrad bench: {e}", file=sys.stderr)
        return 1
    print(distributed.format_results(results, env), flush=True)
    if args.json:
        report.write_json({"environment": env, "quick": bool(args.quick), "distributed": results, "complete": True},
                          args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    """``python -m gpugrad.cli.bench [options]`` (the same as ``gpugrad bench``)."""
    parser = argparse.ArgumentParser(prog="gpugrad bench")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
