#!/bin/bash
# SPDX-License-Identifier: MIT
# SHA-256 of the models quark_quantize writes with fast finetune (AdaRound / AdaQuant) on the
# mobile v2 classifier (48x192), calibrated on 4 rendered text images. Used to show that moving
# the fine-tune numerics into include/quark/algo/ left the written models byte-identical: run it
# before and after a change with the same build type and compare the lines.
#
#   bench/onnx/algo/finetune_hashes.sh build/dev/examples/onnx/quark_quantize [WORK_DIR]
set -euo pipefail
Q=$(realpath "$1"); W=${2:-/tmp/quark_finetune_hashes}; HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd); M=$ROOT/.cache/models/ocr-models/assets; PY=/usr/bin/python3
F=$M/ch_ppocr_mobile_v2.0_cls_infer.onnx
mkdir -p "$W"
[ -d "$W/cls" ] || $PY "$ROOT/bench/onnx/sensitivity/render_text.py" 48 192 4 "$W/cls" 0 >/dev/null
# name preset granularity algo params(json)
while read -r name preset gran algo params; do
  $PY - "$HERE/presets.json" "$preset" "$gran" "$algo" "$params" > "$W/cfg.json" <<'PY'
import json, sys
presets, p, gran, algo, params = sys.argv[1:]
c = json.load(open(presets))[p]
if gran == "channel":
    c["global_config"]["weight"]["quant_granularity"] = "Channel"
a = {"name": algo}
a.update(json.loads(params))
c["algo_config"] = [a]
print(json.dumps(c))
PY
  "$Q" "$F" "$W/$name.onnx" --config "$W/cfg.json" --calib-data "$W/cls" >"$W/$name.log" 2>&1
  echo "$name $(sha256sum < "$W/$name.onnx" | cut -c1-64)"
done <<'CASES'
a8w8_adaround A8W8 tensor adaround {"num_iterations":20,"num_batches":4}
a8w8_pc_adaround A8W8 channel adaround {"num_iterations":20,"num_batches":4,"batch_size":1}
a8w8_adaround_early A8W8 tensor adaround {"num_iterations":40,"num_batches":4,"early_stop":true,"log_period":5,"warm_start":0.1}
xint8_adaround XINT8 tensor adaround {"num_iterations":20,"num_batches":2,"batch_size":2}
a8w8_adaquant A8W8 tensor adaquant {"num_iterations":20,"num_batches":4,"learning_rate":1e-5}
a8w8_pc_adaquant_bias A8W8 channel adaquant {"num_iterations":20,"num_batches":4,"learning_rate":1e-5,"update_bias":true}
a16w8_adaquant_bias A16W8 tensor adaquant {"num_iterations":20,"num_batches":2,"batch_size":2,"learning_rate":1e-4,"update_bias":true}
CASES
