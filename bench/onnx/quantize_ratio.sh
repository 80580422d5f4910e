#!/bin/sh
# SPDX-License-Identifier: MIT
# Issue 7 "Performance": time and peak memory of quantizing PP-OCRv4 det with N calibration
# samples at 640x640, as a ratio to N plain inferences (and one inference's peak RSS) of the same
# quark_quantize binary in the same run. Prints the load average before and after, since the
# machine is shared. Each quantize run also prints its calibration phases (QUARK_CALIB_PROFILE).
#   bench/onnx/quantize_ratio.sh build/release/examples/onnx/quark_quantize [N] [PRESET...]
# RUNS=3 repeats the whole measurement (each run prints its own ratios). INPLACE=1 also runs each
# preset observing in place (QUARK_CALIB_BACKGROUND=0: same bytes, no background observer thread).
# The two builds docs/bench/quantizer.md reports (configure once, then build one target):
#   default:  cmake --preset release
#             cmake --build build/release --target quark_quantize -j2
#   native:   cmake --preset release -B build/release-native -DQUARK_NATIVE=ON
#             cmake --build build/release-native --target quark_quantize -j2
set -eu
Q=${1:?usage: quantize_ratio.sh QUARK_QUANTIZE [N] [PRESET...]}
N=${2:-32}
shift 2 2>/dev/null || shift $#
PRESETS=${*:-A8W8 XINT8}
M=${QUARK_DET_MODEL:-.cache/models/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ARGS="--random --shape x:1x3x640x640 -q --no-summary"

# run LABEL CMD...: prints "LABEL <wall s> <peak KB> <cpu s>" (wall time, max RSS and user +
# system CPU time of the process). On a loaded machine the process gets a varying share of the
# cores, so the CPU-time ratio is printed beside the wall-time one (the target is wall time, idle).
run() {
  label=$1
  shift
  QUARK_CALIB_BACKGROUND=${BG:-1} QUARK_CALIB_PROFILE=1 /usr/bin/time -f "%e %M %U %S" -o "$OUT/time" "$@" >/dev/null 2>"$OUT/err"
  set -- $(cat "$OUT/time")
  echo "$label $1 $2 $(echo "$3 $4" | awk '{ printf "%.2f", $1 + $2 }')"
  return 0
}

for i in $(seq "${RUNS:-1}"); do
  echo "run $i, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  one=$(run infer1 "$Q" "$M" "$OUT/o.onnx" $ARGS --samples 1 --infer-only 1)
  all=$(run inferN "$Q" "$M" "$OUT/o.onnx" $ARGS --samples "$N" --infer-only "$N")
  echo "$one"
  echo "$all"
  for p in $PRESETS; do
    for BG in 1 ${INPLACE:+0}; do
      label=$p
      [ "$BG" = 0 ] && label="$p-in-place"
      r=$(BG=$BG run "$label" "$Q" "$M" "$OUT/q.onnx" --preset "$p" $ARGS --samples "$N")
      echo "$r"
      sed -n 's/^calibration profile: /  phases: /p' "$OUT/err"
      echo "$one $all $r" | awk -v n="$N" '{
        printf "%s: time %.2fx of %d inferences (target 1.5x; CPU time %.2fx), peak RSS %.2fx of one inference (target 2x)\n",
               $9, $10 / $6, n, $12 / $8, $11 / $3 }'
    done
  done
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
