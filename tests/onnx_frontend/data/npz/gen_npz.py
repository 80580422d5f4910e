#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the .npz fixtures of quantizer_calib_data_test.cpp with NumPy itself (the oracle for
the archive layout: np.savez writes each member with a ZIP64 extra field, np.savez_compressed
deflates them):
  two.npz         np.savez(x=float32 [2, 3] = 0.5 * (1..6), ids=int64 [4] = [-2, 0, 7, 2^40])
  compressed.npz  np.savez_compressed of the same arrays
  ramp_compressed.npz  np.savez_compressed(ramp=float32 [600, 500], element i = i % 7): 1.2 MB
                  deflated to 3 KB
  fortran.npy     np.save of a Fortran-ordered int16 [2, 3, 4], element (i, j, k) = 100i + 10j + k
  fortran2.npy    np.save of the transpose of float32 [3, 5] = arange(15) (a [5, 3], column-major)
  big_endian.npy  np.save of '>f4' [2, 3] = 0.5 * (1..6)
  big_endian_i8.npy  np.save of '>i8' [4] = [-2, 0, 7, 2^40]
Run from this folder: /usr/bin/python3 gen_npz.py"""
import numpy as np

x = (0.5 * np.arange(1, 7, dtype=np.float32)).reshape(2, 3)
ids = np.array([-2, 0, 7, 2**40], dtype=np.int64)
np.savez('two.npz', x=x, ids=ids)
np.savez_compressed('compressed.npz', x=x, ids=ids)
ramp = (np.arange(600 * 500) % 7).astype(np.float32).reshape(600, 500)
np.savez_compressed('ramp_compressed.npz', ramp=ramp)
i, j, k = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing='ij')
np.save('fortran.npy', np.asfortranarray((100 * i + 10 * j + k).astype(np.int16)))
np.save('fortran2.npy', np.arange(15, dtype=np.float32).reshape(3, 5).T)
np.save('big_endian.npy', x.astype('>f4'))
np.save('big_endian_i8.npy', ids.astype('>i8'))
