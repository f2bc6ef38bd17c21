#!/usr/bin/env bash
# Proves that Bazel visibility keeps the roles apart: a target inside one
# role that depends on another role's internals fails to build with "is not
# visible", while the allowed exceptions (the worker's local mode and export
# use the server's tables; the serving replica predicts with the worker's
# model code through worker/export:local_model, and its tests write
# checkpoints through worker/export:checkpointed_job) build. Run from .ci/run;
# takes seconds (analysis only). Writes a throwaway package inside each role
# and removes it.
set -uo pipefail
cd "$(dirname "$0")/../.."

probes=()
cleanup() { rm -rf "${probes[@]}"; }
trap cleanup EXIT

# probe ROLE DEP WANT [testonly]: a cc_library in ROLE/visibility_probe
# depending on DEP (a testonly one with a fourth argument); WANT is
# "refused" or "allowed".
fail=0
probe() {
  local role=$1 dep=$2 want=$3 testonly=${4:-} dir out rc
  dir="$role/visibility_probe_$RANDOM"
  probes+=("$dir")
  mkdir -p "$dir"
  printf 'cc_library(\n    name = "probe",\n%b    deps = ["%s"],\n)\n' \
    "${testonly:+    testonly = True,\n}" "$dep" >"$dir/BUILD.bazel"
  out=$(bazel build --nobuild "//$dir:probe" 2>&1)
  rc=$?
  rm -rf "$dir"
  if [ "$want" = refused ]; then
    if [ "$rc" -ne 0 ] && grep -q "is not visible" <<<"$out"; then
      echo "ok: //$role may not depend on $dep"
    else
      echo "FAIL: //$role could depend on $dep (exit $rc)"
      echo "$out" | tail -5
      fail=1
    fi
  else
    if [ "$rc" -eq 0 ]; then
      echo "ok: //$role may depend on $dep"
    else
      echo "FAIL: //$role cannot depend on $dep, which it is allowed to"
      echo "$out" | tail -5
      fail=1
    fi
  fi
}

probe worker //scheduler:job refused
probe worker //server:parameter_server_core refused
probe server //scheduler:job refused
probe server //worker/model:model refused
probe scheduler //server:parameter_server_core refused
probe scheduler //worker/data:criteo_reader refused
probe worker //server:table_store allowed
# The serving replica (replica/) predicts with the worker's model code
# through one target, worker/export:local_model (a header that names no
# worker or server type); its tests write checkpoints with
# worker/export:checkpointed_job (testonly). Nothing else of the worker, the
# server or the scheduler, and no role depends on the replica.
probe replica //worker/export:local_model allowed
probe replica //worker/export:checkpointed_job allowed testonly
probe replica //worker/export:checkpoint_loader refused
probe replica //worker/export:restored_job refused
probe replica //worker:trainer refused
probe replica //server:table_store refused
probe replica //scheduler:job refused
probe worker //replica:replica refused
probe scheduler //common/client:ps_client allowed
exit $fail
