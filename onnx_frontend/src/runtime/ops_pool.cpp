// SPDX-License-Identifier: MIT
// MaxPool (with its Indices output, float and 8-bit integer inputs), AveragePool and LpPool for
// 1-D, 2-D and 3-D spatial inputs (pads, auto_pad, ceil_mode, dilations, count_include_pad,
// storage_order), MaxUnpool, and the global pools (any spatial rank). Lower ranks run as 3-D with
// leading extents of 1, so one loop nest serves all three.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

constexpr std::size_t max_spatial = 3;
using dims3 = std::array<std::size_t, max_spatial>;

/// Spatial extents in (d, h, w) order; a 1-D or 2-D pool has d (and h) = 1, kernel 1, stride 1.
struct pool_geometry {
  std::size_t planes = 0;   ///< N * C
  std::size_t spatial = 0;  ///< 1, 2 or 3
  dims3 in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1};
  std::array<std::int64_t, max_spatial> pb{}, pe{};  ///< pads at the beginning / end
  std::size_t in_size() const { return in[0] * in[1] * in[2]; }
  std::size_t out_size() const { return out[0] * out[1] * out[2]; }
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
  if (auto_pad != "NOTSET")
    c.fail("quark.onnx.runtime", "unknown auto_pad \"" + auto_pad + "\"");
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
  if (x.rank() < 3 || x.rank() > 2 + max_spatial) {
    c.fail("quark.onnx.shape",
           "only 1-D, 2-D and 3-D pooling is supported, input is " + shape_string(x.shape()));
  }
  pool_geometry g;
  g.spatial = x.rank() - 2;
  g.planes = to_size(x.shape()[0] * x.shape()[1]);
  const auto k = c.n.attr_ints("kernel_shape");
  const auto s = c.n.attr_ints("strides");
  const auto d = c.n.attr_ints("dilations");
  const auto p = c.n.attr_ints("pads");
  const std::size_t sp = g.spatial;
  if (k.size() != sp) {
    c.fail("quark.onnx.shape", "kernel_shape has " + std::to_string(k.size()) + " values for a " +
                                   std::to_string(sp) + "-D input");
  }
  if ((!s.empty() && s.size() != sp) || (!d.empty() && d.size() != sp) ||
      (!p.empty() && p.size() != 2 * sp)) {
    c.fail("quark.onnx.shape", "strides, dilations or pads have the wrong length for a " +
                                   std::to_string(sp) + "-D input");
  }
  const auto auto_pad = c.n.attr_s("auto_pad", "NOTSET");
  const bool ceil_mode = c.n.attr_i("ceil_mode", 0) != 0;
  const std::size_t off = max_spatial - sp;  // spatial dim i lands in slot off + i
  for (std::size_t i = 0; i < sp; ++i) {
    const std::size_t j = off + i;
    const std::int64_t ki = k[i], si = s.empty() ? 1 : s[i], di = d.empty() ? 1 : d[i];
    if (ki < 1 || si < 1 || di < 1) {
      c.fail("quark.onnx.shape",
             "kernel_shape, strides and dilations must be positive (dimension " +
                 std::to_string(i) + ": " + std::to_string(ki) + ", " + std::to_string(si) + ", " +
                 std::to_string(di) + ")");
    }
    g.in[j] = to_size(x.shape()[2 + i]);
    g.k[j] = to_size(ki);
    g.s[j] = to_size(si);
    g.d[j] = to_size(di);
    g.pb[j] = p.empty() ? 0 : p[i];
    g.pe[j] = p.empty() ? 0 : p[i + sp];
    if (g.pb[j] < 0 || g.pe[j] < 0)
      c.fail("quark.onnx.shape", "negative pads are not supported");
    // As ONNX Runtime: a pad of a whole kernel or more would add windows of padding only (and
    // pads of 2^40 asked for an output of 2^40 rows).
    if (g.pb[j] >= ki || g.pe[j] >= ki) {
      c.fail("quark.onnx.shape", "pads must be smaller than kernel_shape (dimension " +
                                     std::to_string(i) + ": pads " + std::to_string(g.pb[j]) +
                                     ", " + std::to_string(g.pe[j]) + ", kernel_shape " +
                                     std::to_string(ki) + ")");
    }
    // The window's extent (k - 1) d + 1, checked before it is computed so that a huge
    // kernel_shape or dilation cannot overflow it (no input is 2^31 wide).
    if (ki - 1 > max_extent / di) {
      c.fail("quark.onnx.shape", "window extent (kernel_shape - 1) * dilations + 1 exceeds 2^31 " +
                                     std::string("(dimension ") + std::to_string(i) + ": " +
                                     std::to_string(ki) + ", " + std::to_string(di) + ")");
    }
    g.out[j] = pooled(c, g.in[j], g.k[j], g.s[j], g.d[j], g.pb[j], g.pe[j], auto_pad, ceil_mode);
  }
  return g;
}

shape_t pooled_shape(const tensor& x, const pool_geometry& g) {
  shape_t shape{x.shape()[0], x.shape()[1]};
  for (std::size_t i = max_spatial - g.spatial; i < max_spatial; ++i)
    shape.push_back(to_i64(g.out[i]));
  return shape;
}

/// Visits the window of output position (od, oy, ox): f(input offset within the plane) for each
/// position inside the input, in row-major order; returns how many window positions lie inside
/// the input or its explicit padding (count_include_pad's divisor).
template <class F>
std::size_t for_window(const pool_geometry& g, std::size_t od, std::size_t oy, std::size_t ox,
                       F&& f) {
  std::size_t padded = 0;
  const auto in_d = to_i64(g.in[0]), in_h = to_i64(g.in[1]), in_w = to_i64(g.in[2]);
  for (std::size_t kd = 0; kd < g.k[0]; ++kd) {
    const std::int64_t iz = to_i64(od * g.s[0] + kd * g.d[0]) - g.pb[0];
    for (std::size_t ky = 0; ky < g.k[1]; ++ky) {
      const std::int64_t iy = to_i64(oy * g.s[1] + ky * g.d[1]) - g.pb[1];
      for (std::size_t kx = 0; kx < g.k[2]; ++kx) {
        const std::int64_t ix = to_i64(ox * g.s[2] + kx * g.d[2]) - g.pb[2];
        // Positions in the explicit padding count for count_include_pad (not beyond it).
        if (iz < in_d + g.pe[0] && iy < in_h + g.pe[1] && ix < in_w + g.pe[2])
          ++padded;
        if (iz < 0 || iz >= in_d || iy < 0 || iy >= in_h || ix < 0 || ix >= in_w)
          continue;
        f((to_size(iz) * g.in[1] + to_size(iy)) * g.in[2] + to_size(ix));
      }
    }
  }
  return padded;
}

/// The Indices output's flat index of plane offset `off`: row-major over the whole input, or
/// with storage_order 1 the spatial position counted column-major (w outermost).
std::int64_t max_index(const pool_geometry& g, std::size_t plane, std::size_t off,
                       bool column_major) {
  std::size_t pos = off;
  if (column_major) {
    const std::size_t x = off % g.in[2];
    const std::size_t y = (off / g.in[2]) % g.in[1];
    const std::size_t z = off / (g.in[2] * g.in[1]);
    pos = (x * g.in[1] + y) * g.in[0] + z;
  }
  return to_i64(plane * g.in_size() + pos);
}

template <class T>
void max_pool(kernel_context& c, const tensor& x, const pool_geometry& g) {
  const bool want_indices = c.output_count() > 1 && !c.n.outputs[1].empty();
  const std::int64_t order = c.n.attr_i("storage_order", 0);
  if (order != 0 && order != 1)
    c.fail("quark.onnx.runtime", "storage_order must be 0 or 1, got " + std::to_string(order));
  const shape_t shape = pooled_shape(x, g);
  tensor out(x.type(), shape, uninitialized);
  tensor indices;
  if (want_indices)
    indices = tensor(dtype_id::int64, shape, uninitialized);
  const T* px = x.data<T>().data();
  T* py = out.data<T>().data();
  std::int64_t* pi = want_indices ? indices.data<std::int64_t>().data() : nullptr;
  const std::size_t n_out = g.out_size();
  c.pool.parallel_for(g.planes, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const T* src = px + p * g.in_size();
      std::size_t o = p * n_out;
      for (std::size_t od = 0; od < g.out[0]; ++od) {
        for (std::size_t oy = 0; oy < g.out[1]; ++oy) {
          for (std::size_t ox = 0; ox < g.out[2]; ++ox, ++o) {
            // The first maximum in scan order wins and NaN never does (as std::max from
            // -inf); a window of only padding (impossible by the output-size rule) would give
            // -inf or the type's lowest value and index -1.
            T best = std::numeric_limits<T>::lowest();
            if constexpr (std::is_floating_point_v<T>)
              best = -std::numeric_limits<T>::infinity();
            constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
            std::size_t at = none;
            for_window(g, od, oy, ox, [&](std::size_t off) {
              if (at == none)
                at = off;
              if (src[off] > best) {
                best = src[off];
                at = off;
              }
            });
            py[o] = best;
            if (pi) {
              pi[o] = at == none ? -1 : max_index(g, p, at, order == 1);
            }
          }
        }
      }
    }
  });
  c.out(0) = std::move(out);
  if (want_indices)
    c.out(1) = std::move(indices);
}

void k_max_pool(kernel_context& c) {
  const tensor& x = c.in(0);
  const pool_geometry g = pool_setup(c, x);
  switch (x.type()) {
    case dtype_id::float32:
      return max_pool<float>(c, x, g);
    case dtype_id::float64:
      return max_pool<double>(c, x, g);
    case dtype_id::int8:
      return max_pool<std::int8_t>(c, x, g);
    case dtype_id::uint8:
      return max_pool<std::uint8_t>(c, x, g);
    default:
      c.fail("quark.onnx.runtime", "MaxPool input '" + c.n.inputs[0] + "' is " +
                                       std::string(dtype_name(x.type())) +
                                       " (float32, float64, int8 and uint8 are supported)");
  }
}

/// AveragePool (P = 0) and LpPool (P = the p attribute, at least 1).
void average_or_lp_pool(kernel_context& c, bool lp) {
  const tensor& x = float_input(c, 0);
  const pool_geometry g = pool_setup(c, x);
  const bool include_pad = !lp && c.n.attr_i("count_include_pad", 0) != 0;
  const std::int64_t p_attr = lp ? c.n.attr_i("p", 2) : 0;
  if (lp && p_attr < 1)
    c.fail("quark.onnx.runtime", "LpPool p must be at least 1, got " + std::to_string(p_attr));
  const auto pw = static_cast<double>(p_attr);
  tensor out(dtype_id::float32, pooled_shape(x, g), uninitialized);
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  const std::size_t n_out = g.out_size();
  c.pool.parallel_for(g.planes, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const float* src = px + p * g.in_size();
      std::size_t o = p * n_out;
      for (std::size_t od = 0; od < g.out[0]; ++od) {
        for (std::size_t oy = 0; oy < g.out[1]; ++oy) {
          for (std::size_t ox = 0; ox < g.out[2]; ++ox, ++o) {
            if (lp) {
              // Lp norm of the window; padding contributes zeros, so it needs no count.
              double acc = 0.0;
              for_window(g, od, oy, ox, [&](std::size_t off) {
                const double a = std::fabs(static_cast<double>(src[off]));
                acc += p_attr == 1 ? a : p_attr == 2 ? a * a : std::pow(a, pw);
              });
              py[o] = static_cast<float>(p_attr == 1   ? acc
                                         : p_attr == 2 ? std::sqrt(acc)
                                                       : std::pow(acc, 1.0 / pw));
              continue;
            }
            float acc = 0.0f;
            std::size_t count = 0;
            const std::size_t padded = for_window(g, od, oy, ox, [&](std::size_t off) {
              acc += src[off];
              ++count;
            });
            const std::size_t div = include_pad ? padded : count;
            py[o] = div ? acc / static_cast<float>(div) : 0.0f;
          }
        }
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_average_pool(kernel_context& c) {
  average_or_lp_pool(c, false);
}
void k_lp_pool(kernel_context& c) {
  average_or_lp_pool(c, true);
}

/// MaxUnpool: scatters X into zeros at the flat positions I (MaxPool's row-major Indices). The
/// output's spatial size is the default (in - 1) * stride + kernel - pads, or the output_shape
/// input when given; the indices are then flat positions of that shape, as in ONNX Runtime and
/// PyTorch's max_unpool (the ONNX test data instead reads them in the default shape and pads).
/// Two values landing on one position: the later wins.
void k_max_unpool(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& idx = c.in(1);
  if (idx.type() != dtype_id::int64)
    c.fail("quark.onnx.runtime", "indices input I must be int64");
  if (idx.shape() != x.shape()) {
    c.fail("quark.onnx.shape", "indices " + shape_string(idx.shape()) + " and input X " +
                                   shape_string(x.shape()) + " differ in shape");
  }
  if (x.rank() < 3)
    c.fail("quark.onnx.shape", "input X must have N, C and spatial dims");
  const std::size_t sp = x.rank() - 2;
  const auto k = c.n.attr_ints("kernel_shape");
  const auto s = c.n.attr_ints("strides");
  const auto p = c.n.attr_ints("pads");
  if (k.size() != sp || (!s.empty() && s.size() != sp) || (!p.empty() && p.size() != 2 * sp)) {
    c.fail("quark.onnx.shape", "kernel_shape, strides or pads have the wrong length for a " +
                                   std::to_string(sp) + "-D input");
  }
  shape_t shape{x.shape()[0], x.shape()[1]};
  for (std::size_t i = 0; i < sp; ++i) {
    const std::int64_t si = s.empty() ? 1 : s[i];
    const std::int64_t pb = p.empty() ? 0 : p[i], pe = p.empty() ? 0 : p[i + sp];
    // (bounded so that the size below cannot overflow: no input is 2^31 wide)
    if (k[i] < 1 || si < 1 || k[i] > max_extent || si > max_extent || pb < 0 || pe < 0 ||
        pb > max_extent || pe > max_extent) {
      c.fail("quark.onnx.shape",
             "kernel_shape and strides must be in [1, 2^31] and pads in "
             "[0, 2^31] (dimension " +
                 std::to_string(i) + ": " + std::to_string(k[i]) + ", " + std::to_string(si) +
                 ", pads " + std::to_string(pb) + ", " + std::to_string(pe) + ")");
    }
    shape.push_back((x.shape()[2 + i] - 1) * si + k[i] - pb - pe);
  }
  if (const tensor* os = c.opt(2)) {
    const auto want = read_ints(c, *os);
    if (want.size() != x.rank())
      c.fail("quark.onnx.shape", "output_shape must have " + std::to_string(x.rank()) + " values");
    if (want[0] != shape[0] || want[1] != shape[1])
      c.fail("quark.onnx.shape", "output_shape changes N or C");
    shape = shape_t(want.begin(), want.end());
  }
  for (const auto v : shape) {
    if (v <= 0)
      c.fail("quark.onnx.shape", "empty or negative output shape " + shape_string(shape));
  }
  check_output_elements(c, shape);
  tensor out(dtype_id::float32, shape);
  const float* px = x.data<float>().data();
  const std::int64_t* pi = idx.data<std::int64_t>().data();
  float* py = out.data<float>().data();
  const auto total = to_i64(out.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (pi[i] < 0 || pi[i] >= total) {
      c.fail("quark.onnx.runtime", "index " + std::to_string(pi[i]) + " at position " +
                                       std::to_string(i) + " is outside the output of " +
                                       std::to_string(total) + " values");
    }
    py[to_size(pi[i])] = px[i];
  }
  c.out(0) = std::move(out);
}

enum class global_kind { average, max, lp };

template <global_kind K>
void global_pool(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  if (x.rank() < 3)
    c.fail("quark.onnx.shape", "global pooling needs N, C and spatial dims");
  const std::int64_t p_attr = K == global_kind::lp ? c.n.attr_i("p", 2) : 0;
  if (K == global_kind::lp && p_attr < 1)
    c.fail("quark.onnx.runtime",
           "GlobalLpPool p must be at least 1, got " + std::to_string(p_attr));
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
      if constexpr (K == global_kind::max) {
        float m = -std::numeric_limits<float>::infinity();
        for (std::size_t i = 0; i < n; ++i)
          m = std::max(m, src[i]);
        py[p] = m;
      } else if constexpr (K == global_kind::average) {
        double s = 0.0;
        for (std::size_t i = 0; i < n; ++i)
          s += static_cast<double>(src[i]);
        py[p] = static_cast<float>(s / static_cast<double>(n));
      } else {
        const auto pw = static_cast<double>(p_attr);
        double s = 0.0;
        for (std::size_t i = 0; i < n; ++i)
          s += std::pow(std::fabs(static_cast<double>(src[i])), pw);
        py[p] = static_cast<float>(std::pow(s, 1.0 / pw));
      }
    }
  });
  c.out(0) = std::move(out);
}

}  // namespace

void register_pool(registry_map& r) {
  r["MaxPool"] = k_max_pool;
  r["AveragePool"] = k_average_pool;
  r["LpPool"] = k_lp_pool;
  r["MaxUnpool"] = k_max_unpool;
  r["GlobalAveragePool"] = global_pool<global_kind::average>;
  r["GlobalMaxPool"] = global_pool<global_kind::max>;
  r["GlobalLpPool"] = global_pool<global_kind::lp>;
}

}  // namespace quark::onnx::rt
