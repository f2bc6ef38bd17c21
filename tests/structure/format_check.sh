#!/usr/bin/env bash
# Checks that every C++ source the repository tracks is formatted as
# .clang-format says (Google style, 100 columns), without changing a file.
# Run from .ci/run; takes seconds. To format a file: clang-format-14 -i FILE.
set -uo pipefail
cd "$(dirname "$0")/../.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then
  echo "format_check: clang-format-14 is not installed (./shardps deps installs it)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.cc' '*.h')
if ! "$fmt" --dry-run --Werror "${files[@]}" 2>/tmp/format_check.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/format_check.$$ | cut -d: -f1 | sort -u |
    sed 's/^/not formatted: /'
  echo "format_check: run clang-format-14 -i on the files above" >&2
  rm -f /tmp/format_check.$$
  exit 1
fi
rm -f /tmp/format_check.$$
echo "format_check: ${#files[@]} files formatted as .clang-format says"
