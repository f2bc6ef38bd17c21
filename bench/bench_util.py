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


def training_only(text):
    """A job config's text without periodic evaluation, early stopping and
    its checkpoint block: what the throughput and cost benchmarks run (the
    default config keeps the best of its evaluations, which would add
    evaluation work and may stop a job early)."""
    import re
    text = re.sub(r"\n\s*eval_every_steps: \d+", "", text)
    text = re.sub(r"\n\s*early_stopping \{[^}]*\}", "", text)
    return re.sub(r"\ncheckpoint \{[^}]*\}\n?", "\n", text)


def training_only_default(directory):
    """Writes configs/default.pbtxt, training_only, into `directory`; its path."""
    path = os.path.join(directory, "default_training_only.pbtxt")
    with open(os.path.join(ROOT, "configs", "default.pbtxt")) as f:
        text = training_only(f.read())
    with open(path, "w") as f:
        f.write(text)
    return path
