"""What is being captured into a CUDA graph, and gpugrad's own refusals of what a capture cannot contain.

gpugrad checks before the device does: a host read (``.item()``, printing, ``.cpu()``), a host-to-device copy, or
state that would be made inside the capture (optimizer buffers, device-side options) is refused here, naming the op,
on the simulated device and on a GPU alike. What the device or CuPy would say instead is at best an error naming a
CuPy call, and at worst nothing: a buffer made inside a capture is recorded and reset on every replay.
"""
from __future__ import annotations

CAPTURING: list = []  # the gpugrad.cuda.graph() contexts being captured (innermost last)
REPLAYS: dict = {}  # CUDA device index -> how many graphs were replayed there (backend/deferred.py reads it)
ADVICE = ("Inside gpugrad.cuda.graph() every op must queue device work only: read values (.item(), printing, "
          ".cpu()) after replay(), copy new inputs into the static tensors with copy_() before replay(), and run a "
          "few warm-up steps before capturing so that optimizer state, gradient buffers and device-side options "
          "exist")


class CaptureError(RuntimeError):
    """``what`` cannot be captured into a CUDA graph, because ``why``."""

    def __init__(self, what, why):
        self.what, self.why = what, why
        super().__init__(f"{what} cannot be captured into a CUDA graph: {why}. {ADVICE}")


def refusal(what, why) -> CaptureError:
    return CaptureError(what, why)


def capture_error(what: str, error: Exception) -> CaptureError:
    """The error an op, backward node or optimizer step raises when ``error`` happened inside a capture."""
    if isinstance(error, CaptureError):  # a refusal from below (a host copy inside the op): keep its reason
        return error if error.what == what else CaptureError(what, f"{error.what}: {error.why}")
    return CaptureError(what, str(error))


def refuse_sync(what: str) -> None:
    """Raise if capturing: ``what`` makes the host wait for the device."""
    if CAPTURING:
        raise CaptureError(what, "it makes the host wait for the device (a sync), which a graph cannot contain")


def refuse_missing(what: str, missing: str) -> None:
    """Raise if capturing: ``what`` would make ``missing`` inside the capture (recorded, so reset on every replay)."""
    if CAPTURING:
        raise CaptureError(what, f"{missing} does not exist yet, and made inside the capture it would be reset on "
                                 "every replay; run warm-up steps first")
