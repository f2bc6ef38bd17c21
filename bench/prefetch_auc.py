#!/usr/bin/env python3
"""Prefetch's cost in model quality and its gain in speed, in one run.

Runs the README's job (configs/default.pbtxt without its periodic
evaluation: DLRM, 2 servers, 2 workers, one epoch) through the real
launcher in SSP(2) and ASP, each with training.prefetch on and off,
--repeat times, alternating, and prints per cell the mean test AUC of the
final state (min-max) and the job's mean samples/s; then, per mode,
prefetch on minus off. With read-your-own-writes prefetch (docs/design.md,
"Worker data and models") the AUC difference should be within the runs'
spread (the target: |diff| <= 0.005 on the mean of 3).

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/prefetch_auc.py [--repeat 3] [--lines 400000] [--data_dir D]
      [--modes SSP,ASP] [--bin_dir DIR]
"""
import argparse
import os
import statistics
import sys
import tempfile

from bench_util import ROOT, bazel_bin, generate_data, launch_job, training_only  # noqa: E402


def run_job(bin_dir, config_text, mode, data_dir, run_dir):
    job, _ = launch_job(bin_dir, config_text, data_dir, run_dir, ["--mode=" + mode])
    return float(job["eval_auc"]), float(job["samples_per_sec"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--lines", type=int, default=400000, help="generated when no --data_dir")
    p.add_argument("--data_dir", default="")
    p.add_argument("--modes", default="SSP,ASP")
    p.add_argument("--config", default="opt", choices=["fastbuild", "opt"])
    p.add_argument("--bin_dir", default="", help="binaries laid out like bazel-bin")
    args = p.parse_args()
    bin_dir = os.path.abspath(args.bin_dir) if args.bin_dir else bazel_bin(args.config)
    with open(os.path.join(ROOT, "configs", "default.pbtxt")) as f:
        base = training_only(f.read())
    if "prefetch: true" not in base:
        sys.exit("configs/default.pbtxt no longer says prefetch: true")
    texts = {True: base, False: base.replace("prefetch: true", "prefetch: false")}
    modes = [m for m in args.modes.split(",") if m]
    runs = {}
    with tempfile.TemporaryDirectory(prefix="prefetch_auc_") as tmp:
        data_dir = args.data_dir
        if not data_dir:
            data_dir = os.path.join(tmp, "data")
            generate_data(bin_dir, data_dir, args.lines, 50000)
        for r in range(args.repeat):
            for mode in modes:
                for prefetch in (True, False):
                    auc, sps = run_job(bin_dir, texts[prefetch], mode, data_dir,
                                       os.path.join(tmp, "run"))
                    runs.setdefault((mode, prefetch), []).append((auc, sps))
                    print("run %d %-4s prefetch %-5s AUC %.6f  %8.0f samples/s" %
                          (r + 1, mode, prefetch, auc, sps), flush=True)
    print("\n%-4s %-8s %10s %19s %12s" % ("mode", "prefetch", "mean AUC", "(min-max)",
                                          "samples/s"))
    for mode in modes:
        for prefetch in (True, False):
            aucs = [a for a, _ in runs[(mode, prefetch)]]
            sps = [s for _, s in runs[(mode, prefetch)]]
            print("%-4s %-8s %10.4f   (%.4f-%.4f) %12.0f" % (
                mode, "on" if prefetch else "off", statistics.mean(aucs), min(aucs), max(aucs),
                statistics.mean(sps)))
    for mode in modes:
        on = [a for a, _ in runs[(mode, True)]]
        off = [a for a, _ in runs[(mode, False)]]
        son = statistics.mean(s for _, s in runs[(mode, True)])
        soff = statistics.mean(s for _, s in runs[(mode, False)])
        print("%-4s prefetch on - off: AUC %+.4f, samples/s x%.2f" % (
            mode, statistics.mean(on) - statistics.mean(off), son / soff))


if __name__ == "__main__":
    main()
