#!/bin/sh
# SPDX-License-Identifier: MIT
# Cost of bias correction (docs/bench/quantizer.md, "CLE and bias correction"): PP-OCRv4 det at
# 640x640, the A8W8 preset's configuration (bench/onnx/algo/presets.json) with and without
# algo_config bias_correction, N random calibration samples (default 4). Prints wall time, peak
# RSS and user + system CPU time of each run, and the load average (the machine is shared).
#   bench/onnx/bias_correction_time.sh build/release-native/examples/onnx/quark_quantize [N]
set -eu
Q=${1:?usage: bias_correction_time.sh QUARK_QUANTIZE [N]}
N=${2:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
M=${QUARK_DET_MODEL:-.cache/models/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
/usr/bin/python3 - "$HERE/algo/presets.json" "$OUT" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["A8W8"]
for name, algo in (("none", []), ("bc", [{"name": "bias_correction"}])):
    c["algo_config"] = algo
    json.dump(c, open(f"{sys.argv[2]}/{name}.json", "w"))
PY
for i in $(seq "${RUNS:-1}"); do
  echo "run $i, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  for a in none bc; do
    /usr/bin/time -f "%e %M %U %S" -o "$OUT/time" "$Q" "$M" "$OUT/q.onnx" --config "$OUT/$a.json" \
      --random --shape x:1x3x640x640 --samples "$N" -q --no-summary >/dev/null
    set -- $(cat "$OUT/time")
    echo "$a: wall $1 s, peak RSS $2 KB, CPU $(echo "$3 $4" | awk '{ printf "%.2f", $1 + $2 }') s"
  done
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
