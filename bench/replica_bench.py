#!/usr/bin/env python3
"""A serving replica beside a real job (issue 34): how fast training reaches
serving, what a version costs, what Predict does, and what the replica costs
training.

The job: the default config (2 servers, 2 workers, SSP(2), DLRM on the
generated data in data/synthetic), training only, with delta checkpoints
every --every clocks (a FULL one every 9), --max_steps steps a worker,
through the real launcher (deploy/local/ps_launch.py). Rounds alternate the
order of the two settings on the same machine and load:
  without   the job alone (its checkpoints are cut all the same)
  replica   the job with one ps_replica following its checkpoint directory
            (ps_launch.py --replicas 1, polling every --poll_ms)

Prints, over the replica runs:
  - train-to-serve: from the cut (the manifest's cut_unix_micros, when the
    scheduler began the copy) to the version being served, p50/p99 over
    every version ("cut to serve" of the replica's log lines);
  - the two parts of it: cut to MANIFEST (the checkpoint's write: the
    servers' copy and files, then the MANIFEST; from each checkpoint's
    manifest) and MANIFEST to served (up to one poll, then the build);
  - per version: the bytes of the checkpoint's own files against the rows
    they hold (a delta: the rows the cut touched), from the files
    (replica_bench_client --rows);
  - Predict latency p50/p99 and QPS: after the last round, a replica alone on
    the last job's checkpoints under --predict_seconds of back-to-back calls
    of --batch lines (replica_bench_client --predict), idle machine;
  - training samples/s (the workers', PS_WORKER_RESULT) with the replica
    against without: medians and their ratio.
  - per version: how it was built (incremental: the version before plus the
    new delta; or from its whole chain), the build time and the checkpoint
    bytes read.

--compare_replica BIN runs a second replica, another build of ps_replica
(e.g. the one before a change), beside the first in every replica run,
following the same checkpoints with the same --poll_ms: the same cuts, the
same load, figures printed for each. Two replicas then share the machine
with the job (the training ratio is then that of two replicas).

  bazel build -c opt //scheduler:all //server:ps_server //worker:ps_worker \\
      //worker/data:ps_datagen //common:ps_config_check //replica:all \\
      //bench:replica_bench_client
  python3 bench/replica_bench.py [--rounds 2] [--every 20] [--max_steps 400] [--config opt]
      [--bin_dir DIR] [--poll_ms 100] [--compare_replica BIN]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_util import ROOT, bazel_bin, fields, training_only_default  # noqa: E402


def seconds(duration):
    """absl::FormatDuration text (e.g. 12.5ms, 1.2s, 800us) in seconds."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)(ms|us|ns|s|m|h)", duration):
        total += float(value) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    return total


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# replica: serving version 40 (... rows, table hash ...) from DIR, built in X [(how)] from B
# bytes (own files O); cut to serve D
VERSION_LINE = re.compile(r"replica: serving version (\d+) .*?, built in (\S+)(?: \((\S+))?.*? from "
                          r"(\d+) bytes \(own files (\d+)\); cut to serve (\S+)")


def versions(text):
    """[{version, build_s, how, read, own, cut_to_serve_s}] of a replica's log."""
    out = []
    for v, built, how, read, own, d in VERSION_LINE.findall(text):
        out.append({"version": int(v), "build_s": seconds(built),
                    "how": "incremental" if how.startswith("incremental") else "chain",
                    "read": int(read), "own": int(own), "cut_to_serve_s": seconds(d)})
    return out


def write_times(ckpt):
    """{clock: seconds from the cut to the MANIFEST} of the checkpoints in `ckpt`."""
    out = {}
    for name in os.listdir(ckpt):
        path = os.path.join(ckpt, name, "MANIFEST")
        if not name.startswith("ckpt-") or not os.path.exists(path):
            continue
        text = open(path).read()
        cut = re.search(r"cut_unix_micros: (\d+)", text)
        created = re.search(r"created_unix_micros: (\d+)", text)
        if cut and created:
            out[int(name[len("ckpt-"):])] = (int(created.group(1)) - int(cut.group(1))) / 1e6
    return out


def summary(vs):
    """One line: cut to serve p50/p99 (and its two parts: the checkpoint's
    write, cut to MANIFEST; the replica's, MANIFEST to served), builds and
    bytes read, by how."""
    if not vs:
        return "no versions served"
    lat = [v["cut_to_serve_s"] for v in vs]
    parts = ["%d versions, cut to serve p50 %.3f s p99 %.3f s max %.3f s" % (
        len(vs), quantile(lat, 0.5), quantile(lat, 0.99), max(lat))]
    split = [v for v in vs if "write_s" in v]
    if split:
        write = [v["write_s"] for v in split]
        after = [v["cut_to_serve_s"] - v["write_s"] for v in split]
        parts.append("cut to MANIFEST p50 %.3f s p99 %.3f s, MANIFEST to served p50 %.3f s p99 "
                     "%.3f s" % (quantile(write, 0.5), quantile(write, 0.99),
                                 quantile(after, 0.5), quantile(after, 0.99)))
    for how in ("incremental", "chain"):
        k = [v for v in vs if v["how"] == how]
        if k:
            parts.append("%d %s: build p50 %.3f s, read p50 %.0f KiB" % (
                len(k), how, quantile([v["build_s"] for v in k], 0.5),
                statistics.median(v["read"] for v in k) / 1024))
    return "; ".join(parts)


def run_job(args, bin_dir, data, run_dir, replica):
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    ckpt = os.path.join(run_dir, "ckpt")
    os.makedirs(ckpt)
    config = os.path.join(run_dir, "setting.pbtxt")
    subprocess.run([os.path.join(bin_dir, "common/ps_config_check"),
                    training_only_default(run_dir), "--write=" + config,
                    "--synthetic_dir=" + data, "--checkpoint_dir=" + ckpt,
                    "--max_steps=%d" % args.max_steps],
                   check=True, capture_output=True)
    text = re.sub(r"\n  keep: \d+", "", open(config).read())
    text = text.replace(
        "checkpoint {", "checkpoint {\n  every_steps: %d\n  delta: true\n  keep: 100000" %
        args.every, 1)
    open(config, "w").write(text)
    argv = [sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"), "--config=" + config,
            "--data_dir=" + data, "--bin_dir=" + bin_dir, "--run_dir=" + run_dir]
    other = None
    if replica:
        argv += ["--replicas=1", "--replica_flag=--poll_ms=%d" % args.poll_ms]
        if args.compare_replica:
            other_log = open(os.path.join(run_dir, "compare_replica.log"), "w")
            other = subprocess.Popen([args.compare_replica, "--config=" + config,
                                      "--checkpoint_dir=" + ckpt, "--poll_ms=%d" % args.poll_ms,
                                      "--listen=127.0.0.1:0"], stdout=other_log,
                                     stderr=subprocess.STDOUT)
    out = subprocess.run(argv, capture_output=True, text=True)
    text = out.stdout + out.stderr
    if other is not None:
        time.sleep(2 * args.poll_ms / 1000.0 + 5)  # Its last version (the bench, not a test).
        other.terminate()
        other.wait(timeout=60)
        other_log.close()
    job = re.search(r"PS_JOB_RESULT (.*)", text)
    workers = [fields(m) for m in re.findall(r"PS_WORKER_RESULT (.*)", text)]
    if out.returncode != 0 or not job or not workers:
        sys.exit("job failed (replica %s):\n%s" % (replica, text[-4000:]))
    res = {"train_sps": sum(float(w["samples_per_sec"]) for w in workers),
           "job_sps": float(fields(job.group(1))["samples_per_sec"]), "ckpt": ckpt,
           "config": config}
    if replica:
        written = write_times(ckpt)
        res["versions"] = versions(text)
        res["report"] = re.findall(r"replica-0: last version .*", text)
        if other is not None:
            res["compare"] = versions(open(os.path.join(run_dir, "compare_replica.log")).read())
        for v in res["versions"] + res.get("compare", []):
            if v["version"] in written:
                v["write_s"] = written[v["version"]]
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--every", type=int, default=20, help="checkpoint.every_steps (clocks)")
    p.add_argument("--max_steps", type=int, default=400, help="steps a worker")
    p.add_argument("--poll_ms", type=int, default=100, help="the replica's --poll_ms")
    p.add_argument("--batch", type=int, default=64, help="lines per Predict call")
    p.add_argument("--predict_seconds", type=float, default=10)
    p.add_argument("--config", default="opt", choices=["fastbuild", "opt"])
    p.add_argument("--compare_replica", default="",
                   help="another ps_replica binary to run beside the first (see the top)")
    p.add_argument("--bin_dir", default="",
                   help="binaries laid out like bazel-bin (default: bazel info of --config)")
    args = p.parse_args()
    bin_dir = args.bin_dir or bazel_bin(args.config)
    client = os.path.join(bin_dir, "bench/replica_bench_client")
    data = os.path.join(ROOT, "data", "synthetic")
    if not os.path.exists(os.path.join(data, "best.txt")):
        sys.exit("no generated data in %s: run ./shardps run once" % data)
    load_before = "%.2f %.2f %.2f" % os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="replica_bench_")
    results = {"without": [], "replica": []}
    for r in range(args.rounds):
        order = ["without", "replica"] if r % 2 == 0 else ["replica", "without"]
        for name in order:
            res = run_job(args, bin_dir, data, os.path.join(tmp, name), name == "replica")
            results[name].append(res)
            extra = ""
            if name == "replica":
                extra = "\n    replica: %s\n    %s" % (
                    summary(res["versions"]),
                    res["report"][0] if res["report"] else "no replica report")
                if "compare" in res:
                    extra += "\n    compare_replica: %s" % summary(res["compare"])
            print("round %d %-8s train %8.0f samples/s, job %7.0f samples/s%s" % (
                r + 1, name, res["train_sps"], res["job_sps"], extra), flush=True)

    print("\n%d rounds, %s binaries, delta checkpoints every %d clocks, replica polling every "
          "%d ms; load average before %s" % (args.rounds, args.config, args.every, args.poll_ms,
                                              load_before))
    print("train-to-serve (cut to served), replica: %s" % summary(
        [v for res in results["replica"] for v in res["versions"]]))
    if args.compare_replica:
        print("train-to-serve (cut to served), compare_replica %s: %s" % (
            args.compare_replica, summary([v for res in results["replica"]
                                           for v in res.get("compare", [])])))
    # Bytes against rows, from the last replica run's files.
    last = results["replica"][-1]
    rows = subprocess.run([client, "--rows=" + last["ckpt"]], capture_output=True, text=True)
    per = [fields(m) for m in re.findall(r"PS_CHECKPOINT_ROWS (.*)", rows.stdout)]
    for kind in ("full", "delta"):
        k = [x for x in per if x["kind"] == kind]
        if not k:
            continue
        b = [int(x["bytes"]) for x in k]
        n = [int(x["rows"]) + int(x["deleted"]) for x in k]
        print("%s checkpoints (%d): median %.0f KiB for %d rows touched (%d deleted in all), "
              "%.1f bytes a row" % (kind, len(k), statistics.median(b) / 1024,
                                    statistics.median(n), sum(int(x["deleted"]) for x in k),
                                    sum(b) / max(1, sum(n))))
    # Predict: a replica alone on the last job's checkpoints.
    lines = os.path.join(tmp, "predict.tsv")
    with open(os.path.join(data, "eval.tsv")) as f, open(lines, "w") as out:
        for i, line in enumerate(f):
            if i >= 4096:
                break
            out.write(line)
    rep = subprocess.Popen([os.path.join(bin_dir, "replica/ps_replica"),
                            "--config=" + last["config"], "--checkpoint_dir=" + last["ckpt"],
                            "--listen=127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    address = None
    deadline = time.time() + 120
    while time.time() < deadline:
        line = rep.stdout.readline()
        m = re.match(r"PS_REPLICA_LISTENING (\S+)", line)
        if m:
            address = m.group(1)
            break
        if not line and rep.poll() is not None:
            break
    if address:
        for threads in (1, 2):
            pr = subprocess.run([client, "--predict=" + address, "--lines=" + lines,
                                 "--batch=%d" % args.batch, "--threads=%d" % threads,
                                 "--seconds=%g" % args.predict_seconds],
                                capture_output=True, text=True)
            m = re.search(r"PS_REPLICA_PREDICT (.*)", pr.stdout)
            if m:
                f = fields(m.group(1))
                print("Predict, %d caller(s), %d lines a call: %s calls/s (%s lines/s), latency "
                      "p50 %s ms, p99 %s ms" % (threads, args.batch, f["qps"], f["lines_per_sec"],
                                                f["p50_ms"], f["p99_ms"]))
            else:
                print("Predict failed: " + pr.stderr[-2000:])
    else:
        print("the Predict replica did not start")
    rep.terminate()
    rep.wait(timeout=30)
    w = statistics.median(x["train_sps"] for x in results["without"])
    s = statistics.median(x["train_sps"] for x in results["replica"])
    print("training samples/s (workers, medians): without %.0f, with the replica %.0f: x%.3f" % (
        w, s, s / w))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
