"""What the Python benchmarks share: the repository root, the Bazel output
directory of a compilation mode, and the key=value fields of a PS_* result
line."""
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def bazel_bin(mode):
    """The output directory of compilation mode `mode` (fastbuild, opt)."""
    out = subprocess.run(["bazel", "info", "--compilation_mode=" + mode, "bazel-bin"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("bazel info failed:\n" + out.stderr)
    return out.stdout.strip()


def fields(line):
    """{key: value} of the key=value words of a PS_*_RESULT line."""
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
