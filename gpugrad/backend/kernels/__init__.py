"""CuPy launchers for the hand-written kernels in ``kernels/*.cu``: one module per family (``elementwise``,
``reduce``, ``loss``, ``norm``, ``optim``, ``check``, as the .cu files), over small shared ones: ``sources`` (the
kernel text and compile options), ``names`` (what is compiled and which launcher uses it), ``runtimes`` (the runtime
every launch goes through), ``validate`` (argument checks, the call counter) and ``launch`` (launch shapes).
This package re-exports every launcher and constant, so callers use ``kernels.softmax_fwd`` and never a module.

Every launcher has the signature of its NumPy/CuPy reference in ``backend/reference/`` (``name(xp, *arrays,
**params)``): the CPU backend runs the reference, the CUDA backend runs the kernel, tests compare the two.
Nothing here imports CuPy at import time: all CuPy calls go through a *runtime* (``runtime()``; default
:class:`CupyRuntime`, lazily importing CuPy), which tests swap for the CPU emulator with :func:`use_runtime`::

    with kernels.use_runtime(EmuRuntime(source_for_family=kernels.source, include_dirs=[kernel_dir()])):
        y = kernels.softmax_fwd(np, x)

Runtime protocol: ``xp``; ``raw_kernel(family, name_expr)`` -> ``k(grid, block, args, shared_mem=0)``;
``elementwise(family, in_params, out_params, operation, name)`` -> a ``cupy.ElementwiseKernel``-like callable;
``empty(shape, dtype)``, ``zeros(shape, dtype)``, ``ascontiguousarray(a)``.
Scalar kernel arguments are passed as Python ``int`` (-> ``long long``) and ``float`` (-> ``double``), the types
CuPy gives Python scalars, so every raw kernel declares its scalars as ``long long`` / ``double``.
Like the references, launchers accept any layout (in-place buffers too) and float16 and bfloat16: the launchers in
``NATIVE_LOW`` run contiguous ones in kernels instantiated for them (common.cuh gg::f16, gg::bf16, computed in
float), the others through the shared ``reference.opmath`` wrapper, which computes them in float32.
"""
from __future__ import annotations

from gpugrad.backend.kernels import elementwise, loss, norm, optim, reduce
from gpugrad.backend.kernels.check import STATUS_WORDS, check_finite, check_index
from gpugrad.backend.kernels.elementwise import accumulate_, bias_act_bwd, bias_act_fwd, copy_, dropout_bwd, dropout_fwd
from gpugrad.backend.kernels.launch import ROW_BLOCK_MAX, TEAM_CACHE, row_block, row_plan
from gpugrad.backend.kernels.loss import softmax_xent_bwd, softmax_xent_fwd, token_logprob_bwd, token_logprob_fwd
from gpugrad.backend.kernels.names import (CTYPES, ELEMENTWISE, INDEX_CTYPES, LOW_CTYPES, NAME_EXPRESSIONS,
                                           POINTWISE_OPS, RAW_KERNELS, STORAGE_CTYPES, USES, instantiations)
from gpugrad.backend.kernels.norm import layer_norm_bwd, layer_norm_fwd
from gpugrad.backend.kernels.optim import (adagrad_multi_update_, adam_multi_update_, adam_update_, amp_unscale_multi_,
                                           amp_update_scale_, rmsprop_multi_update_, set_hyper_, sgd_multi_update_,
                                           sgd_update_)
from gpugrad.backend.kernels.reduce import (log_softmax_bwd, log_softmax_fwd, logsumexp_bwd, logsumexp_fwd, softmax_bwd,
                                            softmax_fwd, sum_rows)
from gpugrad.backend.kernels.runtimes import CupyRuntime, runtime, use_runtime, warm_up
from gpugrad.backend.kernels.sources import FAMILIES, OPTIONS, inline_source, kernel_dir, source
from gpugrad.backend.kernels.validate import CALLS

# The declared pointwise ops' launchers <op>_fwd / <op>_bwd (relu_fwd, gelu_bwd, ...) are generated, one per op and
# direction, by elementwise._pointwise_launcher.
globals().update({name: getattr(elementwise, name) for name in elementwise.POINTWISE_LAUNCHERS})
# The launchers that run float16 and bfloat16 arrays in kernels of their own (the others cast them to float32).
NATIVE_LOW = frozenset(n for m in (elementwise, reduce, loss, norm, optim) for n in m.NATIVE_LOW)
