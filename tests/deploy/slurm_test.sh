#!/bin/bash
# Runs deploy/slurm/shardps.sbatch for real on a one-node Slurm cluster that
# this test sets up and tears down: munged, slurmctld and slurmd (Debian's
# munge and slurm-wlm) with a slurm.conf for 127.0.0.1 in a temporary
# directory, and submits three small jobs (1 server, 1 worker, a few thousand
# generated lines):
#   1. a plain job: Slurm reports it COMPLETED, its output says "shardps: job
#      done" and the scheduler's PS_JOB_RESULT says state=done;
#   2. a server SIGKILLed mid-job (after its first checkpoint): its task
#      restarts it with the same flags, the scheduler rolls the job back, and
#      the job still ends COMPLETED with state=done and recoveries >= 1;
#   3. a server that cannot listen: its task restarts it SHARDPS_MAX_RESTARTS
#      (3) times, then the job ends FAILED ("shardps: servers failed").
#
# Needs root (the daemons run as root, as slurmd must to start jobs) and the
# packages slurm-wlm and munge. Run by //tests/deploy:slurm_test from the
# runfiles root.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root to run munged, slurmctld and slurmd"
for tool in munged mungekey slurmctld slurmd sbatch scontrol sinfo; do
  command -v "$tool" >/dev/null || fail "$tool not found: apt-get install slurm-wlm munge"
done

ROOT=$PWD  # runfiles root: scheduler/ps_scheduler, deploy/slurm/..., configs/...
start=$(date +%s)
# Not under TEST_TMPDIR: munged refuses sockets and keys below directories
# that others may write to, and Bazel's temp tree has long, shared paths.
T=$(mktemp -d /tmp/shardps-slurm.XXXXXX)
pids=()
job=""

teardown() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ]; then
    for f in "$T"/*.out "$T"/slurmctld.log "$T"/slurmd.log "$T"/munged.log; do
      [ -f "$f" ] && { echo "----- $f (tail)"; tail -n 40 "$f"; }
    done
  fi
  [ -n "$job" ] && SLURM_CONF=$T/slurm.conf scancel "$job" 2>/dev/null
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -f "$T/munged.pid" ] && kill -TERM "$(cat "$T/munged.pid")" 2>/dev/null
  sleep 0.5
  rm -rf "$T"
  exit "$rc"
}
trap teardown EXIT

# A free port below the kernel's ephemeral range (32768-60999 here): the
# ports are bound later by the daemons and the job, and a port taken from
# the ephemeral range could meanwhile be handed to another test's process
# (a CI run lost a ps_server to "Address already in use" that way).
free_port() {
  python3 -c '
import random, socket
lo, hi = 20000, 32000
for _ in range(1000):
    p = random.randint(lo, hi)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    print(p)
    break
else:
    raise SystemExit("no free port in %d-%d" % (lo, hi))
'
}

# --- munge ------------------------------------------------------------------
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/data"
chmod 700 "$T/munge"
mungekey --create --keyfile="$T/munge/munge.key" >/dev/null 2>&1 ||
  { dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 2>/dev/null; }
chmod 400 "$T/munge/munge.key"
munged --force --socket="$T/munge/munge.socket" --key-file="$T/munge/munge.key" \
  --log-file="$T/munged.log" --pid-file="$T/munged.pid" --seed-file="$T/munge/munged.seed" ||
  fail "munged did not start"

# --- slurm ------------------------------------------------------------------
host=$(hostname -s)
node_line=$(slurmd -C | head -1)  # NodeName=<host> CPUs=... RealMemory=...
cat >"$T/slurm.conf" <<EOF
ClusterName=shardpstest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$T/slurm.conf
slurmctld -D -c -f "$SLURM_CONF" >"$T/slurmctld.out" 2>&1 &
pids+=("$!")
slurmd -D -f "$SLURM_CONF" >"$T/slurmd.out" 2>&1 &
pids+=("$!")

for ((i = 0; i < 60; i++)); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = "idle" ] && break
  sleep 1
done
[ "$state" = "idle" ] || fail "the Slurm node never became idle (state '$state')"
echo "slurm up after $(($(date +%s) - start))s"

# --- a small shardps job ------------------------------------------------------
# Without the default's checkpoint block: each job below names its own.
sed -e 's/synthetic_train_lines: [0-9]*/synthetic_train_lines: 4000/' \
    -e 's/synthetic_eval_lines: [0-9]*/synthetic_eval_lines: 1000/' \
    -e '/^checkpoint {/,/^}/d' \
    configs/default.pbtxt >"$T/small.pbtxt"
common/ps_config_check "$T/small.pbtxt" --servers=1 --workers=1 \
  --synthetic_dir="$T/data/synthetic" --checkpoint_dir="$T/ckpt_plain" --max_steps=20 \
  --write="$T/job.pbtxt"

# submit <output file> <server port> [config]: the job's id. Settings the
# caller puts in the environment (SHARDPS_WORKER_FLAGS=...) reach the job too.
submit() {
  (cd "$T" && sbatch --parsable --output="$1" \
    --export="ALL,SHARDPS_CONFIG=${3:-$T/job.pbtxt},SHARDPS_BIN=$ROOT,SHARDPS_HOST=127.0.0.1,SHARDPS_TASK=$ROOT/deploy/slurm/shardps-task,SHARDPS_SCHEDULER_PORT=$(free_port),SHARDPS_SERVER_PORT=$2,SHARDPS_DEVICE=cpu" \
    "$ROOT/deploy/slurm/shardps.sbatch")
}
job_state() { scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_job() {  # sets $state to the job's final state
  while :; do
    state=$(job_state)
    case "$state" in
      PENDING|CONFIGURING|RUNNING|COMPLETING|"") sleep 1 ;;
      *) break ;;
    esac
    # Bazel's test timeout bounds the wait; this only guards a lost job record.
    [ $(($(date +%s) - start)) -lt 900 ] || fail "job $job still '$state' after 900s"
  done
  echo "job $job ended $state after $(($(date +%s) - start))s"
}

job=$(submit "$T/job.out" "$(free_port)")
echo "submitted job $job"
wait_job
cat "$T/job.out"
[ "$state" = "COMPLETED" ] || fail "job $job ended $state"
grep -q "^shardps: job done" "$T/job.out" || fail "job output does not say 'shardps: job done'"
grep -Eq "PS_JOB_RESULT state=done" "$T/job.out" || fail "no PS_JOB_RESULT state=done"
grep -Eq "PS_WORKER_RESULT rank=0" "$T/job.out" || fail "no PS_WORKER_RESULT from worker 0"
grep -q "starting it again" "$T/job.out" && fail "a process of the plain job was restarted"
job=""

# --- a server killed mid-job: restarted by its task, the job rolled back -------
# Longer and slower than the first job (120 steps of >= 100 ms, a checkpoint
# every 10 steps) so that it is still training when the test kills its
# server. Checkpoints on local disk: every process runs on this node. It
# evaluates only at its end (--eval_every_epochs=20: past its 120 steps), so
# early stopping cannot end it before the steps the test checks.
{
  cat "$T/small.pbtxt"
  printf 'checkpoint {\n  dir: "%s"\n  every_steps: 10\n}\n' "$T/ckpt"
} >"$T/fault.pbtxt"
common/ps_config_check "$T/fault.pbtxt" --servers=1 --workers=1 \
  --synthetic_dir="$T/data/synthetic" --epochs=20 --max_steps=120 --eval_every_epochs=20 \
  --write="$T/job_fault.pbtxt"
job=$(SHARDPS_WORKER_FLAGS="--step_delay_ms=100" submit "$T/job_fault.out" "$(free_port)" \
  "$T/job_fault.pbtxt")
echo "submitted job $job (its server will be killed)"
# Kill once the first checkpoint is complete (its MANIFEST is written last),
# so the job has something to roll back to.
for ((i = 0; ; i++)); do
  compgen -G "$T/ckpt/ckpt-*/MANIFEST" >/dev/null && break
  state=$(job_state)
  case "$state" in
    PENDING|CONFIGURING|RUNNING|"") ;;
    *) fail "job $job ended $state before its first checkpoint was written" ;;
  esac
  [ "$i" -lt 900 ] || fail "job $job wrote no complete checkpoint to $T/ckpt in 180s"
  sleep 0.2
done
# The ps_server binary, not the shardps-task wrapper around it (whose command
# line is only "bash .../shardps-task server").
server_pids=$(pgrep -f -- "/ps_server --config=$T/job_fault.pbtxt .*--index=0( |\$)" || true)
[ "$(wc -w <<<"$server_pids")" -eq 1 ] ||
  fail "expected one ps_server --index=0 of job $job, found pids '$server_pids'"
[ "$(cat "/proc/$server_pids/comm" 2>/dev/null)" = ps_server ] ||
  fail "pid $server_pids is not ps_server: $(tr '\0' ' ' <"/proc/$server_pids/cmdline" 2>/dev/null)"
kill -KILL "$server_pids"
echo "killed ps_server --index=0 (pid $server_pids) after" "$T"/ckpt/ckpt-*/MANIFEST
wait_job
cat "$T/job_fault.out"
[ "$state" = "COMPLETED" ] || fail "job $job with a killed server ended $state, not COMPLETED"
grep -q "^shardps: job done" "$T/job_fault.out" ||
  fail "the output of job $job (killed server) does not say 'shardps: job done'"
grep -Eq "shardps-task: server 0 exited with signal KILL .*starting it again with the same flags" \
  "$T/job_fault.out" || fail "the output of job $job does not show the task restarting server 0"
result=$(grep -o "PS_JOB_RESULT .*" "$T/job_fault.out" | tail -n 1)
[ -n "$result" ] || fail "job $job printed no PS_JOB_RESULT"
grep -q "state=done" <<<"$result" || fail "job $job did not end done: $result"
recoveries=$(sed -n 's/.* recoveries=\([0-9]*\) .*/\1/p' <<<"$result")
[ "${recoveries:-0}" -ge 1 ] || fail "job $job reports no recovery after its server was killed: $result"
grep -q "max_clock=120 " <<<"$result" || fail "job $job did not train its 120 steps: $result"
echo "the job recovered: $result"
job=""

# --- a job whose server cannot listen fails instead of hanging ------------------
# Another process holds the server's port (no SO_REUSEPORT, as gRPC would
# allow): ps_server exits 1, and the batch script must end the job rather
# than leave the scheduler and the worker waiting for a server forever.
held=$(free_port)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("listening", flush=True); time.sleep(900)' "$held" >"$T/held.ready" &
pids+=("$!")
# Submit only once the port is held (the holder says so after listen()).
for ((i = 0; ; i++)); do
  grep -q "^listening" "$T/held.ready" && break
  kill -0 "${pids[-1]}" 2>/dev/null || fail "the process meant to hold port $held exited"
  [ "$i" -lt 600 ] || fail "port $held was not held within 60s"
  sleep 0.1
done
job=$(submit "$T/job_taken.out" "$held")
echo "submitted job $job (server port $held held)"
wait_job
cat "$T/job_taken.out"
[ "$state" = "FAILED" ] || fail "job $job with a taken server port ended $state, not FAILED"
grep -q "cannot listen on 127.0.0.1:$held" "$T/job_taken.out" ||
  fail "the server did not say it cannot listen"
grep -q "^shardps: servers failed" "$T/job_taken.out" ||
  fail "the batch script did not say the servers failed"
# shardps-task tried again SHARDPS_MAX_RESTARTS (default 3) times, no more.
[ "$(grep -c "shardps-task: server 0 exited with status 1; starting it again" \
  "$T/job_taken.out")" -eq 3 ] || fail "the task did not restart the server exactly 3 times"
grep -q "shardps-task: server 0 exited with status 1 and was restarted 3 times already; giving up" \
  "$T/job_taken.out" || fail "the task did not say it gave the server up"
job=""
echo "PASS in $(($(date +%s) - start))s"
