"""torch.return_types: the (values, indices)-style results of ``max(dim)``, ``sort``, ``topk``, ...

Each is a tuple (so ``values, indices = x.max(1)`` and ``x.max(1)[0]`` work) whose fields are also attributes, built
as torch's structseq types are: ``n_fields`` and no ``_fields``, printed as ``gpugrad.return_types.max(values=...)``.
"""
from __future__ import annotations

from operator import itemgetter

__all__ = ["aminmax", "kthvalue", "max", "median", "min", "mode", "sort", "topk", "histogram", "slogdet"]


def _structseq(name, fields=("values", "indices")):
    def __new__(cls, sequence):
        sequence = tuple(sequence)
        if len(sequence) != len(fields):
            raise TypeError(f"gpugrad.return_types.{name} takes a {len(fields)}-sequence ({len(sequence)}-sequence "
                            "given)")
        return tuple.__new__(cls, sequence)

    def __repr__(self):
        body = ",\n".join(f"{f}={v!r}" for f, v in zip(fields, self))
        return f"gpugrad.return_types.{name}(\n{body})"

    ns = {f: property(itemgetter(i), doc=f"field {i}") for i, f in enumerate(fields)}
    ns.update(__slots__=(), __new__=__new__, __repr__=__repr__, __module__=__name__, __qualname__=name,
              __reduce__=lambda self: (type(self), (tuple(self),)), n_fields=len(fields),
              n_sequence_fields=len(fields), n_unnamed_fields=0)
    return type(name, (tuple,), ns)


_NAMES = ("max", "min", "median", "mode", "sort", "topk", "kthvalue")
globals().update({n: _structseq(n) for n in _NAMES}, aminmax=_structseq("aminmax", ("min", "max")))
globals().update({n + "_out": _structseq(n + "_out") for n in _NAMES},  # the results of out= calls
                 aminmax_out=_structseq("aminmax_out", ("min", "max")))
# out= of histogram and slogdet gives their own types back (gpugrad has no separate _out types for them)
globals().update(histogram=_structseq("histogram", ("hist", "bin_edges")),
                 slogdet=_structseq("slogdet", ("sign", "logabsdet")),
                 linalg_slogdet=_structseq("linalg_slogdet", ("sign", "logabsdet")))
__all__ += [n + "_out" for n in __all__ if n not in ("histogram", "slogdet")] + ["linalg_slogdet"]
