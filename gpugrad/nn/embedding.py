"""``Embedding``: a lookup table of trainable rows."""
from __future__ import annotations

from gpugrad.creation import empty
from gpugrad.nn import functional as F, init
from gpugrad.nn.module import Module
from gpugrad.nn.parameter import Parameter


class Embedding(Module):
    """y = weight[ids], weight (num_embeddings, embedding_dim) initialized N(0, 1); row ``padding_idx`` (if
    given) starts at zero and gets no gradient.

    >>> emb = nn.Embedding(10, 3)
    >>> emb(gpugrad.tensor([[1, 2], [2, 9]])).shape
    (2, 2, 3)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within num_embeddings "
                                 f"({num_embeddings})")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx] = 0

    def forward(self, ids):
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
