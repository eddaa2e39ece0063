"""Optimizers (in-place multi-tensor updates, one launch per group and device) and learning-rate schedulers."""
from gpugrad.optim import lr_scheduler  # noqa: F401
from gpugrad.optim.adam import Adam, AdamW
from gpugrad.optim.optimizer import Optimizer
from gpugrad.optim.rmsprop import Adagrad, RMSprop
from gpugrad.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
