#!/usr/bin/env python3
"""What periodic evaluation costs training, on the README's job (default
config: 2 servers, 2 workers, SSP(2), 400k training lines, 50k eval lines).

Settings, alternated round by round (the same machine and load for each):
  final only   checkpoint.dir set, no periodic evaluation: rank 0 evaluates
               once at the end (the baseline)
  ckpt N       checkpoint.every_steps N, no periodic evaluation: what the
               cuts alone cost
  eval N       training.eval_every_steps N: a checkpoint every N clocks, each
               evaluated by a worker beside training

Per setting: the workers' training samples/s (PS_WORKER_RESULT, training
time only: what an evaluation beside training slows down), the job's
elapsed seconds and samples/s (PS_JOB_RESULT, start to end), the seconds
the cuts held the workers in all (the scheduler's "workers held X for the
copy" lines), the number of evaluations and their mean seconds
(EVALUATIONS), the final AUC; ratios against "final only" (medians).

  bazel build //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/eval_cost.py [--every 100,200] [--rounds 2] [--config fastbuild]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_util import ROOT, bazel_bin, fields, training_only_default  # noqa: E402




def seconds(duration):
    """absl::FormatDuration text (e.g. 12.5ms, 1.2s, 800us) in seconds."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)(ms|us|ns|s|m|h)", duration):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    return total


def run_job(bin_dir, data, run_dir, every, ckpt_every):
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    ckpt = os.path.join(run_dir, "ckpt")
    os.makedirs(ckpt)
    config = os.path.join(run_dir, "setting.pbtxt")
    subprocess.run([os.path.join(bin_dir, "common/ps_config_check"),
                    training_only_default(run_dir), "--write=" + config,
                    "--synthetic_dir=" + data, "--checkpoint_dir=" + ckpt,
                    "--eval_every_steps=%d" % every],
                   check=True, capture_output=True)
    if ckpt_every:
        text = open(config).read().replace("checkpoint {", "checkpoint {\n  every_steps: %d" %
                                           ckpt_every, 1)
        open(config, "w").write(text)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"),
                          "--config=" + config, "--data_dir=" + data,
                          "--bin_dir=" + bin_dir, "--run_dir=" + run_dir],
                         capture_output=True, text=True)
    text = out.stdout + out.stderr
    job = re.search(r"PS_JOB_RESULT (.*)", text)
    workers = [fields(m) for m in re.findall(r"PS_WORKER_RESULT (.*)", text)]
    if out.returncode != 0 or not job or not workers:
        sys.exit("job failed (every %s):\n%s" % (every, text[-4000:]))
    job = fields(job.group(1))
    evals = []
    path = os.path.join(ckpt, "EVALUATIONS")
    if os.path.exists(path):
        evals = [float(l.split()[5]) for l in open(path) if l.startswith("eval ")]
    holds = [seconds(h) for h in re.findall(r"workers held (\S+) for the copy", text)]
    return {
        "holds": len(holds), "hold_sec": sum(holds),
        "train_sps": sum(float(w["samples_per_sec"]) for w in workers),
        "job_sps": float(job["samples_per_sec"]),
        "elapsed": float(job["elapsed_sec"]),
        "evals": len(evals),
        "eval_sec": statistics.mean(evals) if evals else float("nan"),
        "auc": float(job["eval_auc"]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--every", default="100,200")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--config", default="fastbuild", choices=["fastbuild", "opt"])
    args = p.parse_args()
    bin_dir = bazel_bin(args.config)
    data = os.path.join(ROOT, "data", "synthetic")
    if not os.path.exists(os.path.join(data, "best.txt")):
        sys.exit("no generated data in %s: run ./shardps run once" % data)
    # (name, eval_every_steps, checkpoint.every_steps)
    settings = [("final only", 0, 0)]
    for n in args.every.split(","):
        settings += [("ckpt %s" % n, 0, int(n)), ("eval %s" % n, int(n), 0)]
    results = {name: [] for name, _, _ in settings}
    tmp = tempfile.mkdtemp(prefix="eval_cost_")
    for r in range(args.rounds):
        for name, every, ckpt_every in settings:
            res = run_job(bin_dir, data, os.path.join(tmp, "run"), every, ckpt_every)
            results[name].append(res)
            print("round %d %-10s train %8.0f samples/s, job %7.0f samples/s, %5.1f s, "
                  "%d cuts holding the workers %.3f s in all, %d evaluations of %.2f s, AUC %.6f" %
                  (r + 1, name, res["train_sps"], res["job_sps"], res["elapsed"], res["holds"],
                   res["hold_sec"], res["evals"], res["eval_sec"], res["auc"]), flush=True)
    print("\nmedians over %d rounds (%s binaries); ratios against 'final only'" %
          (args.rounds, args.config))
    base = {k: statistics.median(x[k] for x in results["final only"]) for k in ["train_sps", "elapsed"]}
    for name, _, _ in settings:
        m = {k: statistics.median(x[k] for x in results[name]) for k in results[name][0]}
        print("%-10s train %8.0f samples/s (x%.2f), elapsed %5.1f s (x%.2f), cuts held %.3f s, "
              "%d evaluations of %.2f s, AUC %.6f" %
              (name, m["train_sps"], m["train_sps"] / base["train_sps"], m["elapsed"],
               m["elapsed"] / base["elapsed"], m["hold_sec"], m["evals"], m["eval_sec"], m["auc"]))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
