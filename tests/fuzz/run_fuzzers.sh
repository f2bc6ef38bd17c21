#!/usr/bin/env bash
# Builds every fuzz target with clang 14 and libFuzzer (ASan + UBSan) and runs
# each for SECONDS (default 60), printing its exec count. Exits 1 if a target
# crashed (the input is saved under $FUZZ_OUT/artifacts/).
#
#   tests/fuzz/run_fuzzers.sh [SECONDS] [TARGET...]
#
# Targets: line_parser_fuzz config_fuzz server_core_fuzz checkpoint_file_fuzz
# (default: all). The build is outside Bazel, with the system headers and the
# same system libraries as @system (Debian's Abseil, protobuf and glog are not
# instrumented; our code is). Bazel is used only to list each target's sources
# (bazel query) and to build the gcc drivers that write the seed corpora.
# Environment:
#   FUZZ_OUT        work directory (default /tmp/shardps_fuzz): objects,
#                   binaries, corpus/<target>, seeds/<target>, artifacts/.
#   BAZEL_STARTUP   startup options for bazel (e.g. --output_base=...).
#   BAZEL_OPTS      build options for bazel (e.g. --symlink_prefix=...).
#   CXX             default clang++-14.
set -euo pipefail

cd "$(dirname "$0")/../.."
seconds="${1:-60}"
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(line_parser_fuzz config_fuzz server_core_fuzz checkpoint_file_fuzz)
fi
out="${FUZZ_OUT:-/tmp/shardps_fuzz}"
cxx="${CXX:-clang++-14}"
read -r -a startup <<<"${BAZEL_STARTUP:-}"
read -r -a bopts <<<"${BAZEL_OPTS:-}"
bazel_() { bazel "${startup[@]}" "$1" "${bopts[@]}" "${@:2}"; }
query_() { bazel "${startup[@]}" query "$@"; }

package_of() {
  if [[ $1 == checkpoint_file_fuzz ]]; then echo //common/checkpoint/fuzz
  else echo //tests/fuzz; fi
}

# Objects are reused only while every header and proto is unchanged (a
# changed class layout under a stale object crashes the target).
stamp=$(find . -path ./bazel-\* -prune -o \( -name '*.h' -o -name '*.proto' \) -print0 |
        sort -z | xargs -0 cat | sha1sum | cut -d' ' -f1)
if [[ "$(cat "$out/obj/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$out/obj" "$out/gen"
fi
mkdir -p "$out/obj" "$out/bin" "$out/artifacts"
echo "$stamp" >"$out/obj/.stamp"
cflags=(-std=c++17 -O1 -g -fno-omit-frame-pointer
        -fsanitize=address,undefined -fno-sanitize-recover=undefined
        -I. -I"$out/gen" -w)
libs=$(pkg-config --libs protobuf libglog gflags libzstd zlib absl_flags_parse \
  absl_flags absl_status absl_statusor absl_strings absl_str_format \
  absl_synchronization absl_time absl_flat_hash_map absl_flat_hash_set \
  absl_hash absl_random_random)

# Objects are shared between targets and rebuilt when their source is newer
# (or any header changed: see the stamp above).
compile() {  # SRC -> prints OBJ
  local src=$1 obj="$out/obj/${1//\//_}.o"
  if [[ ! -f $obj || $src -nt $obj ]]; then
    "$cxx" "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj" >&2
  fi
  echo "$obj"
}

build() {  # TARGET
  local t=$1 pkg srcs protos objs=()
  pkg=$(package_of "$t")
  srcs=$(query_ "kind('source file', deps($pkg:${t}_lib))" 2>/dev/null |
         grep '^//' | sed 's#^//##; s#:#/#; s#^/##')
  [[ -n $srcs ]] || { echo "bazel query failed for $pkg:${t}_lib" >&2; exit 2; }
  protos=$(grep '\.proto$' <<<"$srcs" || true)
  mkdir -p "$out/gen"
  for p in $protos; do
    if [[ ! -f $out/gen/${p%.proto}.pb.cc || $p -nt $out/gen/${p%.proto}.pb.cc ]]; then
      protoc -I. --cpp_out="$out/gen" "$p"
    fi
  done
  for src in $(grep '\.cc$' <<<"$srcs") $(sed 's#^#'"$out/gen/"'#; s#\.proto$#.pb.cc#' <<<"$protos"); do
    objs+=("$(compile "$src")")
  done
  "$cxx" "${cflags[@]}" -fsanitize=fuzzer "${objs[@]}" -o "$out/bin/$t" $libs -lpthread
}

echo "== building ${targets[*]} (clang, libFuzzer, ASan+UBSan) in $out"
labels=()
for t in "${targets[@]}"; do labels+=("$(package_of "$t"):$t"); done
bazel_ build "${labels[@]}" >/dev/null 2>&1 ||
  { echo "bazel build of the seed writers failed" >&2; exit 2; }
bin_dir=$(bazel_ info bazel-bin 2>/dev/null)
for t in "${targets[@]}"; do
  build "$t"
  rm -rf "$out/seeds/$t"
  mkdir -p "$out/seeds/$t" "$out/corpus/$t"
  "$bin_dir/$(package_of "$t" | sed 's#^//##')/$t" --write_seeds="$out/seeds/$t" >/dev/null
done

status=0
for t in "${targets[@]}"; do
  log="$out/$t.log"
  echo "== $t: ${seconds}s"
  if "$out/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" \
      "$out/corpus/$t" "$out/seeds/$t" >"$log" 2>&1; then
    result=ok
  else
    result="CRASH (see $log, input in $out/artifacts/)"; status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  corpus=$(ls "$out/corpus/$t" | wc -l)
  printf '%-22s execs=%-10s %-10s corpus=%-6s %s\n' "$t" "${execs:-?}" \
    "${cov:-}" "$corpus" "$result"
done
exit $status
