"""DeepFM (Guo et al. 2017): a factorization machine over the field
embeddings and one vector projected from the dense features (its
second-order term 0.5 (|sum v|^2 - sum |v|^2)), a linear term over the dense
features, the first-order (wide) fields' sum, and a deep MLP over [dense
features, field embeddings] ending in one unit; the logit is their sum.

Options: deep (hidden sizes, default [256, 128]).
"""
from typing import List

import torch
from torch import nn

from common import FirstOrder, mlp, split_fields, stack_fields


class DeepFM(nn.Module):
    fields: List[int]

    def __init__(self, num_dense: int, deep_fields: List[int], wide: List[int], dim: int,
                 deep: List[int]):
        super().__init__()
        self.fields = deep_fields
        self.dense_vector = nn.Linear(num_dense, dim)
        self.dense_linear = nn.Linear(num_dense, 1)
        self.deep = mlp(num_dense + len(deep_fields) * dim, list(deep) + [1], relu_last=False)
        self.first_order = FirstOrder(wide)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        e = stack_fields(sparse, self.fields)                                 # [B, F, d]
        v = torch.cat([self.dense_vector(dense).unsqueeze(1), e], dim=1)      # [B, F + 1, d]
        s = v.sum(dim=1)
        fm = 0.5 * (s * s - (v * v).sum(dim=1)).sum(dim=1)
        deep = self.deep(torch.cat([dense, e.flatten(1)], dim=1)).squeeze(1)
        linear = self.dense_linear(dense).squeeze(1)
        return fm + deep + linear + self.first_order(sparse)


def build(spec, deep=(256, 128)):
    fields, wide = split_fields(spec)
    dim = spec["fields"][fields[0]]["dim"]
    return DeepFM(spec["num_dense"], fields, wide, dim, list(deep))
