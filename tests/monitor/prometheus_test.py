"""Scrapes a running local job with Debian's real Prometheus server and checks
through its HTTP API that every process's series arrive: workers' samples and
step-time split, servers' table rows and RPC histograms, the scheduler's
clocks, member states and job state.

Run by //tests/monitor:prometheus_test (cwd = the runfiles root).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.getcwd(), "tests", "testing"))
from local_job import LocalJob  # noqa: E402  (beside this file)
from testkit import free_port  # noqa: E402  (tests/testing/testkit.py)

PROMETHEUS = "/usr/bin/prometheus"


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # Trains until cls.job.stop(): running whatever the tests take.
        cls.job = LocalJob(cls.tmp, step_delay_ms=40).__enter__()
        cls.addClassCleanup(cls.job.stop)
        targets = "\n".join(
            "  - targets: ['%s']\n    labels: {process: '%s'}" % (addr, name)
            for name, addr in sorted(cls.job.metrics.items()))
        config = os.path.join(cls.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
                    "scrape_configs:\n- job_name: shardps\n  static_configs:\n" + targets + "\n")
        cls.prom_address = "127.0.0.1:%d" % free_port()
        log = open(os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.tmp),
                                "prometheus.log"), "w")
        cls.prom = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(cls.tmp, "tsdb"),
             "--web.listen-address=" + cls.prom_address],
            stdout=log, stderr=log)

        def stop_prometheus():
            cls.prom.terminate()
            cls.prom.wait(20)
            log.close()
        cls.addClassCleanup(stop_prometheus)
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen("http://%s/-/ready" % cls.prom_address, timeout=2)
                break
            except OSError:
                if time.time() > deadline or cls.prom.poll() is not None:
                    raise
                time.sleep(0.3)

    def query(self, promql):
        url = "http://%s/api/v1/query?%s" % (self.prom_address,
                                             urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        self.assertEqual(body["status"], "success", body)
        return body["data"]["result"]

    def wait_for(self, promql, want, timeout=45):
        """Polls `promql` until want(result) holds; returns the result."""
        deadline = time.time() + timeout
        while True:
            result = self.query(promql)
            if want(result) or time.time() > deadline:
                return result
            time.sleep(1)

    @staticmethod
    def values(result):
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}

    def test_every_process_is_scraped(self):
        up = self.wait_for('up{job="shardps"} == 1', lambda r: len(r) == 5)
        self.assertEqual(sorted(r["metric"]["process"] for r in up),
                         ["scheduler", "server-0", "server-1", "worker-0", "worker-1"])

    def test_worker_series(self):
        r = self.wait_for("shardps_worker_samples_total > 0", lambda r: len(r) == 2)
        self.assertEqual(sorted(x["metric"]["rank"] for x in r), ["0", "1"])
        r = self.wait_for("shardps_worker_samples_per_second > 0", lambda r: len(r) == 2)
        self.assertEqual(len(r), 2)
        r = self.wait_for("shardps_worker_train_loss > 0", lambda r: len(r) == 2)
        for v in self.values(r).values():
            self.assertLess(v, 2.0)  # A logloss, not garbage.
        phases = self.query('shardps_worker_step_seconds_total{rank="0"}')
        self.assertEqual(sorted(x["metric"]["phase"] for x in phases),
                         ["compute", "data", "pull", "push", "wait"])
        compute = self.query('shardps_worker_step_seconds_total{phase="compute"} > 0')
        self.assertEqual(len(compute), 2)

    def test_server_series(self):
        r = self.wait_for('shardps_table_rows{table="categorical"} > 0', lambda r: len(r) == 2)
        self.assertEqual(sorted(x["metric"]["process"] for x in r), ["server-0", "server-1"])
        r = self.wait_for('shardps_table_bytes{table="categorical"} > 0', lambda r: len(r) == 2)
        self.assertEqual(len(r), 2)
        r = self.wait_for('shardps_table_rows_admitted_total{table="categorical"} > 0',
                          lambda r: len(r) == 2)
        self.assertEqual(len(r), 2)
        for rpc in ("pull", "push"):
            r = self.wait_for('sum(shardps_server_requests_total{rpc="%s"}) > 0' % rpc,
                              lambda r: len(r) == 1)
            self.assertEqual(len(r), 1, rpc)
            r = self.wait_for('sum(shardps_server_payload_bytes_total{rpc="%s"}) > 0' % rpc,
                              lambda r: len(r) == 1)
            self.assertEqual(len(r), 1, rpc)
        # The latency histogram answers a quantile query.
        r = self.wait_for('histogram_quantile(0.9, sum by (le) '
                          '(rate(shardps_server_request_seconds_bucket{rpc="pull"}[5s]))) > 0',
                          lambda r: len(r) == 1)
        self.assertEqual(len(r), 1)
        r = self.wait_for("sum(rate(shardps_server_optimizer_rows_applied_total[5s])) > 0",
                          lambda r: len(r) == 1)
        self.assertEqual(len(r), 1)

    def test_scheduler_series(self):
        r = self.wait_for("shardps_scheduler_worker_clock > 0", lambda r: len(r) == 2)
        self.assertEqual(sorted(x["metric"]["rank"] for x in r), ["0", "1"])
        # The job's clocks as the scheduler exports them move on: every
        # worker's clock, and the minimum over them, pass the maximum of an
        # earlier scrape by 100 clocks (at 25 steps/s at most, more than the
        # 1 s between scrapes can hide: a stalled job's would not; with every
        # worker dead the minimum is the maximum).
        r = self.wait_for("shardps_scheduler_max_clock > 0", lambda r: len(r) == 1)
        self.assertEqual(len(r), 1, "no max clock above 0")
        mark = int(float(r[0]["value"][1])) + 100
        r = self.wait_for("shardps_scheduler_worker_clock > %d" % mark, lambda r: len(r) == 2,
                          timeout=120)
        self.assertEqual(len(r), 2, "the workers' clocks did not pass %d: %s" % (mark, r))
        r = self.wait_for("shardps_scheduler_min_clock > %d" % mark, lambda r: len(r) == 1,
                          timeout=120)
        self.assertEqual(len(r), 1, "the min clock did not pass %d" % mark)
        spread = self.query("shardps_scheduler_max_spread")
        self.assertLessEqual(float(spread[0]["value"][1]), 3)  # SSP(2): at most s + 1.
        r = self.wait_for('shardps_scheduler_job_state{state="running"} == 1',
                          lambda r: len(r) == 1)
        self.assertEqual(len(r), 1)
        alive = self.wait_for('shardps_scheduler_member_state{state="alive"} == 1',
                              lambda r: len(r) == 4)
        self.assertEqual(sorted((x["metric"]["role"], x["metric"]["index"]) for x in alive),
                         [("server", "0"), ("server", "1"), ("worker", "0"), ("worker", "1")])


if __name__ == "__main__":
    unittest.main()
