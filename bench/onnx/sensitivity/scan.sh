#!/bin/sh
# SPDX-License-Identifier: MIT
# Per-tensor sensitivity of a model to activation quantization (docs/bench/sensitivity.md).
# Quantizes MODEL with CONFIG (default: int8 per-tensor activations only, A8W8's activation
# spec, weights float) on rendered-text images, then scores in ONNX Runtime one variant per
# activation Q/DQ pair with only that pair kept ("in", default) or only that pair removed ("out").
#   bench/onnx/sensitivity/scan.sh QUARK_QUANTIZE MODEL [HxW] [CONFIG] [in|out]
# Needs /usr/bin/python3 with numpy + onnx, node and ONNX Runtime in $QUARK_ORT_DIR (.cache/ort).
set -eu
Q=${1:?usage: scan.sh QUARK_QUANTIZE MODEL [HxW] [CONFIG] [in|out]}
M=${2:?usage: scan.sh QUARK_QUANTIZE MODEL [HxW] [CONFIG] [in|out]}
HW=${3:-160x160}
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=${4:-$HERE/activations_int8.json}
MODE=${5:-in}
H=${HW%x*}
W=${HW#*x}
export QUARK_ORT_DIR=${QUARK_ORT_DIR:-.cache/ort}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 "$HERE/render_text.py" "$H" "$W" 8 "$T/calib"
/usr/bin/python3 "$HERE/render_text.py" "$H" "$W" 2 "$T/eval" 100
"$Q" "$M" "$T/q.onnx" --config "$CFG" --calib-data "$T/calib" -q --no-summary
/usr/bin/python3 "$HERE/qdq_variants.py" "$T/q.onnx" "$T/var" "$MODE"
node "$HERE/score_variants.js" "$M" "$T/var" "$T/eval/s00/x.npy" "$T/eval/s01/x.npy" >"$T/raw"
sort -n "$T/raw" >"$T/scores"
echo "variants: $(wc -l <"$T/scores") activation Q/DQ pairs, mode '$MODE'"
awk '{d = 1 - $1; if (d > 0.01) a++; else if (d > 0.001) b++; else c++}
     END {printf "cosine loss > 1%%: %d pairs, 0.1-1%%: %d, < 0.1%%: %d\n", a, b, c}' "$T/scores"
echo "most sensitive (mean cosine, variant, tensor):"
head -20 "$T/scores"
