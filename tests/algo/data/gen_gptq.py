#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Reference cases for tests/algo/gptq_test.cpp: writes gptq_cases.txt next to this script.

A textbook GPTQ written for clarity, independently of include/quark/algo/gptq.hpp: numpy float64,
the Hessian by Quark's running mean over two batches (leading dimensions 2 and 3), the inverse
by numpy.linalg.inv, the upper factor as the transpose of numpy.linalg.cholesky of that inverse,
and one row at a time with the correction applied to every later row at once (no lazy blocks).
The grid (Quark's GPTQ rule, quark-spec section 10.4) and the codes are computed in float32 as
the library specifies (weights cast to float32, division in float32, round half to even).

Inputs: X (48 x 24, correlated features of unequal spread) and W (24 x 8), float32, seeded.
Cases: per tensor and per channel, symmetric and asymmetric, 3 / 4 / 8 bits, groups that divide
K and one that does not (10: groups 10, 10, 4), act_order, MSE, a dead feature (its column of X
zeroed), and two fixed grids (int8 per channel, uint4 per group with zero points).

Run: /usr/bin/python3 tests/algo/data/gen_gptq.py   (needs numpy only)
"""
import os

import numpy as np

K, N, ROWS = 24, 8, 48
BATCHES = [(0, 32, 2), (32, 48, 3)]  # rows [r0, r1) with leading dimension t

rng = np.random.default_rng(7301)
mix = np.eye(K) + 0.7 * np.eye(K, k=1) + 0.4 * np.eye(K, k=-2)
spread = np.linspace(0.4, 2.0, K)
X = ((rng.standard_normal((ROWS, K)) @ mix) * spread).astype(np.float32)
W = (0.1 * rng.standard_normal((K, N))).astype(np.float32)


def hessian(x32, dead):
    x = x32.astype(np.float64)
    if dead >= 0:
        x[:, dead] = 0.0
    h = np.zeros((K, K))
    n = 0
    for r0, r1, t in BATCHES:
        h *= n / (n + t)
        n += t
        xs = np.sqrt(2.0 / n) * x[r0:r1]
        h += xs.T @ xs
    return h


def f32(v):
    return np.float32(v)


def column_grid(col, maxq, sym, mse):
    """Quark's GPTQ (scale, zero) of one float32 vector."""
    xmin = min(f32(col.min()), f32(0))
    xmax = max(f32(col.max()), f32(0))
    if sym:
        xmax = max(-xmin, xmax)
        if xmin < 0:
            xmin = -xmax
    if xmin == 0 and xmax == 0:
        xmin, xmax = f32(-1), f32(1)

    def params(lo, hi):
        s = (hi - lo) / f32(maxq)
        z = f32((maxq + 1) // 2) if sym else np.round(-lo / s)
        return f32(s), f32(z)

    s, z = params(xmin, xmax)
    if mse:
        best = np.inf
        for i in range(80):
            p = f32(1.0 - i / 100.0)
            s1, z1 = params(p * xmin, p * xmax)
            q = np.clip(np.round(col / s1) + z1, 0, maxq)
            deq = s1 * (q - z1)
            err = np.sum(np.abs(deq.astype(np.float64) - col.astype(np.float64)) ** 2.4)
            if err < best:
                best, s, z = err, s1, z1
    return s, z


def computed_grid(rows32, bits, sym, per_channel, mse):
    maxq = 2 ** bits - 1
    if per_channel:
        sz = [column_grid(rows32[:, j], maxq, sym, mse) for j in range(N)]
    else:
        sz = [column_grid(rows32.ravel(), maxq, sym, mse)]
    return np.array([a for a, _ in sz], np.float32), np.array([b for _, b in sz], np.float32)


def gptq(w32, h, c):
    w = w32.astype(np.float64)
    h = h.copy()
    for d in range(K):
        if h[d, d] == 0:
            h[d, d] = 1.0
            w[d, :] = 0.0
    order = np.argsort(-np.diag(h), kind="stable") if c["act_order"] else np.arange(K)
    w = w[order]
    h = h[order][:, order]
    h += c["damp"] * np.mean(np.diag(h)) * np.eye(K)
    u = np.linalg.cholesky(np.linalg.inv(h)).T
    gs = K if c["group"] < 0 else c["group"]
    groups = (K + gs - 1) // gs
    computed = c["grid"] == "computed"
    if computed:
        qmin, qmax = 0, 2 ** c["bits"] - 1
        chans = N if c["per_channel"] else 1
        scales = np.zeros((groups, chans), np.float32)
        zeros = np.zeros((groups, chans), np.float32)
    else:
        qmin, qmax = c["qmin"], c["qmax"]
        scales = c["scales"].reshape(groups, -1)
        zeros = c["zeros"].reshape(groups, -1).astype(np.float32)
    gidx = np.zeros(K, np.int64)
    codes = np.zeros((K, N), np.int64)
    loss = 0.0
    for i in range(K):
        if computed:
            g = i // gs
            if i % gs == 0:
                scales[g], zeros[g] = computed_grid(
                    w[i:i + gs].astype(np.float32), c["bits"], c["sym"], c["per_channel"],
                    c["mse"])
        else:
            g = order[i] // gs
        gidx[order[i]] = g
        s = np.broadcast_to(scales[g], (N,))
        z = np.broadcast_to(zeros[g], (N,))
        q = np.clip(np.round(w[i].astype(np.float32) / s) + z, qmin, qmax)
        deq = (s * (q - z)).astype(np.float32)
        e = (w[i] - deq.astype(np.float64)) / u[i, i]
        loss += float(np.sum(e * e))
        w[i + 1:] -= np.outer(u[i, i + 1:], e)
        codes[order[i]] = q.astype(np.int64)
    return scales.ravel(), zeros.ravel().astype(np.int64), gidx, codes, loss


def case(name, **kw):
    c = dict(name=name, grid="computed", bits=8, sym=True, per_channel=False, mse=False,
             group=-1, act_order=False, dead=-1, damp=0.01)
    c.update(kw)
    return c


w_abs = np.abs(W)
fixed_pc_scales = (w_abs.max(axis=0) / f32(127)).astype(np.float32)
fixed_g8_scales = np.array([f32(w_abs[g * 8:(g + 1) * 8].max()) / f32(7.5) for g in range(3)],
                           np.float32)
CASES = [
    case("pt8_sym"),
    case("pc4_sym", bits=4, per_channel=True),
    case("pc4_asym_g8", bits=4, sym=False, per_channel=True, group=8),
    case("pc4_sym_g10_act", bits=4, per_channel=True, group=10, act_order=True),
    case("pt4_asym_act_dead", bits=4, sym=False, act_order=True, dead=5),
    case("pc3_asym_mse_g12", bits=3, sym=False, per_channel=True, mse=True, group=12, damp=0.1),
    case("pt8_sym_mse_g8_dead", mse=True, group=8, dead=3),
    case("fixed_int8_pc", grid="fixed", qmin=-127, qmax=127, scales=fixed_pc_scales,
         zeros=np.zeros(N, np.int64)),
    case("fixed_uint4_g8_act", grid="fixed", qmin=0, qmax=15, group=8, act_order=True,
         scales=fixed_g8_scales, zeros=np.array([8, 7, 8], np.int64)),
]


def fmt(values, spec):
    return " ".join(spec % v for v in values)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gptq_cases.txt")
    lines = ["# Written by gen_gptq.py (do not edit): GPTQ reference cases, see that script.",
             "shape %d %d %d" % (K, N, ROWS),
             "batches %d %s" % (len(BATCHES), " ".join("%d %d %d" % b for b in BATCHES)),
             "x " + fmt(X.ravel(), "%.9g"),
             "w " + fmt(W.ravel(), "%.9g")]
    for c in CASES:
        scales, zeros, gidx, codes, loss = gptq(W, hessian(X, c["dead"]), c)
        lines.append("case %s" % c["name"])
        if c["grid"] == "computed":
            lines.append("computed %d %d %d %d" % (c["bits"], c["sym"], c["per_channel"],
                                                    c["mse"]))
        else:
            lines.append("fixed %d %d" % (c["qmin"], c["qmax"]))
        lines.append("options %d %d %d %.17g" % (c["group"], c["act_order"], c["dead"],
                                                  c["damp"]))
        lines.append("scales %d %s" % (len(scales), fmt(scales, "%.9g")))
        lines.append("zeros %d %s" % (len(zeros), fmt(zeros, "%d")))
        lines.append("gidx " + fmt(gidx, "%d"))
        lines.append("codes " + fmt(codes.ravel(), "%d"))
        lines.append("loss %.17g" % loss)
        lines.append("end")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
