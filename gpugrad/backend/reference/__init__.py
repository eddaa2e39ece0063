"""Array-module references for every kernel in ``kernels/*.cu`` (``xp`` is numpy or cupy; no CuPy import here):
one module per family (``elementwise``, ``reduce``, ``loss``, ``norm``, ``optim``, ``check``, as the .cu files and
the launchers in ``backend/kernels/``), over ``common`` (warnings and scalar rounding), ``erf`` and ``float16``.
This package re-exports every function, so callers use ``reference.relu_fwd`` and never a module.

Each function has the signature of its launcher in ``backend/kernels/``; the CPU backend runs these, and the
tests hold the kernels to them. They accept any layout, keep the input dtype (scalars are rounded to it first, as
the kernels do) and follow the kernels' conventions for the edge cases: NaN for out-of-range class ids, -inf
logsumexp for all -inf rows, a mask and not a NaN-propagating product in dropout.
float16 is handled once, by :func:`opmath` (``float16.py``), which wraps every reference and every launcher:
float16 arrays are computed in float32 and the results rounded back, the same on every device.
"""
from __future__ import annotations

from gpugrad.backend.reference.check import check_finite, check_index
from gpugrad.backend.reference.common import _quiet
from gpugrad.backend.reference.elementwise import (_saves_x, accumulate_, bias_act_bwd, bias_act_fwd, copy_, cos_bwd,
                                                   cos_fwd, dropout_bwd, dropout_fwd, elu_bwd, elu_fwd, erf_bwd,
                                                   erf_fwd, expm1_bwd, expm1_fwd, gelu_bwd, gelu_erf_bwd, gelu_erf_fwd,
                                                   gelu_fwd, identity_bwd, identity_fwd, leaky_relu_bwd, leaky_relu_fwd,
                                                   log1p_bwd, log1p_fwd, relu_bwd, relu_fwd, sigmoid_bwd, sigmoid_fwd,
                                                   silu_bwd, silu_fwd, sin_bwd, sin_fwd, softplus_bwd, softplus_fwd,
                                                   tanh_bwd, tanh_fwd)
from gpugrad.backend.reference.float16 import (BF16, LOW, float16_params_error, matmul, matmul_nt, opmath, opmath_all,
                                               opmath_array)
from gpugrad.backend.reference.loss import (REDUCTIONS, _xent_grad, _xent_rows, softmax_xent_bwd, softmax_xent_fwd,
                                            token_logprob_bwd, token_logprob_fwd, xent_aux)
from gpugrad.backend.reference.norm import layer_norm_bwd, layer_norm_fwd
from gpugrad.backend.reference.optim import (adagrad_multi_update_, adam_multi_update_, adam_update_,
                                             amp_unscale_multi_, amp_update_scale_, rmsprop_multi_update_, set_hyper_,
                                             sgd_multi_update_, sgd_update_)
from gpugrad.backend.reference.reduce import (log_softmax_bwd, log_softmax_fwd, logsumexp_bwd, logsumexp_fwd,
                                              softmax_bwd, softmax_fwd, sum_rows)

# NOTE: _quiet, _saves_x, _xent_rows and _xent_grad are re-exported for the ops that share them (ops/activation.py, ops/loss.py
# call R._saves_x, R._xent_rows, R._xent_grad, R._quiet).
