#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference values for tests/algo/adam_test.cpp, computed with numpy in float64.

An implementation independent of include/quark/algo/adam.hpp, written from the algorithm that
torch.optim.Adam documents (defaults betas (0.9, 0.999), eps 1e-8, no weight decay, no amsgrad),
in torch's own arrangement of the bias correction (step_size = lr / (1 - beta1^t),
denom = sqrt(v) / sqrt(1 - beta2^t) + eps, p -= step_size * m / denom), which differs from
quark's only in rounding order. Problem: minimise f(p) = (p0 - 3)^2 + 10 (p1 + 0.5)^2 from
p = (1, 1) with lr 0.1; the gradient is (2 (p0 - 3), 20 (p1 + 0.5)). Prints three steps of p
(17 significant digits) as C++ initialisers. Run: /usr/bin/python3 gen_adam_reference.py
"""
import numpy as np

lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
p = np.array([1.0, 1.0])
m = np.zeros(2)
v = np.zeros(2)
for t in range(1, 4):
    g = np.array([2.0 * (p[0] - 3.0), 20.0 * (p[1] + 0.5)])
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    step_size = lr / (1.0 - b1 ** t)
    denom = np.sqrt(v) / np.sqrt(1.0 - b2 ** t) + eps
    p = p - step_size * m / denom
    print("{%.17g, %.17g},  // step %d" % (p[0], p[1], t))
