#!/usr/bin/env python3
"""Scripts a zoo model into a TorchScript file sized for a job config.

  python3 models/script.py MODEL --config job.pbtxt --out model.pt
      [--set NAME=VALUE ...] [--seed N]

MODEL is a file of this folder (dlrm, dcn_v2, deepfm, wide_deep, mmoe); its
build(spec, **options) makes the module, --set passes an option (the value
is JSON: --set deep=[512,256] --set rank=64). The job's shape (dense
features, the fields' dims, model.bottom_mlp / top_mlp) comes from the
config through ps_model_spec (bazel-bin/worker/model/ps_model_spec, built
with Bazel if missing; --spec_tool to give it, --spec FILE.json to give the
shape itself). The initial weights are drawn with torch.manual_seed(--seed):
the same command writes the same parameters. Then `./shardps run --model
model.pt`, or model { kind: TORCHSCRIPT torchscript_file: "model.pt" } in
the config; docs/models.md has the contract.
"""
import argparse
import importlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

try:
    import torch
except ImportError:
    # Debian's python3-torch is for Debian's python3: a python3 earlier on
    # PATH (pyenv, a venv) may lack it.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("models/script.py: no PyTorch for %s (./shardps deps installs python3-torch)"
             % sys.executable)

sys.path.insert(0, HERE)

ZOO = ["dlrm", "dcn_v2", "deepfm", "wide_deep", "mmoe"]


def spec_tool(args):
    """The ps_model_spec binary: --spec_tool, else Bazel's (built if missing)."""
    if args.spec_tool:
        return args.spec_tool
    tool = os.path.join(ROOT, "bazel-bin", "worker", "model", "ps_model_spec")
    if not os.path.exists(tool):
        print("models/script.py: building //worker/model:ps_model_spec", file=sys.stderr)
        subprocess.run(["bazel", "build", "//worker/model:ps_model_spec"], cwd=ROOT, check=True)
    return tool


def job_spec(args):
    if args.spec:
        with open(args.spec) as f:
            return json.load(f)
    out = subprocess.run([spec_tool(args), "--config=" + args.config], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit("models/script.py: ps_model_spec refused %s:\n%s" % (args.config, out.stderr))
    return json.loads(out.stdout)


def options(pairs):
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            sys.exit("models/script.py: --set %s: want NAME=VALUE" % pair)
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


def describe(spec):
    dims = {}
    for f in spec["fields"]:
        dims[f["dim"]] = dims.get(f["dim"], 0) + 1
    return "dense [B, %d], sparse: %d fields (%s)" % (
        spec["num_dense"], len(spec["fields"]),
        ", ".join("%d x [B, %d]" % (n, d) for d, n in sorted(dims.items(), reverse=True)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", choices=ZOO)
    p.add_argument("--config", help="job config (text proto)")
    p.add_argument("--spec", help="the job's shape as ps_model_spec prints it (instead of "
                   "--config)")
    p.add_argument("--out", required=True, help="the TorchScript file to write")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="an option of the model's build() (JSON value)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights")
    p.add_argument("--spec_tool", default="", help="the ps_model_spec binary")
    args = p.parse_args()
    if bool(args.config) == bool(args.spec):
        sys.exit("models/script.py: give --config (or --spec)")
    spec = job_spec(args)
    torch.manual_seed(args.seed)
    try:
        module = importlib.import_module(args.model).build(spec, **options(args.set))
    except (TypeError, ValueError) as e:
        sys.exit("models/script.py: %s: %s" % (args.model, e))
    scripted = torch.jit.script(module)
    # A batch of the job's shape, as the worker's load check runs it.
    batch = 2
    dense = torch.rand(batch, spec["num_dense"])
    sparse = [torch.rand(batch, f["dim"]) for f in spec["fields"]]
    with torch.no_grad():
        out = scripted(dense, sparse)
    params = list(scripted.named_parameters())
    scripted.save(args.out)
    count = sum(t.numel() for _, t in params)
    print("models/script.py: wrote %s: %s, %d dense parameters in %d tensors; forward(%s) -> %s"
          % (args.out, args.model, count, len(params), describe(spec),
             "[B]" if out.dim() == 1 else "[B, %d]" % out.shape[1]))


if __name__ == "__main__":
    main()
