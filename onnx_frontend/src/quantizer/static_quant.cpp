// SPDX-License-Identifier: MIT
// Static quantization of a prepared float32 model (quantize.cpp makes the plan and runs the graph
// passes first): calibration requests -> calibrate (calibrate.cpp) -> choose the tensors to
// quantize -> compute their parameters (numerics.hpp, which calls the headers) -> rewrite the
// graph with QuantizeLinear / DequantizeLinear -> opset bookkeeping (opset.cpp) -> the
// algorithms that work on the quantized model. quark-spec §5-§7. One class, static_quantizer,
// holds the state the stages share; each stage is one member function, run in order by run().
#include "quantizer/static_quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <onnx/shape_inference/implementation.h>

#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/pof2_calibrator.hpp>
#include <quark/observer/detail/minmax_kernel.hpp>
#include <quark/quant/bias.hpp>
#include <quark/scale/pow2_scale.hpp>

#include "io/graph_util.hpp"
#include "io/infer_shapes.hpp"
#include "io/proto_access.hpp"
#include "quantizer/block_nodes.hpp"
#include "quantizer/calibrate.hpp"
#include "quantizer/conversions.hpp"
#include "quantizer/graph_passes.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/numerics.hpp"
#include "quantizer/opset.hpp"
#include "quantizer/range_file.hpp"
#include "quantizer/simulate_dpu.hpp"
#include "quantizer/tensor_build.hpp"
#include "quantizer/tensor_hist.hpp"

namespace quark::onnx {

namespace {

using qz::evaluate_against_float;
using qz::name_single_input;

using qz::node_choice;
using qz::qp;
using qz::tspec;

/// Whether input `k` of `n` decides a shape or a count rather than carrying data: Range's start /
/// limit / delta (the number of elements), Resize / Upsample scales, OneHot depth and
/// NonMaxSuppression's box count and thresholds. These slots take float tensors, so a quantized
/// tensor's DequantizeLinear output could reach them: a length of 10 in MXFP4 is 8 and the
/// window, the resized image or the one-hot axis changes size. They read the float tensor.
bool shape_slot(const ::onnx::NodeProto& n, int k, std::int64_t opset) {
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return false;
  const std::string& op = n.op_type();
  if (op == "Range")
    return true;
  if (op == "Resize")
    return opset < 11 ? k == 1 : k == 2;
  if (op == "Upsample" || op == "OneHot")
    return k == 1;
  if (op == "NonMaxSuppression")
    return k >= 2;
  return false;
}

/// How an op's inputs are treated (quark-spec §7.3).
struct op_rule {
  std::vector<std::size_t> act_inputs;  ///< activation input slots (empty + all_inputs: every one)
  bool all_inputs = false;
  int weight = -1;
  int bias = -1;
  bool shares_output = false;  ///< output reuses input 0's parameters (data-movement ops)
  bool needs_input = false;    ///< quantized only if input 0 is (unless ForceQuantizeNoInputCheck)
  bool const_inputs = false;   ///< float initializer inputs are quantized as activations
  /// The bias is quantized as a weight (the weight spec, its own scale, per tensor) whatever
  /// QuantizeBias / Int32Bias say: Quark's QDQLayerNorm.
  bool bias_as_weight = false;
};

op_rule rule_for(const std::string& op) {
  static const std::set<std::string> movement = {
      "Reshape", "Transpose", "Squeeze",  "Unsqueeze",    "Flatten",      "MaxPool",
      "Resize",  "Split",     "Slice",    "Gather",       "DepthToSpace", "SpaceToDepth",
      "Expand",  "Tile",      "Identity", "GlobalMaxPool"};
  static const std::set<std::string> unary = {"Relu",
                                              "LeakyRelu",
                                              "Sigmoid",
                                              "Tanh",
                                              "Softmax",
                                              "Clip",
                                              "HardSigmoid",
                                              "HardSwish",
                                              "Erf",
                                              "Gelu",
                                              "AveragePool",
                                              "GlobalAveragePool",
                                              "Pad",
                                              "ReduceMean",
                                              "ReduceMax",
                                              "ReduceMin",
                                              "ReduceSum",
                                              "LpNormalization",
                                              "BatchNormalization",
                                              "ArgMax",
                                              "Softplus",
                                              "Elu",
                                              "Selu",
                                              "Exp",
                                              "Log",
                                              "Sqrt",
                                              "Abs",
                                              "Neg",
                                              "Reciprocal",
                                              "Floor",
                                              "Ceil",
                                              "Round",
                                              "Sin",
                                              "Cos",
                                              "Pow"};
  static const std::set<std::string> elementwise = {"Add", "Sub",    "Mul", "Div",  "Min",
                                                    "Max", "Concat", "Sum", "Mean", "PRelu"};
  op_rule r;
  if (op == "Conv" || op == "ConvTranspose" || op == "Gemm") {
    r.act_inputs = {0};
    r.weight = 1;
    r.bias = 2;
  } else if (op == "MatMul") {
    r.act_inputs = {0};
    r.weight = 1;
  } else if (op == "InstanceNormalization" || op == "LayerNormalization") {
    // Quark's QDQ registry: InstanceNormalization is ONNX Runtime's QDQNormalization (the scale a
    // weight, the bias an int32 bias from the input and scale scales), LayerNormalization Quark's
    // own QDQLayerNorm (the scale a weight, the bias a weight as well).
    r.act_inputs = {0};
    r.weight = 1;
    r.bias = 2;
    r.bias_as_weight = op == "LayerNormalization";
  } else if (movement.contains(op)) {
    r.act_inputs = {0};
    r.shares_output = true;
    r.needs_input = true;
  } else if (unary.contains(op)) {
    r.act_inputs = {0};
  } else if (op == "Where") {
    r.act_inputs = {1, 2};
    r.const_inputs = true;
  } else if (elementwise.contains(op)) {
    r.all_inputs = true;
    r.const_inputs = true;
  } else {
    r.all_inputs = true;  // QuantizeAllOpTypes / OpTypesToQuantize on an op without a rule
  }
  return r;
}

/// A tensor that gets one Q/DQ pair (or one per consumer).
struct act_entry {
  tspec spec;
  std::string share_from;  ///< take the parameters of this tensor instead of its own range
  bool from_initializer = false;
  float rmin = 0.0f, rmax = 0.0f;
  double std_dev = 0.0;              ///< Distribution (FP8)
  std::optional<int> pof2_position;  ///< searched by the calibrator (pof2 MinMSE)
  qp params;
  bool done = false;
  bool weight_like = false;       ///< a constant quantized with the weight spec (clip rule)
  bool reduce = false;            ///< TensorQuantOverrides reduce_range
  std::optional<qp> fixed;        ///< TensorQuantOverrides scale / zero_point
  std::optional<float> over_min;  ///< TensorQuantOverrides rmin
  std::optional<float> over_max;  ///< TensorQuantOverrides rmax
};

/// A weight or bias stored quantized.
struct const_entry {
  std::string name;      ///< original initializer
  std::size_t node = 0;  ///< consumer node (file index)
  std::size_t slot = 0;
  bool is_bias = false;
  /// A bias with TensorQuantOverrides, or a LayerNormalization's: quantized as a weight (its own
  /// scale), not from the input and weight scales.
  bool own_params = false;
  /// An int32 / int16 bias whose scale is input scale x weight scale: a DequantizeLinear only,
  /// whatever AddQDQPairToWeight says (every other weight or bias follows it).
  bool product_scale = false;
  tspec spec;
  std::int64_t axis = -1;  ///< per-channel or group axis, -1 per tensor
  std::int64_t block = 0;  ///< > 0: per group of `block` along `axis` (blocked DequantizeLinear)
  shape_t param_shape;     ///< blocked: the scale / zero-point shape
  dtype_id type = dtype_id::int8;
  std::vector<float> scale;
  std::vector<std::int32_t> zp;
  tensor q;  ///< quantized values
  float rmin = 0.0f, rmax = 0.0f;
  std::string out;  ///< name of the DQ output the consumer reads
};

std::string type_name(dtype_id t) {
  return std::string(dtype_name(t));
}

std::int64_t norm_axis(std::int64_t a, std::size_t rank) {
  return a < 0 ? a + static_cast<std::int64_t>(rank) : a;
}

using qz::make_binary;
using qz::make_cast;
using qz::quantize_values;
using qz::scale_tensor;
using qz::zero_point_tensor;

bool is_fp16(dtype_id t) {
  return t == dtype_id::float16 || t == dtype_id::bfloat16;
}

bool is_fp8(dtype_id t) {
  return t == dtype_id::float8_e4m3fn || t == dtype_id::float8_e4m3fnuz ||
         t == dtype_id::float8_e5m2 || t == dtype_id::float8_e5m2fnuz;
}

::onnx::NodeProto make_node(const std::string& op, const std::string& name,
                            const std::vector<std::string>& in, const std::string& out,
                            std::int64_t axis, std::int64_t block = 0) {
  ::onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : in)
    n.add_input(i);
  n.add_output(out);
  if (axis >= 0) {
    auto* a = n.add_attribute();
    a->set_name("axis");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  if (block > 0) {
    auto* a = n.add_attribute();
    a->set_name("block_size");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(block);
  }
  return n;
}

/// The zero point of an asymmetric scaled BFloat16 / Float16 pair (an integer the type holds
/// exactly, quark::compute_qparams) as the float32 scalar its Add / Sub read (emit_cast_pair).
tensor cast_zero_point(std::int32_t zp) {
  return tensor::from_floats({}, std::vector<float>{static_cast<float>(zp)});
}

/// The DequantizeLinear half of emit_cast_pair: Cast(to=FLOAT) -> [Sub(., zero point)] ->
/// [Mul(., scale)] from the T-typed value `q` (a Cast pair's or a weight stored as T).
void emit_cast_dequantize(std::vector<::onnx::NodeProto>& sink, const std::string& dq_node,
                          const std::string& q, const std::string& out,
                          const std::string& scale_name, bool scaled,
                          const std::string& zero_point) {
  if (!scaled && zero_point.empty()) {
    sink.push_back(make_cast(dq_node, q, out, dtype_id::float32));
    return;
  }
  std::string y = dq_node + "_Cast_Output";
  sink.push_back(make_cast(dq_node, q, y, dtype_id::float32));
  if (!zero_point.empty()) {
    const std::string d = scaled ? dq_node + "_Sub_Output" : out;
    sink.push_back(make_binary("Sub", dq_node + "_Sub", y, zero_point, d));
    y = d;
  }
  if (scaled)
    sink.push_back(make_binary("Mul", dq_node + "_Mul", y, scale_name, out));
}

/// The Quark form of a BFloat16 / Float16 "Q/DQ" pair that ONNX Runtime runs (quark-spec §1.5,
/// BF16QDQToCast): [Div(x, scale)] -> [Add(., zero point)] -> Cast(to=T) -> Cast(to=FLOAT) ->
/// [Sub(., zero point)] -> [Mul(., scale)]. The Div and Mul are present only when the pair is
/// scaled (scale != 1), the Add and Sub only when `zero_point` names the float initializer of a
/// non-zero zero point (an asymmetric scaled spec: Quark's custom QuantizeLinear computes
/// T(x / s + zp), its DequantizeLinear (float(y) - zp) * s). Div keeps Quark's x / s kernel,
/// unless `reciprocal` names an initializer holding 1 / scale: then Mul(x, 1 / scale), as Quark's
/// BF16QDQToCast rewrite writes it (only for a zero zero point: the rewrite leaves the others).
/// `q_out` names the T-typed value, `out` the float result.
void emit_cast_pair(std::vector<::onnx::NodeProto>& sink, const std::string& q_node,
                    const std::string& dq_node, const std::string& in, const std::string& q_out,
                    const std::string& out, dtype_id t, const std::string& scale_name, bool scaled,
                    const std::string& reciprocal = {}, const std::string& zero_point = {}) {
  std::string x = in;
  if (scaled && !reciprocal.empty() && zero_point.empty()) {
    sink.push_back(make_binary("Mul", q_node + "_Mul", in, reciprocal, q_node + "_Mul_Output"));
    x = q_node + "_Mul_Output";
  } else if (scaled) {
    sink.push_back(make_binary("Div", q_node + "_Div", in, scale_name, q_node + "_Div_Output"));
    x = q_node + "_Div_Output";
  }
  if (!zero_point.empty()) {
    sink.push_back(make_binary("Add", q_node + "_Add", x, zero_point, q_node + "_Add_Output"));
    x = q_node + "_Add_Output";
  }
  sink.push_back(make_cast(q_node, x, q_out, t));
  emit_cast_dequantize(sink, dq_node, q_out, out, scale_name, scaled, zero_point);
}

std::string dtype_str(dtype_id t) {
  return std::string(dtype_name(t));
}

/// FixShapes: the named graph inputs / outputs get these dimensions.
void fix_shapes(model& m, const std::map<std::string, shape_t>& shapes) {
  ::onnx::GraphProto& g = *proto(m).mutable_graph();
  for (const auto& [name, dims] : shapes) {
    ::onnx::ValueInfoProto* vi = nullptr;
    for (auto& v : *g.mutable_input())
      vi = v.name() == name ? &v : vi;
    for (auto& v : *g.mutable_output())
      vi = v.name() == name ? &v : vi;
    if (vi == nullptr) {
      throw config_error("quark.config.value",
                         "FixShapes: '" + name + "' is not an input or output of the model");
    }
    auto* shape = vi->mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() != 0 && shape->dim_size() != static_cast<int>(dims.size())) {
      throw config_error("quark.config.value", "FixShapes: '" + name + "' has rank " +
                                                   std::to_string(shape->dim_size()) + ", not " +
                                                   std::to_string(dims.size()));
    }
    for (std::size_t k = 0; k < dims.size(); ++k) {
      auto* d = static_cast<int>(k) < shape->dim_size() ? shape->mutable_dim(static_cast<int>(k))
                                                        : shape->add_dim();
      if (d->has_dim_value() && d->dim_value() != dims[k]) {
        throw config_error("quark.config.value",
                           "FixShapes: dimension " + std::to_string(k) + " of '" + name +
                               "' is fixed to " + std::to_string(d->dim_value()) + " in the model");
      }
      d->set_dim_value(dims[k]);
    }
  }
}

/// The element-wise ops AlignEltwiseQuantType speaks of.
const std::set<std::string>& eltwise_weight_ops() {
  static const std::set<std::string> s = {"Mul", "Add", "Sub", "Div", "Min", "Max"};
  return s;
}

/// Relu, or Clip whose min (attribute before opset 11, initializer input after) is 0.
bool relu_like(const model& m, const node_info& n) {
  if (n.op_type == "Relu")
    return true;
  if (n.op_type != "Clip")
    return false;
  for (const auto& a : n.attributes) {
    if (a.name == "min")
      return std::holds_alternative<float>(a.value) && std::get<float>(a.value) == 0.0f;
  }
  if (n.inputs.size() < 2 || n.inputs[1].empty() || !m.has_initializer(n.inputs[1]))
    return false;
  const tensor t = m.initializer(n.inputs[1]);
  return t.type() == dtype_id::float32 && t.size() == 1 && t.data<float>()[0] == 0.0f;
}

const tensor_override* first_override(const tensor_quant_overrides& o, const std::string& name) {
  auto it = o.find(name);
  return it == o.end() || it->second.empty() ? nullptr : &it->second.front();
}

/// The type an override asks for. Integer types of 4 to 16 bits, FP8 E4M3FN and the Cast form of
/// float16 / bfloat16 go anywhere; int32 only on a weight (`weight`), as Int32Spec; uint32 has no
/// QuantizeLinear; the block types QBFP / QMX are no Q/DQ type (qz::override_block_spec).
dtype_id override_dtype(override_quant_type t, const std::string& tensor, bool weight) {
  using q = override_quant_type;
  const std::string where =
      "TensorQuantOverrides." + tensor + ": quant_type " + std::string(to_string(t));
  switch (t) {
    case q::int32:
      if (weight)
        return dtype_id::int32;
      throw config_error("quark.config.unsupported_type",
                         where +
                             " applies to weights only: ONNX QuantizeLinear has no int32 "
                             "output (an int32 weight takes a DequantizeLinear alone)");
    case q::uint32:
      throw config_error("quark.config.unsupported_type",
                         where + ": ONNX QuantizeLinear / DequantizeLinear have no uint32 form");
    default:
      if (const auto d = element_type(t))
        return *d;
      break;  // QBFP / QMX: a fused block node, not a Q/DQ type (qz::override_block_spec)
  }
  throw frontend_error("quark.quantize.internal", where + " has no Q/DQ element type");
}

/// Every overridden tensor exists in the model.
void check_override_names(const model& m, const std::vector<node_info>& nodes,
                          const tensor_quant_overrides& o) {
  if (o.empty())
    return;
  std::set<std::string> names;
  for (const auto& n : nodes) {
    names.insert(n.inputs.begin(), n.inputs.end());
    names.insert(n.outputs.begin(), n.outputs.end());
  }
  for (const auto& v : m.inputs())
    names.insert(v.name);
  for (const auto& entry : o) {
    if (!names.contains(entry.first)) {
      throw config_error("quark.config.value",
                         "TensorQuantOverrides." + entry.first +
                             ": no tensor of that name in the model (as prepared for "
                             "quantization: OptimizeModel and SimplifyModel fold, merge and "
                             "remove tensors; set them to false to keep it)");
    }
  }
}

/// Zero point of an override, checked against the type's range.
std::int32_t override_zero_point(std::int64_t zp, dtype_id t, const std::string& where) {
  const auto r = quark::quant_range(t);
  if (!r || zp < r->min || zp > r->max) {
    throw config_error("quark.config.value", where + ".zero_point: " + std::to_string(zp) +
                                                 " is outside the range of " + dtype_str(t));
  }
  return static_cast<std::int32_t>(zp);
}

/// An override's fixed scale and zero point for type t, clipped to t's full range. A float8
/// type keeps zero point 0 and qmin = qmax = 0, as qparams_for leaves them (the option parser
/// refused any other float8 zero point).
qp fixed_params(double scale, std::int64_t zero_point, dtype_id t, const std::string& where) {
  qp p;
  p.scale = static_cast<float>(scale);  // the option parser checked it fits
  if (is_fp8(t))
    return p;
  p.zero_point = override_zero_point(zero_point, t, where);
  const auto r = quark::quant_range(t);
  p.qmin = r->min;  // override_zero_point refused a type without a range
  p.qmax = r->max;
  return p;
}

/// SaveTensorHistFig: tensor_hist/ in the working directory (as Quark), one .json and one .svg
/// per tensor calibrated with a histogram; the others are named in a note (Quark warns that
/// its method "not support tensor histogram").
void save_tensor_hists(const qz::calib_output& cal,
                       const std::map<std::string, qz::calib_request>& requests,
                       quantize_report& report) {
  const std::filesystem::path dir = std::filesystem::current_path() / "tensor_hist";
  const qz::tensor_hist_result r = qz::write_tensor_hists(dir, cal, requests);
  report.notes.push_back("SaveTensorHistFig: " + std::to_string(r.written) +
                         " tensor histograms (.json, .svg) in '" + dir.string() + "'");
  if (!r.without_histogram.empty()) {
    std::string names;
    for (std::size_t i = 0; i < r.without_histogram.size() && i < 5; ++i)
      names += (i ? ", " : "") + r.without_histogram[i];
    if (r.without_histogram.size() > 5)
      names += ", ...";
    report.notes.push_back("SaveTensorHistFig: " + std::to_string(r.without_histogram.size()) +
                           " tensors have no histogram (their calibration method keeps none, or "
                           "their range was restored from a file): " +
                           names);
  }
}

/// A Gemm's transB attribute (default 0).
bool gemm_trans_b(const node_info& n) {
  bool trans_b = false;
  for (const auto& a : n.attributes) {
    if (a.name == "transB")
      trans_b = std::get<std::int64_t>(a.value) != 0;
  }
  return trans_b;
}

/// A step of quark-spec §3.5 that replaces an activation's range after the act selection. The
/// steps run in topological order of their nodes: a quantized Clip / Relu whose input has one
/// consumer gives that input (`target`) the current range of its output (`from`); a quantized
/// Softmax's output gets [0, 1] (`from` empty).
struct range_rule {
  std::string target;
  std::string from;
};

std::vector<range_rule> range_rules(const value_users& users, const std::vector<node_info>& nodes,
                                    const std::vector<std::size_t>& topo,
                                    const std::vector<bool>& node_quantized,
                                    const std::map<std::string, act_entry>& acts) {
  std::vector<range_rule> rules;
  for (const std::size_t i : topo) {
    const node_info& n = nodes[i];
    if (!node_quantized[i] || n.outputs.empty() || n.inputs.empty())
      continue;
    // (An output in a block format, e.g. from an override, has no range to give.)
    if ((n.op_type == "Clip" || n.op_type == "Relu") && users.consumers(n.inputs[0]).size() == 1 &&
        acts.contains(n.inputs[0]) && acts.contains(n.outputs[0]) &&
        !acts.at(n.outputs[0]).spec.block) {
      rules.push_back({n.inputs[0], n.outputs[0]});
    }
    if (n.op_type == "Softmax" && acts.contains(n.outputs[0]))
      rules.push_back({n.outputs[0], {}});
  }
  return rules;
}

/// Why a requested tensor's own calibrated range is not needed (see unneeded_ranges).
enum class unneeded : std::uint8_t {
  clip_input,    ///< a range_rule replaces it
  softmax,       ///< a Softmax output: [0, 1]
  shared,        ///< it takes another tensor's parameters (share_from)
  not_quantized  ///< the act selection did not quantize it
};

/// The requested tensors whose own calibrated range the range stage below would never read,
/// each with the reason; everything else in `requests` is needed. Derived from the same act
/// selection (`acts`) and the same `rules` the range stage applies, replaying them on names:
/// a rule copies the *current* range of its source, which is the source's own range unless an
/// earlier rule replaced it (a Clip feeding a Relu: the Clip's input reads the Clip output's own
/// range, so that one stays needed). The Distribution method's standard deviation, which no
/// rule replaces, and TensorQuantOverrides targets always keep their own.
std::map<std::string, unneeded> unneeded_ranges(
    const std::map<std::string, qz::calib_request>& requests,
    const std::map<std::string, act_entry>& acts, const std::vector<range_rule>& rules,
    const qz::settings& opt) {
  std::map<std::string, std::string> holds;  // tensor -> whose own range it holds ("": none)
  auto holder = [&](const std::string& t) {
    auto it = holds.find(t);
    return it == holds.end() ? t : it->second;
  };
  for (const range_rule& r : rules)
    holds[r.target] = r.from.empty() ? std::string{} : holder(r.from);
  std::set<std::string> read;
  for (const auto& [name, e] : acts) {
    if (e.from_initializer)
      continue;
    const bool shared = !e.share_from.empty() && acts.contains(e.share_from);
    if (!shared) {
      if (const std::string h = holder(name); !h.empty())
        read.insert(h);
    }
    if ((!shared && e.spec.method == qz::act_method::distribution) || opt.overrides.contains(name))
      read.insert(name);
  }
  std::map<std::string, unneeded> out;
  for (const auto& [name, r] : requests) {
    if (read.contains(name))
      continue;
    auto it = acts.find(name);
    if (it == acts.end()) {
      out.emplace(name, unneeded::not_quantized);
    } else if (!it->second.share_from.empty() && acts.contains(it->second.share_from)) {
      out.emplace(name, unneeded::shared);
    } else {
      out.emplace(name, holder(name).empty() ? unneeded::softmax : unneeded::clip_input);
    }
  }
  return out;
}

/// The values a float32 model declares float16 / bfloat16 (a Cast to them, their initializers,
/// graph inputs, what ONNX type inference derives from those). The runtime computes them in
/// float32, so calibration reports them as float32; Quark, like ONNX Runtime's quantizer, leaves
/// such values unquantized (a Q/DQ pair would hand their consumers float32). Empty, without
/// running type inference, for a model with no half-precision value at all.
std::set<std::string> half_precision_values(const model& m) {
  const ::onnx::ModelProto& mp = proto(m);
  const ::onnx::GraphProto& g = mp.graph();
  auto half = [](std::int64_t t) {
    return t == static_cast<std::int64_t>(dtype_id::float16) ||
           t == static_cast<std::int64_t>(dtype_id::bfloat16);
  };
  bool any = std::any_of(g.initializer().begin(), g.initializer().end(),
                         [&](const auto& t) { return half(t.data_type()); });
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()}) {
    for (const auto& v : *list)
      any = any || half(v.type().tensor_type().elem_type());
  }
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute())
      any = any || (a.name() == "to" && n.op_type() == "Cast" && half(a.i()));
  }
  std::set<std::string> out;
  if (!any)
    return out;
  ::onnx::ModelProto p = mp;
  try {
    infer_shapes(p);
  } catch (const std::exception&) {
    // Partial results stay in value_info; values it could not type are taken as float32.
  }
  for (const auto& t : p.graph().initializer()) {
    if (half(t.data_type()))
      out.insert(t.name());
  }
  for (const auto* list : {&p.graph().input(), &p.graph().output(), &p.graph().value_info()}) {
    for (const auto& v : *list) {
      if (half(v.type().tensor_type().elem_type()))
        out.insert(v.name());
    }
  }
  return out;
}

/// The values a graph computes from tensor shapes alone: the outputs of Shape / Size and of every
/// node whose inputs are such values or constants (initializers, Constant outputs, values made
/// from constants only), as in `Cast(Slice(Shape(x))) * 1.7 -> Cast(int64) -> Resize sizes` or
/// `Range(0, Cast(seq_len))` positions. Their float ones are not activations: calibration sees
/// only the calibration inputs' sizes, so a range taken there clips another size (a model
/// calibrated at 10x10 would resize a 20x20 input to the 10x10 result), and a rounded size
/// changes an output's shape. Nodes with subgraphs and random ops end the propagation.
std::set<std::string> shape_computed_values(const std::vector<node_info>& nodes,
                                            const std::vector<std::size_t>& topo,
                                            const std::set<std::string>& inits) {
  std::set<std::string> constant(inits.begin(), inits.end());
  std::set<std::string> shape;
  for (const std::size_t i : topo) {
    const node_info& n = nodes[i];
    const bool std_domain = n.domain.empty() || n.domain == "ai.onnx";
    if (std_domain && (n.op_type == "Shape" || n.op_type == "Size")) {
      shape.insert(n.outputs.begin(), n.outputs.end());
      continue;
    }
    if (std_domain && n.op_type == "Constant") {
      constant.insert(n.outputs.begin(), n.outputs.end());
      continue;
    }
    if (!std_domain || n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan" ||
        n.op_type == "SequenceMap" || n.op_type.starts_with("Random") || n.op_type == "Bernoulli" ||
        n.op_type == "Multinomial") {
      continue;
    }
    bool from_shape = false;
    bool known = false;
    bool all_known = true;
    for (const auto& x : n.inputs) {
      if (x.empty())
        continue;
      known = true;
      if (shape.contains(x))
        from_shape = true;
      else if (!constant.contains(x))
        all_known = false;
    }
    if (!known || !all_known)
      continue;
    (from_shape ? shape : constant).insert(n.outputs.begin(), n.outputs.end());
  }
  return shape;
}

/// Input k of `n`, "" past its last one.
std::string node_input(const node_info& n, std::size_t k) {
  return k < n.inputs.size() ? n.inputs[k] : std::string{};
}

/// The position pos of a power-of-two scale 2^-pos, and the scale at a position (quark-spec
/// §2.2, through the header's pow2_scale).
int pof2_position_of(float scale) {
  return quark::scale_traits<quark::pow2_scale>::from_float(scale).position();
}
float pof2_scale_at(int pos) {
  return quark::scale_traits<quark::pow2_scale>::to_float(quark::pow2_scale::from_position(pos));
}

qz::scale_choice scale_choice_for(const tspec& t) {
  return qz::scale_choice{.pof2 = t.pof2, .int16 = t.int16_scale, .fp_scaled = t.fp_scaled};
}

/// The static flow on one model. Construct, then run() once; the model is changed in place.
class static_quantizer {
 public:
  static_quantizer(model& m, const qconfig& cfg, const qz::plan& pl, const qz::algo_options& algos,
                   calibration_data_reader& reader, quantize_report& report,
                   const quantize_run_options& run);
  void run_all();

 private:
  // Stages, in the order run_all() calls them.
  void request_ranges();
  void keep_float_model();
  void calibrate();
  void select_nodes();
  void select_node(std::size_t i);
  bool select_act_inputs(std::size_t i, const op_rule& r);
  bool select_weight(std::size_t i, const op_rule& r);
  bool select_bias(std::size_t i, const op_rule& r);
  bool select_outputs(std::size_t i, const op_rule& r);
  void assign_ranges();
  const qp& params_of(const std::string& name);
  void align_params();
  void adjust_bias_positions();
  [[nodiscard]] const std::string& op_of(std::size_t i) const;
  [[nodiscard]] bool dpu_hard_sigmoid(std::size_t i) const;
  void requantize(const_entry& e);
  [[nodiscard]] std::string shared_root(std::string t) const;
  [[nodiscard]] act_entry* aligned_entry(const std::string& t);
  [[nodiscard]] act_entry* output_entry(std::size_t i);
  void quantize_constant(const_entry& e);
  void quantize_product_bias(const_entry& e, const tensor& w, std::span<const float> v);
  void quantize_weight(const_entry& e, const tensor& w, std::span<const float> v);
  void emit_activation(const std::string& name, const act_entry& e);
  void emit_pair(std::vector<::onnx::NodeProto>& sink, const std::string& name, const act_entry& e,
                 const std::string& sfx, const std::string& from, const std::string& q,
                 const std::string& dq, const std::vector<std::size_t>& readers);
  void emit_cast_stage(std::vector<::onnx::NodeProto>& sink, dtype_id type, const qp& p,
                       const std::string& from, const std::string& qn, const std::string& dqn,
                       const std::string& q, const std::string& dq, const std::string& s_name,
                       const std::string& z_name, const std::string& sfx);
  std::string additional_pair(std::vector<::onnx::NodeProto>& sink, const std::string& name,
                              const act_entry& e, const std::string& src,
                              const std::string& node_name, const tspec& spec,
                              const std::vector<std::size_t>& readers);
  void emit_constants();
  void rebuild_node_list();
  void drop_unquantized();
  void finish_model();
  void run_algorithms();
  void drop_contradicted_value_info();
  void debug_notes();

  // Queries shared by the stages.
  [[nodiscard]] tspec overridden(const std::string& name, tspec s, bool weight = false) const;
  [[nodiscard]] bool is_float_init(const std::string& n) const;
  [[nodiscard]] const qz::tensor_facts* facts(const std::string& n) const;
  [[nodiscard]] bool is_float_act(const std::string& n) const;
  void request(const std::string& name, const tspec& spec);
  void mark_act(const std::string& n, const tspec& s, const std::string& share);
  void add_init(const std::string& name, const tensor& t) { m_.set_initializer(name, t); }

  model& m_;
  const qconfig& cfg_;
  const qz::plan& pl_;
  const qz::settings& opt_;
  const qz::algo_options& algos_;
  calibration_data_reader& reader_;
  quantize_report& report_;
  const quantize_run_options& run_;
  // The graph as prepared.
  const std::vector<node_info> nodes_;
  const std::vector<std::size_t> topo_;
  /// Producers and readers of the values of the graph as prepared (m_'s nodes do not change
  /// before rebuild_node_list).
  const value_users users_;
  std::set<std::string> inits_;
  std::set<std::string> graph_outputs_;
  /// (producer, consumer) op types whose Q/DQ between them is removed (RemoveQDQ*).
  std::set<std::pair<std::string, std::string>> remove_between_;
  std::map<std::string, std::vector<std::size_t>> readers_;  ///< value -> reading nodes_ indices
  std::map<std::string, std::size_t> producer_;              ///< value -> producing nodes_ index
  std::set<std::string> half_values_;
  std::set<std::string> shape_values_;    ///< shape_computed_values: never activations
  std::vector<std::string> shape_nodes_;  ///< nodes kept float for computing shapes (a note)
  bool extended_ = false;  ///< the extended QDQ flow: a quantized node uses a non-8-bit type
  // Calibration.
  std::map<std::string, qz::calib_request> requests_;
  bool gptq_candidates_ = false;
  std::string float_bytes_;  ///< the float model, when a later stage compares against it
  std::map<std::string, qz::file_range> file_ranges_;
  std::map<std::string, unneeded> dropped_;
  qz::calib_output cal_;
  /// The type and shape of every value (calibration's first sample, then its result).
  const std::map<std::string, qz::tensor_facts>* value_facts_ = nullptr;
  // What is quantized, and how.
  std::map<std::string, act_entry> acts_;
  std::vector<const_entry> consts_;
  std::vector<bool> node_quantized_;
  bool selected_ = false;
  std::map<std::pair<std::string, std::size_t>, const const_entry*> weight_of_node_;
  // The rewrite.
  std::vector<::onnx::NodeProto> prologue_;
  std::map<std::size_t, std::vector<::onnx::NodeProto>> after_;  // by producer file index
  std::map<std::string, std::string> rewire_;                    // tensor -> DQ output (shared)
  std::map<std::pair<std::size_t, std::string>, std::string> rewire_node_;  // (node, tensor) -> DQ
  std::map<std::string, std::string> rename_output_;  // graph output -> new producer output name
  bool per_axis_ = false;
  bool blocked_ = false;
  std::set<dtype_id> types_used_;
  std::set<std::string> consts_replaced_;
  /// SimulateDPU's edits (simulate_dpu.hpp), planned before the NPU rules.
  qz::dpu_plan dpu_;
};

static_quantizer::static_quantizer(model& m, const qconfig& cfg, const qz::plan& pl,
                                   const qz::algo_options& algos, calibration_data_reader& reader,
                                   quantize_report& report, const quantize_run_options& run)
    : m_(m),
      cfg_(cfg),
      pl_(pl),
      opt_(pl.opt),
      algos_(algos),
      reader_(reader),
      report_(report),
      run_(run),
      nodes_(m.nodes()),
      topo_(m.topological_order()),
      users_(proto(m).graph()),
      half_values_(half_precision_values(m)),
      node_quantized_(nodes_.size()) {
  for (auto& n : m_.initializer_names())
    inits_.insert(n);
  shape_values_ = shape_computed_values(nodes_, topo_, inits_);
  // The extended QDQ flow: some quantized node uses a type other than int8 / uint8.
  for (const auto& c : pl_.nodes) {
    for (const auto* t : {&c.input, &c.output, &c.weight}) {
      if (c.quantize && *t && (*t)->type != dtype_id::int8 && (*t)->type != dtype_id::uint8)
        extended_ = true;
    }
  }
  for (const auto& o : m_.outputs())
    graph_outputs_.insert(o.name);
  remove_between_ = qz::read_pass_options(cfg_).remove_qdq_between;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    for (const auto& x : nodes_[i].inputs) {
      if (!x.empty())
        readers_[x].push_back(i);
    }
    for (const auto& o : nodes_[i].outputs)
      producer_[o] = i;
  }
}

void static_quantizer::run_all() {
  // Static quantization covers the main graph, as in Quark (its EnableSubgraph is for dynamic
  // quantization, use_dynamic_quant; docs/config.md): say so when bodies hold nodes, or a model
  // whose work sits in an If (silero VAD opset 16) comes back unchanged without a word.
  if (const std::size_t k = qz::body_node_count(proto(m_).graph()); k > 0) {
    report_.notes.push_back("graph: " + std::to_string(k) +
                            (k == 1 ? " node inside an If / Loop / Scan body stays"
                                    : " nodes inside If / Loop / Scan bodies stay") +
                            " float (static quantization covers the main graph, as in Quark; "
                            "EnableSubgraph with use_dynamic_quant quantizes bodies)");
  }
  check_override_names(m_, nodes_, opt_.overrides);
  request_ranges();
  keep_float_model();
  calibrate();
  assign_ranges();
  // Activation parameters (shared ones follow their source).
  for (const auto& act : acts_)
    params_of(act.first);
  // Weights first, then NPULimitationCheck (which may move a power-of-two weight), then biases
  // (which need the final input and weight scales), then the bias positions.
  for (auto& e : consts_) {
    if (!e.is_bias)
      quantize_constant(e);
  }
  // SimulateDPU, planned here (the NPU rules see a converted Sigmoid as the HardSigmoid it
  // becomes), applied to the rewritten graph.
  dpu_ = qz::plan_dpu(
      m_, nodes_, opt_.simulate, [&](std::size_t i) { return pl_.nodes[i].quantize; },
      [&](std::size_t i) { return pl_.nodes[i].simulate; });
  report_.notes.insert(report_.notes.end(), dpu_.notes.begin(), dpu_.notes.end());
  align_params();
  for (auto& e : consts_) {
    if (e.is_bias)
      quantize_constant(e);
  }
  adjust_bias_positions();
  // (f) rewrite the graph.
  // An initializer that one node quantizes as a weight (or bias) and another reads as an
  // activation input gets one pair, the weight's, as in Quark, where a weight's registration
  // takes precedence over an activation's: both would otherwise write
  // '<name>_DequantizeLinear'.
  std::set<std::string> constants;
  for (const auto& e : consts_) {
    if (e.type != dtype_id::undefined)
      constants.insert(e.name);
  }
  std::vector<std::string> read_as_weight;
  for (const auto& act : acts_) {
    if (act.second.from_initializer && constants.contains(act.first)) {
      read_as_weight.push_back(act.first);
      continue;
    }
    emit_activation(act.first, act.second);
  }
  emit_constants();
  for (const auto& name : read_as_weight) {
    std::string dq;
    for (const auto& e : consts_) {
      if (e.name == name && rewire_node_.contains({e.node, name}))
        dq = rewire_node_.at({e.node, name});
    }
    for (const std::size_t c : users_.consumers(name)) {
      if (!dq.empty() && !rewire_node_.contains({c, name}))
        rewire_node_[{c, name}] = dq;
    }
  }
  rebuild_node_list();
  drop_unquantized();
  if (!dpu_.edits.empty()) {
    for (auto& note : qz::apply_dpu_marks(m_, dpu_))
      report_.notes.push_back(std::move(note));
  }
  if (opt_.vaiml_bf16) {
    const qz::bf16_cast_removal r = qz::remove_bf16_casts(m_);
    report_.notes.push_back(
        "EnableVaimlBF16: bfloat16 Cast pairs removed: " + std::to_string(r.activations) +
        " on activations, " + std::to_string(r.outputs) + " before graph outputs; " +
        std::to_string(r.weights) + " weight(s) stored as float32 holding bfloat16 values");
  }
  finish_model();
  run_algorithms();
  debug_notes();
  evaluate_against_float(report_, opt_, float_bytes_, m_, reader_, run_, cal_.samples);
}

/// TensorQuantOverrides quant_type / symmetric of a tensor (scale, zero point, ranges and axis
/// are applied where the parameters are computed).
tspec static_quantizer::overridden(const std::string& name, tspec s, bool weight) const {
  const auto* o = first_override(opt_.overrides, name);
  if (o == nullptr)
    return s;
  if (o->quant_type && is_block_type(*o->quant_type)) {
    // One fused block node instead of a Q/DQ pair; no calibration (the option parser refused
    // the keys a block format has no use for).
    return qz::override_block_spec(*o->quant_type, cfg_, !weight, o->axis);
  }
  if (s.block) {
    if (!o->quant_type) {
      if (o->scale || o->zero_point || o->symmetric || o->reduce_range || o->rmin || o->rmax) {
        throw config_error("quark.config.value",
                           "TensorQuantOverrides." + name + ": the tensor takes the block " +
                               "format " + s.block->label +
                               ", which has no scale, zero point, symmetry or range to set "
                               "(give a quant_type to change its format, or only an axis)");
      }
      if (o->axis)
        s.axis = static_cast<int>(*o->axis);  // the block axis
      return s;
    }
    // Out of a block format into a Q/DQ type: calibrated by MinMax, the block specs' own
    // calibration method; symmetric as the spec was (ActivationSymmetric defaults to True
    // with block types, quark-spec §3.2) unless the entry says otherwise.
    tspec t;
    t.type = override_dtype(*o->quant_type, name, weight);
    t.symmetric = o->symmetric.value_or(s.symmetric);
    t.method = qz::act_method::minmax;
    return t;
  }
  if (o->quant_type)
    s.type = override_dtype(*o->quant_type, name, weight);
  if (o->symmetric)
    s.symmetric = *o->symmetric;
  if (o->reduce_range.value_or(false) && is_fp8(s.type)) {
    // (The option parser refuses it with an FP8 quant_type; here the type is the spec's.)
    throw config_error("quark.config.value", "TensorQuantOverrides." + name + "[0].reduce_range: " +
                                                 std::string(reduce_range_fp8_why));
  }
  return s;
}

bool static_quantizer::is_float_init(const std::string& n) const {
  if (!inits_.contains(n))
    return false;
  for (const auto& t : proto(m_).graph().initializer()) {
    if (t.name() == n)
      return t.data_type() == 1;
  }
  return false;
}

/// Asks calibration for the range of `name` under `spec` (its overrides applied), once; not for
/// an initializer or a block format, which need none.
void static_quantizer::request(const std::string& name, const tspec& spec) {
  if (name.empty() || inits_.contains(name) || requests_.contains(name))
    return;
  const tspec s = overridden(name, spec);
  if (s.method == qz::act_method::none)
    return;  // a block format (the spec's or an override's) needs no range
  qz::calib_request r;
  r.method = s.method;
  r.type = s.type;
  r.symmetric_range = opt_.calib_range_symmetric.value_or(
      s.method == qz::act_method::percentile || s.method == qz::act_method::pof2_minmax ||
      s.method == qz::act_method::pof2_minmse || s.method == qz::act_method::float_minmse ||
      s.method == qz::act_method::layerwise_percentile);
  requests_.emplace(name, r);
}

/// (b) calibration requests: every non-initializer input / output of a quantized node.
void static_quantizer::request_ranges() {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const node_choice& c = pl_.nodes[i];
    if (!c.quantize || opt_.weights_only)
      continue;
    for (const auto& x : nodes_[i].inputs) {
      if (c.input)
        request(x, *c.input);
    }
    for (const auto& x : nodes_[i].outputs) {
      if (c.output)
        request(x, *c.output);
    }
  }
}

/// The float model as calibration sees it, for the stages that compare against it later (the
/// algorithms and the evaluation). Serialized only when one of them runs: it is a copy of every
/// weight, and calibration's peak memory is what issue 7 bounds.
void static_quantizer::keep_float_model() {
  // GPTQ will have work (a quantized MatMul with a 2-D float weight): the opset must then carry
  // its codes and grid (decided below, when the Q/DQ nodes are in and the float weights gone).
  for (std::size_t i = 0; algos_.gptq && i < nodes_.size() && !gptq_candidates_; ++i) {
    const node_info& n = nodes_[i];
    gptq_candidates_ = pl_.nodes[i].quantize && n.op_type == "MatMul" && n.domain.empty() &&
                       n.inputs.size() == 2 && is_float_init(n.inputs[1]) &&
                       m_.initializer(n.inputs[1]).rank() == 2;
  }
  const bool float_model_later = algos_.finetune || algos_.gptq || algos_.bias_correction ||
                                 algos_.auto_mp || run_.eval_samples > 0 ||
                                 !opt_.eval_metrics.empty();
  if (float_model_later)
    float_bytes_ = m_.to_bytes();
}

const qz::tensor_facts* static_quantizer::facts(const std::string& n) const {
  auto it = value_facts_->find(n);
  return it == value_facts_->end() ? nullptr : &it->second;
}

bool static_quantizer::is_float_act(const std::string& n) const {
  const auto* f = facts(n);
  return f != nullptr && f->type == dtype_id::float32 && !half_values_.contains(n) &&
         !shape_values_.contains(n);
}

/// Quantizes the activation `n` with spec `s` (its overrides applied); `share` names a tensor
/// whose parameters it takes instead of its own range (data-movement outputs), "" for none.
void static_quantizer::mark_act(const std::string& n, const tspec& s, const std::string& share) {
  if (acts_.contains(n))
    return;
  act_entry e;
  e.spec = overridden(n, s);
  e.share_from = share;
  e.from_initializer = inits_.contains(n);
  if (auto it = opt_.overrides.find(n); it != opt_.overrides.end()) {
    const std::string where = "TensorQuantOverrides." + n;
    if (it->second.size() != 1) {
      throw config_error("quark.config.value",
                         where + ": " + std::to_string(it->second.size()) +
                             " entries (per-channel overrides) apply to weights only; an "
                             "activation takes one");
    }
    const tensor_override& o = it->second.front();
    if (o.axis && !e.spec.block) {
      // As in ONNX Runtime's override format, whose checks Quark inherits: an activation's
      // channel count is not known before it runs (a block format's axis is not a channel).
      throw config_error("quark.config.value",
                         where +
                             "[0].axis: per-channel overrides apply to initializers "
                             "(weights) only, not to the activation '" +
                             n + "'");
    }
    e.share_from.clear();  // an overridden tensor gets its own parameters
    e.reduce = o.reduce_range.value_or(false);
    if (o.rmin)
      e.over_min = static_cast<float>(*o.rmin);
    if (o.rmax)
      e.over_max = static_cast<float>(*o.rmax);
    if (o.scale)
      e.fixed = fixed_params(*o.scale, *o.zero_point, e.spec.type, where + "[0]");
  }
  acts_.emplace(n, e);
}

/// (c)-(e) choose what is quantized, in topological order. Needs only the values' types; runs
/// once (select_nodes() twice is a no-op).
void static_quantizer::select_nodes() {
  if (selected_)
    return;
  selected_ = true;
  for (const std::size_t i : topo_)
    select_node(i);
  if (!shape_nodes_.empty()) {
    std::string list;
    for (std::size_t k = 0; k < shape_nodes_.size() && k < 4; ++k)
      list += (k ? ", " : "") + shape_nodes_[k];
    if (shape_nodes_.size() > 4)
      list += ", ...";
    report_.notes.push_back(
        "graph: " + std::to_string(shape_nodes_.size()) +
        (shape_nodes_.size() == 1 ? " node computes" : " nodes compute") +
        " from tensor shapes only and stay" + (shape_nodes_.size() == 1 ? "s" : "") + " float (" +
        list +
        (shape_nodes_.size() == 1 ? "): its values are sizes" : "): their values are sizes") +
        ", which calibration on other input sizes cannot range");
  }
}

/// Node i's activation inputs, weight, bias and outputs (quark-spec §7.3), as its op rule and
/// the options say; counts it as quantized or kept float.
void static_quantizer::select_node(std::size_t i) {
  const node_info& n = nodes_[i];
  const node_choice& c = pl_.nodes[i];
  auto& count = report_.op_types[n.op_type];
  if (!c.quantize) {
    ++count.kept_float;
    return;
  }
  // A node computing sizes (shape_computed_values) stays float, its constants too.
  if (!n.outputs.empty() && std::all_of(n.outputs.begin(), n.outputs.end(), [&](const auto& o) {
        return o.empty() || shape_values_.contains(o);
      })) {
    ++count.kept_float;
    // Named in the note when it makes a float value (a quantizer would have looked at it).
    if (std::any_of(n.outputs.begin(), n.outputs.end(), [&](const auto& o) {
          const auto* f = facts(o);
          return f != nullptr && f->type == dtype_id::float32;
        })) {
      shape_nodes_.push_back(n.op_type + (n.name.empty() ? "" : " '" + n.name + "'"));
    }
    return;
  }
  const op_rule r = rule_for(n.op_type);
  if (n.op_type == "MatMul" && opt_.matmul_const_b_only && !inits_.contains(node_input(n, 1))) {
    ++count.kept_float;
    return;
  }
  if (r.needs_input && !opt_.force_quantize_no_input_check && !acts_.contains(node_input(n, 0))) {
    ++count.kept_float;
    return;
  }
  // Every part runs (no short circuit): each records what it quantizes.
  bool any = select_act_inputs(i, r);
  any = select_weight(i, r) || any;
  any = select_bias(i, r) || any;
  any = select_outputs(i, r) || any;
  node_quantized_[i] = any;
  if (any) {
    ++count.quantized;
  } else {
    ++count.kept_float;
  }
}

/// The activation inputs of node i (constant inputs of element-wise ops included).
bool static_quantizer::select_act_inputs(std::size_t i, const op_rule& r) {
  const node_info& n = nodes_[i];
  const node_choice& c = pl_.nodes[i];
  bool any = false;
  if (c.input && !opt_.weights_only) {
    std::vector<std::size_t> slots = r.act_inputs;
    if (r.all_inputs) {
      slots.clear();
      for (std::size_t k = 0; k < n.inputs.size(); ++k)
        slots.push_back(k);
    }
    if (r.weight >= 0 && !inits_.contains(node_input(n, static_cast<std::size_t>(r.weight)))) {
      slots.push_back(static_cast<std::size_t>(r.weight));  // MatMul / Gemm with activation B
    }
    for (const std::size_t k : slots) {
      const std::string x = node_input(n, k);
      if (x.empty())
        continue;
      if (inits_.contains(x)) {
        if (r.const_inputs && is_float_init(x)) {
          // AlignEltwiseQuantType False (seed 000): in the extended QDQ flow (a type other
          // than int8/uint8) without the NPU flags, the constant input of Mul / Add / Sub /
          // Div / Min / Max is a weight and takes the weight spec; otherwise (and with True)
          // it takes the input_tensors spec.
          // (32-bit weight types have no QuantizeLinear: the constant keeps the input spec.)
          const bool weight_spec = c.weight && eltwise_weight_ops().contains(n.op_type) &&
                                   extended_ && !opt_.align_eltwise_quant_type &&
                                   !opt_.enable_npu_cnn && !opt_.enable_npu_transformer &&
                                   c.weight->type != dtype_id::int32 &&
                                   c.weight->type != dtype_id::uint32;
          tspec s = weight_spec ? *c.weight : *c.input;
          s.per_channel = false;
          mark_act(x, s, "");
          acts_.at(x).weight_like = weight_spec;
          any = true;
        }
      } else if (is_float_act(x)) {
        mark_act(x, *c.input, "");
        any = true;
      }
    }
  }
  return any;
}

/// The weight of node i: its spec, axis (per channel) or groups, and overrides.
bool static_quantizer::select_weight(std::size_t i, const op_rule& r) {
  const node_info& n = nodes_[i];
  const node_choice& c = pl_.nodes[i];
  bool any = false;
  if (r.weight >= 0 && c.weight) {
    const std::string w = node_input(n, static_cast<std::size_t>(r.weight));
    if (is_float_init(w)) {
      const_entry e;
      e.name = w;
      e.node = i;
      e.slot = static_cast<std::size_t>(r.weight);
      e.spec = *c.weight;
      e.type = c.weight->type;
      // A normalization's scale has no reduction axis: Group falls back to per tensor, as
      // for a bias.
      if (n.op_type == "InstanceNormalization" || n.op_type == "LayerNormalization")
        e.spec.group_size = 0;
      const auto ov = opt_.overrides.find(w);
      if (e.spec.per_channel || (ov != opt_.overrides.end() && e.spec.group_size == 0)) {
        std::int64_t axis = 0;
        if (n.op_type == "ConvTranspose" || n.op_type == "MatMul")
          axis = 1;
        if (n.op_type == "Gemm")
          axis = gemm_trans_b(n) ? 0 : 1;
        if (auto it = opt_.per_channel_axis.find(n.op_type); it != opt_.per_channel_axis.end()) {
          axis = it->second;
        }
        if (c.weight->axis)
          axis = *c.weight->axis;
        e.axis = c.weight->per_channel ? axis : -1;
        if (ov != opt_.overrides.end()) {
          // TensorQuantOverrides on a weight: type, symmetry, axis (per channel), and one
          // entry per channel for per-channel scales / zero points.
          const tensor_override& o = ov->second.front();
          e.spec = overridden(w, e.spec, true);
          e.type = e.spec.type;
          if (o.axis && *o.axis < 0 && !e.spec.block) {
            throw config_error("quark.config.value", "TensorQuantOverrides." + w +
                                                         "[0].axis: must be >= 0, got " +
                                                         std::to_string(*o.axis));
          }
          if (e.spec.block)
            e.axis = -1;  // a fused node: its axis is the block axis, in the spec
          else if (o.axis)
            e.axis = *o.axis;
          else if (ov->second.size() > 1)
            e.axis = axis;
        }
      } else if (e.spec.group_size > 0) {
        if (ov != opt_.overrides.end()) {
          // Its type and symmetry: the groups stay (a block format or a Cast replaces
          // them below). ONNX Runtime's format has no per-group entries, so no scale,
          // zero point, range or axis.
          const std::string where = "TensorQuantOverrides." + w;
          const tensor_override& o = ov->second.front();
          if (ov->second.size() > 1 || o.axis || o.scale || o.rmin || o.rmax || o.reduce_range) {
            throw config_error("quark.config.value",
                               where +
                                   ": a group-quantized weight takes one entry with "
                                   "quant_type and symmetric only (its per-group scales "
                                   "have no override format)");
          }
          e.spec = overridden(w, e.spec, true);
          e.type = e.spec.type;
          if (is_fp8(e.type)) {
            // As for the specs (config validation: Group needs an integer spec).
            throw config_error("quark.config.value",
                               where + ": quant_type " + std::string(to_string(*o.quant_type)) +
                                   " on a group-quantized weight: Group granularity needs "
                                   "an integer type (or QFloat16 / QBFloat16 / QBFP / QMX, "
                                   "which replace the groups)");
          }
        }
        // Groups run along the reduction (input-channel) axis, the one MatMulNBits and ONNX
        // blocked DequantizeLinear block: Conv 1, ConvTranspose 0, MatMul 0, Gemm transB ? 1 :
        // 0.
        std::int64_t axis = 1;
        if (n.op_type == "ConvTranspose" || n.op_type == "MatMul")
          axis = 0;
        if (n.op_type == "Gemm")
          axis = gemm_trans_b(n) ? 1 : 0;
        if (c.weight->axis)
          axis = *c.weight->axis;
        e.axis = axis;
        e.block = e.spec.group_size;
        if (e.spec.block) {  // an override's block format: one fused node, no groups
          e.axis = -1;
          e.block = 0;
        }
      }
      if (is_fp16(e.type)) {
        e.axis = -1;  // BFloat16 / Float16 weights are a per-tensor cast (scale 1 or one scale)
        e.block = 0;
      }
      consts_.push_back(std::move(e));
      any = true;
    }
  }
  return any;
}

/// The bias of node i: int32 from the input and weight scales, or its own scale.
bool static_quantizer::select_bias(std::size_t i, const op_rule& r) {
  const node_info& n = nodes_[i];
  const node_choice& c = pl_.nodes[i];
  bool any = false;
  const std::string bias_name = r.bias >= 0 ? node_input(n, static_cast<std::size_t>(r.bias)) : "";
  const auto bias_ov = opt_.overrides.find(bias_name);
  // A bias quantized as a weight of `spec`: its own scale from its own values.
  auto own_bias = [&](const tspec& spec) {
    const_entry e;
    e.name = bias_name;
    e.node = i;
    e.slot = static_cast<std::size_t>(r.bias);
    e.is_bias = true;
    e.own_params = true;
    e.spec = spec;
    e.spec.group_size = 0;
    e.type = e.spec.type;
    return e;
  };
  if (c.weight && bias_ov != opt_.overrides.end() && is_float_init(bias_name)) {
    // A bias with TensorQuantOverrides is quantized as a weight of the weight spec with the
    // override applied, its own scale from its own values, and no int32 input x weight
    // scale (Quark's QDQQuantizer.quantize_bias_tensor, whose override branch comes before
    // the QuantizeBias check). Per tensor, unless the entry gives an axis or there is one
    // entry per element (axis 0): ONNX Runtime's is_tensor_per_channel with default axis 0.
    const std::string& b = bias_name;
    const tensor_override& o = bias_ov->second.front();
    const_entry e = own_bias(overridden(b, *c.weight, true));
    if (o.axis && *o.axis < 0 && !e.spec.block) {
      throw config_error(
          "quark.config.value",
          "TensorQuantOverrides." + b + "[0].axis: must be >= 0, got " + std::to_string(*o.axis));
    }
    if (!e.spec.block && !is_fp16(e.type)) {
      if (o.axis)
        e.axis = *o.axis;
      else if (bias_ov->second.size() > 1)
        e.axis = 0;
    }
    e.spec.per_channel = e.axis >= 0;
    consts_.push_back(std::move(e));
    any = true;
  } else if (r.bias_as_weight && c.weight && is_float_init(bias_name)) {
    // LayerNormalization: Quark's QDQLayerNorm quantizes the bias with quantize_weight_tensor,
    // so it is a weight of the weight spec with its own scale, per tensor, whatever
    // QuantizeBias, Int32Bias and a bias spec say.
    const_entry e = own_bias(*c.weight);
    e.spec.per_channel = false;
    consts_.push_back(std::move(e));
    any = true;
  } else if (r.bias >= 0 && opt_.quantize_bias && c.weight) {
    const std::string& b = bias_name;
    if (is_float_init(b)) {
      const_entry e;
      e.name = b;
      e.node = i;
      e.slot = static_cast<std::size_t>(r.bias);
      e.is_bias = true;
      e.spec = c.bias ? *c.bias : *c.weight;
      e.spec.group_size = 0;  // a bias has no reduction axis: Group falls back to per tensor
      e.type = (opt_.int32_bias && !c.bias) ? dtype_id::int32 : e.spec.type;
      consts_.push_back(std::move(e));
    }
  }
  return any;
}

/// The outputs of node i, unless their quantization is excluded.
bool static_quantizer::select_outputs(std::size_t i, const op_rule& r) {
  const node_info& n = nodes_[i];
  const node_choice& c = pl_.nodes[i];
  bool any = false;
  const bool out_excluded = opt_.op_types_to_exclude_output.contains(n.op_type) ||
                            opt_.nodes_to_exclude_output.contains(n.name);
  if (c.output && !out_excluded && !opt_.weights_only) {
    tspec out_spec = *c.output;
    // UseUnsignedReLU (seed 000): the outputs of Relu and of Clip with min 0 are asymmetric.
    if (opt_.use_unsigned_relu && relu_like(m_, n))
      out_spec.symmetric = false;
    for (const auto& o : n.outputs) {
      if (!is_float_act(o))
        continue;
      mark_act(o, out_spec,
               r.shares_output && acts_.contains(node_input(n, 0)) ? node_input(n, 0) : "");
      any = true;
    }
  }
  return any;
}

void static_quantizer::calibrate() {
  qz::calib_params cp;
  cp.percentile = opt_.percentile;
  cp.num_bins = opt_.num_bins_explicit;
  cp.num_quantized_bins = opt_.num_quantized_bins;
  cp.moving_average = opt_.moving_average;
  cp.moving_average_constant = opt_.moving_average_constant;
  cp.percentile_candidates = opt_.percentile_candidates;
  cp.lwp_mse = opt_.lwp_mse;
  cp.minmse_most_common = opt_.minmse_most_common;
  if (opt_.save_and_restore)
    cp.ranges_file = *opt_.save_and_restore;
  cp.max_samples = opt_.calib_data_size;
  cp.keep_histograms = opt_.save_tensor_hist_fig;
  // Block specs need no range: when nothing else does, one sample gives the tensor types.
  if (opt_.any_block && requests_.empty())
    cp.max_samples = 1;
  cp.progress = run_.progress;
  name_single_input(m_, reader_);
  // TensorsRangeFile: the tensors it covers are not calibrated; their ranges come from the file.
  if (opt_.tensors_range_file) {
    std::set<std::string> values;
    for (const auto& gi : m_.inputs())
      values.insert(gi.name);
    for (const auto& n : nodes_)
      values.insert(n.outputs.begin(), n.outputs.end());
    file_ranges_ = qz::load_range_file(*opt_.tensors_range_file, values);
    bool covers_all = true;
    for (auto it = requests_.begin(); it != requests_.end();) {
      if (file_ranges_.contains(it->first)) {
        it = requests_.erase(it);
      } else {
        covers_all = false;
        ++it;
      }
    }
    // One inference still gives every value's type and shape.
    if (covers_all && !opt_.save_and_restore)
      cp.max_samples = 1;
  }
  // The act selection needs only the values' types, which the first calibration sample gives:
  // it runs then, and the requested tensors whose own range the range stage never reads
  // (unneeded_ranges: Clip / Relu inputs, Softmax outputs, tensors sharing another's
  // parameters, tensors left float) are observed no further. QUARK_CALIB_OBSERVE_ALL set: all
  // are, for comparison. All are also where an own range is read elsewhere: ranges copied
  // along producers (CalibPassthroughOpTypes), the SaveAndRestore file and the SaveTensorHistFig
  // histograms (every requested tensor), EnableDualQuantNodePairs' second stage.
  if (std::getenv("QUARK_CALIB_OBSERVE_ALL") == nullptr && opt_.calib_passthrough.empty() &&
      !opt_.save_and_restore && !opt_.save_tensor_hist_fig && !opt_.enable_dual_quant_node_pairs) {
    cp.after_first_sample = [&](const std::map<std::string, qz::tensor_facts>& first) {
      value_facts_ = &first;
      select_nodes();
      dropped_ = unneeded_ranges(requests_, acts_,
                                 range_rules(users_, nodes_, topo_, node_quantized_, acts_), opt_);
      std::set<std::string> names;
      for (const auto& [name, why] : dropped_)
        names.insert(name);
      return names;
    };
  }
  // QUARK_CALIB_PROFILE: the calibration phases on stderr; CryptoMode blocks every message.
  cp.profile = std::getenv("QUARK_CALIB_PROFILE") != nullptr && !opt_.crypto_mode;
  // QUARK_CALIB_BACKGROUND=0: observe in place instead of on a background thread (the same
  // statistics and bytes; for comparison and measurement).
  if (const char* b = std::getenv("QUARK_CALIB_BACKGROUND");
      b != nullptr && std::string_view(b) == "0")
    cp.background = false;
  // QUARK_CALIB_FUSE=0: observe whole values after their node instead of the chunks a kernel
  // streams (the same statistics and bytes; for comparison and measurement).
  if (const char* f = std::getenv("QUARK_CALIB_FUSE"); f != nullptr && std::string_view(f) == "0")
    cp.fuse = false;
  // QUARK_CALIB_LUMP=0: every Percentile histogram count exact (the same ranges and bytes; for
  // comparison and measurement).
  if (const char* l = std::getenv("QUARK_CALIB_LUMP"); l != nullptr && std::string_view(l) == "0")
    cp.lump = false;
  // QUARK_CALIB_DERIVE=0: bin every histogram from its own values (the same statistics and
  // bytes; for comparison and measurement).
  if (const char* d = std::getenv("QUARK_CALIB_DERIVE"); d != nullptr && std::string_view(d) == "0")
    cp.derive = false;
  try {
    cal_ = qz::calibrate(m_, requests_, reader_, cp);
  } catch (const frontend_error& e) {
    // Non-finite activations usually come from a non-finite weight or bias: name it.
    if (e.id().starts_with("quark.calib.")) {
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        for (std::size_t k = 1; k < nodes_[i].inputs.size(); ++k) {
          const std::string& x = nodes_[i].inputs[k];
          if (!is_float_init(x))
            continue;
          const tensor t = m_.initializer(x);
          const std::string bad = qz::non_finite_values(
              t.data<float>(), node_label(proto(m_).graph().node(static_cast<int>(i)), i), x,
              "initializer");
          if (!bad.empty()) {
            throw frontend_error("quark.quantize.non_finite",
                                 bad + " (calibration failed: " + e.message() + ")");
          }
        }
      }
    }
    throw;
  }
  value_facts_ = &cal_.tensors;
  select_nodes();
  if (opt_.save_tensor_hist_fig)
    save_tensor_hists(cal_, requests_, report_);
  if (!dropped_.empty()) {
    std::map<unneeded, std::size_t> n;
    for (const auto& [name, why] : dropped_)
      ++n[why];
    const std::size_t derived = dropped_.size() - n[unneeded::not_quantized];
    std::string note = "calibration: " + std::to_string(requests_.size() - dropped_.size()) +
                       " tensors observed after the first sample";
    if (derived > 0) {
      note += "; " + std::to_string(derived) + " take their range from another (" +
              std::to_string(n[unneeded::clip_input]) + " Clip / Relu inputs, " +
              std::to_string(n[unneeded::shared]) + " data-movement outputs";
      if (n[unneeded::softmax] > 0)
        note += ", " + std::to_string(n[unneeded::softmax]) + " Softmax outputs";
      note += ")";
    }
    if (n[unneeded::not_quantized] > 0)
      note += "; " + std::to_string(n[unneeded::not_quantized]) + " left float";
    report_.notes.push_back(note);
  }
  for (const auto& [name, r] : file_ranges_) {
    auto it = cal_.tensors.find(name);
    if (it == cal_.tensors.end() || it->second.type != dtype_id::float32) {
      throw frontend_error("quark.calib.range_file",
                           "TensorsRangeFile '" + *opt_.tensors_range_file + "': tensor '" + name +
                               "' is not a float32 activation of the model");
    }
    qz::tensor_facts& f = it->second;
    f.calibrated = true;
    f.rmin = r.rmin;
    f.rmax = r.rmax;
    f.pof2_position = r.pof2_position;
    f.std_dev = 0.0;
    f.warnings.clear();
  }
  if (!file_ranges_.empty()) {
    report_.notes.push_back("calibration: " + std::to_string(file_ranges_.size()) +
                            " ranges from TensorsRangeFile '" + *opt_.tensors_range_file + "'");
  }
  report_.calibration_samples = cal_.samples;
}

/// Ranges: calibrated; initializer activations from their values; then the rules that replace
/// them.
void static_quantizer::assign_ranges() {
  for (auto& [name, e] : acts_) {
    if (e.from_initializer) {
      const tensor t = m_.initializer(name);
      const auto v = t.data<float>();
      e.rmin = v.empty() ? 0.0f : *std::min_element(v.begin(), v.end());
      e.rmax = v.empty() ? 0.0f : *std::max_element(v.begin(), v.end());
      e.std_dev = qz::population_std(v);
      // A constant input quantized with a power-of-two MinMSE spec (XINT8's Mul / Add scalars)
      // goes through Quark's quantize_data like a weight (quark-spec §7.3, §4.8): the
      // five-candidate search on its values, not the nearest power of two of its range, which
      // clips a lone value by up to sqrt(2). It starts from the min/max scale and zero point
      // (the same ones params_of computes below, so an asymmetric spec keeps its zero point)
      // and clips as quantize_nparray does (§1.3).
      // With UsePowerOf2Scale = false (pof2_method_float_scale) the search still runs, as
      // quantize_data's does, from the same start: the float scale's nearest power of two and
      // its zero point, which the power-of-two rounding leaves unchanged (quark-spec §3.1).
      if ((e.spec.pof2 || e.spec.pof2_method_float_scale) &&
          e.spec.method == qz::act_method::pof2_minmse && !v.empty()) {
        const qp g = qz::qparams_for(e.spec.type, qz::scale_choice{.pof2 = true}, e.spec.symmetric,
                                     e.rmin, e.rmax, true, name, e.reduce);
        e.pof2_position =
            pof2_minmse_search(v, int_grid{g.qmin, g.qmax}, -std::ilogb(g.scale), g.zero_point)
                .pof2_position;
      }
    } else if (const auto* f = facts(name)) {
      e.rmin = f->rmin;
      e.rmax = f->rmax;
      e.std_dev = f->std_dev;
      e.pof2_position = f->pof2_position;
      for (const auto& w : f->warnings)
        report_.notes.push_back("calibration of '" + name + "': " + w);
    }
  }
  // CalibPassthroughOpTypes (quark-spec §4): the outputs of these op types copy the range of
  // their input 0, hence of the nearest ancestor that is not a passthrough op (topological order).
  if (!opt_.calib_passthrough.empty()) {
    std::map<std::string, std::pair<float, float>> range;
    for (const auto& [name, f] : cal_.tensors)
      range[name] = {f.rmin, f.rmax};
    for (const std::size_t i : topo_) {
      const node_info& n = nodes_[i];
      if (!opt_.calib_passthrough.contains(n.op_type) || n.inputs.empty())
        continue;
      auto src = range.find(n.inputs[0]);
      if (src == range.end())
        continue;
      const auto r = src->second;
      for (const auto& o : n.outputs) {
        range[o] = r;
        if (auto it = acts_.find(o); it != acts_.end() && !it->second.from_initializer)
          std::tie(it->second.rmin, it->second.rmax) = r;
      }
    }
  }
  // quark-spec §3.5: a quantized Clip/Relu whose input has one consumer gives the input its
  // output range; a quantized Softmax output is [0, 1] (range_rules, the rules unneeded_ranges
  // replayed to decide what calibration keeps observing).
  for (const range_rule& r : range_rules(users_, nodes_, topo_, node_quantized_, acts_)) {
    act_entry& t = acts_.at(r.target);
    if (r.from.empty()) {
      t.rmin = 0.0f;
      t.rmax = 1.0f;
      t.pof2_position.reset();
    } else {
      const act_entry& f = acts_.at(r.from);
      t.rmin = f.rmin;
      t.rmax = f.rmax;
      t.pof2_position = f.pof2_position;
    }
  }
  // TensorQuantOverrides rmin / rmax replace the range.
  for (auto& [name, e] : acts_) {
    if (e.over_min)
      e.rmin = *e.over_min;
    if (e.over_max)
      e.rmax = *e.over_max;
  }
}

const qp& static_quantizer::params_of(const std::string& name) {
  act_entry& e = acts_.at(name);
  if (!e.done) {
    e.done = true;
    if (e.spec.block) {
      // A fused block node: no scale or zero point.
    } else if (e.fixed) {
      e.params = *e.fixed;
    } else if (!e.share_from.empty() && acts_.contains(e.share_from)) {
      e.params = params_of(e.share_from);
      const act_entry& src = acts_.at(e.share_from);
      e.rmin = src.rmin;
      e.rmax = src.rmax;
      e.spec.type = src.spec.type;  // the same quantization, so the same type
      if (src.spec.block)
        e.spec = src.spec;  // (a block format from an override: the same fused node)
    } else if (e.spec.method == qz::act_method::distribution) {
      e.params = qz::fp8_qparams_from_std(e.spec.type, e.std_dev, name);
    } else {
      e.params = qz::qparams_for(e.spec.type, scale_choice_for(e.spec), e.spec.symmetric, e.rmin,
                                 e.rmax, e.weight_like, name, e.reduce);
      // The calibrator searched the power-of-two scale itself (unless an override replaced
      // the range).
      // (UsePowerOf2Scale = false: a calibrated tensor's float scale comes from the searched
      // range above; an initializer searched like a weight keeps the power of two, §4.8.)
      if ((e.spec.pof2 || (e.spec.pof2_method_float_scale && e.from_initializer)) &&
          e.pof2_position && !e.over_min && !e.over_max)
        e.params.scale = std::ldexp(1.0f, -*e.pof2_position);
    }
  }
  return e.params;
}

/// NPULimitationCheck's Align* rules (quark-spec §9.3, §9.4), on the activation parameters
/// before weights and biases are quantized, so an int32 bias scale is the aligned input scale x
/// the weight scale (what AdjustBiasScale would restore afterwards in Quark). With power-of-two
/// scales on both sides the positions are aligned as Quark's QuantPosManager does (Concat: every
/// input and the output take the smallest position, i.e. the largest scale; a pool, Pad or Slice:
/// input 0 and the output take the smaller of their two positions); otherwise scale and zero
/// point are copied as its QuantInfoManager does (Concat, Pad, Transpose, Reshape: the output's to
/// every input; a pool or Slice: input 0's to every output), between tensors of one type. A
/// tensor whose parameters come from another one (shared, e.g. a data-movement output) is aligned
/// through that one; TensorQuantOverrides' fixed scales and block formats are left as they are.
/// At most MaxLoopNum passes, each over the rules in Quark's order.
void static_quantizer::align_params() {
  const auto& rules = opt_.align;
  if (!rules.any())
    return;
  auto entry = [&](const std::string& t) { return aligned_entry(t); };
  auto position = [](const act_entry& e) { return pof2_position_of(e.params.scale); };
  std::size_t changes = 0;
  bool changed = true;
  auto set_position = [&](act_entry& e, int pos) {
    const float s = pof2_scale_at(pos);
    if (e.params.scale != s) {
      e.params.scale = s;
      changed = true;
      ++changes;
    }
  };
  auto copy = [&](const act_entry& from, act_entry& to) {
    if (&from == &to || from.spec.type != to.spec.type)
      return;
    if (to.params.scale != from.params.scale || to.params.zero_point != from.params.zero_point) {
      to.params.scale = from.params.scale;
      to.params.zero_point = from.params.zero_point;
      changed = true;
      ++changes;
    }
  };
  // Input 0 of a pool: through the node before it when that one is not quantized (Quark's
  // get_ipos_name looks through one node for average pools).
  auto pool_input = [&](const node_info& n) -> act_entry* {
    if (n.inputs.empty())
      return nullptr;
    if (act_entry* e = entry(n.inputs[0]))
      return e;
    if (n.op_type == "MaxPool")
      return nullptr;
    auto p = producer_.find(n.inputs[0]);
    if (p == producer_.end() || nodes_[p->second].inputs.empty())
      return nullptr;
    return entry(nodes_[p->second].inputs[0]);
  };
  auto out_to_inputs = [&](const std::set<std::string>& ops) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const node_info& n = nodes_[i];
      if (!ops.contains(n.op_type) || !node_quantized_[i] || n.outputs.empty())
        continue;
      act_entry* out = entry(n.outputs[0]);
      if (out == nullptr)
        continue;
      std::vector<act_entry*> ins;
      const std::size_t k = n.op_type == "Concat" ? n.inputs.size() : 1;
      for (std::size_t j = 0; j < k && j < n.inputs.size(); ++j) {
        if (act_entry* e = entry(n.inputs[j]))
          ins.push_back(e);
      }
      if (out->spec.pof2 &&
          std::all_of(ins.begin(), ins.end(), [](const act_entry* e) { return e->spec.pof2; })) {
        int low = position(*out);
        for (const act_entry* e : ins)
          low = std::min(low, position(*e));
        set_position(*out, low);
        for (act_entry* e : ins)
          set_position(*e, low);
      } else {
        for (act_entry* e : ins) {
          if (!e->spec.pof2 && !out->spec.pof2)
            copy(*out, *e);
        }
      }
    }
  };
  auto input_to_outputs = [&](const std::set<std::string>& ops) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const node_info& n = nodes_[i];
      if (!ops.contains(n.op_type) || !node_quantized_[i])
        continue;
      act_entry* in =
          n.op_type == "Slice" ? (n.inputs.empty() ? nullptr : entry(n.inputs[0])) : pool_input(n);
      if (in == nullptr)
        continue;
      for (const auto& o : n.outputs) {
        act_entry* out = entry(o);
        if (out == nullptr)
          continue;
        if (in->spec.pof2 && out->spec.pof2) {
          const int low = std::min(position(*in), position(*out));
          set_position(*in, low);
          set_position(*out, low);
        } else if (!in->spec.pof2 && !out->spec.pof2) {
          copy(*in, *out);
        }
      }
    }
  };
  // The Adjust* rules (quark-spec §9.3), on power-of-two positions only.
  auto pentry = [&](const std::string& t) -> act_entry* {
    act_entry* e = entry(t);
    return e != nullptr && e->spec.pof2 ? e : nullptr;
  };
  std::map<std::size_t, const_entry*> weight_at;  // per-tensor power-of-two weights by node
  for (auto& e : consts_) {
    if (!e.is_bias && e.slot == 1 && e.scale.size() == 1 && e.spec.pof2 && e.block == 0)
      weight_at[e.node] = &e;
  }
  std::set<const_entry*> moved;
  auto set_weight_position = [&](const_entry& w, int pos) {
    const float s = pof2_scale_at(pos);
    if (w.scale[0] != s) {
      w.scale[0] = s;
      moved.insert(&w);
      changed = true;
      ++changes;
    }
  };
  auto inputs_of = [&](const node_info& n, std::vector<act_entry*>& out) {
    out.clear();
    for (const auto& x : n.inputs) {
      act_entry* e = pentry(x);
      if (e == nullptr)
        return false;
      out.push_back(e);
    }
    return !out.empty();
  };
  auto quantized_op = [&](std::size_t i, std::initializer_list<std::string_view> ops) {
    return node_quantized_[i] &&
           std::find(ops.begin(), ops.end(), std::string_view(op_of(i))) != ops.end();
  };
  std::vector<act_entry*> ins;
  // shift_read: the inputs of an Add / Sub are at most 7 positions apart.
  auto shift_read = [&] {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (!quantized_op(i, {"Add", "Sub"}) || !inputs_of(nodes_[i], ins))
        continue;
      auto by_pos = [&](const act_entry* a, const act_entry* b) {
        return position(*a) < position(*b);
      };
      act_entry* hi = *std::max_element(ins.begin(), ins.end(), by_pos);
      const int lo = position(**std::min_element(ins.begin(), ins.end(), by_pos));
      if (position(*hi) - lo > 7)
        set_position(*hi, lo + 7);
    }
  };
  // shift_write: Add min(ipos) - opos in [-7, 25]; Mul sum(ipos) - opos in [0, 32].
  auto shift_write = [&] {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (!quantized_op(i, {"Add", "Mul"}) || !inputs_of(nodes_[i], ins))
        continue;
      act_entry* out = output_entry(i);
      if (out == nullptr)
        continue;
      const bool add = nodes_[i].op_type == "Add";
      int base = add ? position(*ins.front()) : 0;
      for (const act_entry* e : ins)
        base = add ? std::min(base, position(*e)) : base + position(*e);
      const int sw = base - position(*out);
      const int clamped = add ? std::clamp(sw, -7, 25) : std::clamp(sw, 0, 32);
      if (sw != clamped)
        set_position(*out, base - clamped);
    }
  };
  // shift_cut: wpos + ipos - opos of a Conv / Gemm in [0, 16], by moving the weight.
  auto shift_cut = [&] {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      auto w = weight_at.find(i);
      if (w == weight_at.end() || !quantized_op(i, {"Conv", "Gemm"}) || nodes_[i].inputs.empty())
        continue;
      act_entry* in = pentry(nodes_[i].inputs[0]);
      act_entry* out = output_entry(i);
      if (in == nullptr || out == nullptr)
        continue;
      const int sc = pof2_position_of(w->second->scale[0]) + position(*in) - position(*out);
      const int clamped = std::clamp(sc, 0, 16);
      if (sc != clamped)
        set_weight_position(*w->second, clamped + position(*out) - position(*in));
    }
  };
  // HardSigmoid(1/6, 0.5): ipos in [0, 15], opos >= 7, 14 + ipos - opos > 0.
  auto hard_sigmoid = [&] {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const node_info& n = nodes_[i];
      if (!quantized_op(i, {"HardSigmoid"}) || !dpu_hard_sigmoid(i) || n.inputs.empty())
        continue;
      act_entry* in = pentry(n.inputs[0]);
      act_entry* out = output_entry(i);
      if (in == nullptr || out == nullptr)
        continue;
      const int ipos = std::clamp(position(*in), 0, 15);
      int opos = std::max(position(*out), 7);
      if (14 + ipos - opos <= 0)
        opos = 14 + ipos;
      set_position(*in, ipos);
      set_position(*out, opos);
    }
  };
  // swish (x * HardSigmoid(x)): ipos0 + ipos1 - opos in [0, 15].
  std::set<std::string> hard_sigmoid_inputs;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (dpu_hard_sigmoid(i) && !nodes_[i].inputs.empty())
      hard_sigmoid_inputs.insert(nodes_[i].inputs[0]);
  }
  auto shift_swish = [&] {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const node_info& n = nodes_[i];
      if (!quantized_op(i, {"Mul"}) || n.inputs.size() != 2 ||
          (!hard_sigmoid_inputs.contains(n.inputs[0]) &&
           !hard_sigmoid_inputs.contains(n.inputs[1])) ||
          !inputs_of(n, ins))
        continue;
      act_entry* out = output_entry(i);
      if (out == nullptr)
        continue;
      const int sum = position(*ins[0]) + position(*ins[1]);
      const int sh = sum - position(*out);
      if (sh != std::clamp(sh, 0, 15))
        set_position(*out, sum - std::clamp(sh, 0, 15));
    }
  };
  int loops = 0;
  while (changed && loops < rules.max_loops) {
    changed = false;
    ++loops;
    if (rules.concat)
      out_to_inputs({"Concat"});
    if (rules.pool)
      input_to_outputs({"MaxPool", "AveragePool", "GlobalAveragePool"});
    if (rules.pad)
      out_to_inputs({"Pad"});
    if (rules.slice)
      input_to_outputs({"Slice"});
    if (rules.transpose)
      out_to_inputs({"Transpose"});
    if (rules.reshape)
      out_to_inputs({"Reshape"});
    if (rules.shift_read)
      shift_read();
    if (rules.shift_write)
      shift_write();
    if (rules.shift_cut)
      shift_cut();
    if (rules.hard_sigmoid)
      hard_sigmoid();
    if (rules.shift_swish)
      shift_swish();
  }
  for (const_entry* w : moved)
    requantize(*w);
  // Entries that share another one's parameters follow it again.
  for (auto& [name, e] : acts_) {
    if (e.share_from.empty() || !acts_.contains(e.share_from) || e.spec.block || e.fixed)
      continue;
    const act_entry& r = acts_.at(shared_root(name));
    e.params.scale = r.params.scale;
    e.params.zero_point = r.params.zero_point;
  }
  if (changes > 0) {
    report_.notes.push_back("NPULimitationCheck: " + std::to_string(changes) +
                            " scale change(s) in " + std::to_string(loops) +
                            " pass(es) (Align* / Adjust* rules)" +
                            (changed ? "; MaxLoopNum reached before the rules agreed" : ""));
  }
}

/// Node i's op type as SimulateDPU leaves it (a converted Sigmoid is a HardSigmoid).
const std::string& static_quantizer::op_of(std::size_t i) const {
  static const std::string hard_sigmoid = "HardSigmoid";
  auto it = dpu_.edits.find(i);
  return it != dpu_.edits.end() && it->second.to_hard_sigmoid ? hard_sigmoid : nodes_[i].op_type;
}

/// Node i is (or SimulateDPU makes it) the DPU's HardSigmoid(1/6, 0.5).
bool static_quantizer::dpu_hard_sigmoid(std::size_t i) const {
  auto it = dpu_.edits.find(i);
  return (it != dpu_.edits.end() && it->second.to_hard_sigmoid) ||
         qz::is_dpu_hard_sigmoid(nodes_[i]);
}

/// The activation whose parameters `t` (an activation) takes, following share_from to its end.
std::string static_quantizer::shared_root(std::string t) const {
  for (std::size_t k = 0; k <= acts_.size(); ++k) {
    const act_entry& e = acts_.at(t);
    if (e.share_from.empty() || !acts_.contains(e.share_from))
      break;
    t = e.share_from;
  }
  return t;
}

/// The entry whose parameters activation `t` uses (through shared ones), when they may be aligned
/// (not a block format, not fixed by TensorQuantOverrides, not an Int16 scale).
act_entry* static_quantizer::aligned_entry(const std::string& t) {
  if (t.empty() || !acts_.contains(t))
    return nullptr;
  act_entry& e = acts_.at(shared_root(t));
  if (e.spec.block || e.fixed || e.spec.int16_scale)
    return nullptr;
  return &e;
}

/// The power-of-two entry of node i's output as the NPU sees it: through a following activation
/// whose Q/DQ pair between the two is removed (RemoveQDQConvRelu and friends), as Quark's
/// get_opos_name looks through it.
act_entry* static_quantizer::output_entry(std::size_t i) {
  const node_info& n = nodes_[i];
  if (n.outputs.empty())
    return nullptr;
  const std::string& o = n.outputs[0];
  auto r = readers_.find(o);
  if (r != readers_.end() && r->second.size() == 1 && !graph_outputs_.contains(o) &&
      !nodes_[r->second.front()].outputs.empty() &&
      remove_between_.contains({n.op_type, nodes_[r->second.front()].op_type})) {
    act_entry* e = aligned_entry(nodes_[r->second.front()].outputs[0]);
    return e != nullptr && e->spec.pof2 ? e : nullptr;
  }
  act_entry* e = aligned_entry(o);
  return e != nullptr && e->spec.pof2 ? e : nullptr;
}

/// Quantizes a per-tensor weight or bias again after NPULimitationCheck moved its scale.
void static_quantizer::requantize(const_entry& e) {
  const tensor w = m_.initializer(e.name);
  const qp g = qz::qparams_for(e.type, scale_choice_for(e.spec), e.spec.symmetric, e.rmin, e.rmax,
                               true, e.name, false);
  e.q = quantize_values(w, e.type, e.scale, e.zp, -1, g.qmin, g.qmax, 0);
}

/// AdjustShiftBias (quark-spec §9.3) for the biases quantized with a power-of-two position of
/// their own (Int32Bias false, as in XINT8): wpos + ipos - bpos in [min(0, shift_cut - 16), 15]
/// (the minimum is 0 when a LeakyRelu reads the output), by moving the bias. The other rules do
/// not read bias positions, so one pass after them gives what Quark's loop converges to.
void static_quantizer::adjust_bias_positions() {
  if (!opt_.align.shift_bias)
    return;
  std::map<std::size_t, const_entry*> weight_at, bias_at;
  for (auto& e : consts_) {
    if (e.scale.size() != 1 || !e.spec.pof2 || e.block != 0 || e.product_scale)
      continue;
    (e.is_bias ? bias_at : weight_at)[e.node] = &e;
  }
  std::size_t changes = 0;
  for (const auto& [i, b] : bias_at) {
    const node_info& n = nodes_[i];
    auto w = weight_at.find(i);
    if (w == weight_at.end() || !node_quantized_[i] || (n.op_type != "Conv" && n.op_type != "Gemm"))
      continue;
    act_entry* in = n.inputs.empty() ? nullptr : aligned_entry(n.inputs[0]);
    act_entry* out = output_entry(i);
    if (in == nullptr || !in->spec.pof2 || out == nullptr)
      continue;
    const int wpos = pof2_position_of(w->second->scale[0]);
    const int ipos = pof2_position_of(in->params.scale);
    const int sc = wpos + ipos - pof2_position_of(out->params.scale);
    int lo = std::min(0, sc - 16);
    if (auto r = readers_.find(n.outputs[0]); r != readers_.end()) {
      for (const std::size_t j : r->second) {
        if (nodes_[j].op_type == "LeakyRelu" && nodes_[j].inputs[0] == n.outputs[0])
          lo = 0;
      }
    }
    const int sb = wpos + ipos - pof2_position_of(b->scale[0]);
    const int clamped = std::clamp(sb, lo, 15);
    if (sb != clamped) {
      b->scale[0] = pof2_scale_at(wpos + ipos - clamped);
      requantize(*b);
      ++changes;
    }
  }
  if (changes > 0) {
    report_.notes.push_back("NPULimitationCheck: " + std::to_string(changes) +
                            " bias position(s) moved (AdjustShiftBias)");
  }
}

void static_quantizer::quantize_constant(const_entry& e) {
  const tensor w = m_.initializer(e.name);
  const auto v = w.data<float>();
  // A quantized weight or bias must be finite: NaN has no code (QuantizeLinear maps it to
  // the zero point, so the model would silently compute something else) and +-Inf no scale.
  if (const std::string bad = qz::non_finite_values(
          v, node_label(proto(m_).graph().node(static_cast<int>(e.node)), e.node), e.name,
          e.is_bias ? "bias" : "weight");
      !bad.empty()) {
    throw frontend_error("quark.quantize.non_finite",
                         bad + ": a quantized weight or bias must be finite");
  }
  e.rmin = v.empty() ? 0.0f : *std::min_element(v.begin(), v.end());
  e.rmax = v.empty() ? 0.0f : *std::max_element(v.begin(), v.end());
  const bool int32_bias = e.is_bias && !e.own_params && e.type == dtype_id::int32;
  if (e.spec.block && !int32_bias) {
    // A fused block node on the float initializer (AddQDQPairToWeight forced); only the
    // shape is needed (block axis).
    e.param_shape = w.shape();
    return;
  }
  if (int32_bias) {
    quantize_product_bias(e, w, v);
    return;
  }
  quantize_weight(e, w, v);
}

/// (e) int32 bias: scale = input scale x weight scale (x Gemm beta), zero point 0.
void static_quantizer::quantize_product_bias(const_entry& e, const tensor& w,
                                             std::span<const float> v) {
  const node_info& n = nodes_[e.node];
  auto in_it = acts_.find(n.inputs[0]);
  auto w_it = weight_of_node_.find({n.name, e.node});
  if (in_it == acts_.end() || w_it == weight_of_node_.end() || in_it->second.spec.block) {
    // Input or weight stays float (or has no scale: a block spec): keep the bias float.
    e.type = dtype_id::undefined;
    return;
  }
  if (w_it->second->block > 0) {
    // Group-quantized weights have no per-output-channel scale to multiply.
    report_.notes.push_back("bias '" + e.name + "' of node '" + n.name +
                            "' kept in float: its weight is quantized per group");
    e.type = dtype_id::undefined;
    return;
  }
  float beta = 1.0f;
  for (const auto& a : n.attributes) {
    if (n.op_type == "Gemm" && a.name == "beta")
      beta = std::get<float>(a.value);
  }
  const const_entry& we = *w_it->second;
  const std::size_t channels = static_cast<std::size_t>(w.size());
  e.axis = we.axis >= 0 ? 0 : -1;
  // A grouped ConvTranspose's weight (C_in, C_out / group, k...) has C_out / group
  // channels on its axis 1: weight channel j serves output channels j, j + C_out / group,
  // ..., one per group, so each bias element takes the scale of channel o % (C_out / group).
  std::size_t repeat = 1;
  if (e.axis >= 0 && n.op_type == "ConvTranspose" && !we.scale.empty() &&
      channels != we.scale.size() && channels % we.scale.size() == 0) {
    std::int64_t group = 1;
    for (const auto& a : n.attributes) {
      if (a.name == "group")
        group = std::get<std::int64_t>(a.value);
    }
    if (group > 1 && channels == static_cast<std::size_t>(group) * we.scale.size())
      repeat = static_cast<std::size_t>(group);
  }
  for (std::size_t r = 0; r < repeat; ++r) {
    for (const float ws : we.scale)
      e.scale.push_back(in_it->second.params.scale * ws * beta);
  }
  if (e.axis >= 0 && e.scale.size() != channels) {
    throw frontend_error("quark.quantize.bias",
                         "bias '" + e.name + "' of node '" + n.name + "' has " +
                             std::to_string(channels) + " elements for " +
                             std::to_string(e.scale.size()) + " weight channels");
  }
  e.zp.assign(e.scale.size(), 0);
  e.product_scale = true;
  // quark-spec §6.2: q = RNE(double(b) / double(s)), clipped to int32 with a warning (a
  // small product scale, e.g. int16 activations times int16 weights, can make a large
  // bias saturate and change the model's output); with Int16Bias (§6.4) the codes
  // saturate to int16 instead (stored as int16 below).
  e.q = tensor(dtype_id::int32, w.shape());
  bias_clip_report clip;
  try {
    clip = opt_.int16_bias
               ? quantize_bias_int32(v, e.scale, e.q.data<std::int32_t>(), -32768, 32767)
               : quantize_bias_int32(v, e.scale, e.q.data<std::int32_t>());
  } catch (const quark::invalid_argument& err) {
    // A product scale that underflowed to 0 or overflowed (pathological ranges).
    throw frontend_error("quark.quantize.bias",
                         "bias '" + e.name + "' of node '" + n.name + "': " + err.what());
  }
  if (clip.clipped > 0) {
    std::ostringstream msg;
    msg << "bias '" << e.name << "' of node '" << n.name << "': " << clip.clipped << " of "
        << v.size() << " values clipped to the " << (opt_.int16_bias ? "int16" : "int32")
        << " range (input scale x weight scale is too small for them; the largest needs "
        << clip.worst_steps << " steps); Int32Bias false quantizes the bias with its own scale";
    report_.notes.push_back(msg.str());
  }
  if (opt_.int16_bias) {
    // quark-spec §6.4: stored as int16 (the codes are already within its range); the
    // scale is kept.
    tensor q16(dtype_id::int16, e.q.shape());
    const auto src = e.q.data<std::int32_t>();
    auto dst = q16.data<std::int16_t>();
    for (std::size_t k = 0; k < src.size(); ++k)
      dst[k] = static_cast<std::int16_t>(src[k]);
    e.q = std::move(q16);
    e.type = dtype_id::int16;
  }
}

/// (c) weights (and biases quantized like weights): per tensor, per channel or per group.
void static_quantizer::quantize_weight(const_entry& e, const tensor& w, std::span<const float> v) {
  const node_info& n = nodes_[e.node];
  if (e.is_bias && !e.own_params && e.spec.per_channel && !is_fp16(e.type))
    e.axis = 0;
  const std::int64_t axis = e.axis >= 0 ? norm_axis(e.axis, w.rank()) : -1;
  if (axis >= static_cast<std::int64_t>(w.rank())) {
    throw frontend_error("quark.quantize.axis", "per-channel axis " + std::to_string(e.axis) +
                                                    " out of range for weight '" + e.name +
                                                    "' of rank " + std::to_string(w.rank()));
  }
  if (e.block > 0 && w.rank() < 2) {
    throw frontend_error("quark.quantize.group",
                         "Group granularity on weight '" + e.name + "' of node '" + n.name + "' (" +
                             n.op_type + "): a rank-" + std::to_string(w.rank()) +
                             " tensor has no block axis; use Tensor or Channel");
  }
  e.axis = axis;
  const std::vector<tensor_override>* ov = nullptr;
  // (A bias finds an entry here only when it has an override.)
  if (auto it = opt_.overrides.find(e.name); it != opt_.overrides.end()) {
    ov = &it->second;
    const std::size_t channels =
        axis >= 0 ? static_cast<std::size_t>(w.shape()[static_cast<std::size_t>(axis)]) : 1;
    if (ov->size() != 1 && ov->size() != channels) {
      throw config_error("quark.config.value",
                         "TensorQuantOverrides." + e.name + ": " + std::to_string(ov->size()) +
                             " entries for weight of " + std::to_string(channels) +
                             " channel(s) (give 1, or one per channel)");
    }
    if (ov->front().scale && ov->size() != channels) {
      throw config_error("quark.config.value",
                         "TensorQuantOverrides." + e.name +
                             ": a per-channel weight needs one scale / zero_point entry per "
                             "channel (" +
                             std::to_string(channels) + ")");
    }
  }
  std::int64_t qmin = 0, qmax = 0;
  std::size_t channel = 0;
  auto one = [&](std::span<const float> vals) {
    const tensor_override* o = ov == nullptr ? nullptr : &(*ov)[ov->size() == 1 ? 0 : channel];
    ++channel;
    const std::string where = "TensorQuantOverrides." + e.name;
    float lo = 0.0f, hi = 0.0f;
    if (!vals.empty()) {  // finite (quantize_constant checked): the vectorised reduction
      const quark::detail::minmax_partial mm = quark::detail::minmax_reduce(vals);
      lo = mm.min;
      hi = mm.max;
    }
    if (o && o->rmin)
      lo = static_cast<float>(*o->rmin);
    if (o && o->rmax)
      hi = static_cast<float>(*o->rmax);
    // Per-channel signed weights are always symmetric (quark-spec §5.2).
    const bool sym =
        e.spec.symmetric ||
        (axis >= 0 && e.block == 0 &&
         (e.type == dtype_id::int8 || e.type == dtype_id::int16 || e.type == dtype_id::int32));
    qp p;
    if (e.spec.method == qz::act_method::distribution && is_fp8(e.type)) {
      p = qz::fp8_qparams_from_std(e.type, qz::population_std(vals), e.name);  // np.std
    } else {
      p = qz::qparams_for(e.type, scale_choice_for(e.spec), sym, lo, hi, true, e.name,
                          o && o->reduce_range.value_or(false));
    }
    if (o && (o->rmin || o->rmax)) {
      // TensorQuantOverrides rmin / rmax: the range is used as given, no search.
    } else if (e.spec.weight_minmse && is_fp8(e.type) && !vals.empty()) {
      // An FP8 spec's MinMSE: the float scale of the windows of the values' histogram with
      // the float8 rounding in the error (calib/minifloat_mse_calibrator.hpp).
      if (const auto r = qz::minifloat_minmse(e.type, vals); r && r->scale)
        p.scale = *r->scale;
    } else if (e.spec.weight_minmse && e.spec.pof2 && !vals.empty()) {
      // quark-spec §4.8: the five-candidate search of calib/pof2_calibrator.hpp from the
      // min/max power of two and zero point (held fixed, so an asymmetric weight keeps
      // its zero point), values clipped to the weight's clip table (§1.3).
      const calibrated_range r =
          pof2_minmse_search(vals, int_grid{p.qmin, p.qmax}, -std::ilogb(p.scale), p.zero_point);
      p.scale = std::ldexp(1.0f, -*r.pof2_position);
    } else if (e.spec.weight_minmse && !e.spec.pof2 && !e.spec.int16_scale && !vals.empty()) {
      // Float-scale MinMSE (quark-spec §4.8, MinMSEModeFloatScale) on the weight's grid.
      const minmse_float_mode mode =
          opt_.minmse_float_mode == "HistCenter" ? minmse_float_mode::hist_center
          : opt_.minmse_float_mode == "All"      ? minmse_float_mode::all
                                                 : minmse_float_mode::percentile;
      const calibrated_range r = float_minmse_calibrator{
          .mode = mode,
          .grid = int_grid{p.qmin, p.qmax},
          .symmetry = sym ? range_symmetry::symmetric : range_symmetry::asymmetric}(vals);
      p.scale = *r.scale;
      p.zero_point = static_cast<std::int32_t>(*r.zero_point);
    }
    if (o && o->scale)
      p = fixed_params(*o->scale, *o->zero_point, e.type, where);
    e.scale.push_back(p.scale);
    e.zp.push_back(p.zero_point);
    qmin = p.qmin;
    qmax = p.qmax;
  };
  if (axis < 0) {
    one(v);
  } else {
    const auto ax = static_cast<std::size_t>(axis);
    const std::size_t c = static_cast<std::size_t>(w.shape()[ax]);
    std::size_t inner = 1;
    for (std::size_t d = ax + 1; d < w.rank(); ++d)
      inner *= static_cast<std::size_t>(w.shape()[d]);
    const std::size_t outer = c * inner == 0 ? 0 : v.size() / (c * inner);
    std::vector<float> slice;
    if (e.block > 0) {
      // One group per (outer, block, inner), in the row-major order of the parameter
      // tensor (the weight's shape with the axis dimension made ceil(c / block)).
      const auto bs = static_cast<std::size_t>(e.block);
      const std::size_t blocks = (c + bs - 1) / bs;
      e.param_shape = w.shape();
      e.param_shape[ax] = static_cast<std::int64_t>(blocks);
      for (std::size_t o = 0; o < outer; ++o) {
        for (std::size_t b = 0; b < blocks; ++b) {
          for (std::size_t ii = 0; ii < inner; ++ii) {
            slice.clear();
            for (std::size_t ch = b * bs; ch < std::min(c, (b + 1) * bs); ++ch)
              slice.push_back(v[(o * c + ch) * inner + ii]);
            one(slice);
          }
        }
      }
    } else {
      for (std::size_t ch = 0; ch < c; ++ch) {
        slice.clear();
        for (std::size_t o = 0; o < outer; ++o) {
          const float* p = v.data() + (o * c + ch) * inner;
          slice.insert(slice.end(), p, p + inner);
        }
        one(slice);
      }
    }
  }
  e.q = quantize_values(w, e.type, e.scale, e.zp, axis, qmin, qmax, e.block);
  if (!e.is_bias)
    weight_of_node_[{nodes_[e.node].name, e.node}] = &e;
  if (!e.is_bias && axis < 0) {
    const std::string w0 = qz::zeroed_weight_note(v, e.q, e.zp.front(), e.scale.front(), e.name,
                                                  nodes_[e.node].name, nodes_[e.node].op_type);
    if (!w0.empty())
      report_.notes.push_back(w0);
  }
}

/// The Cast form of an activation's BFloat16 / Float16 stage (emit_cast_pair) with parameters
/// `p` (the scale `s_name` and zero point `z_name` initializers exist when they are not 1 / 0)
/// from `from`, with the category 8 keys (docs/config.md §7.6): BF16WithClip clips the input to
/// the bfloat16 range first (Quark clips before its custom bfloat16 QuantizeLinear, which
/// BF16QDQToCast replaces unless the zero point is not 0); BF16QDQToCast multiplies by the
/// reciprocal scale.
void static_quantizer::emit_cast_stage(std::vector<::onnx::NodeProto>& sink, dtype_id type,
                                       const qp& p, const std::string& from, const std::string& qn,
                                       const std::string& dqn, const std::string& q,
                                       const std::string& dq, const std::string& s_name,
                                       const std::string& z_name, const std::string& sfx) {
  const bool bf16 = type == dtype_id::bfloat16;
  const bool scaled = p.scale != 1.0f;
  const bool has_zp = p.zero_point != 0;
  std::string x = from;
  if (bf16 && opt_.bf16_with_clip && (!opt_.bf16_qdq_to_cast || has_zp) &&
      !m_.has_initializer(from)) {
    const float bf16_max = 3.38953139e38f;
    add_init(from + "_clip_min" + sfx, tensor::from_floats({}, std::vector<float>{-bf16_max}));
    add_init(from + "_clip_max" + sfx, tensor::from_floats({}, std::vector<float>{bf16_max}));
    x = from + "_clip_output" + sfx;
    sink.push_back(qz::make_op("Clip", from + "_Clip" + sfx,
                               {from, from + "_clip_min" + sfx, from + "_clip_max" + sfx}, {x}));
  }
  std::string recip;
  if (bf16 && scaled && !has_zp && opt_.bf16_qdq_to_cast) {
    recip = qn + "_scale";
    add_init(recip, tensor::from_floats({}, std::vector<float>{1.0f / p.scale}));
  }
  emit_cast_pair(sink, qn, dqn, x, q, dq, type, s_name, scaled, recip,
                 has_zp ? z_name : std::string());
}

/// One Q/DQ pair (or its Cast form) from `in`: `q` the quantized value, `dq` the result.
/// `readers`: the consumers the pair serves (block axis, RefineBlockAxis).
void static_quantizer::emit_pair(std::vector<::onnx::NodeProto>& sink, const std::string& name,
                                 const act_entry& e, const std::string& sfx,
                                 const std::string& from, const std::string& q,
                                 const std::string& dq, const std::vector<std::size_t>& readers) {
  const std::string s_name = name + "_scale";
  const std::string z_name = name + "_zero_point";
  const bool cast_form = is_fp16(e.spec.type);
  const std::optional<qz::block_op>& block = e.spec.block;
  const ::onnx::GraphProto& g = proto(m_).graph();
  const std::string qn = name + "_QuantizeLinear" + sfx;
  const std::string dqn = name + "_DequantizeLinear" + sfx;
  if (block) {
    // One fused com.amd.quark node instead of the pair (quark-spec §7.5).
    std::optional<std::size_t> rank;  // known for initializers (constant inputs)
    for (const auto& t : g.initializer()) {
      if (t.name() == name)
        rank = static_cast<std::size_t>(t.dims_size());
    }
    const std::int64_t axis =
        qz::block_axis(m_, nodes_, name, readers, e.spec, opt_.refine_block_axis, rank);
    sink.push_back(qz::make_block_node(*block, name + "_" + block->op + sfx, from, dq, axis));
    return;
  }
  if (cast_form) {
    emit_cast_stage(sink, e.spec.type, e.params, from, qn, dqn, q, dq, s_name, z_name, sfx);
    return;
  }
  sink.push_back(make_node("QuantizeLinear", qn, {from, s_name, z_name}, q, -1));
  sink.push_back(make_node("DequantizeLinear", dqn, {q, s_name, z_name}, dq, -1));
}

/// EnableDualQuantNodePairs (quark-spec §7.6): where the tensor's type differs from the type its
/// producer outputs or a consumer reads, a second Q/DQ pair of that node's type (same calibrated
/// range) sits between the node and the tensor's own pair. `readers`: the nodes the additional
/// stage serves (a fused node's block axis). Returns the value the next stage reads.
std::string static_quantizer::additional_pair(std::vector<::onnx::NodeProto>& sink,
                                              const std::string& name, const act_entry& e,
                                              const std::string& src, const std::string& node_name,
                                              const tspec& spec,
                                              const std::vector<std::size_t>& readers) {
  const bool cast_form = is_fp16(e.spec.type);
  const std::optional<qz::block_op>& block = e.spec.block;
  const std::string base = name + "_" + node_name + "_additional";
  if (spec.block) {
    // A BFP/MX precision: one fused node, as the tensor's own stage would be (§7.5, §7.6).
    const std::string out = base + "_" + spec.block->op + "_Output";
    const std::int64_t axis =
        qz::block_axis(m_, nodes_, name, readers, spec, opt_.refine_block_axis, std::nullopt);
    sink.push_back(qz::make_block_node(*spec.block, base + "_" + spec.block->op, src, out, axis));
    ++report_.tensors_per_type[spec.block->label];
    report_.tensors.push_back({base, "activation", spec.block->label, e.rmin, e.rmax, {}, {}, -1});
    return out;
  }
  // The second stage's parameters come from the tensor's calibrated range, which a tensor whose
  // own stage needs none (a block format, an unscaled bfloat16 / float16 cast) has only when a
  // stage that needs one asked for it (request()).
  const bool needs_range = !is_fp16(spec.type) || spec.fp_scaled;
  if ((block || (cast_form && !e.spec.fp_scaled)) && needs_range) {
    const auto* f = facts(name);
    if (f == nullptr || !f->calibrated) {
      throw frontend_error("quark.quantize.internal", "EnableDualQuantNodePairs at tensor '" +
                                                          name + "': no calibrated range for its " +
                                                          dtype_str(spec.type) + " pair");
    }
  }
  const qp p = qz::qparams_for(spec.type, scale_choice_for(spec), spec.symmetric, e.rmin, e.rmax,
                               false, name, false);
  if (is_fp16(spec.type)) {
    // A bfloat16 / float16 stage: the Cast form, as the tensor's own would be.
    if (p.scale != 1.0f)
      add_init(base + "_scale", scale_tensor({p.scale}, true));
    if (p.zero_point != 0) {
      add_init(base + "_zero_point", cast_zero_point(p.zero_point));
    }
    types_used_.insert(spec.type);
    const std::string out = base + "_DequantizeLinear_Output";
    emit_cast_stage(sink, spec.type, p, src, base + "_QuantizeLinear", base + "_DequantizeLinear",
                    base + "_QuantizeLinear_Output", out, base + "_scale", base + "_zero_point",
                    "_" + node_name + "_additional");
    ++report_.tensors_per_type[dtype_str(spec.type)];
    report_.tensors.push_back(
        {base, "activation", dtype_str(spec.type), e.rmin, e.rmax, {p.scale}, {p.zero_point}, -1});
    return out;
  }
  add_init(base + "_scale", scale_tensor({p.scale}, true));
  add_init(base + "_zero_point", zero_point_tensor(spec.type, {p.zero_point}, true));
  types_used_.insert(spec.type);
  sink.push_back(make_node("QuantizeLinear", base + "_QuantizeLinear",
                           {src, base + "_scale", base + "_zero_point"},
                           base + "_QuantizeLinear_Output", -1));
  sink.push_back(make_node("DequantizeLinear", base + "_DequantizeLinear",
                           {base + "_QuantizeLinear_Output", base + "_scale", base + "_zero_point"},
                           base + "_DequantizeLinear_Output", -1));
  ++report_.tensors_per_type[dtype_str(spec.type)];
  report_.tensors.push_back(
      {base, "activation", dtype_str(spec.type), e.rmin, e.rmax, {p.scale}, {p.zero_point}, -1});
  return base + "_DequantizeLinear_Output";
}

void static_quantizer::emit_activation(const std::string& name, const act_entry& e) {
  const std::optional<std::size_t> prod = users_.producer(name);
  // Consumers that read `name` only in shape slots (shape_slot) keep the float tensor; the pair
  // serves the others. A tensor nothing else reads gets no pair.
  std::vector<std::size_t> data_readers;
  std::vector<std::size_t> float_readers;
  {
    const auto& g = proto(m_).graph();
    const std::int64_t opset = m_.opset("").value_or(1);
    for (const std::size_t c : users_.consumers(name)) {
      const auto& n = g.node(static_cast<int>(c));
      bool data = false;
      for (int k = 0; k < n.input_size(); ++k)
        data = data || (n.input(k) == name && !shape_slot(n, k, opset));
      (data ? data_readers : float_readers).push_back(c);
    }
    for (const std::size_t c : float_readers) {
      report_.notes.push_back("graph: tensor '" + name + "' stays float where " +
                              g.node(static_cast<int>(c)).op_type() + " '" + nodes_[c].name +
                              "' reads it as a shape or count input (quantizing it would change "
                              "that node's output size)");
    }
    if (data_readers.empty() && !graph_outputs_.contains(name))
      return;
  }
  const std::string s_name = name + "_scale";
  const std::string z_name = name + "_zero_point";
  const bool cast_form = is_fp16(e.spec.type);
  const bool scaled = cast_form && e.params.scale != 1.0f;
  const std::optional<qz::block_op>& block = e.spec.block;
  if (!block && (!cast_form || scaled))
    add_init(s_name, scale_tensor({e.params.scale}, true));
  if (!block && !cast_form)
    add_init(z_name, zero_point_tensor(e.spec.type, {e.params.zero_point}, true));
  if (cast_form && e.params.zero_point != 0) {  // an asymmetric scaled BFloat16 / Float16 pair
    add_init(z_name, cast_zero_point(e.params.zero_point));
  }
  if (!block)
    types_used_.insert(e.spec.type);
  auto& sink = prod ? after_[*prod] : prologue_;
  const std::string type_label = block ? block->label : dtype_str(e.spec.type);
  report_.tensors.push_back(
      {name, "activation", type_label, e.rmin, e.rmax,
       block ? std::vector<float>{} : std::vector<float>{e.params.scale},
       block ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{e.params.zero_point}, -1});
  ++report_.tensors_per_type[type_label];
  const bool dual = opt_.enable_dual_quant_node_pairs && !e.from_initializer;
  // Another precision than the tensor's: another type, or another block format (block specs
  // all carry type float32).
  auto other_precision = [&](const tspec& t) {
    return t.type != e.spec.type || t.block != e.spec.block;
  };
  // The producer's own output type, when it differs.
  std::optional<tspec> prod_spec;
  if (dual && prod && node_quantized_[*prod] && pl_.nodes[*prod].output &&
      other_precision(*pl_.nodes[*prod].output)) {
    prod_spec = pl_.nodes[*prod].output;
  }
  // The consumers reading another type than the tensor's.
  auto consumer_spec = [&](std::size_t c) -> std::optional<tspec> {
    if (dual && node_quantized_[c] && pl_.nodes[c].input && other_precision(*pl_.nodes[c].input)) {
      return pl_.nodes[c].input;
    }
    return std::nullopt;
  };
  const bool is_output = graph_outputs_.contains(name);
  // The tensor the tensor's own QuantizeLinear reads (through the producer's pair if any).
  auto q_input = [&](const std::string& src) {
    return prod_spec ? additional_pair(sink, name, e, src, nodes_[*prod].name, *prod_spec,
                                       users_.consumers(name))
                     : src;
  };
  if (opt_.dedicated_qdq_pair) {
    std::size_t k = 0;
    const std::string src = q_input(name);
    for (const std::size_t c : data_readers) {
      const std::string sfx = "_" + std::to_string(k++);
      const std::string q = name + "_QuantizeLinear_Output" + sfx;
      const std::string dq = name + "_DequantizeLinear_Output" + sfx;
      emit_pair(sink, name, e, sfx, src, q, dq, {c});
      const auto cs = consumer_spec(c);
      rewire_node_[{c, name}] =
          cs ? additional_pair(sink, name, e, dq, nodes_[c].name, *cs, {c}) : dq;
    }
  } else if (is_output && prod) {
    const std::string src = name + "_QuantizeLinear_Input";
    rename_output_[name] = src;
    emit_pair(sink, name, e, "", q_input(src), name + "_QuantizeLinear_Output", name, data_readers);
    for (const std::size_t c : data_readers) {
      if (const auto cs = consumer_spec(c))
        rewire_node_[{c, name}] = additional_pair(sink, name, e, name, nodes_[c].name, *cs, {c});
    }
    for (const std::size_t c : float_readers)
      rewire_node_[{c, name}] = src;
  } else {
    const std::string dq = name + "_DequantizeLinear_Output";
    emit_pair(sink, name, e, "", q_input(name), name + "_QuantizeLinear_Output", dq, data_readers);
    rewire_[name] = dq;
    for (const std::size_t c : data_readers) {
      if (const auto cs = consumer_spec(c))
        rewire_node_[{c, name}] = additional_pair(sink, name, e, dq, nodes_[c].name, *cs, {c});
    }
    for (const std::size_t c : float_readers)
      rewire_node_[{c, name}] = name;
  }
}

void static_quantizer::emit_constants() {
  std::map<std::string, std::string> const_done;  // (name + kind) -> DQ output (shared weights)
  for (auto& e : consts_) {
    if (e.type == dtype_id::undefined)
      continue;
    const std::string key = e.name + (e.is_bias ? "#b" : "#w") + std::to_string(e.node);
    if (e.spec.block && e.type != dtype_id::int32) {
      // A fused block node on the float initializer (AddQDQPairToWeight is forced, quark-spec
      // §7.3); rank <= 1 tensors (biases) block along axis 0 (§7.5).
      if (const_done.contains(e.name)) {
        rewire_node_[{e.node, e.name}] = const_done[e.name];
        continue;
      }
      const qz::block_op& b = *e.spec.block;
      const std::string dq = e.name + "_" + b.op + "_Output";
      const std::int64_t axis = qz::block_axis(m_, nodes_, e.name, {e.node}, e.spec,
                                               opt_.refine_block_axis, e.param_shape.size());
      prologue_.push_back(qz::make_block_node(b, e.name + "_" + b.op, e.name, dq, axis));
      const_done[e.name] = dq;
      rewire_node_[{e.node, e.name}] = dq;
      ++report_.tensors_per_type[b.label];
      report_.tensors.push_back(
          {e.name, e.is_bias ? "bias" : "weight", b.label, e.rmin, e.rmax, {}, {}, axis});
      continue;
    }
    const bool per_channel = e.axis >= 0;
    per_axis_ = per_axis_ || per_channel;
    blocked_ = blocked_ || e.block > 0;
    types_used_.insert(e.type);
    const std::string base = e.name;
    const std::string s_name = base + "_scale";
    const std::string z_name = base + "_zero_point";
    if (const_done.contains(e.name)) {
      rewire_node_[{e.node, e.name}] = const_done[e.name];
      continue;
    }
    const std::string dq = base + "_DequantizeLinear_Output";
    if (is_fp16(e.type)) {
      // BFloat16 / Float16: the Cast form (see emit_cast_pair), per tensor.
      const bool scaled = e.scale.front() != 1.0f;
      const bool has_zp = e.zp.front() != 0;  // asymmetric scaled (see emit_cast_pair)
      if (scaled)
        add_init(s_name, scale_tensor(e.scale, true));
      if (has_zp) {
        add_init(z_name, cast_zero_point(e.zp.front()));
      }
      const std::string zp_arg = has_zp ? z_name : std::string();
      if (opt_.add_qdq_pair_to_weight && !e.product_scale) {
        std::string recip;
        if (scaled && !has_zp && e.type == dtype_id::bfloat16 && opt_.bf16_qdq_to_cast) {
          recip = base + "_QuantizeLinear_scale";
          add_init(recip, tensor::from_floats({}, std::vector<float>{1.0f / e.scale.front()}));
        }
        emit_cast_pair(prologue_, base + "_QuantizeLinear", base + "_DequantizeLinear", base,
                       base + "_QuantizeLinear_Output", dq, e.type, s_name, scaled, recip, zp_arg);
      } else {
        // The weight stored as T (quark::quantize: T(w / s + zp)), then the DequantizeLinear
        // half of the Cast form.
        const std::string qn = base + "_quantized";
        add_init(qn, e.q);
        emit_cast_dequantize(prologue_, base + "_DequantizeLinear", qn, dq, s_name, scaled, zp_arg);
        consts_replaced_.insert(e.name);
      }
    } else if (opt_.add_qdq_pair_to_weight && !e.product_scale) {
      add_init(s_name, scale_tensor(e.scale, !per_channel, e.param_shape));
      add_init(z_name, zero_point_tensor(e.type, e.zp, !per_channel, e.param_shape));
      const std::string q = base + "_QuantizeLinear_Output";
      prologue_.push_back(make_node("QuantizeLinear", base + "_QuantizeLinear",
                                    {base, s_name, z_name}, q, e.axis, e.block));
      prologue_.push_back(make_node("DequantizeLinear", base + "_DequantizeLinear",
                                    {q, s_name, z_name}, dq, e.axis, e.block));
    } else {
      add_init(s_name, scale_tensor(e.scale, !per_channel, e.param_shape));
      add_init(z_name, zero_point_tensor(e.type, e.zp, !per_channel, e.param_shape));
      const std::string qn = base + "_quantized";
      add_init(qn, e.q);
      prologue_.push_back(make_node("DequantizeLinear", base + "_DequantizeLinear",
                                    {qn, s_name, z_name}, dq, e.axis, e.block));
      consts_replaced_.insert(e.name);
    }
    const_done[e.name] = dq;
    rewire_node_[{e.node, e.name}] = dq;
    ++report_.tensors_per_type[dtype_str(e.type)];
    std::vector<std::int64_t> zps(e.zp.begin(), e.zp.end());
    report_.tensors.push_back({e.name, e.is_bias ? "bias" : "weight", dtype_str(e.type), e.rmin,
                               e.rmax, e.scale, zps, e.axis});
  }
}

/// Rebuilds the node list: prologue, then each node followed by the Q/DQ of its outputs.
void static_quantizer::rebuild_node_list() {
  ::onnx::GraphProto& g = *proto(m_).mutable_graph();
  std::vector<::onnx::NodeProto> out;
  out.reserve(static_cast<std::size_t>(g.node_size()) + prologue_.size() * 2);
  // UseQDQContribOps: the inserted Q/DQ nodes go to the com.microsoft domain (4/8/16-bit integer
  // types, per tensor or per channel, which ONNX Runtime's contrib QuantizeLinear /
  // DequantizeLinear take; they have no block_size and no float8 / bfloat16 types).
  if (opt_.use_qdq_contrib_ops) {
    for (const auto t : types_used_) {
      if (t != dtype_id::int8 && t != dtype_id::uint8 && t != dtype_id::int16 &&
          t != dtype_id::uint16 && t != dtype_id::int32 && t != dtype_id::int4 &&
          t != dtype_id::uint4) {
        throw config_error("quark.config.unsupported_type",
                           "UseQDQContribOps with " + type_name(t) +
                               ": the com.microsoft QuantizeLinear / DequantizeLinear take "
                               "int4, uint4, int8, uint8, int16 and uint16 only");
      }
    }
    if (blocked_) {
      throw config_error("quark.config.unsupported_type",
                         "UseQDQContribOps with Group granularity: the com.microsoft "
                         "QuantizeLinear / DequantizeLinear have no block_size");
    }
  }
  auto domain = [&](std::vector<::onnx::NodeProto>& list) {
    if (opt_.use_qdq_contrib_ops) {
      for (auto& n : list) {
        if (n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear")
          n.set_domain("com.microsoft");
      }
    }
  };
  domain(prologue_);
  for (auto& [i, list] : after_)
    domain(list);
  for (auto& n : prologue_)
    out.push_back(std::move(n));
  const auto& old_nodes = g.node();
  std::set<std::string> own_qdq_inputs;
  for (const std::size_t i : topo_) {
    ::onnx::NodeProto n = old_nodes[static_cast<int>(i)];
    for (int k = 0; k < n.input_size(); ++k) {
      const std::string& x = n.input(k);
      if (auto it = rewire_node_.find({i, x}); it != rewire_node_.end()) {
        n.set_input(k, it->second);
      } else if (auto it2 = rewire_.find(x); it2 != rewire_.end()) {
        n.set_input(k, it2->second);
      }
    }
    for (int k = 0; k < n.output_size(); ++k) {
      if (auto it = rename_output_.find(n.output(k)); it != rename_output_.end())
        n.set_output(k, it->second);
    }
    if (auto it = dpu_.edits.find(i); it != dpu_.edits.end())
      qz::edit_node(n, it->second, i);
    out.push_back(std::move(n));
    if (auto it = after_.find(i); it != after_.end()) {
      for (auto& q : it->second)
        out.push_back(std::move(q));
    }
  }
  g.clear_node();
  for (auto& n : out)
    *g.add_node() = std::move(n);
}

void static_quantizer::drop_unquantized() {
  // RemoveQDQConvRelu and friends: activations whose every Q/DQ pair went are float again.
  {
    const qz::graph_pass_options passes = qz::read_pass_options(cfg_);
    std::set<std::string> unquantized = qz::remove_qdq_pairs(m_, passes);
    if (passes.fold_relu) {
      std::size_t folded = 0;
      unquantized.merge(qz::fold_relu(m_, folded));
      if (folded > 0)
        report_.notes.push_back("graph: Relu folded into its producer (FoldRelu): " +
                                std::to_string(folded));
    }
    std::erase_if(report_.tensors, [&](const auto& t) {
      if (t.role != "activation" || !unquantized.contains(t.name))
        return false;
      --report_.tensors_per_type[t.type];
      return true;
    });
  }
  // Float weights no node reads any more (an If / Loop / Scan body included) are dropped.
  qz::drop_unused_initializers(m_, consts_replaced_);
}

/// Opset, IR version, FixShapes, FillAllValueInfo; then the model is checked.
void static_quantizer::finish_model() {
  const ::onnx::GraphProto& g = proto(m_).graph();
  // Opset: QuantizeLinear needs 10, per-axis 13, FP8 19, 4/16-bit types and blocks 21
  // (Cast to bfloat16 13).
  std::int64_t need = 10;
  if (per_axis_)
    need = 13;
  for (const auto t : types_used_) {
    if (t == dtype_id::bfloat16)
      need = std::max<std::int64_t>(need, 13);
    if (is_fp8(t))
      need = std::max<std::int64_t>(need, 19);
    // com.microsoft Q/DQ take 4- and 16-bit types at any opset (quark-spec §7.5).
    if ((t == dtype_id::int16 || t == dtype_id::uint16) && !opt_.use_qdq_contrib_ops)
      need = 21;
    if ((t == dtype_id::int4 || t == dtype_id::uint4) && !opt_.use_qdq_contrib_ops)
      need = 21;
  }
  if (blocked_)
    need = 21;
  if (gptq_candidates_)  // the codes and grid GPTQ will store (after calibration)
    need = std::max(need, qz::gptq_opset(*algos_.gptq));
  if (algos_.auto_mp) {  // the types auto mixed precision may write (after calibration)
    for (const auto t : qz::auto_mp_types(*algos_.auto_mp)) {
      if (t == dtype_id::bfloat16)  // a Cast to bfloat16
        need = std::max<std::int64_t>(need, 13);
      if (is_fp8(t))
        need = std::max<std::int64_t>(need, 19);
      if ((t == dtype_id::int16 || t == dtype_id::uint16 || t == dtype_id::int4 ||
           t == dtype_id::uint4) &&
          !opt_.use_qdq_contrib_ops)
        need = 21;
    }
  }
  for (const auto& n : g.node()) {
    if (n.domain() == qz::block_domain) {
      m_.ensure_opset(qz::block_domain, qz::block_domain_version);
      break;
    }
  }
  if (opt_.use_qdq_contrib_ops && (!acts_.empty() || !consts_.empty()) &&
      !m_.opset("com.microsoft")) {
    m_.set_opset("com.microsoft", 1);
  }
  report_.opset_before = m_.opset("").value_or(1);
  if (!types_used_.empty()) {  // some Q/DQ (fused block nodes need no default-domain opset)
    std::map<std::string, std::size_t> ranks;
    for (const auto& [name, f] : cal_.tensors)
      ranks[name] = f.shape.size();
    for (const auto& [t, dq] : rewire_) {
      if (auto it = ranks.find(t); it != ranks.end())
        ranks[dq] = it->second;
    }
    for (const auto& [key, dq] : rewire_node_) {
      if (auto it = ranks.find(key.second); it != ranks.end())
        ranks[dq] = it->second;
    }
    for (const auto& note : qz::upgrade_opset(proto(m_), report_.opset_before, need, ranks)) {
      report_.notes.push_back(note);
    }
  }
  report_.opset_after = m_.opset("").value_or(1);
  {
    // IR version able to carry the opset (ORT refuses older IR with newer operator sets).
    // int4 / uint4 tensors (com.microsoft Q/DQ at an older opset) need IR 10 too.
    bool four_bit = types_used_.contains(dtype_id::int4) || types_used_.contains(dtype_id::uint4);
    if (algos_.auto_mp) {  // the types auto mixed precision may write
      for (const auto t : qz::auto_mp_types(*algos_.auto_mp))
        four_bit = four_bit || t == dtype_id::int4 || t == dtype_id::uint4;
    }
    const std::int64_t ir = report_.opset_after >= 21 || four_bit ? 10
                            : report_.opset_after >= 19           ? 9
                            : report_.opset_after >= 13           ? 7
                                                                  : 5;
    if (m_.ir_version() < ir)
      m_.set_ir_version(ir);
  }
  drop_contradicted_value_info();
  fix_shapes(m_, opt_.fix_shapes);
  if (opt_.fill_all_value_info) {
    // FillAllValueInfo: ONNX shape inference writes value_info for every tensor it can type.
    try {
      infer_shapes(proto(m_));
    } catch (const std::exception& e) {
      throw frontend_error(
          "quark.quantize.value_info",
          std::string("FillAllValueInfo: ONNX shape inference failed: ") + e.what());
    }
  }
  m_.validate();
}

void static_quantizer::drop_contradicted_value_info() {
  // A value_info entry whose rank or fixed dimension is not what calibration computed (stale
  // after an edit of the model's input shape, say) is not kept in the quantized model: ONNX
  // Runtime refuses a model whose declared shapes break its shape inference (a Conv input
  // declared rank 1: "Input tensor must have at least 3 dimensions").
  auto text = [](const auto& dims) {
    std::string out;
    for (const auto& d : dims)
      out += (out.empty() ? "" : "x") + d;
    return "[" + out + "]";
  };
  std::vector<std::string> dropped;
  erase_if(*proto(m_).mutable_graph()->mutable_value_info(), [&](const ::onnx::ValueInfoProto& v) {
    const auto it = cal_.tensors.find(v.name());
    if (it == cal_.tensors.end() || it->second.type == dtype_id::undefined ||
        !v.type().tensor_type().has_shape())
      return false;
    const auto& declared = v.type().tensor_type().shape().dim();
    const shape_t& made = it->second.shape;
    bool contradicts = static_cast<std::size_t>(declared.size()) != made.size();
    for (int d = 0; !contradicts && d < declared.size(); ++d) {
      contradicts = declared[d].has_dim_value() &&
                    declared[d].dim_value() != made[static_cast<std::size_t>(d)];
    }
    if (contradicts) {
      std::vector<std::string> a, b;
      for (const auto& d : declared)
        a.push_back(d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param());
      for (const auto d : made)
        b.push_back(std::to_string(d));
      dropped.push_back("'" + v.name() + "' declared " + text(a) + ", computed " + text(b));
    }
    return contradicts;
  });
  if (!dropped.empty()) {
    report_.notes.push_back("value_info: " + std::to_string(dropped.size()) + " entr" +
                            (dropped.size() == 1 ? "y" : "ies") +
                            " dropped whose shape contradicts what the model computes (" +
                            dropped.front() + (dropped.size() > 1 ? ", ..." : "") + ")");
  }
}

void static_quantizer::run_algorithms() {
  // GPTQ (algo_config "gptq", §10.4), fast finetune ("adaround" / "adaquant", §10.5), then bias
  // correction (§10.3): on the finished quantized model, against the float model calibration saw.
  if (algos_.gptq) {
    const model fm = model::from_bytes(float_bytes_, m_.base_dir());
    qz::report_gptq(report_, *algos_.gptq,
                    qz::gptq_weights(m_, fm, reader_, *algos_.gptq, opt_.calib_data_size));
  }
  // A block format mixed in (auto_mixprecision with QBFP / QMX targets, the BF16_MIXED_*
  // presets): no measurement, and before fast finetune so that it tunes the mixed weights, as
  // in Quark (which runs bias correction first; here it runs after fast finetune).
  if (algos_.auto_mp && algos_.auto_mp->block) {
    const qz::block_mix_result bm = qz::mix_block_format(m_, *algos_.auto_mp);
    for (const auto& [name, label] : bm.retyped) {
      for (auto& t : report_.tensors) {
        if (t.name != name || (t.role != "weight" && t.role != "bias"))
          continue;
        if (auto it = report_.tensors_per_type.find(t.type);
            it != report_.tensors_per_type.end() && it->second > 0)
          --it->second;
        ++report_.tensors_per_type[label];
        t.type = label;
        t.scale.clear();
        t.zero_point.clear();
      }
    }
    report_.notes.insert(report_.notes.end(), bm.notes.begin(), bm.notes.end());
  }
  if (algos_.finetune) {
    const model fm = model::from_bytes(float_bytes_, m_.base_dir());
    const qz::finetune_stats ft =
        qz::fast_finetune(m_, fm, reader_, *algos_.finetune, opt_.calib_data_size);
    report_.notes.push_back(qz::finetune_note(*algos_.finetune, ft));
  }
  if (algos_.bias_correction) {
    const model fm = model::from_bytes(float_bytes_, m_.base_dir());
    const qz::bias_correction_stats bc = qz::correct_bias(m_, fm, reader_, opt_.calib_data_size);
    report_.notes.push_back(
        "bias_correction: " + std::to_string(bc.corrected) + " biases corrected on " +
        std::to_string(bc.samples) + " samples" +
        (bc.skipped > 0 ? ", " + std::to_string(bc.skipped) + " nodes skipped" : std::string()));
  }

  // Auto mixed precision (algo_config "auto_mixprecision", quark-spec §10.10; algo_auto_mp.cpp):
  // some target nodes' Q/DQ change type, measured against the float model.
  if (algos_.auto_mp && !algos_.auto_mp->block) {
    const model fm = model::from_bytes(float_bytes_, m_.base_dir());
    qz::report_auto_mp(report_, qz::auto_mixed_precision(m_, fm, reader_, *algos_.auto_mp));
  }
  // DedicateDQNode (Quark's post-processing): each reader of a shared DequantizeLinear gets its
  // own copy.
  if (opt_.dedicate_dq_node) {
    const std::size_t n = qz::dedicate_dq_nodes(m_);
    if (n > 0) {
      report_.notes.push_back("DedicateDQNode: " + std::to_string(n) +
                              " QuantizeLinear / DequantizeLinear copies give every reader its "
                              "own DequantizeLinear");
    }
  }
}

void static_quantizer::debug_notes() {
  // DebugMode: every node decision and every tensor's parameters, as notes of the summary.
  if (opt_.debug_mode) {
    for (const std::size_t i : topo_) {
      const node_choice& c = pl_.nodes[i];
      report_.notes.push_back(
          "debug: node '" + nodes_[i].name + "' (" + nodes_[i].op_type + "): " +
          (node_quantized_[i]
               ? std::string("quantized")
               : "float" + (c.reason.empty() ? std::string() : " (" + c.reason + ")")));
    }
    for (const auto& t : report_.tensors) {
      std::ostringstream os;
      os.precision(9);
      os << "debug: " << t.role << " '" << t.name << "' " << t.type << " range [" << t.rmin << ", "
         << t.rmax << "] scale " << (t.scale.empty() ? 0.0f : t.scale.front()) << " zero point "
         << (t.zero_point.empty() ? 0 : t.zero_point.front())
         << (t.scale.size() > 1 ? " (first of " + std::to_string(t.scale.size()) + ")" : "");
      report_.notes.push_back(os.str());
    }
  }
}

}  // namespace

model qz::quantize_static(model m, const qconfig& cfg, const plan& pl, const algo_options& algos,
                          calibration_data_reader& reader, quantize_report& report,
                          const quantize_run_options& run) {
  static_quantizer(m, cfg, pl, algos, reader, report, run).run_all();
  return m;
}

}  // namespace quark::onnx
