"""A recommendation model in the layout of DLRM (Naumov et al., 2019), written here (torchrec is not a
dependency): a bottom MLP over the dense features, one EmbeddingBag per sparse feature (a bag of ids per
sample, given as flat ids and offsets), the pairwise dot products of all the feature vectors (the lower
triangle, gathered with `tril_indices`), and a top MLP to one logit per sample.

What it brings to the zoo: embedding bags in training (their backward, with sum and mean bags), a
batched matmul of features with themselves, an index pair gather, and a concatenation of them.
"""

from __future__ import annotations

import torch
from torch import nn


class DLRM(nn.Module):
    def __init__(self, dense_features: int, table_sizes: tuple[int, ...], width: int, hidden: int):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense_features, hidden), nn.ReLU(), nn.Linear(hidden, width), nn.ReLU())
        # sums and means: the pooling modes recommendation models use
        self.bags = nn.ModuleList(nn.EmbeddingBag(n, width, mode="sum" if i % 2 == 0 else "mean")
                                  for i, n in enumerate(table_sizes))
        features = len(table_sizes) + 1
        self.top = nn.Sequential(nn.Linear(width + features * (features - 1) // 2, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        features = torch.stack([x] + [bag(i, o) for bag, i, o in zip(self.bags, ids, offsets)], dim=1)
        dots = torch.bmm(features, features.transpose(1, 2))
        rows, cols = torch.tril_indices(features.shape[1], features.shape[1], offset=-1, device=dense.device)
        return self.top(torch.cat([x, dots[:, rows, cols]], dim=1)).squeeze(1)


def sparse_inputs(batch: int, table_sizes: tuple[int, ...], per_sample: int, gen: torch.Generator, device):
    """Per table: flat ids and each sample's offset; bag sizes vary from 0 to 2 * per_sample."""
    ids, offsets = [], []
    for n in table_sizes:
        sizes = torch.randint(0, 2 * per_sample + 1, (batch,), generator=gen)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]]).to(device))
        ids.append(torch.randint(0, n, (int(sizes.sum()),), generator=gen).to(device))
    return ids, offsets
