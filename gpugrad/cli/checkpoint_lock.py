"""One run per checkpoint: ``gpugrad train`` holds an advisory lock (``fcntl.flock``) on ``<checkpoint>.lock``, beside
the checkpoint it writes, for as long as it runs, with its pid in the file; a second run on the same checkpoint is
refused with a message naming that pid.  The kernel drops the lock when its process ends, however it ends (SIGKILL
too), so a lock file left behind never blocks a later run; a run that ends normally removes it.  Where there is no
flock (Windows) or the file system refuses one, runs are not serialised."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from gpugrad.cli.train_args import CliError

SUFFIX = ".lock"


class CheckpointLock:
    """The lock of one checkpoint, held from ``acquire`` to ``release``."""

    def __init__(self, fd, path):
        self.fd, self.path = fd, path

    @classmethod
    def acquire(cls, checkpoint, what="--checkpoint"):
        """The lock on ``checkpoint`` (None where locks are unavailable, or its directory cannot be written: then
        the run's own checks say so); CliError naming the other run's pid when one holds it."""
        path = Path(os.path.realpath(checkpoint) + SUFFIX)  # two names of one checkpoint share one lock
        if fcntl is None:
            return None
        while True:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
            except OSError:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise CliError(f"{what} {checkpoint} is in use by another gpugrad train (pid {holder}, which holds "
                               f"{path}); wait for it to finish, or give this run another {what}") from None
            except OSError:  # e.g. ENOLCK: a network file system without locks
                os.close(fd)
                return None
            if _names(fd, path):
                break
            os.close(fd)  # NOTE: the holder removed the file between our open and our flock: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(fd, path)

    def release(self):
        """Remove the lock file (still holding the lock, so no other run can have taken it) and drop the lock."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            if _names(self.fd, self.path):
                os.unlink(self.path)
        os.close(self.fd)
        self.fd = None


def _names(fd, path):
    """Whether ``path`` still names the open file ``fd``."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _holder(fd, tries=20):
    """The pid the lock's holder wrote (it writes it right after locking: wait a moment for it), or "unknown"."""
    for _ in range(tries):
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.01)
    return "unknown"
