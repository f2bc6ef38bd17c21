#!/usr/bin/env python3
"""The default job's test AUC against an older default, on several generated
data sets and epoch counts, in one run.

For each data set (--data: LINES[:SEED] of generated training lines; 50k
evaluation lines each, generated once into --cache) and each epoch count
(--epochs), runs the README's job through the real launcher
(deploy/local/ps_launch.py, 2 servers, 2 workers, SSP(2)) with
configs/default.pbtxt as it is ("now") and as it was at git revision
--before ("before"), alternated, --repeat times. Prints per run the model
the job hands the user (the kept checkpoint's AUC when the config evaluates
periodically, otherwise the final one), the final state's AUC, the number
of evaluations and the best achievable AUC (the generator's true
probabilities); then the means over the runs (SSP(2) with prefetch is not
deterministic: one setting's runs differ by up to about 0.005). --epochs
overrides the config's; a config with early stopping may stop before.

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/defaults_auc.py --before d6fd98b [--data 200000,400000:2024,200000:99]
      [--epochs 1,3] [--repeat 3] [--bin_dir DIR]
"""
import argparse
import os
import subprocess

from bench_util import ROOT, bazel_bin, generate_data, launch_job  # noqa: E402


def data_set(cache, bin_dir, spec):
    """Generates (once) the data set `spec` = LINES[:SEED]; returns its dir."""
    lines, _, seed = spec.partition(":")
    seed = seed or "2024"
    out = os.path.join(cache, "%s_%s" % (lines, seed))
    best = generate_data(bin_dir, out, int(lines), 50000, seed=int(seed))
    return out, float(best["best_auc"])


def run_job(bin_dir, config_text, data_dir, epochs, run_dir):
    job, _ = launch_job(bin_dir, config_text, data_dir, run_dir, ["--epochs=%d" % epochs])
    final = float(job["eval_auc"])
    kept = float(job["best_auc"]) if "best_auc" in job else final
    return {"kept": kept, "final": final, "evals": int(job.get("evaluations", "1")),
            "stopped": job.get("early_stopped_at", "-"), "sec": float(job["elapsed_sec"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision of the older default")
    parser.add_argument("--data", default="200000,400000,200000:99",
                        help="comma list of LINES[:SEED] training lines to generate")
    parser.add_argument("--epochs", default="1,3", help="comma list")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (SSP varies)")
    parser.add_argument("--cache", default="/tmp/shardps_defaults_auc")
    parser.add_argument("--bin_dir", default="", help="default: Bazel's opt output directory")
    args = parser.parse_args()
    bin_dir = args.bin_dir or bazel_bin("opt")
    now = open(os.path.join(ROOT, "configs/default.pbtxt")).read()
    before = subprocess.run(["git", "show", args.before + ":configs/default.pbtxt"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    os.makedirs(args.cache, exist_ok=True)
    print("%-14s %6s %-7s %9s %9s %6s %8s %9s %6s" % (
        "data (lines)", "epochs", "config", "kept AUC", "final", "evals", "stopped", "best", "sec"),
          flush=True)
    summary = []
    for spec in args.data.split(","):
        data_dir, best = data_set(args.cache, bin_dir, spec)
        for epochs in [int(e) for e in args.epochs.split(",")]:
            kept = {"before": [], "now": []}
            for _ in range(args.repeat):  # Alternated, so load drifts hit both alike.
                for name, text in (("before", before), ("now", now)):
                    r = run_job(bin_dir, text, data_dir, epochs, os.path.join(args.cache, "run"))
                    kept[name].append(r["kept"])
                    print("%-14s %6d %-7s %9.4f %9.4f %6d %8s %9.4f %6.0f" % (
                        spec, epochs, name, r["kept"], r["final"], r["evals"], r["stopped"], best,
                        r["sec"]), flush=True)
            summary.append((spec, epochs, best, kept))
    print("\nmean kept AUC over %d runs (min-max); now - before" % args.repeat)
    for spec, epochs, best, kept in summary:
        mean = {k: sum(v) / len(v) for k, v in kept.items()}
        print("%-14s %d epoch(s): before %.4f (%.4f-%.4f)  now %.4f (%.4f-%.4f)  %+.4f  "
              "best achievable %.4f" % (spec, epochs, mean["before"], min(kept["before"]),
                                        max(kept["before"]), mean["now"], min(kept["now"]),
                                        max(kept["now"]), mean["now"] - mean["before"], best))

if __name__ == "__main__":
    main()
