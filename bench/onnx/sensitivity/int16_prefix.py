#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How many of a model's first activations must be int16 for a target accuracy.

    int16_prefix.py QUARK_QUANTIZE MODEL CONFIG CAL_DIR EVAL_DIR K [K ...]

Quantizes MODEL once with CONFIG (a quark_quantize JSON configuration) to list the activation
tensors it quantizes, in the order their QuantizeLinear nodes appear (topological order). Then,
for each K, quantizes again with the first K of them raised to int16 (TensorQuantOverrides
quant_type QInt16, calibrated like the others) and prints the mean cosine similarity that
`quark_quantize --eval-data EVAL_DIR` reports against the float model (our runtime).
docs/bench/sensitivity.md, "At 640x640", has what this found on PaddleOCR v4 det.

Needs numpy and onnx (Debian's python3-onnx). Work files go to a temporary folder.
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx


def quantize(tool, model, config, out, cal, evl):
    r = subprocess.run([tool, model, str(out), "--config", str(config), "--calib-data", cal,
                        "--eval-data", evl, "--no-summary"], capture_output=True, text=True)
    m = re.search(r"Mean cos similarity: ([0-9.]+)", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"quark_quantize failed on {config}:\n{r.stderr[-2000:]}")
    return float(m.group(1))


def activations(path):
    g = onnx.load(str(path)).graph
    constants = {i.name for i in g.initializer}
    constants |= {o for n in g.node if n.op_type == "Constant" for o in n.output}
    names = []
    for n in g.node:
        x = n.input[0] if n.op_type == "QuantizeLinear" else None
        # A tensor the quantizer renamed (a pair's output, "..._QuantizeLinear_Input") is not a
        # name of the prepared model: TensorQuantOverrides would refuse it.
        if x and x not in constants and x not in names and not x.endswith("_QuantizeLinear_Input"):
            names.append(x)
    return names


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    tool, model, config, cal, evl = sys.argv[1:6]
    ks = [int(k) for k in sys.argv[6:]]
    base = json.loads(Path(config).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"K=0: {quantize(tool, model, config, tmp / 'q.onnx', cal, evl):.4f}", flush=True)
        acts = activations(tmp / "q.onnx")
        print(f"{len(acts)} activations can be raised", flush=True)
        for k in ks:
            c = json.loads(json.dumps(base))
            chosen = acts[:k]
            c.setdefault("extra_options", {})["TensorQuantOverrides"] = {
                a: [{"quant_type": "QInt16"}] for a in chosen}
            path = tmp / f"k{k}.json"
            path.write_text(json.dumps(c))
            cos = quantize(tool, model, path, tmp / f"k{k}.onnx", cal, evl)
            print(f"K={k}: {cos:.4f} (last: {chosen[-1] if chosen else '-'})", flush=True)


if __name__ == "__main__":
    main()
