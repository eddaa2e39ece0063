"""``--amp bf16|fp16`` and ``--tf32`` for ``gpugrad train`` and ``gpugrad bench``: one object that a training step asks
for its autocast block, its backward and its optimizer step, so the step's code reads the same with or without them."""
from __future__ import annotations

import contextlib

import gpugrad

AMP_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def add_arguments(p):
    p.add_argument("--amp", choices=tuple(AMP_DTYPES), help="mixed precision: autocast the forward to bfloat16 or "
                   "float16 (float32 weights and gradients; fp16 scales the loss with a GradScaler that never syncs)")
    p.add_argument("--tf32", action="store_true", help="let float32 matrix products use TF32 on CUDA "
                   "(set_float32_matmul_precision('high')); no effect on the CPU")


class MixedPrecision:
    """The step's precision: ``autocast()`` around the forward, ``backward(loss)``, ``step(optimizer)``. float16 uses
    a GradScaler (its scale and skip decisions stay on the device); bfloat16 has float32's range and needs none."""

    def __init__(self, amp=None, tf32=False, device="cpu"):
        self.dtype = getattr(gpugrad, AMP_DTYPES[amp]) if amp else None
        self.device_type = gpugrad.device(device).type
        self.scaler = gpugrad.amp.GradScaler(self.device_type) if amp == "fp16" else None
        if tf32:
            gpugrad.set_float32_matmul_precision("high")

    @classmethod
    def from_args(cls, args, device):
        return cls(getattr(args, "amp", None), getattr(args, "tf32", False), device)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return gpugrad.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss):
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, optimizer):
        if self.scaler is None:
            return optimizer.step()
        out = self.scaler.step(optimizer)
        self.scaler.update()
        return out

    def describe(self):
        return f"amp {self.dtype}" + (" + GradScaler" if self.scaler else "") if self.dtype else "float32"
