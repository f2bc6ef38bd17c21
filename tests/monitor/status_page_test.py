"""Loads the scheduler's status page of a running local job in Debian's headless
Chromium: checks that the member table and the curves (SVG paths) render from
/status.json, and saves a screenshot (status_page.png) under the test's
undeclared outputs (bazel-testlogs/tests/monitor/status_page_test/test.outputs).

Run by //tests/monitor:status_page_test (cwd = the runfiles root).
"""

import os
import re
import subprocess
import tempfile
import unittest

from local_job import LocalJob  # noqa: E402  (beside this file)

CHROMIUM = "/usr/bin/chromium"


def chromium(tmp, url, *mode):
    """Runs headless Chromium on `url` with `mode` flags; returns its stdout."""
    profile = tempfile.mkdtemp(dir=tmp)
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--no-first-run",
            "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
            "--user-data-dir=" + profile, "--window-size=1200,900",
            "--virtual-time-budget=5000"] + list(mode) + [url]
    env = dict(os.environ, HOME=profile)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=profile)
    if r.returncode != 0:
        raise RuntimeError("chromium exited %d: %s" % (r.returncode, r.stderr[-2000:]))
    return r.stdout


class StatusPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", cls.tmp)
        # Trains until cls.job.stop(): running whatever the tests take.
        cls.job = LocalJob(cls.tmp, step_delay_ms=40).__enter__()
        cls.addClassCleanup(cls.job.stop)
        cls.status = cls.job.wait_running(min_points=4)
        cls.url = "http://%s/" % cls.job.status

    def test_json_describes_the_job(self):
        s = self.job.get_json("/status.json")
        self.assertEqual(s["job"], "monitor")
        self.assertEqual(s["state"], "running")
        roles = sorted((m["role"], m["index"], m["state"]) for m in s["members"])
        self.assertEqual(roles, [("server", 0, "alive"), ("server", 1, "alive"),
                                 ("worker", 0, "alive"), ("worker", 1, "alive")])
        for m in s["members"]:
            if m["role"] == "worker":
                self.assertLessEqual(m["lag"], 3)  # SSP(2): spread <= s + 1.
        h = s["history"]
        self.assertEqual(len(h["t"]), len(h["samples_per_sec"]))
        self.assertTrue(any(v and v > 0 for v in h["samples_per_sec"]))
        self.assertTrue(any(v is not None for v in h["train_loss"]))
        self.assertGreater(s["max_clock"], 0)
        self.assertEqual(s["checkpoints"], [])

    def test_page_renders_members_and_curves(self):
        dom = chromium(self.tmp, self.url, "--dump-dom")
        with open(os.path.join(self.out, "status_page.html"), "w") as f:
            f.write(dom)
        table = re.search(r'<table id="members">.*?<tbody>(.*?)</tbody>', dom, re.S)
        self.assertIsNotNone(table, dom[:2000])
        rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
        self.assertEqual(len(rows), 4, table.group(1))
        cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
        self.assertEqual(sorted((c[0], c[1]) for c in cells),
                         [("server", "0"), ("server", "1"), ("worker", "0"), ("worker", "1")])
        self.assertTrue(all(c[3] == "alive" for c in cells), cells)
        # Throughput, loss and clocks have several points: a path with segments.
        for chart in ("chart-sps", "chart-loss", "chart-clock"):
            svg = re.search(r'<svg id="%s"[^>]*>(.*?)</svg>' % chart, dom, re.S)
            self.assertIsNotNone(svg, chart)
            paths = re.findall(r'<path class="line" d="(M[^"]*L[^"]*)"', svg.group(1))
            self.assertTrue(paths, "%s has no curve: %s" % (chart, svg.group(1)[:500]))
        self.assertRegex(dom, r'<span id="state" class="badge running">running</span>')

    def test_screenshot(self):
        path = os.path.join(self.out, "status_page.png")
        chromium(self.tmp, self.url, "--screenshot=" + path)
        with open(path, "rb") as f:
            png = f.read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(png), 20000)  # Not a blank page.


if __name__ == "__main__":
    unittest.main()
