// SPDX-License-Identifier: MIT
// Hand-derived cases for NonMaxSuppression and RoiAlign (runtime/ops_detection.cpp) and GridSample
// (runtime/ops_resize.cpp) beyond the ONNX conformance data: NMS score threshold, per-class
// limit and tie order across two classes with flipped corners; RoiAlign max mode, both
// coordinate modes at opset 16 and ROIs partly off the image; GridSample reflection padding with
// and without align_corners, bicubic next to the border, N-D grids at opset 20; and the error
// paths of all three. Models are written with the wire helper.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"
#include "runtime_test_util.hpp"

namespace w = io_wire;
using namespace runtime_test;

namespace {

constexpr int FLOAT = 1, INT64 = 7;

/// Checks float outputs against hand-derived values (interpolation weights are inexact).
void check_close(const std::vector<float>& v, const std::vector<float>& want) {
  REQUIRE(v.size() == want.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(v[i]) == doctest::Approx(static_cast<double>(want[i])).epsilon(1e-5));
  }
}
void check_close(const tensor& got, const std::vector<float>& want) {
  check_close(values_of<float>(got), want);
}

/// A one-node model named "op": `inputs` are graph inputs (without declared shapes) of the given
/// element types; "" leaves an optional input out.
runtime one_node(std::string_view op, std::int64_t opset,
                 const std::vector<std::pair<std::string, int>>& inputs, int out_type,
                 const std::vector<w::msg>& attrs) {
  w::graph g;
  w::msg n;
  for (const auto& [name, type] : inputs) {
    n.bytes(1, name);
    if (!name.empty())
      g.add_input(w::value_info(name, type, {}, false));
  }
  n.bytes(2, "y").bytes(3, "op").bytes(4, op);
  for (const auto& a : attrs)
    n.sub(5, a);
  g.add_node(n);
  g.add_output(w::value_info("y", out_type, {}, false));
  return load(w::model(g, 8, {{"", opset}}));
}

// ---- NonMaxSuppression ----------------------------------------------------------------------

/// Corner-form boxes [y1, x1, y2, x2]; boxes 1 and 3 list their corners the other way round.
///   box 0: y [0, 1],     x [0, 1]
///   box 1: y [0.1, 1.1], x [0, 1]   IoU(0, 1) = 0.9 / (1 + 1 - 0.9) = 0.818
///   box 2: y [0, 1],     x [2, 3]   disjoint from boxes 0 and 1
///   box 3: y [0, 1],     x [2, 3]   the same box as 2: IoU(2, 3) = 1
///   box 4: y [5, 6],     x [5, 6]   disjoint from all
tensor nms_boxes() {
  return f32({1, 5, 4}, {0, 0, 1, 1, 1.1f, 1, 0.1f, 0, 0, 2, 1, 3, 1, 3, 0, 2, 5, 5, 6, 6});
}
tensor nms_scores() {
  return f32({1, 2, 5}, {0.9f, 0.8f, 0.7f, 0.6f, 0.1f,     // class 0
                         0.2f, 0.95f, 0.4f, 0.5f, 0.3f});  // class 1
}

}  // namespace

TEST_CASE("NonMaxSuppression: score threshold and per-class limit across two classes") {
  const runtime rt = one_node(
      "NonMaxSuppression", 11,
      {{"boxes", FLOAT}, {"scores", FLOAT}, {"max", INT64}, {"iou", FLOAT}, {"score", FLOAT}},
      INT64, {});
  auto run = [&](std::int64_t max_out) {
    return values_of<std::int64_t>(rt.run({{"boxes", nms_boxes()},
                                           {"scores", nms_scores()},
                                           {"max", i64({1}, {max_out})},
                                           {"iou", f32({1}, {0.5f})},
                                           {"score", f32({1}, {0.3f})}})
                                       .at("y"));
  };
  // Score threshold 0.3 (strict: class 1's box 4 at exactly 0.3 is out, so is class 0's box 4).
  // Class 0, by score 0, 1, 2, 3: keep 0, 1 suppressed by 0 (0.818 > 0.5), keep 2, 3 suppressed
  // by 2 (IoU 1). Class 1, by score 1, 3, 2 (box 0 at 0.2 is out): keep 1, keep 3 (disjoint from
  // 1), 2 suppressed by 3.
  CHECK(run(3) == std::vector<std::int64_t>{0, 0, 0, 0, 0, 2, 0, 1, 1, 0, 1, 3});
  // A limit of 1 keeps the best box of each class.
  CHECK(run(1) == std::vector<std::int64_t>{0, 0, 0, 0, 1, 1});
  // Limit 0 (and a negative one) selects nothing: a [0, 3] result.
  const auto none = rt.run({{"boxes", nms_boxes()},
                            {"scores", nms_scores()},
                            {"max", i64({}, {-2})},
                            {"iou", f32({}, {0.5f})},
                            {"score", f32({}, {0.3f})}});
  CHECK(none.at("y").shape() == shape_t{0, 3});
}

TEST_CASE("NonMaxSuppression: without a score threshold every box is a candidate") {
  const runtime rt =
      one_node("NonMaxSuppression", 10,
               {{"boxes", FLOAT}, {"scores", FLOAT}, {"max", INT64}, {"iou", FLOAT}}, INT64, {});
  const auto out = rt.run({{"boxes", nms_boxes()},
                           {"scores", nms_scores()},
                           {"max", i64({1}, {3})},
                           {"iou", f32({1}, {0.5f})}});
  // Class 0: 0 kept, 1 suppressed, 2 kept, 3 suppressed, 4 (0.1, disjoint) kept.
  // Class 1, by score 1, 3, 2, 4, 0: keep 1, keep 3, 2 suppressed, keep 4: the limit is reached.
  CHECK(values_of<std::int64_t>(out.at("y")) ==
        std::vector<std::int64_t>{0, 0, 0, 0, 0, 2, 0, 0, 4, 0, 1, 1, 0, 1, 3, 0, 1, 4});
}

TEST_CASE("NonMaxSuppression: tied scores are taken in box order, absent limit gives nothing") {
  // Centre form [xc, yc, w, h]: box 0 x [0, 1]; box 1 x [2, 3]; box 2 x [2.1, 3.1] (IoU with
  // box 1 = 0.9 / 1.1); box 3 x [5, 6]; all y [0, 1]; every score 0.5.
  const tensor boxes =
      f32({1, 4, 4}, {0.5f, 0.5f, 1, 1, 2.5f, 0.5f, 1, 1, 2.6f, 0.5f, 1, 1, 5.5f, 0.5f, 1, 1});
  const tensor scores = f32({1, 1, 4}, {0.5f, 0.5f, 0.5f, 0.5f});
  const runtime rt = one_node("NonMaxSuppression", 11,
                              {{"boxes", FLOAT}, {"scores", FLOAT}, {"max", INT64}, {"iou", FLOAT}},
                              INT64, {w::attr_int("center_point_box", 1)});
  // In index order: keep 0, keep 1, 2 suppressed by 1, keep 3 (the limit 10 exceeds the boxes).
  const auto out = rt.run(
      {{"boxes", boxes}, {"scores", scores}, {"max", i64({1}, {10})}, {"iou", f32({1}, {0.5f})}});
  CHECK(values_of<std::int64_t>(out.at("y")) ==
        std::vector<std::int64_t>{0, 0, 0, 0, 0, 1, 0, 0, 3});
  const runtime bare = one_node("NonMaxSuppression", 11, {{"boxes", FLOAT}, {"scores", FLOAT}},
                                INT64, {w::attr_int("center_point_box", 1)});
  CHECK(bare.run({{"boxes", boxes}, {"scores", scores}}).at("y").shape() == shape_t{0, 3});
}

TEST_CASE("NonMaxSuppression: bad shapes, thresholds and center_point_box fail naming them") {
  const runtime rt =
      one_node("NonMaxSuppression", 11,
               {{"boxes", FLOAT}, {"scores", FLOAT}, {"max", INT64}, {"iou", FLOAT}}, INT64, {});
  const tensor mx = i64({1}, {2});
  const tensor iou = f32({1}, {0.5f});
  std::string e = run_error(rt, {{"boxes", f32({1, 3, 4}, std::vector<float>(12, 0.0f))},
                                 {"scores", f32({1, 1, 2}, {0.5f, 0.5f})},
                                 {"max", mx},
                                 {"iou", iou}});
  CAPTURE(e);
  CHECK(has(e, "'op'"));
  CHECK(has(e, "NonMaxSuppression"));
  CHECK(has(e, "scores [1,1,2] do not match boxes [1,3,4]"));
  e = run_error(rt, {{"boxes", f32({1, 2, 3}, std::vector<float>(6, 0.0f))},
                     {"scores", f32({1, 1, 2}, {0.5f, 0.5f})},
                     {"max", mx},
                     {"iou", iou}});
  CHECK(has(e, "boxes must be [num_batches, spatial_dimension, 4], got [1,2,3]"));
  const tensor boxes = f32({1, 1, 4}, {0, 0, 1, 1});
  const tensor scores = f32({1, 1, 1}, {0.5f});
  e = run_error(
      rt, {{"boxes", boxes}, {"scores", scores}, {"max", mx}, {"iou", f32({2}, {0.5f, 0.5f})}});
  CHECK(has(e, "iou_threshold must be a scalar, got shape [2]"));
  e = run_error(rt,
                {{"boxes", boxes}, {"scores", scores}, {"max", i64({1, 1}, {2})}, {"iou", iou}});
  CHECK(has(e, "max_output_boxes_per_class must be a scalar, got shape [1,1]"));
  e = run_error(rt, {{"boxes", boxes}, {"scores", scores}, {"max", mx}, {"iou", f32({1}, {1.5f})}});
  CHECK(has(e, "iou_threshold 1.5"));
  CHECK(has(e, "outside [0, 1]"));
  const runtime bad = one_node("NonMaxSuppression", 11, {{"boxes", FLOAT}, {"scores", FLOAT}},
                               INT64, {w::attr_int("center_point_box", 2)});
  e = run_error(bad, {{"boxes", boxes}, {"scores", scores}});
  CHECK(has(e, "'op'"));
  CHECK(has(e, "center_point_box 2 is neither 0 nor 1"));
}

// ---- RoiAlign -------------------------------------------------------------------------------

namespace {

/// X [1, 2, 4, 4]: channel 0 holds 4y + x, channel 1 holds -1 - 4y - x. Both are linear, so a
/// bilinear sample at (y, x) on [0, 3]^2 is exactly 4y + x (resp. -1 - 4y - x).
tensor roi_x() {
  std::vector<float> v(32);
  for (std::size_t i = 0; i < 16; ++i) {  // i = 4y + x
    v[i] = static_cast<float>(i);
    v[16 + i] = -1.0f - static_cast<float>(i);
  }
  return f32({1, 2, 4, 4}, v);
}

runtime roi_model(std::int64_t opset, const std::vector<w::msg>& attrs) {
  return one_node("RoiAlign", opset, {{"x", FLOAT}, {"rois", FLOAT}, {"b", INT64}}, FLOAT, attrs);
}

/// Output of one ROI [x1, y1, x2, y2] of image 0.
std::vector<float> roi_run(const runtime& rt, const std::vector<float>& roi) {
  const auto n = static_cast<std::int64_t>(roi.size() / 4);
  return values_of<float>(
      rt.run({{"x", roi_x()},
              {"rois", f32({n, 4}, roi)},
              {"b", i64({n}, std::vector<std::int64_t>(static_cast<std::size_t>(n), 0))}})
          .at("y"));
}

}  // namespace

TEST_CASE("RoiAlign: avg and max under both coordinate modes at opset 16") {
  for (const char* mode : {"avg", "max"}) {
    CAPTURE(mode);
    const bool mx = std::string_view(mode) == "max";
    // output_half_pixel, ROI [0, 0, 2, 2], one 2x2 bin, 2 samples per axis: y, x at 0.5 and 1.5.
    // Channel 0 samples 2.5, 3.5, 6.5, 7.5: mean 5, max 7.5; channel 1: -3.5 .. -8.5: mean -6.
    const runtime legacy =
        roi_model(16, {w::attr_string("mode", mode),
                       w::attr_string("coordinate_transformation_mode", "output_half_pixel"),
                       w::attr_int("sampling_ratio", 2)});
    check_close(
        legacy.run({{"x", roi_x()}, {"rois", f32({1, 4}, {0, 0, 2, 2})}, {"b", i64({1}, {0})}})
            .at("y"),
        mx ? std::vector<float>{7.5f, -3.5f} : std::vector<float>{5.0f, -6.0f});
    // half_pixel shifts the ROI by -0.5: samples at 0 and 1. Channel 0: 0, 1, 4, 5 (mean 2.5,
    // max 5); channel 1: -1, -2, -5, -6 (mean -3.5, max -1).
    const runtime half =
        roi_model(16, {w::attr_string("mode", mode),
                       w::attr_string("coordinate_transformation_mode", "half_pixel"),
                       w::attr_int("sampling_ratio", 2)});
    check_close(roi_run(half, {0, 0, 2, 2}),
                mx ? std::vector<float>{5.0f, -1.0f} : std::vector<float>{2.5f, -3.5f});
    // half_pixel is opset 16's default.
    const runtime dflt =
        roi_model(16, {w::attr_string("mode", mode), w::attr_int("sampling_ratio", 2)});
    CHECK(roi_run(dflt, {0, 0, 2, 2}) == roi_run(half, {0, 0, 2, 2}));
  }
}

TEST_CASE("RoiAlign: opset 10 is output_half_pixel, spatial_scale and a 2x2 output") {
  // spatial_scale 0.5 maps ROI [0, 0, 4, 4] to [0, 0, 2, 2]: the mean of case one, 5 and -6.
  const runtime scaled =
      roi_model(10, {w::attr_int("sampling_ratio", 2), w::attr_float("spatial_scale", 0.5f)});
  check_close(roi_run(scaled, {0, 0, 4, 4}), {5.0f, -6.0f});
  // ROI [0, 0, 4, 4] in 2x2 bins of size 2, one sample each at the bin centres 1 and 3:
  // channel 0 reads (1,1) = 5, (1,3) = 7, (3,1) = 13, (3,3) = 15.
  const runtime bins =
      roi_model(10, {w::attr_int("sampling_ratio", 1), w::attr_int("output_height", 2),
                     w::attr_int("output_width", 2)});
  check_close(roi_run(bins, {0, 0, 4, 4}), {5, 7, 13, 15, -6, -8, -14, -16});
}

TEST_CASE("RoiAlign: a ROI partly off the image reads 0 there, in avg and in max mode") {
  for (const char* mode : {"avg", "max"}) {
    CAPTURE(mode);
    const bool mx = std::string_view(mode) == "max";
    // output_half_pixel, ROI [2, 2, 6, 6], adaptive sampling: ceil(4 / 1) = 4 samples per axis
    // at 2.5, 3.5, 4.5, 5.5. 4.5 and 5.5 lie past row/column 4 and read 0; 3.5 is past the last
    // row and reads row 3. On-image samples (y, x) in {2.5, 3}^2: 12.5, 13, 14.5, 15 (sum 55),
    // channel 1: -13.5, -14, -15.5, -16 (sum -59). Mean over all 16 samples: 3.4375, -3.6875.
    // Max: 15, and 0 for channel 1, since the 12 off-image samples are points of value 0.
    const runtime rt =
        roi_model(16, {w::attr_string("mode", mode),
                       w::attr_string("coordinate_transformation_mode", "output_half_pixel")});
    check_close(
        rt.run({{"x", roi_x()}, {"rois", f32({1, 4}, {2, 2, 6, 6})}, {"b", i64({1}, {0})}}).at("y"),
        mx ? std::vector<float>{15.0f, 0.0f} : std::vector<float>{3.4375f, -3.6875f});
    // half_pixel, ROI [-2, 0, 2, 2] in 1x2 bins, one sample each: y at -0.5 + 1 = 0.5; x at
    // -2.5 + 1 = -1.5 (left of -1: off the image, 0) and at 0.5. Channel 0: 0 and 2.5;
    // channel 1: 0 and -3.5 (avg and max agree: one sample per bin).
    const runtime left =
        roi_model(16, {w::attr_string("mode", mode), w::attr_int("sampling_ratio", 1),
                       w::attr_int("output_width", 2)});
    check_close(roi_run(left, {-2, 0, 2, 2}), {0.0f, 2.5f, 0.0f, -3.5f});
  }
  // A ROI far larger than the image: output_half_pixel, ROI [0, 0, 1e9, 1e9], one bin of 1e9
  // samples per axis at 0.5, 1.5, ...; only 0.5 .. 3.5 lie on [-1, 4] (3.5 reads row 3), so
  // channel 0 sums 4y + x over y, x in {0.5, 1.5, 2.5, 3}: 4 * (4 * 7.5) + 4 * 7.5 = 150, and
  // channel 1 sums -1 - 4y - x: -16 - 150 = -166; both divided by 1e18 samples.
  const runtime huge =
      roi_model(16, {w::attr_string("coordinate_transformation_mode", "output_half_pixel")});
  std::vector<float> tiny = roi_run(huge, {0, 0, 1e9f, 1e9f});
  for (float& v : tiny)
    v *= 1e16f;  // to the scale at which Approx compares relatively
  check_close(tiny, {1.5f, -1.66f});
}

TEST_CASE("RoiAlign: bad batch indices, shapes and attributes fail naming them") {
  const runtime rt = roi_model(16, {});
  const tensor x = roi_x();
  const tensor roi = f32({1, 4}, {0, 0, 2, 2});
  std::string e = run_error(rt, {{"x", x}, {"rois", roi}, {"b", i64({1}, {1})}});
  CAPTURE(e);
  CHECK(has(e, "'op'"));
  CHECK(has(e, "RoiAlign"));
  CHECK(has(e, "batch_indices[0] = 1 is out of range for 1 images"));
  e = run_error(rt, {{"x", x}, {"rois", roi}, {"b", i64({1}, {-1})}});
  CHECK(has(e, "batch_indices[0] = -1 is out of range"));
  e = run_error(rt, {{"x", x}, {"rois", f32({1, 3}, {0, 0, 2})}, {"b", i64({1}, {0})}});
  CHECK(has(e, "rois must be [num_rois, 4], got [1,3]"));
  e = run_error(rt, {{"x", x}, {"rois", roi}, {"b", i64({2}, {0, 0})}});
  CHECK(has(e, "batch_indices [2] does not match rois [1,4]"));
  e = run_error(
      rt, {{"x", f32({2, 8}, std::vector<float>(16, 0.0f))}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "X must be 4-D [N, C, H, W], got [2,8]"));
  e = run_error(rt, {{"x", x},
                     {"rois", f32({1, 4}, {0, 0, std::numeric_limits<float>::infinity(), 2})},
                     {"b", i64({1}, {0})}});
  CHECK(has(e, "roi 0 has the non-finite scaled coordinate inf"));
  // 1e30 / 1 samples per bin are more than a double counts exactly (2^52).
  e = run_error(rt, {{"x", x}, {"rois", f32({1, 4}, {0, 0, 2, 1e30f})}, {"b", i64({1}, {0})}});
  CHECK(has(e, "roi 0 needs"));
  CHECK(has(e, "samples per bin along y"));
  e = run_error(roi_model(16, {w::attr_string("mode", "min")}),
                {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "mode 'min' is neither 'avg' nor 'max'"));
  e = run_error(roi_model(16, {w::attr_string("coordinate_transformation_mode", "asymmetric")}),
                {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "coordinate_transformation_mode 'asymmetric'"));
  e = run_error(roi_model(16, {w::attr_int("output_height", 0)}),
                {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "output_height 0"));
  e = run_error(roi_model(16, {w::attr_int("sampling_ratio", -1)}),
                {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "sampling_ratio -1 is negative"));
  // Malformed sizes are refused before the output or the sample lists are allocated: an
  // output_height of 2^40 (a 2^43 byte output) and a sampling_ratio of 2^40 (2^40 samples per
  // bin) used to be attempted.
  e = run_error(roi_model(16, {w::attr_int("output_height", std::int64_t{1} << 40)}),
                {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "'op'"));
  CHECK(has(e, "output_height 1099511627776"));
  CHECK(has(e, "exceeds the supported maximum of 2^26 samples per ROI"));
  e = run_error(roi_model(16, {w::attr_int("sampling_ratio", std::int64_t{1} << 40)}),
                {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "sampling_ratio^2 (1099511627776)"));
  e = run_error(
      roi_model(16, {w::attr_int("output_width", 8192), w::attr_int("output_height", 8193)}),
      {{"x", x}, {"rois", roi}, {"b", i64({1}, {0})}});
  CHECK(has(e, "exceeds the supported maximum"));
}

// ---- GridSample -----------------------------------------------------------------------------

namespace {

runtime grid_model(std::int64_t opset, const std::vector<w::msg>& attrs) {
  return one_node("GridSample", opset, {{"x", FLOAT}, {"grid", FLOAT}}, FLOAT, attrs);
}

/// Samples a one-row image [1, 1, 1, W] at normalised x positions (y = 0, the row itself under
/// either align_corners).
tensor row_sample(const runtime& rt, const std::vector<float>& row, const std::vector<float>& xs) {
  std::vector<float> g;
  for (float v : xs) {
    g.push_back(v);
    g.push_back(0.0f);
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  return rt
      .run({{"x", f32({1, 1, 1, static_cast<std::int64_t>(row.size())}, row)},
            {"grid", f32({1, 1, n, 2}, g)}})
      .at("y");
}

}  // namespace

TEST_CASE("GridSample: reflection padding mirrors at pixel centres or at pixel edges") {
  const std::vector<float> row = {10, 20, 30};
  // align_corners 1: x = (g + 1) / 2 * 2, mirrored at 0 and 2.
  //   g -1.5 -> -0.5 -> 0.5: 15;  g 2 -> 3 -> 1: 20;  g 3.5 -> 4.5 -> 4.5 - 4 = 0.5: 15;
  //   g 0.25 -> 1.25 (inside): 22.5.
  const runtime centres = grid_model(
      16, {w::attr_string("padding_mode", "reflection"), w::attr_int("align_corners", 1)});
  check_close(row_sample(centres, row, {-1.5f, 2.0f, 3.5f, 0.25f}), {15, 20, 15, 22.5f});
  // align_corners 0: x = ((g + 1) * 3 - 1) / 2, mirrored at -0.5 and 2.5, then clipped to [0, 2].
  //   g -1.5 -> -1.25 -> 0.25: 12.5;  g 1.5 -> 3.25 -> 1.75: 27.5;
  //   g -0.9 -> -0.35 (inside the mirror range) -> clipped to 0: 10;
  //   g 5 -> 8.5 -> three reflections (9 = 3 * 3) -> 2.5 -> 2: 30.
  const runtime edges = grid_model(16, {w::attr_string("padding_mode", "reflection")});
  check_close(row_sample(edges, row, {-1.5f, 1.5f, -0.9f, 5.0f}), {12.5f, 27.5f, 10, 30});
  // Same at opset 20 in nearest mode: positions round after the reflection.
  //   g -1.5 -> 0.25 -> 0: 10;  g 1.5 -> 1.75 -> 2: 30.
  const runtime nearest = grid_model(
      20, {w::attr_string("padding_mode", "reflection"), w::attr_string("mode", "nearest")});
  check_close(row_sample(nearest, row, {-1.5f, 1.5f}), {10, 30});
}

TEST_CASE("GridSample: nearest rounds half to even") {
  // W = 4, align_corners 0: x = 2g + 1.5. g -0.5 -> 0.5 -> 0; g 0 -> 1.5 -> 2; g 0.5 -> 2.5 -> 2;
  // g 0.25 -> 2 (no tie) -> 2.
  const runtime rt = grid_model(16, {w::attr_string("mode", "nearest")});
  check_close(row_sample(rt, {10, 20, 30, 40}, {-0.5f, 0.0f, 0.5f, 0.25f}), {10, 30, 30, 30});
}

TEST_CASE("GridSample: bicubic next to the border under each padding mode") {
  // Row [1, 2, 4, 8], align_corners 0: x = 2g + 1.5. With a = -0.75 the cubic weights at
  // fraction 0.5 are far(1.5) = -0.09375 and near(0.5) = 0.59375 (taps f-1, f, f+1, f+2);
  // at fraction 0 they are 0, 1, 0, 0, so the single row y = 0 is read exactly.
  //   g -1   -> x -0.5, taps -2, -1, 0, 1;   g -0.5 -> x 0.5, taps -1, 0, 1, 2;
  //   g 0.5  -> x 2.5,  taps 1, 2, 3, 4.
  // zeros drops off-image taps:
  //   0.59375*1 - 0.09375*2 = 0.40625;  0.59375*(1+2) - 0.09375*4 = 1.40625;
  //   -0.09375*2 + 0.59375*(4+8) = 6.9375.
  // border reads pixel 0 for taps -2, -1 and pixel 3 for tap 4:
  //   0.5*1 + 0.59375*1 - 0.09375*2 = 0.90625;  1.40625 - 0.09375*1 = 1.3125;
  //   6.9375 - 0.09375*8 = 6.1875.
  // reflection (at -0.5 and 3.5) reads pixel 1 for tap -2, 0 for -1, 3 for 4:
  //   -0.09375*2 + 0.59375*1 + 0.59375*1 - 0.09375*2 = 0.8125;  1.3125;  6.1875.
  const std::vector<float> row = {1, 2, 4, 8};
  const std::vector<float> xs = {-1.0f, -0.5f, 0.5f};
  const std::vector<std::pair<const char*, std::vector<float>>> cases = {
      {"zeros", {0.40625f, 1.40625f, 6.9375f}},
      {"border", {0.90625f, 1.3125f, 6.1875f}},
      {"reflection", {0.8125f, 1.3125f, 6.1875f}}};
  for (const auto& pc : cases) {
    const char* padding = pc.first;
    const std::vector<float>& want = pc.second;
    CAPTURE(padding);
    const runtime v16 = grid_model(
        16, {w::attr_string("mode", "bicubic"), w::attr_string("padding_mode", padding)});
    check_close(row_sample(v16, row, xs), want);
    const runtime v20 =
        grid_model(20, {w::attr_string("mode", "cubic"), w::attr_string("padding_mode", padding)});
    check_close(row_sample(v20, row, xs), want);
  }
}

TEST_CASE("GridSample: opset 20 samples 1-D and 3-D spatial inputs") {
  // 1-D: X [1, 1, 4] = [1, 2, 4, 8], grid [1, 3, 1]: the zeros row of the bicubic case.
  const runtime cubic = grid_model(20, {w::attr_string("mode", "cubic")});
  check_close(cubic
                  .run({{"x", f32({1, 1, 4}, {1, 2, 4, 8})},
                        {"grid", f32({1, 3, 1}, {-1.0f, -0.5f, 0.5f})}})
                  .at("y"),
              {0.40625f, 1.40625f, 6.9375f});
  // 3-D: X [1, 1, 2, 2, 2] holds 4z + 2y + x (trilinear sampling of it is exact); with
  // align_corners 1 a coordinate g maps to (g + 1) / 2. Grid vectors list (x, y, z):
  //   (0, 0, 0) -> (0.5, 0.5, 0.5): 3.5;  (1, -1, 1) -> x 1, y 0, z 1: 5;
  //   (-1, 1, -1) -> x 0, y 1, z 0: 2.
  const runtime linear = grid_model(20, {w::attr_int("align_corners", 1)});
  const auto out = linear.run({{"x", f32({1, 1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})},
                               {"grid", f32({1, 1, 1, 3, 3}, {0, 0, 0, 1, -1, 1, -1, 1, -1})}});
  CHECK(out.at("y").shape() == shape_t{1, 1, 1, 1, 3});
  check_close(out.at("y"), {3.5f, 5.0f, 2.0f});
}

TEST_CASE("GridSample: bad modes, attributes and shapes fail naming them") {
  const tensor x = f32({1, 1, 1, 4}, {1, 2, 4, 8});
  const tensor grid = f32({1, 1, 1, 2}, {0, 0});
  auto err = [&](std::int64_t opset, const std::vector<w::msg>& attrs, const tensor& xv,
                 const tensor& gv) {
    return run_error(grid_model(opset, attrs), {{"x", xv}, {"grid", gv}});
  };
  std::string e = err(16, {w::attr_string("mode", "linear")}, x, grid);
  CAPTURE(e);
  CHECK(has(e, "'op'"));
  CHECK(has(e, "GridSample"));
  CHECK(has(e, "mode 'linear' is not one of 'bilinear', 'nearest', 'bicubic' (opset 16)"));
  e = err(20, {w::attr_string("mode", "bicubic")}, x, grid);
  CHECK(has(e, "mode 'bicubic' is not one of 'linear', 'nearest', 'cubic' (opset 20)"));
  e = err(16, {w::attr_string("padding_mode", "mirror")}, x, grid);
  CHECK(has(e, "padding_mode 'mirror'"));
  e = err(16, {w::attr_int("align_corners", 2)}, x, grid);
  CHECK(has(e, "align_corners 2 is neither 0 nor 1"));
  e = err(16, {}, x, f32({1, 1, 1, 3}, {0, 0, 0}));
  CHECK(has(e, "grid [1,1,1,3] does not match X [1,1,1,4]"));
  e = err(16, {}, x, f32({2, 1, 1, 2}, {0, 0, 0, 0}));
  CHECK(has(e, "grid [2,1,1,2] does not match X [1,1,1,4]"));
  e = err(16, {}, f32({1, 1, 4}, {1, 2, 4, 8}), f32({1, 1, 1}, {0}));
  CHECK(has(e, "X must be 4-D [N, C, H, W], got [1,1,4]"));
  e = err(20, {}, f32({1, 4}, {1, 2, 4, 8}), f32({1, 1}, {0}));
  CHECK(has(e, "X must be [N, C, D1, ..., Dr] with r >= 1, got [1,4]"));
}
