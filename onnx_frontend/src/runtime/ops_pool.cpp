// SPDX-License-Identifier: MIT
// MaxPool / AveragePool (1-D and 2-D, pads, auto_pad, ceil_mode, dilations, count_include_pad)
// and the global pools (any spatial rank).
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

struct pool_geometry {
  std::size_t planes = 0, h = 1, w = 1, oh = 1, ow = 1;
  std::size_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pt = 0, pl = 0, pb = 0, pr = 0;
};

std::size_t pooled(const kernel_context& c, std::size_t in, std::size_t k, std::size_t s,
                   std::size_t d, std::int64_t& pad_begin, std::int64_t& pad_end,
                   const std::string& auto_pad, bool ceil_mode) {
  const std::size_t ek = (k - 1) * d + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const std::size_t out = (in + s - 1) / s;
    const std::int64_t total = std::max<std::int64_t>(0, to_i64((out - 1) * s + ek) - to_i64(in));
    pad_begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pad_end = total - pad_begin;
    return out;
  }
  if (auto_pad == "VALID") {
    pad_begin = pad_end = 0;
    if (in < ek)
      c.fail("quark.onnx.shape", "window larger than the input");
    return (in - ek) / s + 1;
  }
  const std::int64_t span = to_i64(in) + pad_begin + pad_end - to_i64(ek);
  if (span < 0)
    c.fail("quark.onnx.shape", "window larger than the padded input");
  std::size_t out = ceil_mode ? (to_size(span) + s - 1) / s + 1 : to_size(span) / s + 1;
  // With ceil_mode the last window must start inside the input or the left padding.
  if (ceil_mode && to_i64((out - 1) * s) >= to_i64(in) + pad_begin)
    --out;
  return out;
}

pool_geometry pool_setup(const kernel_context& c, const tensor& x) {
  if (x.rank() != 3 && x.rank() != 4) {
    c.fail("quark.onnx.shape",
           "only 1-D and 2-D pooling is supported, input is " + shape_string(x.shape()));
  }
  const bool two = x.rank() == 4;
  pool_geometry g;
  g.planes = to_size(x.shape()[0] * x.shape()[1]);
  g.h = two ? to_size(x.shape()[2]) : 1;
  g.w = to_size(x.shape().back());
  const auto k = c.n.attr_ints("kernel_shape");
  if (k.size() != x.rank() - 2)
    c.fail("quark.onnx.shape", "kernel_shape has the wrong length");
  auto get = [&](const std::vector<std::int64_t>& v, std::size_t i, std::int64_t fb) {
    return v.empty() ? fb : v[i];
  };
  const auto s = c.n.attr_ints("strides");
  const auto d = c.n.attr_ints("dilations");
  const auto p = c.n.attr_ints("pads");
  if (two) {
    g.kh = to_size(k[0]);
    g.sh = to_size(get(s, 0, 1));
    g.dh = to_size(get(d, 0, 1));
    g.pt = get(p, 0, 0);
    g.pb = get(p, 2, 0);
  }
  const std::size_t last = k.size() - 1;
  g.kw = to_size(k[last]);
  g.sw = to_size(get(s, last, 1));
  g.dw = to_size(get(d, last, 1));
  g.pl = get(p, last, 0);
  g.pr = get(p, last + k.size(), 0);
  const auto auto_pad = c.n.attr_s("auto_pad", "NOTSET");
  const bool ceil_mode = c.n.attr_i("ceil_mode", 0) != 0;
  if (two)
    g.oh = pooled(c, g.h, g.kh, g.sh, g.dh, g.pt, g.pb, auto_pad, ceil_mode);
  g.ow = pooled(c, g.w, g.kw, g.sw, g.dw, g.pl, g.pr, auto_pad, ceil_mode);
  return g;
}

template <bool Max>
void pool(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  if (Max && c.output_count() > 1 && !c.n.outputs[1].empty()) {
    c.fail("quark.onnx.unsupported_op", "the Indices output of MaxPool is not supported");
  }
  const pool_geometry g = pool_setup(c, x);
  shape_t shape{x.shape()[0], x.shape()[1]};
  if (x.rank() == 4)
    shape.push_back(to_i64(g.oh));
  shape.push_back(to_i64(g.ow));
  tensor out(dtype_id::float32, shape);
  const bool include_pad = c.n.attr_i("count_include_pad", 0) != 0;
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  c.pool.parallel_for(g.planes, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const float* src = px + p * g.h * g.w;
      float* dst = py + p * g.oh * g.ow;
      for (std::size_t oy = 0; oy < g.oh; ++oy) {
        for (std::size_t ox = 0; ox < g.ow; ++ox) {
          float acc = Max ? -std::numeric_limits<float>::infinity() : 0.0f;
          std::size_t count = 0;
          std::size_t padded = 0;
          for (std::size_t ky = 0; ky < g.kh; ++ky) {
            const std::int64_t iy = to_i64(oy * g.sh + ky * g.dh) - g.pt;
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
              const std::int64_t ix = to_i64(ox * g.sw + kx * g.dw) - g.pl;
              const bool inside = iy >= 0 && iy < to_i64(g.h) && ix >= 0 && ix < to_i64(g.w);
              // Positions in the explicit padding count for count_include_pad (not beyond it).
              if (iy < to_i64(g.h) + g.pb && ix < to_i64(g.w) + g.pr)
                ++padded;
              if (!inside)
                continue;
              const float v = src[to_size(iy) * g.w + to_size(ix)];
              if constexpr (Max) {
                acc = std::max(acc, v);
              } else {
                acc += v;
              }
              ++count;
            }
          }
          if constexpr (Max) {
            dst[oy * g.ow + ox] = acc;
          } else {
            const std::size_t div = include_pad ? padded : count;
            dst[oy * g.ow + ox] = div ? acc / static_cast<float>(div) : 0.0f;
          }
        }
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_max_pool(kernel_context& c) {
  pool<true>(c);
}
void k_average_pool(kernel_context& c) {
  pool<false>(c);
}

template <bool Max>
void global_pool(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  if (x.rank() < 3)
    c.fail("quark.onnx.shape", "global pooling needs N, C and spatial dims");
  shape_t shape(x.rank(), 1);
  shape[0] = x.shape()[0];
  shape[1] = x.shape()[1];
  tensor out(dtype_id::float32, shape);
  const std::size_t planes = to_size(shape[0] * shape[1]);
  const std::size_t n = planes ? x.size() / planes : 0;
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  c.pool.parallel_for(planes, 8, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const float* src = px + p * n;
      if constexpr (Max) {
        float m = -std::numeric_limits<float>::infinity();
        for (std::size_t i = 0; i < n; ++i)
          m = std::max(m, src[i]);
        py[p] = m;
      } else {
        double s = 0.0;
        for (std::size_t i = 0; i < n; ++i)
          s += static_cast<double>(src[i]);
        py[p] = static_cast<float>(s / static_cast<double>(n));
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_global_average_pool(kernel_context& c) {
  global_pool<false>(c);
}
void k_global_max_pool(kernel_context& c) {
  global_pool<true>(c);
}

}  // namespace

void register_pool(registry_map& r) {
  r["MaxPool"] = k_max_pool;
  r["AveragePool"] = k_average_pool;
  r["GlobalAveragePool"] = k_global_average_pool;
  r["GlobalMaxPool"] = k_global_max_pool;
}

}  // namespace quark::onnx::rt
