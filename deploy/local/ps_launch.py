#!/usr/bin/env python3
"""ps_launch: runs a whole shardps job on this machine.

Starts ps_scheduler, N ps_server and M ps_worker processes on 127.0.0.1 with
free ports, prefixes every log line with the process's role and index, shows
one progress line, stops everything cleanly on Ctrl-C, and exits with the
job's status (0 done, 1 failed, 130 interrupted).

The launcher is a supervisor, like a Kubernetes StatefulSet or a Slurm step
loop: a process that dies (a non-zero exit or a signal) is started again with
the same flags, up to --max_restarts times each; the scheduler owns recovery
(a restarted server is restored and the job rolled back to its last
checkpoint; a restarted scheduler takes the running job over; a restarted
worker resumes from its last step). Exit 0 of a server or worker means the
job ended for it. With no config, the embedded default job runs: DLRM on
generated Criteo-format data (generated once, cached in data/synthetic),
2 servers, 2 workers, SSP(2), evaluated every half epoch, keeping the best
checkpoint and stopping early. Every setting can be overridden by flags.

Your own model: --model tower.pt makes a TorchScript module (python3
models/script.py writes one) the job's model: model.kind TORCHSCRIPT with
the file's absolute path (docs/models.md).

Checkpoints: --checkpoint_dir is used as given (a job found there is
resumed). Without it, a config whose checkpoint.dir is relative (the default
config's) gets <run_dir>/checkpoints, emptied first: each run is a new job.

Serving replicas: --replicas N starts N ps_replica processes (supervised like
the others) that follow the job (--replica_source: the servers' delta stream
by default, or the checkpoint files) and serve its model on 127.0.0.1 (each prints its address: "[replica-0 ] PS_REPLICA_LISTENING
..."). At the job's end the launcher waits (up to --replica_wait_sec) for each
to serve the job's last complete checkpoint, then prints for each one its
last version and whether its table hash equals ps_table_hash's of that
checkpoint's files:

  [ps_launch ] replica-0: last version 157 (the job's last checkpoint), table hash 6eea4c693b997df8 = ps_table_hash's: yes

and, for a replica on the stream, its train to serve over every push it
timed (replica/replica.h "Train to serve"):

  [ps_launch ] replica-0: train to serve, from a push's apply on a server to the first version served that holds it: p50 1.410 s, p99 2.764 s, max 2.987 s (5558 pushes)
"""

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", ".."))
DEFAULT_CONFIG = os.path.join(ROOT, "configs", "default.pbtxt")


_BAZEL_BIN = []


def bazel_bin():
    """Bazel's output directory of the default configuration (`bazel info`),
    which, unlike the bazel-bin link, does not follow the last build's
    configuration; None without Bazel or outside the workspace."""
    if not _BAZEL_BIN:
        try:
            out = subprocess.run(["bazel", "info", "bazel-bin"], cwd=ROOT, capture_output=True,
                                 text=True, timeout=120)
            _BAZEL_BIN.append(out.stdout.strip() if out.returncode == 0 else None)
        except (OSError, subprocess.TimeoutExpired):
            _BAZEL_BIN.append(None)
    return _BAZEL_BIN[0]


def find_binary(name, bin_dir):
    """Path of one of our binaries: --bin_dir, Bazel's default output
    directory, the bazel-bin link, or PATH."""
    rel = {
        "ps_scheduler": "scheduler/ps_scheduler",
        "ps_status": "scheduler/ps_status",
        "ps_server": "server/ps_server",
        "ps_worker": "worker/ps_worker",
        "ps_datagen": "worker/data/ps_datagen",
        "ps_config_check": "common/ps_config_check",
        "ps_replica": "replica/ps_replica",
        "ps_table_hash": "replica/ps_table_hash",
    }[name]
    for base in [bin_dir, bin_dir or bazel_bin(), os.path.join(ROOT, "bazel-bin")]:
        if base:
            for cand in (os.path.join(base, rel), os.path.join(base, name)):
                if os.access(cand, os.X_OK):
                    return cand
    for d in os.environ.get("PATH", "").split(os.pathsep):
        cand = os.path.join(d, name)
        if os.access(cand, os.X_OK):
            return cand
    sys.exit("ps_launch: cannot find %s (build with ./shardps build, or pass --bin_dir)" % name)


class Proc:
    """One child process; its output is prefixed and echoed by a thread."""

    def __init__(self, role, index, argv, log_lock, quiet, on_line=None):
        self.role, self.index, self.argv = role, index, argv
        self.log_lock, self.quiet, self.on_line = log_lock, quiet, on_line
        self.restarts = 0
        self.listening = None
        self.result_lines = []
        self.version = None  # A replica's last version served: (clock, table hash).
        # A replica's train to serve of every push so far: (n, p50, p99, max).
        self.push_to_serve = None
        self.start()

    @property
    def name(self):
        return "%s%s" % (self.role, "" if self.index is None else "-%d" % self.index)

    def start(self):
        self.ready = threading.Event()
        self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                      start_new_session=True)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        for line in self.popen.stdout:
            line = line.rstrip("\n")
            m = re.match(r"PS_(SCHEDULER|SERVER|REPLICA)_LISTENING (\S+)", line)
            if m:
                self.listening = m.group(2)
                self.ready.set()
            m = re.search(r"replica: serving version (\d+) \(\d+ rows, table hash ([0-9a-f]+)\)",
                          line)
            if m:
                self.version = (int(m.group(1)), m.group(2))
            m = re.search(r"pushes; all (\d+): p50 (\S+)s p99 (\S+)s max (\S+)s\)", line)
            if m:
                self.push_to_serve = m.groups()
            if line.startswith("PS_"):
                self.result_lines.append(line)
            if self.on_line:
                self.on_line(self, line)
            if not self.quiet or line.startswith("PS_") or line[:1] in ("E", "W", "F"):
                with self.log_lock:
                    sys.stdout.write("\r\033[K[%-10s] %s\n" % (self.name, line))
                    sys.stdout.flush()
        self.ready.set()

    def poll(self):
        return self.popen.poll()

    def signal(self, sig):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=DEFAULT_CONFIG, help="job config (text proto)")
    p.add_argument("--servers", type=int, default=0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--mode", choices=["BSP", "SSP", "ASP"])
    p.add_argument("--staleness", type=int, default=-1)
    p.add_argument("--train_files", default="", help="comma list (real Criteo files)")
    p.add_argument("--eval_files", default="")
    p.add_argument("--data_dir", default=os.path.join(ROOT, "data", "synthetic"),
                   help="where generated data is cached")
    p.add_argument("--max_steps", type=int, default=0)
    p.add_argument("--epochs", type=int, default=0)
    p.add_argument("--checkpoint_dir", default="",
                   help="checkpoints (a job started again over it resumes from the latest); "
                   "default: <run_dir>/checkpoints, emptied first, if the config's dir is relative")
    p.add_argument("--max_restarts", type=int, default=3,
                   help="times each process is started again after it died")
    p.add_argument("--bin_dir", default="")
    p.add_argument("--run_dir", default=os.path.join(ROOT, "runs", "latest"))
    p.add_argument("--quiet", action="store_true", help="only warnings, errors and results")
    p.add_argument("--wire", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--eval_every_steps", type=int, default=0,
                   help="evaluate a checkpoint every N clocks (needs --checkpoint_dir)")
    p.add_argument("--eval_every_epochs", type=float, default=0,
                   help="evaluate a checkpoint every X epochs, e.g. 0.5 (replaces the config's "
                        "eval_every_steps)")
    p.add_argument("--dense_compression", type=float, default=0,
                   help="training.dense_compression.ratio, in (0, 1] (top-k with error feedback)")
    p.add_argument("--model", default="",
                   help="a TorchScript module (python3 models/script.py writes one): the job's "
                   "model instead of the config's (model.kind TORCHSCRIPT)")
    p.add_argument("--mixed_precision", choices=["FP32", "BF16", "FP16"],
                   help="training.mixed_precision of the workers' forward pass")
    p.add_argument("--heartbeat_ms", type=int, default=0)
    p.add_argument("--dead_after_ms", type=int, default=0)
    p.add_argument("--worker_flag", action="append", default=[],
                   help="extra flag for every worker (repeatable)")
    p.add_argument("--server_flag", action="append", default=[])
    p.add_argument("--replicas", type=int, default=0,
                   help="serving replicas (ps_replica) following the job")
    p.add_argument("--replica_source", choices=["stream", "files"], default="stream",
                   help="what replicas follow: the servers' delta stream (each checkpoint cut, "
                        "served before its files are written; the job secret and TLS flags) or "
                        "the checkpoint files")
    p.add_argument("--replica_flag", action="append", default=[],
                   help="extra flag for every replica (repeatable), e.g. --replica_flag=--poll_ms=50")
    p.add_argument("--replica_wait_sec", type=float, default=60,
                   help="at the job's end, how long to wait for each replica to serve the last "
                        "checkpoint before reporting")
    # Mutual TLS on every gRPC channel (see docs/operations.md, TLS); all three or none.
    p.add_argument("--tls_cert", default="", help="PEM certificate for every process")
    p.add_argument("--tls_key", default="", help="PEM private key of --tls_cert")
    p.add_argument("--tls_ca", default="", help="PEM CA certificate peers must chain to")
    p.add_argument("--job_secret_file", default="",
                   help="the job's secret (mode 0600); default: a new one in <run_dir>/job.secret")
    args = p.parse_args()
    if args.replicas < 0:
        p.error("--replicas must be >= 0")
    tls = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(tls) and not all(tls):
        p.error("TLS needs all of --tls_cert, --tls_key and --tls_ca or none")
    for path in filter(None, tls):
        if not os.access(path, os.R_OK):
            p.error("cannot read TLS file %s" % path)
    return args


def tls_flags(args):
    """The flags every process (and ps_status) gets to be a member of the job:
    the job secret (docs/security.md, "Membership") and the TLS files, if any."""
    flags = ["--job_secret_file=" + os.path.abspath(args.job_secret_file)]
    if args.tls_cert:
        flags += ["--tls_cert=" + os.path.abspath(args.tls_cert),
                  "--tls_key=" + os.path.abspath(args.tls_key), "--tls_ca=" + os.path.abspath(args.tls_ca)]
    return flags


def replica_flags(args, address):
    """A replica's flags: on the stream, the scheduler's address and a
    member's flags (it reads the servers' versions, as a worker pulls);
    on the files, the TLS flags alone (it only reads files and serves).
    Either way its versions are built at nice 19: the launcher puts the
    replicas on training's host, and a version then takes the CPU training
    leaves idle (--replica_flag=--build_nice=0 undoes it)."""
    nice = ["--build_nice=19"]
    if args.replica_source == "stream":
        return ["--scheduler=" + address] + tls_flags(args) + nice
    if not args.tls_cert:
        return nice
    return ["--tls_cert=" + os.path.abspath(args.tls_cert),
            "--tls_key=" + os.path.abspath(args.tls_key), "--tls_ca=" + os.path.abspath(args.tls_ca)] + nice


def table_hash(args, ckpt_dir, clock=None):
    """ps_table_hash of the checkpoint at `clock` (the latest complete one if
    None): (clock, hash) or None if it cannot be read."""
    argv = [find_binary("ps_table_hash", args.bin_dir), "--checkpoint_dir=" + ckpt_dir]
    if clock is not None:
        argv.append("--clock=%d" % clock)
    out = subprocess.run(argv, capture_output=True, text=True)
    m = re.search(r"PS_TABLE_HASH clock=(\d+) hash=([0-9a-f]+)", out.stdout)
    return (int(m.group(1)), m.group(2)) if out.returncode == 0 and m else None


def report_replicas(args, replicas, ckpt_dir, say):
    """At the job's end: waits for every replica to serve the job's last
    complete checkpoint (up to --replica_wait_sec), then says for each its
    last version and whether its table hash equals ps_table_hash's of that
    checkpoint. Returns how many replicas were not equal (or served nothing)."""
    if not replicas:
        return 0
    last = table_hash(args, ckpt_dir)
    deadline = time.time() + args.replica_wait_sec
    while last and time.time() < deadline:
        if all(r.version and r.version[0] >= last[0] for r in replicas):
            break
        time.sleep(0.2)
    bad = 0
    for r in replicas:
        if not r.version:
            say("%s: served no version (no complete checkpoint in %s?)" % (r.name, ckpt_dir))
            bad += 1
            continue
        clock, served_hash = r.version
        files = last if last and last[0] == clock else table_hash(args, ckpt_dir, clock)
        equal = files is not None and files[1] == served_hash
        bad += 0 if equal else 1
        say("%s: last version %d (%s), table hash %s %s ps_table_hash's: %s" % (
            r.name, clock,
            "the job's last checkpoint" if last and clock == last[0]
            else "the job's last checkpoint is %s" % (last[0] if last else "unknown"),
            served_hash, "=" if equal else "!=",
            "yes" if equal else "NO (files: %s)" % (files[1] if files else "unreadable")))
        if r.push_to_serve:
            n, p50, p99, most = r.push_to_serve
            say("%s: train to serve, from a push's apply on a server to the first version "
                "served that holds it: p50 %s s, p99 %s s, max %s s (%s pushes)" % (
                    r.name, p50, p99, most, n))
    return bad


def write_job_secret(path):
    """A new random secret, readable by its owner only (what the binaries require)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
    finally:
        os.close(fd)


def read_best(data_dir):
    best = {}
    try:
        with open(os.path.join(data_dir, "best.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    best[parts[0]] = parts[1]
    except OSError:
        pass
    return best


def free_port():
    """A free TCP port on 127.0.0.1 (the scheduler keeps it across restarts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def supervise(args, job_config, num_servers, num_workers, procs, stop_all, stopping, say,
              log_lock, status_bin, start, max_steps_m, replicas, ckpt_dir):
    """Starts every process of the job and restarts what dies, with the same
    flags, until the scheduler ends the job.

    Returns (scheduler Proc, failure reason or None)."""
    address = "127.0.0.1:%d" % free_port()
    sched_argv = [find_binary("ps_scheduler", args.bin_dir), "--config=" + job_config,
                  "--listen=" + address] + tls_flags(args)
    sched = Proc("scheduler", None, sched_argv, log_lock, args.quiet)
    procs.append(sched)
    if not sched.ready.wait(60) or not sched.listening:
        stop_all(signal.SIGKILL)
        return sched, "the scheduler did not start (see its log above)"
    say("scheduler at %s; starting %d servers and %d workers" % (address, num_servers, num_workers))
    for i in range(num_servers):
        procs.append(Proc("server", i, [find_binary("ps_server", args.bin_dir), "--config=" + job_config,
                                        "--scheduler=" + address, "--index=%d" % i]
                          + tls_flags(args) + args.server_flag, log_lock, args.quiet))
    for i in range(num_workers):
        procs.append(Proc("worker", i, [find_binary("ps_worker", args.bin_dir), "--config=" + job_config,
                                        "--scheduler=" + address, "--rank=%d" % i, "--wire=" + args.wire]
                          + tls_flags(args) + args.worker_flag, log_lock, args.quiet))
    for i in range(args.replicas):
        replicas.append(Proc("replica", i, [find_binary("ps_replica", args.bin_dir),
                                            "--config=" + job_config, "--checkpoint_dir=" + ckpt_dir,
                                            "--listen=127.0.0.1:0"]
                             + replica_flags(args, address) + args.replica_flag, log_lock,
                             args.quiet))
    for p in procs + replicas:
        say("started %s (pid %d)" % (p.name, p.popen.pid))
    last_progress = 0
    while True:
        time.sleep(0.2)
        if stopping["why"]:
            break
        sched = procs[0]
        rc = sched.poll()
        # 0 done, 1 failed, 2 bad flags or config: the job is over. Anything
        # else (a crash, a kill) leaves servers and workers running: the
        # scheduler started again takes the job over.
        if rc is not None and rc in (0, 1, 2):
            break
        for p in procs + replicas:
            rc = p.poll()
            if rc is None or (rc == 0 and p.role not in ("scheduler", "replica")):
                continue
            p.failed_with = rc  # Named in the final message if the job fails.
            if p.restarts >= args.max_restarts:
                if not getattr(p, "given_up", False):
                    p.given_up = True
                    say("%s exited with status %d and was restarted %d times already: not "
                        "again (the scheduler decides what the job does without it)" % (
                            p.name, rc, p.restarts))
                if p.role == "scheduler":
                    return p, "the scheduler kept dying (status %d)" % rc
                continue
            p.restarts += 1
            say("%s exited with status %d; starting it again with the same flags (%d of %d)" % (
                p.name, rc, p.restarts, args.max_restarts))
            p.thread.join(timeout=2)
            p.start()
            say("restarted %s (pid %d)" % (p.name, p.popen.pid))
        if time.time() - last_progress > 2:
            last_progress = time.time()
            st = subprocess.run([status_bin, "--scheduler=" + address, "--json"] + tls_flags(args),
                                capture_output=True, text=True)
            if st.returncode != 0:  # The scheduler is restarting, or ending the job.
                continue
            m = st.stdout
            state = re.search(r'"state":"([^"]*)"', m)
            step = re.search(r'"maxClock":"?(\d+)', m)
            sps = re.search(r'"samplesPerSec":([\d.e+]+)', m)
            loss = re.search(r'"trainLoss":([\d.e+-]+)', m)
            auc = re.search(r'"trainAuc":([\d.e+-]+)', m)
            line = "progress: step %s, %s samples/s, loss %s, AUC so far %s (train), %.0fs elapsed" % (
                step.group(1) if step else 0, "%.0f" % float(sps.group(1)) if sps else "-",
                "%.4f" % float(loss.group(1)) if loss else "-",
                "%.4f" % float(auc.group(1)) if auc else "-", time.time() - start)
            if state and state.group(1) not in ("running", "done"):
                line += " [%s]" % state.group(1)
            if max_steps_m and step and int(step.group(1)) > 0:
                total = int(max_steps_m.group(1))
                eta = (time.time() - start) * (total - int(step.group(1))) / int(step.group(1))
                line += ", ETA %.0fs" % max(eta, 0)
            with log_lock:
                sys.stdout.write("\r\033[K" + line)
                sys.stdout.flush()
    # The scheduler has exited; give the others a moment, then stop them.
    deadline = time.time() + 15
    for p in procs[1:]:
        while p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
    if stopping["why"] != "interrupted":
        report_replicas(args, replicas, ckpt_dir, say)
    stop_all(signal.SIGTERM)
    time.sleep(0.5)
    stop_all(signal.SIGKILL)
    for p in procs + replicas:
        p.thread.join(timeout=2)
    sched = procs[0]
    failed = None
    if stopping["why"] != "interrupted" and sched.poll() != 0:
        # The scheduler reports the job's failure; say why, and which other
        # processes exited with an error, rather than blame the scheduler.
        result = next((l for l in sched.result_lines if l.startswith("PS_JOB_RESULT")), "")
        why = re.search(r"state=failed: (.*?) samples=", result)
        failed = "the scheduler exited with status %s%s" % (
            sched.poll(), (" (the job failed: %s)" % why.group(1)) if why else "")
        others = ["%s (status %d)" % (p.name, p.failed_with) for p in procs[1:]
                  if getattr(p, "failed_with", None) is not None]
        if others:
            failed += "; processes that exited with an error: " + ", ".join(others)
    return sched, failed


def main():
    args = parse_args()
    os.makedirs(args.run_dir, exist_ok=True)
    if not args.job_secret_file:
        args.job_secret_file = os.path.join(args.run_dir, "job.secret")
        write_job_secret(args.job_secret_file)
    log_lock = threading.Lock()
    say = lambda msg: print("\r\033[K[ps_launch ] " + msg, flush=True)

    # The final config every process loads.
    job_config = os.path.join(args.run_dir, "job.pbtxt")
    check = [find_binary("ps_config_check", args.bin_dir), args.config, "--write=" + job_config,
             "--synthetic_dir=" + args.data_dir]
    for flag in ["servers", "workers", "staleness", "train_files", "eval_files", "max_steps",
                 "epochs", "checkpoint_dir", "heartbeat_ms", "dead_after_ms", "dense_compression",
                 "eval_every_steps", "eval_every_epochs"]:
        value = getattr(args, flag)
        if value not in (0, -1, ""):
            check.append("--%s=%s" % (flag, value))
    if args.mode:
        check.append("--mode=" + args.mode)
    if args.mixed_precision:
        check.append("--mixed_precision=" + args.mixed_precision)
    if args.model:
        if not os.path.isfile(args.model):
            sys.exit("ps_launch: --model %s: no such file" % args.model)
        # Absolute: every process reads it from its own working directory.
        check.append("--torchscript_file=" + os.path.abspath(args.model))
    out = subprocess.run(check, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("ps_launch: bad job config:\n" + out.stderr)
    text = open(job_config).read()
    ckpt = re.search(r'^checkpoint \{\n  dir: "(.*)"$', text, re.M)
    if ckpt and not args.checkpoint_dir and not os.path.isabs(ckpt.group(1)):
        # A relative dir would be each process's cwd's: the run gets its own.
        own = os.path.join(os.path.abspath(args.run_dir), "checkpoints")
        shutil.rmtree(own, ignore_errors=True)
        out = subprocess.run(check + ["--checkpoint_dir=" + own], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("ps_launch: bad job config:\n" + out.stderr)
        text = open(job_config).read()
        say("checkpoints in %s (a new job: emptied first; --checkpoint_dir to keep one)" % own)
    say(out.stdout.strip())
    every = re.search(r"eval_every_steps: (\d+)", text)
    if every and (args.train_files or "train_files:" in text) and not args.eval_every_steps:
        # A cadence in clocks fits one data size; in epochs it fits any.
        say("the config evaluates every %s clocks: for these files consider "
            "--eval_every_epochs 0.5 (evaluations slower than the cadence queue up, with their "
            "checkpoints)" % every.group(1))
    num_servers = int(re.search(r"num_servers: (\d+)", text).group(1))
    num_workers = int(re.search(r"num_workers: (\d+)", text).group(1))
    max_steps_m = re.search(r"max_steps: (\d+)", text)

    best = {}
    if not args.train_files and "train_files:" not in text:
        if not os.path.exists(os.path.join(args.data_dir, "best.txt")):
            lines = re.search(r"synthetic_train_lines: (\d+)", text)
            evals = re.search(r"synthetic_eval_lines: (\d+)", text)
            seed = re.search(r"synthetic_seed: (\d+)", text)
            # Several train files: the reader shuffles file order per epoch.
            gen = [find_binary("ps_datagen", args.bin_dir), "--out_dir=" + args.data_dir,
                   "--train_shards=8"]
            if lines: gen.append("--train_lines=" + lines.group(1))
            if evals: gen.append("--eval_lines=" + evals.group(1))
            if seed: gen.append("--seed=" + seed.group(1))
            os.makedirs(args.data_dir, exist_ok=True)
            say("generating synthetic Criteo-format data in %s (once; cached)" % args.data_dir)
            subprocess.run(gen, check=True)
        best = read_best(args.data_dir)

    ckpt_dir = None
    if args.replicas:
        m = re.search(r'^checkpoint \{\n  dir: "(.*)"$', text, re.M)
        if not m:
            sys.exit("ps_launch: --replicas needs checkpoints (checkpoint.dir in the config, or "
                     "--checkpoint_dir)")
        ckpt_dir = os.path.abspath(m.group(1))

    stopping = {"why": None}
    procs = []
    replicas = []

    def stop_all(sig=signal.SIGTERM):
        for p in procs + replicas:
            p.signal(sig)

    def on_sigint(signum, frame):
        stopping["why"] = "interrupted"
        say("stopping every process (Ctrl-C)")
        stop_all()

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigint)
    status_bin = find_binary("ps_status", args.bin_dir)
    start = time.time()
    sched, failed = supervise(args, job_config, num_servers, num_workers, procs, stop_all,
                              stopping, say, log_lock, status_bin, start, max_steps_m, replicas,
                              ckpt_dir)
    result = next((l for l in sched.result_lines if l.startswith("PS_JOB_RESULT")), "")
    print()
    say("job finished in %.0fs: %s" % (time.time() - start, result or "no result"))
    auc = re.search(r"eval_auc=([\d.]+)", result)
    ll = re.search(r"eval_logloss=([\d.]+)", result)
    recoveries = re.search(r"recoveries=(\d+) recovery_sec=([\d.]+)", result)
    if recoveries and int(recoveries.group(1)) > 0:
        say("the job recovered %s times, %s s in all (ps_status shows each recovery's phases)" % (
            recoveries.group(1), recoveries.group(2)))
    kept = re.search(r"best_clock=(\d+) best_auc=([\d.]+)", result)
    if kept and "state=done" in result:
        # Keep-best: the job's model is the kept checkpoint, not the last state.
        final_clock = re.search(r"max_clock=(\d+)", result)
        final = ("the final one" if final_clock and final_clock.group(1) == kept.group(1)
                 else "the final state's test AUC %s" % (auc.group(1) if auc else "?"))
        say("test AUC %s of the kept model: the best evaluated checkpoint, clock %s, what "
            "ps_score and ps_export load by default%s; %s" % (
                kept.group(2), kept.group(1),
                " (best achievable %s)" % best["best_auc"] if "best_auc" in best else "", final))
    elif auc and best and "state=done" in result:
        say("test AUC %s (best achievable %s), test logloss %s (best achievable %s)" % (
            auc.group(1), best.get("best_auc", "?"), ll.group(1) if ll else "?",
            best.get("best_logloss", "?")))
    if stopping["why"] == "interrupted":
        return 130
    if failed:
        say("job failed: " + failed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
