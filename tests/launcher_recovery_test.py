"""Recovery through the local launcher (deploy/local/ps_launch.py), which is a
supervisor: it starts again whatever dies, with the same flags, and leaves
recovery to the scheduler.

A BSP job with checkpoints runs once untouched and once while the test
SIGKILLs server 1 twice and the scheduler once (by the pids the launcher
prints): the second job must end done, with weights bit-identical to the
first (the XOR of the servers' PS_SERVER_RESULT checksums), and report its
recoveries.

Run by //tests:launcher_recovery_test from the runfiles root (the binaries
are there); standard library only.
"""

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

CONFIG = """
name: "launcher-chaos"
tables {
  id: 1 name: "categorical" kind: SPARSE dim: 8 seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.05 } }
}
tables {
  id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
  optimizer { adam { learning_rate: 0.002 } }
}
model { kind: DLRM bottom_mlp: [16, 8] top_mlp: [16] dense_table: "mlp" }
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
                "--worker_flag=--max_steps=300", "--worker_flag=--step_delay_ms=10"]
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

    def complete_checkpoints(self):
        root = os.path.join(self.dir, "ckpt")
        if not os.path.isdir(root):
            return 0
        return max([int(d[5:]) for d in os.listdir(root)
                    if d.startswith("ckpt-") and os.path.exists(os.path.join(root, d, "MANIFEST"))],
                   default=0)

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
        last = 0
        kills = []
        for victim in ["server-1", "scheduler", "server-1"]:
            deadline = time.time() + 120
            while chaos.complete_checkpoints() <= last and chaos.p.poll() is None and time.time() < deadline:
                time.sleep(0.02)
            last = chaos.complete_checkpoints()
            time.sleep(rng.random() * 0.5)
            pid = chaos.pid(victim)
            if chaos.p.poll() is not None or pid is None:
                break
            os.kill(pid, signal.SIGKILL)
            kills.append(victim)
            time.sleep(2.5)  # Let the launcher restart it and the job recover.
        self.assertEqual(len(kills), 3, "the job ended before every kill\n" + chaos.text()[-3000:])
        self.assertEqual(chaos.wait(), 0, chaos.text()[-5000:])
        chaos_sum, servers = chaos.checksum()
        self.assertEqual(servers, 2)
        text = chaos.text()
        self.assertIn("server-1 exited with status", text)
        self.assertIn("scheduler exited with status", text)
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
