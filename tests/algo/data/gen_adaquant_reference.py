#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference values for tests/algo/adaquant_test.cpp, computed with numpy in float64.

An implementation independent of include/quark/algo/adaquant.hpp, written from the definition
(quark-spec §10.5): a 2x3 linear layer y = W x + b on 4 samples, the loss
L = (1/4) sum_s sum_o (Wq x_s + b - (W x_s + b0))_o^2 with Wq = s (clip(round_half_even(w / s),
qmin, qmax)) (w / s divided in float32, as ONNX QuantizeLinear), s = 0.125, clip [-8, 7]; the
gradient reaches w straight through the rounding where w / s lies in [qmin - 0.5, qmax + 0.5]
(weight 3, w / s = 9.6, is outside and never moves); Adam as torch.optim.Adam documents it (lr
1e-3, betas 0.9 / 0.999, eps 1e-8) on w and on b. No w / s comes within 0.05 of a rounding
boundary during the 5 steps, so float rounding cannot flip a code. Prints the weights and the
bias after 5 steps (17 significant digits) and the final codes as C++ initialisers.
Run: /usr/bin/python3 gen_adaquant_reference.py
"""
import numpy as np

w0 = np.array([0.30, -0.47, 0.7875, 1.20, -0.20, 0.0375], dtype=np.float32).astype(np.float64)
x = np.array([[0.9, -0.3, 0.5], [0.2, 0.8, -0.6], [-0.7, 0.4, 0.1], [0.6, 0.6, 0.9]],
             dtype=np.float32).astype(np.float64)
b0 = np.array([0.1, -0.2])
s, qmin, qmax = np.float32(0.125), -8, 7
lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8

W0 = w0.reshape(2, 3)
target = x @ W0.T + b0


def fake(w):
    q = np.clip(np.round(w.astype(np.float32) / s), qmin, qmax)
    return q.astype(np.float64) * np.float64(s), q


def adam(p, g, m, v, t):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    step_size = lr / (1 - b1 ** t)
    denom = np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps
    return p - step_size * m / denom, m, v


w, b = w0.copy(), b0.copy()
mw, vw, mb, vb = np.zeros(6), np.zeros(6), np.zeros(2), np.zeros(2)
for t in range(1, 6):
    wq, _ = fake(w)
    d = x @ wq.reshape(2, 3).T + b - target  # 4 x 2
    gw = (2.0 / 4.0) * (d.T @ x).ravel()
    gb = (2.0 / 4.0) * d.sum(axis=0)
    v_ = w / np.float64(s)
    gw[(v_ < qmin - 0.5) | (v_ > qmax + 0.5)] = 0.0
    w, mw, vw = adam(w, gw, mw, vw, t)
    b, mb, vb = adam(b, gb, mb, vb, t)
    assert np.all(np.abs(np.abs(np.float32(w) / s % 1.0) - 0.5) > 0.05)
_, q = fake(w)
print("weights {" + ", ".join("%.17g" % v for v in w) + "}")
print("bias {" + ", ".join("%.17g" % v for v in b) + "}")
print("codes {" + ", ".join("%d" % v for v in q) + "}")
