"""Wide & Deep (Cheng et al. 2016): the first-order (wide) fields' sum and a
linear term over the dense features, plus a deep MLP over [dense features,
field embeddings] ending in one unit.

Options: deep (hidden sizes, default [256, 128]).
"""
from typing import List

import torch
from torch import nn

from common import FirstOrder, mlp, split_fields


class WideDeep(nn.Module):
    fields: List[int]

    def __init__(self, num_dense: int, deep_fields: List[int], wide: List[int], dim: int,
                 deep: List[int]):
        super().__init__()
        self.fields = deep_fields
        self.dense_linear = nn.Linear(num_dense, 1)
        self.deep = mlp(num_dense + len(deep_fields) * dim, list(deep) + [1], relu_last=False)
        self.first_order = FirstOrder(wide)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        x = torch.cat([dense] + [sparse[i] for i in self.fields], dim=1)
        logit = self.deep(x).squeeze(1) + self.dense_linear(dense).squeeze(1)
        return logit + self.first_order(sparse)


def build(spec, deep=(256, 128)):
    fields, wide = split_fields(spec)
    dim = spec["fields"][fields[0]]["dim"]
    return WideDeep(spec["num_dense"], fields, wide, dim, list(deep))
