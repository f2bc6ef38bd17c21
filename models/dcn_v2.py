"""DCN-v2 (Wang et al. 2021), the parallel form: x0 = [dense features,
field embeddings] (flattened); a cross network x_{l+1} = x0 * (W_l x_l +
b_l) + x_l, with W_l = U_l V_l of rank `rank` (0: full rank); beside it a
deep MLP over x0; the logit is a linear layer over [x_L, deep output], plus
the first-order (wide) fields' sum.

Options: cross_layers (default 2), rank (default 0: full), deep (hidden
sizes, default [256, 128]).
"""
from typing import List

import torch
from torch import nn

from common import FirstOrder, mlp, split_fields


class Cross(nn.Module):
    """x0 * (W x + b) + x, W of rank `rank` (0: full)."""

    def __init__(self, width: int, rank: int):
        super().__init__()
        if rank > 0:
            self.w = nn.Sequential(nn.Linear(width, rank, bias=False), nn.Linear(rank, width))
        else:
            self.w = nn.Sequential(nn.Linear(width, width))

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.w(x) + x


class DCNv2(nn.Module):
    fields: List[int]

    def __init__(self, num_dense: int, deep_fields: List[int], wide: List[int], dim: int,
                 cross_layers: int, rank: int, deep: List[int]):
        super().__init__()
        width = num_dense + len(deep_fields) * dim
        self.fields = deep_fields
        self.cross = nn.ModuleList([Cross(width, rank) for _ in range(cross_layers)])
        self.deep = mlp(width, deep, relu_last=True)
        self.head = nn.Linear(width + deep[-1], 1)
        self.first_order = FirstOrder(wide)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        x0 = torch.cat([dense] + [sparse[i] for i in self.fields], dim=1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        logit = self.head(torch.cat([x, self.deep(x0)], dim=1)).squeeze(1)
        return logit + self.first_order(sparse)


def build(spec, cross_layers=2, rank=0, deep=(256, 128)):
    fields, wide = split_fields(spec)
    dim = spec["fields"][fields[0]]["dim"]
    return DCNv2(spec["num_dense"], fields, wide, dim, int(cross_layers), int(rank), list(deep))
