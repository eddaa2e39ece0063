"""The ``gpugrad`` command: ``gpugrad <subcommand> [options]`` (also ``python -m gpugrad``).

A subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> int``, listed in ``SUBCOMMANDS``.
Only the chosen subcommand's module is imported; one whose module is not installed is left out of the list,
so ``bench`` appears as soon as ``gpugrad/cli/bench.py`` exists.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import signal
import sys

from gpugrad import __version__, _command

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C

# name -> (module, one-line help)
SUBCOMMANDS = {
    "train": ("gpugrad.cli.train", "train an MLP classifier (default: the embedded 8x8 digits)"),
    "bench": ("gpugrad.cli.bench", "run the benchmarks"),
    "explain": ("gpugrad.cli.explain", "explain an expression's graph: values, local derivatives, gradients"),
}


def _available():
    return {name: spec for name, spec in SUBCOMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


def build_parser(chosen=None):
    """The top-level parser; only ``chosen``'s module is imported to add its options."""
    parser = argparse.ArgumentParser(prog="gpugrad", description="gpugrad: a define-by-run autograd engine on "
                                     "NumPy (CPU) and CuPy (CUDA).")
    parser.add_argument("--version", action="version", version=f"gpugrad {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in _available().items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code.  A Ctrl-C at any moment
    exits 130 with one line (while gpugrad imports, gpugrad/_command.py's guard says it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    if _command.GUARDED:  # the imports are done: a Ctrl-C is a KeyboardInterrupt again, which the command handles
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"\ngpugrad {chosen}: interrupted", file=sys.stderr, flush=True)
        code = EXIT_INTERRUPTED
    if _command.IS_COMMAND:
        # NOTE: the outcome is decided: a Ctrl-C or SIGTERM while the interpreter shuts down must not turn the exit
        # code into a death by that signal (the second Ctrl-C that arrives while a checkpoint is saved)
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
    return code
