#!/usr/bin/env python3
"""Scores job configs on every ps_datagen family at several epoch counts:
each family's gap to the best this model reaches there (over the configs
swept) and to a hashed logistic regression (bench/hashed_lr.py); with
--models, each zoo model (models/, scripted for the first config by
models/script.py and run on that config with the launcher's --model)
beside them, as a config of its own.

For each family (--families; ps_datagen --family, --lines training lines in
8 files and --eval_lines held-out lines, generated once into --cache) and
each epoch count (--epochs), runs every config (--config NAME=FILE, several;
default: configs/default.pbtxt as "default") through the real launcher
(deploy/local/ps_launch.py, the config's cluster: 2 servers, 2 workers,
SSP(2) for the default), --repeat times, interleaved (repeat r runs every
family, epoch count and config before repeat r + 1 starts, so load drifts
hit all alike). The score of a run is the test AUC of the model the job
hands the user: the kept (best evaluated) checkpoint when the config
evaluates periodically, else the final state. The hashed LR is trained once
per family (--lr_rates, the best rate per epoch count counts; its AUC after
epoch E is the baseline for E epochs; cached in --cache).

Prints each run as it ends, then per family and epoch count: every config's
mean (min-max), the best mean there ("best"), each config's gap to it and
to the hashed LR; then per config the worst case over the families (the
largest gap to the best, the smallest margin over LR), over all families
and over those not named by --held_out.

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/defaults_sweep.py [--config default=configs/default.pbtxt
      --config other=/tmp/other.pbtxt] [--families default,criteo,crosses,noisy,drift]
      [--epochs 1,3] [--repeat 3] [--lines 200000] [--eval_lines 50000]
      [--held_out noisy] [--models dcn_v2,deepfm] [--set dcn_v2:rank=64]
      [--bin_dir DIR]

(--models needs //worker/model:ps_model_spec in the -c opt build too.)
"""
import argparse
import json
import os
import re
import subprocess
import sys

from bench_util import ROOT, bazel_bin, generate_data, launch_job  # noqa: E402

FAMILIES = "default,criteo,crosses,noisy,drift"


def data_set(args, bin_dir, family):
    """Generates (once) `family`'s data set; its dir and best.txt."""
    out = os.path.join(args.cache, "%s_%d_%d" % (family, args.lines, args.eval_lines))
    best_txt = os.path.join(out, "best.txt")
    if not os.path.exists(best_txt):
        gen = os.path.join(bin_dir, "worker/data/ps_datagen")
        subprocess.run([gen, "--out_dir=" + out, "--train_lines=%d" % args.lines,
                        "--eval_lines=%d" % args.eval_lines, "--train_shards=8",
                        "--family=" + family], check=True, capture_output=True)
    return out, generate_data(bin_dir, out, args.lines, args.eval_lines)


def hashed_lr(args, data_dir, epochs):
    """{epoch: best test AUC over --lr_rates} of bench/hashed_lr.py on
    `data_dir` (cached next to the data)."""
    best = {}
    for lr in args.lr_rates.split(","):
        cache = os.path.join(data_dir, "hashed_lr_%s_%d.json" % (lr, epochs))
        if not os.path.exists(cache):
            out = subprocess.run([sys.executable, os.path.join(ROOT, "bench/hashed_lr.py"),
                                  "--data_dir=" + data_dir, "--epochs=%d" % epochs,
                                  "--lr=" + lr], capture_output=True, text=True, check=True)
            aucs = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
                r"HASHED_LR epoch=(\d+) eval_auc=([\d.]+)", out.stdout)}
            with open(cache, "w") as f:
                json.dump(aucs, f)
        with open(cache) as f:
            for epoch, auc in json.load(f).items():
                best[int(epoch)] = max(best.get(int(epoch), 0.0), auc)
    return best


def zoo_module(args, bin_dir, model, config_path):
    """Scripts zoo `model` (with its --set options) for `config_path`;
    the .pt file's path (in --cache)."""
    out = os.path.join(args.cache, "zoo-%d-%s.pt" % (os.getpid(), model))
    argv = ["/usr/bin/python3", os.path.join(ROOT, "models", "script.py"), model, "--config",
            config_path, "--spec_tool", os.path.join(bin_dir, "worker/model/ps_model_spec"),
            "--out", out]
    for option in args.set:
        name, _, value = option.partition(":")
        if name == model:
            argv += ["--set", value]
    print(subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip())
    return out


def run_job(bin_dir, config_text, data_dir, epochs, run_dir, flags=()):
    job, _ = launch_job(bin_dir, config_text, data_dir, run_dir,
                        ["--epochs=%d" % epochs] + list(flags))
    final = float(job["eval_auc"])
    if final <= 0:
        sys.exit("a job ended without an evaluated model (eval_auc %s) in %s" %
                 (job.get("eval_auc"), run_dir))
    return {"kept": float(job["best_auc"]) if "best_auc" in job else final, "final": final,
            "evals": int(job.get("evaluations", "1")), "sec": float(job["elapsed_sec"])}


def mean(v):
    return sum(v) / len(v)


def report(args, families, epochs_list, configs, lr, best_auc, kept):
    print("\nmean kept test AUC over %d run(s) (min-max); gap = best of the configs there "
          "minus this config; vs LR = this config minus the hashed LR (best of lr %s)"
          % (args.repeat, args.lr_rates))
    print("%-8s %2s %-14s %22s %8s %8s %8s %8s" % (
        "family", "ep", "config", "kept AUC (min-max)", "gap", "LR", "vs LR", "truth"))
    worst = {name: {"all": [-1.0, 1.0], "in": [-1.0, 1.0]} for name, _ in configs}
    for family in families:
        for epochs in epochs_list:
            means = {name: mean(kept[family, epochs, name]) for name, _ in configs}
            top = max(means.values())
            for name, _ in configs:
                runs = kept[family, epochs, name]
                gap, vs_lr = top - means[name], means[name] - lr[family][epochs]
                print("%-8s %2d %-14s %8.4f (%.4f-%.4f) %8.4f %8.4f %+8.4f %8.4f" % (
                    family, epochs, name, means[name], min(runs), max(runs), gap,
                    lr[family][epochs], vs_lr, best_auc[family]))
                for part in ("all", "in") if family not in args.held_out.split(",") else ("all",):
                    w = worst[name][part]
                    w[0], w[1] = max(w[0], gap), min(w[1], vs_lr)
    print("\nworst case over families (largest gap to the best, smallest margin over LR); "
          "held out: %s" % (args.held_out or "none"))
    for name, _ in configs:
        w = worst[name]
        print("%-14s all: gap %.4f, vs LR %+.4f   without held-out: gap %.4f, vs LR %+.4f" % (
            name, w["all"][0], w["all"][1], w["in"][0], w["in"][1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", action="append", default=[], help="NAME=FILE (several)")
    p.add_argument("--families", default=FAMILIES)
    p.add_argument("--epochs", default="1,3", help="comma list")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--lines", type=int, default=200000)
    p.add_argument("--eval_lines", type=int, default=50000)
    p.add_argument("--lr_rates", default="0.1,0.03", help="hashed LR learning rates")
    p.add_argument("--held_out", default="", help="families not used to choose (comma list)")
    p.add_argument("--cache", default="/tmp/shardps_defaults_sweep")
    p.add_argument("--bin_dir", default="", help="default: Bazel's opt output directory")
    p.add_argument("--models", default="", help="zoo models run beside the configs (comma list)")
    p.add_argument("--set", action="append", default=[], metavar="MODEL:NAME=VALUE",
                   help="an option of a zoo model's build() (models/script.py --set)")
    args = p.parse_args()
    bin_dir = args.bin_dir or bazel_bin("opt")
    configs, flags, paths = [], {}, []
    for spec in args.config or ["default=" + os.path.join(ROOT, "configs/default.pbtxt")]:
        name, _, path = spec.partition("=")
        with open(path) as f:
            configs.append((name, f.read()))
        paths.append(path)
    os.makedirs(args.cache, exist_ok=True)
    for model in [m for m in args.models.split(",") if m]:
        flags[model] = ["--model=" + zoo_module(args, bin_dir, model, paths[0])]
        configs.append((model, configs[0][1]))
    families = args.families.split(",")
    epochs_list = [int(e) for e in args.epochs.split(",")]
    data, best_auc, lr = {}, {}, {}
    for family in families:
        data[family], best = data_set(args, bin_dir, family)
        best_auc[family] = float(best["best_auc"])
        lr[family] = hashed_lr(args, data[family], max(epochs_list))
        print("%s: best achievable %.4f, hashed LR %s" % (family, best_auc[family], " ".join(
            "%d:%.4f" % (e, lr[family][e]) for e in sorted(lr[family]))), flush=True)
    print("%-6s %-8s %2s %-14s %9s %9s %6s %6s" % (
        "repeat", "family", "ep", "config", "kept AUC", "final", "evals", "sec"), flush=True)
    kept = {}
    for r in range(args.repeat):
        for family in families:
            for epochs in epochs_list:
                for name, text in configs:
                    # A run directory of this process's own: two sweeps
                    # sharing one would empty each other's checkpoints.
                    out = run_job(bin_dir, text, data[family], epochs,
                                  os.path.join(args.cache, "run-%d" % os.getpid()),
                                  flags.get(name, []))
                    kept.setdefault((family, epochs, name), []).append(out["kept"])
                    print("%-6d %-8s %2d %-14s %9.4f %9.4f %6d %6.0f" % (
                        r + 1, family, epochs, name, out["kept"], out["final"], out["evals"],
                        out["sec"]), flush=True)
    if args.repeat > 0:  # --repeat 0: only the data sets and the LR baselines.
        report(args, families, epochs_list, configs, lr, best_auc, kept)


if __name__ == "__main__":
    main()
