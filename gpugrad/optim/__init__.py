"""Optimizers (in-place fused updates), learning-rate schedulers and flat parameter buffers."""
from gpugrad.optim import lr_scheduler  # noqa: F401
from gpugrad.optim.adam import Adam, AdamW
from gpugrad.optim.flat import FlatParams, flatten_parameters
from gpugrad.optim.optimizer import Optimizer
from gpugrad.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler", "FlatParams", "flatten_parameters"]
