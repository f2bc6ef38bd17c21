#!/usr/bin/env python3
"""Writes the TorchScript modules worker/model's tests load (run by a Bazel
genrule at build time; nothing here is committed as a .pt):

  the zoo's dlrm (also with interaction=bmm), dcn_v2, deepfm, wide_deep and
  mmoe for the tests' tiny job (through models/script.py, the user's
  command), and modules each of which
  a worker must refuse or treat in a particular way.

  test_modules.py --script models/script.py --out_dir DIR
"""
import argparse
import json
import os
import subprocess
import sys
from typing import List

import torch
from torch import nn

# The tests' tiny job (torchscript_model_test.cc TinySpec): 3 dense
# features; f0, f1 on table A (dim 4), f2 on table B (dim 4, mean); w0, w1
# on the wide table W (dim 1).
SPEC = {
    "num_dense": 3,
    "fields": [
        {"name": "f0", "table": "A", "dim": 4, "pooling": "SUM", "wide": False},
        {"name": "f1", "table": "A", "dim": 4, "pooling": "SUM", "wide": False},
        {"name": "f2", "table": "B", "dim": 4, "pooling": "MEAN", "wide": False},
        {"name": "w0", "table": "W", "dim": 1, "pooling": "SUM", "wide": True},
        {"name": "w1", "table": "W", "dim": 1, "pooling": "SUM", "wide": True},
    ],
    "bottom_mlp": [5, 4],
    "top_mlp": [6],
}


class Tower(nn.Module):
    """A small valid tower: Linear over [dense, every field]."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(3 + 3 * 4 + 2, 1)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(torch.cat([dense] + sparse, dim=1))


class WrongSignature(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(3, 1)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.out(dense)


class WrongShape(Tower):
    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(torch.cat([dense] + sparse, dim=1)).view(1, -1)  # [1, B]


class WrongDtype(Tower):
    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(torch.cat([dense] + sparse, dim=1)).double()


class WrongFields(nn.Module):
    """Sized for a job with another field count."""

    def __init__(self):
        super().__init__()
        self.out = nn.Linear(3 + 7 * 4, 1)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(torch.cat([dense] + sparse, dim=1))


class Frozen(Tower):
    def __init__(self):
        super().__init__()
        self.out.bias.requires_grad_(False)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.b.weight = self.a.weight
        self.out = nn.Linear(3, 1)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(self.b(self.a(dense)))


class BatchNormed(Tower):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(3)

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(torch.cat([self.norm(dense)] + sparse, dim=1))


class NoParams(nn.Module):
    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return dense.sum(dim=1)


class NotFinite(Tower):
    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        return self.out(torch.cat([dense] + sparse, dim=1)) * float("nan")


class ModeProbe(Tower):
    """Accepted: a constant buffer scales the logit, and training mode adds
    1 (eval mode does not)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([2.0]))

    def forward(self, dense: torch.Tensor, sparse: List[torch.Tensor]) -> torch.Tensor:
        logit = self.out(torch.cat([dense] + sparse, dim=1)).squeeze(1) * self.scale
        if self.training:
            logit = logit + 1.0
        return logit


SCRIPTED = {
    "tower": Tower, "wrong_signature": WrongSignature, "wrong_shape": WrongShape,
    "wrong_dtype": WrongDtype, "wrong_fields": WrongFields, "frozen": Frozen, "tied": Tied,
    "batchnorm": BatchNormed, "no_params": NoParams, "not_finite": NotFinite,
    "mode_probe": ModeProbe,
}
ZOO = ["dlrm", "dcn_v2", "deepfm", "wide_deep", "mmoe"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True, help="models/script.py")
    p.add_argument("--out_dir", required=True)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    spec = os.path.join(args.out_dir, "tiny_spec.json")
    with open(spec, "w") as f:
        json.dump(SPEC, f)
    for name, options in [(m, []) for m in ZOO] + [("dlrm", ["--set", "interaction=bmm"])]:
        out = name + ("_bmm" if options else "") + ".pt"
        subprocess.run([sys.executable, args.script, name, "--spec", spec, "--out",
                        os.path.join(args.out_dir, out)] + options, check=True,
                       stdout=subprocess.DEVNULL)
    torch.manual_seed(1)
    for name, cls in SCRIPTED.items():
        torch.jit.script(cls()).save(os.path.join(args.out_dir, name + ".pt"))
    # Saved in eval mode: the worker still trains in training mode.
    torch.jit.script(ModeProbe().eval()).save(os.path.join(args.out_dir, "mode_probe_eval.pt"))
    double = torch.jit.script(Tower().double())
    double.save(os.path.join(args.out_dir, "double_param.pt"))
    # A state dict, not a module: what torch.save writes.
    torch.save(Tower().state_dict(), os.path.join(args.out_dir, "state_dict.pt"))


if __name__ == "__main__":
    main()
