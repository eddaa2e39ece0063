"""Devices as torch has them: ``gpugrad.device("cuda:1")`` has ``.type == "cuda"`` and ``.index == 1``;
``gpugrad.device("cuda")`` has index None (the current CUDA device, 0). ``set_default_device`` and ``with
gpugrad.device(...)`` choose where creation functions put tensors."""
from __future__ import annotations

_TYPES = ("cpu", "cuda")


class Device:
    """A device: ``Device("cpu")``, ``Device("cuda", 1)``, ``Device("cuda:1")``, ``Device(1)`` (CUDA device 1)."""

    __slots__ = ("type", "index")

    def __new__(cls, type, index=None):  # noqa: A002 - torch's name
        if isinstance(type, Device) and index is None:
            return type
        if isinstance(type, int) and not isinstance(type, bool) and index is None:
            type, index = "cuda", type
        if not isinstance(type, str) or index is not None and (not isinstance(index, int) or isinstance(index, bool)):
            raise TypeError(f"device(): expected a string like 'cpu', 'cuda' or 'cuda:0' (and an int index), got "
                            f"{type!r}" + ("" if index is None else f", {index!r}"))
        kind, colon, number = type.strip().lower().partition(":")
        if kind not in _TYPES:
            raise RuntimeError(f"unknown device {type!r}: expected one of {', '.join(_TYPES)} device type at start of "
                               "device string ('cpu', 'cuda', 'cuda:N')")
        if colon:
            if not number.isdigit() or index is not None:
                raise RuntimeError(f"unknown device: invalid device string {type!r}" + ("" if index is None else
                                   f" (the index is given twice: pass 'cuda' and {index}, or 'cuda:{index}')"))
            index = int(number)
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self = object.__new__(cls)
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "index", index)
        return self

    def __setattr__(self, name, value):
        raise AttributeError("a device is immutable")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __format__(self, spec):
        return format(str(self), spec)

    def __eq__(self, other):  # as torch: never equal to a string ("cpu"), compare str(d) or d.type for that
        return (self.type, self.index) == (other.type, other.index) if isinstance(other, Device) else NotImplemented

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return Device, (self.type, self.index)

    def __enter__(self):  # `with gpugrad.device("cuda"):` makes it the default device inside
        _STACK.append(self)
        return self

    def __exit__(self, *exc):
        _STACK.pop()


_STACK: list = [None]  # set_default_device's choice (None: GPUGRAD_DEVICE, else CUDA if usable), then `with`s


def set_default_device(device):
    """Where creation functions (``zeros``, ``tensor``, ``rand``, ...) put tensors when given no ``device``;
    ``None`` restores gpugrad's choice (``GPUGRAD_DEVICE``, else CUDA when usable, else the CPU)."""
    _STACK[0] = None if device is None else Device(device)


CURRENT_CUDA = [0]  # the device "cuda" names: torch.cuda.set_device's (and torch.accelerator's) choice


def parse_device(spec) -> Device:
    """A device with its index: "cuda" is the current CUDA device (0 unless ``gpugrad.cuda.set_device`` chose)."""
    d = Device(spec)
    return Device("cuda", CURRENT_CUDA[0]) if d.type == "cuda" and d.index is None else Device("cpu") \
        if d.type == "cpu" else d
