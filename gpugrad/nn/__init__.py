"""Neural-network building blocks: ``Module``, ``Parameter``, layers, losses, ``init``, ``functional`` and ``utils``."""
from gpugrad.nn import functional, init, parallel, utils  # noqa: F401
from gpugrad.nn.activation import (ELU, GELU, Dropout, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softplus,
                                   Tanh)
from gpugrad.nn.container import MLP, ModuleDict, ModuleList, Sequential
from gpugrad.nn.embedding import Embedding
from gpugrad.nn.linear import Flatten, Identity, Linear, Unflatten
from gpugrad.nn.loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss,
                             NLLLoss, SmoothL1Loss)
from gpugrad.nn.module import Module
from gpugrad.nn.norm import BatchNorm1d, BatchNorm2d, LayerNorm
from gpugrad.nn.parameter import Parameter

__all__ = ["functional", "init", "utils", "Module", "Parameter", "Linear", "Identity", "Flatten", "Unflatten", "ReLU",
           "LeakyReLU", "ELU", "SiLU", "Softplus", "GELU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Dropout",
           "LayerNorm", "BatchNorm1d", "BatchNorm2d", "Embedding", "Sequential", "ModuleList", "ModuleDict", "MLP",
           "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
           "HuberLoss", "KLDivLoss"]
