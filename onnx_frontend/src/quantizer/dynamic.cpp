// SPDX-License-Identifier: MIT
// Dynamic quantization (dynamic.hpp). Which nodes: the plan's quantized MatMul and Conv nodes
// (Quark's IntegerOps registry, quark-spec §7.1), a MatMul only with a constant B when
// MatMulConstBOnly (default True here, seed 000), a Conv only with a constant weight. The weight
// parameters come from qparams_for (Quark's weight rule: min/max including 0, INT8 clipped to
// +-127) and the values from quark::quantize; per-channel signed weights are symmetric (§5.2).
#include "quantizer/dynamic.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/proto_access.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/numerics.hpp"
#include "quantizer/opset.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {
namespace {

/// Fresh value / node names: `base`, else `base_1`, `base_2`, ...
class namer {
 public:
  explicit namer(const ::onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      used_.insert(n.name());
      for (const auto& o : n.output())
        used_.insert(o);
      for (const auto& i : n.input())
        used_.insert(i);
    }
    for (const auto& t : g.initializer())
      used_.insert(t.name());
    for (const auto& v : g.input())
      used_.insert(v.name());
    for (const auto& v : g.output())
      used_.insert(v.name());
  }
  std::string operator()(const std::string& base) {
    std::string n = base;
    for (int k = 1; !used_.insert(n).second; ++k)
      n = base + "_" + std::to_string(k);
    return n;
  }

 private:
  std::set<std::string> used_;
};

/// A weight stored quantized, with its parameters.
struct stored_weight {
  tensor q;
  std::vector<float> scale;
  std::vector<std::int32_t> zp;
  float rmin = 0.0f, rmax = 0.0f;
};

/// Quantizes `w` per tensor (axis < 0) or per slice along `axis` with the spec's type.
stored_weight quantize_weight(const tensor& w, const tspec& spec, std::int64_t axis,
                              const std::string& name) {
  stored_weight out;
  const std::span<const float> v = w.data<float>();
  if (!v.empty()) {
    out.rmin = *std::min_element(v.begin(), v.end());
    out.rmax = *std::max_element(v.begin(), v.end());
  }
  const bool sym = spec.symmetric || (axis >= 0 && spec.type == dtype_id::int8);
  std::int64_t qmin = 0, qmax = 0;
  auto one = [&](float lo, float hi) {
    const qp p = qparams_for(spec.type, scale_choice{}, sym, lo, hi, true, name);
    out.scale.push_back(p.scale);
    out.zp.push_back(p.zero_point);
    qmin = p.qmin;
    qmax = p.qmax;
  };
  if (axis < 0) {
    one(out.rmin, out.rmax);
  } else {
    const auto ax = static_cast<std::size_t>(axis);
    const auto c = static_cast<std::size_t>(w.shape()[ax]);
    std::size_t inner = 1;
    for (std::size_t d = ax + 1; d < w.rank(); ++d)
      inner *= static_cast<std::size_t>(w.shape()[d]);
    const std::size_t outer = c * inner == 0 ? 0 : v.size() / (c * inner);
    for (std::size_t ch = 0; ch < c; ++ch) {
      float lo = 0.0f, hi = 0.0f;
      bool first = true;
      for (std::size_t o = 0; o < outer; ++o) {
        const float* p = v.data() + (o * c + ch) * inner;
        const auto [mn, mx] = std::minmax_element(p, p + inner);
        if (inner == 0)
          continue;
        lo = first ? *mn : std::min(lo, *mn);
        hi = first ? *mx : std::max(hi, *mx);
        first = false;
      }
      one(lo, hi);
    }
  }
  out.q = quantize_values(w, spec.type, out.scale, out.zp, axis, qmin, qmax);
  return out;
}

/// The first non-finite value of a weight, as an error naming the node.
void check_finite(const tensor& w, const std::string& what, const node_info& n) {
  const std::span<const float> v = w.data<float>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw frontend_error("quark.quantize.non_finite", what + " of node '" + n.name + "' (" +
                                                            n.op_type + ") holds " +
                                                            (std::isnan(v[i]) ? "NaN" : "Inf") +
                                                            " at element " + std::to_string(i));
    }
  }
}

::onnx::NodeProto make_dql(const std::string& name, const std::string& x, const std::string& q,
                           const std::string& s, const std::string& z) {
  ::onnx::NodeProto n;
  n.set_op_type("DynamicQuantizeLinear");
  n.set_name(name);
  n.add_input(x);
  n.add_output(q);
  n.add_output(s);
  n.add_output(z);
  return n;
}

/// A float32 initializer of `m`, or nullopt (absent, or another type).
std::optional<tensor> float_initializer(const model& m, const std::string& name) {
  if (name.empty() || !m.has_initializer(name))
    return std::nullopt;
  tensor t = m.initializer(name);
  if (t.type() != dtype_id::float32)
    return std::nullopt;
  return t;
}

}  // namespace

void quantize_dynamic(model& m, const plan& pl, quantize_report& report) {
  const std::vector<node_info> nodes = m.nodes();
  ::onnx::GraphProto& g = *proto(m).mutable_graph();
  namer fresh(g);
  const settings& opt = pl.opt;

  // value -> (quantized, scale, zero point) of its DynamicQuantizeLinear.
  struct dq_out {
    std::string q, s, z;
  };
  std::map<std::string, dq_out> dynamic;
  std::map<std::string, std::size_t> weight_uses;  // weights quantized: replaced float readers
  std::vector<::onnx::NodeProto> rebuilt;

  auto activation = [&](const std::string& x) -> const dq_out& {
    auto it = dynamic.find(x);
    if (it != dynamic.end())
      return it->second;
    dq_out d{fresh(x + "_quantized"), fresh(x + "_scale"), fresh(x + "_zero_point")};
    rebuilt.push_back(make_dql(fresh(x + "_DynamicQuantizeLinear"), x, d.q, d.s, d.z));
    tensor_report tr;
    tr.name = x;
    tr.role = "activation (dynamic)";
    tr.type = "uint8";
    report.tensors.push_back(std::move(tr));
    ++report.tensors_per_type["uint8"];
    return dynamic.emplace(x, d).first->second;
  };
  // The quantized weight `w` of `n` as three initializers (values, scale, zero point).
  auto store = [&](const node_info& n, const std::string& w, const tensor& value, const tspec& spec,
                   std::int64_t axis, const shape_t& scale_shape) -> dq_out {
    check_finite(value, "weight '" + w + "'", n);
    const stored_weight sw = quantize_weight(value, spec, axis, w);
    const dq_out d{fresh(w + "_quantized"), fresh(w + "_scale"), fresh(w + "_zero_point")};
    const bool scalar = axis < 0;
    m.set_initializer(d.q, sw.q);
    m.set_initializer(d.s, scale_tensor(sw.scale, scalar, scalar ? shape_t{} : scale_shape));
    // An integer op's zero point is a scalar or 1-D (one per column / output channel).
    m.set_initializer(d.z, zero_point_tensor(spec.type, sw.zp, scalar));
    ++weight_uses[w];
    tensor_report tr;
    tr.name = w;
    tr.role = "weight";
    tr.type = std::string(dtype_name(spec.type));
    tr.rmin = sw.rmin;
    tr.rmax = sw.rmax;
    tr.scale = sw.scale;
    tr.axis = axis;
    for (const auto z0 : sw.zp)
      tr.zero_point.push_back(z0);
    report.tensors.push_back(std::move(tr));
    ++report.tensors_per_type[std::string(dtype_name(spec.type))];
    return d;
  };
  // y = Cast(integer product) * (x_scale * w_scale) [+ bias]: the float tail of both ops.
  auto tail = [&](const node_info& n, const std::string& product, const std::string& x_scale,
                  const std::string& w_scale, const std::string& bias) {
    const std::string& y = n.outputs[0];
    const std::string f = fresh(y + "_output_quantized_cast");
    const std::string scales = fresh(y + "_scales_mul");
    rebuilt.push_back(
        make_cast(fresh(n.name + "_output_quantized_cast"), product, f, dtype_id::float32));
    rebuilt.push_back(make_binary("Mul", fresh(n.name + "_scales_mul"), x_scale, w_scale, scales));
    const std::string scaled = bias.empty() ? y : fresh(y + "_unbiased");
    rebuilt.push_back(make_binary("Mul", fresh(n.name + "_output_scale_mul"), f, scales, scaled));
    if (!bias.empty())
      rebuilt.push_back(make_binary("Add", fresh(n.name + "_bias_add"), scaled, bias, y));
  };
  auto count = [&](const node_info& n, bool quantized) {
    op_type_count& k = report.op_types[n.op_type];
    ++(quantized ? k.quantized : k.kept_float);
  };

  for (int i = 0; i < g.node_size(); ++i) {
    const node_info& n = nodes[static_cast<std::size_t>(i)];
    const node_choice& c = pl.nodes[static_cast<std::size_t>(i)];
    const ::onnx::NodeProto& src = g.node(i);
    const bool matmul = n.op_type == "MatMul" && n.domain.empty() && n.inputs.size() == 2;
    const bool conv = n.op_type == "Conv" && n.domain.empty() && n.inputs.size() >= 2;
    std::optional<tensor> w = (matmul || conv) && c.quantize && c.weight
                                  ? float_initializer(m, n.inputs[1])
                                  : std::nullopt;
    const bool take =
        w.has_value() || (matmul && c.quantize && c.weight && !opt.matmul_const_b_only);
    if (!take) {
      rebuilt.push_back(src);
      count(n, false);
      continue;
    }
    const tspec& ws = *c.weight;
    const std::string product = fresh(n.outputs[0] + "_output_quantized");
    if (matmul) {
      const dq_out a = activation(n.inputs[0]);
      // B constant: stored quantized, per column of a 2-D B (N scales and zero points) or per
      // tensor; else quantized at run time as A is.
      const dq_out b = w ? store(n, n.inputs[1], *w, ws, ws.per_channel && w->rank() == 2 ? 1 : -1,
                                 shape_t{w->rank() == 2 ? w->shape()[1] : 1})
                         : activation(n.inputs[1]);
      ::onnx::NodeProto mm;
      mm.set_op_type("MatMulInteger");
      mm.set_name(fresh(n.name + "_quant"));
      for (const std::string& v : {a.q, b.q, a.z, b.z})
        mm.add_input(v);
      mm.add_output(product);
      rebuilt.push_back(std::move(mm));
      tail(n, product, a.s, b.s, "");
    } else {
      // ConvInteger takes one weight zero point in ONNX Runtime ("Non per-tensor quantization
      // is not supported"): per-channel weights are symmetric int8 (zero point 0, passed as a
      // scalar) with their scales applied per output channel in the float tail.
      const bool per_channel = ws.per_channel;
      if (per_channel && ws.type != dtype_id::int8) {
        throw config_error("quark.config.value",
                           "use_dynamic_quant: node '" + n.name +
                               "' (Conv): per-channel weights need Int8Spec (symmetric, zero "
                               "point 0): ConvInteger takes a single weight zero point");
      }
      // [M, 1, ..., 1] (one 1 per spatial dimension) against the output [N, M, spatial...].
      shape_t per_out(w->rank() >= 2 ? w->rank() - 2 : 0, 1);
      per_out.insert(per_out.begin(), w->shape()[0]);
      dq_out wq = store(n, n.inputs[1], *w, ws, per_channel ? 0 : -1, per_out);
      if (per_channel) {
        const std::string z0 = fresh(n.inputs[1] + "_zero_point_scalar");
        m.set_initializer(z0, zero_point_tensor(ws.type, {0}, true));
        m.remove_initializer(wq.z);
        wq.z = z0;
      }
      const dq_out x = activation(n.inputs[0]);
      ::onnx::NodeProto ci;
      ci.set_op_type("ConvInteger");
      ci.set_name(fresh(n.name + "_quant"));
      for (const std::string& v : {x.q, wq.q, x.z, wq.z})
        ci.add_input(v);
      ci.add_output(product);
      for (const auto& a : src.attribute())
        *ci.add_attribute() = a;
      rebuilt.push_back(std::move(ci));
      std::string bias;
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
        // The bias as [M, 1, ..., 1], so that it adds per output channel.
        bias = n.inputs[2];
        if (std::optional<tensor> bv = float_initializer(m, bias)) {
          tensor r(dtype_id::float32, per_out);
          std::copy(bv->data<float>().begin(), bv->data<float>().end(), r.data<float>().begin());
          bias = fresh(n.inputs[2] + "_reshaped");
          m.set_initializer(bias, r);
        } else {
          throw frontend_error("quark.quantize.dynamic", "node '" + n.name +
                                                             "' (Conv): the bias '" + n.inputs[2] +
                                                             "' is not a float32 constant");
        }
      }
      tail(n, product, x.s, wq.s, bias);
    }
    count(n, true);
  }

  // Float weights every reader of which now reads the quantized copy go.
  g.clear_node();
  for (auto& n : rebuilt)
    *g.add_node() = std::move(n);
  const graph_index after(g);
  for (const auto& [w, k] : weight_uses) {
    (void)k;
    if (after.uses(w) == 0)
      m.remove_initializer(w);
  }
  // Also drop bias initializers replaced by their reshaped copies.
  for (const auto& n : nodes) {
    if (n.op_type == "Conv" && n.inputs.size() > 2 && !n.inputs[2].empty() &&
        m.has_initializer(n.inputs[2]) && after.uses(n.inputs[2]) == 0)
      m.remove_initializer(n.inputs[2]);
  }

  report.opset_before = m.opset("").value_or(1);
  if (!dynamic.empty() && report.opset_before < 11) {
    // DynamicQuantizeLinear: opset 11 (MatMulInteger / ConvInteger: 10).
    for (const auto& note : upgrade_opset(proto(m), report.opset_before, 11, {}))
      report.notes.push_back(note);
  }
  report.opset_after = m.opset("").value_or(1);
  std::size_t done = 0;
  for (const auto& [op, k] : report.op_types)
    done += (op == "MatMul" || op == "Conv") ? k.quantized : 0;
  if (dynamic.empty()) {
    report.notes.push_back("none: no MatMul / Conv with a constant weight was selected");
  } else {
    report.notes.push_back(
        "dynamic: " + std::to_string(done) +
        " MatMul / Conv nodes run as MatMulInteger / ConvInteger on uint8 activations quantized "
        "at run time (" +
        std::to_string(dynamic.size()) + " DynamicQuantizeLinear); no calibration");
  }
  m.validate();
}

}  // namespace quark::onnx::qz
