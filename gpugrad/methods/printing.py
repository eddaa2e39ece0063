"""How a tensor prints, as torch prints it, and ``set_printoptions`` / ``get_printoptions`` / ``printoptions``.

One width for all elements; floats in one of three styles chosen from the finite non-zero values: whole numbers
("1., 2."), fixed ``precision`` decimals, or scientific when the largest is over 1e8, the smallest under 1e-4, or
their ratio over 1000 (``sci_mode`` forces it either way).  Rows wrap at ``linewidth``; a tensor of more than
``threshold`` elements shows ``edgeitems`` at each end of every dim with "...".  Then ``device=``, ``dtype=``
(unless the default float, int64 or bool) and ``grad_fn=`` / ``requires_grad=True``, wrapped as torch wraps them.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass

import numpy as np

from gpugrad.backend.deferred import raise_pending
from gpugrad.core.forward_state import STATE as _FORWARD
from gpugrad.dtypes import BF16, DEFAULTS, default_complex


@dataclass
class PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


OPTIONS = PrintOptions()
PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """How tensors print: ``precision`` decimals (4), summarize above ``threshold`` elements (1000) showing
    ``edgeitems`` (3) per end, wrap at ``linewidth`` (80); ``profile`` "default", "short" or "full" sets the four
    first; ``sci_mode`` True/False forces scientific notation on/off (None: chosen per tensor).  As torch's, every
    call sets sci_mode (to None unless given)."""
    if profile is not None:
        if profile not in PROFILES:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}; use 'default', 'short' or 'full'")
        OPTIONS.precision, OPTIONS.threshold, OPTIONS.edgeitems, OPTIONS.linewidth = PROFILES[profile]
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            setattr(OPTIONS, name, value)
    OPTIONS.sci_mode = sci_mode


def get_printoptions() -> dict:
    """The current options, as keyword arguments for ``set_printoptions``."""
    return asdict(OPTIONS)


@contextlib.contextmanager
def printoptions(**kwargs):
    """``with printoptions(precision=2):`` the options inside, the old ones after."""
    old = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """One style and width for a set of values (the elements shown, or a complex tensor's real or imaginary
    parts)."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = values.reshape(-1)
        if not self.floating:
            self.width = max([len(str(v)) for v in flat.tolist()], default=1)
            return
        shown = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if not shown.size:
            return
        self.int_mode = bool(np.all(shown == np.ceil(shown)))
        big, small = np.abs(shown).max(), np.abs(shown).min()
        self.sci_mode = (big / small > 1000.0 or big > 1.0e8 or small < 1.0e-4) if OPTIONS.sci_mode is None \
            else OPTIONS.sci_mode
        p = OPTIONS.precision
        widths = [len(f"{v:.{p}e}") if self.sci_mode else len(f"{v:.0f}") + 1 if self.int_mode else len(f"{v:.{p}f}")
                  for v in shown.tolist()]
        self.width = max(widths)

    def format(self, value) -> str:
        if not self.floating:
            s = str(value)
        elif self.sci_mode:
            s = f"{value:{self.width}.{OPTIONS.precision}e}"
        elif self.int_mode:
            s = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            s = f"{value:.{OPTIONS.precision}f}"
        return " " * (self.width - len(s)) + s


def _complex(real, imag, value) -> str:
    re, im = real.format(value.real), (imag.format(value.imag) + "j").lstrip()
    return re + im if im[0] in "+-" else re + "+" + im


def _summarized(a: np.ndarray, edge: int) -> np.ndarray:
    """The elements that are shown: ``edge`` at each end of every dim longer than 2 * edge."""
    for axis in range(a.ndim):
        if a.shape[axis] > 2 * edge:
            a = np.concatenate([np.take(a, range(edge), axis), np.take(a, range(a.shape[axis] - edge, a.shape[axis]),
                                                                        axis)], axis)
    return a


class _Writer:
    def __init__(self, host, summarize):
        self.summarize, self.edge = summarize, OPTIONS.edgeitems
        shown = _summarized(host, self.edge) if summarize else host
        if host.dtype.kind == "c":
            real, imag = _Formatter(shown.real), _Formatter(shown.imag)
            self.fmt, self.element = (lambda v: _complex(real, imag, v)), real.width + imag.width + 3
        else:
            f = _Formatter(shown)
            self.fmt, self.element = f.format, f.width + 2

    def _items(self, n):
        """The indices shown along a dim of n (None: the "..." in between)."""
        if self.summarize and n > 2 * self.edge:
            return list(range(self.edge)) + [None] + list(range(n - self.edge, n))
        return list(range(n))

    def vector(self, a, indent) -> str:
        if self.summarize and not self.edge:
            data = ["..."]
        else:
            data = [" ..." if i is None else self.fmt(a[i].item()) for i in self._items(len(a))]
        per_line = max(1, math.floor((OPTIONS.linewidth - indent) / self.element))
        lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"

    def write(self, a, indent) -> str:
        if a.ndim == 0:
            return self.fmt(a.item())
        if a.ndim == 1:
            return self.vector(a, indent)
        parts = ["..." if i is None else self.write(a[i], indent + 1) for i in self._items(a.shape[0])]
        return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _suffixes(out, extras, indent):
    last = len(out) - out.rfind("\n") + 1  # torch's count of the last line, kept exactly so lines break alike
    for e in extras:  # each suffix on its own line where it would pass the line width
        n = len(e) - 2 * e.count("gpugrad.")  # counted as torch's "torch.float64", so the lines break where its do
        wrap = last + n + 2 > OPTIONS.linewidth
        out, last = out + ((",\n" + " " * indent) if wrap else ", ") + e, (indent if wrap else last + 2) + n
    return out + ")"


class PrintingMethods:
    __slots__ = ()

    def __repr__(self):
        raise_pending(self._backend, "printing a tensor")
        host = self._backend.to_host(self._data)
        if host.dtype == BF16:  # its values print as float32's (NumPy's float formatting takes no bfloat16)
            host = host.astype(np.float32)
        prefix, extras = "tensor(", []
        indent = len(prefix)
        if self.device.type != "cpu":
            extras.append(f"device='{self.device}'")
        if host.size == 0:
            if host.ndim != 1:
                extras.append(f"size={tuple(host.shape)}")
            if self._data.dtype != DEFAULTS.float:
                extras.append(f"dtype={self.dtype}")
            body = "[]"
        else:
            if not OPTIONS.edgeitems:
                extras.append(f"size={tuple(host.shape)}")
            if self._data.dtype not in (DEFAULTS.float, default_complex(), np.int64, np.bool_):
                extras.append(f"dtype={self.dtype}")
            body = _Writer(host, host.size > OPTIONS.threshold).write(host, indent)
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn.name()}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        if self._fw_grad is not None and _FORWARD.level is not None:  # a dual tensor: torch prints its tangent last
            t = self._fw_grad
            extras.append(f"tangent={t.item() if not t.ndim else repr(t)}")
        return _suffixes(prefix + body, extras, indent)
