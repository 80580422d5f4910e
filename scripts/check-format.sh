#!/usr/bin/env bash
# Fails (and lists the files) when a tracked C++ file differs from what clang-format (the version
# Debian 12 ships, 14) makes of it with the repository's .clang-format. Fix with:
#   git ls-files '*.hpp' '*.cpp' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format not installed" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.h')
bad=$(clang-format --dry-run "${files[@]}" 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning:.*/\1/p' | sort -u)
if [ -n "$bad" ]; then
  echo "check-format: these files are not clang-formatted:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
