"""MMoE (Ma et al. 2018), a multi-task model: `experts` MLPs over [dense
features, field embeddings], one softmax gate per task mixing them, and one
tower per task ending in one unit; the output is [B, tasks] logits (the
first-order fields' sum added to each).

Multi-task data (several label columns) is not supported by the workers
yet: they refuse a model whose output has more than one column, naming it.
This file is here for that next step.

Options: tasks (default 2), experts (default 4), expert (hidden sizes,
default [128, 64]), tower (hidden sizes, default [32]).
"""
from typing import List

import torch
from torch import nn

from common import FirstOrder, mlp, split_fields


class MMoE(nn.Module):
    fields: List[int]

    def __init__(self, num_dense: int, deep_fields: List[int], wide: List[int], dim: int,
                 tasks: int, experts: int, expert: List[int], tower: List[int]):
        super().__init__()
        width = num_dense + len(deep_fields) * dim
        self.fields = deep_fields
        self.experts = nn.ModuleList([mlp(width, expert, relu_last=True)
                                      for _ in range(experts)])
        self.gates = nn.ModuleList([nn.Linear(width, experts) for _ in range(tasks)])
        self.towers = nn.ModuleList([mlp(expert[-1], list(tower) + [1], relu_last=False)
                                     for _ in range(tasks)])
        self.first_order = FirstOrder(wide)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        x = torch.cat([dense] + [sparse[i] for i in self.fields], dim=1)
        hs: List[torch.Tensor] = []
        for e in self.experts:
            hs.append(e(x))
        h = torch.stack(hs, dim=1)                                            # [B, E, H]
        first = self.first_order(sparse)
        outs: List[torch.Tensor] = []
        for gate, tower in zip(self.gates, self.towers):
            w = torch.softmax(gate(x), dim=1).unsqueeze(2)                    # [B, E, 1]
            outs.append(tower((w * h).sum(dim=1)).squeeze(1) + first)
        return torch.stack(outs, dim=1)


def build(spec, tasks=2, experts=4, expert=(128, 64), tower=(32,)):
    fields, wide = split_fields(spec)
    dim = spec["fields"][fields[0]]["dim"]
    return MMoE(spec["num_dense"], fields, wide, dim, int(tasks), int(experts), list(expert),
                list(tower))
