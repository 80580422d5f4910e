// SPDX-License-Identifier: MIT
// Rendered-text images for the PaddleOCR tests: words of printable ASCII set in DejaVu Sans or
// Serif (a glyph atlas rendered once by tests/onnx_frontend/data/text/gen_glyph_atlas.py and
// committed), in a random dark ink on a random light paper with a little sensor noise, and
// normalised as PaddleOCR's own preprocessing does:
//   - detection (a page of 3-7 lines): (x / 255 - mean) / std with ImageNet's mean and std
//     (DetResizeForTest + NormalizeImage);
//   - direction classifier (one text line, 48 pixels high): (x / 255 - 0.5) / 0.5, the line
//     right-padded with zeros to the input width (predict_cls.py's resize_norm_img), and turned
//     by 180 degrees on odd seeds so both classes occur.
//
//     std::vector<float> x = quark::test::page_image(160, 160, seed);   // CHW, 3 channels
//     std::vector<float> y = quark::test::line_image(48, 192, seed);
//
// Standard C++ and npy.hpp only, so examples/onnx/quark_render_text.cpp writes the same images
// for the command line (the README's quick start calibrates and evaluates on them). The atlas is
// read from $QUARK_SOURCE_DIR/tests/onnx_frontend/data/text, else from the source tree this
// header sits in.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "npy.hpp"

namespace quark::test {

namespace text_detail {

struct glyph_atlas {
  std::vector<std::uint8_t> px;  // [rows, width] coverage, 255 = ink
  std::size_t rows = 0, width = 0;
  std::vector<std::int32_t> x;  // glyph k of font f: columns x[f * 94 + k] .. x[f * 94 + k + 1]
  static constexpr int glyphs_per_font = 94;  // '!' .. '~'
};

/// tests/onnx_frontend/data/text under $QUARK_SOURCE_DIR, else under the tree of this header.
inline std::filesystem::path atlas_dir() {
  const char* env = std::getenv("QUARK_SOURCE_DIR");
  const std::filesystem::path root =
      env != nullptr && *env != '\0'
          ? std::filesystem::path(env)
          : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  return root / "tests" / "onnx_frontend" / "data" / "text";
}

inline const glyph_atlas& atlas() {
  static const glyph_atlas a = [] {
    const std::filesystem::path dir = atlas_dir();
    const npy_array g = read_npy(dir / "glyphs.npy");
    const npy_array x = read_npy(dir / "glyph_x.npy");
    if (g.descr != "|u1" || g.shape.size() != 2 || x.descr != "<i4" || x.shape.size() != 1 ||
        x.shape[0] != 2 * glyph_atlas::glyphs_per_font + 1) {
      throw std::runtime_error("text_images: unexpected glyph atlas in " + dir.string());
    }
    glyph_atlas r;
    r.px = g.values<std::uint8_t>();
    r.rows = g.shape[0];
    r.width = g.shape[1];
    r.x = x.values<std::int32_t>();
    return r;
  }();
  return a;
}

/// An RGB canvas in 0..255, HWC while drawing.
struct canvas {
  std::size_t h, w;
  std::vector<float> rgb;
  canvas(std::size_t h_, std::size_t w_) : h(h_), w(w_), rgb(h_ * w_ * 3) {}
  void fill(const float paper[3]) {
    for (std::size_t i = 0; i < h * w; ++i)
      std::copy(paper, paper + 3, rgb.begin() + static_cast<std::ptrdiff_t>(3 * i));
  }
};

/// Sets glyph `k` of `font` with its box `height` pixels high and its left edge at `x0` (top at
/// `y0`), bilinearly scaled from the atlas, blending `ink` by coverage. Returns the advance.
inline int draw_glyph(canvas& c, int font, int k, double x0, int y0, int height,
                      const float ink[3]) {
  const glyph_atlas& a = atlas();
  const int gx0 = a.x[static_cast<std::size_t>(font * glyph_atlas::glyphs_per_font + k)];
  const int gx1 = a.x[static_cast<std::size_t>(font * glyph_atlas::glyphs_per_font + k + 1)];
  const double scale = static_cast<double>(a.rows) / height;  // atlas pixels per pixel
  const int adv = std::max(1, static_cast<int>(std::lround((gx1 - gx0) / scale)));
  const auto at = [&](int r, int col) -> double {
    if (r < 0 || r >= static_cast<int>(a.rows) || col < gx0 || col >= gx1)
      return 0.0;
    return a.px[static_cast<std::size_t>(r) * a.width + static_cast<std::size_t>(col)] / 255.0;
  };
  const int px0 = static_cast<int>(std::floor(x0));
  for (int dy = 0; dy < height; ++dy) {
    const int y = y0 + dy;
    if (y < 0 || y >= static_cast<int>(c.h))
      continue;
    const double v = (dy + 0.5) * scale - 0.5;
    const int r0 = static_cast<int>(std::floor(v));
    const double fv = v - r0;
    for (int dx = 0; dx <= adv; ++dx) {
      const int x = px0 + dx;
      if (x < 0 || x >= static_cast<int>(c.w))
        continue;
      const double u = (x + 0.5 - x0) * scale - 0.5 + gx0;
      const int c0 = static_cast<int>(std::floor(u));
      const double fu = u - c0;
      const double cov = (1 - fv) * ((1 - fu) * at(r0, c0) + fu * at(r0, c0 + 1)) +
                         fv * ((1 - fu) * at(r0 + 1, c0) + fu * at(r0 + 1, c0 + 1));
      if (cov <= 0.0)
        continue;
      float* p = &c.rgb[(static_cast<std::size_t>(y) * c.w + static_cast<std::size_t>(x)) * 3];
      for (int ch = 0; ch < 3; ++ch)
        p[ch] = static_cast<float>(static_cast<double>(p[ch]) * (1.0 - cov) +
                                   static_cast<double>(ink[ch]) * cov);
    }
  }
  return adv;
}

/// Words of 2-8 characters (mostly lower case, some capitals and digits) from `x0` until the
/// next word would pass `x_end`; returns where the text ends.
inline int draw_words(canvas& c, std::mt19937& g, int font, int x0, int x_end, int y0, int height,
                      const float ink[3]) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  double x = x0;
  int end = x0;
  const int space = std::max(2, height / 4);
  while (true) {
    std::string word;
    const int len = uni(2, 8);
    for (int i = 0; i < len; ++i) {
      const int kind = uni(0, 99);
      word += kind < 72   ? static_cast<char>('a' + uni(0, 25))
              : kind < 86 ? static_cast<char>('A' + uni(0, 25))
                          : static_cast<char>('0' + uni(0, 9));
    }
    if (uni(0, 9) == 0)
      word += ",.;:!?"[uni(0, 5)];
    // Measure first: a word that does not fit ends the line (the first word is cut to fit).
    const glyph_atlas& a = atlas();
    const double scale = static_cast<double>(a.rows) / height;
    const auto measure = [&] {
      double wlen = 0;
      for (char ch : word) {
        const int k = font * glyph_atlas::glyphs_per_font + (ch - '!');
        wlen += std::max(1.0, std::round((a.x[static_cast<std::size_t>(k + 1)] -
                                          a.x[static_cast<std::size_t>(k)]) /
                                         scale));
      }
      return wlen;
    };
    while (end == x0 && word.size() > 1 && x + measure() > x_end)
      word.pop_back();
    if (x + measure() > x_end)
      break;
    for (char ch : word)
      x += draw_glyph(c, font, ch - '!', x, y0, height, ink);
    end = static_cast<int>(x);
    x += space;
  }
  return end;
}

inline void random_colours(std::mt19937& g, float paper[3], float ink[3]) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  const int base = uni(185, 250), tone = uni(0, 2);
  for (int ch = 0; ch < 3; ++ch)
    paper[ch] = static_cast<float>(std::min(255, base + (ch == tone ? uni(0, 5) : -uni(0, 12))));
  const int dark = uni(0, 70);
  for (int ch = 0; ch < 3; ++ch)
    ink[ch] = static_cast<float>(dark + uni(0, 25));
}

inline void add_noise(canvas& c, std::mt19937& g, double sigma) {
  std::normal_distribution<double> n(0.0, sigma);
  for (float& v : c.rgb)
    v = static_cast<float>(std::clamp(static_cast<double>(v) + n(g), 0.0, 255.0));
}

/// What every image starts with: the seeded generator, paper and ink colours drawn from it, and
/// the canvas filled with the paper.
struct scene {
  std::mt19937 g;
  float paper[3] = {}, ink[3] = {};
  canvas c;
  int hi, wi;
  scene(std::size_t h, std::size_t w, std::uint32_t seed)
      : g(seed), c(h, w), hi(static_cast<int>(h)), wi(static_cast<int>(w)) {
    random_colours(g, paper, ink);
    c.fill(paper);
  }
  int uni(int lo, int up) { return std::uniform_int_distribution<int>(lo, up)(g); }
};

}  // namespace text_detail

/// A page of 3-7 text lines, `h` x `w`, CHW float normalised as PaddleOCR detection does.
inline std::vector<float> page_image(std::size_t h, std::size_t w, std::uint32_t seed) {
  using namespace text_detail;
  scene sc(h, w, seed);
  const int hi = sc.hi, wi = sc.wi;
  const int lines = sc.uni(3, 7);
  int y = sc.uni(0, hi / 10);
  for (int l = 0; l < lines; ++l) {
    const int height = sc.uni(std::max(8, hi / 20), std::max(9, hi / 8));
    if (y + height > hi)
      break;
    // Drawn last to first (x_end, x0, font): the order GCC gave the three draws when they were
    // arguments of one call, which the figures in docs/bench/quantizer.md were measured with.
    const int x_end = sc.uni(wi / 2, wi - 1), x0 = sc.uni(0, wi / 5), font = sc.uni(0, 1);
    draw_words(sc.c, sc.g, font, x0, x_end, y, height, sc.ink);
    y += height + sc.uni(height / 4, height);
  }
  add_noise(sc.c, sc.g, 3.0);
  const canvas& c = sc.c;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  std::vector<float> out(3 * h * w);
  for (std::size_t ch = 0; ch < 3; ++ch) {
    for (std::size_t i = 0; i < h * w; ++i)
      out[ch * h * w + i] = (c.rgb[i * 3 + ch] / 255.0f - mean[ch]) / stdv[ch];
  }
  return out;
}

/// One text line as PaddleOCR's direction classifier sees it: `h` x `w` CHW float in [-1, 1],
/// the crop right-padded with zeros; turned by 180 degrees on odd seeds.
inline std::vector<float> line_image(std::size_t h, std::size_t w, std::uint32_t seed) {
  using namespace text_detail;
  scene sc(h, w, seed);
  const int hi = sc.hi, wi = sc.wi;
  const int height = sc.uni(hi * 11 / 20, hi * 17 / 20);
  const int y0 = (hi - height) / 2 + sc.uni(-hi / 12, hi / 12);
  const int margin = sc.uni(1, hi / 8);
  const int x_end = sc.uni(wi * 3 / 5, wi - 1), font = sc.uni(0, 1);  // GCC's order, as above
  const int end = draw_words(sc.c, sc.g, font, margin, x_end, y0, height, sc.ink);
  const auto crop = static_cast<std::size_t>(std::min(wi, end + margin));
  add_noise(sc.c, sc.g, 3.0);
  const canvas& c = sc.c;
  const bool turned = (seed & 1U) != 0;
  std::vector<float> out(3 * h * w, 0.0f);
  for (std::size_t ch = 0; ch < 3; ++ch) {
    for (std::size_t y = 0; y < h; ++y) {
      for (std::size_t x = 0; x < crop; ++x) {
        const std::size_t sy = turned ? h - 1 - y : y, sx = turned ? crop - 1 - x : x;
        out[(ch * h + y) * w + x] = (c.rgb[(sy * w + sx) * 3 + ch] / 255.0f - 0.5f) / 0.5f;
      }
    }
  }
  return out;
}

}  // namespace quark::test
