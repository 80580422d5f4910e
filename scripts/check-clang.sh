#!/usr/bin/env bash
# Compile C++ files with Clang 14 and -Werror, syntax only, with the flags the dev build uses
# (from build/dev/compile_commands.json): catches what the CI sanitizer job (Clang) rejects but
# GCC accepts, e.g. -Wdouble-promotion on a float passed to a double parameter, lambdas capturing
# structured bindings. Usage: scripts/check-clang.sh [FILE.cpp ...]; without arguments, every
# .cpp changed against main. Needs a configured build/dev (cmake --preset dev).
set -euo pipefail
cd "$(dirname "$0")/.."
db=build/dev/compile_commands.json
[ -f "$db" ] || { echo "check-clang: $db missing (run cmake --preset dev)" >&2; exit 2; }
if [ $# -eq 0 ]; then
  mapfile -t files < <(git diff --name-only main -- '*.cpp'; git ls-files --others --exclude-standard -- '*.cpp')
else
  files=("$@")
fi
status=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  args=$(python3 - "$db" "$f" <<'PY'
import json, os, shlex, sys
db, f = sys.argv[1], os.path.abspath(sys.argv[2])
for e in json.load(open(db)):
    if os.path.abspath(os.path.join(e["directory"], e["file"])) == f:
        a = shlex.split(e["command"])[1:]
        out, skip = [], False
        for x in a:
            if skip:
                skip = False
            elif x == "-o":
                skip = True
            elif x != "-c":
                out.append(x)
        print(e["directory"])
        print(" ".join(shlex.quote(y) for y in out))
        break
PY
)
  if [ -z "$args" ]; then
    echo "check-clang: no compile command for $f (re-run cmake on build/dev)" >&2
    status=1
    continue
  fi
  dir=$(sed -n 1p <<<"$args")
  flags=$(sed -n 2p <<<"$args")
  if (cd "$dir" && eval "clang++-14 -fsyntax-only -Werror $flags"); then
    echo "ok   $f"
  else
    echo "FAIL $f"
    status=1
  fi
done
exit $status
