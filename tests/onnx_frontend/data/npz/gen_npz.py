#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the .npz fixtures of quantizer_calib_data_test.cpp with NumPy itself (the oracle for
the archive layout: np.savez writes each member with a ZIP64 extra field, np.savez_compressed
deflates them):
  two.npz         np.savez(x=float32 [2, 3] = 0.5 * (1..6), ids=int64 [4] = [-2, 0, 7, 2^40])
  compressed.npz  np.savez_compressed of the same arrays
  ramp_compressed.npz  np.savez_compressed(ramp=float32 [600, 500], element i = i % 7): 1.2 MB
                  deflated to 3 KB
Run from this folder: /usr/bin/python3 gen_npz.py"""
import numpy as np

x = (0.5 * np.arange(1, 7, dtype=np.float32)).reshape(2, 3)
ids = np.array([-2, 0, 7, 2**40], dtype=np.int64)
np.savez('two.npz', x=x, ids=ids)
np.savez_compressed('compressed.npz', x=x, ids=ids)
ramp = (np.arange(600 * 500) % 7).astype(np.float32).reshape(600, 500)
np.savez_compressed('ramp_compressed.npz', ramp=ramp)
