"""Loss layers: thin Modules over ``nn.functional``'s losses, with torch's constructor arguments (and the legacy
``size_average`` / ``reduce`` pair); class weights and ``pos_weight`` are buffers, as in torch."""
from __future__ import annotations

from gpugrad.nn import functional as F
from gpugrad.nn.module import Module


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        # NOTE: as torch, an unknown reduction is reported when the loss is computed, not here
        self.reduction = F._reduction(reduction, size_average, reduce, extra=("batchmean",)) \
            if size_average is not None or reduce is not None else reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross-entropy of logits (N, C) (or (C,), (N, C, d1, ...)) against class ids or class probabilities,
    with torch's class ``weight``, ``ignore_index`` and ``label_smoothing`` (F.cross_entropy)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """-weight[t] * input[t] of log-probabilities (F.nll_loss), with ``ignore_index``."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities (F.binary_cross_entropy), ``weight`` per element (broadcast)."""

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits, computed stably (F.binary_cross_entropy_with_logits), with ``pos_weight``."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


def _elementwise_loss(name, fn, params=(), doc=""):
    """A loss Module ``name(size_average=None, reduce=None, reduction='mean', *params)`` over ``fn``."""
    def __init__(self, size_average=None, reduce=None, reduction="mean", *args, **kwargs):
        _Loss.__init__(self, size_average, reduce, reduction)
        values = {**dict(params), **dict(zip([p for p, _ in params], args)), **kwargs}
        for k, v in values.items():
            setattr(self, k, v)

    def forward(self, input, target):
        return fn(input, target, reduction=self.reduction, **{p: getattr(self, p) for p, _ in params})

    return type(name, (_Loss,), {"__init__": __init__, "forward": forward, "__doc__": doc, "__module__": __name__})


MSELoss = _elementwise_loss("MSELoss", F.mse_loss, doc="(input - target)^2, reduced by mean | sum | none.")
L1Loss = _elementwise_loss("L1Loss", F.l1_loss, doc="|input - target|, reduced by mean | sum | none.")
SmoothL1Loss = _elementwise_loss("SmoothL1Loss", F.smooth_l1_loss, (("beta", 1.0),),
                                 "0.5 d^2 / beta below beta, |d| - beta / 2 above (F.smooth_l1_loss).")
KLDivLoss = _elementwise_loss("KLDivLoss", F.kl_div, (("log_target", False),),
                              "target (log target - input) for log-probabilities input (F.kl_div).")


class HuberLoss(_Loss):
    """0.5 d^2 below delta, delta (|d| - delta / 2) above (F.huber_loss)."""

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)
