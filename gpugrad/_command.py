"""Whether this process is the ``gpugrad`` command, and its Ctrl-C guard while gpugrad's modules are imported.

The console script (``gpugrad``) and ``python -m gpugrad`` both import the whole package (a second or more) before
any of the command's code runs, so a Ctrl-C then would end in a traceback.  When this process is the command, the
SIGINT handler installed here (``gpugrad/__init__.py`` imports this module first) ends it with one line and exit
130 instead; ``gpugrad.cli.main`` takes over once the command's modules are imported.  When gpugrad is imported as
a library, nothing is installed.  Standard library only: nothing of gpugrad's may run before the guard is in place.
"""
from __future__ import annotations

import os
import signal
import sys

_VALUED = {"-X", "-W", "--check-hash-based-pycs"}  # interpreter options that take the next argument


def _is_the_command():
    """``python [options] -m gpugrad ...`` (``sys.orig_argv``) or the ``gpugrad`` console script (``sys.argv[0]``)."""
    if os.path.basename(sys.argv[0] if sys.argv else "").lower() in ("gpugrad", "gpugrad.exe"):
        return True
    args = iter(getattr(sys, "orig_argv", [])[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None) == "gpugrad"
        if arg.startswith("-m"):
            return arg[2:] == "gpugrad"
        if arg in _VALUED:
            next(args, None)
        elif arg == "-c" or arg == "-" or not arg.startswith("-"):  # a command, stdin or a script: not us
            return False
    return False


def _interrupted_while_starting(signum, frame):
    sys.stderr.write("\ngpugrad: interrupted while starting; nothing was done\n")
    sys.stderr.flush()
    # NOTE: not SystemExit: raised inside an extension module's import (NumPy's), it becomes an ImportError with a
    # traceback; nothing has been done yet that an exit without clean-up could lose
    os._exit(128 + signum)


IS_COMMAND = _is_the_command()
# NOTE: a SIGINT ignored from the start (a background job) stays ignored, as Python itself leaves it
GUARDED = IS_COMMAND and signal.getsignal(signal.SIGINT) is signal.default_int_handler
if GUARDED:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
