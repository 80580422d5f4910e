#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Inputs quark_evaluate must refuse (examples/onnx/check_evaluate.cmake): metrics_bad.npy
float32 [NaN, 1, 2], metrics_inf.npy float32 [1, inf, 2], metrics_empty.npy float32 of shape
(0, 3). Run from this folder: /usr/bin/python3 gen_bad_inputs.py"""
import numpy as np

np.save("metrics_bad.npy", np.array([np.nan, 1, 2], np.float32))
np.save("metrics_inf.npy", np.array([1, np.inf, 2], np.float32))
np.save("metrics_empty.npy", np.zeros((0, 3), np.float32))
