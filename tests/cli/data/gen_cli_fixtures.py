#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Small fixtures for the quark_quantize command-line error tests (examples/onnx/check_cli.cmake).

Writes, in this folder: conv.onnx (x: 1x3x8x8 -> Conv 4x3x3x3 + bias -> Relu -> y, opset 13),
unsupported.onnx (the same input through an operator no runtime knows, "NoSuchOp"),
calib_ok/x.npy (1x3x8x8) and calib_bad_shape/x.npy (1x3x9x9). Run from this folder:
    /usr/bin/python3 gen_cli_fixtures.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)
w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
b = numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
                       helper.make_node("Relu", ["c"], ["y"], name="relu")],
                      "conv", [x], [y], [w, b])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="quark-cpp")
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, "conv.onnx")

u = helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 3, 8, 8])
g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["u"], name="mystery")],
                      "unsupported", [x], [u])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="quark-cpp")
m.ir_version = 8
onnx.save(m, "unsupported.onnx")

for name, shape in (("calib_ok", (1, 3, 8, 8)), ("calib_bad_shape", (1, 3, 9, 9))):
    os.makedirs(name, exist_ok=True)
    np.save(os.path.join(name, "x.npy"), rng.normal(0, 1, shape).astype(np.float32))
