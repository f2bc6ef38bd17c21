"""The Python side of tests/testing: what Python process tests share.

free_port(): a TCP port on 127.0.0.1 that nothing listens on when asked (the
kernel's pick; for a process started once, not restarted on its address;
tests/testing/free_port.h is the C++ one, below the ephemeral range).

small_dlrm_tables(...): the tables and model of a small DLRM job as job
config text, kSmallDlrmTables of tests/testing/job_util.h (the one copy,
which the build cuts out into small_dlrm_tables.pbtxt), optionally with
other optimizers or MLP widths as testing::SmallDlrmTables does. A test
appends name, data, training, cluster, checkpoint.

Import it from a test started by run_python.sh (cwd = the runfiles root),
with //tests/testing:testkit_py in the test's data:

    sys.path.insert(0, os.path.join(os.getcwd(), "tests", "testing"))
    import testkit
"""

import os
import re
import socket

TABLES = os.path.join("tests", "testing", "small_dlrm_tables.pbtxt")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_dlrm_tables(sparse_optimizer=None, dense_optimizer=None, bottom_mlp=None,
                      top_mlp=None):
    """The tables text; each argument given replaces the inside of the
    "categorical" table's optimizer { }, of the "mlp" table's, or a list of
    widths (e.g. "32, 8")."""
    with open(os.path.join(os.getcwd(), TABLES)) as f:
        text = f.read()
    optimizers = list(re.finditer(r"optimizer \{ (.*) \}\n", text))
    model = re.search(r"bottom_mlp: \[(.*?)\] top_mlp: \[(.*?)\]", text)
    if len(optimizers) != 2 or model is None:
        raise ValueError("%s is not the two tables and the model it should be" % TABLES)
    spans = [(optimizers[0].span(1), sparse_optimizer), (optimizers[1].span(1), dense_optimizer),
             (model.span(1), bottom_mlp), (model.span(2), top_mlp)]
    for (start, end), value in sorted(spans, reverse=True):
        if value is not None:
            text = text[:start] + value + text[end:]
    return text
