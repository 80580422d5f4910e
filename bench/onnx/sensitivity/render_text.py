#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes N text images as a calibration / evaluation folder (NCHW float32).

KIND (default "strokes"):
  strokes  the recipe the PaddleOCR test used until session 20 (light page, dark glyph-like
           strokes on 2-5 lines, ImageNet mean/std); kept as the default so the hashes and
           figures recorded with it in docs/bench stay reproducible;
  page     a page of 3-7 lines of DejaVu text (detection's ImageNet normalisation);
  line     one text line for the direction classifier ((x / 255 - 0.5) / 0.5, right-padded
           with zeros, turned by 180 degrees on odd seeds).
"page" and "line" follow page_image() / line_image() in tests/support/text_images.hpp and use
its glyph atlas (tests/onnx_frontend/data/text), drawn with numpy's generator, so the pixels
differ from the C++ test's. For the test's exact images use the quark_render_text tool
(examples/onnx); the classifier's A8W8 figure differs between the two sets (0.998 against 0.979,
docs/bench/quantizer.md, "How far the classifier's A8W8 figure carries").

  render_text.py H W N OUT_DIR [SEED_OFFSET [KIND]]  ->  OUT_DIR/s00/x.npy, OUT_DIR/s01/x.npy, ...
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


ATLAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
                     "onnx_frontend", "data", "text")
PER_FONT = 94  # '!' .. '~'


def load_atlas():
    return (np.load(os.path.join(ATLAS, "glyphs.npy")).astype(np.float32) / 255,
            np.load(os.path.join(ATLAS, "glyph_x.npy")))


def draw_words(rgb, g, atlas, font, x0, x_end, y0, height, ink):
    """Words of 2-8 characters from x0 until the next would pass x_end; returns the text end."""
    glyphs, gx = atlas
    rows = glyphs.shape[0]
    h, w = rgb.shape[:2]
    x, end = float(x0), x0
    while True:
        word = ""
        for _ in range(int(g.integers(2, 9))):
            kind = int(g.integers(0, 100))
            word += (chr(97 + int(g.integers(0, 26))) if kind < 72 else
                     chr(65 + int(g.integers(0, 26))) if kind < 86 else
                     chr(48 + int(g.integers(0, 10))))
        if int(g.integers(0, 10)) == 0:
            word += ",.;:!?"[int(g.integers(0, 6))]
        ks = [font * PER_FONT + ord(c) - 33 for c in word]
        advs = [max(1, round((gx[k + 1] - gx[k]) * height / rows)) for k in ks]
        while end == x0 and len(ks) > 1 and x + sum(advs) > x_end:
            ks.pop()
            advs.pop()
        if x + sum(advs) > x_end:
            return end
        for k, adv in zip(ks, advs):
            # Bilinear scaling of the glyph box to `height` rows and `adv` columns.
            box = glyphs[:, gx[k]:gx[k + 1]]
            ys = np.clip((np.arange(height) + 0.5) * rows / height - 0.5, 0, rows - 1)
            xs = np.clip((np.arange(adv) + 0.5) * box.shape[1] / adv - 0.5, 0, box.shape[1] - 1)
            y0i, x0i = np.floor(ys).astype(int), np.floor(xs).astype(int)
            y1i, x1i = np.minimum(y0i + 1, rows - 1), np.minimum(x0i + 1, box.shape[1] - 1)
            fy, fx = (ys - y0i)[:, None], (xs - x0i)[None, :]
            cov = ((1 - fy) * ((1 - fx) * box[y0i][:, x0i] + fx * box[y0i][:, x1i]) +
                   fy * ((1 - fx) * box[y1i][:, x0i] + fx * box[y1i][:, x1i]))
            xi = int(x)
            ya, yb, xa, xb = max(y0, 0), min(y0 + height, h), max(xi, 0), min(xi + adv, w)
            if ya < yb and xa < xb:
                c = cov[ya - y0:yb - y0, xa - xi:xb - xi, None]
                rgb[ya:yb, xa:xb] = rgb[ya:yb, xa:xb] * (1 - c) + ink * c
            x += adv
        end = int(x)
        x += max(2, height // 4)


def colours(g):
    base, tone = int(g.integers(185, 251)), int(g.integers(0, 3))
    paper = np.array([min(255, base + (int(g.integers(0, 6)) if c == tone else
                                       -int(g.integers(0, 13)))) for c in range(3)], np.float32)
    dark = int(g.integers(0, 71))
    ink = np.array([dark + int(g.integers(0, 26)) for _ in range(3)], np.float32)
    return paper, ink


def page_image(h, w, seed, atlas):
    g = np.random.default_rng(seed)
    paper, ink = colours(g)
    rgb = np.tile(paper, (h, w, 1))
    y = int(g.integers(0, h // 10 + 1))
    for _ in range(int(g.integers(3, 8))):
        height = int(g.integers(max(8, h // 20), max(9, h // 8) + 1))
        if y + height > h:
            break
        draw_words(rgb, g, atlas, int(g.integers(0, 2)), int(g.integers(0, w // 5 + 1)),
                   int(g.integers(w // 2, w)), y, height, ink)
        y += height + int(g.integers(height // 4, height + 1))
    rgb = np.clip(rgb + g.normal(0, 3, rgb.shape), 0, 255)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    return ((rgb / 255 - mean) / std).transpose(2, 0, 1).astype(np.float32)[None]


def line_image(h, w, seed, atlas):
    g = np.random.default_rng(seed)
    paper, ink = colours(g)
    rgb = np.tile(paper, (h, w, 1))
    height = int(g.integers(h * 11 // 20, h * 17 // 20 + 1))
    y0 = (h - height) // 2 + int(g.integers(-(h // 12), h // 12 + 1))
    margin = int(g.integers(1, h // 8 + 1))
    end = draw_words(rgb, g, atlas, int(g.integers(0, 2)), margin,
                     int(g.integers(w * 3 // 5, w)), y0, height, ink)
    crop = min(w, end + margin)
    rgb = np.clip(rgb + g.normal(0, 3, rgb.shape), 0, 255)
    out = np.zeros((3, h, w), np.float32)
    line = (rgb[:, :crop] / 255 - 0.5) / 0.5
    if seed % 2:
        line = line[::-1, ::-1]
    out[:, :, :crop] = line.transpose(2, 0, 1)
    return out[None]


def main():
    h, w, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    offset = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    kind = sys.argv[6] if len(sys.argv) > 6 else "strokes"
    if kind not in ("strokes", "page", "line"):
        sys.exit("render_text.py: KIND must be strokes, page or line, not '%s'" % kind)
    atlas = load_atlas() if kind != "strokes" else None
    for k in range(n):
        d = os.path.join(out, "s%02d" % k)
        os.makedirs(d, exist_ok=True)
        x = (text_image(h, w, k + offset) if kind == "strokes" else
             page_image(h, w, k + offset, atlas) if kind == "page" else
             line_image(h, w, k + offset, atlas))
        np.save(os.path.join(d, "x.npy"), x)


if __name__ == "__main__":
    main()
