#!/usr/bin/env python3
"""Admission's effect on test AUC and on the servers' rows, in one run.

Runs the README's job (configs/default.pbtxt: DLRM, 2 servers, 2 workers;
BSP here by default so that two runs of one setting are bit-identical and
the differences are admission's alone) through the real launcher
(deploy/local/ps_launch.py) once per setting of the sparse table's
admission (proto/config.proto AdmissionConfig):

  off                  min_count 0: every key gets a row at its first push
  min_count N shared   unadmitted keys read and train the shared row
  min_count N initial  the older behaviour (but counting once per batch):
                       unadmitted keys read their own random initial value
                       and their gradients are dropped

on the generated data set (worker/data/synthetic.h: Zipf ids over
vocabularies of up to 1e6 per field; with the default 400k lines about 59%
of the distinct training ids occur once, and 2.7% of the evaluation's ids
never occur in training). Prints per setting the test AUC and logloss, the
rows the servers hold at the end, and the differences against "off".

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/admission_auc.py [--min_counts 2,3] [--mode BSP] [--max_steps N]
      [--job configs/default.pbtxt] [--bin_dir DIR]
"""
import argparse
import os
import re
import sys
import tempfile

from bench_util import ROOT, bazel_bin, fields, launch_job, training_only  # noqa: E402




def config_with_admission(base_text, min_count, unadmitted):
    """The default config with `admission` added to its SPARSE table."""
    marker = 'name: "categorical"'
    if marker not in base_text:
        sys.exit("the job config has no table named \"categorical\"")
    if min_count <= 1:
        return base_text
    admission = "admission { min_count: %d unadmitted: %s }" % (min_count, unadmitted)
    return base_text.replace(marker, marker + "\n  " + admission, 1)


def run_job(bin_dir, config_text, args, run_dir):
    flags = ["--mode=" + args.mode]
    if args.max_steps > 0:
        flags.append("--max_steps=%d" % args.max_steps)
    job, text = launch_job(bin_dir, config_text, args.data_dir, run_dir, flags)
    servers = [fields(m) for m in re.findall(r"PS_SERVER_RESULT (.*)", text)]
    if not servers:
        sys.exit("no PS_SERVER_RESULT in:\n" + text[-4000:])
    return {"auc": float(job["eval_auc"]), "logloss": float(job["eval_logloss"]),
            "rows": sum(int(s["rows"]) for s in servers),
            "sec": float(job["elapsed_sec"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min_counts", default="2,3", help="comma list of min_count > 1")
    parser.add_argument("--mode", default="BSP", choices=["BSP", "SSP", "ASP"])
    parser.add_argument("--max_steps", type=int, default=0, help="0: one epoch")
    parser.add_argument("--data_dir", default=os.path.join(ROOT, "data/synthetic"))
    parser.add_argument("--job", default=os.path.join(ROOT, "configs/default.pbtxt"),
                        help="base job config; must have a SPARSE table named \"categorical\"")
    parser.add_argument("--compilation_mode", default="opt",
                        help="bazel compilation mode of the binaries")
    parser.add_argument("--bin_dir", default="",
                        help="binaries (default: bazel-bin of --compilation_mode)")
    args = parser.parse_args()
    min_counts = [int(v) for v in args.min_counts.split(",") if v]
    if any(n <= 1 for n in min_counts):
        sys.exit("--min_counts: each must be > 1")
    bin_dir = args.bin_dir or bazel_bin(args.compilation_mode)
    with open(args.job) as f:
        base = training_only(f.read())  # AUC at the end of the epoch, not keep-best
    settings = [("off", 0, "SHARED")]
    for n in min_counts:
        settings += [("min_count %d shared" % n, n, "SHARED"),
                     ("min_count %d initial" % n, n, "INITIAL")]
    results = []
    with tempfile.TemporaryDirectory(prefix="admission_auc_") as tmp:
        for i, (name, n, unadmitted) in enumerate(settings):
            r = run_job(bin_dir, config_with_admission(base, n, unadmitted), args,
                        os.path.join(tmp, "run%d" % i))
            print("%-22s AUC %.6f  logloss %.6f  rows %8d  (%.1f s)" %
                  (name, r["auc"], r["logloss"], r["rows"], r["sec"]), flush=True)
            results.append((name, r))
    off = results[0][1]
    print("\n%-22s %10s %10s %10s" % ("vs off", "dAUC", "dlogloss", "rows"))
    for name, r in results[1:]:
        print("%-22s %+10.6f %+10.6f %9.3fx" % (name, r["auc"] - off["auc"],
                                                r["logloss"] - off["logloss"],
                                                r["rows"] / off["rows"]))


if __name__ == "__main__":
    main()
