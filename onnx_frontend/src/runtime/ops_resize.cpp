// SPDX-License-Identifier: MIT
// Resize (opset 10/11/13+) and Upsample (7/9): nearest (all nearest_mode values), linear and
// cubic interpolation over the last two dimensions, with every coordinate transformation mode
// including tf_crop_and_resize. Each output coordinate gets a small list of (source index,
// weight) taps per dimension, computed once per call. GridSample (opset 16/20, any number of
// spatial dimensions from opset 20) builds the same kind of taps per sampling point.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

struct taps {
  std::vector<std::size_t> index;  // taps_per_out entries per output coordinate
  std::vector<float> weight;
  std::vector<bool> outside;  // tf_crop_and_resize extrapolation
  std::size_t per = 1;
};

struct resize_config {
  std::string mode = "nearest";
  std::string transform = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

/// The source coordinate of output coordinate x. The "resized length" is in_len * scale as a
/// real number (ONNX uses it unrounded, e.g. 4 * 0.6 = 2.4 for align_corners).
double source_coord(const resize_config& cfg, double x, double scale, std::size_t in_len,
                    double roi_start, double roi_end) {
  const auto& t = cfg.transform;
  const double out_len = static_cast<double>(in_len) * scale;
  if (t == "half_pixel")
    return (x + 0.5) / scale - 0.5;
  if (t == "pytorch_half_pixel")
    return out_len > 1.0 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (t == "align_corners") {
    return out_len == 1.0 ? 0.0 : x * static_cast<double>(in_len - 1) / (out_len - 1.0);
  }
  if (t == "asymmetric")
    return x / scale;
  if (t == "tf_half_pixel_for_nn")
    return (x + 0.5) / scale;
  if (t == "tf_crop_and_resize") {
    const double span = static_cast<double>(in_len - 1);
    return out_len > 1.0 ? roi_start * span + x * (roi_end - roi_start) * span / (out_len - 1.0)
                         : 0.5 * (roi_start + roi_end) * span;
  }
  return (x + 0.5) / scale - 0.5;
}

/// An integral source position as an index: any position beyond 2^40 either way clamps to the
/// same edge of the input (2^40 is far beyond every dimension), without an out-of-range cast.
std::int64_t to_index(double v) {
  constexpr double bound = 1099511627776.0;  // 2^40
  return static_cast<std::int64_t>(std::clamp(v, -bound, bound));
}

taps make_taps(const kernel_context& c, const resize_config& cfg, std::size_t in_len,
               std::size_t out_len, double scale, double roi_start, double roi_end) {
  taps t;
  const bool nearest = cfg.mode == "nearest";
  const bool cubic = cfg.mode == "cubic";
  if (!nearest && !cubic && cfg.mode != "linear") {
    c.fail("quark.onnx.unsupported_op", "resize mode '" + cfg.mode + "'");
  }
  t.per = nearest ? 1 : (cubic ? 4 : 2);
  const auto last = to_i64(in_len) - 1;
  auto clampi = [last](std::int64_t i) { return to_size(std::clamp<std::int64_t>(i, 0, last)); };
  for (std::size_t o = 0; o < out_len; ++o) {
    const double x = source_coord(cfg, static_cast<double>(o), scale, in_len, roi_start, roi_end);
    if (!std::isfinite(x)) {
      c.fail("quark.onnx.shape",
             "source coordinate " + std::to_string(x) + " (roi or scales not finite)");
    }
    t.outside.push_back(cfg.transform == "tf_crop_and_resize" &&
                        (x < 0.0 || x > static_cast<double>(last)));
    if (nearest) {
      double r;
      const auto& m = cfg.nearest_mode;
      if (m == "floor") {
        r = std::floor(x);
      } else if (m == "ceil") {
        r = std::ceil(x);
      } else if (m == "round_prefer_ceil") {
        r = std::floor(x + 0.5);
      } else {  // round_prefer_floor
        r = std::ceil(x - 0.5);
      }
      t.index.push_back(clampi(to_index(r)));
      t.weight.push_back(1.0f);
      continue;
    }
    const double f = std::floor(x);
    const double r = x - f;
    const auto i0 = to_index(f);
    if (!cubic) {
      t.index.push_back(clampi(i0));
      t.index.push_back(clampi(i0 + 1));
      t.weight.push_back(static_cast<float>(1.0 - r));
      t.weight.push_back(static_cast<float>(r));
      continue;
    }
    const double a = cfg.cubic_a;
    // Keys' cubic convolution kernel at distances 1+r, r, 1-r, 2-r.
    auto far = [a](double d) { return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a; };
    auto near = [a](double d) { return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0; };
    double w[4] = {far(r + 1.0), near(r), near(1.0 - r), far(2.0 - r)};
    double sum = 0.0;
    for (int k = 0; k < 4; ++k) {
      const std::int64_t idx = i0 - 1 + k;
      if (cfg.exclude_outside && (idx < 0 || idx > last))
        w[k] = 0.0;
      sum += w[k];
    }
    for (int k = 0; k < 4; ++k) {
      t.index.push_back(clampi(i0 - 1 + k));
      t.weight.push_back(static_cast<float>(cfg.exclude_outside && sum != 0.0 ? w[k] / sum : w[k]));
    }
  }
  return t;
}

void resize_impl(kernel_context& c, const tensor& x, const std::vector<double>& scales_in,
                 const std::vector<std::int64_t>& sizes_in, const std::vector<double>& roi,
                 const resize_config& cfg) {
  const std::size_t r = x.rank();
  if (r < 2)
    c.fail("quark.onnx.shape", "resize needs at least 2 dimensions");
  shape_t out_shape(r);
  std::vector<double> scales(r, 1.0);
  for (std::size_t d = 0; d < r; ++d) {
    if (!sizes_in.empty()) {
      out_shape[d] = sizes_in[d];
      scales[d] = static_cast<double>(sizes_in[d]) / static_cast<double>(x.shape()[d]);
    } else {
      scales[d] = scales_in[d];
      const double n = std::floor(static_cast<double>(x.shape()[d]) * scales[d]);
      if (!(scales[d] > 0.0) || !(n <= static_cast<double>(max_extent))) {
        c.fail("quark.onnx.shape",
               "scales must be positive and give at most 2^31 per dimension, got " +
                   std::to_string(scales[d]));
      }
      out_shape[d] = static_cast<std::int64_t>(n);
    }
    if (out_shape[d] < 0)
      c.fail("quark.onnx.shape", "negative output size " + std::to_string(out_shape[d]));
    if (x.shape()[d] == 0 && out_shape[d] != 0) {
      c.fail("quark.onnx.shape", "cannot resize an empty dimension (" + std::to_string(d) +
                                     ") to " + std::to_string(out_shape[d]));
    }
    if (d + 2 < r && out_shape[d] != x.shape()[d]) {
      c.fail("quark.onnx.unsupported_op", "only the last two dimensions can be resized");
    }
  }
  check_output_elements(c, out_shape);  // before the taps, which are per output position
  const std::size_t ih = to_size(x.shape()[r - 2]), iw = to_size(x.shape()[r - 1]);
  const std::size_t oh = to_size(out_shape[r - 2]), ow = to_size(out_shape[r - 1]);
  auto roi_at = [&](std::size_t d, bool end) {
    if (roi.size() != 2 * r)
      return end ? 1.0 : 0.0;
    return roi[end ? d + r : d];
  };
  const taps ty =
      make_taps(c, cfg, ih, oh, scales[r - 2], roi_at(r - 2, false), roi_at(r - 2, true));
  const taps tx =
      make_taps(c, cfg, iw, ow, scales[r - 1], roi_at(r - 1, false), roi_at(r - 1, true));
  const float extrapolation = c.n.attr_f("extrapolation_value", 0.0f);
  tensor out(dtype_id::float32, out_shape);
  const std::size_t planes = (ih * iw) != 0 ? x.size() / (ih * iw) : 0;
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  c.pool.parallel_for(planes, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const float* src = px + p * ih * iw;
      float* dst = py + p * oh * ow;
      if (ty.per == 1 && tx.per == 1 && cfg.transform != "tf_crop_and_resize") {
        for (std::size_t oy = 0; oy < oh; ++oy) {  // nearest: a gather per row
          const float* row = src + ty.index[oy] * iw;
          float* drow = dst + oy * ow;
          for (std::size_t ox = 0; ox < ow; ++ox)
            drow[ox] = row[tx.index[ox]];
        }
        continue;
      }
      for (std::size_t oy = 0; oy < oh; ++oy) {
        for (std::size_t ox = 0; ox < ow; ++ox) {
          if (ty.outside[oy] || tx.outside[ox]) {
            dst[oy * ow + ox] = extrapolation;
            continue;
          }
          float acc = 0.0f;
          for (std::size_t a = 0; a < ty.per; ++a) {
            const float wy = ty.weight[oy * ty.per + a];
            const float* row = src + ty.index[oy * ty.per + a] * iw;
            float racc = 0.0f;
            for (std::size_t b = 0; b < tx.per; ++b) {
              racc += tx.weight[ox * tx.per + b] * row[tx.index[ox * tx.per + b]];
            }
            acc += wy * racc;
          }
          dst[oy * ow + ox] = acc;
        }
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_resize(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  resize_config cfg;
  cfg.mode = c.n.attr_s("mode", "nearest");
  cfg.transform =
      c.n.attr_s("coordinate_transformation_mode", c.n.opset < 11 ? "asymmetric" : "half_pixel");
  cfg.nearest_mode = c.n.attr_s("nearest_mode", c.n.opset < 11 ? "floor" : "round_prefer_floor");
  cfg.cubic_a = static_cast<double>(c.n.attr_f("cubic_coeff_a", -0.75f));
  cfg.exclude_outside = c.n.attr_i("exclude_outside", 0) != 0;
  if (c.n.attr_i("antialias", 0) != 0)
    c.fail("quark.onnx.unsupported_op", "antialias");
  if (c.n.has("axes"))
    c.fail("quark.onnx.unsupported_op", "the axes attribute");
  std::vector<double> scales, roi;
  std::vector<std::int64_t> sizes;
  if (c.n.opset < 11) {
    scales = read_doubles(c.in(1));
  } else {
    if (const tensor* t = c.opt(1))
      roi = read_doubles(*t);
    if (const tensor* t = c.opt(2); t && t->size() > 0)
      scales = read_doubles(*t);
    if (const tensor* t = c.opt(3); t && t->size() > 0)
      sizes = read_ints(c, *t);
  }
  if (scales.empty() == sizes.empty())
    c.fail("quark.onnx.shape", "give exactly one of scales and sizes");
  if ((!scales.empty() && scales.size() != x.rank()) ||
      (!sizes.empty() && sizes.size() != x.rank())) {
    c.fail("quark.onnx.shape", "scales/sizes length differs from the rank");
  }
  resize_impl(c, x, scales, sizes, roi, cfg);
}

void k_upsample(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  resize_config cfg;
  cfg.mode = c.n.attr_s("mode", "nearest");
  cfg.transform = "asymmetric";
  cfg.nearest_mode = "floor";
  std::vector<double> scales;
  if (c.has_input(1)) {
    scales = read_doubles(c.in(1));
  } else {
    for (float s : c.n.attr_floats("scales"))
      scales.push_back(static_cast<double>(s));
  }
  if (scales.size() != x.rank())
    c.fail("quark.onnx.shape", "scales length differs from the rank");
  resize_impl(c, x, scales, {}, {}, cfg);
}

// ---- GridSample ---------------------------------------------------------------------------

enum class grid_mode { nearest, linear, cubic };
enum class grid_padding { zeros, border, reflection };

struct grid_config {
  grid_mode mode = grid_mode::linear;
  grid_padding padding = grid_padding::zeros;
  bool align_corners = false;
};

/// Pixel positions are clamped to +-2^40 so that every later floor and cast is defined: this
/// is far outside any image, so under zeros padding all taps still miss it.
constexpr double far_position = 1099511627776.0;

/// x mirrored at lo and hi, as often as needed, until it lies in [lo, hi] (hi > lo).
double reflect_into(double x, double lo, double hi) {
  const double span = hi - lo;
  const double d = std::abs(x - lo);
  const double flips = std::floor(d / span);
  const double rest = d - flips * span;
  return std::fmod(flips, 2.0) == 0.0 ? lo + rest : hi - rest;
}

/// A position under border or reflection padding, in [0, size - 1] afterwards. Reflection
/// mirrors at the corner pixels' centres (align_corners) or at their outer edges.
double pad_position(const grid_config& g, double x, std::size_t size) {
  const double last = static_cast<double>(size - 1);
  if (g.padding == grid_padding::reflection) {
    if (g.align_corners) {
      x = size > 1 ? reflect_into(x, 0.0, last) : 0.0;
    } else {
      x = reflect_into(x, -0.5, static_cast<double>(size) - 0.5);
    }
  }
  return std::clamp(x, 0.0, last);
}

/// Round half to even without depending on the floating-point rounding mode.
double round_half_even(double v) {
  const double f = std::floor(v);
  const double d = v - f;
  return d > 0.5 || (d == 0.5 && std::fmod(f, 2.0) != 0.0) ? f + 1.0 : f;
}

/// The pixel position of normalised coordinate v along an axis of `size` pixels.
double unnormalize(const grid_config& g, float v, std::size_t size) {
  // NaN reads as -1 (as in PyTorch); infinities become finite first (inf * 0 is NaN when
  // align_corners maps a one-pixel axis to position 0).
  const double gv =
      std::isnan(v) ? -1.0 : std::clamp(static_cast<double>(v), -far_position, far_position);
  const double s = static_cast<double>(size);
  const double x = g.align_corners ? (gv + 1.0) * 0.5 * (s - 1.0) : ((gv + 1.0) * s - 1.0) * 0.5;
  return std::clamp(x, -far_position, far_position);
}

/// The on-image pixels one axis contributes to a sampling point, with their weights.
struct axis_taps {
  std::size_t index[4] = {};
  double weight[4] = {};
  std::size_t n = 0;
};

axis_taps grid_taps(const grid_config& g, double x, std::size_t size) {
  axis_taps t;
  // Pixel i of a linear or cubic tap: border and reflection padding move it onto the image
  // (each tap separately, as PyTorch does for bicubic; for linear this equals padding the
  // position first); zeros padding drops it, since it reads 0.
  auto add = [&](double i, double w) {
    if (i < 0.0 || i > static_cast<double>(size - 1)) {
      if (g.padding == grid_padding::zeros)
        return;
      i = std::floor(pad_position(g, i, size) + 0.5);  // mirrors integers onto integers
    }
    t.index[t.n] = static_cast<std::size_t>(i);
    t.weight[t.n] = w;
    ++t.n;
  };
  if (g.mode == grid_mode::nearest) {
    add(round_half_even(g.padding == grid_padding::zeros ? x : pad_position(g, x, size)), 1.0);
    return t;
  }
  const double f = std::floor(x);
  const double r = x - f;
  if (g.mode == grid_mode::linear) {
    add(f, 1.0 - r);
    add(f + 1.0, r);
    return t;
  }
  // Keys' cubic convolution (a = -0.75, as PyTorch) at distances 1 + r, r, 1 - r, 2 - r.
  constexpr double a = -0.75;
  auto far = [](double d) { return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a; };
  auto near = [](double d) { return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0; };
  add(f - 1.0, far(r + 1.0));
  add(f, near(r));
  add(f + 1.0, near(1.0 - r));
  add(f + 2.0, far(2.0 - r));
  return t;
}

void k_grid_sample(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& grid = float_input(c, 1);
  // Opset 20 renamed bilinear / bicubic to linear / cubic and allowed any spatial rank.
  const bool v20 = c.n.opset >= 20;
  const char* linear_name = v20 ? "linear" : "bilinear";
  const char* cubic_name = v20 ? "cubic" : "bicubic";
  grid_config g;
  const std::string mode = c.n.attr_s("mode", linear_name);
  if (mode == linear_name) {
    g.mode = grid_mode::linear;
  } else if (mode == cubic_name) {
    g.mode = grid_mode::cubic;
  } else if (mode == "nearest") {
    g.mode = grid_mode::nearest;
  } else {
    c.fail("quark.onnx.runtime", "mode '" + mode + "' is not one of '" + linear_name +
                                     "', 'nearest', '" + cubic_name + "' (opset " +
                                     std::to_string(c.n.opset) + ")");
  }
  const std::string padding = c.n.attr_s("padding_mode", "zeros");
  if (padding == "zeros") {
    g.padding = grid_padding::zeros;
  } else if (padding == "border") {
    g.padding = grid_padding::border;
  } else if (padding == "reflection") {
    g.padding = grid_padding::reflection;
  } else {
    c.fail("quark.onnx.runtime",
           "padding_mode '" + padding + "' is not one of 'zeros', 'border', 'reflection'");
  }
  const std::int64_t align = c.n.attr_i("align_corners", 0);
  if (align != 0 && align != 1)
    c.fail("quark.onnx.runtime", "align_corners " + std::to_string(align) + " is neither 0 nor 1");
  g.align_corners = align == 1;

  const std::size_t rank = x.rank();
  if (rank < 3 || (!v20 && rank != 4)) {
    c.fail("quark.onnx.shape", std::string("X must be ") +
                                   (v20 ? "[N, C, D1, ..., Dr] with r >= 1" : "4-D [N, C, H, W]") +
                                   ", got " + shape_string(x.shape()));
  }
  const std::size_t r = rank - 2;
  if (grid.rank() != rank || grid.shape()[0] != x.shape()[0] || grid.shape().back() != to_i64(r)) {
    c.fail("quark.onnx.shape", "grid " + shape_string(grid.shape()) + " does not match X " +
                                   shape_string(x.shape()) + " (expected [" +
                                   std::to_string(x.shape()[0]) + ", spatial dims..., " +
                                   std::to_string(r) + "])");
  }
  shape_t out_shape = {x.shape()[0], x.shape()[1]};
  out_shape.insert(out_shape.end(), grid.shape().begin() + 1, grid.shape().end() - 1);
  tensor out(dtype_id::float32, out_shape);
  const std::size_t n = to_size(x.shape()[0]), ch = to_size(x.shape()[1]);
  std::vector<std::size_t> size(r), stride(r);
  std::size_t plane = 1;
  for (std::size_t d = r; d-- > 0;) {
    size[d] = to_size(x.shape()[d + 2]);
    stride[d] = plane;
    plane *= size[d];
  }
  const std::size_t points = element_count(out_shape) / std::max<std::size_t>(1, n * ch);
  if (out.size() == 0 || plane == 0) {  // no pixels: every position reads 0
    c.out(0) = std::move(out);
    return;
  }
  const float* px = x.data<float>().data();
  const float* pg = grid.data<float>().data();
  float* py = out.data<float>().data();
  // Blocks of sampling points: their taps are built once and reused by every channel.
  constexpr std::size_t block = 256;
  const std::size_t blocks = (points + block - 1) / block;
  c.pool.parallel_for(n * blocks, 1, [&](std::size_t j0, std::size_t j1) {
    std::vector<std::size_t> offset, first;
    std::vector<double> weight;
    std::vector<axis_taps> axes(r);
    std::vector<std::size_t> pick(r);
    for (std::size_t j = j0; j < j1; ++j) {
      const std::size_t b = j / blocks;
      const std::size_t q0 = (j % blocks) * block, q1 = std::min(points, q0 + block);
      offset.clear();
      weight.clear();
      first.assign(1, 0);
      for (std::size_t q = q0; q < q1; ++q) {
        // The grid vector lists the innermost spatial dimension first (x, y, ...).
        const float* gv = pg + (b * points + q) * r;
        bool any = true;
        for (std::size_t d = 0; d < r; ++d) {
          axes[d] = grid_taps(g, unnormalize(g, gv[r - 1 - d], size[d]), size[d]);
          any = any && axes[d].n > 0;
        }
        // Every combination of one tap per axis (an odometer over the axes).
        std::fill(pick.begin(), pick.end(), 0);
        while (any) {
          std::size_t off = 0;
          double wt = 1.0;
          for (std::size_t d = 0; d < r; ++d) {
            off += axes[d].index[pick[d]] * stride[d];
            wt *= axes[d].weight[pick[d]];
          }
          offset.push_back(off);
          weight.push_back(wt);
          std::size_t d = 0;
          for (; d < r; ++d) {
            if (++pick[d] < axes[d].n)
              break;
            pick[d] = 0;
          }
          any = d < r;
        }
        first.push_back(offset.size());
      }
      for (std::size_t k = 0; k < ch; ++k) {
        const float* src = px + (b * ch + k) * plane;
        float* dst = py + (b * ch + k) * points;
        for (std::size_t q = q0; q < q1; ++q) {
          double acc = 0.0;
          for (std::size_t t = first[q - q0]; t < first[q - q0 + 1]; ++t)
            acc += weight[t] * static_cast<double>(src[offset[t]]);
          dst[q] = static_cast<float>(acc);
        }
      }
    }
  });
  c.out(0) = std::move(out);
}

}  // namespace

void register_resize(registry_map& r) {
  r["Resize"] = k_resize;
  r["Upsample"] = k_upsample;
  r["GridSample"] = k_grid_sample;
}

}  // namespace quark::onnx::rt
