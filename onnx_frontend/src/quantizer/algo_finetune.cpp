// SPDX-License-Identifier: MIT
// Fast finetune: AdaRound and AdaQuant (quark-spec §10.5; see algorithms.hpp).
//
// A module is one quantized Conv / ConvTranspose / Gemm / MatMul / InstanceNormalization /
// LayerNormalization of the quantized model whose weight (a normalization's scale) is an integer
// initializer behind a DequantizeLinear (per tensor or per channel) or, for AdaQuant only, a float
// initializer fake-quantized by a float16 / bfloat16 Cast pair or a BFP / MX op (weight_chain;
// a float16 / bfloat16 initializer behind a Cast too). Modules are fine-tuned one at
// a time in graph order, each on the quantized model as it stands (earlier modules already
// updated): the quantized model runs on the samples and the module's input is taken as it is
// produced (mixed element-wise with the float model's input when drop_ratio < 1); the float model
// gives the target, the node's own float output. The module computes Y = W X + b with X the
// im2col matrix of the input (Conv, grouped and depthwise included), the input rows (Gemm,
// MatMul) or, for a normalization y = xhat * scale + B, the normalized input with one group per
// scale element (a depthwise 1x1 map), so the reconstruction loss (quark-spec §10.5: squared error
// summed over the output channels, averaged over the other axes) is quadratic in [W b]:
//
//     L = (tr(Wt G Wt^T) - 2 tr(Wt C^T) + e) / P,  G = Xt Xt^T, C = T Xt^T, e = ||T||^2,
//
// with Xt = X plus a row of ones and P the number of output positions. Per sample either G, C, e
// are kept (when that is cheaper per iteration) or Xt and T themselves; the GEMMs are Eigen's.
//
// AdaRound: Wq = s (clamp(floor(w / s) + h(alpha) + zp, qmin, qmax) - zp) with the rectified
// sigmoid h, alpha initialised to the fractional part, the rounding regulariser after the warm
// start with beta annealed by cosine, Adam on alpha, hard rounding (alpha >= 0) at the end.
// AdaQuant: Wq = fake_quant(w) with the straight-through gradient inside the clip range, Adam on
// w (and the bias with update_bias); the final integers come from quark::quantize with the
// weight's own scale and zero point, so they are what the quantizer would write for that float
// weight. The clip bounds are Quark's weight bounds (signed types: the symmetric table). A chain
// weight is learned the same way through its own fake quantizer (identity straight-through:
// those formats have no clip range) and stored as the learned float weights (or their float16 /
// bfloat16 values). The new weights replace the old ones only when the module's reconstruction
// error over all its samples is lower than with the round-to-nearest weights. Everything per weight
// element (soft / fake quantization, the regulariser, the chain rule, the straight-through
// estimator, Adam, the final codes) is include/quark/algo/{adaround,adaquant,adam}.hpp; this file
// owns the modules, their data and the loss with its gradient w.r.t. the dequantized weights.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>

// GCC 12 reports false maybe-uninitialized warnings inside Eigen's packet code (runtime/gemm.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

#include <quark/algo/adaquant.hpp>
#include <quark/algo/adaround.hpp>
#include <quark/block/quark_ops.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/onnx/runtime.hpp>
#include <quark/quant/fake_quant.hpp>
#include <quark/scale/qrange.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/numerics.hpp"
#include "quantizer/tensor_build.hpp"
#include "runtime/block_ops.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;
using mat = Eigen::MatrixXd;
using Eigen::Index;

Index ix(std::size_t v) {
  return static_cast<Index>(v);
}

enum class op_kind : std::uint8_t { conv, conv_transpose, gemm, matmul, instance_norm, layer_norm };

bool is_conv(op_kind k) {
  return k == op_kind::conv || k == op_kind::conv_transpose;
}

bool is_norm(op_kind k) {
  return k == op_kind::instance_norm || k == op_kind::layer_norm;
}

const char* kind_name(op_kind k) {
  switch (k) {
    case op_kind::conv:
      return "Conv";
    case op_kind::conv_transpose:
      return "ConvTranspose";
    case op_kind::gemm:
      return "Gemm";
    case op_kind::matmul:
      return "MatMul";
    case op_kind::instance_norm:
      return "InstanceNormalization";
    case op_kind::layer_norm:
      return "LayerNormalization";
  }
  return "?";
}

/// An activation inside a module: Quark's Subgraph.find_end (ACT_OPS) ends the module after an
/// activation that reads the node's output directly.
enum class act_kind : std::uint8_t {
  none,
  relu,
  leaky_relu,
  prelu,
  clip,
  tanh,
  sigmoid,
  gelu,
  softmax
};

/// Calls f(std::type_identity<T>{}) with T quark::float16 for float16, else quark::bfloat16.
template <class F>
void with_half_type(dtype_id t, F&& f) {
  if (t == dtype_id::float16)
    f(std::type_identity<quark::float16>{});
  else
    f(std::type_identity<quark::bfloat16>{});
}

/// A model shape as the headers take it.
quark::tensor_shape header_shape(const shape_t& shape) {
  std::vector<std::size_t> dims;
  for (const auto d : shape)
    dims.push_back(static_cast<std::size_t>(d));
  return quark::tensor_shape{std::span<const std::size_t>(dims)};
}

/// A weight fake-quantized by nodes other than a DequantizeLinear of integers (AdaQuant only):
/// - Cast(to T) -> Cast(to FLOAT) on a float initializer, with Div / Mul by a scalar scale when
///   the pair is scaled and Add / Sub of a scalar zero point when it is asymmetric (emit_cast_pair
///   in static_quant.cpp, quark-spec §1.5), T float16 or bfloat16;
/// - Cast(to FLOAT) [-> Sub the zero point] [-> Mul by the scale] of an initializer of type T
///   (the weight stored as T);
/// - com.amd.quark BFPQuantizeDequantize / MXQuantizeDequantize on a float initializer
///   (quark-spec §1.7-§1.10).
struct weight_chain {
  enum class kind : std::uint8_t { cast, bfp, mx };
  kind k = kind::cast;
  std::string init;                    ///< the initializer at the root
  dtype_id type = dtype_id::bfloat16;  ///< cast: float16 or bfloat16
  bool stored = false;                 ///< cast: the initializer holds T values
  float scale = 1.0f;                  ///< cast: the Div / Mul scale (1: none)
  float zero_point = 0.0f;             ///< cast: the Add / Sub zero point (0: none)
  quark::bfp_op_attributes bfp;
  quark::mx_op_attributes mx;

  [[nodiscard]] std::string label() const {
    switch (k) {
      case kind::bfp:
        return "BFPQuantizeDequantize";
      case kind::mx:
        return "MXQuantizeDequantize";
      case kind::cast:
        break;
    }
    return std::string(dtype_name(type)) + " Cast";
  }

  /// The cast chain's one scale and zero point as the headers take them.
  template <class T>
  [[nodiscard]] tensor_qparams<T> params() const {
    return tensor_qparams<T>{{&scale, 1}, {&zero_point, 1}};
  }

  /// What the chain makes of float weights `w` of shape `shape`.
  void apply(std::span<const float> w, std::span<float> out, const shape_t& shape) const {
    switch (k) {
      case kind::bfp:
        rt::bfp_quantize_dequantize_f32(bfp, w, shape, out);
        return;
      case kind::mx:
        rt::mx_quantize_dequantize_f32(mx, w, shape, out);
        return;
      case kind::cast:
        break;
    }
    // The Cast pair is the header's float16 / bfloat16 fake quantization with one scale (1 when
    // unscaled) and zero point: (float(T(w / s + zp)) - zp) * s, as quark::quantize wrote it.
    with_half_type(type, [&](auto id) {
      using T = typename decltype(id)::type;
      quark::fake_quantize<T>(header_shape(shape), w, params<T>(), out);
    });
  }

  /// The initializer holding float weights `w` as the chain reads it.
  [[nodiscard]] tensor store(std::span<const float> w, const shape_t& shape) const {
    if (!stored) {
      tensor t(dtype_id::float32, shape);
      std::copy(w.begin(), w.end(), t.data<float>().begin());
      return t;
    }
    tensor t(type, shape);
    with_half_type(type, [&](auto id) {
      using T = typename decltype(id)::type;
      quark::quantize<T>(header_shape(shape), w, params<T>(), t.data<T>());
    });
    return t;
  }

  /// The values the chain gives now (the initializer as stored).
  [[nodiscard]] std::vector<float> current(const model& qm, const shape_t& shape) const {
    const tensor t = qm.initializer(init);
    std::vector<float> out(t.size());
    if (!stored) {
      apply(t.data<float>(), out, shape);
      return out;
    }
    with_half_type(type, [&](auto id) {
      using T = typename decltype(id)::type;
      quark::dequantize<T>(header_shape(shape), t.data<T>(), params<T>(), std::span<float>(out));
    });
    return out;
  }
};

/// Where the weight of a module lives and how its elements map onto the GEMM.
struct ft_module {
  int node = -1;  ///< in the quantized graph
  std::string name;
  op_kind kind = op_kind::conv;
  std::string input, output;  ///< node input 0 / output 0 (same names in both models)
  std::string float_input;    ///< input 0 of the float node
  std::string float_output;   ///< output 0 of the float node (a graph output keeps its name in
                              ///< the float model only)
  std::string weight_q;       ///< integer initializer behind the DequantizeLinear (the chain's
                              ///< initializer with `chain`)
  /// A float16 / bfloat16 / BFP / MX weight (AdaQuant only): its fake-quantization nodes; the
  /// integer fields below (wtype, scale, zp, qmin, qmax, *_param, axis) are unused then.
  std::optional<weight_chain> chain;
  dtype_id wtype = dtype_id::int8;
  shape_t wshape;
  std::vector<float> w;             ///< float weight (float model)
  std::vector<double> scale, zp;    ///< per element
  std::int64_t qmin = 0, qmax = 0;  ///< Quark's weight clip bounds
  std::vector<float> scale_param;   ///< as stored (for quark::quantize)
  std::vector<std::int64_t> zp_param;
  std::int64_t axis = -1;  ///< per-channel axis, -1 per tensor
  // bias
  bool bias_quantized = false;
  std::string bias_data;                   ///< initializer holding the bias ("" without one)
  std::optional<weight_chain> bias_chain;  ///< a float16 / bfloat16 / BFP / MX bias's chain
  dtype_id bias_type = dtype_id::float32;
  std::vector<float> bias_scale;
  std::vector<std::int64_t> bias_zp;
  std::vector<double> bias;  ///< dequantized bias, per output channel (zeros without one)
  // GEMM view
  std::size_t groups = 1, cout_g = 0, k_g = 0;
  std::vector<std::size_t> flat;  ///< (g, o, k) -> element of the weight
  // Conv geometry (1-D convolutions use kh = 1)
  std::size_t cin_g = 0, kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::string auto_pad = "NOTSET";
  std::int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  bool one_d = false;
  // ConvTranspose only
  std::int64_t oph = 0, opw = 0;  ///< output_padding
  bool output_shape = false;      ///< output_shape given: the pads follow from the output size
  // InstanceNormalization / LayerNormalization: y = xhat * scale + bias with xhat the normalized
  // input, one group per scale element (cout_g = k_g = 1)
  double epsilon = 1e-5;
  std::int64_t norm_axis = -1;  ///< LayerNormalization's axis
  // The end of the module (Quark's Subgraph.find_end): an activation read directly from the
  // node's output (the target is then the float activation's output), and with output_qdq the
  // output QuantizeLinear / DequantizeLinear after the node or the activation.
  act_kind act = act_kind::none;
  double alpha = 0.01;  ///< LeakyRelu
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();  ///< Clip
  bool gelu_tanh = false;                               ///< Gelu approximate="tanh"
  std::int64_t softmax_axis = -1;
  bool softmax_legacy = false;  ///< opset < 13: Softmax flattens the dims from its axis
  std::vector<double> slope;    ///< PRelu: one, or one per output channel
  bool out_fq = false;
  double fq_scale = 1.0, fq_zp = 0.0, fq_min = 0.0, fq_max = 0.0;
  /// The loss is not quadratic in [W b]: no Gram form, the activation and the output's fake
  /// quantization in the loss and its gradient.
  [[nodiscard]] bool nonlinear() const { return act != act_kind::none || out_fq; }
};

/// f(y) of output channel c of module m's activation; `d` receives f'(y) (torch's conventions
/// at the kinks: Relu 0 at 0, Clip 1 on its bounds).
double activate(const ft_module& m, double y, std::size_t c, double& d) {
  switch (m.act) {
    case act_kind::none:
      d = 1.0;
      return y;
    case act_kind::relu:
      d = y > 0.0 ? 1.0 : 0.0;
      return y > 0.0 ? y : 0.0;
    case act_kind::leaky_relu:
      d = y > 0.0 ? 1.0 : m.alpha;
      return y > 0.0 ? y : m.alpha * y;
    case act_kind::prelu: {
      const double sl = m.slope[m.slope.size() == 1 ? 0 : c];
      d = y < 0.0 ? sl : 1.0;
      return y < 0.0 ? sl * y : y;
    }
    case act_kind::clip:
      d = y >= m.lo && y <= m.hi ? 1.0 : 0.0;
      return std::min(std::max(y, m.lo), m.hi);
    case act_kind::tanh: {
      const double a = std::tanh(y);
      d = 1.0 - a * a;
      return a;
    }
    case act_kind::sigmoid: {
      const double a = 1.0 / (1.0 + std::exp(-y));
      d = a * (1.0 - a);
      return a;
    }
    case act_kind::softmax:  // over the channels, in loss_and_grad
      d = 1.0;
      return y;
    case act_kind::gelu: {
      if (m.gelu_tanh) {
        constexpr double k = 0.7978845608028654;  // sqrt(2 / pi)
        const double u = k * (y + 0.044715 * y * y * y);
        const double t = std::tanh(u);
        d = 0.5 * (1.0 + t) + 0.5 * y * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * y * y);
        return 0.5 * y * (1.0 + t);
      }
      const double cdf = 0.5 * (1.0 + std::erf(y * 0.7071067811865476));
      d = cdf + y * std::exp(-0.5 * y * y) * 0.3989422804014327;  // y phi(y)
      return y * cdf;
    }
  }
  d = 1.0;
  return y;
}

/// Thrown by a runtime observer once it has what it needs: the rest of the run is skipped.
struct stop_run {};

/// One sample of one module: per group either (G, C) with e, or (Xt, T).
struct sample_data {
  std::vector<mat> a;  ///< G or Xt
  std::vector<mat> b;  ///< C or T
  double e = 0.0;
  double positions = 0.0;
};

std::int64_t int_value(const tensor& t, std::size_t i) {
  std::int64_t v = 0;
  quark::visit_dtype(t.type(), [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool>)
      v = static_cast<std::int64_t>(t.data<D>()[i]);
  });
  return v;
}

bool finetunable_type(dtype_id t) {
  return t == dtype_id::int8 || t == dtype_id::uint8 || t == dtype_id::int16 ||
         t == dtype_id::uint16;
}

std::pair<std::int64_t, std::int64_t> weight_clip(dtype_id t) {
  std::pair<std::int64_t, std::int64_t> r{0, 0};
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D>) {
      const int_range q = quant_range<D>(range_table::symmetric);
      r = {q.min, q.max};
    }
  });
  return r;
}

/// The fake-quantization chain that produces `value` (see weight_chain), or nullopt with the
/// reason in `why` ("" when `value` is not produced by such nodes at all).
std::optional<weight_chain> parse_chain(const model& qm, const GraphProto& g,
                                        const std::map<std::string, int>& producer,
                                        const std::map<std::string, std::vector<int>>& consumers,
                                        const std::string& value, std::string& why) {
  why.clear();
  auto node_of = [&](const std::string& v) -> const NodeProto* {
    const auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.node(it->second);
  };
  auto single_use = [&](const std::string& v) {
    const auto it = consumers.find(v);
    return it != consumers.end() && it->second.size() == 1;
  };
  auto float_init = [&](const std::string& v) {
    return qm.has_initializer(v) && qm.initializer(v).type() == dtype_id::float32;
  };
  auto scalar = [&](const std::string& v) -> std::optional<float> {
    if (!float_init(v))
      return std::nullopt;
    const tensor t = qm.initializer(v);
    if (t.size() != 1)
      return std::nullopt;
    return t.data<float>()[0];
  };
  auto cast_to = [](const NodeProto& n) { return attr_i(n, "to", 0); };
  const NodeProto* n = node_of(value);
  if (n == nullptr)
    return std::nullopt;
  weight_chain c;
  if (n->domain() == "com.amd.quark" &&
      (n->op_type() == "BFPQuantizeDequantize" || n->op_type() == "MXQuantizeDequantize")) {
    if (n->input_size() < 1 || !float_init(n->input(0))) {
      why = n->op_type() + " not on a float initializer";
      return std::nullopt;
    }
    if (!single_use(n->input(0))) {
      why = "shared weight";
      return std::nullopt;
    }
    auto get_i = [&](const char* key, std::int64_t dflt) { return attr_i(*n, key, dflt); };
    auto get_s = [&](const char* key, const std::string& dflt) {
      const auto* a = find_attr(*n, key);
      return a == nullptr ? dflt : a->s();
    };
    try {
      if (n->op_type() == "BFPQuantizeDequantize") {
        c.k = weight_chain::kind::bfp;
        c.bfp = quark::read_bfp_attributes(get_i, get_s);
        quark::validate(c.bfp);
      } else {
        c.k = weight_chain::kind::mx;
        c.mx = quark::read_mx_attributes(get_i, get_s);
        quark::validate(c.mx);
      }
    } catch (const quark::error& e) {
      why = n->op_type() + ": " + e.what();
      return std::nullopt;
    }
    c.init = n->input(0);
    return c;
  }
  // [Mul(., scale)] after Cast(to FLOAT).
  std::string v = value;
  if (n->domain().empty() && n->op_type() == "Mul" && n->input_size() == 2) {
    const auto s = scalar(n->input(1));
    const NodeProto* p = node_of(n->input(0));
    if (!s || p == nullptr || (p->op_type() != "Cast" && p->op_type() != "Sub") ||
        !single_use(n->input(0)))
      return std::nullopt;
    c.scale = *s;
    v = n->input(0);
    n = p;
  }
  // [Sub(., zero point)] after Cast(to FLOAT).
  if (n->domain().empty() && n->op_type() == "Sub" && n->input_size() == 2) {
    const auto z = scalar(n->input(1));
    const NodeProto* p = node_of(n->input(0));
    if (!z || p == nullptr || p->op_type() != "Cast" || !single_use(n->input(0)))
      return std::nullopt;
    c.zero_point = *z;
    v = n->input(0);
    n = p;
  }
  if (!n->domain().empty() || n->op_type() != "Cast" ||
      cast_to(*n) != static_cast<std::int64_t>(::onnx::TensorProto::FLOAT) || n->input_size() != 1)
    return std::nullopt;
  const std::string& low = n->input(0);
  if (!single_use(low)) {
    why = "shared weight";
    return std::nullopt;
  }
  auto low_type = [](std::int64_t to) -> std::optional<dtype_id> {
    if (to == ::onnx::TensorProto::FLOAT16)
      return dtype_id::float16;
    if (to == ::onnx::TensorProto::BFLOAT16)
      return dtype_id::bfloat16;
    return std::nullopt;
  };
  if (qm.has_initializer(low)) {
    const dtype_id t = qm.initializer(low).type();
    if (t != dtype_id::float16 && t != dtype_id::bfloat16) {
      why = std::string(dtype_name(t)) + " weight behind a Cast";
      return std::nullopt;
    }
    c.type = t;
    c.stored = true;
    c.init = low;
    return c;
  }
  const NodeProto* q = node_of(low);
  if (q == nullptr || !q->domain().empty() || q->op_type() != "Cast" || q->input_size() != 1)
    return std::nullopt;
  const auto t = low_type(cast_to(*q));
  if (!t)
    return std::nullopt;
  c.type = *t;
  std::string x = q->input(0);
  // Steps back over `op`(x, v) with v the scalar initializer `want` (the Add of the zero point,
  // then the Div by the scale).
  auto peel = [&](const char* op, float want, const char* missing) {
    const NodeProto* d = node_of(x);
    const auto k = d == nullptr ? std::nullopt : scalar(d->input_size() == 2 ? d->input(1) : "");
    if (d == nullptr || d->op_type() != op || !k || *k != want || !single_use(x)) {
      why = missing;
      return false;
    }
    x = d->input(0);
    return true;
  };
  if (c.zero_point != 0.0f && !peel("Add", c.zero_point, "asymmetric Cast pair without its Add"))
    return std::nullopt;
  if (c.scale != 1.0f && !peel("Div", c.scale, "scaled Cast pair without its Div"))
    return std::nullopt;
  if (!float_init(x)) {
    why = "Cast pair not on a float initializer";
    return std::nullopt;
  }
  if (!single_use(x)) {
    why = "shared weight";
    return std::nullopt;
  }
  c.init = x;
  return c;
}

/// The values of constant `name` as the quantized model computes them: a float initializer, a
/// DequantizeLinear of an integer initializer, or a QuantizeLinear / DequantizeLinear pair on a
/// float initializer (per tensor); nullopt otherwise.
std::optional<std::vector<double>> constant_values(const model& qm, const GraphProto& g,
                                                   const std::map<std::string, int>& producer,
                                                   const std::string& name) {
  auto floats = [&](const std::string& n) -> std::optional<std::vector<double>> {
    if (!qm.has_initializer(n))
      return std::nullopt;
    const tensor t = qm.initializer(n);
    if (t.type() != dtype_id::float32)
      return std::nullopt;
    return std::vector<double>(t.data<float>().begin(), t.data<float>().end());
  };
  if (qm.has_initializer(name))
    return floats(name);
  const auto pit = producer.find(name);
  if (pit == producer.end() || g.node(pit->second).op_type() != "DequantizeLinear")
    return std::nullopt;
  const NodeProto& dq = g.node(pit->second);
  const auto ds = dq.input_size() >= 2 ? floats(dq.input(1)) : std::nullopt;
  if (!ds || ds->size() != 1)
    return std::nullopt;
  const double dz = dq.input_size() >= 3 && qm.has_initializer(dq.input(2))
                        ? static_cast<double>(int_value(qm.initializer(dq.input(2)), 0))
                        : 0.0;
  std::vector<double> v;
  if (qm.has_initializer(dq.input(0))) {
    const tensor q = qm.initializer(dq.input(0));
    for (std::size_t k = 0; k < q.size(); ++k)
      v.push_back((static_cast<double>(int_value(q, k)) - dz) * (*ds)[0]);
    return v;
  }
  const auto qit = producer.find(dq.input(0));
  if (qit == producer.end() || g.node(qit->second).op_type() != "QuantizeLinear")
    return std::nullopt;
  const NodeProto& qn = g.node(qit->second);
  const auto x = floats(qn.input(0));
  const auto qs = qn.input_size() >= 2 ? floats(qn.input(1)) : std::nullopt;
  if (!x || !qs || qs->size() != 1 || qn.input_size() < 3 || !qm.has_initializer(qn.input(2)))
    return std::nullopt;
  const tensor z = qm.initializer(qn.input(2));
  std::int64_t lo = 0, hi = 0;
  quark::visit_dtype(z.type(), [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool> && sizeof(D) <= 2) {
      lo = std::numeric_limits<D>::min();
      hi = std::numeric_limits<D>::max();
    }
  });
  if (lo == hi)
    return std::nullopt;
  const double qz = static_cast<double>(int_value(z, 0));
  for (const double e : *x) {
    const float r = std::nearbyint(static_cast<float>(e) / static_cast<float>((*qs)[0]));
    const double q =
        std::clamp(static_cast<double>(r) + qz, static_cast<double>(lo), static_cast<double>(hi));
    v.push_back((q - dz) * (*ds)[0]);
  }
  return v;
}

/// output_qdq: the fake quantization of QuantizeLinear `qn` (per tensor, an 8- or 16-bit
/// integer zero point) into m; the reason it cannot be used otherwise.
std::string output_fake_quant(const model& qm, const NodeProto& qn, ft_module& m) {
  if (qn.input_size() < 3 || !qm.has_initializer(qn.input(1)) || !qm.has_initializer(qn.input(2)))
    return "output QuantizeLinear without constant parameters";
  const tensor sc = qm.initializer(qn.input(1));
  const tensor z = qm.initializer(qn.input(2));
  if (sc.type() != dtype_id::float32 || sc.size() != 1 || z.size() != 1)
    return "output QuantizeLinear not per tensor";
  if (z.type() != dtype_id::int8 && z.type() != dtype_id::uint8 && z.type() != dtype_id::int16 &&
      z.type() != dtype_id::uint16)
    return "output QuantizeLinear of type " + std::string(dtype_name(z.type()));
  quark::visit_dtype(z.type(), [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool> && sizeof(D) <= 2) {
      m.fq_min = static_cast<double>(std::numeric_limits<D>::min());
      m.fq_max = static_cast<double>(std::numeric_limits<D>::max());
    }
  });
  m.out_fq = true;
  m.fq_scale = static_cast<double>(sc.data<float>()[0]);
  m.fq_zp = static_cast<double>(int_value(z, 0));
  return {};
}

/// Where the module ends (Quark's Subgraph.find_end): the last reader of the node's output
/// decides. A QuantizeLinear: the node's output (with output_qdq, through that Q/DQ); one of
/// Quark's ACT_OPS: the activation's output, and the float target is the output of the float
/// node's last reader (with output_qdq, through the activation's Q/DQ); anything else: the
/// node's output.
std::string module_end(const model& qm, const GraphProto& g,
                       const std::map<std::string, int>& producer,
                       const std::map<std::string, std::vector<int>>& consumers,
                       const NodeProto& fnode,
                       const std::map<std::string, const NodeProto*>& float_last_consumer,
                       bool output_qdq, std::size_t cout, ft_module& m) {
  auto last_reader = [&](const std::string& v) -> const NodeProto* {
    const auto it = consumers.find(v);
    return it == consumers.end() || it->second.empty() ? nullptr : &g.node(it->second.back());
  };
  auto is_fused = [](const NodeProto& n) {
    return n.op_type() == "BFPQuantizeDequantize" || n.op_type() == "MXQuantizeDequantize";
  };
  const NodeProto* r = last_reader(m.output);
  if (r == nullptr)
    return {};
  if (r->op_type() == "QuantizeLinear" || is_fused(*r)) {
    if (!output_qdq)
      return {};
    if (is_fused(*r))
      return "output_qdq with a block-format output";
    return output_fake_quant(qm, *r, m);
  }
  static const std::map<std::string, act_kind> acts = {
      {"Relu", act_kind::relu},   {"LeakyRelu", act_kind::leaky_relu},
      {"PRelu", act_kind::prelu}, {"Clip", act_kind::clip},
      {"Tanh", act_kind::tanh},   {"Sigmoid", act_kind::sigmoid},
      {"Gelu", act_kind::gelu},   {"Softmax", act_kind::softmax}};
  const auto ak = acts.find(r->op_type());
  if (ak == acts.end() || !r->domain().empty())
    return {};
  m.act = ak->second;
  if (m.act == act_kind::softmax) {
    // Over the output channels only: one group (make_matrices checks the axis on the shapes).
    if (m.groups != 1 || is_norm(m.kind))
      return "a Softmax after a grouped or normalization module";
    std::int64_t opset = 0;
    for (const auto& op : proto(qm).opset_import()) {
      if (op.domain().empty() || op.domain() == "ai.onnx")
        opset = op.version();
    }
    m.softmax_legacy = opset < 13;
    m.softmax_axis = attr_i(*r, "axis", m.softmax_legacy ? 1 : -1);
  }
  if (m.act == act_kind::leaky_relu)
    m.alpha = static_cast<double>(attr_f(*r, "alpha", 0.01f));
  if (m.act == act_kind::gelu) {
    const auto* a = find_attr(*r, "approximate");
    m.gelu_tanh = a != nullptr && a->s() == "tanh";
  }
  if (m.act == act_kind::clip) {
    if (const auto* a = find_attr(*r, "min"))
      m.lo = static_cast<double>(a->f());
    if (const auto* a = find_attr(*r, "max"))
      m.hi = static_cast<double>(a->f());
    for (int k : {1, 2}) {
      if (r->input_size() <= k || r->input(k).empty())
        continue;
      const auto v = constant_values(qm, g, producer, r->input(k));
      if (!v || v->size() != 1)
        return "Clip bounds not constant";
      (k == 1 ? m.lo : m.hi) = (*v)[0];
    }
  }
  if (m.act == act_kind::prelu) {
    const auto v =
        r->input_size() >= 2 ? constant_values(qm, g, producer, r->input(1)) : std::nullopt;
    if (!v || (v->size() != 1 && v->size() != cout))
      return "PRelu slope not constant, or not one per output channel";
    m.slope = *v;
  }
  const auto fc = float_last_consumer.find(fnode.output(0));
  if (fc == float_last_consumer.end() || fc->second->op_type() != r->op_type() ||
      fc->second->output_size() < 1)
    return "the activation has no float counterpart";
  m.float_output = fc->second->output(0);
  if (output_qdq) {
    if (const NodeProto* rq = last_reader(r->output(0)); rq != nullptr) {
      if (is_fused(*rq))
        return "output_qdq with a block-format output";
      if (rq->op_type() == "QuantizeLinear")
        return output_fake_quant(qm, *rq, m);
    }
  }
  return {};
}

/// The integer weight's scale and zero point per element, and Quark's clip bounds.
void integer_params(ft_module& m) {
  const std::size_t count = m.w.size();
  const std::size_t rank = m.wshape.size();
  m.scale.resize(count);
  m.zp.resize(count);
  std::size_t inner = 1;
  if (m.axis >= 0) {
    for (std::size_t d = static_cast<std::size_t>(m.axis) + 1; d < rank; ++d)
      inner *= static_cast<std::size_t>(m.wshape[d]);
  }
  for (std::size_t e = 0; e < count; ++e) {
    const std::size_t c =
        m.axis < 0
            ? 0
            : (e / inner) % static_cast<std::size_t>(m.wshape[static_cast<std::size_t>(m.axis)]);
    m.scale[e] = static_cast<double>(m.scale_param[c]);
    m.zp[e] = m.zp_param.empty() ? 0.0 : static_cast<double>(m.zp_param[c]);
  }
  std::tie(m.qmin, m.qmax) = weight_clip(m.wtype);
}

std::string describe_rest(const model& qm, const model& fm, const GraphProto& g, const NodeProto& n,
                          const std::map<std::string, int>& producer,
                          const std::map<std::string, std::vector<int>>& consumers,
                          const std::map<std::string, const NodeProto*>& float_by_name,
                          const std::map<std::string, const NodeProto*>& float_last_consumer,
                          bool output_qdq, ft_module& m);

/// Builds the module of quantized node `i`, or returns the reason it is left alone.
std::string describe(const model& qm, const model& fm, const GraphProto& g, int i,
                     const std::map<std::string, int>& producer,
                     const std::map<std::string, std::vector<int>>& consumers,
                     const std::map<std::string, const NodeProto*>& float_by_name,
                     const std::map<std::string, const NodeProto*>& float_last_consumer,
                     bool output_qdq, bool adaquant, ft_module& m) {
  const NodeProto& n = g.node(i);
  m.node = i;
  m.name = n.name().empty() ? n.output(0) : n.name();
  m.kind = n.op_type() == "Conv"                    ? op_kind::conv
           : n.op_type() == "ConvTranspose"         ? op_kind::conv_transpose
           : n.op_type() == "Gemm"                  ? op_kind::gemm
           : n.op_type() == "InstanceNormalization" ? op_kind::instance_norm
           : n.op_type() == "LayerNormalization"    ? op_kind::layer_norm
                                                    : op_kind::matmul;
  if (n.input_size() < 2 || n.output_size() < 1 || qm.has_initializer(n.input(0)))
    return "no activation input";
  m.input = n.input(0);
  m.output = n.output(0);
  auto pit = producer.find(n.input(1));
  if (pit == producer.end() || g.node(pit->second).op_type() != "DequantizeLinear") {
    std::string why;
    std::optional<weight_chain> chain = parse_chain(qm, g, producer, consumers, n.input(1), why);
    if (!chain)
      return why.empty() ? "weight not quantized" : why;
    if (!adaquant)
      return "AdaRound needs integer weights, this one is fake-quantized by " + chain->label();
    m.wshape = qm.initializer(chain->init).shape();
    m.weight_q = chain->init;
    m.chain = std::move(chain);
    return describe_rest(qm, fm, g, n, producer, consumers, float_by_name, float_last_consumer,
                         output_qdq, m);
  }
  const NodeProto& dq = g.node(pit->second);
  if (dq.input_size() < 2 || !qm.has_initializer(dq.input(0)) || !qm.has_initializer(dq.input(1)))
    return "weight not quantized";
  if (consumers.at(dq.input(0)).size() != 1 || consumers.at(n.input(1)).size() != 1)
    return "shared weight";
  if (attr_i(dq, "block_size", 0) != 0)
    return "blocked weight";
  const tensor wq = qm.initializer(dq.input(0));
  if (!finetunable_type(wq.type()))
    return std::string(dtype_name(wq.type())) + " weight";
  m.weight_q = dq.input(0);
  m.wtype = wq.type();
  m.wshape = wq.shape();
  const tensor sc = qm.initializer(dq.input(1));
  if (sc.type() != dtype_id::float32)
    return "scale not float32";
  m.scale_param.assign(sc.data<float>().begin(), sc.data<float>().end());
  if (dq.input_size() >= 3 && !dq.input(2).empty()) {
    if (!qm.has_initializer(dq.input(2)))
      return "zero point not constant";
    const tensor z = qm.initializer(dq.input(2));
    for (std::size_t k = 0; k < z.size(); ++k)
      m.zp_param.push_back(int_value(z, k));
  }
  const std::size_t rank = m.wshape.size();
  if (m.scale_param.size() > 1) {
    std::int64_t ax = attr_i(dq, "axis", 1);
    if (ax < 0)
      ax += static_cast<std::int64_t>(rank);
    if (ax < 0 || ax >= static_cast<std::int64_t>(rank) ||
        static_cast<std::size_t>(m.wshape[static_cast<std::size_t>(ax)]) != m.scale_param.size())
      return "scale shape";
    m.axis = ax;
  }
  if (!m.zp_param.empty() && m.zp_param.size() != m.scale_param.size())
    return "zero point shape";
  return describe_rest(qm, fm, g, n, producer, consumers, float_by_name, float_last_consumer,
                       output_qdq, m);
}

/// The part of describe() after the weight's quantization: the float counterpart, the integer
/// weight's per-element parameters, the GEMM view, the bias and the module's end.
std::string describe_rest(const model& qm, const model& fm, const GraphProto& g, const NodeProto& n,
                          const std::map<std::string, int>& producer,
                          const std::map<std::string, std::vector<int>>& consumers,
                          const std::map<std::string, const NodeProto*>& float_by_name,
                          const std::map<std::string, const NodeProto*>& float_last_consumer,
                          bool output_qdq, ft_module& m) {
  const std::size_t rank = m.wshape.size();
  // Float node (same name; else same output) and weight.
  auto fit = float_by_name.find(n.name());
  if (n.name().empty() || fit == float_by_name.end())
    fit = float_by_name.find(m.output);
  if (fit == float_by_name.end() || fit->second->op_type() != n.op_type())
    return "no float counterpart";
  const NodeProto& fnode = *fit->second;
  m.float_input = fnode.input(0);
  m.float_output = fnode.output(0);
  if (fnode.input_size() < 2 || !fm.has_initializer(fnode.input(1)))
    return "float weight not found";
  const tensor wf = fm.initializer(fnode.input(1));
  if (wf.type() != dtype_id::float32 || wf.shape() != m.wshape)
    return "float weight not found";
  m.w.assign(wf.data<float>().begin(), wf.data<float>().end());
  const std::size_t count = m.w.size();
  if (!m.chain)
    integer_params(m);

  // GEMM view.
  std::size_t cout = 0;
  if (is_norm(m.kind)) {
    // y = xhat * scale + bias: a depthwise 1x1 "convolution" of the normalized input, one group
    // per scale element (its channel for InstanceNormalization, its position in the normalized
    // dimensions for LayerNormalization).
    if (m.kind == op_kind::instance_norm && rank != 1)
      return "scale of rank " + std::to_string(rank);
    m.epsilon = static_cast<double>(attr_f(n, "epsilon", 1e-5f));
    m.norm_axis = attr_i(n, "axis", -1);
    cout = count;
    m.groups = count;
    m.cout_g = 1;
    m.k_g = 1;
    m.flat.resize(count);
    std::iota(m.flat.begin(), m.flat.end(), std::size_t{0});
  } else if (is_conv(m.kind)) {
    if (rank != 4 && rank != 3)
      return "weight of rank " + std::to_string(rank);
    m.one_d = rank == 3;
    m.groups = static_cast<std::size_t>(attr_i(n, "group", 1));
    if (m.groups == 0)
      return "group";
    if (m.kind == op_kind::conv) {
      // Weight (C_out, C_in / g, k...).
      cout = static_cast<std::size_t>(m.wshape[0]);
      if (cout % m.groups != 0)
        return "group";
      m.cout_g = cout / m.groups;
      m.cin_g = static_cast<std::size_t>(m.wshape[1]);
    } else {
      // Weight (C_in, C_out / g, k...).
      const auto cin = static_cast<std::size_t>(m.wshape[0]);
      if (cin % m.groups != 0)
        return "group";
      m.cin_g = cin / m.groups;
      m.cout_g = static_cast<std::size_t>(m.wshape[1]);
      cout = m.cout_g * m.groups;
    }
    m.kh = m.one_d ? 1 : static_cast<std::size_t>(m.wshape[2]);
    m.kw = static_cast<std::size_t>(m.wshape[m.one_d ? 2 : 3]);
    auto ints = [&](const char* key) {
      std::vector<std::int64_t> v;
      if (const auto* a = find_attr(n, key))
        v.assign(a->ints().begin(), a->ints().end());
      return v;
    };
    const auto strides = ints("strides");
    const auto dil = ints("dilations");
    const auto pads = ints("pads");
    const std::size_t sp = m.one_d ? 1 : 2;
    if ((!strides.empty() && strides.size() != sp) || (!dil.empty() && dil.size() != sp) ||
        (!pads.empty() && pads.size() != 2 * sp))
      return "Conv attributes";
    auto at = [&](const std::vector<std::int64_t>& v, std::size_t k) {
      return static_cast<std::size_t>(v.empty() ? 1 : v[k]);
    };
    if (m.one_d) {
      m.sw = at(strides, 0);
      m.dw = at(dil, 0);
      if (!pads.empty()) {
        m.pl = pads[0];
        m.pr = pads[1];
      }
    } else {
      m.sh = at(strides, 0);
      m.sw = at(strides, 1);
      m.dh = at(dil, 0);
      m.dw = at(dil, 1);
      if (!pads.empty()) {
        m.pt = pads[0];
        m.pl = pads[1];
        m.pb = pads[2];
        m.pr = pads[3];
      }
    }
    if (const auto* a = find_attr(n, "auto_pad"))
      m.auto_pad = a->s();
    m.k_g = m.cin_g * m.kh * m.kw;
    m.flat.resize(m.groups * m.cout_g * m.k_g);
    if (m.kind == op_kind::conv) {
      std::iota(m.flat.begin(), m.flat.end(), std::size_t{0});
    } else {
      const auto op = ints("output_padding");
      const auto os = ints("output_shape");
      if ((!op.empty() && op.size() != sp) || (!os.empty() && os.size() < sp))
        return "ConvTranspose attributes";
      if (!op.empty()) {
        m.oph = m.one_d ? 0 : op[0];
        m.opw = op[sp - 1];
      }
      m.output_shape = !os.empty();
      // Row (c, i, j) of output channel o of group g is weight element (g cin_g + c, o, i, j).
      const std::size_t kk = m.kh * m.kw;
      for (std::size_t gi = 0; gi < m.groups; ++gi) {
        for (std::size_t o = 0; o < m.cout_g; ++o) {
          for (std::size_t c = 0; c < m.cin_g; ++c) {
            for (std::size_t e = 0; e < kk; ++e)
              m.flat[((gi * m.cout_g + o) * m.cin_g + c) * kk + e] =
                  ((gi * m.cin_g + c) * m.cout_g + o) * kk + e;
          }
        }
      }
    }
  } else {
    if (rank != 2)
      return "weight of rank " + std::to_string(rank);
    const bool trans_b = m.kind == op_kind::gemm && attr_i(n, "transB", 0) != 0;
    if (m.kind == op_kind::gemm &&
        (attr_i(n, "transA", 0) != 0 || attr_f(n, "alpha", 1.0f) != 1.0f ||
         attr_f(n, "beta", 1.0f) != 1.0f))
      return "Gemm with transA / alpha / beta";
    const auto r0 = static_cast<std::size_t>(m.wshape[0]);
    const auto r1 = static_cast<std::size_t>(m.wshape[1]);
    cout = trans_b ? r0 : r1;
    m.k_g = trans_b ? r1 : r0;
    m.cout_g = cout;
    m.flat.resize(cout * m.k_g);
    for (std::size_t o = 0; o < cout; ++o) {
      for (std::size_t k = 0; k < m.k_g; ++k)
        m.flat[o * m.k_g + k] = trans_b ? o * m.k_g + k : k * cout + o;
    }
  }
  // Bias.
  m.bias.assign(cout, 0.0);
  if (m.kind != op_kind::matmul && n.input_size() >= 3 && !n.input(2).empty()) {
    const std::string& bv = n.input(2);
    auto bp = producer.find(bv);
    if (bp != producer.end() && g.node(bp->second).op_type() == "DequantizeLinear") {
      const NodeProto& bdq = g.node(bp->second);
      if (bdq.input_size() < 2 || !qm.has_initializer(bdq.input(0)) ||
          !qm.has_initializer(bdq.input(1)))
        return "bias not constant";
      m.bias_quantized = true;
      m.bias_data = bdq.input(0);
      const tensor bs = qm.initializer(bdq.input(1));
      if (bs.type() != dtype_id::float32)
        return "bias scale not float32";
      m.bias_scale.assign(bs.data<float>().begin(), bs.data<float>().end());
      if (bdq.input_size() >= 3 && !bdq.input(2).empty()) {
        if (!qm.has_initializer(bdq.input(2)))
          return "bias zero point not constant";
        const tensor z = qm.initializer(bdq.input(2));
        for (std::size_t k = 0; k < z.size(); ++k)
          m.bias_zp.push_back(int_value(z, k));
      }
    } else if (qm.has_initializer(bv)) {
      m.bias_data = bv;
    } else {
      // A float16 / bfloat16 / BFP / MX bias: the values the model computes from it; AdaQuant's
      // update_bias trains it and stores it through the chain as a weight is.
      std::string why;
      std::optional<weight_chain> bc = parse_chain(qm, g, producer, consumers, bv, why);
      if (!bc)
        return "bias not constant";
      const shape_t bshape = qm.initializer(bc->init).shape();
      const std::vector<float> v = bc->current(qm, bshape);
      if (v.size() != cout)
        return "bias shape";
      for (std::size_t c = 0; c < cout; ++c)
        m.bias[c] = static_cast<double>(v[c]);
      m.bias_data = bc->init;
      m.bias_chain = std::move(bc);
      return module_end(qm, g, producer, consumers, fnode, float_last_consumer, output_qdq, cout,
                        m);
    }
    const tensor b = qm.initializer(m.bias_data);
    m.bias_type = b.type();
    if (b.size() != cout)
      return "bias shape";
    if (m.bias_quantized) {
      if (b.type() != dtype_id::int32 && b.type() != dtype_id::int16 &&
          b.type() != dtype_id::int8 && b.type() != dtype_id::uint8 && b.type() != dtype_id::uint16)
        return "bias type";
      if (m.bias_scale.size() != 1 && m.bias_scale.size() != cout)
        return "bias scale shape";
      for (std::size_t c = 0; c < cout; ++c) {
        const std::size_t k = m.bias_scale.size() == 1 ? 0 : c;
        const double z = m.bias_zp.empty()
                             ? 0.0
                             : static_cast<double>(m.bias_zp[std::min(k, m.bias_zp.size() - 1)]);
        m.bias[c] =
            (static_cast<double>(int_value(b, c)) - z) * static_cast<double>(m.bias_scale[k]);
      }
    } else {
      if (b.type() != dtype_id::float32)
        return "bias type";
      for (std::size_t c = 0; c < cout; ++c)
        m.bias[c] = static_cast<double>(b.data<float>()[c]);
    }
  }
  return module_end(qm, g, producer, consumers, fnode, float_last_consumer, output_qdq, cout, m);
}

/// T (per group, cout_g x P) from the output planes of a Conv / ConvTranspose.
void output_matrices(const ft_module& m, std::span<const float> tv, std::size_t n, std::size_t opix,
                     std::vector<mat>& ts) {
  for (std::size_t gi = 0; gi < m.groups; ++gi) {
    mat& T = ts[gi];
    T.resize(ix(m.cout_g), ix(n * opix));
    for (std::size_t b = 0; b < n; ++b) {
      for (std::size_t o = 0; o < m.cout_g; ++o) {
        const float* plane = tv.data() + (b * m.cout_g * m.groups + gi * m.cout_g + o) * opix;
        for (std::size_t p = 0; p < opix; ++p)
          T(ix(o), ix(b * opix + p)) = static_cast<double>(plane[p]);
      }
    }
  }
}

/// Xt of a ConvTranspose: y[o, oy, ox] = sum over (c, i, j) of w[c, o, i, j] x[c, iy, ix] with
/// oy = iy sh + i dh - pad_top (same for x), so the column of output position (oy, ox) holds, in
/// row (c, i, j), the input value that reaches it through kernel tap (i, j), or 0. The begin pads
/// follow the runtime (ops_conv.cpp): explicit, or split from the output size under output_shape
/// or auto_pad SAME_* (SAME_UPPER puts the smaller half first). The output size must match.
bool transposed_matrices(const ft_module& m, std::span<const float> xv, std::span<const float> tv,
                         std::size_t n, std::size_t ih, std::size_t iw, std::size_t oh,
                         std::size_t ow, std::vector<mat>& xs, std::vector<mat>& ts) {
  const auto i64 = [](std::size_t v) { return static_cast<std::int64_t>(v); };
  const std::int64_t full_h = i64(m.sh) * (i64(ih) - 1) + m.oph + i64((m.kh - 1) * m.dh + 1);
  const std::int64_t full_w = i64(m.sw) * (i64(iw) - 1) + m.opw + i64((m.kw - 1) * m.dw + 1);
  std::int64_t pt = m.one_d ? 0 : m.pt, pl = m.pl, pb = m.one_d ? 0 : m.pb, pr = m.pr;
  const bool same = m.auto_pad == "SAME_UPPER" || m.auto_pad == "SAME_LOWER";
  auto split = [&](std::int64_t total, std::int64_t& begin, std::int64_t& end) {
    if (total < 0) {
      begin = 0;
      end = total;
    } else if (m.auto_pad == "SAME_UPPER") {
      begin = total / 2;
      end = total - begin;
    } else {
      end = total / 2;
      begin = total - end;
    }
  };
  if (m.output_shape || same) {
    if (!m.one_d)
      split(full_h - (m.output_shape ? i64(oh) : i64(ih * m.sh)), pt, pb);
    split(full_w - (m.output_shape ? i64(ow) : i64(iw * m.sw)), pl, pr);
  }
  if (full_h - pt - pb != i64(oh) || full_w - pl - pr != i64(ow))
    return false;
  const std::size_t cin = m.cin_g * m.groups, opix = oh * ow;
  for (std::size_t gi = 0; gi < m.groups; ++gi) {
    mat& X = xs[gi];
    X.setZero(ix(m.k_g + 1), ix(n * opix));
    for (std::size_t b = 0; b < n; ++b) {
      for (std::size_t cl = 0; cl < m.cin_g; ++cl) {
        const float* plane = xv.data() + (b * cin + gi * m.cin_g + cl) * ih * iw;
        for (std::size_t i = 0; i < m.kh; ++i) {
          for (std::size_t j = 0; j < m.kw; ++j) {
            const std::size_t row = (cl * m.kh + i) * m.kw + j;
            for (std::size_t y = 0; y < ih; ++y) {
              const std::int64_t oy = i64(y * m.sh + i * m.dh) - pt;
              if (oy < 0 || oy >= i64(oh))
                continue;
              const std::size_t col0 = b * opix + static_cast<std::size_t>(oy) * ow;
              for (std::size_t xi = 0; xi < iw; ++xi) {
                const std::int64_t ox = i64(xi * m.sw + j * m.dw) - pl;
                if (ox >= 0 && ox < i64(ow))
                  X(ix(row), ix(col0 + static_cast<std::size_t>(ox))) =
                      static_cast<double>(plane[y * iw + xi]);
              }
            }
          }
        }
      }
    }
    X.row(ix(m.k_g)).setOnes();
  }
  output_matrices(m, tv, n, opix, ts);
  return true;
}

/// Xt (per group: the normalized input of that group's positions and a row of ones) and T of a
/// normalization. InstanceNormalization normalizes each (n, c) plane of x (N, C, D...), its group c
/// holds the N x D... positions of channel c; LayerNormalization normalizes each row of x viewed as
/// (prod of the dims before axis, prod of the dims from axis), its group d holds column d. The
/// mean and the (biased) variance are computed in double, as xhat = (x - mean) / sqrt(var + eps).
bool norm_matrices(const ft_module& m, const tensor& x, const tensor& t, std::vector<mat>& xs,
                   std::vector<mat>& ts) {
  if (x.shape() != t.shape() || x.rank() < 1)
    return false;
  const auto xv = x.data<float>();
  const auto tv = t.data<float>();
  std::size_t outer = 0, groups = 0, inner = 0;  // x viewed as (outer, groups, inner)
  std::size_t norm_len = 0;                      // elements per mean / variance
  if (m.kind == op_kind::instance_norm) {
    if (x.rank() < 3)
      return false;
    outer = static_cast<std::size_t>(x.shape()[0]);
    groups = static_cast<std::size_t>(x.shape()[1]);
    inner = groups == 0 || outer == 0 ? 0 : x.size() / (outer * groups);
    norm_len = inner;
  } else {
    const auto rank = static_cast<std::int64_t>(x.rank());
    const std::int64_t a = m.norm_axis < 0 ? m.norm_axis + rank : m.norm_axis;
    if (a < 0 || a >= rank)
      return false;
    outer = 1;
    for (std::int64_t d = 0; d < a; ++d)
      outer *= static_cast<std::size_t>(x.shape()[static_cast<std::size_t>(d)]);
    groups = outer == 0 ? 0 : x.size() / outer;
    inner = 1;
    norm_len = groups;
  }
  if (groups != m.groups || norm_len == 0)
    return false;
  const std::size_t positions = outer * inner;
  for (std::size_t gi = 0; gi < groups; ++gi) {
    xs[gi].resize(2, ix(positions));
    xs[gi].row(1).setOnes();
    ts[gi].resize(1, ix(positions));
  }
  // One normalization set at a time: (n, c) planes, or rows.
  const std::size_t sets = m.kind == op_kind::instance_norm ? outer * groups : outer;
  for (std::size_t set = 0; set < sets; ++set) {
    const std::size_t base = set * norm_len;
    double mean = 0.0;
    for (std::size_t e = 0; e < norm_len; ++e)
      mean += static_cast<double>(xv[base + e]);
    mean /= static_cast<double>(norm_len);
    double var = 0.0;
    for (std::size_t e = 0; e < norm_len; ++e) {
      const double d = static_cast<double>(xv[base + e]) - mean;
      var += d * d;
    }
    var /= static_cast<double>(norm_len);
    const double inv = 1.0 / std::sqrt(var + m.epsilon);
    for (std::size_t e = 0; e < norm_len; ++e) {
      // InstanceNormalization: set = (n, c), element e is position n * inner + e of group c.
      // LayerNormalization: set = row r, element e is position r of group e.
      const std::size_t gi = m.kind == op_kind::instance_norm ? set % groups : e;
      const std::size_t pos = m.kind == op_kind::instance_norm ? (set / groups) * inner + e : set;
      xs[gi](0, ix(pos)) = (static_cast<double>(xv[base + e]) - mean) * inv;
      ts[gi](0, ix(pos)) = static_cast<double>(tv[base + e]);
    }
  }
  return true;
}

/// Xt (per group, (k_g + 1) x P with a last row of ones) and T (cout_g x P) of one sample.
/// Returns false when the shapes do not fit the module.
bool make_matrices(const ft_module& m, const tensor& x, const tensor& t, std::vector<mat>& xs,
                   std::vector<mat>& ts) {
  if (x.type() != dtype_id::float32 || t.type() != dtype_id::float32)
    return false;
  const auto xv = x.data<float>();
  const auto tv = t.data<float>();
  xs.assign(m.groups, mat());
  ts.assign(m.groups, mat());
  if (is_norm(m.kind))
    return norm_matrices(m, x, t, xs, ts);
  if (m.act == act_kind::softmax) {
    // The Softmax must normalise over the channel axis alone (1 for a Conv, the last for Gemm /
    // MatMul); before opset 13 it flattens the dims from its axis, so those must be the channels.
    const auto rank = static_cast<std::int64_t>(t.rank());
    const std::int64_t channel = is_conv(m.kind) ? 1 : rank - 1;
    const std::int64_t a = m.softmax_axis < 0 ? m.softmax_axis + rank : m.softmax_axis;
    std::int64_t trailing = 1;
    for (std::int64_t k = channel + 1; k < rank; ++k)
      trailing *= t.shape()[static_cast<std::size_t>(k)];
    if (a != channel || (m.softmax_legacy && trailing != 1))
      return false;
  }
  if (!is_conv(m.kind)) {
    const std::size_t k = m.k_g, cout = m.cout_g;
    if (x.rank() < 1 || static_cast<std::size_t>(x.shape().back()) != k || t.rank() < 1 ||
        static_cast<std::size_t>(t.shape().back()) != cout)
      return false;
    const std::size_t rows = k == 0 ? 0 : x.size() / k;
    if (t.size() != rows * cout)
      return false;
    mat& X = xs[0];
    X.resize(ix(k + 1), ix(rows));
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < k; ++c)
        X(ix(c), ix(r)) = static_cast<double>(xv[r * k + c]);
      X(ix(k), ix(r)) = 1.0;
    }
    mat& T = ts[0];
    T.resize(ix(cout), ix(rows));
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t o = 0; o < cout; ++o)
        T(ix(o), ix(r)) = static_cast<double>(tv[r * cout + o]);
    }
    return true;
  }
  const std::size_t want_rank = m.one_d ? 3 : 4;
  if (x.rank() != want_rank || t.rank() != want_rank)
    return false;
  const auto n = static_cast<std::size_t>(x.shape()[0]);
  const auto cin = static_cast<std::size_t>(x.shape()[1]);
  const std::size_t ih = m.one_d ? 1 : static_cast<std::size_t>(x.shape()[2]);
  const auto iw = static_cast<std::size_t>(x.shape()[want_rank - 1]);
  const std::size_t oh = m.one_d ? 1 : static_cast<std::size_t>(t.shape()[2]);
  const auto ow = static_cast<std::size_t>(t.shape()[want_rank - 1]);
  if (cin != m.cin_g * m.groups || static_cast<std::size_t>(t.shape()[0]) != n ||
      static_cast<std::size_t>(t.shape()[1]) != m.cout_g * m.groups)
    return false;
  if (m.kind == op_kind::conv_transpose)
    return transposed_matrices(m, xv, tv, n, ih, iw, oh, ow, xs, ts);
  // Begin pads (auto_pad SAME_* derives them from the output size, as ONNX does).
  auto begin_pad = [&](std::size_t in, std::size_t out, std::size_t k, std::size_t s, std::size_t d,
                       std::int64_t explicit_pad) -> std::int64_t {
    if (m.auto_pad == "VALID")
      return 0;
    if (m.auto_pad == "SAME_UPPER" || m.auto_pad == "SAME_LOWER") {
      const std::int64_t total =
          std::max<std::int64_t>(0, static_cast<std::int64_t>((out - 1) * s + (k - 1) * d + 1) -
                                        static_cast<std::int64_t>(in));
      return m.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    }
    return explicit_pad;
  };
  const std::int64_t pt = m.one_d ? 0 : begin_pad(ih, oh, m.kh, m.sh, m.dh, m.pt);
  const std::int64_t pl = begin_pad(iw, ow, m.kw, m.sw, m.dw, m.pl);
  if (m.auto_pad == "NOTSET") {
    // The output size must follow from the explicit pads.
    auto out_size = [](std::size_t in, std::int64_t p0, std::int64_t p1, std::size_t k,
                       std::size_t s, std::size_t d) {
      const std::int64_t span =
          static_cast<std::int64_t>(in) + p0 + p1 - static_cast<std::int64_t>((k - 1) * d + 1);
      return span < 0 ? std::int64_t{-1} : span / static_cast<std::int64_t>(s) + 1;
    };
    if ((!m.one_d && out_size(ih, m.pt, m.pb, m.kh, m.sh, m.dh) != static_cast<std::int64_t>(oh)) ||
        out_size(iw, m.pl, m.pr, m.kw, m.sw, m.dw) != static_cast<std::int64_t>(ow))
      return false;
  }
  const std::size_t p_count = n * oh * ow;
  for (std::size_t gi = 0; gi < m.groups; ++gi) {
    mat& X = xs[gi];
    X.setZero(ix(m.k_g + 1), ix(p_count));
    for (std::size_t b = 0; b < n; ++b) {
      for (std::size_t cl = 0; cl < m.cin_g; ++cl) {
        const float* plane = xv.data() + (b * cin + gi * m.cin_g + cl) * ih * iw;
        for (std::size_t i = 0; i < m.kh; ++i) {
          for (std::size_t j = 0; j < m.kw; ++j) {
            const std::size_t row = (cl * m.kh + i) * m.kw + j;
            for (std::size_t y = 0; y < oh; ++y) {
              const std::int64_t yy = static_cast<std::int64_t>(y * m.sh + i * m.dh) - pt;
              if (yy < 0 || yy >= static_cast<std::int64_t>(ih))
                continue;
              const float* line = plane + static_cast<std::size_t>(yy) * iw;
              const std::size_t col0 = (b * oh + y) * ow;
              for (std::size_t xo = 0; xo < ow; ++xo) {
                const std::int64_t xx = static_cast<std::int64_t>(xo * m.sw + j * m.dw) - pl;
                if (xx >= 0 && xx < static_cast<std::int64_t>(iw))
                  X(ix(row), ix(col0 + xo)) =
                      static_cast<double>(line[static_cast<std::size_t>(xx)]);
              }
            }
          }
        }
      }
    }
    X.row(ix(m.k_g)).setOnes();
  }
  output_matrices(m, tv, n, oh * ow, ts);
  return true;
}

/// Loss and gradient of the module with weights+bias `wt` (per group cout_g x (k_g + 1)) over the
/// samples `batch`.
double loss_and_grad(const ft_module& m, const std::vector<sample_data>& data, bool gram,
                     const std::vector<std::size_t>& batch, const std::vector<mat>& wt,
                     std::vector<mat>* grad) {
  double loss = 0.0, positions = 0.0;
  if (grad != nullptr) {
    for (std::size_t gi = 0; gi < wt.size(); ++gi)
      (*grad)[gi].setZero(wt[gi].rows(), wt[gi].cols());
  }
  mat tmp;
  std::vector<double> softmax_g;
  for (const std::size_t s : batch) {
    const sample_data& d = data[s];
    positions += d.positions;
    for (std::size_t gi = 0; gi < wt.size(); ++gi) {
      if (gram) {
        tmp.noalias() = wt[gi] * d.a[gi];
        loss += tmp.cwiseProduct(wt[gi]).sum() - 2.0 * wt[gi].cwiseProduct(d.b[gi]).sum();
        if (grad != nullptr)
          (*grad)[gi] += tmp - d.b[gi];
      } else if (!m.nonlinear()) {
        tmp.noalias() = wt[gi] * d.a[gi];
        tmp -= d.b[gi];
        loss += tmp.squaredNorm();
        if (grad != nullptr)
          (*grad)[gi].noalias() += tmp * d.a[gi].transpose();
      } else {
        // The activation, then the output's fake quantization (straight-through inside the
        // clip range, as torch's fake_quantize): tmp becomes dL/dY / 2 per element.
        tmp.noalias() = wt[gi] * d.a[gi];
        if (m.act == act_kind::softmax) {
          // Per position: a = softmax(y) over the channels, r = fq(a) - t, dL/dy / 2 =
          // a (g - a.g) with g = r times the fake quantization's pass mask.
          for (Index p = 0; p < tmp.cols(); ++p) {
            const double mx = tmp.col(p).maxCoeff();
            double sum = 0.0;
            for (Index o = 0; o < tmp.rows(); ++o) {
              tmp(o, p) = std::exp(tmp(o, p) - mx);
              sum += tmp(o, p);
            }
            double dot = 0.0;
            std::vector<double>& gbuf = softmax_g;
            gbuf.resize(static_cast<std::size_t>(tmp.rows()));
            for (Index o = 0; o < tmp.rows(); ++o) {
              const double a = tmp(o, p) / sum;
              tmp(o, p) = a;
              double out = a, pass = 1.0;
              if (m.out_fq) {
                const double q = std::nearbyint(a / m.fq_scale) + m.fq_zp;
                pass = q < m.fq_min || q > m.fq_max ? 0.0 : 1.0;
                out = (std::clamp(q, m.fq_min, m.fq_max) - m.fq_zp) * m.fq_scale;
              }
              const double r = out - d.b[gi](o, p);
              loss += r * r;
              gbuf[static_cast<std::size_t>(o)] = r * pass;
              dot += a * gbuf[static_cast<std::size_t>(o)];
            }
            for (Index o = 0; o < tmp.rows(); ++o)
              tmp(o, p) = tmp(o, p) * (gbuf[static_cast<std::size_t>(o)] - dot);
          }
          if (grad != nullptr)
            (*grad)[gi].noalias() += tmp * d.a[gi].transpose();
          continue;
        }
        for (Index o = 0; o < tmp.rows(); ++o) {
          const std::size_t c = gi * m.cout_g + static_cast<std::size_t>(o);
          for (Index p = 0; p < tmp.cols(); ++p) {
            double dv = 1.0;
            double out = activate(m, tmp(o, p), c, dv);
            if (m.out_fq) {
              const double q = std::nearbyint(out / m.fq_scale) + m.fq_zp;
              if (q < m.fq_min || q > m.fq_max)
                dv = 0.0;
              out = (std::clamp(q, m.fq_min, m.fq_max) - m.fq_zp) * m.fq_scale;
            }
            const double r = out - d.b[gi](o, p);
            loss += r * r;
            tmp(o, p) = r * dv;
          }
        }
        if (grad != nullptr)
          (*grad)[gi].noalias() += tmp * d.a[gi].transpose();
      }
    }
    if (gram)
      loss += d.e;
  }
  if (positions <= 0.0)
    return 0.0;
  if (grad != nullptr) {
    for (auto& gm : *grad)
      gm *= 2.0 / positions;
  }
  return std::max(loss, 0.0) / positions;
}

/// The weight's shape as the headers take it.
quark::tensor_shape weight_shape(const ft_module& m) {
  return header_shape(m.wshape);
}

/// The weight's parameters as the headers take them: the stored scales and zero points (`z`
/// receives the zero points), the DequantizeLinear's granularity and Quark's clip bounds.
template <class D>
tensor_qparams<D> weight_params(const ft_module& m, std::vector<zero_point_t<D>>& z) {
  z.clear();
  for (const auto v : m.zp_param)
    z.push_back(static_cast<zero_point_t<D>>(v));
  const quark::granularity gran =
      m.axis < 0 ? quark::granularity{per_tensor{}} : quark::granularity{per_channel{m.axis}};
  return tensor_qparams<D>{m.scale_param, z, gran, m.qmin, m.qmax};
}

/// Calls f(std::type_identity<D>{}) with the weight's storage type D (the finetunable types).
template <class F>
void with_weight_type(dtype_id t, F&& f) {
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D> && std::is_integral_v<D>)
      f(std::type_identity<D>{});
  });
}

/// [W b] per group from dequantized weights `wq` (per element) and the bias `b`.
void fill_wt(const ft_module& m, std::span<const double> wq, std::span<const double> b,
             std::vector<mat>& wt) {
  wt.resize(m.groups);
  for (std::size_t gi = 0; gi < m.groups; ++gi) {
    mat& W = wt[gi];
    W.resize(ix(m.cout_g), ix(m.k_g + 1));
    for (std::size_t o = 0; o < m.cout_g; ++o) {
      const std::size_t base = (gi * m.cout_g + o) * m.k_g;
      for (std::size_t k = 0; k < m.k_g; ++k)
        W(ix(o), ix(k)) = wq[m.flat[base + k]];
      W(ix(o), ix(m.k_g)) = b[gi * m.cout_g + o];
    }
  }
}

std::vector<double> dequantize(const ft_module& m, const std::vector<std::int64_t>& q) {
  std::vector<double> out(q.size());
  for (std::size_t i = 0; i < q.size(); ++i)
    out[i] = (static_cast<double>(q[i]) - m.zp[i]) * m.scale[i];
  return out;
}

struct module_result {
  double before = 0.0, after = 0.0;
  bool improved = false;
  bool lr_adjusted = false;  ///< trained at lr_adjust's rate
};

/// Fine-tunes one module on its data; writes the new integers into `qm` when they are better.
module_result train(model& qm, const ft_module& m, const std::vector<sample_data>& data, bool gram,
                    const finetune_options& o, std::mt19937_64& rng) {
  module_result r;
  const std::size_t count = m.w.size();
  std::vector<std::size_t> all(data.size());
  std::iota(all.begin(), all.end(), std::size_t{0});
  // The weights the layer computes with now: dequantized integers, or the chain's values.
  std::vector<double> wq0;
  if (m.chain) {
    const std::vector<float> v = m.chain->current(qm, m.wshape);
    wq0.assign(v.begin(), v.end());
  } else {
    std::vector<std::int64_t> q0(count);
    const tensor t = qm.initializer(m.weight_q);
    for (std::size_t i = 0; i < count; ++i)
      q0[i] = int_value(t, i);
    wq0 = dequantize(m, q0);
  }
  std::vector<mat> wt, grad(m.groups);
  fill_wt(m, wq0, m.bias, wt);
  r.before = loss_and_grad(m, data, gram, all, wt, nullptr);
  // lr_adjust: the loss sums the squared error over the output channels and averages over the
  // positions, so the mean over every output element (torch's mse_loss) is loss / channels.
  double lr = o.learning_rate;
  if (o.lr_adjust) {
    const double mse = r.before / static_cast<double>(m.groups * m.cout_g);
    if (mse > o.lr_adjust->first) {
      lr = o.lr_adjust->second;
      r.lr_adjusted = true;
    }
  }

  const std::size_t n_it = o.num_iterations;
  const std::size_t warm_iters = adaround_warm_iterations(n_it, o.warm_start);
  const std::size_t bs = std::min(o.batch_size, data.size());
  std::vector<std::size_t> perm = all, batch(bs);
  auto draw = [&] {
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), bs, batch.begin());
  };
  // Early stop: after the warm start, the mean loss of each window of log_period iterations must
  // fall below the previous window's, else training stops.
  double window_sum = 0.0, last_window = std::numeric_limits<double>::infinity();
  std::size_t window_n = 0;
  auto stop_now = [&](std::size_t it, double loss) {
    if (!o.early_stop || it < warm_iters)
      return false;
    window_sum += loss;
    if (++window_n < o.log_period)
      return false;
    const double mean = window_sum / static_cast<double>(window_n);
    window_sum = 0.0;
    window_n = 0;
    const bool stop = mean >= last_window;
    last_window = mean;
    return stop;
  };

  std::vector<std::int64_t> q_new(count);
  std::vector<double> bias_new = m.bias;
  std::vector<double> g(count), gb(bias_new.size());
  // dL/d[W b] of the GEMM view back to the weight's elements (and the bias).
  auto scatter = [&] {
    for (std::size_t gi = 0; gi < m.groups; ++gi) {
      for (std::size_t oc = 0; oc < m.cout_g; ++oc) {
        const std::size_t b0 = (gi * m.cout_g + oc) * m.k_g;
        for (std::size_t k = 0; k < m.k_g; ++k)
          g[m.flat[b0 + k]] = grad[gi](ix(oc), ix(k));
        gb[gi * m.cout_g + oc] = grad[gi](ix(oc), ix(m.k_g));
      }
    }
  };
  const quark::tensor_shape shape = weight_shape(m);
  const adam_options adam_o{.lr = lr};
  const bool train_bias = o.adaquant && o.update_bias && !m.bias_data.empty();
  // AdaQuant's loop, for the integer (adaquant<D>) and the chain (adaquant_fq) weights alike:
  // fake-quantized weights, the straight-through gradient and Adam on the float weights (and
  // the bias with update_bias).
  auto run_adaquant = [&](auto& aq) {
    for (std::size_t it = 0; it < n_it; ++it) {
      draw();
      fill_wt(m, aq.fake_weights(), train_bias ? aq.bias() : std::span<const double>(m.bias), wt);
      const double loss = loss_and_grad(m, data, gram, batch, wt, &grad);
      scatter();
      aq.step(g, gb);
      if (stop_now(it, loss))
        break;
    }
    if (train_bias)
      bias_new.assign(aq.bias().begin(), aq.bias().end());
  };
  std::vector<float> w_new;  // chain: the learned float weights
  if (m.chain) {
    // The float weights the chain starts from: its initializer, or the float model's weights
    // when the initializer holds float16 / bfloat16 values.
    if (!m.chain->stored) {
      const tensor t = qm.initializer(m.chain->init);
      w_new.assign(t.data<float>().begin(), t.data<float>().end());
    } else {
      w_new = m.w;
    }
    auto fq = [&m](std::span<const float> w, std::span<float> out) {
      m.chain->apply(w, out, m.wshape);
    };
    adaquant_fq aq(std::span<const float>(w_new), fq,
                   train_bias ? std::span<const double>(m.bias) : std::span<const double>(),
                   adam_o);
    run_adaquant(aq);
    const auto lw = aq.float_weights();
    w_new.assign(lw.begin(), lw.end());
  } else {
    with_weight_type(m.wtype, [&](auto type) {
      using D = typename decltype(type)::type;
      std::vector<zero_point_t<D>> z;
      const tensor_qparams<D> p = weight_params<D>(m, z);
      std::vector<D> q(count);
      if (!o.adaquant) {
        // AdaRound: the reconstruction loss's gradient w.r.t. the soft weights, then the header's
        // chain rule through h(alpha), the regulariser after the warm start, and Adam on alpha.
        adaround<D> ar(shape, m.w, p, adam_o);
        for (std::size_t it = 0; it < n_it; ++it) {
          draw();
          fill_wt(m, ar.soft_weights(), m.bias, wt);
          double loss = loss_and_grad(m, data, gram, batch, wt, &grad);
          scatter();
          std::optional<adaround_reg> reg;
          if (it >= warm_iters)
            reg = adaround_reg{o.reg_param,
                               adaround_beta(it, n_it, o.warm_start, o.beta_start, o.beta_end)};
          loss = ar.step(g, loss, reg);
          if (stop_now(it, loss))
            break;
        }
        ar.hard_codes(q);
      } else {
        adaquant<D> aq(shape, m.w, p,
                       train_bias ? std::span<const double>(m.bias) : std::span<const double>(),
                       adam_o);
        run_adaquant(aq);
        aq.codes(q);
      }
      for (std::size_t i = 0; i < count; ++i)
        q_new[i] = static_cast<std::int64_t>(q[i]);
    });
  }

  // The bias as it would be stored.
  tensor bias_t;
  std::vector<double> bias_eval = m.bias;
  const bool new_bias = train_bias;
  if (new_bias) {
    std::vector<float> bf(bias_new.begin(), bias_new.end());
    if (m.bias_chain) {
      const shape_t bshape = qm.initializer(m.bias_data).shape();
      bias_t = m.bias_chain->store(bf, bshape);
      std::vector<float> v(bf.size());
      m.bias_chain->apply(bf, v, bshape);
      for (std::size_t c = 0; c < bf.size(); ++c)
        bias_eval[c] = static_cast<double>(v[c]);
    } else if (m.bias_quantized) {
      bias_t = requantize(bf, m.bias_type, m.bias_scale, m.bias_zp);
      for (std::size_t c = 0; c < bf.size(); ++c) {
        const std::size_t k = m.bias_scale.size() == 1 ? 0 : c;
        const double z = m.bias_zp.empty()
                             ? 0.0
                             : static_cast<double>(m.bias_zp[std::min(k, m.bias_zp.size() - 1)]);
        bias_eval[c] =
            (static_cast<double>(int_value(bias_t, c)) - z) * static_cast<double>(m.bias_scale[k]);
      }
    } else {
      bias_t = tensor(dtype_id::float32, {static_cast<std::int64_t>(bf.size())});
      std::copy(bf.begin(), bf.end(), bias_t.data<float>().begin());
      for (std::size_t c = 0; c < bf.size(); ++c)
        bias_eval[c] = static_cast<double>(bf[c]);
    }
  }
  std::vector<double> wq_new;
  if (m.chain) {
    // What the model will compute from the stored weights (float16 / bfloat16 storage rounds
    // them, which the chain's round trip does too).
    std::vector<float> v(count);
    m.chain->apply(w_new, v, m.wshape);
    wq_new.assign(v.begin(), v.end());
  } else {
    wq_new = dequantize(m, q_new);
  }
  fill_wt(m, wq_new, bias_eval, wt);
  r.after = loss_and_grad(m, data, gram, all, wt, nullptr);
  if (r.after < r.before) {
    r.improved = true;
    if (m.chain)
      qm.set_initializer(m.weight_q, m.chain->store(w_new, m.wshape));
    else
      qm.set_initializer(m.weight_q, int_tensor(m.wtype, m.wshape, q_new));
    if (new_bias) {
      if (m.bias_quantized || m.bias_chain) {
        qm.set_initializer(m.bias_data, bias_t);
      } else {
        const tensor old = qm.initializer(m.bias_data);
        tensor nb(dtype_id::float32, old.shape());
        std::copy(bias_t.data<float>().begin(), bias_t.data<float>().end(),
                  nb.data<float>().begin());
        qm.set_initializer(m.bias_data, nb);
      }
    }
  } else {
    r.after = r.before;
  }
  return r;
}

}  // namespace

std::string finetune_note(const finetune_options& o, const finetune_stats& s) {
  std::ostringstream os;
  os.precision(4);
  os << (o.adaquant ? "adaquant: " : "adaround: ") << s.improved << " modules improved, "
     << s.unchanged << " kept (not better than round-to-nearest) on " << s.samples
     << " samples; reconstruction error " << s.loss_before << " -> " << s.loss_after << "; "
     << s.collect_seconds << " s running the models, " << s.train_seconds << " s training";
  if (o.selective_update) {
    os << "; selective_update: " << s.dropped << " improved modules undone, average L2 of output 0 "
       << s.l2_before << " -> " << s.l2_after;
  }
  if (o.lr_adjust) {
    os << "; lr_adjust: " << s.lr_adjusted << " modules above MSE " << o.lr_adjust->first
       << " trained at learning rate " << o.lr_adjust->second;
  }
  if (!o.ref_model_path.empty())
    os << "; reference model " << o.ref_model_path;
  if (!s.skipped.empty()) {
    os << "; skipped: ";
    for (std::size_t i = 0; i < s.skipped.size(); ++i)
      os << (i > 0 ? ", " : "") << s.skipped[i];
  }
  return os.str();
}

namespace {

/// Average over the samples of the L2 distance between output 0 of `rt` and `ref` (Quark's
/// average_L2 of selective_update).
double average_l2(const runtime& rt, const std::vector<calib_sample>& samples,
                  const std::vector<tensor>& ref) {
  const std::string name = rt.outputs().front().name;
  double total = 0.0;
  for (std::size_t s = 0; s < samples.size(); ++s) {
    const tensor out = rt.run(samples[s]).at(name);
    const auto a = ref[s].data<float>();
    const auto b = out.data<float>();
    if (out.type() != dtype_id::float32 || a.size() != b.size()) {
      throw frontend_error("quark.quantize.finetune",
                           "selective_update: output '" + name +
                               "' of the quantized model is not float32 of the reference's size");
    }
    double sum = 0.0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      const double d = static_cast<double>(a[k]) - static_cast<double>(b[k]);
      sum += d * d;
    }
    total += std::sqrt(sum);
  }
  return samples.empty() ? 0.0 : total / static_cast<double>(samples.size());
}

/// Names of the graph inputs (without initializers) and outputs of `m`.
std::pair<std::vector<std::string>, std::vector<std::string>> interface_of(const model& m) {
  const GraphProto& g = proto(m).graph();
  std::pair<std::vector<std::string>, std::vector<std::string>> r;
  for (const auto& v : g.input()) {
    if (!m.has_initializer(v.name()))
      r.first.push_back(v.name());
  }
  for (const auto& v : g.output())
    r.second.push_back(v.name());
  return r;
}

}  // namespace

namespace {

/// The samples fast finetune trains on: num_batches * batch_size at most (and data_size,
/// CalibDataSize), from the start of `reader`.
std::vector<calib_sample> finetune_samples(calibration_data_reader& reader,
                                           const finetune_options& o,
                                           std::optional<std::size_t> max_samples) {
  std::size_t want = o.num_batches * o.batch_size;
  if (o.data_size)
    want = std::min(want, *o.data_size);
  if (max_samples)
    want = std::min(want, *max_samples);
  std::vector<calib_sample> samples;
  reader.rewind();
  while (samples.size() < want) {
    std::optional<calib_sample> s = reader.next();
    if (!s)
      break;
    samples.push_back(std::move(*s));
  }
  return samples;
}

/// The quantized Conv / ConvTranspose / Gemm / MatMul nodes of `qm` to fine-tune (target_op_type,
/// only_nodes; a quantized weight), each described against `float_model`; the others that were
/// candidates go to st.skipped with the reason.
std::vector<ft_module> find_modules(const model& qm, const model& float_model,
                                    const finetune_options& o, finetune_stats& st) {
  std::vector<ft_module> modules;
  const std::set<std::string> types(o.target_op_type.begin(), o.target_op_type.end());
  const std::set<std::string> only(o.only_nodes.begin(), o.only_nodes.end());
  const ::onnx::ModelProto& fp = proto(float_model);
  // Float nodes by name and by output 0 (the graph passes keep both).
  std::map<std::string, const NodeProto*> float_by_name;
  for (const auto& n : fp.graph().node()) {
    if (n.output_size() >= 1)
      float_by_name.emplace(n.output(0), &n);
  }
  for (const auto& n : fp.graph().node()) {
    if (!n.name().empty())
      float_by_name[n.name()] = &n;
  }
  // The last reader of each float value (Quark's Subgraph keeps the last consumer by name).
  std::map<std::string, const NodeProto*> float_last_consumer;
  for (const auto& n : fp.graph().node()) {
    for (const auto& x : n.input()) {
      if (!x.empty())
        float_last_consumer[x] = &n;
    }
  }
  const GraphProto& g = proto(qm).graph();
  const graph_index ix(g);  // (a value an If / Loop / Scan body reads counts as consumed there)
  const std::map<std::string, int>& producer = ix.producer;
  const std::map<std::string, std::vector<int>>& consumers = ix.consumers;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!n.domain().empty() || !types.contains(n.op_type()))
      continue;
    if (!only.empty() && !only.contains(n.name()))
      continue;
    const bool dq_input = std::any_of(n.input().begin(), n.input().end(), [&](const auto& x) {
      auto it = producer.find(x);
      return it != producer.end() && g.node(it->second).op_type() == "DequantizeLinear" &&
             qm.has_initializer(g.node(it->second).input(0));
    });
    const std::string label = (n.name().empty() ? n.output(0) : n.name()) + " (" + n.op_type();
    std::string chain_why;
    const bool chain_weight =
        n.input_size() >= 2 &&
        (parse_chain(qm, g, producer, consumers, n.input(1), chain_why) || !chain_why.empty());
    if (!dq_input && !chain_weight)
      continue;  // not quantized: nothing to fine-tune
    ft_module m;
    const std::string why = describe(qm, float_model, g, i, producer, consumers, float_by_name,
                                     float_last_consumer, o.output_qdq, o.adaquant, m);
    if (!why.empty()) {
      st.skipped.push_back(label + ": " + why + ")");
      continue;
    }
    modules.push_back(std::move(m));
  }
  return modules;
}

/// Module `m`'s training data, one entry per sample: its quantized input (mixed with the float one
/// under drop_ratio < 1) and its float output, in the Gram form (`gram`) when that is smaller.
/// False when the shapes do not fit the module.
bool module_data(const ft_module& m, const runtime& qrt, const std::vector<calib_sample>& samples,
                 const std::vector<std::map<std::string, tensor>>& float_values,
                 const finetune_options& o, std::mt19937_64& rng,
                 std::uniform_real_distribution<double>& unit, finetune_stats& st,
                 std::vector<sample_data>& data, bool& gram) {
  std::vector<mat> xs, ts;
  for (std::size_t s = 0; s < samples.size(); ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    tensor xq, xf, tf;
    try {
      qrt.run(samples[s], [&](std::string_view name, const tensor& v) {
        if (name == m.input) {
          xq = v;
          throw stop_run{};  // the rest of the model is not needed
        }
      });
    } catch (const stop_run&) {
    }
    if (auto it = float_values[s].find(m.float_output); it != float_values[s].end())
      tf = it->second;
    if (o.drop_ratio < 1.0) {
      if (auto it = float_values[s].find(m.float_input); it != float_values[s].end())
        xf = it->second;
    }
    if (o.drop_ratio < 1.0) {
      if (xf.shape() != xq.shape() || xf.type() != dtype_id::float32 ||
          xq.type() != dtype_id::float32) {
        return false;
      }
      auto qv = xq.data<float>();
      const auto fv = xf.data<float>();
      for (std::size_t e = 0; e < qv.size(); ++e) {
        if (!(unit(rng) < o.drop_ratio))
          qv[e] = fv[e];
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    st.collect_seconds += std::chrono::duration<double>(t1 - t0).count();
    if (!make_matrices(m, xq, tf, xs, ts)) {
      return false;
    }
    sample_data d;
    d.positions = static_cast<double>(xs[0].cols());
    if (s == 0) {
      // Per iteration: Gram form ~ (k + 1)^2, direct form ~ 2 (k + 1) P per sample.
      const double k1 = static_cast<double>(m.k_g + 1);
      gram = !m.nonlinear() && k1 < 2.0 * d.positions;
    }
    for (std::size_t gi = 0; gi < m.groups; ++gi) {
      if (gram) {
        mat G(ix(m.k_g + 1), ix(m.k_g + 1));
        G.setZero();
        G.selfadjointView<Eigen::Lower>().rankUpdate(xs[gi]);
        G.triangularView<Eigen::StrictlyUpper>() = G.transpose();
        d.a.push_back(std::move(G));
        d.b.push_back(ts[gi] * xs[gi].transpose());
        d.e += ts[gi].squaredNorm();
      } else {
        d.a.push_back(std::move(xs[gi]));
        d.b.push_back(std::move(ts[gi]));
      }
    }
    data.push_back(std::move(d));
    st.train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  return true;
}

}  // namespace

finetune_stats fast_finetune(model& qm, const model& float_model_in,
                             calibration_data_reader& reader, const finetune_options& o,
                             std::optional<std::size_t> max_samples) {
  finetune_stats st;
  // ref_model_path: the reference takes the float model's place (targets and weights).
  std::optional<model> ref_model;
  if (!o.ref_model_path.empty()) {
    ref_model = model::load(o.ref_model_path);
    if (interface_of(*ref_model) != interface_of(float_model_in)) {
      throw config_error("quark.config.value",
                         "algo_config " + std::string(o.adaquant ? "adaquant" : "adaround") +
                             ".ref_model_path: '" + o.ref_model_path +
                             "' has other graph inputs / outputs than the model being quantized");
    }
  }
  const model& float_model = ref_model ? *ref_model : float_model_in;
  std::vector<calib_sample> samples = finetune_samples(reader, o, max_samples);
  st.samples = samples.size();
  if (samples.empty())
    return st;

  const std::vector<ft_module> modules = find_modules(qm, float_model, o, st);
  if (modules.empty())
    return st;

  std::mt19937_64 rng(o.fixed_seed ? *o.fixed_seed : std::random_device{}());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const runtime frt(float_model, runtime_options{.threads = 0, .tune_malloc = false});
  // The float model's values (module targets, and inputs when drop_ratio < 1) for a chunk of
  // consecutive modules are captured in one float run per sample, up to float_budget bytes; a run
  // stops as soon as it has produced what the chunk needs (stop_run from the observer).
  constexpr std::size_t float_budget = std::size_t{256} << 20;
  std::map<std::string, std::size_t> float_bytes;  // per sample, by value name
  {
    std::set<std::string> wanted;
    for (const ft_module& m : modules) {
      wanted.insert(m.float_output);
      if (o.drop_ratio < 1.0)
        wanted.insert(m.float_input);
    }
    frt.run(samples.front(), [&](std::string_view name, const tensor& v) {
      if (wanted.contains(std::string(name)))
        float_bytes[std::string(name)] = v.byte_size();
    });
  }
  // selective_update: the reference's output 0 per sample and the current distance.
  std::vector<tensor> ref_out;
  double l2_now = 0.0;
  if (o.selective_update) {
    const std::string out0 = frt.outputs().front().name;
    for (const auto& s : samples)
      ref_out.push_back(frt.run(s).at(out0));
    l2_now = average_l2(runtime(qm, runtime_options{.threads = 0, .tune_malloc = false}), samples,
                        ref_out);
    st.l2_before = l2_now;
  }
  std::size_t chunk_end = 0;
  std::vector<std::map<std::string, tensor>> float_values(samples.size());
  auto capture_float = [&](std::size_t first) {
    std::set<std::string> wanted;
    std::size_t bytes = 0;
    chunk_end = first;
    while (chunk_end < modules.size()) {
      const ft_module& m = modules[chunk_end];
      std::size_t add = float_bytes[m.float_output];
      if (o.drop_ratio < 1.0)
        add += float_bytes[m.float_input];
      if (chunk_end > first && bytes + add * samples.size() > float_budget)
        break;
      bytes += add * samples.size();
      wanted.insert(m.float_output);
      if (o.drop_ratio < 1.0)
        wanted.insert(m.float_input);
      ++chunk_end;
    }
    for (std::size_t s = 0; s < samples.size(); ++s) {
      float_values[s].clear();
      try {
        frt.run(samples[s], [&](std::string_view name, const tensor& v) {
          const std::string key(name);
          if (wanted.contains(key))
            float_values[s].insert_or_assign(key, v);
          if (float_values[s].size() == wanted.size())
            throw stop_run{};
        });
      } catch (const stop_run&) {
      }
    }
  };
  for (std::size_t mi = 0; mi < modules.size(); ++mi) {
    const ft_module& m = modules[mi];
    // Module data, one sample at a time: quantized input (mixed with the float one under
    // drop_ratio < 1), float output.
    const auto tr = std::chrono::steady_clock::now();
    if (mi >= chunk_end)
      capture_float(mi);
    const runtime qrt(qm, runtime_options{.threads = 0, .tune_malloc = false});
    st.collect_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - tr).count();
    std::vector<sample_data> data;
    bool gram = true;
    const bool ok = module_data(m, qrt, samples, float_values, o, rng, unit, st, data, gram);
    if (!ok) {
      st.skipped.push_back(m.name + " (" + kind_name(m.kind) +
                           (m.act == act_kind::softmax
                                ? ": input / output shapes, or a Softmax over other axes than "
                                  "the channels)"
                                : ": input / output shapes)"));
      continue;
    }
    const auto t2 = std::chrono::steady_clock::now();
    std::optional<tensor> old_w, old_b;
    if (o.selective_update) {
      old_w = qm.initializer(m.weight_q);
      if (!m.bias_data.empty())
        old_b = qm.initializer(m.bias_data);
    }
    module_result r = train(qm, m, data, gram, o, rng);
    st.train_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
    if (o.selective_update && r.improved) {
      const auto t3 = std::chrono::steady_clock::now();
      const double l2 = average_l2(runtime(qm, runtime_options{.threads = 0, .tune_malloc = false}),
                                   samples, ref_out);
      if (l2 < l2_now) {
        l2_now = l2;
      } else {
        qm.set_initializer(m.weight_q, *old_w);
        if (old_b)
          qm.set_initializer(m.bias_data, *old_b);
        r.improved = false;
        r.after = r.before;
        ++st.dropped;
      }
      st.collect_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t3).count();
    }
    st.loss_before += r.before;
    st.loss_after += r.after;
    if (r.improved)
      ++st.improved;
    else
      ++st.unchanged;
    if (r.lr_adjusted)
      ++st.lr_adjusted;
  }
  st.l2_after = l2_now;
  return st;
}

}  // namespace quark::onnx::qz
