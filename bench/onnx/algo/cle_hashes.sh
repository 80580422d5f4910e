#!/bin/bash
# SPDX-License-Identifier: MIT
# SHA-256 of the models quark_quantize writes with CLE, bias correction and auto mixed precision
# on PP-OCRv4 det (160x160) and the mobile v2 classifier (48x192), calibrated on 8 rendered text
# images. Used to show that moving their numerics into include/quark/algo/cle.hpp,
# algo/bias_correction.hpp and scale/retype.hpp left the written models byte-identical: run it
# before and after a change with the same build type and compare the lines.
#
#   bench/onnx/algo/cle_hashes.sh build/dev/examples/onnx/quark_quantize [WORK_DIR]
set -euo pipefail
Q=$(realpath "$1"); W=${2:-/tmp/quark_cle_hashes}; HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd); M=$ROOT/.cache/models/ocr-models/assets; PY=/usr/bin/python3
R=$ROOT/bench/onnx/sensitivity/render_text.py
mkdir -p "$W"
[ -d "$W/det" ] || $PY "$R" 160 160 8 "$W/det" 0 >/dev/null
[ -d "$W/cls" ] || $PY "$R" 48 192 8 "$W/cls" 0 >/dev/null
for model in cls det; do
  if [ $model = det ]; then F=$M/ch_PP-OCRv4_det_infer.onnx; else F=$M/ch_ppocr_mobile_v2.0_cls_infer.onnx; fi
  for pa in A8W8:cle A8W8:clebc XINT8:cle A8W8:bc A8W8:cle8 XINT8:cle8nb; do
    p=${pa%%:*}; a=${pa##*:}
    $PY - "$HERE/presets.json" "$p" "$a" > "$W/cfg.json" <<'PY'
import json, sys
presets, p, a = sys.argv[1:]
c = json.load(open(presets))[p]
c["algo_config"] = {
    "cle": [{"name": "cle"}], "bc": [{"name": "bias_correction"}],
    "clebc": [{"name": "cle"}, {"name": "bias_correction"}],
    "cle8": [{"name": "cle", "cle_steps": 8}],
    "cle8nb": [{"name": "cle", "cle_steps": 8, "cle_scale_append_bias": False,
                "cle_scale_use_threshold": False}]}[a]
print(json.dumps(c))
PY
    "$Q" "$F" "$W/out.onnx" --config "$W/cfg.json" --calib-data "$W/$model" >"$W/log" 2>&1
    echo "${model}_${p}_${a} $(sha256sum < "$W/out.onnx" | cut -c1-64)"
  done
done
"$Q" "$M/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$W/out.onnx" --preset S16S16_MIXED_S8S8 \
  --calib-data "$W/cls" >"$W/log" 2>&1
echo "cls_S16S16_MIXED_S8S8 $(sha256sum < "$W/out.onnx" | cut -c1-64)"
