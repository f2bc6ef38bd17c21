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
    text = re.sub(r"\n\s*eval_every_epochs: [\d.]+", "", text)
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


def launch_job(bin_dir, config_text, data_dir, run_dir, flags=()):
    """Runs one job of `config_text` on `data_dir` through the real launcher
    (deploy/local/ps_launch.py --quiet, binaries of `bin_dir`), in `run_dir`,
    with extra launcher `flags`. Returns (the PS_JOB_RESULT's {key: value},
    the whole output); exits with the output's tail if the job fails."""
    import re
    os.makedirs(run_dir, exist_ok=True)
    config = os.path.join(run_dir, "job_in.pbtxt")
    with open(config, "w") as f:
        f.write(config_text)
    cmd = [sys.executable, os.path.join(ROOT, "deploy/local/ps_launch.py"), "--config=" + config,
           "--data_dir=" + data_dir, "--quiet", "--bin_dir=" + bin_dir,
           "--run_dir=" + run_dir] + list(flags)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    text = out.stdout + out.stderr
    job = re.search(r"PS_JOB_RESULT (.*)", text)
    if out.returncode != 0 or not job:
        sys.exit("job failed:\n" + text[-4000:])
    return fields(job.group(1)), text


def generate_data(bin_dir, out_dir, train_lines, eval_lines, shards=8, seed=None):
    """Generates a synthetic data set into `out_dir` with ps_datagen (once:
    best.txt, written last, marks it complete) and returns best.txt's
    {key: value}. `bin_dir` is laid out like bazel-bin, or flat."""
    best_txt = os.path.join(out_dir, "best.txt")
    if not os.path.exists(best_txt):
        gen = os.path.join(bin_dir, "worker/data/ps_datagen")
        if not os.path.exists(gen):
            gen = os.path.join(bin_dir, "ps_datagen")
        argv = [gen, "--out_dir=" + out_dir, "--train_lines=%d" % train_lines,
                "--eval_lines=%d" % eval_lines, "--train_shards=%d" % shards]
        if seed is not None:
            argv.append("--seed=%d" % seed)
        subprocess.run(argv, check=True, capture_output=True)
    best = {}
    with open(best_txt) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                best[parts[0]] = parts[1]
    return best
