"""A small real shardps job for the monitoring tests: ps_scheduler, 2 ps_server
and 2 ps_worker on 127.0.0.1, every process with its Prometheus exposer on a
free port (SHARDPS_METRICS_LISTEN=127.0.0.1:0) and the scheduler's status page
(SHARDPS_STATUS_LISTEN=127.0.0.1:0). The binaries come from the test's
runfiles (cwd = the runfiles root); the data is made by ps_datagen.

By default the job trains until it is stopped (a million steps a worker, on
as many epochs of the data as that takes): the tests that look at a running
job find it running however long they take, on any machine, and stop it
when they are done.

Usage:
    with LocalJob(tmpdir, step_delay_ms=40) as job:
        job.metrics   # {"scheduler": "127.0.0.1:p", "server-0": ..., "worker-1": ...}
        job.status    # the status page's host:port
        job.get_json("/status.json")
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.getcwd(), "tests", "testing"))
import testkit  # noqa: E402  (tests/testing/testkit.py)

CONFIG = testkit.small_dlrm_tables(
    sparse_optimizer="rowwise_adagrad { learning_rate: 0.05 }",
    dense_optimizer="adagrad { learning_rate: 0.02 }",
    bottom_mlp="32, 8", top_mlp="32") + """
name: "monitor"
data { format: CRITEO synthetic_dir: "%(data)s" }
training { batch_size: 128 epochs: 100000 shuffle_seed: 7 prefetch: true intra_op_threads: 1 }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 64
  mode: SSP staleness: 2
  heartbeat_ms: 200 dead_after_ms: 3000 server_deadline_ms: 20000
}
"""


def binary(rel):
    return os.path.join(os.getcwd(), rel)


class _Proc:
    """A child whose stdout lines are collected by a thread."""

    def __init__(self, name, argv, env, log_dir):
        self.name = name
        self.log = open(os.path.join(log_dir, name + ".log"), "w")
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, prefix, timeout=60):
        """The rest of the first line starting with `prefix`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError("%s exited (code %s) before printing %s"
                                   % (self.name, self.p.wait(), prefix))
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise RuntimeError("%s: no %s line in %ss" % (self.name, prefix, timeout))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class LocalJob:
    def __init__(self, tmpdir, steps=1000000, step_delay_ms=40):
        self.tmpdir = tmpdir
        self.steps = steps
        self.step_delay_ms = step_delay_ms
        self.procs = []
        self.metrics = {}
        self.status = None

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _start(self):
        data = os.path.join(self.tmpdir, "data")
        subprocess.run([binary("worker/data/ps_datagen"), "--out_dir=" + data,
                        "--train_lines=20000", "--eval_lines=2000"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config = os.path.join(self.tmpdir, "job.pbtxt")
        with open(config, "w") as f:
            f.write(CONFIG % {"data": data})
        env = dict(os.environ, SHARDPS_METRICS_LISTEN="127.0.0.1:0",
                   SHARDPS_STATUS_LISTEN="127.0.0.1:0")
        logs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", self.tmpdir)
        sched = self._spawn("scheduler", ["scheduler/ps_scheduler", "--config=" + config], env, logs)
        self.metrics["scheduler"] = sched.wait_line("PS_METRICS_LISTENING ")
        self.status = sched.wait_line("PS_STATUS_LISTENING ")
        address = sched.wait_line("PS_SCHEDULER_LISTENING ")
        for i in range(2):
            s = self._spawn("server-%d" % i, ["server/ps_server", "--config=" + config,
                                              "--scheduler=" + address, "--index=%d" % i],
                            env, logs)
            self.metrics["server-%d" % i] = s.wait_line("PS_METRICS_LISTENING ")
        for r in range(2):
            w = self._spawn("worker-%d" % r, [
                "worker/ps_worker", "--config=" + config, "--scheduler=" + address,
                "--rank=%d" % r, "--max_steps=%d" % self.steps,
                "--step_delay_ms=%d" % self.step_delay_ms], env, logs)
            self.metrics["worker-%d" % r] = w.wait_line("PS_METRICS_LISTENING ")

    def _spawn(self, name, argv, env, logs):
        proc = _Proc(name, [binary(argv[0])] + argv[1:], env, logs)
        self.procs.append(proc)
        return proc

    def get(self, address, path, timeout=10):
        with urllib.request.urlopen("http://%s%s" % (address, path), timeout=timeout) as r:
            return r.read().decode()

    def get_json(self, path):
        return json.loads(self.get(self.status, path))

    def wait_running(self, min_points=3, timeout=60):
        """The status JSON once the job runs and has `min_points` throughput points."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.get_json("/status.json")
            sps = [v for v in s["history"]["samples_per_sec"] if v]
            if s["state"] == "running" and len(sps) >= min_points:
                return s
            time.sleep(0.5)
        raise RuntimeError("job not running with throughput after %ss: %s" % (timeout, s))

    def stop(self):
        for p in reversed(self.procs):
            p.stop()
