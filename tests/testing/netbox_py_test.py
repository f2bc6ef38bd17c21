"""netbox.py, the Python face of the NetBox harness: a box made, a process
run inside a host (its pid the program's own), a cut and a heal, a rate,
a host's processes killed, and nothing left after close(). Fails (does not
skip) when the harness cannot run here."""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netbox  # noqa: E402

ECHO_SERVER = """
import os, socket
print(os.getpid(), flush=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7401)); s.listen(4)
while True:
    c, _ = s.accept()
    c.sendall(c.recv(16)); c.close()
"""

ECHO_CLIENT = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], 7401), timeout=1.5)
    c.sendall(b"hi"); print(c.recv(16).decode())
except socket.timeout:
    print("timeout")
"""


class NetBoxPyTest(unittest.TestCase):
    def setUp(self):
        reason = netbox.available()
        self.assertEqual(reason, "", reason)

    def echo(self, box, host, to):
        return subprocess.run(box.wrap(host, [sys.executable, "-c", ECHO_CLIENT, box.ip(to)]),
                              capture_output=True, text=True, timeout=60).stdout.strip()

    def test_box(self):
        with netbox.NetBox(hosts=2) as box:
            box_id = box.id
            self.assertTrue(box_id.startswith("sps-%d-" % os.getpid()), box_id)
            server = subprocess.Popen(box.wrap(1, [sys.executable, "-c", ECHO_SERVER]),
                                      stdout=subprocess.PIPE, text=True)
            self.assertEqual(int(server.stdout.readline()), server.pid)
            self.assertEqual(box.pids(1), [server.pid])
            # The listen may lag the pid line: retry until it answers.
            for _ in range(50):
                if self.echo(box, 0, 1) == "hi":
                    break
            self.assertEqual(self.echo(box, 0, 1), "hi")
            box.cut_off(1)
            self.assertEqual(self.echo(box, 0, 1), "timeout")
            box.heal()
            self.assertEqual(self.echo(box, 0, 1), "hi")
            box.set_rate(1, 50_000_000)
            self.assertIn("tbf", box.qdiscs(1))
            self.assertEqual(box.kill_host(1), 1)
            self.assertEqual(server.wait(timeout=30), -9)
        self.assertFalse([n for n in os.listdir("/run/netns") if n.startswith(box_id + "-")])


if __name__ == "__main__":
    unittest.main()
