#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# Generates tests/calib/data/reference.json: calibration results computed independently with
# numpy (Debian's python3-numpy 1.24) from the algorithm descriptions of quark-spec §3-§4, written
# for this project (no code from Quark or ONNX Runtime). Run once and commit the output:
#     /usr/bin/python3 tests/calib/data/gen_reference.py > tests/calib/data/reference.json
# CI only reads the JSON. The input data come from a 32-bit LCG that the C++ tests replicate
# (tests/calib/reference_data.hpp), so no data file is needed.
import json
import math

import numpy as np


def lcg_data(n, seed, sigma, mu, outlier_every=97, outlier_gain=6.0):
    state = seed & 0xFFFFFFFF
    out = np.empty(n, dtype=np.float32)
    for k in range(n):
        s = 0.0
        for _ in range(4):
            state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
            s += float(state >> 8) * 2.0 ** -24
        v = (s - 2.0) * sigma + mu
        if k % outlier_every == 0:
            v *= outlier_gain
        out[k] = np.float32(v)
    return out


def split(x, parts):
    step = -(-len(x) // parts)
    return [x[i:i + step] for i in range(0, len(x), step)]


def linspace_edges(lo, hi, n):
    return np.linspace(lo, hi, n + 1)


# ---- histograms with the three growth rules (quark-spec §4.2, §4.7, §4.9) ------------------
def hist_abs(batches, nbins):
    edges = counts = None
    for b in batches:
        a = np.abs(b[~np.isnan(b)].astype(np.float64))
        if a.size == 0:
            continue
        if edges is None:
            lo, hi = a.min(), a.max()
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            edges = linspace_edges(lo, hi, nbins)
            counts = np.zeros(nbins, dtype=np.int64)
        else:
            w = edges[1] - edges[0]
            e = list(edges)
            while a.max() > e[-1]:
                e.append(e[-1] + w)
            edges = np.array(e)
            counts = np.concatenate([counts, np.zeros(len(edges) - 1 - len(counts), dtype=np.int64)])
        counts += np.histogram(a, bins=edges)[0]
    return edges, counts


def hist_signed(batches, nbins):
    edges = counts = None
    thr = 0.0
    for b in batches:
        v = b[~np.isnan(b)].astype(np.float64)
        if v.size == 0:
            continue
        t = max(abs(v.min()), abs(v.max()))
        if edges is None:
            thr = t
            lo, hi = (-t, t) if t > 0 else (-0.5, 0.5)
            edges = linspace_edges(lo, hi, nbins)
            counts = np.zeros(nbins, dtype=np.int64)
        elif t > thr:
            n = len(counts)
            if thr == 0.0:
                thr = t
                edges = linspace_edges(-t, t, n)
            else:
                stride = 2.0 * thr / n
                half = int((t - thr) // stride + 1)
                thr = half * stride + thr
                edges = linspace_edges(-thr, thr, n + 2 * half)
                counts = np.concatenate([np.zeros(half, np.int64), counts, np.zeros(half, np.int64)])
        counts += np.histogram(v, bins=edges)[0]
    return edges, counts


def hist_extend(batches, nbins):
    edges = counts = None
    for b in batches:
        v = np.nan_to_num(b.astype(np.float32)).astype(np.float64)
        if v.size == 0:
            continue
        lo_n, hi_n = v.min(), v.max()
        if edges is None:
            if lo_n == hi_n:
                lo_n, hi_n = lo_n - 0.5, hi_n + 0.5
            edges = linspace_edges(lo_n, hi_n, nbins)
            counts = np.zeros(nbins, dtype=np.int64)
        elif lo_n < edges[0] or hi_n > edges[-1]:
            w = edges[1] - edges[0]
            left = math.ceil((edges[0] - lo_n) / w) if lo_n < edges[0] else 0
            right = math.ceil((hi_n - edges[-1]) / w) if hi_n > edges[-1] else 0
            n = len(counts)
            edges = linspace_edges(edges[0] - left * w, edges[-1] + right * w, n + left + right)
            counts = np.concatenate([np.zeros(left, np.int64), counts, np.zeros(right, np.int64)])
        counts += np.histogram(v, bins=edges)[0]
    return edges, counts


# ---- calibrators ----------------------------------------------------------------------------
def percentile_range(edges, counts, p, symmetric, omin, omax):
    cdf = np.cumsum(counts) / counts.sum()
    if symmetric:
        t = edges[np.searchsorted(cdf, p / 100.0)]
        lo, hi = -t, t
    else:
        cut = (100.0 - p) / 200.0
        lo = edges[np.searchsorted(cdf, cut)]
        hi = edges[np.searchsorted(cdf, 1.0 - cut)]
    return max(lo, omin), min(hi, omax)


def smooth(v, eps=1e-4):
    v = v.astype(np.float64)
    z = v == 0
    nz = v.size - z.sum()
    if nz == 0:
        return None
    e1 = eps * z.sum() / nz
    if e1 >= 1.0:
        return None
    return np.where(z, eps, v - e1)


def kl(p, q):
    p = p / p.sum()
    q = q / q.sum()
    return float(np.sum(p * np.log(p / q)))


def entropy_scan(edges, counts, nq):
    n = len(counts)
    zb = n // 2
    res = []
    for i in range(nq // 2, zb + 1):
        s, e = zb - i, min(zb + i + 1, n)
        sl = counts[s:e].astype(np.float64)
        p = sl.copy()
        p[0] += counts[:s].sum()
        p[-1] += counts[e:].sum()
        nzm = p != 0
        m = len(sl) // nq
        merged = np.array([sl[k * m:(k + 1) * m].sum() for k in range(nq)])
        merged[-1] += sl[nq * m:].sum()
        q = np.zeros(len(sl))
        for k in range(nq):
            norm = nzm[k * m:(k + 1) * m].sum()
            if norm:
                q[k * m:(k + 1) * m] = math.trunc(merged[k] / norm)
        ps, qs = smooth(p), smooth(q)
        res.append((s, e, math.inf if ps is None or qs is None else kl(ps, qs)))
    return res


def rne(v):
    return np.round(v)  # numpy rounds half to even


def scale_zp(rmin, rmax, qmin, qmax, symmetric):
    # float32 range ends and a float32 width, as numpy computes on Quark's float32 ranges
    rmin, rmax = min(np.float32(rmin), np.float32(0)), max(np.float32(rmax), np.float32(0))
    if symmetric:
        m = max(abs(rmin), abs(rmax))
        rmin, rmax = -m, m
    s = float(np.float32(rmax - rmin)) / (float(qmax) - float(qmin))
    if s < np.finfo(np.float32).tiny:
        return 1.0, 0
    zp = int(rne(qmin - float(rmin) / s))
    if symmetric and qmin == 0 and qmax == 255 and zp == 127:
        zp = 128
    return s, zp


def pos_of(s):
    return int(np.rint(-np.log2(min(max(float(np.float32(s)), 2.0 ** -127), 2.0 ** 127))))


def fq(x, s, zp, qmin, qmax):
    x = np.asarray(x, dtype=np.float32)
    s = np.float32(s)
    q = np.clip(rne(x / s) + np.float32(zp), np.float32(qmin), np.float32(qmax))
    return (q - np.float32(zp)) * s


def pof2_cands(pos):
    return [2.0 ** -(pos + i - 1) for i in range(5)]


def pof2_hist(edges, counts, qmin, qmax):
    s, zp = scale_zp(edges[0], edges[-1], qmin, qmax, True)
    pos = pos_of(s)
    c = ((edges[:-1] + edges[1:]) / 2).astype(np.float32)
    cost = [float(np.sum(counts * (c.astype(np.float64) - fq(c, si, zp, qmin, qmax).astype(np.float64)) ** 2))
            for si in pof2_cands(pos)]
    return pos + int(np.argmin(cost)) - 1, cost


def pof2_raw(data, qmin, qmax):
    s, zp = scale_zp(float(data.min()), float(data.max()), qmin, qmax, True)
    pos = pos_of(s)
    cost = [float(np.sum((data.astype(np.float64) - fq(data, si, zp, qmin, qmax).astype(np.float64)) ** 2))
            for si in pof2_cands(pos)]
    return pos + int(np.argmin(cost)) - 1


def float_minmse(w, mode, qmin, qmax):
    best = (math.inf, None)
    w64 = w.astype(np.float64)
    if mode == "Percentile":
        seen = set()
        for p in [99.9, 99.99, 99.999, 99.9999]:
            lo = float(np.percentile(w64, (100 - p) / 2))
            hi = float(np.percentile(w64, 100 - (100 - p) / 2))
            s, zp = scale_zp(lo, hi, qmin, qmax, True)
            s32 = float(np.float32(s))
            if s32 in seen:
                continue
            seen.add(s32)
            err = float(np.mean((fq(w, s32, zp, qmin, qmax).astype(np.float64) - w64) ** 2))
            if err < best[0]:
                best = (err, (lo, hi, s32, zp))
        return best[1]
    B = min(2048, w.size)
    counts, edges = np.histogram(w64, B)
    c = (edges[:-1] + edges[1:]) / 2
    for k in range(int(0.5 * B), B):
        left, right = int((B - k) / 2), int(B - (B - k) / 2)
        lo, hi = c[left], c[right]
        s, zp = scale_zp(lo, hi, qmin, qmax, True)
        s32 = float(np.float32(s))
        if mode == "HistCenter":
            c32 = c.astype(np.float32)
            err = float(np.sum(counts * (fq(c32, s32, zp, qmin, qmax).astype(np.float64) - c32.astype(np.float64)) ** 2) / B)
        else:
            err = float(np.mean((fq(w, s32, zp, qmin, qmax).astype(np.float64) - w64) ** 2))
        if err < best[0]:
            best = (err, (float(lo), float(hi), s32, zp))
    return best[1]


def lwp_error(samples, lo, hi, qmin, qmax, metric):
    scale = (hi - lo) / (qmax - qmin) + 1e-6
    zpl = rne(lo / scale - qmin)
    total = 0.0
    for x in samples:
        x = x.astype(np.float64)
        q = np.clip(rne(x / scale - zpl), qmin, qmax)
        d = x - (q + zpl) * scale
        total += float(np.mean(np.abs(d) if metric == "mae" else d * d))
    return total


def main():
    a = lcg_data(20000, 12345, 1.5, 0.3)
    grow = np.concatenate([lcg_data(3000, 777 + b, 0.5 * (1 + b), 0.1 * b) for b in range(7)])
    w = lcg_data(4096, 4242, 0.05, 0.0, outlier_every=61, outlier_gain=9.0)
    out = {"generator": "tests/calib/data/gen_reference.py (numpy %s)" % np.__version__}
    omin, omax = float(a.min()), float(a.max())

    # Percentile: |x| histogram (symmetric) and signed histogram (asymmetric), 1 and 7 batches.
    perc = {}
    for parts in (1, 7):
        e_abs, c_abs = hist_abs(split(a, parts), 2048)
        e_sig, c_sig = hist_signed(split(a, parts), 2048)
        for p in (99.999, 99.9, 99.0):
            perc["abs_%d_%s" % (parts, p)] = percentile_range(e_abs, c_abs, p, True, omin, omax)
            perc["signed_%d_%s" % (parts, p)] = percentile_range(e_sig, c_sig, p, False, omin, omax)
        perc["abs_bins_%d" % parts] = len(c_abs)
        perc["signed_bins_%d" % parts] = len(c_sig)
    out["percentile"] = perc

    # Small histograms in full, for exact count comparison (growth across 7 batches).
    gmin, gmax = float(grow.min()), float(grow.max())
    hs = {}
    for name, fn in (("abs", hist_abs), ("signed", hist_signed), ("extend", hist_extend)):
        e, c = fn(split(grow, 7), 64)
        hs[name] = {"edges": [float(e[0]), float(e[1]), float(e[-1])], "bins": len(c),
                    "counts": [int(x) for x in c]}
    out["growth_histograms"] = hs
    out["growth_range"] = [gmin, gmax]

    # Entropy over a 2048-bin signed histogram, and 128/128 on the growing data.
    e_sig, c_sig = hist_signed([a], 2048)
    scan = entropy_scan(e_sig, c_sig, 128)
    best = min(range(len(scan)), key=lambda k: (scan[k][2], k))
    s, e_, _ = scan[best]
    out["entropy_2048"] = {
        "candidates": len(scan),
        "best": best,
        "range": [max(float(e_sig[s]), omin), min(float(e_sig[e_]), omax)],
        "kl_first": scan[0][2], "kl_best": scan[best][2], "kl_last": scan[-1][2],
    }
    e_g, c_g = hist_signed(split(grow, 7), 128)
    scan_g = entropy_scan(e_g, c_g, 128)
    best_g = min(range(len(scan_g)), key=lambda k: (scan_g[k][2], k))
    out["entropy_128_growing"] = {"candidates": len(scan_g), "bins": len(c_g), "best": best_g,
                                  "range": [max(float(e_g[scan_g[best_g][0]]), gmin),
                                            min(float(e_g[scan_g[best_g][1]]), gmax)]}

    # Distribution (same / p3).
    ctr = (e_sig[:-1] + e_sig[1:]) / 2
    def moments(v):
        mean = float(np.sum(c_sig * v) / c_sig.sum())
        return [mean, float(np.sqrt(np.sum(c_sig * v * v) / c_sig.sum() - mean * mean))]
    out["distribution"] = {"same": moments(ctr), "p3": moments(np.sign(ctr) * np.abs(ctr) ** (1.0 / 3.0))}

    # Power-of-two MinMSE: histogram mode (1 and 7 batches), raw mode, most common.
    pof2 = {}
    for parts in (1, 7):
        e, c = hist_extend(split(grow, parts), 2048)
        pos, cost = pof2_hist(e, c, -127, 127)
        pof2["hist_%d" % parts] = pos
        pof2["hist_cost_%d" % parts] = cost
    e, c = hist_extend(split(a, 7), 2048)
    pof2["hist_a"] = pof2_hist(e, c, -127, 127)[0]
    pof2["hist_a_int16"] = pof2_hist(e, c, -32767, 32767)[0]
    pof2["raw_a"] = pof2_raw(a, -127, 127)
    pof2["raw"] = pof2_raw(grow, -127, 127)
    pof2["raw_uint8"] = pof2_raw(grow, 0, 255)
    votes = {}
    for b in split(grow, 7):
        p = pof2_raw(b, -127, 127)
        votes[p] = votes.get(p, 0) + 1
    top = max(votes.values())
    pof2["most_common"] = max(p for p, n in votes.items() if n == top)
    pof2["votes"] = {str(k): v for k, v in sorted(votes.items())}
    out["pof2"] = pof2

    # Float-scale MinMSE on a weight tensor (INT8 symmetric table).
    out["float_minmse"] = {m: list(float_minmse(w, m, -127, 127)) for m in ("Percentile", "HistCenter", "All")}

    # LayerwisePercentile: candidates from the |x| histogram, scored on 7 samples.
    e_abs, c_abs = hist_abs(split(a, 7), 2048)
    cands = [tuple(float(np.float32(v)) for v in percentile_range(e_abs, c_abs, p, True, omin, omax))
             for p in (99.99, 99.999, 99.99999)]  # ranges are float32, as the calibrator returns
    errs = {m: [lwp_error(split(a, 7), lo, hi, -128, 127, m) for lo, hi in cands] for m in ("mae", "mse")}
    out["lwp"] = {"candidates": cands, "errors": errs,
                  "best": {m: int(np.argmin(errs[m])) for m in errs}}
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
