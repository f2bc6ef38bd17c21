#!/usr/bin/env python3
"""Speed where the network binds: workload W and the README job
on a cluster in a box (tests/testing/netbox.py: hosts as network namespaces
on a bridge, each host's link shaped with tc tbf in both directions), at
link rates unshaped, 10, 2.5 and 1 Gb/s and at the rate where the README
job becomes network-bound, with each lever alone and all on.

  W: bench/server_rpc_bench's pipelined client (the real PsClient, as a
     prefetching worker drives it) against one ps_server, 1 and 2 clients,
     each client on its own host, fp32 and bf16 on the wire: M rows/s,
     bytes per client step each way on the server's link, the link's use.
  README job: configs/default.pbtxt without periodic evaluation (2 servers,
     2 workers, SSP(2) unless --staleness, one epoch of the generated data),
     the scheduler, each server and each worker on its own host. Cases:
       fp32          every lever off (fp32 on the wire, no prefetch)
       bf16 wire     --wire=bf16
       compress 0.1  training.dense_compression { ratio: 0.1 }
       prefetch      training.prefetch
       cache         training.cache (the embedding cache; it needs fp32)
       all on        the four together (the cache is off under bf16: the
                     worker says so, and the cache column shows it)
       all on fp32   compression, prefetch and the cache
     Job samples/s (the workers' training rates summed), per worker step
     the payload pushed and pulled (PsClient's count) and the embedding rows'
     share of the pull, wire bytes each way on worker 1's link (rank 0 also
     evaluates) and that link's use, the cache's hit rate, test AUC.
  The network-bound rate: the fp32 case at rates halving from 1 Gb/s, each
  probe beside an unshaped run, until its samples/s is at most half the
  unshaped run's; printed, then measured like the other rates.

Cases run interleaved (the order rotates every round) and ratios against
fp32 are taken within a round and rate, then the median over rounds. Needs
root and iproute2. The machine's CPU binds first (every process shares its
cores): read the ratios, not the rates.

  bazel build -c opt //bench:server_rpc_bench //server:ps_server //worker:ps_worker \\
      //scheduler:ps_scheduler //worker/data:ps_datagen //tests/testing:netbox_cli
  python3 bench/net_bench.py [--quick] [--rounds 3] [--rates unshaped,10G,2.5G,1G]
      [--staleness 2] [--no_bound] [--only w|job] [--config opt] [--bin_dir DIR]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_util  # noqa: E402

sys.path.insert(0, os.path.join(bench_util.ROOT, "tests", "testing"))
import netbox  # noqa: E402

SCHEDULER_HOST, SERVER_HOSTS, WORKER_HOSTS = 0, (1, 2), (3, 4)
PORT = 7001


def parse_rate(text):
    """'unshaped' -> 0; '2.5G', '250M', '1e9' -> bits/s."""
    if text == "unshaped":
        return 0
    m = re.fullmatch(r"([0-9.e+]+)([KMG]?)", text)
    if not m:
        sys.exit("bad rate %r (e.g. 2.5G, 250M, unshaped)" % text)
    return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def rate_name(bps):
    if not bps:
        return "unshaped"
    if bps >= 1e9:
        return "%gG" % (bps / 1e9)
    return "%gM" % (bps / 1e6)


class Box:
    """One NetBox for the whole run; rates set on every host at once."""

    def __init__(self, hosts, log_dir):
        self.box = netbox.NetBox(hosts=hosts)
        self.rate = 0
        self.log_dir = log_dir

    def close(self):
        self.box.close()

    def set_rate(self, bps):
        if bps == self.rate:
            return
        for h in range(self.box.hosts):
            if bps:
                self.box.set_rate(h, bps)
            elif self.rate:
                self.box.clear_rate(h)
        self.rate = bps

    def counters(self, host):
        """(rx, tx) bytes of the host's eth0."""
        out = subprocess.run(self.box.wrap(host, ["cat", "/proc/net/dev"]), capture_output=True,
                             text=True, check=True).stdout
        for line in out.splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "eth0":
                f = rest.split()
                return int(f[0]), int(f[8])
        raise RuntimeError("no eth0 in host %d" % host)

    def start(self, host, argv, log_name):
        """Starts argv in `host`, stdout and stderr to <log_dir>/<log_name>."""
        path = os.path.join(self.log_dir, log_name)
        f = open(path, "w")
        p = subprocess.Popen(self.box.wrap(host, argv), stdout=f, stderr=subprocess.STDOUT)
        p.log_path = path
        p.log_file = f
        return p


def wait_line(proc, prefix, timeout_s):
    """The first line of proc's log starting with `prefix` (polls the file)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with open(proc.log_path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.strip()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit("waited %ds for %r in %s:\n%s" % (timeout_s, prefix, proc.log_path,
                                                open(proc.log_path).read()[-3000:]))


def finish(proc, timeout_s, what):
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        sys.exit("%s did not end within %ds; log %s" % (what, timeout_s, proc.log_path))
    proc.log_file.close()
    return open(proc.log_path).read()


def lines_with(text, prefix):
    return [line[line.index(prefix):] for line in text.splitlines() if prefix in line]


# ---------------------------------------------------------------- workload W

def w_case(box, bins, args, encoding, clients):
    """One W run: a fresh ps_server on host 0, `clients` pipelined clients on
    hosts 1.. . Its rows/s, client steps/s, and wire bytes per client step
    into and out of the server's host."""
    config = os.path.join(box.log_dir, "w.pbtxt")
    with open(config, "w") as f:
        f.write('name: "w"\ntables { id: 1 name: "emb" kind: SPARSE dim: %d '
                'init { kind: UNIFORM scale: 0.01 } optimizer { sgd { learning_rate: 0.01 } } }\n'
                'cluster { num_servers: 1 num_workers: %d num_partitions: 4096 mode: ASP }\n'
                'data { synthetic_dir: "unused" }\n' % (args.w_dim, clients))
    address = "%s:%d" % (box.box.ip(0), PORT)
    server = box.start(0, [bins["ps_server"], "--config=" + config, "--listen=" + address],
                       "w-server.log")
    wait_line(server, "PS_SERVER_LISTENING", 60)
    before = box.counters(0)
    procs = []
    for i in range(clients):
        procs.append(box.start(1 + i, [
            bins["server_rpc_bench"], "--role=pipelined_client", "--address=" + address,
            "--dim=%d" % args.w_dim, "--encoding=" + encoding, "--steps=%d" % args.w_steps,
            "--warmup=%d" % args.w_warmup, "--seed=%d" % (100 + i)], "w-client-%d.log" % i))
    rows_s = steps_s = 0.0
    for i, p in enumerate(procs):
        out = finish(p, 1800, "W client %d" % i)
        m = re.search(r"ROWS (\d+) SECONDS ([0-9.]+)", out)
        if p.returncode != 0 or not m:
            sys.exit("W client %d failed:\n%s" % (i, out[-3000:]))
        rows_s += int(m.group(1)) / float(m.group(2))
        steps_s += args.w_steps / float(m.group(2))
    after = box.counters(0)
    server.terminate()
    finish(server, 60, "ps_server")
    steps = clients * (args.w_steps + args.w_warmup)
    rx, tx = (after[0] - before[0]) / steps, (after[1] - before[1]) / steps
    use = max(rx, tx) * steps_s / (box.rate / 8) if box.rate else None
    return {"rows_s": rows_s, "in": rx, "out": tx, "use": use}


def run_w(box, bins, args, rates):
    print("\n== workload W: 4096 Zipf(1.0) draws over 1e6 ids a step (~2450 rows), dim %d, "
          "pipelined PsClient, server on host 0, each client on its own host; %d steps after "
          "%d, medians of %d round(s) ==" % (args.w_dim, args.w_steps, args.w_warmup,
                                             args.rounds), flush=True)
    results = {}  # (rate, clients, encoding) -> [run]
    for rnd in range(args.rounds):
        for bps in rates:
            box.set_rate(bps)
            order = [(c, e) for c in (1, 2) for e in ("fp32", "bf16")]
            if rnd % 2:
                order.reverse()
            for clients, encoding in order:
                r = w_case(box, bins, args, encoding, clients)
                results.setdefault((bps, clients, encoding), []).append(r)
                print("  round %d %-8s %d client(s) %s: %.3f M rows/s" % (
                    rnd + 1, rate_name(bps), clients, encoding, r["rows_s"] / 1e6), flush=True)
    print("\n%-9s %-7s %10s %10s %9s %22s %22s %8s %8s" % (
        "link", "clients", "fp32 Mr/s", "bf16 Mr/s", "bf16/fp32", "fp32 B/step in/out",
        "bf16 B/step in/out", "fp32 use", "bf16 use"))
    for bps in rates:
        for clients in (1, 2):
            f, b = results[(bps, clients, "fp32")], results[(bps, clients, "bf16")]
            ratio = statistics.median(y["rows_s"] / x["rows_s"] for x, y in zip(f, b))
            med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
            use = lambda runs: ("%.2f" % med(runs, "use")) if runs[0]["use"] else "-"  # noqa
            print("%-9s %-7d %10.3f %10.3f %9.2f %10.0f/%-11.0f %10.0f/%-11.0f %8s %8s" % (
                rate_name(bps), clients, med(f, "rows_s") / 1e6, med(b, "rows_s") / 1e6, ratio,
                med(f, "in"), med(f, "out"), med(b, "in"), med(b, "out"), use(f), use(b)))
    print("(B/step: wire bytes into / out of the server's host per client step, TCP/IP and "
          "HTTP/2 included; use: the busier direction of the server's link against the rate)")


# ------------------------------------------------------------- the README job

CASES = [
    # name, prefetch, dense compression, cache, worker flags
    ("fp32", False, False, False, []),
    ("bf16 wire", False, False, False, ["--wire=bf16"]),
    ("compress 0.1", False, True, False, []),
    ("prefetch", True, False, False, []),
    ("cache", False, False, True, []),
    ("all on", True, True, True, ["--wire=bf16"]),
    ("all on fp32", True, True, True, []),
]


def job_config(args, data_dir, prefetch, compress, cache):
    with open(os.path.join(bench_util.ROOT, "configs", "default.pbtxt")) as f:
        text = bench_util.training_only(f.read())
    text = text.replace('synthetic_dir: "data/synthetic"', 'synthetic_dir: "%s"' % data_dir)
    text = re.sub(r"prefetch: \w+", "prefetch: %s" % ("true" if prefetch else "false"), text)
    extra = ""
    if compress:
        extra += "\n  dense_compression { ratio: 0.1 }"
    if cache:
        extra += "\n  cache { }"
    if args.max_steps:
        extra += "\n  max_steps: %d" % args.max_steps
    text = text.replace("training {", "training {" + extra, 1)
    text = re.sub(r"staleness: \d+", "staleness: %d" % args.staleness, text)
    return text


def job_case(box, bins, args, data_dir, case):
    """One README job on the box: its figures, or exits with the logs."""
    name, prefetch, compress, cache, flags = case
    slug = re.sub(r"\W+", "_", name)
    config = os.path.join(box.log_dir, "job_%s.pbtxt" % slug)
    with open(config, "w") as f:
        f.write(job_config(args, data_dir, prefetch, compress, cache))
    address = "%s:7000" % box.box.ip(SCHEDULER_HOST)
    procs = [box.start(SCHEDULER_HOST, [bins["ps_scheduler"], "--config=" + config,
                                        "--listen=" + address], "job-scheduler.log")]
    wait_line(procs[0], "PS_SCHEDULER_LISTENING", 60)
    for i, h in enumerate(SERVER_HOSTS):
        a = "%s:%d" % (box.box.ip(h), PORT)
        procs.append(box.start(h, [bins["ps_server"], "--config=" + config,
                                   "--scheduler=" + address, "--index=%d" % i, "--listen=" + a,
                                   "--advertise=" + a], "job-server-%d.log" % i))
    hosts = [WORKER_HOSTS[1]]
    before = {h: box.counters(h) for h in hosts}
    for r, h in enumerate(WORKER_HOSTS):
        procs.append(box.start(h, [bins["ps_worker"], "--config=" + config,
                                   "--scheduler=" + address, "--rank=%d" % r] + flags,
                               "job-worker-%d.log" % r))
    logs = [finish(p, 3600, "the job's process %d" % i) for i, p in enumerate(procs)]
    after = {h: box.counters(h) for h in hosts}
    job = lines_with(logs[0], "PS_JOB_RESULT")
    workers = [lines_with(text, "PS_WORKER_RESULT") for text in logs[-2:]]
    if procs[0].returncode != 0 or not job or not all(workers):
        sys.exit("job %r failed; logs in %s:\n%s" % (name, box.log_dir, logs[0][-3000:]))
    jr = bench_util.fields(job[-1])
    wr = [bench_util.fields(w[-1]) for w in workers]
    steps = int(wr[1]["steps"])
    seconds = float(wr[1]["seconds"])
    per_step = lambda w, k: int(w.get(k, 0)) / max(1, int(w["steps"]))  # noqa: E731
    push = statistics.mean(per_step(w, "push_bytes_dense") + per_step(w, "push_bytes_sparse")
                           for w in wr)
    pull = statistics.mean(per_step(w, "pull_bytes_dense") + per_step(w, "pull_bytes_sparse")
                           for w in wr)
    emb = statistics.mean(per_step(w, "pull_bytes_sparse") for w in wr)
    # Worker 1's link (rank 0 also evaluates, and the servers answer it):
    # wire bytes a step, and its busier direction over its training time
    # against the rate. A server's link carries about as much: half of
    # each worker's traffic.
    w1 = WORKER_HOSTS[1]
    rx = (after[w1][0] - before[w1][0]) / steps
    tx = (after[w1][1] - before[w1][1]) / steps
    use = max(rx, tx) * steps / seconds / (box.rate / 8) if box.rate else None
    hit = wr[1].get("cache_hit_rate")
    return {"sps": sum(float(w["samples_per_sec"]) for w in wr), "push": push, "pull": pull,
            "emb": emb, "rx": rx, "tx": tx, "use": use,
            "hit": float(hit) if hit is not None else None,
            "auc": float(jr.get("eval_auc", "nan"))}


def find_bound(box, bins, args, data_dir):
    """Halves the rate from --bound_start until the fp32 job is network-bound
    (by definition here): its samples/s at most half of an unshaped run's
    right before it (the machine drifts: each probe is a pair). Returns that
    rate, or None. Worker 1's link use is printed beside: a synchronous step
    leaves the link idle while it computes, so a bound job's link is not
    full."""
    print("\n-- the network-bound rate: the fp32 job, unshaped then shaped, at halving rates "
          "until shaped/unshaped <= 0.5 --", flush=True)
    bps = parse_rate(args.bound_start)
    for _ in range(args.bound_tries):
        box.set_rate(0)
        free = job_case(box, bins, args, data_dir, CASES[0])
        box.set_rate(bps)
        r = job_case(box, bins, args, data_dir, CASES[0])
        ratio = r["sps"] / free["sps"]
        print("  %-8s %8.0f samples/s against %8.0f unshaped (%.2f), worker 1's link use %.2f" % (
            rate_name(bps), r["sps"], free["sps"], ratio, r["use"]), flush=True)
        if ratio <= 0.5:
            print("network-bound at %s: the README job (fp32, every lever off) trains at half "
                  "its unshaped samples/s or less" % rate_name(bps), flush=True)
            return bps
        bps /= 2
    print("not network-bound down to %s (%d tries)" % (rate_name(bps * 2), args.bound_tries))
    return None


def run_job(box, bins, args, rates, data_dir, best):
    print("\n== the README job: 2 servers, 2 workers, SSP(%d), each process on its own host; "
          "%s; medians of %d round(s) ==" % (
              args.staleness, "max_steps %d" % args.max_steps if args.max_steps
              else "one epoch", args.rounds), flush=True)
    cases = [c for c in CASES if not args.cases or c[0] in args.cases]
    results = {}  # (rate, case name) -> [run]
    if args.bound:
        bound = find_bound(box, bins, args, data_dir)
        if bound and bound not in rates:
            rates = rates + [bound]
    for rnd in range(args.rounds):
        for bps in rates:
            box.set_rate(bps)
            k = rnd % len(cases)
            order = cases[k:] + cases[:k]
            for case in order:
                r = job_case(box, bins, args, data_dir, case)
                results.setdefault((bps, case[0]), []).append(r)
                print("  round %d %-8s %-12s %8.0f samples/s%s" % (
                    rnd + 1, rate_name(bps), case[0], r["sps"],
                    "" if r["hit"] is None else ", cache hits %.3f" % r["hit"]), flush=True)
    if best:
        print("\n(best achievable AUC on these data: %s)" % best.get("best_auc", "?"))
    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    for bps in rates:
        print("\nlink %s:" % rate_name(bps))
        print("%-12s %9s %6s %10s %10s %10s %18s %6s %6s %8s" % (
            "case", "samples/s", "ratio", "push B/st", "pull B/st", "emb pull", "wire B/st in/out",
            "use", "hits", "AUC"))
        base = results[(bps, "fp32")]
        for case in cases:
            runs = results[(bps, case[0])]
            ratio = statistics.median(r["sps"] / b["sps"] for r, b in zip(runs, base))
            use = "%.2f" % med(runs, "use") if runs[0]["use"] is not None else "-"
            hits = "%.3f" % med(runs, "hit") if runs[0]["hit"] is not None else "-"
            print("%-12s %9.0f %6.2f %10.0f %10.0f %10.0f %8.0f/%-9.0f %6s %6s %8.4f" % (
                case[0], med(runs, "sps"), ratio, med(runs, "push"), med(runs, "pull"),
                med(runs, "emb"), med(runs, "rx"), med(runs, "tx"), use, hits,
                statistics.mean(r["auc"] for r in runs)))
    print("(B/st: payload bytes per worker step, PsClient's count: push = keys and "
          "gradients sent, pull = keys sent and rows received; emb pull: the embedding "
          "tables' part of the pull; wire: worker 1's link per step, in (rows) / out "
          "(gradients, keys), TCP/IP and HTTP/2 included; use: worker 1's link, the busier "
          "direction over its training time against the rate; hits: the cache's hit rate "
          "(worker 1); AUC: mean over rounds; ratio: samples/s against fp32 in the same "
          "round, median)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 1 round, unshaped and 1G, short W, 40k lines, "
                         "4 job cases, a bound search of 2 tries from 250M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="unshaped,10G,2.5G,1G")
    ap.add_argument("--staleness", type=int, default=2, help="SSP(s) of the job")
    ap.add_argument("--no_bound", dest="bound", action="store_false",
                    help="skip the search for the network-bound rate")
    ap.add_argument("--bound_start", default="1G", help="the first rate the search tries")
    ap.add_argument("--bound_tries", type=int, default=6)
    ap.add_argument("--only", choices=["w", "job"])
    ap.add_argument("--cases", default="", help="comma-separated job cases (default: all)")
    ap.add_argument("--lines", type=int, default=400000, help="generated training lines")
    ap.add_argument("--max_steps", type=int, default=0, help="per worker; 0: one epoch")
    ap.add_argument("--w_steps", type=int, default=2000)
    ap.add_argument("--w_warmup", type=int, default=200)
    ap.add_argument("--w_dim", type=int, default=64)
    ap.add_argument("--config", default="opt", help="compilation mode of the binaries")
    ap.add_argument("--bin_dir", help="binaries laid out like bazel-bin (default: bazel info)")
    ap.add_argument("--dir", default="/tmp/net_bench", help="data and logs")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
        args.rates = "unshaped,1G"
        args.w_steps, args.w_warmup = 150, 30
        args.lines = 40000
        args.bound_start, args.bound_tries = "250M", 2
        args.cases = args.cases or "fp32,bf16 wire,cache,all on fp32"
    args.cases = [c for c in args.cases.split(",") if c]
    reason = netbox.available()
    if reason:
        sys.exit("the cluster-in-a-box harness cannot run here: " + reason)
    bin_dir = args.bin_dir or bench_util.bazel_bin(args.config)
    bins = {n: os.path.join(bin_dir, p) for n, p in [
        ("ps_server", "server/ps_server"), ("ps_worker", "worker/ps_worker"),
        ("ps_scheduler", "scheduler/ps_scheduler"), ("server_rpc_bench", "bench/server_rpc_bench")]}
    os.environ.setdefault("SHARDPS_NETBOX_CLI", os.path.join(bin_dir, "tests/testing/netbox_cli"))
    for p in list(bins.values()) + [os.environ["SHARDPS_NETBOX_CLI"]]:
        if not os.path.exists(p):
            sys.exit("missing %s: build it first (see --help)" % p)
    rates = [parse_rate(r) for r in args.rates.split(",")]
    log_dir = os.path.join(args.dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    print("net_bench: rates %s, %d round(s), binaries %s, logs %s" % (
        ", ".join(rate_name(r) for r in rates), args.rounds, bin_dir, log_dir), flush=True)
    best = None
    data_dir = os.path.join(args.dir, "data-%d" % args.lines)
    if args.only != "w":
        best = bench_util.generate_data(bin_dir, data_dir, args.lines,
                                        max(2000, args.lines // 8))
    box = Box(1 + len(SERVER_HOSTS) + len(WORKER_HOSTS), log_dir)
    try:
        if args.only != "job":
            run_w(box, bins, args, rates)
        if args.only != "w":
            run_job(box, bins, args, rates, data_dir, best)
    finally:
        box.close()


if __name__ == "__main__":
    main()
