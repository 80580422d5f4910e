#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes N synthetic "rendered text" images as a calibration / evaluation folder.

Same recipe as text_image() in tests/onnx_frontend/quantizer_paddleocr_ort_test.cpp (light page,
dark glyph-like strokes on 2-5 lines, PaddleOCR's mean/std normalisation, NCHW float32), drawn
with numpy's generator, so the pixels differ from the C++ test's but the statistics match.

  render_text.py H W N OUT_DIR [SEED_OFFSET]    ->  OUT_DIR/s00/x.npy, OUT_DIR/s01/x.npy, ...
"""
import os
import sys

import numpy as np


def text_image(h, w, seed):
    g = np.random.default_rng(seed)

    def uni(lo, hi):
        return int(g.integers(lo, hi + 1))

    gray = np.full((h, w), float(uni(200, 255)), np.float32)
    for _ in range(uni(2, 5)):
        lh = uni(h // 16, h // 8)
        y0, x, x_end = uni(0, h - lh - 1), uni(0, w // 4), uni(w // 2, w - 1)
        ink = float(uni(0, 80))
        while x < x_end:
            gw = uni(lh // 3, lh)
            for _ in range(3):
                sx, sy = x + uni(0, gw), y0 + uni(0, lh // 2)
                sw, sh = uni(1, max(2, lh // 6)), uni(lh // 3, lh)
                gray[sy:sy + sh, sx:sx + sw] = ink
            x += gw + uni(1, lh // 2)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    chw = np.stack([(gray / 255 - mean[c]) / std[c] for c in range(3)])
    return chw.astype(np.float32)[None]


def main():
    h, w, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    offset = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    for k in range(n):
        d = os.path.join(out, "s%02d" % k)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), text_image(h, w, k + offset))


if __name__ == "__main__":
    main()
