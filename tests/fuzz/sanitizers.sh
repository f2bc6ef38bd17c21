#!/usr/bin/env bash
# Runs the test suite under AddressSanitizer + UBSan and the gRPC-free cores
# under ThreadSanitizer, timing each run.
#
#   tests/fuzz/sanitizers.sh [asan|tsan|all] [extra bazel test options...]
#
# ASan+UBSan: every C++ test of the tree (real processes included). Debian's
# Abseil, protobuf, gRPC, glog and LibTorch are not instrumented: bugs inside
# them are not seen, ours are.
# TSan: only cores whose threads do not pass through gRPC or LibTorch (TSan
# cannot see the synchronization inside uninstrumented libraries and reports
# false races there): tables, optimizers, the server core, the clock and
# membership services, the job coordinator (with fake servers), the
# checkpoint code, the data reader, the mutex.
# Each config has its own output directory (--platform_suffix in .bazelrc),
# so switching between them does not rebuild the normal build.
# Environment: BAZEL_STARTUP (e.g. --output_base=...), BAZEL_OPTS (e.g.
# --symlink_prefix=...).
set -uo pipefail

cd "$(dirname "$0")/../.."
which="${1:-all}"
shift || true
read -r -a startup <<<"${BAZEL_STARTUP:-}"
read -r -a bopts <<<"${BAZEL_OPTS:-}"

ASAN_TARGETS=(
  //common/... //proto/... //server/... //scheduler/... //worker/...
  //tests/... //deploy/...
  -//tests/deploy/...  # Docker/Kubernetes/Slurm packaging tests: no C++.
)
TSAN_TARGETS=(
  //common:mutex_test
  //server:table_test //server:table_store_test //server:optimizer_test //server:helper_pool_test
  //server:parameter_server_core_test //server:state_pull_test //server:bsp_aggregator_test
  //server:shared_rows_test //server:partition_move_test //server:delta_checkpoint_test
  //scheduler:clock_test //scheduler:membership_test //scheduler:job_test
  //scheduler:job_recovery_test //scheduler:job_worker_loss_test //scheduler:worker_loss_test
  //scheduler:cut_book_test //scheduler:recovery_book_test //scheduler:takeover_test
  //scheduler:job_state_test //scheduler:job_control_test //scheduler:job_reshard_test
  //scheduler:reshard_plan_test //scheduler:checkpoint_chain_test //scheduler:partition_move_test
  //scheduler:worker_book_test
  //common/checkpoint/...
  //worker/data/...
)
# optimizer_test links LibTorch (uninstrumented); it ran clean under TSan
# (no reports) when this list was made.

run() {  # CONFIG TARGET...
  local config=$1 start end rc
  shift
  echo "== bazel test --config=$config $*"
  start=$(date +%s)
  bazel "${startup[@]}" test "${bopts[@]}" --config="$config" --keep_going \
    --test_summary=short \
    "$@" 2>&1 | grep -E '^//|^Executed|FAILED|ERROR|TIMEOUT|NO STATUS'
  rc=${PIPESTATUS[0]}
  end=$(date +%s)
  echo "== --config=$config: exit $rc, $((end - start)) s"
  return "$rc"
}

status=0
case "$which" in
  asan) run asan "$@" -- "${ASAN_TARGETS[@]}" || status=1 ;;
  tsan) run tsan "$@" -- "${TSAN_TARGETS[@]}" || status=1 ;;
  all)
    run asan "$@" -- "${ASAN_TARGETS[@]}" || status=1
    run tsan "$@" -- "${TSAN_TARGETS[@]}" || status=1
    ;;
  *) echo "usage: $0 [asan|tsan|all] [bazel options...]" >&2; exit 2 ;;
esac
exit $status
