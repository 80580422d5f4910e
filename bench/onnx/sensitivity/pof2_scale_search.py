#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Search each activation's power-of-two scale against the model's output (a research tool).

Power-of-two MinMSE (XINT8, VINT8) picks each activation's scale alone, by the squared error of
that tensor. This script asks what the output would prefer: starting from a quantized QDQ model,
it scores in ONNX Runtime, on the given samples, every model that halves or doubles ONE
activation's scale (all Q/DQ pairs reading that tensor), mean cosine of output 0 against the
float model. Then it applies the improving moves one at a time, best first, keeping each one that
still raises the score. PASSES repeats this around the new point.

Writes OUT_DIR/tuned.onnx (the QDQ model with the chosen scales), OUT_DIR/factors.json
({scale initializer: factor}) and OUT_DIR/overrides.json (TensorQuantOverrides entries with
the tuned scales, for a second quark_quantize run, e.g. with AdaRound on top).
The tuned model ignores the NPU's scale-alignment rules (Concat inputs, shift limits).

  QUARK_ORT_DIR=.cache/ort pof2_scale_search.py QDQ.onnx FLOAT.onnx SAMPLE_DIR OUT_DIR [PASSES]

SAMPLE_DIR holds one folder per sample with the model's single input as x.npy (what
quark_render_text writes). docs/bench/quantizer.md (session 56) has the figures.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    src, flt, sample_dir, out = sys.argv[1:5]
    passes = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    samples = sorted(os.path.join(sample_dir, d, "x.npy") for d in os.listdir(sample_dir))
    os.makedirs(out, exist_ok=True)
    m = onnx.load(src)
    inits = {i.name: i for i in m.graph.initializer}
    consts = set(inits) | {o for n in m.graph.node if n.op_type == "Constant" for o in n.output}
    # tensor -> the scale initializers of the Q nodes reading it (DQ nodes share them)
    scales_of = {}
    zero_point_of = {}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in consts:
            scales_of.setdefault(n.input[0], set()).add(n.input[1])
            zero_point_of[n.input[1]] = n.input[2] if len(n.input) > 2 else ""
    base = {s: numpy_helper.to_array(inits[s]).copy() for ss in scales_of.values() for s in ss}
    for s, v in base.items():
        if v.size != 1 or v.item() <= 0 or np.log2(v.item()) != np.round(np.log2(v.item())):
            sys.exit("%s: scale %s is not one power of two" % (src, s))

    def write(path, factors):
        for t, f in factors.items():
            for s in scales_of[t]:
                inits[s].CopyFrom(numpy_helper.from_array((base[s] * f).astype(np.float32), s))
        onnx.save(m, path)
        for t in factors:
            for s in scales_of[t]:
                inits[s].CopyFrom(numpy_helper.from_array(base[s], s))

    def score(variants):  # [(tag, factors)] -> {tag: mean cosine}
        d = os.path.join(out, "variants")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with open(os.path.join(d, "index.txt"), "w") as f:
            for k, (tag, fac) in enumerate(variants):
                write(os.path.join(d, "%04d.onnx" % k), fac)
                f.write("%04d %s\n" % (k, tag))
        r = subprocess.run(["node", os.path.join(HERE, "score_variants.js"), flt, d] + samples,
                           capture_output=True, text=True, check=True).stdout
        shutil.rmtree(d)
        res = {}
        for line in r.strip().split("\n"):
            sc, _, tag = line.split(" ", 2)
            res[tag] = float(sc)
        return res

    cur = {}
    best = score([("base", {})])["base"]
    print("start: mean cosine %.5f on %d samples, %d activations" % (best, len(samples), len(scales_of)),
          flush=True)
    for p in range(passes):
        cands = []
        for t in scales_of:
            for f in (0.5, 2.0):
                fac = dict(cur)
                fac[t] = cur.get(t, 1.0) * f
                cands.append(("%s*%g" % (t, f), fac))
        res = {}
        for i in range(0, len(cands), 40):
            res.update(score(cands[i:i + 40]))
        moves = sorted(((v - best, k) for k, v in res.items() if v > best), reverse=True)
        print("pass %d: %d of %d moves improve alone" % (p + 1, len(moves), len(cands)), flush=True)
        for _, k in moves:
            t, f = k.rsplit("*", 1)
            fac = dict(cur)
            fac[t] = cur.get(t, 1.0) * float(f)
            v = score([("try", fac)])["try"]
            if v > best:
                cur, best = fac, v
                print("  %s -> %.5f" % (k, v), flush=True)
        print("after pass %d: %.5f, %d scales changed" % (p + 1, best, sum(f != 1.0 for f in cur.values())),
              flush=True)
    cur = {t: f for t, f in cur.items() if f != 1.0}
    write(os.path.join(out, "tuned.onnx"), cur)
    with open(os.path.join(out, "factors.json"), "w") as f:
        json.dump(cur, f, indent=1)
    ov = {}
    for t, fac in cur.items():
        s = sorted(scales_of[t])[0]
        z = zero_point_of[s]
        zp = int(numpy_helper.to_array(inits[z]).item()) if z in inits else 0
        ov[t] = [{"scale": float(base[s].item() * fac), "zero_point": zp}]
    with open(os.path.join(out, "overrides.json"), "w") as f:
        json.dump(ov, f, indent=1)


if __name__ == "__main__":
    main()
