"""DLRM (Naumov et al. 2019), the same network as the built-in one
(worker/model/dlrm.h): a bottom MLP over the dense features whose last size
is the embedding dim, the pairwise dot products of [bottom output, field
embeddings] (upper triangle, row-major), a top MLP over [bottom output,
dots] ending in one unit, plus the first-order (wide) fields' sum.

The interaction is the workers' fused kernel, torch.ops.shardps.pairwise_dots
(what the built-in DLRM runs; models/common.py declares it for Python with a
bmm reference), or with interaction="bmm" plain torch (bmm of the Gram
matrix, then its upper triangle): the same values, a module that runs
anywhere, and a slower step on the CPU (docs/benchmarks.md).

Options: bottom (default: the config's model.bottom_mlp), top (default:
model.top_mlp; a final 1-wide layer follows), interaction ("fused" or
"bmm", default "fused").
"""
from typing import List

import torch
from torch import nn

from common import FirstOrder, mlp, split_fields


class DLRM(nn.Module):
    deep: List[int]

    fused: bool

    def __init__(self, num_dense: int, deep: List[int], wide: List[int], dim: int,
                 bottom: List[int], top: List[int], fused: bool):
        super().__init__()
        if not bottom or bottom[-1] != dim:
            raise ValueError("DLRM's bottom MLP %s must end at the embedding dim %d"
                             % (bottom, dim))
        self.deep = deep
        self.fused = fused
        self.bottom = mlp(num_dense, bottom, relu_last=True)
        n = 1 + len(deep)
        self.top = mlp(dim + n * (n - 1) // 2, list(top) + [1], relu_last=False)
        self.first_order = FirstOrder(wide)
        upper = torch.triu_indices(n, n, 1)
        # Where pair (i, j), i < j, lands in the flattened n x n Gram matrix.
        self.register_buffer("pairs", upper[0] * n + upper[1], persistent=False)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        t = torch.stack([x] + [sparse[i] for i in self.deep], dim=1)  # [B, n, d]
        if self.fused:
            dots = torch.ops.shardps.pairwise_dots(t)
        else:
            dots = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        logit = self.top(torch.cat([x, dots], dim=1)).squeeze(1)
        return logit + self.first_order(sparse)


def build(spec, bottom=None, top=None, interaction="fused"):
    deep, wide = split_fields(spec)
    dim = spec["fields"][deep[0]]["dim"]
    bottom = list(bottom if bottom is not None else spec["bottom_mlp"] or [64, dim])
    top = list(top if top is not None else spec["top_mlp"])
    if interaction not in ("fused", "bmm"):
        raise ValueError("interaction must be fused or bmm, not %r" % interaction)
    return DLRM(spec["num_dense"], deep, wide, dim, bottom, top, interaction == "fused")
