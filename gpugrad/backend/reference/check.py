"""References of check.cu: the range check of ids and the NaN/inf check of anomaly mode."""
from __future__ import annotations

from gpugrad.backend.reference.float16 import opmath_all


# A failed range check is recorded, not raised, in `status` (int64, kernels/common.cuh STATUS_WORDS): the first
# failure's site id and the min and max of the ids it saw; an earlier failure is kept. None: no record.
def _record_range(status, site, ids, n):
    if status is None or not ids.size or int(status[0]) != 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= n:
        status[:3] = (site, lo, hi)


def check_index(xp, ids, n, status, site):
    """Record (site, min, max) in status when an id of ``ids`` (any shape) lies outside [0, n)."""
    _record_range(status, site, ids, n)


def check_finite(xp, flags, node, epoch, *arrays):
    """Record in flags[node] (int64 (nodes, 2)) whether any of ``arrays`` (None allowed) holds a NaN ([node, 0]) or
    +-inf ([node, 1]), as epoch * 2**32 + INT_MAX - the index of the first such array (the larger value is kept)."""
    row = flags[node]
    for o, a in enumerate(arrays):
        if a is not None and not xp.isfinite(a).all():  # the common case in one pass; then which kind
            for col, bad in ((0, xp.isnan(a).any()), (1, xp.isinf(a).any())):
                if bad:
                    row[col] = max(row[col], (epoch << 32) + 2**31 - 1 - o)


opmath_all(globals())  # float16 in float32 (float16.opmath), as the launchers take it
