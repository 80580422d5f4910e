#!/bin/bash
# SPDX-License-Identifier: MIT
# Weight sensitivity of a model (docs/bench/sensitivity.md, "A16W8"): for each Conv /
# ConvTranspose node, quantize only that node's weight (Int8, per channel, symmetric; WeightsOnly,
# everything else float) and print the mean cosine of output 0 against the float model over the
# evaluation folder (quark_quantize --eval, EvalDataReader).
#
#   bench/onnx/sensitivity/weight_scan.sh QUARK_QUANTIZE MODEL CALIB_DIR EVAL_DIR [N_EVAL]
#
# CALIB_DIR / EVAL_DIR: folders as render_text.py writes them (e.g. 160 160 8 DIR 0 and
# 160 160 4 DIR 100). Needs /usr/bin/python3 with onnx.
set -euo pipefail
Q=$(realpath "$1"); M=$(realpath "$2"); CAL=$(realpath "$3"); EV=$(realpath "$4"); N=${5:-4}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
/usr/bin/python3 - "$M" > "$W/nodes" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
for i, n in enumerate(m.graph.node):
    if n.op_type in ("Conv", "ConvTranspose"):
        print(n.name or "n%d" % i, n.op_type)
PY
while read -r name op; do
  /usr/bin/python3 - "$name" "$EV" > "$W/cfg.json" <<'PY'
import json, sys
w = {"spec": "Int8Spec", "symmetric": True, "scale_type": "Float32",
     "calibration_method": "MinMax", "quant_granularity": "Channel"}
print(json.dumps({"global_config": {"input_tensors": None, "weight": None},
                  "specific_layer_config": [{"config": {"weight": w}, "layers": [sys.argv[1]]}],
                  "extra_options": {"WeightsOnly": True, "EvalMetrics": True,
                                    "EvalDataReader": sys.argv[2]}}))
PY
  cos=$("$Q" "$M" "$W/q.onnx" --config "$W/cfg.json" --calib-data "$CAL" --eval "$N" --no-summary \
          2>&1 | awk '/Mean cos/ {print $4}')
  echo "$name $op ${cos:-error}"
done < "$W/nodes"
