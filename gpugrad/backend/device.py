"""Device names as users type them: "cpu", "cuda", "cuda:N"."""
from __future__ import annotations

from typing import NamedTuple


class Device(NamedTuple):
    type: str
    index: int | None = None

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __eq__(self, other):
        if isinstance(other, str):
            other = parse_device(other)
        return tuple.__eq__(self, other)

    __hash__ = tuple.__hash__


def parse_device(spec) -> Device:
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"device must be a string like 'cpu', 'cuda' or 'cuda:0', got {spec!r}")
    kind, _, index = spec.strip().lower().partition(":")
    if kind == "cpu" and not index:
        return Device("cpu")
    if kind == "cuda":
        if not index:
            return Device("cuda", 0)
        if index.isdigit():
            return Device("cuda", int(index))
    raise ValueError(f"unknown device {spec!r}: expected 'cpu', 'cuda' or 'cuda:N'")
