// SPDX-License-Identifier: MIT
// Resize (opset 10/11/13+) and Upsample (7/9): nearest (all nearest_mode values), linear and
// cubic interpolation over the last two dimensions, with every coordinate transformation mode
// including tf_crop_and_resize. Each output coordinate gets a small list of (source index,
// weight) taps per dimension, computed once per call.
#include <algorithm>
#include <cmath>

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
      t.index.push_back(clampi(static_cast<std::int64_t>(r)));
      t.weight.push_back(1.0f);
      continue;
    }
    const double f = std::floor(x);
    const double r = x - f;
    const auto i0 = static_cast<std::int64_t>(f);
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
      out_shape[d] =
          static_cast<std::int64_t>(std::floor(static_cast<double>(x.shape()[d]) * scales[d]));
    }
    if (d + 2 < r && out_shape[d] != x.shape()[d]) {
      c.fail("quark.onnx.unsupported_op", "only the last two dimensions can be resized");
    }
  }
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

}  // namespace

void register_resize(registry_map& r) {
  r["Resize"] = k_resize;
  r["Upsample"] = k_upsample;
}

}  // namespace quark::onnx::rt
