#!/usr/bin/env python3
"""A long job: the default model on --lines generated lines
(default 20M, one epoch), 2 servers and 2 workers, SSP(2) with prefetch, run
by deploy/local/ps_launch.py. Every --every seconds it samples the RSS of
every process of the job (/proc), the job's total samples (ps_status --json),
and the CPU used by the job's processes and by everything else on the
machine (/proc/stat), so a slowdown can be told from other load. Prints the
samples, samples/s of the first and last quarter of the samples and their
ratio (the issue asks >= 0.9), and each process's RSS, first, largest and
last. Figures only: it passes or fails nothing.

  bazel build -c opt //worker:ps_worker //server:ps_server //scheduler:all \\
      //worker/data:ps_datagen //common:ps_config_check
  python3 bench/long_job.py [--lines 20000000] [--config opt] [--bin_dir DIR] [--dir /tmp/long_job]

The data set is generated once into DIR/data (about 4.2 GB for 20M lines).
"""
import argparse
import os
import re
import subprocess
import sys
import time

from bench_util import ROOT, bazel_bin, generate_data, training_only_default  # noqa: E402



def machine_busy():
    """Busy jiffies of the whole machine (user, nice, system, irq, softirq)."""
    f = open("/proc/stat").readline().split()[1:]
    return sum(int(f[i]) for i in (0, 1, 2, 5, 6))


def job_processes(bin_dir):
    """{label: (pid, rss MB, cpu jiffies)} of the job's processes."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink("/proc/%s/exe" % pid)
            if not exe.startswith(bin_dir) or exe.endswith("/ps_status"):
                continue  # Not the job's (ps_status is this script's probe).
            status = open("/proc/%s/status" % pid).read()
            rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
            stat = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
            cpu = int(stat[11]) + int(stat[12])
            args = open("/proc/%s/cmdline" % pid).read().split("\0")
            index = [a.split("=")[1] for a in args if a.startswith(("--index=", "--rank="))]
            out[os.path.basename(exe) + (index[0] if index else "")] = (int(pid), rss, cpu)
        except (OSError, AttributeError, IndexError):
            pass
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=20000000)
    p.add_argument("--config", default="opt", choices=["fastbuild", "opt"])
    p.add_argument("--bin_dir", default="", help="binaries laid out like bazel-bin")
    p.add_argument("--dir", default="/tmp/long_job")
    p.add_argument("--every", type=float, default=15)
    args = p.parse_args()
    bin_dir = os.path.abspath(args.bin_dir) if args.bin_dir else bazel_bin(args.config)
    data = os.path.join(args.dir, "data")
    if not os.path.exists(os.path.join(data, "best.txt")):
        print("generating %d lines into %s" % (args.lines, data), flush=True)
    generate_data(bin_dir, data, args.lines, 50000)
    config = os.path.join(args.dir, "job.pbtxt")
    subprocess.run([os.path.join(bin_dir, "common/ps_config_check"),
                    training_only_default(args.dir), "--write=" + config,
                    "--synthetic_dir=" + data, "--servers=2", "--workers=2"],
                   check=True, capture_output=True)
    log_path = os.path.join(args.dir, "launcher.log")
    log = open(log_path, "w")
    launcher = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"), "--config=" + config,
         "--data_dir=" + data, "--quiet", "--bin_dir=" + bin_dir,
         "--run_dir=" + os.path.join(args.dir, "run")], stdout=log, stderr=subprocess.STDOUT)
    tick = os.sysconf("SC_CLK_TCK")
    start = time.time()
    address = None
    samples = []  # (t, total samples, {label: rss}, job cores, other cores)
    last_busy, last_cpu, last_t = machine_busy(), {}, start
    while launcher.poll() is None:
        time.sleep(args.every)
        now = time.time()
        if address is None:
            m = re.search(r"scheduler at (127\.0\.0\.1:\d+)", open(log_path, errors="replace").read())
            address = m.group(1) if m else None
        procs = job_processes(bin_dir)
        busy = machine_busy()
        # A process first seen now counts from now on (its earlier CPU goes
        # to "others" once: only at the start or after a restart).
        job = sum(cpu - last_cpu.get(pid, cpu) for pid, _, cpu in procs.values())
        span = (now - last_t) * tick
        job_cores, other_cores = job / span, max(0.0, (busy - last_busy - job) / span)
        last_busy, last_t = busy, now
        last_cpu = {pid: cpu for pid, _, cpu in procs.values()}
        total = None
        if address:
            out = subprocess.run([os.path.join(bin_dir, "scheduler/ps_status"),
                                  "--scheduler=" + address, "--json", "--job_secret_file="
                                  + os.path.join(args.dir, "run", "job.secret")],
                                 capture_output=True, text=True, timeout=30)
            m = re.search(r'"totalSamples":\s*"?(\d+)', out.stdout)
            total = int(m.group(1)) if m else None
        if total is not None and procs:
            samples.append((now - start, total, {k: v[1] for k, v in procs.items()}, job_cores,
                            other_cores))
            print("%5.0f s %10d samples  job %.2f cores, others %.2f  RSS MB %s" % (
                now - start, total, job_cores, other_cores,
                " ".join("%s=%.0f" % kv for kv in sorted(samples[-1][2].items()))), flush=True)
    result = re.findall(r"PS_JOB_RESULT[^\r\n]*", open(log_path, errors="replace").read())
    print(result[-1] if result else "no PS_JOB_RESULT: see " + log_path)
    if len(samples) < 8:
        sys.exit("too few samples")

    def time_at(n):
        for (t0, s0, *_), (t1, s1, *_) in zip(samples, samples[1:]):
            if s0 <= n <= s1 and s1 > s0:
                return t0 + (t1 - t0) * (n - s0) / (s1 - s0)
        return None

    lo, hi = samples[0][1], samples[-1][1]
    q = (hi - lo) / 4
    first = q / (time_at(lo + q) - time_at(lo))
    last = q / (time_at(hi) - time_at(hi - q))

    def others(t0, t1):
        v = [s[4] for s in samples if t0 <= s[0] <= t1]
        return sum(v) / len(v) if v else float("nan")

    print("samples/s first quarter %.0f (others %.2f cores), last quarter %.0f (others %.2f "
          "cores), last/first %.3f" % (
              first, others(time_at(lo), time_at(lo + q)), last,
              others(time_at(hi - q), time_at(hi)), last / first))
    for label in sorted(samples[-1][2]):
        v = [s[2][label] for s in samples if label in s[2]]
        print("%-14s RSS MB first %6.0f  max %6.0f  last %6.0f" % (label, v[0], max(v), v[-1]))


if __name__ == "__main__":
    main()
