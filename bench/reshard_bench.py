#!/usr/bin/env python3
"""Live resharding of a running job (issue 31): what a move costs the
workers, and how fast it moves the rows.

Per table size (--rows, default 1M and 10M; sparse table dim 16, Adagrad:
16 weights + 16 accumulators a row), a real job of the real binaries on
free loopback ports: ps_scheduler, ps_server 0 and 1 (the map's) and
ps_server 2 (a spare: cluster.max_servers 3), ASP, checkpoints on demand
only, and one worker, bench/reshard_bench_worker (a ps_worker without a
model: registered, heartbeating, stepping under the scheduler's clock; its
PsClient takes a new partition map when a server refuses a stale one). The
worker
  1. pre-fills the table: pushes of --fill_batch distinct keys create
     exactly N rows (a push of a missing key creates its row), so every row
     exists before anything is measured;
  2. then steps back to back: a pull (TRAIN) and a push of --step_keys
     existing keys (a window sliding over all N rows, or over the first
     --hot_percent of them: the ids a job is training on), then Tick; it writes
     each completed step's end (unix microseconds) to a file at the end.
Meanwhile this script, after --settle seconds of steady stepping,
  3. takes a checkpoint (ps_status --checkpoint): its bytes (the files of
     ckpt-<clock>) over the scheduler's hold + write (JobStatus
     last_checkpoint_hold_sec + last_checkpoint_write_sec) is the job's
     checkpoint write rate;
  4. moves the job 2 -> 3 servers (ps_status --servers 3) and, unless
     --no_back, 3 -> 2 after as long again: the move's duration is the
     scheduler's (JobStatus last_reshard_sec: its cut, the destinations'
     restores and the switch); its bytes are the moved rows' share of the
     checkpoint (reshard_rows_moved x the checkpoint's bytes a row), beside
     the checkpoint bytes the destinations read (reshard_bytes_moved: a
     destination reads whole partition-group files, so in 3 -> 2, where
     both destinations take partitions of the same groups, twice as much);
  5. times one thread's memcpy of as many bytes as the 2 -> 3 move moved
     (reshard_bench_worker --memcpy_bytes: a C++ memcpy into fresh pages,
     and into the same pages again).
Printed per move: duration, bytes, rate (GB/s) beside the checkpoint's and
the memcpy's in the same run; the worker's longest stall (the largest gap
between two consecutive step ends from the request to 1 s after the move
answered) beside the largest gap in the steady window before the
checkpoint; steps/s (and keys/s) during the move (the request to its
answer) against the same length of time just before the request. The
issue's targets: stall <= 2 s at 10M rows, steps/s during the move >= 0.8x
before it, move rate >= 0.5 GB/s. Figures only: nothing passes or fails.

Needs 1.4 GB of disk for each 10M-row checkpoint (three are taken: the
checkpoint and one cut a move; the work directory is removed at the end
unless --keep) and RAM for the servers' rows, a copy and a restore (~6 GB
at 10M rows). Figures of two runs: docs/benchmarks.md, "Resharding".

  bazel build -c opt //scheduler:ps_scheduler //scheduler:ps_status \\
      //server:ps_server //bench:reshard_bench_worker
  python3 bench/reshard_bench.py [--rows 1000000,10000000] [--bin_dir DIR] [--move_mb_per_s N]
      [--config opt] [--work_dir /tmp/shardps_reshard_bench] [--no_back]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from bench_util import bazel_bin, fields  # noqa: E402

BINARIES = {"ps_scheduler": "scheduler/ps_scheduler", "ps_status": "scheduler/ps_status",
            "ps_server": "server/ps_server", "reshard_bench_worker": "bench/reshard_bench_worker"}


def binary(bin_dir, name):
    """`name` in `bin_dir`, laid out like bazel-bin or flat."""
    for path in (os.path.join(bin_dir, BINARIES[name]), os.path.join(bin_dir, name)):
        if os.access(path, os.X_OK):
            return path
    sys.exit("%s not found in %s (build it: see --help)" % (name, bin_dir))


def config_text(name, ckpt, fill_batch, step_keys, move_mb_per_s):
    return """name: "%s"
tables {
  id: 1 name: "emb" kind: SPARSE dim: 16 seed: 7
  init { kind: UNIFORM scale: 0.01 }
  optimizer { adagrad { learning_rate: 0.05 initial_accumulator: 0.1 } }
  max_keys_per_request: %d
}
data { train_files: "unused" }
cluster {
  num_servers: 2 max_servers: 3 num_workers: 1 num_partitions: 4096 mode: ASP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 60000%s
}
checkpoint { dir: "%s" keep: 10 }
""" % (name, max(fill_batch, step_keys),
       " move_mb_per_s: %d" % move_mb_per_s if move_mb_per_s else "", ckpt)


def wait_line(proc, log, prefix, timeout):
    """The rest of the first line of `log` (proc's stdout+stderr) starting
    with `prefix`; exits naming the log if proc dies or `timeout` passes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(log) as f:
            for line in f:
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with open(log) as f:
        tail = f.read()[-3000:]
    sys.exit("no '%s' in %s within %d s (exit %s):\n%s" % (prefix, log, timeout, proc.poll(), tail))


def status(bins, address):
    out = subprocess.run([bins["ps_status"], "--scheduler=" + address, "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def timed(argv):
    t = time.time()
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("%s failed:\n%s%s" % (" ".join(argv), out.stdout, out.stderr))
    return t, time.time(), out.stdout.strip()


def bytes_under(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def largest_gap(ends, start, stop):
    """The largest gap between consecutive step ends, counting the gap that
    spans `start` (from the last end before it), up to the first end after
    `stop`."""
    before = [e for e in ends if e < start]
    inside = [e for e in ends if start <= e <= stop]
    after = [e for e in ends if e > stop]
    seq = before[-1:] + inside + after[:1]
    return max((b - a for a, b in zip(seq, seq[1:])), default=float("nan"))


def steps_in(ends, start, stop):
    return sum(1 for e in ends if start <= e < stop)


GLOG = re.compile(r"^[IWE](\d{8} \d\d:\d\d:\d\d\.\d+)\s+\d+ \S+\] (.*)$")


def log_lines(path):
    """[(unix seconds, message)] of a glog file."""
    import datetime
    out = []
    with open(path) as f:
        for line in f:
            m = GLOG.match(line)
            if m:
                t = datetime.datetime.strptime(m.group(1), "%Y%m%d %H:%M:%S.%f").timestamp()
                out.append((t, m.group(2)))
    return out


def secs(d):
    """Seconds of an absl duration ("1.5s", "250ms", "3m2.1s")."""
    return sum(float(v) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}[u]
               for v, u in re.findall(r"([\d.]+)(ms|us|h|m|s)", d))


def breakdown(work, clock):
    """The parts of the move switched at `clock`, from the logs. A move in
    two steps (the scheduler's "moved" line names the pre-copy's clock C1):
    step 1, the workers training except for the copy: C1's copy (held), its
    files, the destinations' pre-copy reads (C1's cut line to the last
    destination's pre-copy line); step 2, held throughout: the catch-up cut's
    copy and files, the destinations' catch-up (to the last "caught up"
    line) and the switch (to the "moved" line). A move in one step (older
    binaries): the cut's copy and files, the restores and the switch, all
    held."""
    sched = log_lines(os.path.join(work, "scheduler.log"))
    servers = [x for i in range(3) for x in log_lines(os.path.join(work, "server-%d.log" % i))]

    def cut_line(c):
        lines = [(t, m) for t, m in sched if m.startswith("checkpoint at clock %d:" % c)]
        if not lines:
            return None
        held = re.search(r"held (\S+) for the copy, files written in (\S+) behind", lines[-1][1])
        return lines[-1][0], secs(held.group(1)), secs(held.group(2))

    moved = [(t, m) for t, m in sched if m.startswith("moved ") and "at clock %d" % clock in m]
    cut = cut_line(clock)
    if not moved or not cut:
        return None
    first = re.search(r"pre-copied at clock (\d+)", moved[-1][1])
    if first is None:
        added = [t for t, m in servers if " added " in m and "ckpt-%012d" % clock in m]
        if not added:
            return None
        return {"copy_s": cut[1], "files_s": cut[2], "restore_s": max(added) - cut[0],
                "switch_s": moved[-1][0] - max(added)}
    c1 = int(first.group(1))
    pre = cut_line(c1)
    precopied = [t for t, m in servers if "(a pre-copy" in m and "ckpt-%012d" % c1 in m]
    caught = [t for t, m in servers if " caught up " in m and "ckpt-%012d" % clock in m]
    # A recent cut reused: the pre-copy starts at the scheduler's line saying so.
    reused = [t for t, m in sched if m.startswith("the move pre-copies from the cut at clock %d " % c1)]
    if not pre or not precopied or not caught:
        return None
    started = reused[-1] if reused else pre[0]
    return {"pre_copy_s": 0 if reused else pre[1], "pre_files_s": 0 if reused else pre[2],
            "pre_reads_s": max(precopied) - started, "reused": bool(reused),
            "copy_s": cut[1], "files_s": cut[2], "restore_s": max(caught) - cut[0],
            "switch_s": moved[-1][0] - max(caught), "c1": c1}


def run_size(args, bins, rows):
    work = os.path.join(args.work_dir, "rows-%d" % rows)
    shutil.rmtree(work, ignore_errors=True)
    ckpt = os.path.join(work, "ckpt")
    os.makedirs(ckpt)
    config = os.path.join(work, "job.pbtxt")
    with open(config, "w") as f:
        f.write(config_text("reshard-bench-%d" % rows, ckpt, args.fill_batch, args.step_keys,
                            args.move_mb_per_s))
    procs = []

    def start(argv, name):
        log = os.path.join(work, name + ".log")
        p = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        return p, log

    try:
        sched, sched_log = start([bins["ps_scheduler"], "--config=" + config,
                                  "--listen=127.0.0.1:0"], "scheduler")
        address = wait_line(sched, sched_log, "PS_SCHEDULER_LISTENING ", 60)
        servers = []
        for i in range(3):
            servers.append(start([bins["ps_server"], "--config=" + config,
                                  "--scheduler=" + address, "--index=%d" % i,
                                  "--listen=127.0.0.1:0"], "server-%d" % i))
        for i, (p, log) in enumerate(servers):
            wait_line(p, log, "PS_SERVER_LISTENING ", 60)
        stop_file = os.path.join(work, "stop")
        steps_file = os.path.join(work, "steps.txt")
        worker, worker_log = start([bins["reshard_bench_worker"], "--config=" + config,
                                    "--scheduler=" + address, "--rows=%d" % rows,
                                    "--fill_batch=%d" % args.fill_batch,
                                    "--step_keys=%d" % args.step_keys,
                                    "--hot_rows=%d" % (rows * args.hot_percent // 100),
                                    "--steps_file=" + steps_file, "--stop_file=" + stop_file],
                                   "worker")
        print("  pids: scheduler %d, servers %s, worker %d (%s)" % (
            sched.pid, ",".join(str(p.pid) for p, _ in servers), worker.pid, address), flush=True)
        filled = fields(wait_line(worker, worker_log, "PS_RESHARD_BENCH_FILLED ", 3600))
        print("  %d rows filled in %s s" % (rows, filled["sec"]), flush=True)
        steady_start = time.time()
        time.sleep(args.settle)
        steady_stop = time.time()
        # The job's checkpoint write rate.
        t0, t1, out = timed([bins["ps_status"], "--scheduler=" + address, "--checkpoint"])
        clock = int(re.search(r"clock (\d+)", out).group(1))
        st = status(bins, address)
        ck = {"clock": clock, "request_s": t1 - t0,
              "hold_s": st.get("lastCheckpointHoldSec", 0.0),
              "write_s": st.get("lastCheckpointWriteSec", 0.0),
              "bytes": bytes_under(os.path.join(ckpt, "ckpt-%012d" % clock))}
        print("  checkpoint at clock %d: %d bytes, held %.3f s + written %.3f s" % (
            clock, ck["bytes"], ck["hold_s"], ck["write_s"]), flush=True)
        # The before-window of a move is as long as the move: wait long
        # enough that it does not reach back into the checkpoint.
        moves = []
        targets = [3] if args.no_back else [3, 2]
        pause = max(args.settle, 3 * ck["request_s"] + 2)
        prev = {"bytes": 0, "rows": 0}
        for target in targets:
            time.sleep(pause)
            m0, m1, out = timed([bins["ps_status"], "--scheduler=" + address,
                                 "--servers=%d" % target])
            st = status(bins, address)
            moved_bytes = int(st.get("reshardBytesMoved", 0)) - prev["bytes"]
            moved_rows = int(st.get("reshardRowsMoved", 0)) - prev["rows"]
            prev = {"bytes": int(st.get("reshardBytesMoved", 0)),
                    "rows": int(st.get("reshardRowsMoved", 0))}
            move = {"target": target, "t0": m0, "t1": m1, "request_s": m1 - m0,
                    "move_s": st.get("lastReshardSec", 0.0), "bytes": moved_bytes,
                    "rows": moved_rows, "answer": out,
                    "row_bytes": int(moved_rows * ck["bytes"] / rows)}
            moves.append(move)
            print("  %s: %d rows, %d bytes; the scheduler's move %.3f s, request %.3f s" % (
                out, moved_rows, moved_bytes, move["move_s"], move["request_s"]), flush=True)
            pause = max(args.settle, 2 * move["request_s"] + 2)
        time.sleep(2)
        open(stop_file, "w").close()
        done = wait_line(worker, worker_log, "PS_RESHARD_BENCH_STEPS ", 300)
        worker.wait(timeout=60)
        with open(steps_file) as f:
            ends = [int(x) / 1e6 for x in f if x.strip()]
        print("  worker: %s" % done, flush=True)
        mc = fields(subprocess.run(
            [bins["reshard_bench_worker"], "--memcpy_bytes=%d" % max(1, moves[0]["row_bytes"])],
            capture_output=True, text=True, check=True).stdout.split(" ", 1)[1])
        steady_gap = largest_gap(ends, steady_start, steady_stop)
        steady_rate = steps_in(ends, steady_start, steady_stop) / (steady_stop - steady_start)
        for m in moves:
            length = m["t1"] - m["t0"]
            m["stall_s"] = largest_gap(ends, m["t0"], m["t1"] + 1.0)
            m["during"] = steps_in(ends, m["t0"], m["t1"]) / length
            m["before"] = steps_in(ends, m["t0"] - length, m["t0"]) / length
            m["parts"] = breakdown(work, int(re.search(r"at clock (\d+)", m["answer"]).group(1)))
        return {"rows": rows, "fill_s": float(filled["sec"]), "ckpt": ck, "moves": moves,
                "memcpy": mc, "steady_gap_s": steady_gap, "steady_rate": steady_rate,
                "steps": len(ends)}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="1000000,10000000", help="table sizes, comma-separated")
    p.add_argument("--fill_batch", type=int, default=100000, help="keys a push while filling")
    p.add_argument("--step_keys", type=int, default=4096, help="keys a step after the fill")
    p.add_argument("--hot_percent", type=int, default=100,
                   help="steps slide over the first this many percent of the rows (100: all)")
    p.add_argument("--settle", type=float, default=10, help="seconds of steady stepping first")
    p.add_argument("--no_back", action="store_true", help="only 2 -> 3, not 3 -> 2 after it")
    p.add_argument("--move_mb_per_s", type=int, default=0,
                   help="cluster.move_mb_per_s: the pre-copy's pace (0: unpaced)")
    p.add_argument("--config", default="opt", choices=["fastbuild", "opt"])
    p.add_argument("--bin_dir", default="",
                   help="binaries laid out like bazel-bin, or flat (default: bazel info of "
                        "--config)")
    p.add_argument("--work_dir", default="/tmp/shardps_reshard_bench")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    bin_dir = args.bin_dir or bazel_bin(args.config)
    bins = {name: binary(bin_dir, name) for name in BINARIES}
    load_before = "%.2f %.2f %.2f" % os.getloadavg()
    results = []
    for rows in [int(x) for x in args.rows.split(",")]:
        print("%d rows:" % rows, flush=True)
        results.append(run_size(args, bins, rows))
    load_after = "%.2f %.2f %.2f" % os.getloadavg()

    print("\n" + " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]))
    print("binaries %s; load average before %s, after %s; GB = 1e9 bytes; a step = pull + "
          "push of %d keys, sliding over %d%% of the rows; pre-copy pace %s" % (
              bin_dir, load_before, load_after, args.step_keys, args.hot_percent,
              "%d MB/s" % args.move_mb_per_s if args.move_mb_per_s else "none"))
    print("%-9s %-6s %8s %9s %8s %8s %8s %8s %8s %9s %9s %7s" % (
        "rows", "move", "move s", "MB moved", "GB/s", "ckpt", "memcpy", "stall s", "steady",
        "steps/s", "steps/s", "ratio"))
    print("%-9s %-6s %8s %9s %8s %8s %8s %8s %8s %9s %9s %7s" % (
        "", "", "", "", "move", "GB/s", "GB/s", "(move)", "max gap", "before", "during", ""))
    for r in results:
        ck = r["ckpt"]
        ck_rate = ck["bytes"] / 1e9 / max(1e-9, ck["hold_s"] + ck["write_s"])
        mc = float(r["memcpy"]["bytes"]) / 1e9 / float(r["memcpy"]["touched_sec"])
        for m in r["moves"]:
            src = 2 if m["target"] == 3 else 3
            print("%-9d %-6s %8.3f %9.1f %8.3f %8.3f %8.2f %8.3f %8.3f %9.1f %9.1f %7.2f" % (
                r["rows"], "%d->%d" % (src, m["target"]), m["move_s"], m["row_bytes"] / 1e6,
                m["row_bytes"] / 1e9 / max(1e-9, m["move_s"]), ck_rate, mc, m["stall_s"],
                r["steady_gap_s"], m["before"], m["during"], m["during"] / max(1e-9, m["before"])))
    print()
    for r in results:
        ck = r["ckpt"]
        print("%d rows: filled in %.1f s; checkpoint %.1f MB: held %.3f s (copy) + written %.3f s; "
              "memcpy of %.1f MB: %.3f s into fresh pages, %.3f s into touched ones; steady "
              "%.1f steps/s (%.0f keys/s), %d steps in all" % (
                  r["rows"], r["fill_s"], ck["bytes"] / 1e6, ck["hold_s"], ck["write_s"],
                  int(r["memcpy"]["bytes"]) / 1e6, float(r["memcpy"]["fresh_sec"]),
                  float(r["memcpy"]["touched_sec"]), r["steady_rate"],
                  r["steady_rate"] * args.step_keys, r["steps"]))
        for m in r["moves"]:
            print("  %s (request answered in %.3f s); %d rows, %.1f MB of the checkpoint; the "
                  "destinations read %.1f MB" % (m["answer"], m["request_s"], m["rows"],
                                                 m["row_bytes"] / 1e6, m["bytes"] / 1e6))
            b = m["parts"]
            if b and b.get("reused"):
                print("    step 1 (logs; the workers train): the recent cut at clock %d reused "
                      "(no hold); the destinations' pre-copy %.3f s" % (b["c1"], b["pre_reads_s"]))
            elif b and "c1" in b:
                print("    step 1 (logs; the workers train but for the copy): the cut at clock %d: "
                      "copy %.3f s (held) + its files %.3f s + the destinations' pre-copy %.3f s"
                      % (b["c1"], b["pre_copy_s"], b["pre_files_s"], b["pre_reads_s"]))
            if b and "c1" in b:
                print("    step 2 (held): the catch-up cut's copy %.3f s + its files %.3f s + "
                      "the destinations' catch-up %.3f s + the switch %.3f s" %
                      (b["copy_s"], b["files_s"], b["restore_s"], b["switch_s"]))
            elif b:
                print("    the move's parts (logs): cut copy %.3f s + its files %.3f s + the "
                      "destinations' restores %.3f s (%.3f GB/s of the rows moved) + the "
                      "switch %.3f s" % (b["copy_s"], b["files_s"], b["restore_s"],
                                         m["row_bytes"] / 1e9 / max(1e-9, b["restore_s"]),
                                         b["switch_s"]))


if __name__ == "__main__":
    main()
