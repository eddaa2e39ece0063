"""Ctrl-C during ``gpugrad train``: stop at a batch boundary, so the checkpoint saved on the way out is consistent."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading


class SigintFlag:
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
