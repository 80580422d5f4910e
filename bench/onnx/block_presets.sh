#!/bin/bash
# SPDX-License-Identifier: MIT
# The block-format table of docs/bench/quantizer.md ("Block formats"): BFP16 / MX / MXFP presets on
# the mobile v2 classifier (48x192) and PP-OCRv4 det (160x160) through our runtime (ORT has no
# com.amd.quark kernels), cosine of output 0 against the float model on 4 evaluation text images
# (seeds 100-103 of render_text.py, quark_quantize --eval 4). Block specs and unscaled BFloat16
# need no calibration ranges, so the evaluation images also serve as the calibration data (only
# the first one is run, for the tensor types).
#
#   bench/onnx/block_presets.sh build/dev/examples/onnx/quark_quantize [WORK_DIR] [PRESETS...]
set -euo pipefail
Q=$(realpath "$1"); W=${2:-/tmp/quark_block_presets}; shift $(($# < 2 ? $# : 2))
PRESETS=("$@"); [ ${#PRESETS[@]} -gt 0 ] || PRESETS=(BFP16 MXINT8 BF16_BFP16 BF16_MXINT8 MX9 MX6 MX4 MXFP8E4M3 MXFP6E2M3 MXFP4E2M1)
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
M=$ROOT/.cache/models/ocr-models/assets; PY=/usr/bin/python3; R=$ROOT/bench/onnx/sensitivity/render_text.py
mkdir -p "$W"
for model in cls det; do
  if [ $model = det ]; then F=$M/ch_PP-OCRv4_det_infer.onnx; H=160; WD=160
  else F=$M/ch_ppocr_mobile_v2.0_cls_infer.onnx; H=48; WD=192; fi
  [ -d "$W/${model}eval" ] || $PY "$R" $H $WD 4 "$W/${model}eval" 100 >/dev/null
  for p in "${PRESETS[@]}"; do
    out=$("$Q" "$F" "$W/out.onnx" --preset "$p" --calib-data "$W/${model}eval" --eval 4 2>&1 || true)
    mean=$(echo "$out" | awk '/Mean cos/ {print $4}'); mn=$(echo "$out" | awk '/Min cos/ {print $4}')
    err=$(echo "$out" | grep -o "error: .*" || true)
    echo "$model $p mean=$mean min=$mn $err"
  done
done
