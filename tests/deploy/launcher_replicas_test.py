"""ps_launch.py --replicas (deploy/local/ps_launch.py): a small BSP job with
delta checkpoints every 10 clocks runs through the launcher with two serving
replicas (on the servers' delta stream, the launcher's default). At the job's end the launcher must say, for each replica, that its
last version is the job's last checkpoint and that its table hash equals
ps_table_hash's of that checkpoint's files; the test checks that line against
ps_table_hash itself, and that the launcher exits 0 with no process left.

Run by //tests/deploy:launcher_replicas_test from the runfiles root (the
binaries are there); standard library only.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.getcwd()
LAUNCH = os.path.join(ROOT, "deploy", "local", "ps_launch.py")
TABLE_HASH = os.path.join(ROOT, "replica", "ps_table_hash")

sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import testkit  # noqa: E402  (tests/testing/testkit.py)

CONFIG = testkit.small_dlrm_tables() + """
name: "launcher-replicas"
data {
  format: CRITEO synthetic_dir: "data"
  synthetic_train_lines: 20000 synthetic_eval_lines: 2000 synthetic_seed: 5
}
training { batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 }
cluster {
  num_servers: 1 num_workers: 1 num_partitions: 64 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
}
checkpoint { every_steps: 10 keep: 100 delta: true }
"""


class LauncherReplicasTest(unittest.TestCase):
    def test_replicas_report_their_last_version_and_hash(self):
        tmp = tempfile.mkdtemp(prefix="launcher_replicas_", dir=os.environ.get("TEST_TMPDIR"))
        config = os.path.join(tmp, "job.pbtxt")
        with open(config, "w") as f:
            f.write(CONFIG)
        ckpt = os.path.join(tmp, "ckpt")
        argv = [sys.executable, LAUNCH, "--config", config, "--run_dir", os.path.join(tmp, "run"),
                "--data_dir", os.path.join(tmp, "data"), "--bin_dir", ROOT, "--quiet",
                "--checkpoint_dir", ckpt, "--worker_flag=--max_steps=60",
                "--worker_flag=--step_delay_ms=50", "--replicas", "2",
                "--replica_flag=--poll_ms=50"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        text = out.stdout.replace("\r\x1b[K", "")
        self.assertEqual(out.returncode, 0, text[-4000:] + out.stderr[-2000:])
        files = subprocess.run([TABLE_HASH, "--checkpoint_dir=" + ckpt], capture_output=True,
                               text=True)
        m = re.search(r"PS_TABLE_HASH clock=(\d+) hash=([0-9a-f]+)", files.stdout)
        self.assertIsNotNone(m, files.stdout + files.stderr)
        last, want = int(m.group(1)), m.group(2)
        self.assertGreater(last, 0)
        for i in range(2):
            line = re.search(r"replica-%d: last version (\d+) \(([^)]*)\), table hash ([0-9a-f]+) "
                             r"(=|!=) ps_table_hash's: (\S+)" % i, text)
            self.assertIsNotNone(line, "no report for replica-%d\n%s" % (i, text[-4000:]))
            self.assertEqual(int(line.group(1)), last, line.group(0))
            self.assertEqual(line.group(2), "the job's last checkpoint", line.group(0))
            self.assertEqual(line.group(3), want, line.group(0))
            self.assertEqual(line.group(5), "yes", line.group(0))
            print(line.group(0))
            self.assertIn("PS_REPLICA_LISTENING", text)
        # Nothing of the job is left running.
        left = subprocess.run(["pgrep", "-f", "--", "--checkpoint_dir=" + ckpt],
                              capture_output=True, text=True)
        self.assertEqual(left.stdout.strip(), "", "processes left: " + left.stdout)


if __name__ == "__main__":
    unittest.main()
