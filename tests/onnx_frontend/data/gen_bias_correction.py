#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# Generates the bias-correction fixture of tests/onnx_frontend/quantizer_algo_ort_test.cpp with
# numpy (run once with Debian's /usr/bin/python3, which has onnx + numpy; CI only reads the files):
#   bias_correction/model.onnx      x[1,4,5,5] -> Conv "ca" (1x1, 4 -> 3, bias) -> ya
#                                              -> Conv "cb" (3x3, 4 -> 2, pads 1, bias) -> yb
#   bias_correction/calib/sNN/x.npy 4 samples: x = integer in [60, 120) + 0.3, one element 127
#                                   (activation scale 1); the quantized input is x - 0.3, and
#                                   the float node must run on it (on x, d would be far off)
#   bias_correction/expected.txt    "<bias initializer> <int32 values>" after bias correction
# The quantization it assumes (the test checks the quantized model has it): int8 symmetric
# activations with MinMax (scale max|x| / 127 = 1), int8 symmetric per-tensor weights (scale
# max|W| / 127), int32 bias with scale s_x * s_w, Conv outputs not quantized
# (OpTypesToExcludeOutputQuantization). Bias correction as quark-spec §10.3: d = mean over
# samples, N, H, W of (float Conv - quantized Conv) on the quantized input; k = 1, or
# (max|b_f| / 256) / max|d| when max|d| > max|b_f| / 256 and max|d| > 0.1; b = b_f + k d,
# re-quantized with the same scale (round half to even).
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bias_correction")
rng = np.random.default_rng(20261122)

# ca: small biases, so the correction (weight rounding error times an input mean near 90) is
# damped; cb: large biases, not damped.
wa = rng.uniform(0.2, 1.0, size=(3, 4, 1, 1)).astype(np.float32)
wa[0, 0, 0, 0] = 1.27
ba = np.array([0.5, -1.0, 2.0], np.float32)
wb = rng.uniform(-1.0, 1.0, size=(2, 4, 3, 3)).astype(np.float32)
wb[1, 2, 1, 1] = -1.27
bb = np.array([600.0, -900.0], np.float32)

samples = []
for s in range(4):
    x = rng.integers(60, 120, size=(1, 4, 5, 5)).astype(np.float32) + np.float32(0.3)
    x[0, s % 4, 2, 2] = 127.0
    samples.append(x)


def conv(x, w, b, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, o, h, wd))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    return out + b.astype(np.float64).reshape(1, -1, 1, 1)


def q(v, s, lo, hi):
    return np.clip(np.rint(v.astype(np.float64) / s), lo, hi)


s_x = np.float32(127.0) / np.float32(127.0)
lines = []
for name, w, b, pad in (("ca_b", wa, ba, 0), ("cb_b", wb, bb, 1)):
    s_w = np.float32(np.abs(w).max()) / np.float32(127.0)
    w_dq = q(w, s_w, -127, 127) * np.float64(s_w)
    s_b = np.float64(np.float32(s_x) * np.float32(s_w))
    b_q = q(b, s_b, -2**31, 2**31 - 1)
    b_f = b_q * s_b
    diffs = []
    for x in samples:
        x_dq = q(x, s_x, -128, 127) * np.float64(s_x)
        diffs.append(conv(x_dq, w, b, pad) - conv(x_dq, w_dq, b_f, pad))
    d = np.concatenate(diffs).mean(axis=(0, 2, 3))
    max_d, max_b = np.abs(d).max(), np.abs(b_f).max()
    k = (max_b / 256) / max_d if (max_d > max_b / 256 and max_d > 0.1) else 1.0
    b_new = q(b_f + k * d, s_b, -2**31, 2**31 - 1).astype(np.int64)
    lines.append(name + " " + " ".join(str(v) for v in b_new) + "   # before " +
                 " ".join(str(int(v)) for v in b_q) + ", k " + repr(float(k)))

nodes = [
    helper.make_node("Conv", ["x", "wa", "ca_b"], ["ya"], name="ca"),
    helper.make_node("Conv", ["x", "wb", "cb_b"], ["yb"], name="cb", pads=[1, 1, 1, 1]),
]
graph = helper.make_graph(
    nodes, "bias_correction",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
    [helper.make_tensor_value_info("ya", TensorProto.FLOAT, [1, 3, 5, 5]),
     helper.make_tensor_value_info("yb", TensorProto.FLOAT, [1, 2, 5, 5])],
    [numpy_helper.from_array(wa, "wa"), numpy_helper.from_array(ba, "ca_b"),
     numpy_helper.from_array(wb, "wb"), numpy_helper.from_array(bb, "cb_b")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
os.makedirs(here, exist_ok=True)
onnx.save(model, os.path.join(here, "model.onnx"))
for i, x in enumerate(samples):
    d = os.path.join(here, "calib", "s%02d" % i)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "x.npy"), x)
with open(os.path.join(here, "expected.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
