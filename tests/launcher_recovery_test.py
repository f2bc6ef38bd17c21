"""Recovery through the local launcher (deploy/local/ps_launch.py), which is a
supervisor: it starts again whatever dies, with the same flags, and leaves
recovery to the scheduler.

A BSP job with checkpoints runs once untouched and once while the test
SIGKILLs server 1 twice and the scheduler once (by the pids the launcher
prints): the second job must end done, with weights bit-identical to the
first (the XOR of the servers' PS_SERVER_RESULT checksums), and report its
recoveries.

Each kill is placed by the job's clock, read from the scheduler with
ps_status --json, and the next one waits for the recovery from the last
(the launcher restarted the process and the scheduler ended its
recovery): every worker step takes >= 20 ms, so the job cannot end before
its planned kills on any machine, and a slow one only makes it longer.

Run by //tests:launcher_recovery_test from the runfiles root (the binaries
are there); standard library only.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.getcwd()
LAUNCH = os.path.join(ROOT, "deploy", "local", "ps_launch.py")
PS_STATUS = os.path.join(ROOT, "scheduler", "ps_status")
STEPS = 360  # A worker's steps (its share of the data is 468).

sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import testkit  # noqa: E402  (tests/testing/testkit.py)

CONFIG = testkit.small_dlrm_tables() + """
name: "launcher-chaos"
data {
  format: CRITEO synthetic_dir: "data"
  synthetic_train_lines: 60000 synthetic_eval_lines: 5000 synthetic_seed: 5
}
training { batch_size: 128 epochs: 2 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 128 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
}
checkpoint { every_steps: 30 keep: 2 }
"""


class Launch:
    """One ps_launch.py run; its output lines are collected by a thread."""

    def __init__(self, tmp, name):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        config = os.path.join(self.dir, "job.pbtxt")
        with open(config, "w") as f:
            f.write(CONFIG)
        argv = [sys.executable, LAUNCH, "--config", config, "--run_dir", os.path.join(self.dir, "run"),
                "--data_dir", os.path.join(tmp, "data"), "--bin_dir", ROOT, "--quiet",
                "--checkpoint_dir", os.path.join(self.dir, "ckpt"), "--max_restarts", "3",
                "--worker_flag=--max_steps=%d" % STEPS, "--worker_flag=--step_delay_ms=20"]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.p.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n").replace("\r\x1b[K", ""))

    def text(self):
        with self.lock:
            return "\n".join(self.lines)

    def pid(self, name):
        """The pid of the latest incarnation of `name` (e.g. "server-1")."""
        found = re.findall(r"(?:started|restarted) %s \(pid (\d+)\)" % re.escape(name), self.text())
        return int(found[-1]) if found else None

    def status(self):
        """The scheduler's JobStatus (ps_status --json) as a dict, or None while
        it does not answer (not up yet, or restarting)."""
        m = re.search(r"scheduler at (\S+);", self.text())
        if not m:
            return None
        # A member's call: the launcher wrote the job's secret in its run dir.
        r = subprocess.run([PS_STATUS, "--scheduler", m.group(1), "--json",
                            "--job_secret_file=" + os.path.join(self.dir, "run", "job.secret")],
                           capture_output=True, text=True, timeout=60)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def wait_status(self, what, condition, timeout=180):
        """Polls status() until condition(status) holds; returns it. Fails the
        test, naming `what`, if the job ends first or after `timeout` s."""
        deadline = time.time() + timeout
        last = None
        while True:
            s = self.status()
            if s is not None:
                last = s
                if condition(s):
                    return s
                state = s.get("state", "")
                if state == "done" or state.startswith("failed"):
                    raise AssertionError("the job ended before %s: %s\n%s"
                                         % (what, brief(s), self.text()[-3000:]))
            if self.p.poll() is not None:
                raise AssertionError("the launcher exited before %s\n%s" % (what, self.text()[-3000:]))
            if time.time() > deadline:
                raise AssertionError("waited %ds for %s; last status: %s\n%s"
                                     % (timeout, what, brief(last), self.text()[-3000:]))
            time.sleep(0.05)

    def wait(self, timeout=600):
        rc = self.p.wait(timeout)
        self.thread.join(10)
        self.p.stdout.close()
        return rc

    def checksum(self):
        last = {}
        for m in re.finditer(r"PS_SERVER_RESULT index=(\d+) rows=\d+ weights_checksum=([0-9a-f]+)", self.text()):
            last[m.group(1)] = int(m.group(2), 16)
        h = 0
        for v in last.values():
            h ^= v
        return h, len(last)

    def result(self):
        m = re.search(r"job finished in \d+s: (PS_JOB_RESULT .*)", self.text())
        return m.group(1) if m else ""


def brief(s):
    """A JobStatus dict in one line (uint64 fields are strings in JSON; zeros
    are left out)."""
    if s is None:
        return "none"
    return "state=%s min_clock=%s max_clock=%s generation=%s recoveries=%s" % (
        s.get("state"), s.get("minClock", "0"), s.get("maxClock", "0"), s.get("generation", "0"),
        [(r.get("kind"), r.get("complete", False)) for r in s.get("recoveries", [])])


def min_clock(s):
    return int(s.get("minClock", "0"))


def recovered(s, generation):
    """In a generation after `generation`, running, every recovery complete."""
    return (int(s.get("generation", "0")) > generation and s.get("state") == "running"
            and all(r.get("complete", False) for r in s.get("recoveries", [])))


class LauncherRecoveryTest(unittest.TestCase):

    def test_bsp_job_through_the_launcher_survives_kills_bit_identical(self):
        tmp = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
        clean = Launch(tmp, "clean")
        self.assertEqual(clean.wait(), 0, clean.text()[-3000:])
        clean_sum, servers = clean.checksum()
        self.assertEqual(servers, 2, clean.text()[-3000:])
        self.assertIn("state=done", clean.result())

        chaos = Launch(tmp, "chaos")
        rng = random.Random(11)
        kills = []
        # (victim, the clock to kill it at): checkpoints every 30 clocks;
        # the last kill comes >= 100 clocks before the end.
        plan = [("server-1", 50 + rng.randrange(30)), ("scheduler", 140 + rng.randrange(30)),
                ("server-1", 230 + rng.randrange(30))]
        self.assertLessEqual(plan[-1][1] + 100, STEPS)
        for victim, clock in plan:
            s = chaos.wait_status("every worker at clock %d" % clock,
                                  lambda s: s.get("state") == "running" and min_clock(s) >= clock)
            pid = chaos.pid(victim)
            self.assertIsNotNone(pid, "no pid for %s\n%s" % (victim, chaos.text()[-3000:]))
            os.kill(pid, signal.SIGKILL)  # ProcessLookupError if it had exited.
            kills.append((victim, min_clock(s)))
            # The launcher starts it again, and the job recovers.
            chaos.wait_status(
                "%s restarted" % victim,
                lambda s: chaos.pid(victim) not in (None, pid) and s.get("state") == "running")
            if victim == "scheduler":  # A takeover: the clocks go on from where they were.
                chaos.wait_status("the clocks going on after the takeover",
                                  lambda s: s.get("state") == "running" and min_clock(s) > clock)
            else:  # A rollback to the last checkpoint, in a new generation.
                generation = int(s.get("generation", "0"))
                chaos.wait_status("the recovery from killing %s" % victim,
                                  lambda s: recovered(s, generation))
        self.assertEqual(len(kills), 3, "the job ended before every kill\n" + chaos.text()[-3000:])
        self.assertEqual(chaos.wait(), 0, chaos.text()[-5000:])
        chaos_sum, servers = chaos.checksum()
        self.assertEqual(servers, 2)
        text = chaos.text()
        # Each kill found its process running: the launcher saw it die by SIGKILL.
        self.assertEqual(text.count("server-1 exited with status -9; starting it again"), 2, text[-5000:])
        self.assertEqual(text.count("scheduler exited with status -9; starting it again"), 1, text[-5000:])
        result = chaos.result()
        self.assertIn("state=done", result)
        recoveries = int(re.search(r"recoveries=(\d+)", result).group(1))
        # The scheduler that ends the job counts its own: the kill after it.
        self.assertGreaterEqual(recoveries, 1, result)
        self.assertEqual(chaos_sum, clean_sum, "weights differ after the recoveries\n" + text[-5000:])
        print("through the launcher: weights %016x without kills, %016x with kills %s; %s"
              % (clean_sum, chaos_sum, kills, result))


if __name__ == "__main__":
    unittest.main(verbosity=2)
