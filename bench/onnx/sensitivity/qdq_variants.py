#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Leave-one-in / leave-one-out variants of a QDQ model, for per-tensor sensitivity scans.

For every QuantizeLinear -> DequantizeLinear pair on an ACTIVATION (the Q input is neither an
initializer nor a Constant node's output), writes a copy of the model in which
  mode "in":  only that pair is kept, every other activation pair is bypassed;
  mode "out": only that pair is bypassed.
Weight and constant pairs are left as they are (quantize with WeightsOnly or without a weight
spec to study activations alone). Writes OUT_DIR/NNN.onnx and OUT_DIR/index.txt ("NNN tensor").

  qdq_variants.py QDQ_MODEL OUT_DIR in|out
"""
import copy
import os
import sys

import onnx


def main():
    src, out_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode not in ("in", "out"):
        sys.exit("mode must be 'in' or 'out'")
    m = onnx.load(src)
    consts = {i.name for i in m.graph.initializer}
    consts |= {o for n in m.graph.node if n.op_type == "Constant" for o in n.output}
    dq_of = {}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear":
            dq_of.setdefault(n.input[0], []).append(n)
    pairs = [(q, d, q.input[0]) for q in m.graph.node if q.op_type == "QuantizeLinear"
             if q.input[0] not in consts for d in dq_of.get(q.output[0], [])]
    os.makedirs(out_dir, exist_ok=True)
    index = []
    for k, (_, _, tensor) in enumerate(pairs):
        bypass = {j for j in range(len(pairs)) if (j != k) == (mode == "in")}
        rename = {pairs[j][1].output[0]: pairs[j][2] for j in bypass}
        drop = {pairs[j][0].name for j in bypass} | {pairs[j][1].name for j in bypass}
        g = copy.deepcopy(m)
        kept = []
        for n in g.graph.node:
            if n.name in drop:
                continue
            for i, x in enumerate(n.input):
                n.input[i] = rename.get(x, x)
            kept.append(n)
        del g.graph.node[:]
        g.graph.node.extend(kept)
        for o in g.graph.output:  # a graph output that was a bypassed DQ's output
            if o.name in rename:
                g.graph.node.append(onnx.helper.make_node("Identity", [rename[o.name]], [o.name]))
        onnx.save(g, os.path.join(out_dir, "%03d.onnx" % k))
        index.append("%03d %s" % (k, tensor))
    with open(os.path.join(out_dir, "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")


if __name__ == "__main__":
    main()
