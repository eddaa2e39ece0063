"""Helpers of every reference: NumPy's floating-point warnings silenced where a result is still right, and
scalars rounded to an array's dtype."""
from __future__ import annotations

import contextlib


def _quiet(xp):
    """NumPy warns on exp overflow (sigmoid of very negative x is a correct 0); CuPy has no errstate."""
    errstate = getattr(xp, "errstate", None)
    return errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore") if errstate else contextlib.nullcontext()


def _s(x, value):
    """A scalar rounded to x's dtype, so arithmetic stays in x's precision whatever the NumPy promotion rules."""
    return x.dtype.type(value)
