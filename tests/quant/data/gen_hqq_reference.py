#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference values for tests/quant/nbits_test.cpp's HQQ case, computed with numpy in float32.

Written from quark-spec section 10.7 ("HQQ", ONNX Runtime's HQQWeightOnlyQuantizer as the spec
describes it), independent of include/quark/quant/nbits.hpp: B [K, N] is transposed and each
column is cut into groups of block_size values along K, zero-padded; per group the inverse scale
s = min(15 / (max - min), 2e4) (a zero range counts as 15) and z = round(-min * s); then up to 20
rounds of q = clip(round(w s + z), 0, 15), r = (q - z) / s, e = shrink_0.7(w - r) with beta from
10 growing by 1.01 per round, z = mean(q - (w - e) s) per group; a round whose mean |w - r| over
the whole tensor does not improve on the best stops the loop (its z is kept). Every operation is
float32 as torch does it on the CPU (numpy's float32 arithmetic; its mean sums in float32, in
pairs). Prints the codes of the padded groups ([N][k_blocks][block_size]), the stored scales
1 / s and zero points as float32 bit patterns, and the number of rounds, as C++ initialisers.
Run: /usr/bin/python3 gen_hqq_reference.py
"""
import numpy as np

K, N, BS = 40, 3, 16
rng = np.random.default_rng(20261128)
w = (rng.standard_normal((K, N)) * np.array([0.5, 1.0, 0.05])).astype(np.float32)
w[0:16, 2] = 0.0  # a block whose range is 0

kb = (K + BS - 1) // BS
wt = np.zeros((N, kb * BS), dtype=np.float32)
wt[:, :K] = w.T
g = wt.reshape(-1, BS)
lo = g.min(axis=1, keepdims=True)
hi = g.max(axis=1, keepdims=True)
rng_ = hi - lo
rng_[rng_ == 0] = np.float32(15)
s = np.minimum(np.float32(15) / rng_, np.float32(2e4)).astype(np.float32)
z = np.round(-lo * s).astype(np.float32)
best = 1e4
beta = 10.0
rounds = 0
for it in range(20):
    rounds += 1
    q = np.clip(np.round(g * s + z), 0, 15).astype(np.float32)
    r = ((q - z) / s).astype(np.float32)
    d = (g - r).astype(np.float32)
    ad = np.abs(d)
    shrunk = ad - np.float32(1.0 / beta) * np.power(ad + np.float32(1e-8), np.float32(0.7 - 1))
    e = (np.sign(d) * np.maximum(shrunk, np.float32(0))).astype(np.float32)
    z = np.mean(q - (g - e) * s, axis=1, keepdims=True, dtype=np.float32)
    beta *= 1.01
    current = float(np.mean(np.abs(g - r), dtype=np.float32))
    if current < best:
        best = current
    else:
        break
q = np.clip(np.round(g * s + z), 0, 15).astype(np.int32)


def bits(a):
    return ", ".join("0x%08x" % v for v in np.asarray(a, dtype=np.float32).ravel().view(np.uint32))


print("w = {%s};" % bits(w))
print("codes = {%s};" % ", ".join(str(v) for v in q.ravel()))
print("scales = {%s};" % bits((np.float32(1.0) / s).ravel()))
print("zeros = {%s};" % bits(z.ravel()))
print("rounds = %d;" % rounds)
