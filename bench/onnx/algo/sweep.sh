#!/bin/bash
# SPDX-License-Identifier: MIT
# The CLE / bias-correction table of docs/bench/quantizer.md ("CLE and bias correction"):
# every preset x {none, cle, bias_correction, cle + bias_correction} x {text, random calibration}
# on PP-OCRv4 det (160x160) and the mobile v2 classifier (48x192), cosine of output 0 against the
# float model on 4 evaluation text images (quark_quantize --eval with EvalDataReader).
#
#   bench/onnx/algo/sweep.sh build/dev/examples/onnx/quark_quantize [WORK_DIR]
#
# presets.json holds to_json(get_default_config(P)) of the four presets (the configurations are
# the preset plus algo_config / granularity changes). Set WEIGHTS=channel for per-channel weights,
# WEIGHTS_ONLY=1 for WeightsOnly.
set -euo pipefail
Q=$(realpath "$1"); W=${2:-/tmp/quark_algo_sweep}; HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd); M=$ROOT/.cache/models/ocr-models/assets; PY=/usr/bin/python3
mkdir -p "$W"
R=$ROOT/bench/onnx/sensitivity/render_text.py
[ -d "$W/det" ] || $PY "$R" 160 160 8 "$W/det" 0 >/dev/null
[ -d "$W/deteval" ] || $PY "$R" 160 160 4 "$W/deteval" 100 >/dev/null
[ -d "$W/cls" ] || $PY "$R" 48 192 8 "$W/cls" 0 >/dev/null
[ -d "$W/clseval" ] || $PY "$R" 48 192 4 "$W/clseval" 100 >/dev/null
for model in det cls; do
  if [ $model = det ]; then F=$M/ch_PP-OCRv4_det_infer.onnx; SH=x:1x3x160x160
  else F=$M/ch_ppocr_mobile_v2.0_cls_infer.onnx; SH=x:1x3x48x192; fi
  for p in A8W8 XINT8 VINT8 A16W8; do for a in none cle bc clebc; do
    $PY - "$HERE/presets.json" "$p" "$a" "$W/${model}eval" "${WEIGHTS:-tensor}" "${WEIGHTS_ONLY:-0}" \
      > "$W/cfg.json" <<'PY'
import json, sys
presets, p, a, ev, gran, wo = sys.argv[1:]
c = json.load(open(presets))[p]
c["algo_config"] = {"none": [], "cle": [{"name": "cle"}], "bc": [{"name": "bias_correction"}],
                    "clebc": [{"name": "cle"}, {"name": "bias_correction"}]}[a]
if gran == "channel":
    c["global_config"]["weight"]["quant_granularity"] = "Channel"
if wo == "1":
    c["extra_options"]["WeightsOnly"] = True
c["extra_options"].update({"EvalMetrics": True, "EvalDataReader": ev})
print(json.dumps(c))
PY
    for cal in text random; do
      if [ $cal = text ]; then D=(--calib-data "$W/$model"); else D=(--random --shape $SH --samples 8); fi
      out=$("$Q" "$F" "$W/out.onnx" --config "$W/cfg.json" "${D[@]}" --eval 4 2>&1 || true)
      mean=$(echo "$out" | awk '/Mean cos/ {print $4}'); mn=$(echo "$out" | awk '/Min cos/ {print $4}')
      notes=$(echo "$out" | grep -o "cle: [0-9]* pairs, [0-9]* triples\|bias_correction: [0-9]* biases\|error: .*" | tr '\n' ';' || true)
      echo "$model $p $a $cal mean=$mean min=$mn $notes"
    done
  done; done
done
