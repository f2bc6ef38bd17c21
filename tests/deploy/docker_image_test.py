"""Checks deploy/docker/Dockerfile without a Docker engine: what the runtime
stage installs covers every shared library the built binaries load (each
library found by `ldd`, mapped to its Debian package with `dpkg -S`), the
build stage builds every binary the Kubernetes manifests and the Slurm script
run, the build packages follow ./shardps's PACKAGES list, and the entrypoint
turns the environment into the right flags for every role.

Run by //tests/deploy:docker_image_test (cwd = the runfiles root).
"""

import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.getcwd(), "deploy", "k8s"))
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "testing"))
import render  # noqa: E402  (deploy/k8s/render.py)
from testkit import free_port  # noqa: E402  (tests/testing/testkit.py)

DOCKERFILE = "deploy/docker/Dockerfile"
ENTRYPOINT = "deploy/docker/shardps-entrypoint"
SHARDPS = "shardps"  # the repository's ./shardps (its PACKAGES list)
BINARIES = {  # name -> runfiles path of the binary the test data holds
    "ps_scheduler": "scheduler/ps_scheduler",
    "ps_status": "scheduler/ps_status",
    "ps_server": "server/ps_server",
    "ps_worker": "worker/ps_worker",
    "ps_datagen": "worker/data/ps_datagen",
    "ps_config_check": "common/ps_config_check",
    "ps_health": "deploy/k8s/ps_health",
    "ps_replica": "replica/ps_replica",
    "ps_table_hash": "replica/ps_table_hash",
}


def parse_dockerfile(path):
    """[(base image, [instruction, ...])] per stage; continuation lines joined."""
    with open(path) as f:
        text = re.sub(r"\\\n", " ", f.read())
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append((rest.split()[0], []))
        else:
            stages[-1][1].append((word.upper(), rest.strip()))
    return stages


def apt_installs(instructions):
    pkgs = []
    for word, rest in instructions:
        if word != "RUN":
            continue
        for cmd in re.split(r"&&|;", rest):
            args = shlex.split(cmd)
            if args[:2] == ["apt-get", "install"]:
                pkgs += [a for a in args[2:] if not a.startswith("-")]
    return pkgs


def apt_closure(packages):
    """Every package apt installs for `packages` (Depends/Pre-Depends, recursively)."""
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends",
                          "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
                          "--no-enhances"] + sorted(packages),
                         check=True, capture_output=True, text=True).stdout
    return {line.strip().split(":")[0] for line in out.splitlines()
            if line and not line.startswith(" ") and not line.startswith("<")}


def essential_packages():
    """What debian:12-slim always holds: the Essential packages and apt."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Essential}\n"],
                         check=True, capture_output=True, text=True).stdout
    return {p for p, e in (l.split() for l in out.splitlines() if len(l.split()) == 2)
            if e == "yes"} | {"apt"}


def owners(libs):
    """{library path: the Debian package that ships it} (one dpkg -S call)."""
    cands = {}
    for lib in libs:
        for path in (lib, os.path.realpath(lib)):
            for cand in (path, re.sub(r"^/usr/lib/", "/lib/", path),
                         re.sub(r"^/lib/", "/usr/lib/", path)):
                cands.setdefault(cand, set()).add(lib)
    res = subprocess.run(["dpkg", "-S"] + sorted(cands), capture_output=True, text=True)
    found = {}
    for line in res.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        for lib in cands.get(path.strip(), ()):
            found[lib] = pkgs.split(",")[0].split(":")[0].strip()
    return found


def ldd(binary):
    """{soname: resolved path or None} of everything `binary` loads."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+|not found)", line)
        if m:
            libs[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return libs


def needed(binary):
    out = subprocess.run(["readelf", "-d", binary], check=True, capture_output=True,
                         text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", out)


class DockerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stages = parse_dockerfile(DOCKERFILE)
        cls.build_base, cls.build = cls.stages[0]
        cls.runtime_base, cls.runtime = cls.stages[-1]

    def test_two_stages_on_debian_12(self):
        self.assertEqual(len(self.stages), 2)
        self.assertEqual(self.build_base, "debian:12")
        self.assertEqual(self.runtime_base, "debian:12-slim")

    def built_targets(self):
        for word, rest in self.build:
            if word == "RUN" and "bazel build" in rest:
                return re.findall(r"//[\w/]+:(\w+)", rest.split("&&")[0])
        self.fail("no bazel build in the build stage")

    def test_builds_and_ships_every_binary(self):
        self.assertEqual(sorted(self.built_targets()), sorted(BINARIES))
        copies = [rest for word, rest in self.runtime if word == "COPY"]
        self.assertIn("--from=build /out/ /usr/local/bin/", copies)
        run = " ".join(rest for word, rest in self.build if word == "RUN")
        for name, rel in BINARIES.items():
            self.assertIn("/tmp/bazel-bin/%s " % rel, run + " ")

    def test_binaries_the_deployments_run_are_built(self):
        with open(ENTRYPOINT) as f:
            entry = f.read()
        used = set(re.findall(r"\bexec (ps_\w+)", entry))
        for overlay in ("cpu", "gpu"):
            for obj in render.render(os.path.join("deploy/k8s/overlays", overlay)):
                spec = obj.get("spec", {}).get("template", {}).get("spec", {})
                for c in spec.get("containers", []) + spec.get("initContainers", []):
                    arg0 = c.get("args", [""])[0]
                    if arg0.startswith("ps_"):
                        used.add(arg0)
                    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                        if "exec" in c.get(probe, {}):  # Not tcpSocket (a replica's liveness).
                            used.add(c[probe]["exec"]["command"][0])
        for path in ("deploy/slurm/shardps.sbatch", "deploy/slurm/shardps-task"):
            with open(path) as f:
                used |= set(re.findall(r"\$\(bin (ps_\w+)\)", f.read()))
        self.assertTrue({"ps_scheduler", "ps_server", "ps_worker", "ps_health",
                         "ps_datagen"} <= used, used)
        self.assertEqual(used - set(self.built_targets()), set())

    def test_runtime_packages_cover_every_shared_library(self):
        listed = set(apt_installs(self.runtime))
        self.assertTrue(listed)
        for p in listed:
            self.assertFalse(p.endswith("-dev"), p)
        base = essential_packages()
        closure = apt_closure(listed | base)
        base_closure = apt_closure(base)
        missing = []
        loaded = {name: ldd(rel) for name, rel in BINARIES.items()}
        pkg_of = owners({p for libs in loaded.values() for p in libs.values() if p})
        for name, libs in sorted(loaded.items()):
            self.assertTrue(libs, name)
            direct = set(needed(BINARIES[name]))
            for soname, path in sorted(libs.items()):
                if path is None:
                    missing.append("%s: %s not found" % (name, soname))
                    continue
                pkg = pkg_of.get(path)
                if pkg is None:
                    missing.append("%s: %s (%s) belongs to no Debian package" % (name, soname, path))
                elif pkg not in closure:
                    missing.append("%s: %s is in %s, which the runtime stage does not install"
                                   % (name, soname, pkg))
                elif soname in direct and pkg not in listed and pkg not in base_closure:
                    missing.append("%s loads %s directly: list %s in the runtime stage"
                                   % (name, soname, pkg))
        self.assertEqual(missing, [])

    def test_runs_as_non_root(self):
        users = [rest for word, rest in self.runtime if word == "USER"]
        self.assertEqual(len(users), 1)
        self.assertNotIn(users[0].split(":")[0], ("0", "root"))
        self.assertIn(("ENTRYPOINT", '["shardps-entrypoint"]'), self.runtime)

    def test_build_packages_follow_the_shardps_list(self):
        with open(SHARDPS) as f:
            m = re.search(r"^PACKAGES=\((.*?)^\)", f.read(), re.S | re.M)
        packages = set(re.sub(r"#[^\n]*", "", m.group(1)).split())
        build = set(apt_installs(self.build))
        self.assertEqual(build - packages, set(), "build stage packages not in ./shardps")
        tools = {"bazel-bootstrap", "build-essential", "pkg-config", "protobuf-compiler",
                 "protobuf-compiler-grpc"}
        wanted = {p for p in packages if p.endswith("-dev") or p in tools}
        self.assertEqual(wanted - build, set(), "add these ./shardps packages to the build stage")


class EntrypointTest(unittest.TestCase):
    """shardps-entrypoint with stand-in binaries that print their arguments."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        for name in BINARIES:
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write('#!/bin/sh\necho %s "$@"\n' % name)
            os.chmod(path, stat.S_IRWXU)

    def run_entry(self, args, **env):
        full = {"PATH": self.dir + ":/usr/bin:/bin", "SHARDPS_CONFIG": "/etc/shardps/job.pbtxt"}
        full.update(env)
        res = subprocess.run([ENTRYPOINT] + args, env=full, capture_output=True, text=True)
        return res.returncode, res.stdout.strip(), res.stderr

    def test_scheduler(self):
        self.assertEqual(self.run_entry(["scheduler"]),
                         (0, "ps_scheduler --config=/etc/shardps/job.pbtxt --listen=0.0.0.0:7070",
                          ""))

    def test_server_index_from_the_statefulset_ordinal(self):
        rc, out, _ = self.run_entry(["server", "--threads=4"], HOSTNAME="ps-server-12",
                                    SHARDPS_SCHEDULER="ps-scheduler:7070",
                                    SHARDPS_ADVERTISE="ps-server-12.ps-server:7000")
        self.assertEqual(rc, 0)
        self.assertEqual(out, "ps_server --config=/etc/shardps/job.pbtxt "
                              "--scheduler=ps-scheduler:7070 --index=12 --listen=0.0.0.0:7000 "
                              "--advertise=ps-server-12.ps-server:7000 --threads=4")

    def test_worker_rank_from_the_completion_index(self):
        rc, out, _ = self.run_entry(["worker"], SHARDPS_SCHEDULER="s:1", JOB_COMPLETION_INDEX="3",
                                    SHARDPS_DEVICE="cuda", HOSTNAME="ps-worker-3-abcde")
        self.assertEqual((rc, out), (0, "ps_worker --config=/etc/shardps/job.pbtxt "
                                        "--scheduler=s:1 --rank=3 --device=cuda"))
        rc, out, _ = self.run_entry(["worker"], SHARDPS_SCHEDULER="s:1", SHARDPS_INDEX="1",
                                    JOB_COMPLETION_INDEX="3")
        self.assertIn("--rank=1", out)

    def test_replica(self):
        self.assertEqual(self.run_entry(["replica", "--poll_ms=100"]),
                         (0, "ps_replica --config=/etc/shardps/job.pbtxt --listen=0.0.0.0:7100 "
                             "--poll_ms=100", ""))

    def test_other_commands_run_as_given(self):
        self.assertEqual(self.run_entry(["ps_datagen", "--out_dir=/data"])[:2],
                         (0, "ps_datagen --out_dir=/data"))

    def test_missing_settings_are_refused(self):
        rc, _, err = self.run_entry(["server"], HOSTNAME="ps-server-0")
        self.assertEqual(rc, 2)
        self.assertIn("SHARDPS_SCHEDULER", err)
        rc, _, err = self.run_entry(["server"], HOSTNAME="nodash", SHARDPS_SCHEDULER="s:1")
        self.assertEqual(rc, 2)
        self.assertIn("SHARDPS_INDEX", err)
        rc, _, err = self.run_entry(["worker"], SHARDPS_SCHEDULER="s:1", SHARDPS_INDEX="x")
        self.assertEqual(rc, 2)
        rc, _, err = self.run_entry([])
        self.assertEqual(rc, 2)


class EntrypointJobTest(unittest.TestCase):
    """A whole small job through shardps-entrypoint and the real binaries, with
    the environment the Kubernetes manifests give each role."""

    def test_job_runs_to_done(self):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for name, rel in BINARIES.items():
            os.symlink(os.path.abspath(rel), os.path.join(bindir, name))
        with open("configs/default.pbtxt") as f:
            text = f.read()
        text = re.sub(r"synthetic_train_lines: \d+", "synthetic_train_lines: 3000", text)
        text = re.sub(r"synthetic_eval_lines: \d+", "synthetic_eval_lines: 500", text)
        small = os.path.join(tmp, "small.pbtxt")
        with open(small, "w") as f:
            f.write(text)
        config = os.path.join(tmp, "job.pbtxt")
        data = os.path.join(tmp, "data")
        subprocess.run([BINARIES["ps_config_check"], small, "--servers=1", "--workers=1",
                        "--synthetic_dir=" + data, "--checkpoint_dir=" + os.path.join(tmp, "ckpt"),
                        "--max_steps=10", "--write=" + config],
                       check=True, stdout=subprocess.DEVNULL)
        env = {"PATH": bindir + ":/usr/bin:/bin", "SHARDPS_CONFIG": config}
        scheduler = "127.0.0.1:%d" % free_port()
        server_port = free_port()

        def start(args, **extra):
            return subprocess.Popen([ENTRYPOINT] + args, env=dict(env, **extra),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        gen = start(["ps_datagen", "--out_dir=" + data, "--train_lines=3000",
                     "--eval_lines=500", "--seed=2024"])
        self.assertEqual(gen.wait(), 0, gen.stdout.read())
        procs = [start(["scheduler"], SHARDPS_LISTEN=scheduler)]
        procs.append(start(["server"], HOSTNAME="ps-server-0", SHARDPS_SCHEDULER=scheduler,
                           SHARDPS_LISTEN="0.0.0.0:%d" % server_port,
                           SHARDPS_ADVERTISE="127.0.0.1:%d" % server_port))
        procs.append(start(["worker"], JOB_COMPLETION_INDEX="0", SHARDPS_SCHEDULER=scheduler,
                           SHARDPS_DEVICE="cpu"))
        try:
            worker_out, _ = procs[2].communicate(timeout=240)
            sched_out, _ = procs[0].communicate(timeout=60)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertEqual(procs[2].returncode, 0, worker_out)
        self.assertIn("PS_WORKER_RESULT rank=0 steps=10", worker_out)
        self.assertEqual(procs[0].returncode, 0, sched_out)
        self.assertIn("PS_JOB_RESULT state=done", sched_out)
        server_out = procs[1].stdout.read()
        self.assertIn("PS_SERVER_LISTENING", server_out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
