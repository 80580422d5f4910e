// SPDX-License-Identifier: MIT
// Every activation calibration method through quantize_model: the range (and, for the methods
// that search a power-of-two scale, the scale) of each checked tensor equals what the header
// calibrator (quark::tensor_calibrator, the library's single entry point) computes on the same
// activations gathered independently by running the float model with a plain observer; and
// every quantized model loads and runs in ONNX Runtime 1.30. The conv activations are large
// enough (73728 values) to take the quantizer's multi-threaded observation path, the input
// small enough to take the sequential one; the samples have different scales so histograms grow.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <quark/calib/minifloat_mse_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/tensor_calibrator.hpp>
#include <quark/calib/to_qparams.hpp>
#include <quark/core/error.hpp>
#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

/// Conv(3->8, 3x3, pad 1) -> Add(const) -> Conv(8->8, 1x1) -> Sigmoid on 1x3x96x96.
::onnx::ModelProto model() {
  model_builder b(13);
  b.input("x", onnx_type::float32, {1, 3, 96, 96});
  b.initializer("w1", onnx_type::float32, {8, 3, 3, 3}, random_floats(216, 1, -0.5f, 0.5f));
  b.initializer("b1", onnx_type::float32, {8}, random_floats(8, 2, -0.1f, 0.1f));
  b.initializer("c", onnx_type::float32, {1, 8, 1, 1}, random_floats(8, 3, -0.3f, 0.3f));
  b.initializer("w2", onnx_type::float32, {8, 8, 1, 1}, random_floats(64, 4, -0.8f, 0.8f));
  b.initializer("b2", onnx_type::float32, {8}, random_floats(8, 5, -0.1f, 0.1f));
  b.node("Conv", {"x", "w1", "b1"}, {"c1"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.node("Add", {"c1", "c"}, {"a"});
  b.node("Conv", {"a", "w2", "b2"}, {"c2"});
  b.node("Sigmoid", {"c2"}, {"y"});
  b.output("y", onnx_type::float32, {1, 8, 96, 96});
  return b.build();
}

std::vector<qo::calib_sample> samples() {
  std::vector<qo::calib_sample> out;
  const float scales[] = {1.0f, 3.0f, 0.5f, 2.0f};
  for (std::uint32_t i = 0; i < 4; ++i) {
    // A few large values per sample so that histogram tails matter.
    auto v = random_floats(3 * 96 * 96, 10 + i, -scales[i], scales[i]);
    v[i * 7] = 4.0f * scales[i];
    out.push_back({{"x", qo::tensor::from_floats({1, 3, 96, 96}, std::move(v))}});
  }
  return out;
}

const std::vector<std::string>& checked() {
  static const std::vector<std::string> n = {"x", "c1", "a", "c2"};
  return n;
}

/// The activations of `checked()` per sample, from our runtime with a plain copying observer.
std::map<std::string, std::vector<std::vector<float>>> gather(const fs::path& model_path) {
  const qo::runtime rt(model_path);
  std::map<std::string, std::vector<std::vector<float>>> acts;
  for (const auto& s : samples()) {
    (void)rt.run(s, [&](std::string_view name, const qo::tensor& t) {
      for (const auto& n : checked()) {
        if (n == name) {
          const auto d = t.data<float>();
          acts[n].emplace_back(d.begin(), d.end());
        }
      }
    });
  }
  return acts;
}

struct method_case {
  const char* label;
  const char* preset;
  qo::calib_method method;
  std::map<std::string, qo::option_value> extra;
  quark::calib_options oracle;  ///< the header calibrator's options (grid filled in below)
  double min_cosine = 0.98;     ///< quantized vs float output in ORT
};

quark::calibrated_range oracle_range(quark::calib_options o,
                                     const std::vector<std::vector<float>>& batches) {
  quark::tensor_calibrator cal(std::move(o));
  for (const auto& b : batches)
    cal.observe(b);
  if (cal.needs_second_pass()) {
    cal.begin_second_pass();
    for (const auto& b : batches)
      cal.observe_second(b);
  }
  return cal.result();
}

std::vector<float> run_in_ort(const fs::path& p, const qo::calib_sample& s) {
  const auto& t = s.begin()->second;
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  std::ifstream f(p, std::ios::binary);
  ::onnx::ModelProto m;
  REQUIRE(m.ParseFromIstream(&f));
  auto out = run_ort(m, {npy_array::from(t.data<float>(), shape)});
  return out.begin()->second.values<float>();
}

/// The largest |quantized - float| over output 0 of the two models in ONNX Runtime.
double worst_ort_error(const fs::path& float_model, const fs::path& quantized,
                       const qo::calib_sample& s) {
  const auto q = run_in_ort(quantized, s);
  const auto ref = run_in_ort(float_model, s);
  REQUIRE(q.size() == ref.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < q.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(q[i]) - static_cast<double>(ref[i])));
  return worst;
}

void check_case(const method_case& c, const fs::path& fin,
                const std::map<std::string, std::vector<std::vector<float>>>& acts) {
  CAPTURE(std::string(c.label));
  const fs::path fout = work_dir() / (std::string(c.label) + ".onnx");
  qo::qconfig cfg = qo::get_default_config(c.preset);
  cfg.global_config.input_tensors->calibration_method = c.method;
  cfg.global_config.output_tensors->calibration_method = c.method;
  // The oracle observes the graph as built: no folding of the constant Add into the Conv bias.
  cfg.extra_options.set("OptimizeModel", qo::option_value(false));
  for (const auto& [k, v] : c.extra)
    cfg.extra_options.set(k, v);
  const auto sm = samples();
  qo::memory_reader reader(sm);
  const qo::quantize_report r = qo::quantize_model(fin, fout, cfg, reader);
  CHECK(r.calibration_samples == sm.size());
  quark::calib_options o = c.oracle;
  const bool uint8 = cfg.global_config.input_tensors->dtype == quark::dtype_id::uint8;
  o.grid = uint8 ? quark::grid_of<std::uint8_t>(quark::range_table::full)
                 : quark::grid_of<std::int8_t>(quark::range_table::full);
  int found = 0;
  for (const auto& t : r.tensors) {
    if (t.role != "activation" || !acts.contains(t.name))
      continue;
    ++found;
    CAPTURE(t.name);
    const quark::calibrated_range want = oracle_range(o, acts.at(t.name));
    CHECK(t.rmin == want.min);
    CHECK(t.rmax == want.max);
    if (want.pof2_position) {
      REQUIRE(t.scale.size() == 1u);
      CHECK(t.scale[0] == std::ldexp(1.0f, -*want.pof2_position));
    }
  }
  CHECK(found == static_cast<int>(checked().size()));
  if (!ort_available()) {
    MESSAGE("ONNX Runtime unavailable: " << ort_unavailable_reason());
    return;
  }
  const auto s = sm[1];
  const auto q = run_in_ort(fout, s);
  const auto ref = run_in_ort(fin, s);
  REQUIRE(q.size() == ref.size());
  const double cos = quark::metrics::cosine(q, ref);
  MESSAGE(c.label << ": cosine of ORT quantized vs ORT float (sigmoid output) " << cos);
  CHECK(cos >= c.min_cosine);
}

}  // namespace

TEST_CASE("every calibration method equals the header calibrator on the same activations") {
  const fs::path fin = work_dir() / "float.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  const auto acts = gather(fin);
  REQUIRE(acts.size() == checked().size());
  using qo::calib_method;
  using quark::range_symmetry;
  namespace q = quark;
  const qo::option_value sym_true(true), sym_false(false);
  const std::vector<method_case> cases = {
      {"minmax",
       "A8W8",
       calib_method::min_max,
       {{"CalibTensorRangeSymmetric", sym_false}},
       {.method = q::calib_method::minmax, .symmetry = range_symmetry::asymmetric}},
      {"minmax_sym",
       "A8W8",
       calib_method::min_max,
       {{"CalibTensorRangeSymmetric", sym_true}},
       {.method = q::calib_method::minmax, .symmetry = range_symmetry::symmetric}},
      {"minmax_moving_average",
       "A8W8",
       calib_method::min_max,
       {{"CalibTensorRangeSymmetric", sym_false},
        {"CalibMovingAverage", sym_true},
        {"CalibMovingAverageConstant", qo::option_value(0.25)}},
       {.method = q::calib_method::minmax,
        .symmetry = range_symmetry::asymmetric,
        .average = q::moving_average::on,
        .moving_average_constant = 0.25f}},
      {"percentile",
       "A8W8",
       calib_method::percentile,
       {{"Percentile", qo::option_value(99.9)}, {"CalibTensorRangeSymmetric", sym_true}},
       {.method = q::calib_method::percentile,
        .symmetry = range_symmetry::symmetric,
        .percentile = 99.9}},
      {"percentile_signed",
       "A8W8",
       calib_method::percentile,
       {{"Percentile", qo::option_value(99.9)},
        {"CalibTensorRangeSymmetric", sym_false},
        {"NumBins", qo::option_value(std::int64_t{512})}},
       {.method = q::calib_method::percentile,
        .symmetry = range_symmetry::asymmetric,
        .num_bins = 512,
        .percentile = 99.9}},
      {"entropy",
       "A8W8",
       calib_method::entropy,
       {{"NumBins", qo::option_value(std::int64_t{512})},
        {"NumQuantizedBins", qo::option_value(std::int64_t{64})},
        {"CalibTensorRangeSymmetric", sym_false}},
       {.method = q::calib_method::entropy,
        .symmetry = range_symmetry::asymmetric,
        .num_bins = 512,
        .num_quantized_bins = 64}},
      {"entropy_defaults",
       "A8W8",
       calib_method::entropy,
       {{"CalibTensorRangeSymmetric", sym_false}},
       {.method = q::calib_method::entropy, .symmetry = range_symmetry::asymmetric}},
      {"layerwise_percentile_mae",
       "A8W8",
       calib_method::layerwise_percentile,
       {{"CalibTensorRangeSymmetric", sym_true},
        {"PercentileCandidates", qo::option_value::array({99.0, 99.9, 99.99})}},
       {.method = q::calib_method::layerwise_percentile,
        .symmetry = range_symmetry::symmetric,
        .percentile_candidates = {99.0, 99.9, 99.99}}},
      {"layerwise_percentile_mse",
       "A8W8",
       calib_method::layerwise_percentile,
       {{"CalibTensorRangeSymmetric", sym_true},
        {"LWPMetric", qo::option_value("mse")},
        {"PercentileCandidates", qo::option_value::array({99.0, 99.9, 99.99})}},
       {.method = q::calib_method::layerwise_percentile,
        .symmetry = range_symmetry::symmetric,
        .percentile_candidates = {99.0, 99.9, 99.99},
        .metric = q::lwp_metric::mse}},
      {"pof2_non_overflow",
       "XINT8",
       calib_method::min_max,
       {},
       {.method = q::calib_method::pof2_non_overflow, .symmetry = range_symmetry::symmetric}},
      {"pof2_minmse_histogram",
       "XINT8",
       calib_method::min_mse,
       {},
       {.method = q::calib_method::pof2_minmse, .symmetry = range_symmetry::symmetric}},
      {"pof2_minmse_raw",
       "XINT8",
       calib_method::min_mse,
       {{"NumBins", qo::option_value(std::int64_t{0})}},
       {.method = q::calib_method::pof2_minmse,
        .symmetry = range_symmetry::symmetric,
        .num_bins = 0}},
      // MinMSE with a Float32 scale (A8W8's Int8Spec): a float scale searched on the histogram
      // (quark-spec "Decisions" 1), not Quark's power-of-two mapping.
      {"float_minmse",
       "A8W8",
       calib_method::min_mse,
       {},
       {.method = q::calib_method::float_minmse, .symmetry = range_symmetry::symmetric}},
      {"float_minmse_asymmetric",
       "U8S8",
       calib_method::min_mse,
       {{"CalibTensorRangeSymmetric", sym_false}, {"NumBins", qo::option_value(std::int64_t{512})}},
       {.method = q::calib_method::float_minmse,
        .symmetry = range_symmetry::asymmetric,
        .num_bins = 512}},
      {"pof2_minmse_most_common",
       "XINT8",
       calib_method::min_mse,
       {{"MinMSEModePof2Scale", qo::option_value("MostCommon")}},
       {.method = q::calib_method::pof2_minmse,
        .symmetry = range_symmetry::symmetric,
        .minmse_mode = q::pof2_minmse_mode::most_common},
       // Each sample (scales 1, 3, 0.5, 2) picks its own position; the tie goes to the smallest
       // scale, which clips the evaluated sample (scale 3): lower accuracy is the method's.
       0.95},
  };
  for (const auto& c : cases)
    check_case(c, fin, acts);
}

TEST_CASE("Entropy with the default 128/128 bins reports its single candidate") {
  const fs::path fin = work_dir() / "float_e.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.global_config.input_tensors->calibration_method = qo::calib_method::entropy;
  cfg.global_config.output_tensors->calibration_method = qo::calib_method::entropy;
  cfg.extra_options.set("OptimizeModel", qo::option_value(false));  // keep 'c1'
  // One sample: the histogram keeps its 128 bins (growth over batches would add candidates).
  qo::memory_reader reader({samples()[1]});
  const auto r = qo::quantize_model(fin, work_dir() / "e.onnx", cfg, reader);
  bool warned = false;
  for (const auto& n : r.notes)
    warned = warned || n.find("calibration of 'c1'") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("SaveAndRestore: the second run restores the ranges without calibrating") {
  const fs::path dir = work_dir();
  const fs::path fin = dir / "float_sr.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  const fs::path file = dir / "ranges.json";
  fs::remove(file);
  qo::qconfig cfg = qo::get_default_config("XINT8");
  cfg.extra_options.set("SaveAndRestore", qo::option_value(file.string()));
  qo::memory_reader reader(samples());
  const auto first = qo::quantize_model(fin, dir / "sr1.onnx", cfg, reader);
  REQUIRE(fs::exists(file));
  // A reader with one unrelated sample: restoring must not look at it.
  std::vector<qo::calib_sample> other = {samples()[3]};
  qo::memory_reader reader2(other);
  const auto second = qo::quantize_model(fin, dir / "sr2.onnx", cfg, reader2);
  CHECK(second.calibration_samples == first.calibration_samples);
  REQUIRE(first.tensors.size() == second.tensors.size());
  for (std::size_t i = 0; i < first.tensors.size(); ++i) {
    CAPTURE(first.tensors[i].name);
    CHECK(first.tensors[i].rmin == second.tensors[i].rmin);
    CHECK(first.tensors[i].rmax == second.tensors[i].rmax);
    CHECK(first.tensors[i].scale == second.tensors[i].scale);
  }
  // A corrupt file is a clear error naming it.
  {
    std::ofstream f(file);
    f << "{\"format\": \"something else\"}";
  }
  qo::memory_reader reader3(samples());
  try {
    (void)qo::quantize_model(fin, dir / "sr3.onnx", cfg, reader3);
    FAIL("expected an error");
  } catch (const quark::error& e) {
    CHECK(e.id() == "quark.calib.restore");
  }
}

TEST_CASE("Float32 weights with MinMSE: float_minmse_calibrator in every MinMSEModeFloatScale") {
  const fs::path dir = work_dir();
  const fs::path fin = dir / "float_w.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  const std::vector<float> w1 = random_floats(216, 1, -0.5f, 0.5f);  // as model() builds it
  const std::pair<const char*, quark::minmse_float_mode> modes[] = {
      {"Percentile", quark::minmse_float_mode::percentile},
      {"HistCenter", quark::minmse_float_mode::hist_center},
      {"All", quark::minmse_float_mode::all}};
  for (const auto& m : modes) {
    // Not a structured binding: Clang 14 cannot capture one in CAPTURE's lambda.
    const char* name = m.first;
    const quark::minmse_float_mode mode = m.second;
    CAPTURE(std::string(name));
    qo::qconfig cfg = qo::get_default_config("A8W8");
    REQUIRE(cfg.global_config.weight->dtype == quark::dtype_id::int8);
    cfg.global_config.weight->calibration_method = qo::calib_method::min_mse;
    cfg.global_config.weight->scale_type = qo::scale_kind::float32;
    cfg.global_config.weight->quant_granularity = qo::granularity::tensor;
    cfg.extra_options.set("MinMSEModeFloatScale", qo::option_value(name));
    qo::memory_reader reader(samples());
    const fs::path fout = dir / (std::string("w_") + name + ".onnx");
    const auto r = qo::quantize_model(fin, fout, cfg, reader);
    // Signed weights use the symmetric table (INT8 -127..127, quark-spec §1.2).
    const quark::calibrated_range want =
        quark::float_minmse_calibrator{.mode = mode, .grid = {-127, 127}}(w1);
    bool found = false;
    for (const auto& t : r.tensors) {
      if (t.name != "w1")
        continue;
      found = true;
      REQUIRE(t.scale.size() == 1u);
      CHECK(t.scale[0] == *want.scale);
      CHECK(t.zero_point[0] == *want.zero_point);
    }
    CHECK(found);
    if (ort_available()) {
      const auto q = run_in_ort(fout, samples()[0]);
      const auto ref = run_in_ort(fin, samples()[0]);
      CHECK(quark::metrics::cosine(q, ref) >= 0.98);
    }
  }
}

TEST_CASE("FP8 specs with MinMSE: the float8 search on the activation histograms and the weights") {
  // quark::minifloat_minmse_calibrator (checked against the reference encoder in
  // tests/calib/minifloat_mse_calibrator_test.cpp) is the oracle here: the quantizer must hand it
  // the same histograms (signed [min, max], 2048 bins, one batch per sample) and weights, and
  // write the scales it chose.
  const fs::path dir = work_dir();
  const fs::path fin = dir / "float_fp8_mse.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  const auto acts = gather(fin);
  qo::qconfig cfg;
  qo::tensor_spec spec = qo::make_spec(qo::spec_name::fp8_e4m3fn);
  spec.calibration_method = qo::calib_method::min_mse;
  cfg.global_config.input_tensors = spec;
  cfg.global_config.output_tensors = spec;
  cfg.global_config.weight = spec;
  cfg.extra_options.set("OptimizeModel", qo::option_value(false));
  qo::memory_reader reader(samples());
  const fs::path fout = dir / "fp8_mse.onnx";
  const qo::quantize_report r = qo::quantize_model(fin, fout, cfg, reader);
  using fp8 = quark::float8_e4m3fn;
  int acts_found = 0;
  int weights_found = 0;
  int clipped = 0;
  for (const auto& t : r.tensors) {
    CAPTURE(t.name);
    quark::calibrated_range want;
    if (t.role == "activation" && acts.contains(t.name)) {
      quark::histogram_observer h{{.mode = quark::histogram_mode::signed_extend}};
      for (const auto& b : acts.at(t.name))
        h.observe(b);
      want = quark::minifloat_minmse_calibrator<fp8>{}(h.stats());
      CHECK(t.rmin == want.min);
      CHECK(t.rmax == want.max);
      float amax = 0.0f;
      for (const auto& b : acts.at(t.name)) {
        for (const float v : b)
          amax = std::fmax(amax, std::fabs(v));
      }
      clipped += std::fmax(std::fabs(want.min), std::fabs(want.max)) < amax ? 1 : 0;
      ++acts_found;
    } else if (t.role == "weight" && (t.name == "w1" || t.name == "w2")) {
      const std::vector<float> w =
          t.name == "w1" ? random_floats(216, 1, -0.5f, 0.5f) : random_floats(64, 4, -0.8f, 0.8f);
      want = quark::minifloat_minmse_calibrator<fp8>{}(w);
      ++weights_found;
    } else {
      continue;
    }
    REQUIRE(want.scale.has_value());
    REQUIRE(t.scale.size() == 1u);
    CHECK(t.scale[0] == *want.scale);
  }
  CHECK(acts_found == static_cast<int>(checked().size()));
  CHECK(weights_found == 2);
  MESSAGE("FP8 MinMSE: " << clipped << " activations with a range inside their data's");
  if (!ort_available()) {
    MESSAGE("ONNX Runtime unavailable: " << ort_unavailable_reason());
    return;
  }
  for (const auto& s : samples()) {
    const auto q = run_in_ort(fout, s);
    const auto ref = run_in_ort(fin, s);
    CHECK(quark::metrics::cosine(q, ref) >= 0.99);
    // Our runtime runs the float8 Q/DQ as ORT does.
    const auto ours = qo::run_model(fout, s).begin()->second;
    const auto o = ours.data<float>();
    REQUIRE(o.size() == q.size());
    for (std::size_t i = 0; i < q.size(); ++i)
      CHECK(std::fabs(o[i] - q[i]) <= 1e-5f);
  }
}

TEST_CASE("XINT8: a constant input of Mul / Add is searched like a weight (five candidates)") {
  // quark-spec §7.3 / §4.8: a constant input of a generic op is quantized as an initializer by
  // quantize_data with the activation's method; for PowerOfTwoMethod.MinMSE that is the
  // five-candidate search, not the nearest power of two of the range (§2.2), which would clip
  // a lone value by up to sqrt(2). PP-LCNetV3's learnable-affine scalars are such constants.
  // Hand-derived: c = 1.39148438: max / 127 = 0.010957, -log2 = 6.51 -> rint 7 -> 2^-7, whose
  // grid ends at 127 / 128 = 0.992 (a 29% clip); the candidates 2^-6 .. 2^-10 give errors
  // |1.39148438 - 89 / 64| = 8.6e-4 for 2^-6 and >= 0.399 for the others -> 2^-6.
  // d = -0.54658866: 0.5466 / 127 -> -log2 = 7.86 -> 2^-8 clips to 0.496; 2^-7 gives
  // 70 / 128 = 0.546875 (error 2.9e-4) -> 2^-7.
  const fs::path dir = work_dir();
  const fs::path fin = dir / "affine_float.onnx";
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 64});
    b.initializer("c", onnx_type::float32, {1}, std::vector<float>{1.39148438f});
    b.initializer("d", onnx_type::float32, {1}, std::vector<float>{-0.54658866f});
    b.node("Mul", {"x", "c"}, {"m"});
    b.node("Add", {"m", "d"}, {"y"});
    b.output("y", onnx_type::float32, {1, 64});
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(b.build().SerializeToOstream(&f));
  }
  std::vector<qo::calib_sample> cal;
  for (std::uint32_t i = 0; i < 4; ++i)
    cal.push_back({{"x", qo::tensor::from_floats({1, 64}, random_floats(64, 40 + i, -1.f, 1.f))}});
  qo::qconfig cfg = qo::get_default_config("XINT8");
  cfg.extra_options.set("UseRandomData", false);
  qo::memory_reader reader(cal);
  const fs::path fout = dir / "affine_xint8.onnx";
  const auto r = qo::quantize_model(fin, fout, cfg, reader);
  std::map<std::string, float> scale;
  for (const auto& t : r.tensors) {
    if (t.scale.size() == 1)
      scale[t.name] = t.scale[0];
  }
  REQUIRE(scale.contains("c"));
  REQUIRE(scale.contains("d"));
  CHECK(scale["c"] == 0.015625f);
  CHECK(scale["d"] == 0.0078125f);
  if (ort_available()) {
    // The quantized model in ORT stays within the hand-derived error budget: x's step 2^-7
    // times 1.39 / 2, the Mul and Add outputs' steps 2^-6 / 2 each, the constants' 1.2e-3: 0.022.
    // With the clipped constants the error reaches 0.4 * |x|.
    const double worst = worst_ort_error(fin, fout, cal[0]);
    CHECK(worst < 0.03);
  }
}

TEST_CASE("Asymmetric power-of-two MinMSE: constants and weights search with their zero point") {
  // quark-spec §4.8: quantize_data's five-candidate search holds the zero point of the min/max
  // range fixed, so an asymmetric spec keeps it. Hand-derived:
  //  * weight w = {-0.2, 0.05, 0.7, 1.3, 2.5}, INT8 asymmetric: s = 2.7 / 255 -> 2^-7 (rint
  //    of 6.56), zp = RNE(-128 + 0.2 / s) = -109; values clip to -127..127 (§1.3). 2^-7 clips
  //    2.5 to (127 + 109) / 128 = 1.84; 2^-6 puts every value on q = -122 .. 51 with error
  //    <= 2^-7 -> 2^-6, zp -109;
  //  * constant c = 2.5 (input of Mul), UINT8 asymmetric: range [0, 2.5], s = 2.5 / 255 -> 2^-7,
  //    zp 0, grid end 255 / 128 = 1.99 (a 20% clip); 2^-6 holds 2.5 exactly (q 160) -> 2^-6;
  //  * constant d = -0.54658866 (input of Add): range [-0.5466, 0], s = 0.5466 / 255 -> 2^-9
  //    (rint of 8.87), zp = RNE(0.5466 / s) = 255, grid end -255 / 512 = -0.498; 2^-8 gives
  //    q = 255 - 140 (error 2.7e-4) -> 2^-8, zp 255.
  const fs::path dir = work_dir();
  const fs::path fin = dir / "asym_float.onnx";
  {
    model_builder b(13);
    b.input("x", onnx_type::float32, {1, 5, 4, 4});
    b.initializer("w", onnx_type::float32, {1, 5, 1, 1},
                  std::vector<float>{-0.2f, 0.05f, 0.7f, 1.3f, 2.5f});
    b.initializer("c", onnx_type::float32, {1}, std::vector<float>{2.5f});
    b.initializer("d", onnx_type::float32, {1}, std::vector<float>{-0.54658866f});
    b.node("Conv", {"x", "w"}, {"v"});
    b.node("Mul", {"v", "c"}, {"m"});
    b.node("Add", {"m", "d"}, {"y"});
    b.output("y", onnx_type::float32, {1, 1, 4, 4});
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(b.build().SerializeToOstream(&f));
  }
  std::vector<qo::calib_sample> cal;
  for (std::uint32_t i = 0; i < 4; ++i) {
    cal.push_back(
        {{"x", qo::tensor::from_floats({1, 5, 4, 4}, random_floats(80, 60 + i, -1.f, 1.f))}});
  }
  qo::qconfig cfg;
  qo::tensor_spec act = qo::uint8_spec();
  act.symmetric = false;
  act.scale_type = qo::scale_kind::power_of_2;
  act.calibration_method = qo::calib_method::min_mse;
  qo::tensor_spec wt = qo::int8_spec();
  wt.symmetric = false;
  wt.scale_type = qo::scale_kind::power_of_2;
  wt.calibration_method = qo::calib_method::min_mse;
  wt.quant_granularity = qo::granularity::tensor;
  cfg.global_config.input_tensors = act;
  cfg.global_config.output_tensors = act;
  cfg.global_config.weight = wt;
  cfg.extra_options.set("ForceQuantizeNoInputCheck", true);
  cfg.extra_options.set("OptimizeModel", false);  // keep Mul / Add out of the Conv
  qo::memory_reader reader(cal);
  const fs::path fout = dir / "asym_pof2.onnx";
  const auto r = qo::quantize_model(fin, fout, cfg, reader);
  std::map<std::string, std::pair<float, std::int64_t>> got;
  for (const auto& t : r.tensors) {
    if (t.scale.size() == 1)
      got[t.name] = {t.scale[0], t.zero_point[0]};
  }
  REQUIRE(got.contains("w"));
  REQUIRE(got.contains("c"));
  REQUIRE(got.contains("d"));
  CHECK(got["w"] == std::pair<float, std::int64_t>{0.015625f, -109});
  CHECK(got["c"] == std::pair<float, std::int64_t>{0.015625f, 0});
  CHECK(got["d"] == std::pair<float, std::int64_t>{0.00390625f, 255});
  if (ort_available()) {
    // ORT on the quantized model within a hand-derived budget. The activations calibrate to
    // symmetric ranges on the UINT8 grid (zp 128): x 2^-7 (|x| <= 1), v 2^-5, m and y 2^-3.
    // v = w . x gets x's rounding (2^-8 times sum |w| = 4.75: 0.019), w's (2^-7 times
    // sum |x| <= 5: 0.039) and its own (2^-6: 0.016); times c = 2.5: 0.18; m's and y's rounding
    // add 2^-4 each, d's 2.7e-4: 0.31 in all. With the nearest powers of two (c clipped to
    // 1.99, w's 2.5 to 1.84) the error reaches 1.3.
    const double worst = worst_ort_error(fin, fout, cal[0]);
    CHECK(worst < 0.32);
    MESSAGE("worst |ORT quantized - float| = " << worst);
  }
}

TEST_CASE("MinMSE with a Float32 scale and NumBins 0: an error naming the tensor, no file") {
  const fs::path fin = work_dir() / "float_nb0.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  const fs::path fout = work_dir() / "float_nb0_q.onnx";
  fs::remove(fout);
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.global_config.input_tensors->calibration_method = qo::calib_method::min_mse;
  cfg.extra_options.set("NumBins", qo::option_value(std::int64_t{0}));
  const auto sm = samples();
  qo::memory_reader reader(sm);
  std::string msg;
  try {
    (void)qo::quantize_model(fin, fout, cfg, reader);
  } catch (const quark::error& e) {
    msg = e.what();
  }
  CHECK(msg.find("quark.calib.bad_option") != std::string::npos);
  CHECK(msg.find("MinMSE with a Float32 scale searches a histogram") != std::string::npos);
  CHECK(msg.find("tensor '") != std::string::npos);
  CHECK(!fs::exists(fout));
}

TEST_CASE("MinMSE on a BFloat16 / Float16 spec: not implemented, the message says why, no file") {
  const fs::path fin = work_dir() / "float_bf16_mse.onnx";
  {
    std::ofstream f(fin, std::ios::binary);
    REQUIRE(model().SerializeToOstream(&f));
  }
  for (const auto name : {qo::spec_name::bfloat16, qo::spec_name::float16}) {
    CAPTURE(std::string(qo::spec_class_name(name)));
    const fs::path fout = work_dir() / "bf16_mse_q.onnx";
    fs::remove(fout);
    qo::qconfig cfg;
    qo::tensor_spec spec = qo::make_spec(name);
    spec.calibration_method = qo::calib_method::min_mse;
    cfg.global_config.input_tensors = spec;
    qo::memory_reader reader(samples());
    std::string msg;
    try {
      (void)qo::quantize_model(fin, fout, cfg, reader);
    } catch (const quark::error& e) {
      msg = e.what();
    }
    CHECK(msg.find("quark.config.not_implemented") != std::string::npos);
    CHECK(msg.find("calibration_method MinMSE") != std::string::npos);
    CHECK(msg.find("has no scale to search") != std::string::npos);
    CHECK(!fs::exists(fout));
  }
}
