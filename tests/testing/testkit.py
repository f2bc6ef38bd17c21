"""The Python side of tests/testing: what Python process tests share.

free_port(): a TCP port on 127.0.0.1 that nothing listens on when asked (the
kernel's pick; for a process started once, not restarted on its address;
tests/testing/free_port.h is the C++ one, below the ephemeral range).

Import it from a test started by run_python.sh (cwd = the runfiles root),
with //tests/testing:testkit_py in the test's data:

    sys.path.insert(0, os.path.join(os.getcwd(), "tests", "testing"))
    import testkit
"""

import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
