#!/usr/bin/env python3
"""A serving replica beside a real job (issue 34): how fast training reaches
serving, what a version costs, what Predict does, and what the replica costs
training.

The job: the default config (2 servers, 2 workers, SSP(2), DLRM on the
generated data in data/synthetic), training only, --max_steps steps a
worker, through the real launcher (deploy/local/ps_launch.py). Rounds
(--rounds, 3 by default) interleave the settings, alternating their order,
on the same machine and load:
  default   the job as a user runs it without a replica: the config's own
            checkpoint settings (checkpoint { dir } alone: no periodic cut)
  replica   the job with the replica's cadence (delta checkpoints every
            --every clocks, a FULL one every 9) and one ps_replica following
            the servers' delta stream (ps_launch.py --replicas 1: each cut is
            a version, served before its files), and the probe (below)
            reading servers and replica
  replica_files (with --files_arm) the same with the replica following the
            checkpoint directory instead (--replica_source files, polling
            every --poll_ms)
  cadence   (with --cadence_arm) the replica's cadence without a replica:
            what the checkpoints cost apart from the replica and the probe
  replica_versions (with --versions_arm) the replica on the stream with
            versions between checkpoints: checkpoint.version_every_steps
            --every, checkpoints every --versions_checkpoint_every clocks (0:
            none periodic, as the default arm; the first version is then a
            checkpoint, the versions' base); --versions_only runs it
            without the replica arm
  replica_nice0 (with --nice0_arm) the replica building its versions at the
            process's priority (ps_replica --build_nice 0), where the
            launcher builds them at nice 19: the A/B of that default

Prints, over the replica runs:
  - train-to-serve of every push, from the servers' stamps: each server
    sends with its part of a cut the age of each push it applied since its
    cut before, and the replica adds the cut's time to the swap
    (replica/replica.h "Train to serve"); p50/p99 over a job's pushes (its
    replica's last version line), medians over the runs, with no reads
    added to the job;
  - train-to-serve from a push's apply (the probe: replica_bench_client
    --probe_servers, see its top): it reads --probe_keys rows of the DENSE
    table (every push changes them) from the servers with the ordinary EVAL
    Pull every --probe_ms and from the replica's Lookup as often, and times
    from the first sight of a value on a server (its apply, at most one
    interval late) to its first sight on the replica. "served value": the
    value the version holds (the last apply before the cut): this is
    cut-to-serve seen from outside plus the time from that apply to the cut.
    "every change": each value the servers took, until a version holds it
    or a later one: the wait for the next cut included (half the cadence on
    average);
  - train-to-serve from the cut (the manifest's cut_unix_micros, when the
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
  - training samples/s (the workers', PS_WORKER_RESULT) of the replica runs
    against the default ones (and the cadence ones): medians, their ratio,
    and each round's ratio. The probe's reads (servers and replica, every
    --probe_ms) take CPU from training too: --probe_ms 0 gives the replica's
    own cost.
  - per version: how it was built (incremental: the version before plus the
    new delta, in place on the idle model or on a copy; or from its whole
    chain), the build time and the checkpoint bytes read;
  - the replica process's CPU time (user + system, sampled from /proc every
    0.2 s while the job runs) a job and a version: what it takes from
    training on a full machine, apart from the wall time of builds, which
    grows with the load.

--bin_dir_b DIR (A/B) adds, for each cadence, an arm replica_b that runs
the same job with the binaries of DIR (e.g. another build of ps_replica
beside the same job binaries), interleaved with the others in every round:
the same machine state for both, each with its own training ratio, probe
and build figures (labelled "(B)"). The default arm uses --bin_dir.

--compare_replica BIN runs a second replica, another build of ps_replica
(e.g. the one before a change), beside the first in every replica run,
following the same checkpoints with the same --poll_ms: the same cuts, the
same load, figures printed for each. Two replicas then share the machine
with the job (the training ratio is then that of two replicas).

  bazel build -c opt //scheduler:all //server:ps_server //worker:ps_worker \\
      //worker/data:ps_datagen //common:ps_config_check //replica:all \\
      //bench:replica_bench_client
  python3 bench/replica_bench.py [--rounds 3] [--every 20[,100,..]] [--max_steps 400] [--epochs 1]
      [--config opt]
      [--bin_dir DIR] [--poll_ms 100] [--probe_ms 20] [--probe_keys 2] [--cadence_arm]
      [--nice0_arm] [--compare_replica BIN] [--bin_dir_b DIR]
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
# replica: serving version 40 (... rows, table hash ...) from the stream, generation G, built
# in X (how) from B bytes; cut to serve D
VERSION_LINE = re.compile(r"replica: serving version (\d+) .*?\) from (the stream|\S+), .*?built in "
                          r"(\S+)(?: \(([^)]*)\))? from (\d+) bytes(?: \(own files (\d+)\))?; "
                          r"cut to serve (\S+)")


def versions(text):
    """[{version, build_s, how, read, own, cut_to_serve_s}] of a replica's log;
    how: incremental or chain (from files), stream or stream full (from the
    servers' stream; read: the bytes received)."""
    out = []
    for v, source, built, how, read, own, d in VERSION_LINE.findall(text):
        if source == "the stream":
            kind = "stream full" if how == "full" else "stream"
        else:
            kind = "incremental" if how.startswith("incremental") else "chain"
        out.append({"version": int(v), "build_s": seconds(built), "how": kind,
                    "in_place": "in place" in how,
                    "read": int(read), "own": int(own or 0), "cut_to_serve_s": seconds(d)})
    return out


# ...; push to serve p50 A max B (N pushes; all M: p50 C p99 D max E): the
# replica's train-to-serve of every push, from the servers' stamps
# (replica/replica.h "Train to serve"), over the stream versions so far.
PUSHES_LINE = re.compile(r"push to serve p50 \S+ max \S+ \(\d+ pushes; all (\d+): p50 ([\d.]+)s "
                         r"p99 ([\d.]+)s max ([\d.]+)s\)")


def pushes(text):
    """{n, p50, p99, max} (seconds) of every push the replica timed in the
    job (its last version's line), or None."""
    found = PUSHES_LINE.findall(text)
    if not found:
        return None
    n, p50, p99, mx = found[-1]
    return {"n": int(n), "p50": float(p50), "p99": float(p99), "max": float(mx)}


def pushes_summary(runs):
    """The runs' push-to-serve: medians of their p50 and p99, and each run's."""
    runs = [r for r in runs if r]
    if not runs:
        return "no pushes timed"
    return "p50 %.3f s, p99 %.3f s (medians of %d runs; runs p50/p99: %s; %d pushes in all)" % (
        statistics.median(r["p50"] for r in runs), statistics.median(r["p99"] for r in runs),
        len(runs), ", ".join("%.2f/%.2f" % (r["p50"], r["p99"]) for r in runs),
        sum(r["n"] for r in runs))


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
    for how in ("incremental", "chain", "stream", "stream full"):
        k = [v for v in vs if v["how"] == how]
        if k:
            parts.append("%d %s: build p50 %.3f s, read/received p50 %.0f KiB" % (
                len(k), how, quantile([v["build_s"] for v in k], 0.5),
                statistics.median(v["read"] for v in k) / 1024))
            inplace = [v["build_s"] for v in k if v.get("in_place")]
            if inplace:
                copies = [v["build_s"] for v in k if not v.get("in_place")]
                parts[-1] += " (%d in place: build p50 %.3f s p99 %.3f s; %d on a copy%s)" % (
                    len(inplace), quantile(inplace, 0.5), quantile(inplace, 0.99), len(copies),
                    ": build p50 %.3f s" % quantile(copies, 0.5) if copies else "")
    return "; ".join(parts)


STARTED_REPLICA = re.compile(r"started replica-0 \(pid (\d+)\)")


class CpuWatch:
    """Samples a process's CPU time (user + system, /proc/PID/stat) every
    0.2 s on a thread; `seconds` is the last sample (the process's CPU
    until at most 0.2 s before it ended)."""

    def __init__(self, pid):
        import threading
        self.pid, self.seconds, self.done = pid, 0.0, threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            try:
                with open("/proc/%d/stat" % self.pid) as f:
                    stat = f.read().rsplit(")", 1)[1].split()
                self.seconds = (int(stat[11]) + int(stat[12])) / self.tick
            except (OSError, IndexError, ValueError):
                return
            self.done.wait(0.2)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.seconds


LISTENING = re.compile(r"\[(server|replica)-(\d+)\s*\] PS_(?:SERVER|REPLICA)_LISTENING (\S+)")


def probe_summary(probes):
    """The probe's two latencies over every replica run, and its counts."""
    served = [x for p in probes for x in p["served"]]
    changes = [x for p in probes for x in p["changes"]]
    if not probes:
        return "off (--probe_ms 0)"
    if not served:
        return "no version observed (%s)" % "; ".join(p.get("line", "") for p in probes)
    return ("served value p50 %.3f s p99 %.3f s (%d row versions); every change p50 %.3f s "
            "p99 %.3f s (%d changes); %d unmatched; probe CPU %.1f s in all" % (
                quantile(served, 0.5) / 1e3, quantile(served, 0.99) / 1e3, len(served),
                quantile(changes, 0.5) / 1e3, quantile(changes, 0.99) / 1e3, len(changes),
                sum(p["unmatched"] for p in probes), sum(p["cpu_s"] for p in probes)))


def run_job(args, bin_dir, data, run_dir, arm, every):
    """One job of `arm` (default, cadence, replica: see the top), cutting
    every `every` clocks (not default)."""
    replica = arm.startswith("replica")
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
    if args.epochs != 1:
        text = re.sub(r"\n  epochs: \d+", "\n  epochs: %d" % args.epochs, open(config).read())
        open(config, "w").write(text)
    if arm == "replica_versions":
        text = re.sub(r"\n  keep: \d+", "", open(config).read())
        k = args.versions_checkpoint_every
        text = text.replace(
            "checkpoint {", "checkpoint {\n  version_every_steps: %d\n  delta: true\n  keep: 100000%s"
            % (every, "\n  every_steps: %d" % k if k else ""), 1)
        open(config, "w").write(text)
    elif arm != "default":
        text = re.sub(r"\n  keep: \d+", "", open(config).read())
        text = text.replace(
            "checkpoint {", "checkpoint {\n  every_steps: %d\n  delta: true\n  keep: 100000" %
            every, 1)
        open(config, "w").write(text)
    num_servers = int(re.search(r"num_servers: (\d+)", open(config).read()).group(1))
    argv = [sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"), "--config=" + config,
            "--data_dir=" + data, "--bin_dir=" + bin_dir, "--run_dir=" + run_dir]
    other = None
    if replica:
        if arm == "replica_nice0":
            argv += ["--replica_flag=--build_nice=0"]
        argv += ["--replicas=1", "--replica_flag=--poll_ms=%d" % args.poll_ms,
                 "--replica_source=" + ("files" if arm == "replica_files" else "stream")]
        if args.compare_replica:
            other_log = open(os.path.join(run_dir, "compare_replica.log"), "w")
            other = subprocess.Popen([args.compare_replica, "--config=" + config,
                                      "--checkpoint_dir=" + ckpt, "--poll_ms=%d" % args.poll_ms,
                                      "--listen=127.0.0.1:0"], stdout=other_log,
                                     stderr=subprocess.STDOUT)
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, addresses, probe, watch = [], {}, [None], None

    def start_probe():
        servers = [addresses.get(("server", i)) for i in range(num_servers)]
        if (args.probe_ms <= 0 or probe[0] is not None or None in servers
                or ("replica", 0) not in addresses):
            return
        probe[0] = subprocess.Popen(
            [os.path.join(bin_dir, "bench/replica_bench_client"),
             "--probe_servers=" + ",".join(servers),
             "--probe_replica=" + addresses[("replica", 0)],
             "--probe_table=%d" % args.probe_table, "--probe_keys=%d" % args.probe_keys,
             "--probe_ms=%d" % args.probe_ms,
             "--job_secret_file=" + os.path.join(run_dir, "job.secret")], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

    for line in launcher.stdout:
        lines.append(line)
        started = STARTED_REPLICA.search(line)
        if started and replica and watch is None:
            watch = CpuWatch(int(started.group(1)))
        m = LISTENING.search(line)
        if m and replica:
            addresses[(m.group(1), int(m.group(2)))] = m.group(3)
            start_probe()
    launcher.wait()
    replica_cpu = watch.stop() if watch is not None else None
    text = "".join(lines)
    if other is not None:
        time.sleep(2 * args.poll_ms / 1000.0 + 5)  # Its last version (the bench, not a test).
        other.terminate()
        other.wait(timeout=60)
        other_log.close()
    probe_out = ""
    if probe[0] is not None:
        # It stops 2 s after the replica (ended with the job) stops answering.
        probe_out, probe_err = probe[0].communicate(timeout=120)
        if probe[0].returncode != 0:
            probe_out += probe_err[-2000:]
        if args.verbose:
            print("probe's log:\n" + probe_err[-3000:])
    job = re.search(r"PS_JOB_RESULT (.*)", text)
    workers = [fields(m) for m in re.findall(r"PS_WORKER_RESULT (.*)", text)]
    if launcher.returncode != 0 or not job or not workers:
        sys.exit("job failed (%s):\n%s" % (arm, text[-4000:]))
    res = {"train_sps": sum(float(w["samples_per_sec"]) for w in workers),
           "job_sps": float(fields(job.group(1))["samples_per_sec"]), "ckpt": ckpt,
           "config": config}
    if replica:
        written = write_times(ckpt)
        res["versions"] = versions(text)
        res["pushes"] = pushes(text)
        res["replica_cpu_s"] = replica_cpu
        res["report"] = re.findall(r"replica-0: last version .*", text)
        if other is not None:
            res["compare"] = versions(open(os.path.join(run_dir, "compare_replica.log")).read())
        for v in res["versions"] + res.get("compare", []):
            if v["version"] in written and not v["how"].startswith("stream"):
                v["write_s"] = written[v["version"]]
        m = re.search(r"PS_PROBE_RESULT (.*)", probe_out)
        if not m:
            if args.probe_ms <= 0:
                return res
            sys.exit("the probe failed:\n" + probe_out[-4000:])
        f = fields(m.group(1))
        res["probe"] = {
            "served": [float(x) for x in re.search(r"PS_PROBE_SERVED ms=(\S*)", probe_out + " ")
                       .group(1).split(",") if x],
            "changes": [float(x) for x in re.search(r"PS_PROBE_CHANGES ms=(\S*)", probe_out + " ")
                        .group(1).split(",") if x],
            "unmatched": int(f["unmatched"]), "cpu_s": float(f["cpu_s"]), "line": m.group(1)}
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--every", default="20",
                   help="checkpoint.every_steps (clocks) of the replica's cadence; a list "
                        "(20,100,200) runs a replica arm for each in every round")
    p.add_argument("--max_steps", type=int, default=400, help="steps a worker")
    p.add_argument("--epochs", type=int, default=1,
                   help="training.epochs (an epoch is 781 steps a worker: more for longer jobs)")
    p.add_argument("--poll_ms", type=int, default=100, help="the replica's --poll_ms")
    p.add_argument("--probe_ms", type=int, default=20,
                   help="the probe's interval (ms); 0: no probe")
    p.add_argument("--probe_keys", type=int, default=2, help="DENSE rows the probe follows")
    p.add_argument("--probe_table", type=int, default=2, help="the job's DENSE table id")
    p.add_argument("--verbose", action="store_true", help="print the probe's log")
    p.add_argument("--files_arm", action="store_true",
                   help="also a replica following the checkpoint files, not the stream "
                        "(arms replica_files@N)")
    p.add_argument("--cadence_arm", action="store_true",
                   help="also run the cadence without a replica (see the top)")
    p.add_argument("--nice0_arm", action="store_true",
                   help="also run the replica building versions at the process's priority "
                        "(ps_replica --build_nice 0; the launcher's default is 19): replica_nice0")
    p.add_argument("--versions_arm", action="store_true",
                   help="also the replica with versions between checkpoints (see the top)")
    p.add_argument("--versions_only", action="store_true",
                   help="with --versions_arm: no replica arm on checkpoints")
    p.add_argument("--versions_checkpoint_every", type=int, default=0,
                   help="checkpoint.every_steps of the versions arm (0: none periodic)")
    p.add_argument("--batch", type=int, default=64, help="lines per Predict call")
    p.add_argument("--predict_seconds", type=float, default=10)
    p.add_argument("--config", default="opt", choices=["fastbuild", "opt"])
    p.add_argument("--compare_replica", default="",
                   help="another ps_replica binary to run beside the first (see the top)")
    p.add_argument("--bin_dir", default="",
                   help="binaries laid out like bazel-bin (default: bazel info of --config)")
    p.add_argument("--bin_dir_b", default="",
                   help="A/B: also run each replica arm with the binaries of this directory "
                        "(arms replica_b@N, interleaved in the same rounds; see the top)")
    args = p.parse_args()
    bin_dir = args.bin_dir or bazel_bin(args.config)
    client = os.path.join(bin_dir, "bench/replica_bench_client")
    data = os.path.join(ROOT, "data", "synthetic")
    if not os.path.exists(os.path.join(data, "best.txt")):
        sys.exit("no generated data in %s: run ./shardps run once" % data)
    load_before = "%.2f %.2f %.2f" % os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="replica_bench_")
    everies = [int(x) for x in args.every.split(",")]
    kinds = (["cadence"] if args.cadence_arm else []) + (
        [] if args.versions_only else ["replica"]) + (
        ["replica_versions"] if args.versions_arm else []) + (
        ["replica_nice0"] if args.nice0_arm else []) + (
        ["replica_files"] if args.files_arm else []) + (["replica_b"] if args.bin_dir_b else [])
    arms = [("default", 0)] + [(kind, n) for n in everies for kind in kinds]
    bins = {"replica_b": args.bin_dir_b}
    name = lambda arm: arm[0] if arm[0] == "default" else "%s@%d" % arm
    results = {arm: [] for arm in arms}
    for r in range(args.rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            res = run_job(args, bins.get(arm[0], bin_dir), data, os.path.join(tmp, name(arm)),
                          *arm)
            results[arm].append(res)
            extra = ""
            if arm[0].startswith("replica"):
                extra = "\n    replica: %s; CPU %.1f s\n    push to serve: %s\n    probe: %s\n    %s" % (
                    summary(res["versions"]), res["replica_cpu_s"] or 0,
                    pushes_summary([res["pushes"]]),
                    probe_summary([res["probe"]] if "probe" in res else []),
                    res["report"][0] if res["report"] else "no replica report")
                if "compare" in res:
                    extra += "\n    compare_replica: %s" % summary(res["compare"])
            print("round %d %-13s train %8.0f samples/s, job %7.0f samples/s%s" % (
                r + 1, name(arm), res["train_sps"], res["job_sps"], extra), flush=True)

    print("\n%d rounds, %s binaries, %d steps a worker, replica polling every %d ms; load average "
          "before %s, after %.2f %.2f %.2f" % (args.rounds, args.config, args.max_steps,
                                               args.poll_ms, load_before, *os.getloadavg()))
    if args.bin_dir_b:
        print("A/B: replica arms with %s, replica_b arms with %s" % (bin_dir, args.bin_dir_b))
    for n, kind in [(n, kind) for n in everies for kind in kinds if kind != "cadence"]:
        reps = results[(kind, n)]
        label = "every %d clocks%s" % (n, {"replica_b": " (B)", "replica_files": " (files)",
                                           "replica_versions": " (versions)",
                                           "replica_nice0": " (build_nice 0)"}.get(kind, ""))
        print("%s: train-to-serve from the apply (probe, %d DENSE rows, every %d ms): "
              "%s" % (label, args.probe_keys, args.probe_ms,
                      probe_summary([res["probe"] for res in reps if "probe" in res])))
        print("%s: train-to-serve from the apply (servers' stamps, every push, no reads): %s" % (
            label, pushes_summary([res["pushes"] for res in reps])))
        print("%s: train-to-serve (cut to served), replica: %s" % (label, summary(
            [v for res in reps for v in res["versions"]])))
        cpu = [res["replica_cpu_s"] for res in reps if res.get("replica_cpu_s") is not None]
        if cpu:
            nv = sum(len(res["versions"]) for res in reps)
            print("%s: replica CPU (user + system) a job: median %.1f s (runs: %s), %.3f s a "
                  "version" % (label, statistics.median(cpu), ", ".join("%.1f" % c for c in cpu),
                               sum(cpu) / max(1, nv)))
        if args.compare_replica:
            print("every %d clocks: train-to-serve (cut to served), compare_replica %s: %s" % (
                n, args.compare_replica, summary([v for res in reps
                                                  for v in res.get("compare", [])])))
    # Bytes against rows, from the last replica run's files.
    last = results[("replica_versions" if args.versions_only else "replica", everies[0])][-1]
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
    # The stream's versions of the same cuts: the bytes received (every
    # server's part) against the rows the cut's checkpoint holds.
    touched = {int(x["clock"]): int(x["rows"]) + int(x["deleted"]) for x in per}
    streamed = [v for v in last["versions"] if v["how"].startswith("stream") and
                v["version"] in touched]
    for kind in ("stream full", "stream"):
        k = [v for v in streamed if v["how"] == kind]
        if k:
            b = [v["read"] for v in k]
            n = [touched[v["version"]] for v in k]
            print("%s versions (%d): median %.0f KiB received for %d rows touched, %.1f bytes a "
                  "row" % ("full" if kind == "stream full" else "delta", len(k),
                           statistics.median(b) / 1024, statistics.median(n),
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
    med = {a: statistics.median(x["train_sps"] for x in results[a]) for a in arms}
    default = med[("default", 0)]
    print("training samples/s (workers, medians%s): default checkpoints (no periodic cut) %.0f" % (
        "; the replica arms with the probe, whose reads take CPU too: --probe_ms 0 measures the "
        "replica alone" if args.probe_ms > 0 else "; no probe", default))
    for arm in arms[1:]:
        ratios = [x["train_sps"] / d["train_sps"]
                  for d, x in zip(results[("default", 0)], results[arm])]
        rounds = ", ".join("%.3f" % r + (
            " (push p50 %.2f s)" % x["pushes"]["p50"] if x.get("pushes") else "")
            for r, x in zip(ratios, results[arm]))
        if len(ratios) >= 4:
            q = statistics.quantiles(ratios, n=4)
            rounds += "; the rounds' ratios: median %.3f, quartiles %.3f-%.3f" % (
                statistics.median(ratios), q[0], q[2])
        print("  %s: %.0f, x%.3f of default (rounds: %s)" % (
            "cadence every %d clocks, no replica" % arm[1] if arm[0] == "cadence" else
            "cadence every %d clocks with the replica%s" % (
                arm[1], {"replica_b": " (B)", "replica_files": " on the files",
                         "replica_versions": " (versions between checkpoints)",
                         "replica_nice0": " (ps_replica --build_nice 0)"}.get(arm[0], "")),
            med[arm], med[arm] / default,
            rounds))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
