#!/usr/bin/env python3
"""The built-in DLRM against the same network as a TorchScript module.

Runs the README's job (configs/default.pbtxt as it is: DLRM, 2 servers, 2
workers, SSP(2), evaluated every half epoch, keeping the best checkpoint)
through the real launcher, once with the built-in model and once with the
zoo's DLRM scripted for the job (models/script.py dlrm: the same network,
its initial weights drawn by PyTorch), --repeat times, alternating (so load
drifts hit both alike). Prints each run, then per model the mean test AUC
of the kept model (min-max) and the mean samples/s of the job, and the
scripted model's AUC minus the built-in's and its samples/s over the
built-in's (targets: |AUC diff| <= 0.002, ratio >= 0.9).

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check //worker/model:ps_model_spec
  python3 bench/torchscript_bench.py [--repeat 3] [--model dlrm] [--bin_dir DIR]
      [--data_dir D] [--extra_flag=--mode=BSP ...]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from bench_util import ROOT, bazel_bin, generate_data, launch_job  # noqa: E402


def script(bin_dir, model, out):
    """Scripts zoo model `model` for the default config into `out`."""
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "script.py"), model,
                    "--config", os.path.join(ROOT, "configs", "default.pbtxt"), "--spec_tool",
                    os.path.join(bin_dir, "worker", "model", "ps_model_spec"), "--out", out],
                   check=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--model", default="dlrm", help="the zoo model against the built-in DLRM")
    p.add_argument("--data_dir", default="", help="default: generated as configs/default.pbtxt "
                   "says (400k lines)")
    p.add_argument("--bin_dir", default="", help="default: Bazel's opt output directory")
    p.add_argument("--extra_flag", action="append", default=[], help="a launcher flag, both arms")
    args = p.parse_args()
    bin_dir = os.path.abspath(args.bin_dir) if args.bin_dir else bazel_bin("opt")
    with open(os.path.join(ROOT, "configs", "default.pbtxt")) as f:
        config = f.read()
    runs = {"built-in": [], args.model + ".pt": []}
    with tempfile.TemporaryDirectory(prefix="torchscript_bench_") as tmp:
        module = os.path.join(tmp, args.model + ".pt")
        script(bin_dir, args.model, module)
        data_dir = args.data_dir or os.path.join(tmp, "data")
        generate_data(bin_dir, data_dir, 400000, 50000, seed=2024)
        for r in range(args.repeat):
            for name, flags in (("built-in", []), (args.model + ".pt", ["--model=" + module])):
                job, _ = launch_job(bin_dir, config, data_dir, os.path.join(tmp, "run"),
                                    flags + args.extra_flag)
                auc = float(job["best_auc"] if "best_auc" in job else job["eval_auc"])
                sps = float(job["samples_per_sec"])
                runs[name].append((auc, sps))
                print("run %d %-10s test AUC %.6f  %8.0f samples/s" % (r + 1, name, auc, sps),
                      flush=True)
    means = {}
    for name, rs in runs.items():
        aucs, sps = [a for a, _ in rs], [s for _, s in rs]
        means[name] = (statistics.mean(aucs), statistics.mean(sps))
        print("%-10s test AUC %.6f (%.6f-%.6f)  %8.0f samples/s (%.0f-%.0f)" % (
            name, means[name][0], min(aucs), max(aucs), means[name][1], min(sps), max(sps)))
    base, scripted = means["built-in"], means[args.model + ".pt"]
    print("TORCHSCRIPT_BENCH model=%s repeat=%d auc_builtin=%.6f auc_scripted=%.6f "
          "auc_diff=%+.6f sps_builtin=%.0f sps_scripted=%.0f sps_ratio=%.3f" % (
              args.model, args.repeat, base[0], scripted[0], scripted[0] - base[0], base[1],
              scripted[1], scripted[1] / base[1]))


if __name__ == "__main__":
    sys.exit(main())
