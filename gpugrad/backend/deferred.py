"""Range checks that never make the host wait: on CUDA a kernel records the failure, the next read raises it.

An op that indexes with ids (cross-entropy targets, embedding ids, gather indices) must reject an id outside
[0, n), but checking it on the host would cost a sync per call (``int(t.max())`` waits for the device). Instead, on
CUDA, a kernel checks the ids as it goes (the cross-entropy forward) or a tiny check kernel does (embedding,
gather) and records the first failure in the device's *status words* (kernels/common.cuh: site, min id, max id).
The op carries on (NaN loss rows; CuPy wraps bad indices around, never reading out of bounds), and the host
raises the op's own error the next time it reads from that device anyway: ``Tensor.item()``, ``float()``,
``.numpy()``, ``.tolist()``, ``.cpu()``, printing, ``gpugrad.cuda.synchronize()``. That read costs one more small
copy, only when a check ran on the device since the host last looked. On the CPU the checks raise at once::

    status, site = deferred.fused_check(t, C, IndexError, "cross_entropy: ... got min {lo} and max {hi}")
    loss, lse, aux = kernels.softmax_xent_fwd(xp, x, t, "mean", status, site)  # on CUDA the kernel checks t
    loss.item()                                                           # raises the IndexError here

Messages are ``str.format`` templates over ``lo`` and ``hi`` (the ids' min and max) and ``bad`` (lo if negative,
else hi), so the CPU and CUDA errors read the same.
NOTE: a CUDA graph replays the check kernels without running this module's Python: the next read after a replay on
a device looks at its status words (graphs.py counts replays per device in ``capture.REPLAYS``).
Inside a capture the status words must already exist (a warm-up step made them), and a host read is refused.
"""
from __future__ import annotations

from gpugrad.backend import capture, cuda, kernels
from gpugrad.backend.device import Device
from gpugrad.backend.select import backend_of, get_backend
from gpugrad.backend.status import _error, _site, arm, raise_pending  # noqa: F401  (raise_pending: every host read's)


def fused_check(ids, n, error, message):
    """For a kernel that checks ``ids`` in [0, n) itself: (status words, site id) to pass it on CUDA; on the CPU
    raise ``error(message)`` now if an id is out of range, else return (None, 0)."""
    be = backend_of(ids)
    if be.name == "cpu":
        if ids.size:
            check_bounds(int(ids.min()), int(ids.max()), n, error, message)
        return None, 0
    return arm(be), _site(error, message)


def check_bounds(lo, hi, n, error, message):
    """Raise ``error(message)`` unless the ids' min ``lo`` and max ``hi`` (host ints) lie in [0, n)."""
    if lo < 0 or hi >= n:
        raise _error(error, message, lo, hi)


def check_range(ids, n, error, message):
    """Every id in [0, n), else ``error(message)``: now on the CPU; on CUDA a check kernel records it (no sync)."""
    status, site = fused_check(ids, n, error, message)
    if status is not None:
        kernels.check_index(backend_of(ids).xp, ids, n, status, site)


def check_within(values, lo, hi, error, message):
    """Every element of ``values`` in [lo, hi] (NaN is not), else ``error(message)``: now on the CPU; on CUDA the
    range-check kernel reads a 0/1 flag per element (one elementwise launch, no sync). ``message`` names no ids."""
    be = backend_of(values)
    outside = be.xp.where((values >= lo) & (values <= hi), 0, 1)
    check_range(outside, 1, error, message.replace("{", "{{").replace("}", "}}"))


def synchronize(device=None) -> None:
    """Wait for all work queued on the device, as torch.cuda.synchronize; its failed range checks raise here at
    the latest."""
    capture.refuse_sync("gpugrad.cuda.synchronize()")
    raise_pending(get_backend(Device("cuda", cuda.synchronize_device(device))))
