#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference values for tests/algo/smooth_quant_test.cpp, computed with numpy in float32.

Written from quark-spec section 10.2 (Quark's SmoothQuant as numpy arithmetic), independent of
include/quark/algo/smooth_quant.hpp: act_scale = max over rows of |x| per column (float32),
weight_scale = max over columns of |W| per row, s = act_scale ** alpha / (weight_scale + 1e-9)
** (1 - alpha). The maxima are exact (bit patterns); the factors are printed as float64 values
of the formula on those float32 statistics (weight_scale + 1e-9 rounded to float32 as numpy
does): numpy's own float32 power is not correctly rounded (it differs from the exact value by an
ulp on some inputs, and between its SIMD paths), so the test allows the two float32 roundings of
Quark's arithmetic and no more. The data are small and fixed (seeded) and every channel has a
positive statistic (quark-cpp departs from Quark only for zero channels).
Run: /usr/bin/python3 gen_smooth_quant_reference.py
"""
import numpy as np

rng = np.random.default_rng(20261128)
K, N, ROWS = 6, 5, 7
x = (rng.standard_normal((2, ROWS, K)) * np.array([0.5, 8.0, 1.0, 0.02, 30.0, 3.0])).astype(np.float32)
w = (rng.standard_normal((K, N)) * 0.3).astype(np.float32)


def bits(a):
    return ", ".join("0x%08x" % v for v in np.asarray(a, dtype=np.float32).ravel().view(np.uint32))


print("// x: 2 batches of %d x %d" % (ROWS, K))
print("x = {%s};" % bits(x))
print("w = {%s};" % bits(w))
act = None
for batch in x:
    m = np.max(np.absolute(batch.reshape(-1, K)), axis=0)
    act = m if act is None else np.where(act > m, act, m)
print("amax = {%s};" % bits(act))
for alpha in (0.5, 0.8, 0.25):
    wmax = (np.max(abs(w), axis=1) + 1e-9).astype(np.float32)
    a_exp = float(np.float32(alpha))
    w_exp = float(np.float32(1 - alpha))
    s = act.astype(np.float64) ** a_exp / wmax.astype(np.float64) ** w_exp
    print("// alpha %g" % alpha)
    print("s = {%s};" % ", ".join("%.17g" % v for v in s))
