#!/usr/bin/env python3
"""The tuning matrix: what each lever a PyTorch user knows buys in shardps, on
the README's job shape (2 servers, 2 workers, SSP(2)), measured in one run.

Levers, each turned on alone against "all off", then all together:
  prefetch           training.prefetch (read-your-own-writes prefetch)
  compress 0.1       training.dense_compression { ratio: 0.1 }
  bf16 compute       training.mixed_precision: BF16 (LibTorch autocast, CPU)
  bf16 wire          --wire bf16 (rows and gradients as bf16 on the wire)

For two models: the default DLRM (top MLP [64, 32], 33k dense weights) and
the same with a top MLP of [1024, 1024] (1.45M dense weights, where dense
traffic matters). Per setting: payload bytes per worker step pushed and
pulled, dense and sparse apart (PsClient's counts: protobuf payload, without
gRPC framing), the job's samples/s, the workers' peak RSS, and the test AUC
after one epoch; ratios against "all off" of the same model and run.

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/tuning_matrix.py [--lines 200000] [--big_lines 100000] [--repeat 1]

The binaries are those of `-c opt` unless --config fastbuild.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from bench_util import ROOT, bazel_bin, fields, generate_data, training_only  # noqa: E402

# name -> (ps_config_check flags, launcher flags)
OFF = ["--prefetch=false"]
SETTINGS = [
    ("all off", OFF, []),
    ("prefetch", [], []),
    ("compress 0.1", OFF + ["--dense_compression=0.1"], []),
    ("bf16 compute", OFF + ["--mixed_precision=BF16"], []),
    ("bf16 wire", OFF, ["--wire=bf16"]),
    ("all on", ["--dense_compression=0.1", "--mixed_precision=BF16"], ["--wire=bf16"]),
]




def run_job(bin_dir, base_config, data, run_dir, check_flags, launch_flags):
    config = os.path.join(run_dir, "setting.pbtxt")
    os.makedirs(run_dir, exist_ok=True)
    subprocess.run([os.path.join(bin_dir, "common/ps_config_check"), base_config,
                    "--write=" + config, "--synthetic_dir=" + data] + check_flags,
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"),
                          "--config=" + config, "--data_dir=" + data, "--quiet",
                          "--bin_dir=" + bin_dir, "--run_dir=" + run_dir] + launch_flags,
                         capture_output=True, text=True)
    text = out.stdout + out.stderr
    job = re.search(r"PS_JOB_RESULT (.*)", text)
    workers = [fields(m) for m in re.findall(r"PS_WORKER_RESULT (.*)", text)]
    if out.returncode != 0 or not job or not workers:
        sys.exit("job failed (%s %s):\n%s" % (check_flags, launch_flags, text[-4000:]))
    job = fields(job.group(1))
    steps = sum(int(w["steps"]) for w in workers)
    per_step = lambda key: sum(int(w[key]) for w in workers) / steps
    return {
        "push_dense": per_step("push_bytes_dense"), "push_sparse": per_step("push_bytes_sparse"),
        "pull_dense": per_step("pull_bytes_dense"), "pull_sparse": per_step("pull_bytes_sparse"),
        "samples_per_sec": float(job["samples_per_sec"]),
        "rss_mb": max(float(w["peak_rss_mb"]) for w in workers),
        "auc": float(job["eval_auc"]),
    }


def median_of(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def table(title, rows):
    base = rows[0][1]
    print("\n" + title)
    print("%-13s %10s %10s %10s %10s %9s %8s %9s   %s" % (
        "setting", "push dense", "push spars", "pull dense", "pull spars", "samples/s", "RSS MiB",
        "test AUC", "ratios vs all off: push dense, samples/s, RSS; AUC diff"))
    for name, r in rows:
        print("%-13s %10.0f %10.0f %10.0f %10.0f %9.0f %8.0f %9.6f   %.3f %.2f %.2f %+.4f" % (
            name, r["push_dense"], r["push_sparse"], r["pull_dense"], r["pull_sparse"],
            r["samples_per_sec"], r["rss_mb"], r["auc"], r["push_dense"] / base["push_dense"],
            r["samples_per_sec"] / base["samples_per_sec"], r["rss_mb"] / base["rss_mb"],
            r["auc"] - base["auc"]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=200000, help="train lines, default model")
    p.add_argument("--big_lines", type=int, default=100000, help="train lines, big top MLP")
    p.add_argument("--eval_lines", type=int, default=50000)
    p.add_argument("--repeat", type=int, default=1, help="runs per setting (median)")
    p.add_argument("--config", default="opt", choices=["fastbuild", "opt"])
    p.add_argument("--only", default="", help="comma list of setting names to run")
    args = p.parse_args()
    bin_dir = bazel_bin(args.config)
    tmp = tempfile.mkdtemp(prefix="tuning_matrix.")
    default = training_only(open(os.path.join(ROOT, "configs/default.pbtxt")).read())
    big = default.replace("top_mlp: [64, 32]", "top_mlp: [1024, 1024]")
    assert big != default, "configs/default.pbtxt's top_mlp changed: update the bench"
    settings = [s for s in SETTINGS
                if not args.only or s[0] in args.only.split(",") or s[0] == "all off"]
    print("2 servers, 2 workers, SSP(2), batch 256, 1 intra-op thread, one epoch; "
          "bytes are per worker step; median of %d" % args.repeat)
    for title, text, lines in [("default DLRM, top MLP [64, 32]", default, args.lines),
                               ("DLRM with top MLP [1024, 1024]", big, args.big_lines)]:
        data = os.path.join(tmp, "data%d" % lines)
        generate_data(bin_dir, data, lines, args.eval_lines)
        base_config = os.path.join(tmp, "base%d.pbtxt" % len(title))
        with open(base_config, "w") as f:
            f.write(text)
        rows = []
        for name, check_flags, launch_flags in settings:
            runs = [run_job(bin_dir, base_config, data,
                            os.path.join(tmp, "run", name.replace(" ", "_")),
                            check_flags, launch_flags) for _ in range(args.repeat)]
            rows.append((name, median_of(runs)))
            print("  %s: %s" % (name, ", ".join("%s %.6g" % kv for kv in rows[-1][1].items())),
                  flush=True)
        table("%s, %d train lines:" % (title, lines), rows)


if __name__ == "__main__":
    main()
