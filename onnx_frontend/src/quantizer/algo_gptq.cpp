// SPDX-License-Identifier: MIT
// GPTQ on the quantized model (quark-spec §10.4; see algorithms.hpp). The solver and the grid
// rule are include/quark/algo/gptq.hpp's.
//
// For each MatMul of the quantized model whose weight comes out of a DequantizeLinear of an
// integer initializer (read by nothing else) and whose float counterpart (same node name in the
// float model) has a 2-D float32 initializer W [K, N]: the Hessian of the float MatMul's input over
// the calibration data (every sample, as decision 1 of the spec asks; Quark reads the first
// batch only), GPTQ on W with GPTQConfig's grid (Quark's rule: codes [0, 2^bits - 1], the zero
// point (2^bits) / 2 when symmetric), and the DequantizeLinear rewritten to store the result:
// uint4 / uint8 / uint16 codes for bits <= 4 / 8 / 16, a scalar scale per tensor, one per output
// column (axis 1) with per_channel, blocks of group_size along K (axis 0, opset 21) with groups.
// Quark writes the codes into the existing "<W>_quantized" / "_scale" / "_zero_point"
// initializers whatever their shapes (its per-tensor scale comes out as N copies); quark-cpp
// rewrites the node so that the stored tensors and the attributes agree.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include <quark/algo/gptq.hpp>
#include <quark/onnx/runtime.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/fp16_model.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

struct gptq_target {
  std::string name;  ///< node name (its output's when it has none)
  int dq = -1;       ///< the weight's DequantizeLinear in the quantized graph
  std::string x;     ///< the float node's input 0
  std::string w;     ///< the float weight
  std::size_t k = 0, n = 0;
};

/// The codes' storage type for `bits`.
dtype_id code_type(int bits) {
  return bits <= 4 ? dtype_id::uint4 : bits <= 8 ? dtype_id::uint8 : dtype_id::uint16;
}

void set_int_attribute(NodeProto& n, const char* name, std::int64_t v) {
  for (auto& a : *n.mutable_attribute()) {
    if (a.name() == name) {
      a.set_i(v);
      return;
    }
  }
  add_int_attribute(n, name, v);
}

void remove_attribute(NodeProto& n, const char* name) {
  auto* attrs = n.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

}  // namespace

hessian_set collect_hessians(const model& m, const std::map<std::string, std::size_t>& features,
                             calibration_data_reader& reader,
                             std::optional<std::size_t> max_samples, const std::string& who) {
  hessian_set hs;
  for (const auto& [name, k] : features)
    hs.h.emplace(name, std::make_unique<gptq_hessian>(k));
  hs.samples = for_each_activation(m, features, reader, max_samples, who,
                                   [&](const std::string& name, std::span<const float> rows,
                                       std::size_t t) { hs.h.at(name)->add(rows, t); });
  return hs;
}

namespace {

/// A constant's shape and element type, as the MatMulNBits rewriter finds constants: an
/// initializer or a Constant node's `value`, of this graph or an enclosing one.
struct const_info {
  std::vector<std::int64_t> dims;
  int type = 0;
};

/// Every MatMul (default domain) of `g` and its bodies whose B is a 2-D float32 / float16
/// constant with both dimensions positive: B name -> (A names, K).
void find_nbits_matmuls(const GraphProto& g, std::map<std::string, const_info> scope,
                        std::map<std::string, std::pair<std::set<std::string>, std::size_t>>& out) {
  for (const auto& t : g.initializer())
    scope[t.name()] = {{t.dims().begin(), t.dims().end()}, t.data_type()};
  for (const auto& n : g.node()) {
    if (n.op_type() == "Constant" && n.domain().empty() && n.output_size() == 1) {
      for (const auto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t())
          scope[n.output(0)] = {{a.t().dims().begin(), a.t().dims().end()}, a.t().data_type()};
      }
    }
  }
  for (const auto& n : g.node()) {
    if (n.op_type() == "MatMul" && n.domain().empty() && n.input_size() == 2) {
      const auto c = scope.find(n.input(1));
      if (c != scope.end() && c->second.dims.size() == 2 && c->second.dims[0] > 0 &&
          c->second.dims[1] > 0 &&
          (c->second.type == ::onnx::TensorProto::FLOAT ||
           c->second.type == ::onnx::TensorProto::FLOAT16) &&
          !n.input(0).empty() && !scope.contains(n.input(0))) {
        auto& e = out[n.input(1)];
        e.first.insert(n.input(0));
        e.second = static_cast<std::size_t>(c->second.dims[0]);
      }
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g())
        find_nbits_matmuls(a.g(), scope, out);
      for (const auto& sub : a.graphs())
        find_nbits_matmuls(sub, scope, out);
    }
  }
}

}  // namespace

std::map<std::string, std::vector<double>> gptq_nbits_hessians(
    const model& m, calibration_data_reader& reader, std::optional<std::size_t> max_samples,
    std::vector<std::string>& notes) {
  std::map<std::string, std::pair<std::set<std::string>, std::size_t>> matmuls;
  find_nbits_matmuls(proto(m).graph(), {}, matmuls);
  std::map<std::string, std::vector<double>> out;
  if (matmuls.empty())
    return out;
  std::map<std::string, std::size_t> features;
  for (const auto& [b, e] : matmuls) {
    for (const auto& a : e.first) {
      auto [it, fresh] = features.emplace(a, e.second);
      if (!fresh && it->second != e.second) {
        throw frontend_error("quark.onnx.shape", "MatMulNBits GPTQ: '" + a +
                                                     "' is read by MatMuls whose weights "
                                                     "have " +
                                                     std::to_string(it->second) + " and " +
                                                     std::to_string(e.second) + " rows");
      }
    }
  }
  const hessian_set hs =
      collect_hessians(m, features, reader, max_samples, "MatMulNBits Algorithm GPTQ");
  std::size_t shared = 0;
  for (const auto& [b, e] : matmuls) {
    // A B read by several activations: the sum of their Hessians (the summed output error).
    std::vector<double> h(e.second * e.second, 0.0);
    bool any = false;
    for (const auto& a : e.first) {
      const gptq_hessian& ha = *hs.h.at(a);
      if (ha.samples() == 0)
        continue;
      any = true;
      const auto mat = ha.matrix();
      for (std::size_t i = 0; i < h.size(); ++i)
        h[i] += mat[i];
    }
    shared += e.first.size() > 1 ? std::size_t{1} : std::size_t{0};
    if (any)
      out.emplace(b, std::move(h));
  }
  notes.push_back("MatMulNBits GPTQ: Hessians of " + std::to_string(features.size()) +
                  " activation" + (features.size() == 1 ? "" : "s") + " over " +
                  std::to_string(hs.samples) + " sample" + (hs.samples == 1 ? "" : "s") +
                  (shared > 0 ? "; " + std::to_string(shared) +
                                    " weights read by several activations use the sum"
                              : std::string()));
  return out;
}

std::int64_t gptq_opset(const gptq_config& o) {
  if (o.bits <= 4 || o.bits > 8 || o.group_size > 0)
    return 21;
  return o.per_channel ? 13 : 10;
}

gptq_stats gptq_weights(model& qm, const model& float_model, calibration_data_reader& reader,
                        const gptq_config& o, std::optional<std::size_t> max_samples) {
  gptq_stats st;
  GraphProto& g = *proto(qm).mutable_graph();
  const graph_index ix(g);
  std::map<std::string, const NodeProto*> float_by_name;
  for (const auto& n : proto(float_model).graph().node())
    float_by_name[n.name()] = &n;

  std::vector<gptq_target> targets;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (n.op_type() != "MatMul" || !n.domain().empty() || n.input_size() != 2)
      continue;
    const std::string label = n.name().empty() ? n.output(0) : n.name();
    auto skip = [&](const std::string& why) { st.skipped.push_back(label + " (" + why + ")"); };
    const auto p = ix.producer.find(n.input(1));
    if (p == ix.producer.end() || g.node(p->second).op_type() != "DequantizeLinear")
      continue;  // the weight is not quantized (or not a constant): not a target
    const NodeProto& dq = g.node(p->second);
    if (!dq.domain().empty() && (o.bits <= 4 || o.group_size > 0)) {
      skip("its DequantizeLinear is " + dq.domain() + "'s, which takes no 4-bit codes or blocks");
      continue;
    }
    if (dq.input_size() < 2 || !qm.has_initializer(dq.input(0)) ||
        !qm.has_initializer(dq.input(1))) {
      skip("its weight is not stored as integers");
      continue;
    }
    bool shared = ix.uses(n.input(1)) != 1;
    for (int k = 0; k < dq.input_size(); ++k) {
      if (!dq.input(k).empty() && ix.uses(dq.input(k)) != 1)
        shared = true;
    }
    if (shared) {
      skip("its weight's tensors are shared with another node");
      continue;
    }
    auto f = float_by_name.find(n.name());
    if (n.name().empty() || f == float_by_name.end() || f->second->input_size() != 2 ||
        !float_model.has_initializer(f->second->input(1))) {
      skip("no float weight of the same node in the float model");
      continue;
    }
    const tensor w = float_model.initializer(f->second->input(1));
    if (w.type() != dtype_id::float32 || w.rank() != 2 || w.size() == 0) {
      skip("its float weight is not a non-empty 2-D float32 matrix");
      continue;
    }
    if (float_model.has_initializer(f->second->input(0))) {
      skip("its input 0 is a constant");
      continue;
    }
    targets.push_back({label, p->second, f->second->input(0), f->second->input(1),
                       static_cast<std::size_t>(w.shape()[0]),
                       static_cast<std::size_t>(w.shape()[1])});
  }
  if (targets.empty())
    return st;

  // One Hessian per activation, over the calibration data.
  std::map<std::string, std::size_t> features;
  for (const auto& t : targets) {
    auto [it, fresh] = features.emplace(t.x, t.k);
    if (!fresh && it->second != t.k) {
      throw frontend_error("quark.onnx.shape", "gptq: '" + t.x + "' is read by MatMuls whose " +
                                                   "weights have " + std::to_string(it->second) +
                                                   " and " + std::to_string(t.k) + " rows");
    }
  }
  hessian_set hs = collect_hessians(float_model, features, reader, max_samples, "algo_config gptq");
  st.samples = hs.samples;
  auto& hessians = hs.h;

  const gptq_computed_params grid{o.bits, o.symmetric, o.per_channel, o.mse};
  quark::gptq_options so;
  so.group_size = o.group_size;
  so.block_size = o.block_size;
  so.perc_damp = o.perc_damp;
  so.act_order = o.act_order;
  const dtype_id ct = code_type(o.bits);
  for (const auto& t : targets) {
    const gptq_hessian& h = *hessians.at(t.x);
    if (h.samples() == 0) {
      st.skipped.push_back(t.name + " (its input '" + t.x + "' was never computed)");
      continue;
    }
    const tensor w = float_model.initializer(t.w);
    gptq_result r;
    try {
      if (o.act_order && o.group_size > 0) {
        // Static groups: each group's grid from the float weight's own rows, so the groups
        // stay contiguous rows (a blocked DequantizeLinear) in act_order's processing order.
        const gptq_static_grid sg =
            gptq_static_groups(w.data<float>(), t.k, t.n, grid, o.group_size);
        r = gptq_quantize(w.data<float>(), t.k, t.n, h, sg.params(), so);
      } else {
        r = gptq_quantize(w.data<float>(), t.k, t.n, h, grid, so);
      }
    } catch (const quark::error& e) {
      throw frontend_error("quark.quantize.gptq", "gptq: MatMul '" + t.name + "': " + e.what());
    }
    st.loss += r.loss;
    NodeProto& dq = *g.mutable_node(t.dq);
    const auto ki = static_cast<std::int64_t>(t.k), ni = static_cast<std::int64_t>(t.n);
    qm.set_initializer(dq.input(0), zero_point_tensor(ct, r.codes, false, {ki, ni}));
    std::vector<float> scales = r.scales;
    std::vector<std::int32_t> zeros = r.zeros;
    shape_t grid_shape;
    remove_attribute(dq, "block_size");
    if (r.groups > 1) {
      // Blocks of group_size rows along K: [groups, N] (a per-tensor grid repeated along N).
      if (r.channels == 1) {
        scales.clear();
        zeros.clear();
        for (std::size_t gi = 0; gi < r.groups; ++gi) {
          scales.insert(scales.end(), t.n, r.scales[gi]);
          zeros.insert(zeros.end(), t.n, r.zeros[gi]);
        }
      }
      grid_shape = {static_cast<std::int64_t>(r.groups), ni};
      set_int_attribute(dq, "axis", 0);
      add_int_attribute(dq, "block_size", o.group_size);
    } else if (r.channels == t.n && t.n > 1) {
      grid_shape = {ni};
      set_int_attribute(dq, "axis", 1);
    } else {
      scales.resize(1);
      zeros.resize(1);
      remove_attribute(dq, "axis");
    }
    qm.set_initializer(dq.input(1), scale_tensor(scales, grid_shape.empty(), grid_shape));
    const tensor zp = zero_point_tensor(ct, zeros, grid_shape.empty(), grid_shape);
    if (dq.input_size() >= 3 && !dq.input(2).empty()) {
      qm.set_initializer(dq.input(2), zp);
    } else {
      const std::string zname = dq.input(0) + "_gptq_zero_point";
      qm.set_initializer(zname, zp);
      if (dq.input_size() < 3)
        dq.add_input(zname);
      else
        dq.set_input(2, zname);
    }
    tensor_report rep;
    rep.name = t.w;
    rep.role = "weight";
    rep.type = std::string(dtype_name(ct));
    rep.scale = scales;
    rep.zero_point.assign(zeros.begin(), zeros.end());
    rep.axis = grid_shape.empty() ? -1 : r.groups > 1 ? 0 : 1;
    st.weights.push_back(std::move(rep));
    ++st.matmuls;
  }
  return st;
}

namespace {

std::string gptq_note(const gptq_config& o, const gptq_stats& s) {
  std::string note = "gptq: " + std::to_string(s.matmuls) + " MatMul weight" +
                     (s.matmuls == 1 ? "" : "s") + " (" + std::to_string(o.bits) + " bits, " +
                     (o.symmetric ? "symmetric" : "asymmetric") + ", " +
                     (o.group_size > 0 ? "groups of " + std::to_string(o.group_size)
                      : o.per_channel  ? std::string("per channel")
                                       : std::string("per tensor")) +
                     (o.act_order ? ", act_order" : "") + (o.mse ? ", mse" : "") + ") on " +
                     std::to_string(s.samples) + " sample" + (s.samples == 1 ? "" : "s");
  if (s.matmuls > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "; proxy loss %.4g", s.loss);
    note += buf;
  }
  if (!s.skipped.empty()) {
    note += "; left alone:";
    for (std::size_t i = 0; i < s.skipped.size(); ++i)
      note += (i == 0 ? " " : ", ") + s.skipped[i];
  }
  return note;
}

}  // namespace

void report_gptq(quantize_report& report, const gptq_config& o, const gptq_stats& s) {
  for (const auto& w : s.weights) {
    for (auto& t : report.tensors) {
      if (t.name != w.name || t.role != "weight")
        continue;
      if (t.type != w.type) {
        if (auto it = report.tensors_per_type.find(t.type);
            it != report.tensors_per_type.end() && it->second > 0)
          --it->second;
        ++report.tensors_per_type[w.type];
      }
      t.type = w.type;
      t.scale = w.scale;
      t.zero_point = w.zero_point;
      t.axis = w.axis;
      break;
    }
  }
  report.notes.push_back(gptq_note(o, s));
}

}  // namespace quark::onnx::qz
