// SPDX-License-Identifier: MIT
// The geometry of a 1-D or 2-D convolution (Conv, ConvInteger): input, weight and output extents,
// strides, dilations, pads (auto_pad resolved) and groups, read and checked once; and the im2col
// expansion both kernels multiply against, for any element type.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "runtime/kernel.hpp"

namespace quark::onnx::rt {

struct geometry {
  std::size_t n = 0, c = 0, h = 0, w = 0;  // input
  std::size_t m = 0, oh = 0, ow = 0;       // output channels and size
  std::size_t kh = 1, kw = 1;              // kernel
  std::size_t sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  std::size_t group = 1;
};

/// The geometry of Conv-like node `c` on input x [N, C, (H,) W] and weight w [M, C / group,
/// (kH,) kW]; fails naming the node on a bad rank, attribute or channel count.
geometry conv_geometry(const kernel_context& c, const tensor& x, const tensor& w);

/// Columns [p0, p1) (output pixels) of the im2col matrix, row = (ci, ky, kx), written densely
/// into col with leading dimension p1 - p0.
template <class T>
void im2col(const geometry& g, const T* x, std::size_t kdim, std::size_t p0, std::size_t p1,
            T* col) {
  const std::size_t ld = p1 - p0;
  for (std::size_t r = 0; r < kdim; ++r) {
    const std::size_t kx = r % g.kw;
    const std::size_t ky = (r / g.kw) % g.kh;
    const std::size_t ci = r / (g.kw * g.kh);
    const T* plane = x + ci * g.h * g.w;
    T* dst = col + r * ld;
    const std::int64_t base = to_i64(kx * g.dw) - g.pl;
    std::size_t p = p0;
    while (p < p1) {
      const std::size_t oy = p / g.ow;
      const std::size_t ox0 = p % g.ow;
      const std::size_t ox1 = std::min(g.ow, ox0 + (p1 - p));
      const std::int64_t iy = to_i64(oy * g.sh + ky * g.dh) - g.pt;
      T* out = dst + (p - p0);  // out[k] holds output column ox0 + k
      if (iy < 0 || iy >= to_i64(g.h)) {
        std::fill(out, out + (ox1 - ox0), T{});
      } else {
        const T* srow = plane + to_size(iy) * g.w;
        if (g.sw == 1 && base >= 0 && to_i64(ox1) + base <= to_i64(g.w)) {
          std::copy(srow + to_size(to_i64(ox0) + base), srow + to_size(to_i64(ox1) + base), out);
        } else {
          for (std::size_t ox = ox0; ox < ox1; ++ox) {
            const std::int64_t ix = to_i64(ox * g.sw) + base;
            out[ox - ox0] = (ix >= 0 && ix < to_i64(g.w)) ? srow[ix] : T{};
          }
        }
      }
      p += ox1 - ox0;
    }
  }
}

}  // namespace quark::onnx::rt
