#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Renders the printable ASCII characters (33..126) of two DejaVu fonts into a glyph atlas that
the PaddleOCR tests compose text images from (text_image() in
tests/onnx_frontend/quantizer_paddleocr_ort_test.cpp).

Output, beside this script:
  glyphs.npy   uint8 [32, W]: coverage (0 = paper, 255 = ink) of every glyph's advance box, one
               after another, for font 0 then font 1; 32 rows = the font's ascent + descent
               scaled to 32 pixels, baseline at row BASELINE.
  glyph_x.npy  int32 [2 * 94 + 1]: the column where each glyph's box starts; glyph k of font f
               is columns glyph_x[f * 94 + k] .. glyph_x[f * 94 + k + 1].

Needs python3-pil and fonts-dejavu-core (Debian 12); the committed .npy files make the tests
independent of both.  Run: /usr/bin/python3 gen_glyph_atlas.py
"""
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONTS = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
]
ROWS = 32


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    strips, xs, x = [], [], 0
    for path in FONTS:
        # The largest point size whose ascent + descent fits ROWS pixels.
        size = ROWS
        while True:
            font = ImageFont.truetype(path, size)
            ascent, descent = font.getmetrics()
            if ascent + descent <= ROWS:
                break
            size -= 1
        for code in range(33, 127):
            ch = chr(code)
            adv = max(1, int(round(font.getlength(ch))))
            img = Image.new("L", (adv, ROWS), 0)
            ImageDraw.Draw(img).text((0, 0), ch, fill=255, font=font)
            strips.append(np.asarray(img, dtype=np.uint8))
            xs.append(x)
            x += adv
    xs.append(x)
    np.save(os.path.join(here, "glyphs.npy"), np.concatenate(strips, axis=1))
    np.save(os.path.join(here, "glyph_x.npy"), np.asarray(xs, dtype=np.int32))


if __name__ == "__main__":
    main()
