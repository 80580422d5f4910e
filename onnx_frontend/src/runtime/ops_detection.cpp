// SPDX-License-Identifier: MIT
// Detection operators: NonMaxSuppression (opset 10/11) and RoiAlign (opset 10/16), float32.
// NonMaxSuppression sorts each (batch, class) candidate list once and then selects greedily
// against the boxes kept so far. RoiAlign works out, once per ROI, the bilinear taps of the
// sample rows and columns of every bin and visits only the samples that land on the image (the
// others read 0), so an oversized ROI costs no more than the image it covers.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// Optional input i (nullptr when absent) after checking that it holds one value, as a
/// 0-D tensor or a 1-element 1-D tensor (exporters write both).
const tensor* scalar_input(const kernel_context& c, std::size_t i, const char* what) {
  const tensor* t = c.opt(i);
  if (t && (t->size() != 1 || t->rank() > 1)) {
    c.fail("quark.onnx.shape",
           std::string(what) + " must be a scalar, got shape " + shape_string(t->shape()));
  }
  return t;
}

// ---- NonMaxSuppression --------------------------------------------------------------------

/// A box as ordered corners plus its area, so that IoU needs no per-pair normalisation.
struct box_corners {
  double y0 = 0.0, x0 = 0.0, y1 = 0.0, x1 = 0.0, area = 0.0;
};

box_corners corners_of(const float* b, bool center_point) {
  const auto v0 = static_cast<double>(b[0]), v1 = static_cast<double>(b[1]),
             v2 = static_cast<double>(b[2]), v3 = static_cast<double>(b[3]);
  // Corner form: [y1, x1, y2, x2], any diagonal pair in either order. Centre form:
  // [x_center, y_center, width, height].
  const double ya = center_point ? v1 - 0.5 * v3 : v0;
  const double yb = center_point ? v1 + 0.5 * v3 : v2;
  const double xa = center_point ? v0 - 0.5 * v2 : v1;
  const double xb = center_point ? v0 + 0.5 * v2 : v3;
  box_corners r;
  r.y0 = std::min(ya, yb);
  r.y1 = std::max(ya, yb);
  r.x0 = std::min(xa, xb);
  r.x1 = std::max(xa, xb);
  r.area = (r.y1 - r.y0) * (r.x1 - r.x0);
  return r;
}

/// Whether IoU(a, b) = inter / (area_a + area_b - inter) exceeds t, compared without the
/// division: the union is positive whenever the intersection is. Disjoint or degenerate boxes
/// (and NaN coordinates) never overlap.
bool overlaps(const box_corners& a, const box_corners& b, double t) {
  const double h = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
  if (!(h > 0.0))
    return false;
  const double w = std::min(a.x1, b.x1) - std::max(a.x0, b.x0);
  if (!(w > 0.0))
    return false;
  const double inter = h * w;
  return inter > t * (a.area + b.area - inter);
}

void k_non_max_suppression(kernel_context& c) {
  const tensor& boxes = float_input(c, 0);
  const tensor& scores = float_input(c, 1);
  if (boxes.rank() != 3 || boxes.shape()[2] != 4) {
    c.fail("quark.onnx.shape",
           "boxes must be [num_batches, spatial_dimension, 4], got " + shape_string(boxes.shape()));
  }
  if (scores.rank() != 3 || scores.shape()[0] != boxes.shape()[0] ||
      scores.shape()[2] != boxes.shape()[1]) {
    c.fail("quark.onnx.shape", "scores " + shape_string(scores.shape()) + " do not match boxes " +
                                   shape_string(boxes.shape()) + " (expected [" +
                                   std::to_string(boxes.shape()[0]) + ", num_classes, " +
                                   std::to_string(boxes.shape()[1]) + "])");
  }
  const std::int64_t center = c.n.attr_i("center_point_box", 0);
  if (center != 0 && center != 1) {
    c.fail("quark.onnx.runtime",
           "center_point_box " + std::to_string(center) + " is neither 0 nor 1");
  }
  std::int64_t max_out = 0;  // absent: no boxes (the spec's default)
  if (const tensor* t = scalar_input(c, 2, "max_output_boxes_per_class"))
    max_out = read_ints(c, *t)[0];
  double iou_threshold = 0.0;
  if (const tensor* t = scalar_input(c, 3, "iou_threshold"))
    iou_threshold = read_doubles(*t)[0];
  if (!(iou_threshold >= 0.0 && iou_threshold <= 1.0)) {
    c.fail("quark.onnx.runtime",
           "iou_threshold " + std::to_string(iou_threshold) + " is outside [0, 1]");
  }
  const tensor* st = scalar_input(c, 4, "score_threshold");
  const double score_threshold =
      st ? read_doubles(*st)[0] : -std::numeric_limits<double>::infinity();

  const std::size_t batches = to_size(boxes.shape()[0]);
  const std::size_t count = to_size(boxes.shape()[1]);
  const std::size_t classes = to_size(scores.shape()[1]);
  // A negative maximum selects nothing, like 0 (ONNX Runtime does the same).
  const std::size_t limit = max_out <= 0 ? 0 : std::min(to_size(max_out), count);
  std::vector<std::vector<std::size_t>> kept(batches * classes);
  if (limit > 0) {
    const float* pb = boxes.data<float>().data();
    const float* ps = scores.data<float>().data();
    std::vector<box_corners> corners(batches * count);
    for (std::size_t i = 0; i < corners.size(); ++i)
      corners[i] = corners_of(pb + 4 * i, center == 1);
    c.pool.parallel_for(batches * classes, 1, [&](std::size_t p0, std::size_t p1) {
      std::vector<std::size_t> order;
      std::vector<box_corners> chosen;  // the kept boxes, contiguous for the scan below
      for (std::size_t p = p0; p < p1; ++p) {
        const float* s = ps + p * count;
        const box_corners* bc = corners.data() + (p / classes) * count;
        // Candidates above the threshold (without one, every score but NaN), best first; a
        // stable sort keeps tied boxes in index order. NaN never passes, so the order is strict.
        order.clear();
        for (std::size_t i = 0; i < count; ++i) {
          const auto v = static_cast<double>(s[i]);
          if (st ? v > score_threshold : !std::isnan(v))
            order.push_back(i);
        }
        std::stable_sort(order.begin(), order.end(),
                         [s](std::size_t a, std::size_t b) { return s[a] > s[b]; });
        // Greedy selection: each candidate is checked against the boxes kept so far, which
        // number at most `limit`.
        auto& sel = kept[p];
        chosen.clear();
        for (std::size_t i : order) {
          if (sel.size() == limit)
            break;
          const box_corners& cand = bc[i];
          bool suppressed = false;
          for (const box_corners& k : chosen) {
            if (overlaps(cand, k, iou_threshold)) {
              suppressed = true;
              break;
            }
          }
          if (!suppressed) {
            sel.push_back(i);
            chosen.push_back(cand);
          }
        }
      }
    });
  }
  std::size_t total = 0;
  for (const auto& k : kept)
    total += k.size();
  tensor out(dtype_id::int64, {to_i64(total), 3}, uninitialized);
  auto po = out.data<std::int64_t>();
  std::size_t row = 0;
  for (std::size_t p = 0; p < kept.size(); ++p) {
    for (std::size_t i : kept[p]) {
      po[3 * row] = to_i64(p / classes);
      po[3 * row + 1] = to_i64(p % classes);
      po[3 * row + 2] = to_i64(i);
      ++row;
    }
  }
  c.out(0) = std::move(out);
}

// ---- RoiAlign -----------------------------------------------------------------------------

/// A sample coordinate as the two pixels it interpolates between and their weights.
struct lerp_tap {
  std::size_t lo = 0, hi = 0;
  double wlo = 1.0, whi = 0.0;
};

/// The samples of one ROI along one axis. Bin o's on-image samples are
/// taps[first[o] .. first[o + 1]); `grid` counts every sample of a bin, on the image or not.
struct axis_samples {
  std::vector<lerp_tap> taps;
  std::vector<std::size_t> first;
  double grid = 0.0;
};

/// Sample k of a bin sits at base + (k + 0.5) * step; it reads the image when it lies in
/// [-1, extent] and 0 otherwise (the RoiAlign convention).
bool on_image(double base, double step, double k, std::size_t extent) {
  const double y = base + (k + 0.5) * step;
  return y >= -1.0 && y <= static_cast<double>(extent);
}

lerp_tap make_tap(double y, std::size_t extent) {
  // 1. Samples in [-1, 0) read row 0; those at or past the last row read the last row.
  y = std::max(y, 0.0);
  lerp_tap t;
  const auto lo = static_cast<std::size_t>(y);  // y <= extent: the cast is exact
  if (lo + 1 >= extent) {
    t.lo = t.hi = extent - 1;
    return t;
  }
  // 2. Interior: linear weights between lo and lo + 1.
  t.lo = lo;
  t.hi = lo + 1;
  t.whi = y - static_cast<double>(lo);
  t.wlo = 1.0 - t.whi;
  return t;
}

/// The samples along an axis of `extent` pixels for a ROI starting at `start` of length
/// `length`, split into `bins`; `ratio` samples per bin, or ceil(bin size) when 0.
axis_samples sample_axis(const kernel_context& c, std::size_t roi, const char* axis, double start,
                         double length, std::size_t bins, std::int64_t ratio, std::size_t extent) {
  axis_samples a;
  const double bin = length / static_cast<double>(bins);
  const double grid = ratio > 0 ? static_cast<double>(ratio) : std::ceil(bin);
  // Past 2^52 samples a bin's sample indices are no longer exact doubles.
  if (grid > 4503599627370496.0) {
    c.fail("quark.onnx.runtime", "roi " + std::to_string(roi) + " needs " + std::to_string(grid) +
                                     " samples per bin along " + axis);
  }
  a.grid = grid >= 1.0 ? grid : 0.0;  // an empty or inverted ROI has no samples (output 0)
  a.first.push_back(0);
  const double step = a.grid > 0.0 ? bin / a.grid : 0.0;
  for (std::size_t o = 0; o < bins; ++o) {
    const double base = start + static_cast<double>(o) * bin;
    double k0 = 0.0, k1 = a.grid;  // on-image samples: [k0, k1)
    if (step != 0.0 && a.grid > 0.0) {
      // Sample positions are monotonic in k, so the on-image ones form one range: solve for
      // its ends, then settle the rounding at each end with the exact test.
      double lo = (-1.0 - base) / step - 0.5,
             hi = (static_cast<double>(extent) - base) / step - 0.5;
      if (step < 0.0)
        std::swap(lo, hi);
      k0 = std::clamp(std::floor(lo), 0.0, a.grid);
      k1 = std::clamp(std::floor(hi) + 1.0, k0, a.grid);
      while (k0 > 0.0 && on_image(base, step, k0 - 1.0, extent))
        k0 -= 1.0;
      while (k0 < k1 && !on_image(base, step, k0, extent))
        k0 += 1.0;
      while (k1 < a.grid && on_image(base, step, k1, extent))
        k1 += 1.0;
      while (k1 > k0 && !on_image(base, step, k1 - 1.0, extent))
        k1 -= 1.0;
    } else if (!on_image(base, step, 0.0, extent)) {
      k1 = 0.0;  // every sample of the bin sits at one point, off the image
    }
    // k0 <= k1 <= grid <= 2^52: whole numbers, exact as integers too.
    const auto end = static_cast<std::uint64_t>(k1);
    for (auto k = static_cast<std::uint64_t>(k0); k < end; ++k)
      a.taps.push_back(make_tap(base + (static_cast<double>(k) + 0.5) * step, extent));
    a.first.push_back(a.taps.size());
  }
  return a;
}

/// The most bins times samples per bin (output_height * output_width * sampling_ratio^2) RoiAlign
/// accepts per ROI and channel.
constexpr double max_roi_samples = 67108864.0;  // 2^26

void k_roi_align(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& rois = float_input(c, 1);
  const tensor& idx_t = c.in(2);
  if (x.rank() != 4)
    c.fail("quark.onnx.shape", "X must be 4-D [N, C, H, W], got " + shape_string(x.shape()));
  if (rois.rank() != 2 || rois.shape()[1] != 4) {
    c.fail("quark.onnx.shape", "rois must be [num_rois, 4], got " + shape_string(rois.shape()));
  }
  if (idx_t.rank() != 1 || idx_t.shape()[0] != rois.shape()[0]) {
    c.fail("quark.onnx.shape", "batch_indices " + shape_string(idx_t.shape()) +
                                   " does not match rois " + shape_string(rois.shape()) +
                                   " (expected [" + std::to_string(rois.shape()[0]) + "])");
  }
  const std::vector<std::int64_t> batch = read_ints(c, idx_t);
  const std::string mode = c.n.attr_s("mode", "avg");
  if (mode != "avg" && mode != "max")
    c.fail("quark.onnx.runtime", "mode '" + mode + "' is neither 'avg' nor 'max'");
  // Before opset 16 the operator had only the behaviour now called output_half_pixel.
  const std::string transform = c.n.attr_s("coordinate_transformation_mode",
                                           c.n.opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (transform != "half_pixel" && transform != "output_half_pixel") {
    c.fail("quark.onnx.runtime", "coordinate_transformation_mode '" + transform +
                                     "' is neither 'half_pixel' nor 'output_half_pixel'");
  }
  const std::int64_t oh_attr = c.n.attr_i("output_height", 1);
  const std::int64_t ow_attr = c.n.attr_i("output_width", 1);
  if (oh_attr < 1 || ow_attr < 1) {
    c.fail("quark.onnx.runtime", "output_height " + std::to_string(oh_attr) + " and output_width " +
                                     std::to_string(ow_attr) + " must both be at least 1");
  }
  const std::int64_t ratio = c.n.attr_i("sampling_ratio", 0);
  if (ratio < 0)
    c.fail("quark.onnx.runtime", "sampling_ratio " + std::to_string(ratio) + " is negative");
  // Bins and samples per ROI and channel: a malformed output_height of 2^40 asked for a 2^43
  // byte output, a sampling_ratio of 2^40 for 2^40 samples per bin. Real models use 7 x 7 bins
  // of 2 x 2 samples.
  const double per_roi = static_cast<double>(oh_attr) * static_cast<double>(ow_attr) *
                         static_cast<double>(std::max<std::int64_t>(ratio, 1)) *
                         static_cast<double>(std::max<std::int64_t>(ratio, 1));
  if (per_roi > max_roi_samples) {
    c.fail("quark.onnx.runtime", "output_height " + std::to_string(oh_attr) + " * output_width " +
                                     std::to_string(ow_attr) + " * sampling_ratio^2 (" +
                                     std::to_string(ratio) +
                                     ") exceeds the supported maximum of 2^26 samples per ROI");
  }
  const double scale = static_cast<double>(c.n.attr_f("spatial_scale", 1.0f));
  const bool half_pixel = transform == "half_pixel";
  const bool max_mode = mode == "max";

  const std::size_t n = to_size(x.shape()[0]), ch = to_size(x.shape()[1]);
  const std::size_t h = to_size(x.shape()[2]), w = to_size(x.shape()[3]);
  const std::size_t nr = to_size(rois.shape()[0]);
  const std::size_t oh = to_size(oh_attr), ow = to_size(ow_attr);
  const float* pr = rois.data<float>().data();
  for (std::size_t r = 0; r < nr; ++r) {
    if (batch[r] < 0 || batch[r] >= to_i64(n)) {
      c.fail("quark.onnx.runtime", "batch_indices[" + std::to_string(r) +
                                       "] = " + std::to_string(batch[r]) + " is out of range for " +
                                       std::to_string(n) + " images");
    }
  }
  tensor out(dtype_id::float32, {to_i64(nr), to_i64(ch), oh_attr, ow_attr});
  if (out.size() == 0 || h == 0 || w == 0) {  // no pixels: every sample reads 0
    c.out(0) = std::move(out);
    return;
  }
  // 1. Per ROI: its row and column samples (cheap next to the C channels that reuse them).
  std::vector<axis_samples> ys(nr), xs(nr);
  for (std::size_t r = 0; r < nr; ++r) {
    const float* roi = pr + 4 * r;  // [x1, y1, x2, y2]
    const double offset = half_pixel ? 0.5 : 0.0;
    double v[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = static_cast<double>(roi[k]) * scale - offset;
      if (!std::isfinite(v[k])) {
        c.fail("quark.onnx.runtime", "roi " + std::to_string(r) + " has the non-finite scaled " +
                                         "coordinate " + std::to_string(v[k]));
      }
    }
    double rw = v[2] - v[0], rh = v[3] - v[1];
    if (!half_pixel) {  // the legacy mode forces ROIs to at least one pixel
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    ys[r] = sample_axis(c, r, "y", v[1], rh, oh, ratio, h);
    xs[r] = sample_axis(c, r, "x", v[0], rw, ow, ratio, w);
  }
  // 2. Per (ROI, channel) plane: average or maximum of each bin's bilinear samples.
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  c.pool.parallel_for(nr * ch, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t r = p / ch;
      const axis_samples& sy = ys[r];
      const axis_samples& sx = xs[r];
      const float* plane = px + (to_size(batch[r]) * ch + p % ch) * h * w;
      float* dst = py + p * oh * ow;
      const double samples = sy.grid * sx.grid;
      for (std::size_t by = 0; by < oh; ++by) {
        for (std::size_t bx = 0; bx < ow; ++bx) {
          double acc = max_mode ? -std::numeric_limits<double>::infinity() : 0.0;
          std::size_t seen = 0;
          for (std::size_t a = sy.first[by]; a < sy.first[by + 1]; ++a) {
            const lerp_tap& ty = sy.taps[a];
            const float* rlo = plane + ty.lo * w;
            const float* rhi = plane + ty.hi * w;
            for (std::size_t b = sx.first[bx]; b < sx.first[bx + 1]; ++b) {
              const lerp_tap& tx = sx.taps[b];
              const double v = ty.wlo * (tx.wlo * static_cast<double>(rlo[tx.lo]) +
                                         tx.whi * static_cast<double>(rlo[tx.hi])) +
                               ty.whi * (tx.wlo * static_cast<double>(rhi[tx.lo]) +
                                         tx.whi * static_cast<double>(rhi[tx.hi]));
              acc = max_mode ? std::max(acc, v) : acc + v;
              ++seen;
            }
          }
          double value = 0.0;
          if (max_mode) {
            // Off-image samples are points of value 0 and take part in the maximum too.
            if (static_cast<double>(seen) < samples)
              acc = std::max(acc, 0.0);
            value = samples > 0.0 ? acc : 0.0;
          } else if (samples > 0.0) {
            value = acc / samples;
          }
          dst[by * ow + bx] = static_cast<float>(value);
        }
      }
    }
  });
  c.out(0) = std::move(out);
}

}  // namespace

void register_detection(registry_map& r) {
  r["NonMaxSuppression"] = k_non_max_suppression;
  r["RoiAlign"] = k_roi_align;
}

}  // namespace quark::onnx::rt
