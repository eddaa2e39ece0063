"""Ctrl-C (SIGINT) and SIGTERM during ``gpugrad train``: stop at a batch boundary, so the checkpoint saved on the way
out is consistent.  SIGTERM is what ``kill``, ``timeout``, ``docker stop`` and Slurm send, so it is treated as a
Ctrl-C is; the run then exits with 128 + the signal's number (130, 143), the code a shell reports for a process
the signal ended."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopFlag:
    """The first stop signal asks the loop to stop at the next batch boundary (so the checkpoint is consistent);
    a second one raises KeyboardInterrupt at once, or, inside ``critical()``, as soon as the region ends.
    ``at_once`` (before training, when there is nothing to save): every stop signal raises at once.
    ``torn`` records a KeyboardInterrupt that escaped a step's critical region half done (raised by someone else:
    then the model and optimizer no longer match the progress record).  Only installed in the main thread.
    ``agree(flag) -> any rank's flag`` (--distributed) makes the stop collective: ``agreed`` then says every rank
    stopped at the same batch boundary.  ``signum``: the first stop signal (None: none came)."""

    def __init__(self, agree=None, at_once=False):
        self.signum, self.torn, self._old, self._critical, self._held = None, False, {}, False, False
        self.agree, self.agreed, self.at_once = agree, False, at_once

    @property
    def requested(self):
        return self.signum is not None

    @property
    def exit_code(self):
        """128 + the first stop signal's number; 130 (Ctrl-C) for a KeyboardInterrupt no signal of ours raised."""
        return 128 + (self.signum or signal.SIGINT)

    @property
    def what(self):
        """How the run ended, for its last line: "interrupted" (Ctrl-C) or "terminated (SIGTERM)"."""
        return "terminated (SIGTERM)" if self.signum == signal.SIGTERM else "interrupted"

    def _handle(self, signum, frame):
        first = self.signum is None
        if first:
            self.signum = signum
        if first and not self.at_once:
            if signum == signal.SIGINT:  # someone at a terminal: say what happens (SIGTERM gets the last line only)
                print("\ninterrupt: stopping after this batch (Ctrl-C again to stop at once)", file=sys.stderr,
                      flush=True)
        elif self._critical:
            self._held = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self, step=True):
        """A region a second stop signal must not cut: it is held until the region ends.  ``step``: the region is
        a training step, so an exception escaping it half done leaves the run ``torn``."""
        self._critical = True
        try:
            yield
        except BaseException:
            self.torn = self.torn or step
            raise
        finally:
            self._critical = False
        if self._held:
            raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, signal.SIG_DFL if old is None else old)  # None: a handler not set from Python

    def check(self):
        if self.requested if self.agree is None else self.agree(self.requested):
            self.agreed = True
            raise KeyboardInterrupt

    def ignore(self):
        """No stop signal breaks what follows (the save on the way out): the run ends as the first one asked."""
        for s in self._old:
            signal.signal(s, signal.SIG_IGN)
