#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference values for tests/metrics/metrics_test.cpp, computed with numpy in float64.

An implementation independent of include/quark/metrics.hpp: the windowed SSIM convolves each
plane with the full 2-D 11x11 Gaussian window (sigma 1.5) directly at every "valid" position
(quark-cpp filters rows then columns), with local variances E[x^2] - E[x]^2 and covariance
E[xy] - E[x]E[y] (Wang et al. 2004, the standard formula); PSNR uses Quark's peak max(x)
(quark-spec §11.1). Writes metrics_x.npy / metrics_y.npy (2 planes of 16 x 20, float32) and
metrics_reference.txt ("name value" lines, 17 significant digits), and metrics_zero.npy (all zero). Run from this folder:
    /usr/bin/python3 gen_metrics_reference.py
"""
import numpy as np

rng = np.random.default_rng(20261122)
planes, h, w = 2, 16, 20
yy, xx = np.mgrid[0:h, 0:w]
base = np.stack([120 + 60 * np.sin(0.45 * xx + 0.2 * p) * np.cos(0.3 * yy) + 3 * p
                 for p in range(planes)])
x = base.astype(np.float32)
y = (base + rng.normal(0, 9, base.shape)).astype(np.float32)
np.save("metrics_x.npy", x)
np.save("metrics_y.npy", y)
np.save("metrics_zero.npy", np.zeros_like(x))  # quark_evaluate: an undefined cosine

X, Y = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()
ref = {}
ref["cosine"] = X @ Y / (np.linalg.norm(X) * np.linalg.norm(Y))
ref["l2"] = np.linalg.norm(X - Y)
ref["l1"] = np.abs(X - Y).sum()
ref["psnr"] = 20 * np.log10(X.max()) - 10 * np.log10(np.mean((X - Y) ** 2))
L = 255.0
c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2


def ssim_global(a, b):
    ma, mb = a.mean(), b.mean()
    va, vb = a.var(), b.var()
    cov = ((a - ma) * (b - mb)).mean()
    return (2 * ma * mb + c1) * (2 * cov + c2) / ((ma ** 2 + mb ** 2 + c1) * (va + vb + c2))


ref["ssim_global"] = ssim_global(X, Y)
k = 11
t = np.arange(k) - 5.0
g1 = np.exp(-t ** 2 / (2 * 1.5 ** 2))
win = np.outer(g1, g1)
win /= win.sum()
total = 0.0
for p in range(planes):
    a, b = x[p].astype(np.float64), y[p].astype(np.float64)
    vals = []
    for r in range(h - k + 1):
        for c in range(w - k + 1):
            pa, pb = a[r:r + k, c:c + k], b[r:r + k, c:c + k]
            ma, mb = (win * pa).sum(), (win * pb).sum()
            va = (win * pa * pa).sum() - ma * ma
            vb = (win * pb * pb).sum() - mb * mb
            cov = (win * pa * pb).sum() - ma * mb
            vals.append((2 * ma * mb + c1) * (2 * cov + c2) /
                        ((ma ** 2 + mb ** 2 + c1) * (va + vb + c2)))
    total += np.mean(vals)
ref["ssim"] = total / planes
with open("metrics_reference.txt", "w") as f:
    for name, v in ref.items():
        f.write("%s %.17g\n" % (name, v))
