"""Neural-network building blocks: ``Module``, ``Parameter``, layers, losses, ``init`` and ``functional``."""
from gpugrad.nn import functional, init, parallel  # noqa: F401
from gpugrad.nn.activation import GELU, Dropout, ReLU, Sigmoid, Tanh
from gpugrad.nn.container import MLP, Sequential
from gpugrad.nn.embedding import Embedding
from gpugrad.nn.linear import Flatten, Identity, Linear
from gpugrad.nn.loss import CrossEntropyLoss, MSELoss
from gpugrad.nn.module import Module
from gpugrad.nn.norm import LayerNorm
from gpugrad.nn.parameter import Parameter

__all__ = ["functional", "init", "Module", "Parameter", "Linear", "Identity", "Flatten", "ReLU", "GELU", "Tanh",
           "Sigmoid", "Dropout", "LayerNorm", "Embedding", "Sequential", "MLP", "CrossEntropyLoss", "MSELoss"]
