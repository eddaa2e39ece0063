"""Reverse-mode autograd as torch.autograd: ``backward``, ``grad``, grad modes, custom ``Function``, ``gradcheck``,
anomaly mode, forward mode (``forward_ad``), ``functional`` and the graph viewers ``explain``/``draw``.

The machinery lives in ``gpugrad/core`` (tensor state, nodes, ``Op``, the engine); this package is its public face.
"""
from __future__ import annotations

from gpugrad.autograd import forward_ad, functional
from gpugrad.autograd.custom import Function, FunctionCtx
from gpugrad.autograd.draw import draw
from gpugrad.autograd.explain import explain
from gpugrad.autograd.gradcheck import GradcheckError, gradcheck
from gpugrad.core.anomaly import detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled, set_detect_anomaly
from gpugrad.core.backprop import backward, grad
from gpugrad.core.grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                                    set_grad_enabled)
from gpugrad.core.node import AccumulateGrad, Node
from gpugrad.core.op import Op
from gpugrad.core.trace import record

__all__ = ["backward", "grad", "Function", "FunctionCtx", "gradcheck", "GradcheckError", "no_grad", "enable_grad",
           "set_grad_enabled", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "Node", "Op",
           "AccumulateGrad", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled", "explain", "draw", "record", "forward_ad", "functional"]
