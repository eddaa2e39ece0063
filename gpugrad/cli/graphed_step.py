"""``gpugrad train --cuda-graph``: the training step captured once as a CUDA graph and replayed per batch."""
from __future__ import annotations

from gpugrad import cuda
from gpugrad.cli.amp import MixedPrecision
from gpugrad.nn import functional as F


class GraphedStep:
    """The training step as a CUDA graph: a few eager warm-up steps (they make the gradient buffers and optimizer
    state the graph will write into), then one capture for the full batch shape, then a replay per batch with the
    batch copied into the graph's static inputs. Batches of another shape (the last, short one) run eagerly on the
    same buffers, so the graph stays valid. Gradients are zeroed in place: the graph holds their addresses."""

    WARMUP = 2

    def __init__(self, model, optimizer, mp=None):
        self.model, self.optimizer, self.graph, self.steps = model, optimizer, None, 0
        self.mp = mp or MixedPrecision()  # --amp: autocast, the scaled backward and the scaler's step, all captured

    def _eager(self, xb, yb):
        self.optimizer.zero_grad(set_to_none=False)
        with self.mp.autocast():
            loss = F.cross_entropy(self.model(xb), yb)
        self.mp.backward(loss)
        return loss

    def forward_backward(self, xb, yb):
        """The loss after forward and backward; ``update()`` then applies the optimizer step."""
        self.steps += 1
        if self.graph is None and self.steps > self.WARMUP:
            self.static = (xb.clone(), yb.clone())
            self.graph = cuda.CUDAGraph()
            with cuda.graph(self.graph):
                self.static_loss = self._eager(*self.static)
                self.mp.step(self.optimizer)
        if self.graph is not None and xb.shape == self.static[0].shape:
            self.static[0].copy_(xb)
            self.static[1].copy_(yb)
            self.replay_pending = True
            return self.static_loss
        self.replay_pending = False
        return self._eager(xb, yb)

    def update(self):
        if self.replay_pending:
            self.graph.replay()  # forward, backward and the optimizer step in one launch
        else:
            self.mp.step(self.optimizer)
