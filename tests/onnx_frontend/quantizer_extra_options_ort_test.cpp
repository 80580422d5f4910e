// SPDX-License-Identifier: MIT
// Extra options of seed 000 that act around the block formats, the calibration histograms and
// crypto mode: RemoveFusedQDQ, SaveTensorHistFig, CryptoMode / EncryptionAlgorithm.
//
// Oracles: SaveTensorHistFig's counts are compared with a count of the calibration data into the
// written bin edges (by comparison, not by the observer's arithmetic). RemoveFusedQDQ compares the
// quantized model with a hand-built graph whose inputs, weights and outputs are fake-quantized by
// include/quark/block/quark_ops.hpp (proven in tests/block), run in our runtime (bit-exact: the
// same float kernels) and in ONNX Runtime 1.30 for the float part (ORT has no com.amd.quark
// kernels).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <quark/onnx/calib_data.hpp>
#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>
#include <quark/onnx/runtime.hpp>

#include "support/model_files.hpp"
#include "support/ort.hpp"
#include "support/quark_ops_oracle.hpp"

namespace qo = quark::onnx;
using namespace quark::test;

namespace {

std::vector<float> values(const qo::tensor& t) {
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}

/// BFPQuantizeDequantize through the header (the oracle).
std::vector<float> bfp_fq(const std::vector<float>& x, const std::vector<std::int64_t>& shape,
                          std::int64_t axis) {
  quark::bfp_op_attributes a;  // BFP16Spec: the op defaults (to_bfp, 16 bits, block 8)
  a.axis = axis;
  std::vector<float> y(x.size());
  quark::test::bfp_oracle(a, std::span<const float>(x), shape, std::span<float>(y));
  return y;
}

std::vector<float> run_ours(const qo::model& m, const std::vector<float>& x,
                            const std::string& out) {
  const qo::runtime rt(m);
  auto res = rt.run({{"x", qo::tensor::from_floats({1, 8, 5, 5}, x)}});
  REQUIRE(res.contains(out));
  return values(res.at(out));
}

/// x[1,8,5,5] -> Conv(w[8,8,3,3], b, pads 1) -> c -> Relu -> r -> Sigmoid -> y. With `fused`,
/// the hand-built quantized form: a BFPQuantizeDequantize (BFP16's op defaults) on x (axis 1),
/// w (axis 1), b (axis 0), r and y (axis 1), and on c unless `skip_c`.
::onnx::ModelProto conv_relu(const std::vector<float>& w, const std::vector<float>& b,
                             bool fused = false, bool skip_c = false) {
  model_builder mb(13, 8);
  if (fused)
    mb.opset("com.amd.quark", 1);
  mb.input("x", onnx_type::float32, {1, 8, 5, 5});
  mb.initializer("w", onnx_type::float32, {8, 8, 3, 3}, w);
  mb.initializer("b", onnx_type::float32, {8}, b);
  auto fq = [&](const std::string& t, std::int64_t axis, bool on = true) {
    if (!fused || !on)
      return t;
    mb.node("BFPQuantizeDequantize", {t}, {t + "_fq"}, {attr_int("axis", axis)}, "com.amd.quark");
    return t + "_fq";
  };
  const std::string xq = fq("x", 1), wq = fq("w", 1), bq = fq("b", 0);
  mb.node("Conv", {xq, wq, bq}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.node("Relu", {fq("c", 1, !skip_c)}, {"r"});
  mb.node("Sigmoid", {fq("r", 1)}, {fused ? "s" : "y"});
  if (fused)
    mb.node("BFPQuantizeDequantize", {"s"}, {"y"}, {attr_int("axis", 1)}, "com.amd.quark");
  mb.output("y", onnx_type::float32, {1, 8, 5, 5});
  return mb.build();
}

const std::vector<float>& conv_w() {
  static const std::vector<float> w = random_floats(8 * 8 * 9, 21, -0.4f, 0.4f);
  return w;
}
const std::vector<float>& conv_b() {
  static const std::vector<float> b = random_floats(8, 22, -0.3f, 0.3f);
  return b;
}

qo::model quantize_block(const qo::qconfig& cfg) {
  std::vector<qo::calib_sample> s;
  for (std::uint32_t i = 0; i < 2; ++i)
    s.push_back({{"x", qo::tensor::from_floats({1, 8, 5, 5}, random_floats(200, 30 + i))}});
  qo::memory_reader reader(std::move(s));
  return qo::quantize_model(to_model(conv_relu(conv_w(), conv_b())), cfg, reader);
}

/// The tensors the fused com.amd.quark nodes of `p` read.
std::vector<std::string> fused_inputs(const ::onnx::ModelProto& p) {
  std::vector<std::string> r;
  for (const auto& n : p.graph().node()) {
    if (n.domain() == "com.amd.quark")
      r.push_back(n.input(0));
  }
  std::sort(r.begin(), r.end());
  return r;
}

const ::onnx::NodeProto& node_of_type(const ::onnx::ModelProto& p, const std::string& op) {
  for (const auto& n : p.graph().node()) {
    if (n.op_type() == op)
      return n;
  }
  FAIL("no node " << op);
  return p.graph().node(0);
}

}  // namespace

TEST_CASE(
    "RemoveFusedQDQ: the fused BFP node between Conv and Relu goes with RemoveQDQConvRelu, "
    "output = hand-built graph of fused nodes") {
  qo::qconfig cfg = qo::get_default_config("BFP16");
  cfg.extra_options.set("OptimizeModel", false);
  cfg.extra_options.set("RemoveQDQConvRelu", true);
  const qo::model kept = quantize_block(cfg);
  cfg.extra_options.set("RemoveFusedQDQ", true);
  const qo::model removed = quantize_block(cfg);
  const auto pk = to_proto(kept);
  const auto pr = to_proto(removed);
  // Without RemoveFusedQDQ: a fused node on every activation and weight (x, w, b, c, r, y).
  const std::vector<std::string> all = {"b", "c", "r", "w", "x", "y_QuantizeLinear_Input"};
  CHECK(fused_inputs(pk) == all);
  // With it: the one between Conv and Relu is gone; the Relu reads the Conv's output directly.
  const std::vector<std::string> without_c = {"b", "r", "w", "x", "y_QuantizeLinear_Input"};
  CHECK(fused_inputs(pr) == without_c);
  CHECK(node_of_type(pr, "Relu").input(0) == "c");
  CHECK(pr.graph().node_size() == pk.graph().node_size() - 1);
  // RemoveFusedQDQ alone asks for nothing when no removal names the pair.
  cfg.extra_options.set("RemoveQDQConvRelu", false);
  CHECK(fused_inputs(to_proto(quantize_block(cfg))) == all);

  // Oracle: the hand-built graph with and without the node on c, in our runtime (bit-exact:
  // same kernels; tests/onnx_frontend/quantizer_block_ort_test.cpp proves the runtime's fused
  // node equal to the header).
  const std::vector<float> x = random_floats(200, 91, -3.0f, 3.0f);
  const auto got_removed = run_ours(removed, x, "y");
  const auto got_kept = run_ours(kept, x, "y");
  CHECK(got_removed == run_ours(to_model(conv_relu(conv_w(), conv_b(), true, true)), x, "y"));
  CHECK(got_kept == run_ours(to_model(conv_relu(conv_w(), conv_b(), true, false)), x, "y"));
  CHECK(got_removed != got_kept);  // c's block rounding is no longer applied
  // The fused node on c is a real rounding: the header changes the Conv output, which ORT
  // computes from the same header-fake-quantized x, w and b.
  const std::vector<std::int64_t> shape = {1, 8, 5, 5};
  const auto xq = bfp_fq(x, shape, 1);
  model_builder mb(13, 8);
  mb.input("x", onnx_type::float32, {1, 8, 5, 5});
  mb.initializer("w", onnx_type::float32, {8, 8, 3, 3}, bfp_fq(conv_w(), {8, 8, 3, 3}, 1));
  mb.initializer("b", onnx_type::float32, {8}, bfp_fq(conv_b(), {8}, 0));
  mb.node("Conv", {"x", "w", "b"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  mb.output("c", onnx_type::float32, {1, 8, 5, 5});
  auto ort = run_ort(mb.build(), {npy_array::from(xq, {1, 8, 5, 5})});
  const auto c = ort.at("c").values<float>();
  CHECK(bfp_fq(c, shape, 1) != c);
}

namespace {

namespace fs = std::filesystem;

/// Three samples of conv_model()'s x [1,3,8,8]; sample 0 holds the extremes (-1.5, 1.5) and a 0
/// of all three, so later samples never grow the histogram (then the counts of the streamed
/// histogram are exactly a count of every value into its final bins).
std::vector<std::vector<float>> hist_samples() {
  std::vector<std::vector<float>> s;
  for (std::uint32_t i = 0; i < 3; ++i)
    s.push_back(random_floats(192, 300 + i, -1.0f, 1.0f));
  s[0][5] = -1.5f;
  s[0][77] = 1.5f;
  s[0][100] = 0.0f;
  return s;
}

qo::model quantize_conv(const qo::qconfig& cfg, qo::quantize_report* report = nullptr) {
  std::vector<qo::calib_sample> samples;
  for (const auto& v : hist_samples())
    samples.push_back({{"x", qo::tensor::from_floats({1, 3, 8, 8}, v)}});
  qo::memory_reader reader(std::move(samples));
  qo::qconfig c = cfg;
  c.extra_options.set("OptimizeModel", false);
  return qo::quantize_model(to_model(conv_model()), c, reader, report);
}

qo::qconfig with_method(qo::calib_method m) {
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.global_config.input_tensors->calibration_method = m;
  if (cfg.global_config.output_tensors)
    cfg.global_config.output_tensors->calibration_method = m;
  cfg.extra_options.set("SaveTensorHistFig", true);
  return cfg;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), p.string());
  return nlohmann::json::parse(in);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The oracle: each value counted into the bin [edges[i], edges[i + 1]) that holds it (the last
/// bin closed), by comparison with the written edges, independently of the observer's binning.
std::vector<std::uint64_t> hand_count(const std::vector<double>& edges, bool absolute) {
  std::vector<std::uint64_t> counts(edges.size() - 1, 0);
  for (const auto& sample : hist_samples()) {
    for (float v : sample) {
      const double x = absolute ? std::fabs(static_cast<double>(v)) : static_cast<double>(v);
      REQUIRE(x >= edges.front());
      REQUIRE(x <= edges.back());
      auto it = std::upper_bound(edges.begin(), edges.end(), x);
      std::size_t bin = static_cast<std::size_t>(it - edges.begin()) - 1;
      bin = std::min(bin, counts.size() - 1);
      ++counts[bin];
    }
  }
  return counts;
}

}  // namespace

TEST_CASE(
    "SaveTensorHistFig: tensor_hist/ holds one JSON and one SVG per calibrated tensor, the "
    "counts equal a hand count of the calibration data") {
  struct method_case {
    qo::calib_method method;
    const char* name;
    bool absolute;  // Percentile's symmetric range (its default): a histogram of |x|
    std::size_t bins;
  };
  for (const method_case& mc : {method_case{qo::calib_method::percentile, "Percentile", true, 2048},
                                method_case{qo::calib_method::entropy, "Entropy", false, 128}}) {
    CAPTURE(mc.name);
    const fs::path dir = work_dir() / mc.name;
    fs::create_directories(dir);
    const cwd_guard cwd(dir);
    qo::quantize_report report;
    (void)quantize_conv(with_method(mc.method), &report);
    const fs::path hist = dir / "tensor_hist";
    REQUIRE(fs::is_directory(hist));
    // x: the graph input, i.e. exactly the calibration samples.
    const nlohmann::json j = read_json(hist / "x.json");
    CHECK(j.at("tensor") == "x");
    CHECK(j.at("method") == mc.name);
    CHECK(j.at("histogram_of") == (mc.absolute ? "abs(x)" : "x"));
    CHECK(j.at("samples") == 3);
    const auto edges = j.at("edges").get<std::vector<double>>();
    const auto counts = j.at("counts").get<std::vector<std::uint64_t>>();
    REQUIRE(counts.size() == mc.bins);
    REQUIRE(edges.size() == mc.bins + 1);
    CHECK(std::is_sorted(edges.begin(), edges.end()));
    CHECK(j.at("total") == 3 * 192);
    CHECK(counts == hand_count(edges, mc.absolute));
    CHECK(j.at("data_range").at("min") == -1.5);
    CHECK(j.at("data_range").at("max") == 1.5);
    // The chosen range is the one the quantizer used for x (the report's).
    const auto rep = std::find_if(report.tensors.begin(), report.tensors.end(),
                                  [](const qo::tensor_report& t) { return t.name == "x"; });
    REQUIRE(rep != report.tensors.end());
    CHECK(j.at("range").at("min").get<float>() == rep->rmin);
    CHECK(j.at("range").at("max").get<float>() == rep->rmax);
    // The plot: one bar per non-empty bin (plus the white background), titled by the tensor.
    const std::string svg = read_text(hist / "x.svg");
    CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
    CHECK(svg.find("<title>x</title>") != std::string::npos);
    std::size_t rects = 0;
    for (std::size_t at = svg.find("<rect"); at != std::string::npos;
         at = svg.find("<rect", at + 1))
      ++rects;
    CHECK(rects == 1 + static_cast<std::size_t>(std::count_if(
                           counts.begin(), counts.end(), [](std::uint64_t c) { return c > 0; })));
    // Every activation the report lists has its pair of files, every file a consistent total.
    std::size_t json_files = 0;
    for (const auto& e : fs::directory_iterator(hist)) {
      if (e.path().extension() != ".json")
        continue;
      ++json_files;
      const nlohmann::json t = read_json(e.path());
      const auto c = t.at("counts").get<std::vector<std::uint64_t>>();
      std::uint64_t sum = 0;
      for (const auto v : c)
        sum += v;
      CHECK(sum == t.at("total").get<std::uint64_t>());
      CHECK(fs::exists(fs::path(e.path()).replace_extension(".svg")));
    }
    std::size_t activations = 0;
    for (const auto& t : report.tensors)
      activations += t.role == "activation" ? 1U : 0U;
    CHECK(json_files >= activations);
    CHECK(json_files > 1);
    // No temporary is left behind.
    for (const auto& e : fs::directory_iterator(hist)) {
      const auto ext = e.path().extension();
      CHECK_MESSAGE((ext == ".json" || ext == ".svg"), e.path().string());
    }
  }
}

TEST_CASE(
    "SaveTensorHistFig: MinMax keeps no histogram (a note, no folder), errors name the path") {
  const fs::path dir = work_dir() / "minmax";
  fs::create_directories(dir);
  {
    const cwd_guard cwd(dir);
    qo::quantize_report report;
    (void)quantize_conv(with_method(qo::calib_method::min_max), &report);
    CHECK(!fs::exists(dir / "tensor_hist"));
    const bool noted = std::any_of(report.notes.begin(), report.notes.end(), [](const auto& n) {
      return n.find("SaveTensorHistFig") != std::string::npos &&
             n.find("have no histogram") != std::string::npos;
    });
    CHECK(noted);
  }
  // tensor_hist is a file: the folder cannot be made.
  const fs::path blocked = work_dir() / "blocked";
  fs::create_directories(blocked);
  std::ofstream(blocked / "tensor_hist") << "not a folder";
  const cwd_guard cwd(blocked);
  try {
    (void)quantize_conv(with_method(qo::calib_method::percentile));
    FAIL("expected an error");
  } catch (const quark::error& e) {
    const std::string what = e.what();
    CHECK(what.find("quark.calib.hist_file") != std::string::npos);
    CHECK(what.find((blocked / "tensor_hist").string()) != std::string::npos);
  }
  // SaveTensorHistFig false (the default) writes nothing.
  const fs::path off = work_dir() / "off";
  fs::create_directories(off);
  const cwd_guard cwd2(off);
  qo::qconfig cfg = with_method(qo::calib_method::percentile);
  cfg.extra_options.set("SaveTensorHistFig", false);
  (void)quantize_conv(cfg);
  CHECK(fs::is_empty(off));
}

TEST_CASE(
    "CryptoMode: the options that write side files are refused, EncryptionAlgorithm is "
    "AES-256 or null, a crypto run gives the same model") {
  auto conflict_of = [](const qo::qconfig& cfg) {
    try {
      (void)quantize_conv(cfg);
    } catch (const quark::config_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  qo::qconfig cfg = qo::get_default_config("A8W8");
  cfg.extra_options.set("CryptoMode", true);
  qo::qconfig hist = cfg;
  hist.extra_options.set("SaveTensorHistFig", true);
  const std::string h = conflict_of(hist);
  CHECK(h.find("quark.config.conflict") != std::string::npos);
  CHECK(h.find("SaveTensorHistFig") != std::string::npos);
  qo::qconfig restore = cfg;
  restore.extra_options.set("SaveAndRestore", (work_dir() / "r.json").string());
  const std::string r = conflict_of(restore);
  CHECK(r.find("quark.config.conflict") != std::string::npos);
  CHECK(r.find("SaveAndRestore") != std::string::npos);
  CHECK(!fs::exists(work_dir() / "r.json"));
  // Without CryptoMode both are accepted.
  qo::qconfig plain_restore = restore;
  plain_restore.extra_options.set("CryptoMode", false);
  CHECK(conflict_of(plain_restore).empty());
  // EncryptionAlgorithm: "AES-256" or null, as Quark; anything else names the key.
  qo::qconfig aes = cfg;
  CHECK_NOTHROW(aes.extra_options.set("EncryptionAlgorithm", "AES-256"));
  CHECK_NOTHROW(aes.extra_options.set("EncryptionAlgorithm", nullptr));
  try {
    aes.extra_options.set("EncryptionAlgorithm", "AES-128");
    FAIL("expected an error");
  } catch (const quark::config_error& e) {
    const std::string what = e.what();
    CHECK(what.find("EncryptionAlgorithm") != std::string::npos);
    CHECK(what.find("AES-128") != std::string::npos);
  }
  // Crypto mode changes no numerics: the same model bytes as without it.
  aes.extra_options.set("EncryptionAlgorithm", "AES-256");
  qo::qconfig none = qo::get_default_config("A8W8");
  CHECK(quantize_conv(aes).to_bytes() == quantize_conv(none).to_bytes());
}

namespace {

/// x[1,3,64] -> MatMul "mm1" (w1[64,32]) -> y1 -> MatMul "mm2" (w2[32,8]) -> y.
::onnx::ModelProto two_matmuls() {
  model_builder mb(13, 8);
  mb.input("x", onnx_type::float32, {1, 3, 64});
  mb.initializer("w1", onnx_type::float32, {64, 32}, random_floats(64 * 32, 51, -0.3f, 0.3f));
  mb.initializer("w2", onnx_type::float32, {32, 8}, random_floats(32 * 8, 52, -0.3f, 0.3f));
  mb.node("MatMul", {"x", "w1"}, {"y1"});
  mb.node("MatMul", {"y1", "w2"}, {"y"});
  mb.output("y", onnx_type::float32, {1, 3, 8});
  auto p = mb.build();
  p.mutable_graph()->mutable_node(0)->set_name("mm1");
  p.mutable_graph()->mutable_node(1)->set_name("mm2");
  return p;
}

const std::vector<float>& mm_x() {
  static const std::vector<float> x = random_floats(3 * 64, 53, -2.0f, 2.0f);
  return x;
}

qo::model quantize_mm(const qo::qconfig& cfg) {
  std::vector<qo::calib_sample> s;
  for (std::uint32_t i = 0; i < 3; ++i)
    s.push_back({{"x", qo::tensor::from_floats({1, 3, 64}, random_floats(192, 60 + i, -2, 2))}});
  qo::memory_reader reader(std::move(s));
  return qo::quantize_model(to_model(two_matmuls()), cfg, reader);
}

std::vector<float> run_mm(const qo::model& m) {
  const qo::runtime rt(m);
  auto res = rt.run({{"x", qo::tensor::from_floats({1, 3, 64}, mm_x())}});
  return values(res.at("y"));
}

/// `global` everywhere, `second`'s specs at `node` (mm2 unless given).
qo::qconfig mixed(const char* global, const char* second, const char* node = "mm2") {
  qo::qconfig cfg = qo::get_default_config(global);
  const qo::qconfig s = qo::get_default_config(second);
  qo::layer_rule rule;
  rule.config = s.global_config;
  rule.layers = {qo::node_selector::parse(node)};
  cfg.specific_layer_config.push_back(rule);
  for (const char* k : {"OptimizeModel", "RefineBlockAxis"})
    cfg.extra_options.set(k, k[0] == 'R');
  return cfg;
}

struct dual_models {
  qo::model plain;        ///< quantized without EnableDualQuantNodePairs
  qo::model dual;         ///< with it
  ::onnx::ModelProto pd;  ///< `dual` as a proto
};

/// two_matmuls() quantized with `cfg` without and with EnableDualQuantNodePairs.
dual_models with_and_without_dual(qo::qconfig cfg) {
  dual_models r{quantize_mm(cfg), {}, {}};
  cfg.extra_options.set("EnableDualQuantNodePairs", true);
  r.dual = quantize_mm(cfg);
  r.pd = to_proto(r.dual);
  return r;
}

/// `p` with `extra` inserted before the node named `before`, whose input `tensor` it rewires to
/// `extra`'s last output.
::onnx::ModelProto insert_before(::onnx::ModelProto p, const std::string& before,
                                 const std::string& tensor,
                                 const std::vector<::onnx::NodeProto>& extra) {
  ::onnx::GraphProto g;
  for (const auto& n : p.graph().node()) {
    if (n.name() == before) {
      for (const auto& e : extra)
        *g.add_node() = e;
      ::onnx::NodeProto c = n;
      for (int k = 0; k < c.input_size(); ++k) {
        if (c.input(k) == tensor)
          c.set_input(k, extra.back().output(0));
      }
      *g.add_node() = c;
    } else {
      *g.add_node() = n;
    }
  }
  p.mutable_graph()->mutable_node()->Swap(g.mutable_node());
  return p;
}

::onnx::NodeProto make(const std::string& op, const std::string& name, std::vector<std::string> in,
                       const std::string& out, const std::string& domain = "") {
  ::onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  n.set_domain(domain);
  for (auto& i : in)
    n.add_input(i);
  n.add_output(out);
  return n;
}

void add_int_attr(::onnx::NodeProto& n, const char* name, std::int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

}  // namespace

TEST_CASE("EnableDualQuantNodePairs: int8 tensor read by a BFP16 node gets a fused node") {
  qo::qconfig cfg = mixed("A8W8", "BFP16");
  const auto [plain, dual, pd] = with_and_without_dual(cfg);
  // y1 is int8 (mm1 claimed it first); mm2 reads it through its own BFP16 node:
  // DequantizeLinear -> BFPQuantizeDequantize (axis -1: MatMul input A) -> mm2.
  const auto* f = node_named(pd, "y1_mm2_additional_BFPQuantizeDequantize");
  REQUIRE(f != nullptr);
  CHECK(f->domain() == "com.amd.quark");
  CHECK(f->input(0) == "y1_DequantizeLinear_Output");
  CHECK(node_named(pd, "mm2")->input(0) == f->output(0));
  // Oracle: the model without the option plus that one hand-made node, bit-exact in our runtime.
  ::onnx::NodeProto bfp = make("BFPQuantizeDequantize", "hand_bfp", {"y1_DequantizeLinear_Output"},
                               "hand_bfp_out", "com.amd.quark");
  bfp.add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("bfp_method");
    a.set_type(::onnx::AttributeProto::STRING);
    a.set_s("to_bfp");
    return a;
  }());
  for (auto [k, v] : std::vector<std::pair<const char*, std::int64_t>>{
           {"axis", -1}, {"bit_width", 16}, {"block_size", 8}, {"rounding_mode", 0}})
    add_int_attr(bfp, k, v);
  const auto expect = insert_before(to_proto(plain), "mm2", "y1_DequantizeLinear_Output", {bfp});
  const auto got = run_mm(dual);
  CHECK(got == run_mm(to_model(expect)));
  CHECK(got != run_mm(plain));  // the added node rounds
}

TEST_CASE("EnableDualQuantNodePairs: BFP16 tensor read by an int8 node gets an int8 pair") {
  qo::qconfig cfg = mixed("BFP16", "A8W8");
  const auto [plain, dual, pd] = with_and_without_dual(cfg);
  // y1 is BFP16 (mm1 claimed it first); mm2 reads int8 through an additional pair after the
  // tensor's fused node.
  const auto* q = node_named(pd, "y1_mm2_additional_QuantizeLinear");
  REQUIRE(q != nullptr);
  // (the fused node writes the name a DequantizeLinear would)
  CHECK(q->input(0) == "y1_DequantizeLinear_Output");
  const auto* f = node_named(pd, "y1_BFPQuantizeDequantize");
  REQUIRE(f != nullptr);
  CHECK(f->output(0) == "y1_DequantizeLinear_Output");
  CHECK(node_named(pd, "mm2")->input(0) == "y1_mm2_additional_DequantizeLinear_Output");
  // The pair's parameters are y1's calibrated int8 parameters: those of y1's own pair when every
  // node is A8W8 (same method, type and calibration data).
  qo::qconfig all8 = qo::get_default_config("A8W8");
  all8.extra_options.set("OptimizeModel", false);
  const qo::model int8 = quantize_mm(all8);
  const float scale = int8.initializer("y1_scale").data<float>()[0];
  CHECK(dual.initializer("y1_mm2_additional_scale").data<float>()[0] == scale);
  CHECK(dual.initializer("y1_mm2_additional_zero_point").data<std::int8_t>()[0] ==
        int8.initializer("y1_zero_point").data<std::int8_t>()[0]);
  // Oracle: the model without the option plus a hand-made Q/DQ pair with those parameters.
  auto expect = to_proto(plain);
  const std::string in = node_named(expect, "mm2")->input(0);
  auto* s = expect.mutable_graph()->add_initializer();
  s->set_name("hand_scale");
  s->set_data_type(::onnx::TensorProto::FLOAT);
  s->add_float_data(scale);
  auto* z = expect.mutable_graph()->add_initializer();
  z->set_name("hand_zp");
  z->set_data_type(::onnx::TensorProto::INT8);
  z->add_int32_data(0);
  expect = insert_before(
      expect, "mm2", in,
      {make("QuantizeLinear", "hq", {in, "hand_scale", "hand_zp"}, "hq_out"),
       make("DequantizeLinear", "hdq", {"hq_out", "hand_scale", "hand_zp"}, "hdq_out")});
  CHECK(int8.initializer("y1_zero_point").data<std::int8_t>()[0] == 0);
  const auto got = run_mm(dual);
  CHECK(got == run_mm(to_model(expect)));
  CHECK(got != run_mm(plain));
}

/// A Cast of `in` to ONNX type `to` named `name`, writing `out`.
::onnx::NodeProto make_cast(const std::string& name, const std::string& in, const std::string& out,
                            std::int64_t to) {
  ::onnx::NodeProto c = make("Cast", name, {in}, out);
  add_int_attr(c, "to", to);
  return c;
}

/// ORT runs `m` on mm_x() and gives our runtime's values (bit-exact: Cast and Q/DQ are exact).
void check_ort_agrees(const qo::model& m, const std::vector<float>& ours) {
  if (!ort_available()) {
    MESSAGE("skipped ORT comparison: " << ort_unavailable_reason());
    return;
  }
  const auto theirs =
      run_ort(to_proto(m), {npy_array::from(mm_x(), {1, 3, 64})}).at("y").values<float>();
  CHECK(theirs == ours);
}

TEST_CASE("EnableDualQuantNodePairs: int8 tensor read by a BFloat16 node gets a Cast pair") {
  qo::qconfig cfg = mixed("A8W8", "BF16");
  const auto [plain, dual, pd] = with_and_without_dual(cfg);
  // y1 is int8 (mm1 claimed it first); mm2 reads bfloat16: DequantizeLinear -> Cast(bfloat16)
  // -> Cast(float) -> mm2.
  const auto* c1 = node_named(pd, "y1_mm2_additional_QuantizeLinear");
  REQUIRE(c1 != nullptr);
  CHECK(c1->op_type() == "Cast");
  CHECK(c1->input(0) == "y1_DequantizeLinear_Output");
  CHECK(node_named(pd, "mm2")->input(0) == "y1_mm2_additional_DequantizeLinear_Output");
  // Oracle: the model without the option plus a hand-made Cast pair.
  const auto expect = insert_before(to_proto(plain), "mm2", "y1_DequantizeLinear_Output",
                                    {make_cast("hc1", "y1_DequantizeLinear_Output", "hc1_out", 16),
                                     make_cast("hc2", "hc1_out", "hc2_out", 1)});
  const auto got = run_mm(dual);
  CHECK(got == run_mm(to_model(expect)));
  CHECK(got != run_mm(plain));  // the added pair rounds
  check_ort_agrees(dual, got);
  SUBCASE("ActivationScaled: the pair divides by the scale of y1's calibrated range") {
    // (ActivationScaled needs a float global spec: BF16 everywhere, A8W8 at mm1.)
    cfg = mixed("BF16", "A8W8", "mm1");
    cfg.extra_options.set("EnableDualQuantNodePairs", true);
    cfg.extra_options.set("ActivationScaled", true);
    qo::quantize_report rep;
    std::vector<qo::calib_sample> s;
    for (std::uint32_t i = 0; i < 3; ++i)
      s.push_back({{"x", qo::tensor::from_floats({1, 3, 64}, random_floats(192, 60 + i, -2, 2))}});
    qo::memory_reader reader(std::move(s));
    const qo::model scaled = qo::quantize_model(to_model(two_matmuls()), cfg, reader, &rep);
    const auto it = std::find_if(rep.tensors.begin(), rep.tensors.end(),
                                 [](const auto& t) { return t.name == "y1"; });
    REQUIRE(it != rep.tensors.end());
    // Symmetric scaled bfloat16 (quark-spec §1.5): max(|rmin|, |rmax|) / 2.
    const double absmax = std::max(std::fabs(static_cast<double>(it->rmin)),
                                   std::fabs(static_cast<double>(it->rmax)));
    CHECK(static_cast<double>(scaled.initializer("y1_mm2_additional_scale").data<float>()[0]) ==
          doctest::Approx(absmax / 2.0).epsilon(1e-7));
    const auto sp = to_proto(scaled);
    CHECK(node_named(sp, "y1_mm2_additional_QuantizeLinear_Div") != nullptr);
    CHECK(node_named(sp, "y1_mm2_additional_DequantizeLinear_Mul") != nullptr);
    check_ort_agrees(scaled, run_mm(scaled));
  }
}

TEST_CASE("EnableDualQuantNodePairs: BFloat16 tensor read by an int8 node gets an int8 pair") {
  qo::qconfig cfg = mixed("BF16", "A8W8");
  const auto [plain, dual, pd] = with_and_without_dual(cfg);
  // y1 is bfloat16 (mm1 claimed it first: its Cast pair); mm2 reads int8 through an additional
  // pair after it, whose parameters are y1's int8 parameters in an all-A8W8 model (the unscaled
  // bfloat16 stage needs no range, so mm2's int8 spec calibrated y1).
  const auto* q = node_named(pd, "y1_mm2_additional_QuantizeLinear");
  REQUIRE(q != nullptr);
  CHECK(q->op_type() == "QuantizeLinear");
  CHECK(q->input(0) == "y1_DequantizeLinear_Output");
  CHECK(node_named(pd, "y1_DequantizeLinear")->op_type() == "Cast");
  qo::qconfig all8 = qo::get_default_config("A8W8");
  all8.extra_options.set("OptimizeModel", false);
  const qo::model int8 = quantize_mm(all8);
  CHECK(dual.initializer("y1_mm2_additional_scale").data<float>()[0] ==
        int8.initializer("y1_scale").data<float>()[0]);
  CHECK(dual.initializer("y1_mm2_additional_zero_point").data<std::int8_t>()[0] ==
        int8.initializer("y1_zero_point").data<std::int8_t>()[0]);
  const auto got = run_mm(dual);
  CHECK(got != run_mm(plain));
  check_ort_agrees(dual, got);
}

TEST_CASE("BFPAttributes / MXAttributes: the legacy attributes replace the spec's on every node") {
  // BFP16 with BFPAttributes = Quark's legacy MX6 parameters (to_bfp_prime, bit 13, block 16,
  // rounding 2) and an explicit axis: every fused node carries them; x's output equals the header
  // with those attributes.
  qo::qconfig cfg = qo::get_default_config("BFP16");
  cfg.extra_options.set("OptimizeModel", false);
  qo::option_value a = qo::option_value::object();
  a.set("bfp_method", "to_bfp_prime");
  a.set("bit_width", 13);
  a.set("block_size", 16);
  a.set("rounding_mode", 2);
  a.set("axis", 2);
  cfg.extra_options.set("BFPAttributes", a);
  const auto p = to_proto(quantize_mm(cfg));
  std::size_t fused = 0;
  for (const auto& n : p.graph().node()) {
    if (n.domain() != "com.amd.quark")
      continue;
    ++fused;
    CAPTURE(n.name());
    std::map<std::string, std::int64_t> ints;
    std::map<std::string, std::string> strs;
    for (const auto& at : n.attribute()) {
      if (at.type() == ::onnx::AttributeProto::INT)
        ints[at.name()] = at.i();
      else
        strs[at.name()] = at.s();
    }
    CHECK(strs["bfp_method"] == "to_bfp_prime");
    CHECK(ints["bit_width"] == 13);
    CHECK(ints["block_size"] == 16);
    CHECK(ints["rounding_mode"] == 2);
    CHECK(ints["axis"] == 2);  // wins over RefineBlockAxis
  }
  CHECK(fused == 5);  // x, w1, y1, w2, y
  // MXAttributes act on MX specs only; the BFP16 model ignores them.
  qo::qconfig mx = qo::get_default_config("MXINT8");
  mx.extra_options.set("OptimizeModel", false);
  qo::option_value ma = qo::option_value::object();
  ma.set("element_dtype", "fp8_e4m3");
  ma.set("block_size", 8);
  mx.extra_options.set("MXAttributes", ma);
  const auto pm = to_proto(quantize_mm(mx));
  for (const auto& n : pm.graph().node()) {
    if (n.domain() != "com.amd.quark")
      continue;
    CHECK(n.op_type() == "MXQuantizeDequantize");
    for (const auto& at : n.attribute()) {
      if (at.name() == "element_dtype")
        CHECK(at.s() == "fp8_e4m3");
      if (at.name() == "block_size")
        CHECK(at.i() == 8);
    }
  }
  qo::qconfig ignore = qo::get_default_config("BFP16");
  ignore.extra_options.set("OptimizeModel", false);
  ignore.extra_options.set("MXAttributes", ma);
  qo::qconfig base = qo::get_default_config("BFP16");
  base.extra_options.set("OptimizeModel", false);
  CHECK(quantize_mm(ignore).to_bytes() == quantize_mm(base).to_bytes());
  // The first fused node (on x, axis 2) computes what the header computes.
  quark::bfp_op_attributes h;
  h.bfp_method = "to_bfp_prime";
  h.bit_width = 13;
  h.block_size = 16;
  h.rounding_mode = 2;
  h.axis = 2;
  std::vector<float> hx(mm_x().size());
  quark::test::bfp_oracle(h, std::span<const float>(mm_x()), std::vector<std::int64_t>{1, 3, 64},
                          std::span<float>(hx));
  model_builder mb(13, 8);
  mb.opset("com.amd.quark", 1);
  mb.input("x", onnx_type::float32, {1, 3, 64});
  const ::onnx::NodeProto* fx = nullptr;
  for (const auto& n : p.graph().node()) {
    if (n.domain() == "com.amd.quark" && n.input(0) == "x")
      fx = &n;
  }
  REQUIRE(fx != nullptr);
  auto only = mb.build();
  auto* n = only.mutable_graph()->add_node();
  *n = *fx;
  n->set_output(0, "xq");
  auto* o = only.mutable_graph()->add_output();
  o->set_name("xq");
  o->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  const qo::runtime rt(to_model(only));
  auto res = rt.run({{"x", qo::tensor::from_floats({1, 3, 64}, mm_x())}});
  CHECK(values(res.at("xq")) == hx);
  CHECK(hx != mm_x());
}

TEST_CASE("BFPAttributes / MXAttributes: bad keys and values name the attribute") {
  qo::option_map o;
  auto err = [&](const char* key, const char* attr, qo::option_value v) {
    qo::option_value a = qo::option_value::object();
    a.set(attr, std::move(v));
    try {
      o.set(key, a);
    } catch (const quark::config_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err("BFPAttributes", "bit_widht", 13).find("BFPAttributes.bit_widht") != std::string::npos);
  CHECK(err("BFPAttributes", "bfp_method", "to_mx").find("BFPAttributes.bfp_method") !=
        std::string::npos);
  CHECK(err("BFPAttributes", "rounding_mode", 3).find("BFPAttributes.rounding_mode") !=
        std::string::npos);
  CHECK(err("BFPAttributes", "block_size", "8").find("must be an integer") != std::string::npos);
  CHECK(err("MXAttributes", "element_dtype", "fp16").find("MXAttributes.element_dtype") !=
        std::string::npos);
  CHECK(err("MXAttributes", "bit_width", 8).find("unknown attribute") != std::string::npos);
  CHECK(err("MXAttributes", "block_size", 0).find("out of range") != std::string::npos);
  CHECK(err("BFPAttributes", "block_size", 16).empty());
}
