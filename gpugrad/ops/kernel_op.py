"""Ops whose math is a kernel pair from ``kernels/``."""
from __future__ import annotations

from gpugrad.backend import kernels as K, reference as R
from gpugrad.core.op import Op


class KernelOp(Op):
    """An op written once as ``_fwd(impl, xp, *inputs)`` and ``_bwd(impl, xp, gy)``, where ``impl`` is the
    module of kernel functions for the inputs' device: the NumPy references on the CPU, the CUDA launchers on
    CUDA (same names and signatures), so the CPU backend runs exactly what the kernels are tested against.
    Both implementations take float16 the same way (``reference.opmath``: float32 math, float16 results and
    gradients, float32 statistics saved for backward), so no op handles dtypes itself."""

    def forward(self, xp, *inputs):
        return self._fwd(R, xp, *inputs)

    def forward_cuda(self, xp, *inputs):
        return self._fwd(K, xp, *inputs)

    def backward(self, xp, gy):
        return self._bwd(R, xp, gy)

    def backward_cuda(self, xp, gy):
        return self._bwd(K, xp, gy)

    def jvp(self, xp, ins, out, ts):  # on the CPU, or on Tensors (xp = core.tensor_xp): the references
        return self._jvp(R, xp, ins, out, ts)

    def jvp_cuda(self, xp, ins, out, ts):
        return self._jvp(K, xp, ins, out, ts)

    def _fwd(self, impl, xp, *inputs):
        raise NotImplementedError

    def _bwd(self, impl, xp, gy):
        raise NotImplementedError

    def _jvp(self, impl, xp, ins, out, ts):
        return Op.jvp(self, xp, ins, out, ts)
