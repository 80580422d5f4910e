// SPDX-License-Identifier: MIT
// Bias correction (quark-spec §10.3; see algorithms.hpp).
//
// For each quantized Conv / Gemm of the quantized model (its weight comes out of a
// DequantizeLinear) that has a bias: the quantized model runs on the calibration data; the node's
// input (already dequantized) and the value at the end of the single-consumer Relu / Clip /
// QuantizeLinear / DequantizeLinear chain after it are taken as they are produced; the float node
// (float weight and bias of the float model) plus the chain's Relu / Clip runs on that same
// input; d = mean(float - quantized) per channel (axis 1; outputs of rank 4 or 2 only). Then, as
// in Quark: b_f = dequantized bias, k = 1, and if max|d| > max|b_f| / 256 and max|d| > 0.1 then
// k = (max|b_f| / 256) / max|d|; b = b_f + k d, quantized again with the bias's own scale and
// zero point (Quark writes a new integer with the old scale for power-of-two methods and leaves
// some methods alone; quark-cpp re-quantizes every integer bias with its existing scale, the
// one consistent choice; docs/compatibility.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include <quark/algo/bias_correction.hpp>
#include <quark/onnx/runtime.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/numerics.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;

struct bc_target {
  int node = -1;                ///< in the quantized graph
  std::string input;            ///< the node's input 0 (a dequantized activation)
  std::string end;              ///< last value of the Relu / Clip / Q / DQ chain
  std::string bias_value;       ///< the node's input 2 in the quantized graph
  std::unique_ptr<runtime> rt;  ///< float node + Relu / Clip
  std::string rt_out;
  quark::bias_correction::mean_difference diff;  ///< float - quantized, per channel
  bool bad_rank = false;
};

const ::onnx::TensorProto* find_init(const GraphProto& g, const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name)
      return &t;
  }
  return nullptr;
}

/// The float sub-model: `node` (from the float graph) reading "x", then the Relu / Clip copies.
model sub_model(const ModelProto& float_proto, const NodeProto& node,
                const std::vector<const NodeProto*>& chain, std::string& out_name) {
  ModelProto p;
  p.set_ir_version(float_proto.ir_version());
  *p.mutable_opset_import() = float_proto.opset_import();
  GraphProto& g = *p.mutable_graph();
  g.set_name("bias_correction");
  auto* in = g.add_input();
  in->set_name("bc_x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  NodeProto& n = *g.add_node();
  n = node;
  n.set_input(0, "bc_x");
  for (int k = 1; k < n.input_size(); ++k) {
    if (const auto* t = find_init(float_proto.graph(), n.input(k)))
      *g.add_initializer() = *t;
  }
  std::string value = n.output(0);
  for (const NodeProto* c : chain) {
    NodeProto& x = *g.add_node();
    x = *c;
    x.set_input(0, value);
    for (int k = 1; k < x.input_size(); ++k) {
      if (x.input(k).empty())
        continue;
      if (const auto* t = find_init(float_proto.graph(), x.input(k)))
        *g.add_initializer() = *t;
    }
    value = x.output(0);
  }
  auto* out = g.add_output();
  out->set_name(value);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  out_name = value;
  return make_model(std::move(p));
}

/// Dequantized bias values, or nullopt when the bias is neither a float initializer nor an
/// int8 / int16 / int32 initializer behind a DequantizeLinear.
struct bias_ref {
  bool quantized = false;
  std::string data;  ///< initializer holding the values
  std::vector<float> scale;
  std::vector<std::int64_t> zero_point;
  dtype_id type = dtype_id::float32;
};

std::int64_t element_as_int(const tensor& t, std::size_t i) {
  switch (t.type()) {
    case dtype_id::int8:
      return t.data<std::int8_t>()[i];
    case dtype_id::int16:
      return t.data<std::int16_t>()[i];
    case dtype_id::int32:
      return t.data<std::int32_t>()[i];
    default:
      return 0;
  }
}

}  // namespace

// Declared in algorithms.hpp (fast finetune re-quantizes biases the same way).
tensor requantize(const std::vector<float>& v, dtype_id t, const std::vector<float>& scale,
                  const std::vector<std::int64_t>& zero_point) {
  tensor out(t, {static_cast<std::int64_t>(v.size())});
  const std::size_t dims[1] = {v.size()};
  const quark::tensor_shape shape{std::span<const std::size_t>(dims)};
  const quark::granularity g =
      scale.size() == 1 ? quark::granularity{per_tensor{}} : quark::granularity{per_channel{0}};
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    if constexpr (integral_data_type<D>) {
      std::vector<zero_point_t<D>> z;
      for (const auto x : zero_point)
        z.push_back(static_cast<zero_point_t<D>>(x));
      if (z.empty())
        z.assign(scale.size(), zero_point_t<D>{});
      tensor_qparams<D> p{scale, z, g};
      const int_range r = quant_range<D>(range_table::full);
      p.qmin = r.min;
      p.qmax = r.max;
      quark::quantize<D>(shape, std::span<const float>(v), p, out.data<D>());
    }
  });
  return out;
}

bias_correction_stats correct_bias(model& qm, const model& float_model,
                                   calibration_data_reader& reader,
                                   std::optional<std::size_t> max_samples) {
  bias_correction_stats st;
  const GraphProto& g = proto(qm).graph();
  const ModelProto& fp = proto(float_model);
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<int>> consumers;
  std::set<std::string> graph_outputs, inits;
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& o : g.node(i).output())
      producer[o] = i;
    for (const auto& x : g.node(i).input()) {
      if (!x.empty())
        consumers[x].push_back(i);
    }
  }
  for (const auto& o : g.output())
    graph_outputs.insert(o.name());
  for (const auto& t : g.initializer())
    inits.insert(t.name());
  std::map<std::string, const NodeProto*> float_by_output;
  for (const auto& n : fp.graph().node()) {
    if (n.output_size() >= 1)
      float_by_output[n.output(0)] = &n;
  }
  auto only_consumer = [&](const std::string& v) -> int {
    auto it = consumers.find(v);
    if (graph_outputs.contains(v) || it == consumers.end() || it->second.size() != 1)
      return -1;
    return it->second.front();
  };
  auto made_by = [&](const std::string& v, const char* op) -> const NodeProto* {
    auto it = producer.find(v);
    return it != producer.end() && g.node(it->second).op_type() == op ? &g.node(it->second)
                                                                      : nullptr;
  };

  std::vector<bc_target> targets;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if ((n.op_type() != "Conv" && n.op_type() != "Gemm") || !n.domain().empty() ||
        n.input_size() < 2 || made_by(n.input(1), "DequantizeLinear") == nullptr)
      continue;
    auto fit = float_by_output.find(n.output(0));
    if (n.input_size() < 3 || n.input(2).empty() || inits.contains(n.input(0)) ||
        fit == float_by_output.end() || fit->second->op_type() != n.op_type()) {
      ++st.skipped;
      continue;
    }
    bc_target t;
    t.node = i;
    t.input = n.input(0);
    t.bias_value = n.input(2);
    std::vector<const NodeProto*> chain;
    std::string v = n.output(0);
    for (;;) {
      const int c = only_consumer(v);
      if (c < 0)
        break;
      const NodeProto& x = g.node(c);
      const std::string& op = x.op_type();
      if (op == "Relu" || op == "Clip")
        chain.push_back(&x);
      else if (op != "QuantizeLinear" && op != "DequantizeLinear")
        break;
      if (x.input(0) != v || x.output_size() != 1)
        break;
      v = x.output(0);
    }
    t.end = v;
    t.rt = std::make_unique<runtime>(sub_model(fp, *fit->second, chain, t.rt_out),
                                     runtime_options{.threads = 0, .tune_malloc = false});
    targets.push_back(std::move(t));
  }
  if (targets.empty())
    return st;

  std::map<std::string, std::vector<std::size_t>> by_input, by_end;
  for (std::size_t k = 0; k < targets.size(); ++k) {
    by_input[targets[k].input].push_back(k);
    by_end[targets[k].end].push_back(k);
  }
  runtime qrt(qm);
  reader.rewind();
  // The captured input of each pending target, already as the sub-model's feeds (one copy,
  // shared by the targets that read it).
  std::map<std::string, std::map<std::string, tensor>> held;
  std::map<std::string, std::size_t> pending;
  while (!max_samples || st.samples < *max_samples) {
    std::optional<calib_sample> s = reader.next();
    if (!s)
      break;
    held.clear();
    for (const auto& [name, ks] : by_input)
      pending[name] = ks.size();
    qrt.run(*s, [&](std::string_view name, const tensor& value) {
      const std::string key(name);
      if (by_input.contains(key)) {
        std::map<std::string, tensor> feeds;
        feeds.emplace("bc_x", value);
        held.insert_or_assign(key, std::move(feeds));
      }
      auto e = by_end.find(key);
      if (e == by_end.end())
        return;
      for (const std::size_t k : e->second) {
        bc_target& t = targets[k];
        auto h = held.find(t.input);
        if (h == held.end())
          continue;
        const auto out = t.rt->run(h->second);
        const tensor& f = out.at(t.rt_out);
        if (f.shape() != value.shape() || f.type() != dtype_id::float32 ||
            value.type() != dtype_id::float32 || (f.rank() != 4 && f.rank() != 2)) {
          t.bad_rank = true;
        } else {
          std::size_t dims[4] = {};
          for (std::size_t d = 0; d < f.rank(); ++d)
            dims[d] = static_cast<std::size_t>(f.shape()[d]);
          t.diff.observe(f.data<float>(), value.data<float>(),
                         std::span<const std::size_t>(dims, f.rank()));
        }
        if (--pending[t.input] == 0)
          held.erase(t.input);
      }
    });
    ++st.samples;
  }

  // New biases.
  for (auto& t : targets) {
    if (t.bad_rank || t.diff.channels() == 0 || t.diff.count() == 0.0) {
      ++st.skipped;
      continue;
    }
    const std::size_t c = t.diff.channels();
    bias_ref br;
    if (const NodeProto* dq = made_by(t.bias_value, "DequantizeLinear")) {
      if (!qm.has_initializer(dq->input(0)) || dq->input_size() < 2 ||
          !qm.has_initializer(dq->input(1))) {
        ++st.skipped;
        continue;
      }
      br.quantized = true;
      br.data = dq->input(0);
      const tensor sc = qm.initializer(dq->input(1));
      if (sc.type() != dtype_id::float32) {
        ++st.skipped;
        continue;
      }
      br.scale.assign(sc.data<float>().begin(), sc.data<float>().end());
      if (dq->input_size() >= 3 && !dq->input(2).empty() && qm.has_initializer(dq->input(2))) {
        const tensor zp = qm.initializer(dq->input(2));
        for (std::size_t i = 0; i < zp.size(); ++i)
          br.zero_point.push_back(element_as_int(zp, i));
      }
    } else if (qm.has_initializer(t.bias_value)) {
      br.data = t.bias_value;
    } else {
      ++st.skipped;
      continue;
    }
    tensor data = qm.initializer(br.data);
    br.type = data.type();
    if (data.size() != c ||
        (br.quantized && br.type != dtype_id::int32 && br.type != dtype_id::int16 &&
         br.type != dtype_id::int8) ||
        (!br.quantized && br.type != dtype_id::float32) ||
        (br.quantized && br.scale.size() != 1 && br.scale.size() != c)) {
      ++st.skipped;
      continue;
    }
    auto scale_of = [&](std::size_t i) { return br.scale[br.scale.size() == 1 ? 0 : i]; };
    auto zp_of = [&](std::size_t i) -> std::int64_t {
      if (br.zero_point.empty())
        return 0;
      return br.zero_point[br.zero_point.size() == 1 ? 0 : i];
    };
    std::vector<double> bf(c);
    for (std::size_t i = 0; i < c; ++i) {
      bf[i] = br.quantized ? quark::bias_correction::dequantized(element_as_int(data, i), zp_of(i),
                                                                 scale_of(i))
                           : static_cast<double>(data.data<float>()[i]);
    }
    std::vector<float> b_new(c);
    quark::bias_correction::correct(bf, t.diff.mean(), b_new);
    if (!br.quantized) {
      std::copy(b_new.begin(), b_new.end(), data.data<float>().begin());
    } else {
      // quark::quantize (quark-spec §1.3: division in float32, round half to even, + zero point,
      // saturation) with the bias's own scale and zero point, per tensor or per channel.
      data = requantize(b_new, br.type, br.scale, br.zero_point);
    }
    qm.set_initializer(br.data, data);
    ++st.corrected;
  }
  return st;
}

}  // namespace quark::onnx::qz
