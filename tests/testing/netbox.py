"""The cluster-in-a-box harness (tests/testing/netbox.h) for Python tests and
bench/ scripts: a thin wrapper over its command line, netbox_cli, so C++ and
Python share one implementation.

    from netbox import NetBox, available
    reason = available()            # "" when the harness can run here
    with NetBox(hosts=3) as box:    # namespaces named after this process
        argv = box.wrap(1, ["ps_server", "--listen=%s:7000" % box.ip(1)])
        box.cut_off(1); box.heal()
        box.set_rate(1, 1_000_000_000)

Every method raises NetBoxError with the command's message when it fails.
close() (or leaving the with block) stops flaps, kills every process of the
box and deletes it; a box whose owner died is swept by the next one made.
"""

import os
import subprocess


class NetBoxError(RuntimeError):
    pass


def cli_path():
    """netbox_cli: $SHARDPS_NETBOX_CLI, the test's runfiles, or bazel-bin."""
    if os.environ.get("SHARDPS_NETBOX_CLI"):
        return os.environ["SHARDPS_NETBOX_CLI"]
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        workspace = os.environ.get("TEST_WORKSPACE", "shardps")
        return os.path.join(srcdir, workspace, "tests/testing/netbox_cli")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "bazel-bin/tests/testing/netbox_cli")


def _run(args):
    r = subprocess.run([cli_path()] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise NetBoxError((r.stderr or r.stdout).strip() or "netbox_cli %s failed" % args[0])
    return r.stdout


def available():
    """"" if boxes can be made here, else why not (not root, no iproute2)."""
    try:
        _run(["available"])
        return ""
    except (NetBoxError, OSError) as e:
        return str(e)


class NetBox:
    def __init__(self, hosts):
        out = _run(["up", hosts, "--owner", os.getpid()])
        self.id = None
        self._hosts = []  # (namespace, ip) by host
        for line in out.splitlines():
            words = line.split()
            if words[:1] == ["box"]:
                self.id = words[1]
            elif words[:1] == ["host"]:
                self._hosts.append((words[2], words[3]))
        self._flaps = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def hosts(self):
        return len(self._hosts)

    def namespace(self, host):
        return self._hosts[host][0]

    def ip(self, host):
        return self._hosts[host][1]

    def wrap(self, host, argv):
        """argv run inside `host` (the child's pid is the program's own)."""
        return [cli_path(), "exec", self.id, str(host), "--"] + list(argv)

    def cut_off(self, host, fail_fast=False):
        _run(["cutoff", self.id, host] + (["--fail_fast"] if fail_fast else []))

    def cut(self, a, b, fail_fast=False):
        _run(["cut", self.id, a, b] + (["--fail_fast"] if fail_fast else []))

    def heal(self):
        """Stops every flap and undoes every cut."""
        self._stop_flaps()
        _run(["heal", self.id])

    def flap(self, host, down_s, up_s, count):
        """Starts flapping `host`'s link in the background."""
        self._flaps.append(subprocess.Popen(
            [cli_path(), "flap", self.id, str(host), str(int(down_s * 1000)),
             str(int(up_s * 1000)), str(count)]))

    def flapping(self):
        return any(p.poll() is None for p in self._flaps)

    def kill_host(self, host):
        """SIGKILLs every process of `host` at once; returns how many."""
        return int(_run(["kill", self.id, host]).split()[1])

    def pids(self, host):
        return [int(p) for p in _run(["pids", self.id, host]).split()]

    def set_rate(self, host, bits_per_sec, burst_bytes=0, queue_bytes=0):
        _run(["rate", self.id, host, int(bits_per_sec), int(burst_bytes), int(queue_bytes)])

    def clear_rate(self, host):
        _run(["unrate", self.id, host])

    def qdiscs(self, host):
        return _run(["qdisc", self.id, host])

    def _stop_flaps(self):
        for p in self._flaps:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=30)
        self._flaps = []

    def close(self):
        if self.id is None:
            return
        self._stop_flaps()
        _run(["down", self.id])
        self.id = None
