"""How a tensor prints: torch's layout (4 decimals, ``grad_fn=<...>``, ``device=``, ``dtype=`` when not default)."""
from __future__ import annotations

import numpy as np

from gpugrad.backend.deferred import raise_pending
from gpugrad.dtypes import BF16, DEFAULTS, default_complex


class PrintingMethods:
    __slots__ = ()

    def __repr__(self):
        raise_pending(self._backend, "printing a tensor")
        host = self._backend.to_host(self._data)
        if host.dtype == BF16:  # its values print as float32's (NumPy's float formatting takes no bfloat16)
            host = host.astype(np.float32)
        finite = host[np.isfinite(host)] if host.dtype.kind == "f" else host
        whole = host.dtype.kind != "f" or bool(np.all(finite == np.round(finite)))
        # torch prints 4 decimals unless every value is whole ("1., 2.")
        # NOTE: NumPy's 81 wraps rows where torch's linewidth of 80 does (8 four-decimal values a line, not 7)
        body = np.array2string(host, separator=", ", precision=4, prefix="tensor(", max_line_width=81,
                               floatmode="maxprec_equal" if whole else "fixed").replace(", ...,", ",  ...,")
        extras = []
        if self.device.type != "cpu":
            extras.append(f"device='{self.device}'")
        if self._data.dtype not in (DEFAULTS.float, default_complex(), np.int64, np.bool_):
            extras.append(f"dtype={self.dtype}")
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn.name()}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        out = "tensor(" + body
        last = len(out) - out.rfind("\n") + 1  # torch's count of the last line, kept exactly so lines break alike
        for e in extras:  # each suffix on its own line where it would pass torch's 80 columns
            wrap = last + len(e) + 2 > 80
            out, last = out + (",\n       " if wrap else ", ") + e, (7 if wrap else last + 2) + len(e)
        return out + ")"
