"""What the zoo's models share: the job's input shape and small layers.

A model is built from the job's shape (`spec`, what `ps_model_spec` prints
for a job config):

  {"num_dense": 13,
   "fields": [{"name": "C1", "table": "categorical", "dim": 16,
               "pooling": "SUM", "wide": false}, ...],
   "bottom_mlp": [64, 16], "top_mlp": [64, 32]}

and its forward is the worker's contract (docs/models.md):

  forward(dense: Tensor[B, num_dense], sparse: List[Tensor]) -> Tensor[B]

sparse[f] being field f's pooled embedding [B, dim of its table], in the
config's field order. A field marked "wide" reads the config's
model.wide_table (dim 1): a first-order weight per id, which the models add
to the logit instead of treating as an embedding.

Importing this file declares the operator the workers provide,
torch.ops.shardps.pairwise_dots (see _declare_shardps_ops).
"""
from typing import List

import torch
from torch import nn


def _pairwise_dots_reference(x: torch.Tensor) -> torch.Tensor:
    n = x.size(1)
    upper = torch.triu_indices(n, n, 1, device=x.device)
    gram = torch.bmm(x, x.transpose(1, 2)).flatten(1)
    return gram.index_select(1, upper[0] * n + upper[1])


def _declare_shardps_ops(keep=[]):
    """Declares shardps::pairwise_dots(x [B, n, d]) -> [B, n(n-1)/2], the
    dots of the pairs i < j in row-major order, with a bmm reference, unless
    it is there already. The workers register the same operator with their
    fused kernel (worker/model/interaction_op.cc): a module scripted here
    runs that kernel there."""
    try:
        torch.ops.shardps.pairwise_dots
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("shardps", "DEF")
    lib.define("pairwise_dots(Tensor x) -> Tensor")
    lib.impl("pairwise_dots", _pairwise_dots_reference, "CompositeImplicitAutograd")
    keep.append(lib)  # The declaration lives as long as the library object.


_declare_shardps_ops()


def mlp(in_dim: int, sizes: List[int], relu_last: bool) -> nn.Sequential:
    """Linear layers in_dim -> sizes[0] -> ... with a ReLU after each one
    (after the last too if relu_last)."""
    layers: List[nn.Module] = []
    for i, out in enumerate(sizes):
        layers.append(nn.Linear(in_dim, out))
        if relu_last or i + 1 < len(sizes):
            layers.append(nn.ReLU())
        in_dim = out
    return nn.Sequential(*layers)


def split_fields(spec):
    """(deep, wide): the indices of the embedding fields and of the
    first-order (wide) fields; every deep field's dim must be the same."""
    deep = [i for i, f in enumerate(spec["fields"]) if not f["wide"]]
    wide = [i for i, f in enumerate(spec["fields"]) if f["wide"]]
    if not deep:
        raise ValueError("the job has no embedding fields (every field reads the wide table)")
    dims = sorted({spec["fields"][i]["dim"] for i in deep})
    if len(dims) != 1:
        raise ValueError("this model needs one embedding dim for every field, the job has %s"
                         % dims)
    return deep, wide


class FirstOrder(nn.Module):
    wide: List[int]

    """The sum of the wide fields' [B, 1] rows: [B] (zeros without any)."""

    def __init__(self, wide: List[int]):
        super().__init__()
        self.wide = wide

    def forward(self, sparse: List[torch.Tensor]) -> torch.Tensor:
        if len(self.wide) == 0:
            return torch.zeros_like(sparse[0][:, 0])
        # One cat and one sum: a backward of two ops, not one per field.
        return torch.cat([sparse[i] for i in self.wide], dim=1).sum(dim=1)


def stack_fields(sparse: List[torch.Tensor], fields: List[int]) -> torch.Tensor:
    """The fields' embeddings as [B, len(fields), dim]."""
    return torch.stack([sparse[i] for i in fields], dim=1)
