#!/usr/bin/env python3
"""Samples/s of PS mode (1 worker, 1 server, SSP(1), prefetch on) against
local mode, in the same run, with the default job's model and batch size and
the same thread counts. Prints both figures and the ratio (target >= 0.95).

  bazel build //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/ps_vs_local.py [--lines 200000] [--repeat 3] [--config opt] [--bin_dir DIR]

The binaries are those of the Bazel configuration named by --config
(fastbuild, Bazel's default, or opt), found with `bazel info`, so the last
build's configuration (the bazel-bin link) does not matter.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

from bench_util import ROOT, bazel_bin, generate_data, training_only_default  # noqa: E402
BIN = None  # Set by main().



def samples_per_sec(output):
    m = re.search(r"PS_WORKER_RESULT .*samples_per_sec=([\d.]+)", output)
    if not m:
        sys.exit("no PS_WORKER_RESULT in:\n" + output[-3000:])
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=200000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--config", default="fastbuild", choices=["fastbuild", "opt"],
                   help="the Bazel compilation mode whose binaries to run")
    p.add_argument("--bin_dir", default="",
                   help="run the binaries of this directory (laid out like bazel-bin, e.g. "
                        "a copy of an older build) instead of --config's")
    args = p.parse_args()
    global BIN
    BIN = os.path.abspath(args.bin_dir) if args.bin_dir else bazel_bin(args.config)
    tmp = tempfile.mkdtemp(prefix="ps_vs_local.")
    data = os.path.join(tmp, "data")
    generate_data(BIN, data, args.lines, 1000, shards=4)
    config = os.path.join(tmp, "job.pbtxt")
    subprocess.run([os.path.join(BIN, "common/ps_config_check"),
                    training_only_default(tmp), "--write=" + config,
                    "--synthetic_dir=" + data, "--servers=1", "--workers=1", "--mode=SSP",
                    "--staleness=1"], check=True, capture_output=True)
    local, ps = [], []
    for _ in range(args.repeat):
        out = subprocess.run([os.path.join(BIN, "worker/ps_worker"), "--config=" + config,
                              "--local"], capture_output=True, text=True)
        local.append(samples_per_sec(out.stdout + out.stderr))
        out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"),
                              "--config=" + config, "--data_dir=" + data, "--quiet",
                              "--bin_dir=" + BIN, "--run_dir=" + os.path.join(tmp, "run")],
                             capture_output=True, text=True)
        ps.append(samples_per_sec(out.stdout))
    lm, pm = statistics.median(local), statistics.median(ps)
    print("config: default DLRM (dim 16, bottom [64,16], top [64,32]), batch 256, "
          "1 intra-op thread, %d train lines, median of %d" % (args.lines, args.repeat))
    print("local mode        %10.0f samples/s  %s" % (lm, ["%.0f" % x for x in local]))
    print("PS mode SSP(1)    %10.0f samples/s  %s" % (pm, ["%.0f" % x for x in ps]))
    print("ratio PS/local    %10.2f" % (pm / lm))


if __name__ == "__main__":
    main()
