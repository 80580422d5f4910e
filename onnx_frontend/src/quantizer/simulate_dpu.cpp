// SPDX-License-Identifier: MIT
// SimulateDPU's conversions (simulate_dpu.hpp; quark-spec §9.2).
#include "quantizer/simulate_dpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <variant>

#include <quark/onnx/error.hpp>
#include <quark/scale/dpu.hpp>

#include "io/graph_util.hpp"
#include "io/proto_access.hpp"
#include "quantizer/conversions.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

/// The marker edit_node leaves on a node for apply_dpu_marks (the node's index in the plan).
constexpr const char* marker = "quark_cpp_dpu_edit";

std::optional<float> float_attribute(const node_info& n, std::string_view name) {
  for (const auto& a : n.attributes) {
    if (a.name == name) {
      if (const auto* f = std::get_if<float>(&a.value))
        return *f;
    }
  }
  return std::nullopt;
}

const std::vector<std::int64_t>* ints_attribute(const node_info& n, std::string_view name) {
  for (const auto& a : n.attributes) {
    if (a.name == name)
      return std::get_if<std::vector<std::int64_t>>(&a.value);
  }
  return nullptr;
}

std::string label(const node_info& n, std::size_t i) {
  return n.name.empty() ? "node #" + std::to_string(i) + " (" + n.op_type + ")"
                        : "node '" + n.name + "' (" + n.op_type + ")";
}

/// "3 nodes" / "1 node".
std::string count(std::size_t k, const char* what) {
  return std::to_string(k) + " " + what + (k == 1 ? "" : "s");
}

}  // namespace

bool is_dpu_hard_sigmoid(const node_info& n) {
  if (n.op_type != "HardSigmoid" || !n.domain.empty())
    return false;
  const auto alpha = float_attribute(n, "alpha");
  const auto beta = float_attribute(n, "beta");
  return alpha && std::fabs(static_cast<double>(*alpha) - 1.0 / 6.0) < 1e-6 &&
         (!beta || std::fabs(static_cast<double>(*beta) - 0.5) < 1e-6);
}

dpu_plan plan_dpu(const model& m, const std::vector<node_info>& nodes,
                  const settings::dpu_conversions& o,
                  const std::function<bool(std::size_t)>& quantized,
                  const std::function<bool(std::size_t)>& simulate) {
  dpu_plan p;
  if (!o.any())
    return p;
  std::set<std::string> graph_inputs;
  for (const auto& in : m.inputs())
    graph_inputs.insert(in.name);
  std::optional<std::map<std::string, std::vector<std::int64_t>>> shapes;
  // Static shapes as shape inference gives them; Quark reads value_info, which holds no graph
  // input, so a pool reading a graph input is left alone as there.
  auto static_shape = [&](const std::string& v) -> const std::vector<std::int64_t>* {
    if (graph_inputs.contains(v))
      return nullptr;
    if (!shapes)
      shapes = inferred_shapes(m);
    auto it = shapes->find(v);
    return it == shapes->end() ? nullptr : &it->second;
  };
  std::size_t leaky = 0, leaky_default = 0, sigmoid = 0, hard_sigmoid = 0, pools = 0, means = 0;
  std::vector<std::string> unknown_pools, unknown_means;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const node_info& n = nodes[i];
    if (!n.domain.empty())
      continue;
    dpu_edit e;
    const std::string& op = n.op_type;
    if (o.leaky_relu && op == "LeakyRelu" && quantized(i)) {
      if (const auto a = float_attribute(n, "alpha")) {
        if (!std::isfinite(*a)) {
          throw frontend_error("quark.quantize.non_finite",
                               label(n, i) + " has a non-finite alpha (" + std::to_string(*a) +
                                   "); ConvertLeakyReluToDPUVersion needs a finite slope");
        }
        e.leaky_alpha = quark::dpu::leaky_relu_alpha(*a);
        ++leaky;
      } else {
        ++leaky_default;
      }
    }
    bool dpu_hard_sigmoid = is_dpu_hard_sigmoid(n);
    if (o.sigmoid && op == "Sigmoid" && quantized(i)) {
      e.to_hard_sigmoid = true;
      dpu_hard_sigmoid = true;
      ++sigmoid;
    }
    if (o.hard_sigmoid && dpu_hard_sigmoid && simulate(i) && !n.outputs.empty()) {
      e.mul = quark::dpu::hard_sigmoid_scale;
      ++hard_sigmoid;
    }
    if (o.avg_pool && (op == "AveragePool" || op == "GlobalAveragePool") && quantized(i) &&
        !n.inputs.empty() && !n.outputs.empty()) {
      std::int64_t kh = 0, kw = 0;
      if (op == "GlobalAveragePool") {
        const auto* s = static_shape(n.inputs[0]);
        if (s != nullptr && s->size() == 4 && (*s)[2] == (*s)[3]) {
          kh = (*s)[2];
          kw = (*s)[3];
        }
      } else if (const auto* k = ints_attribute(n, "kernel_shape");
                 k != nullptr && k->size() == 2 && (*k)[0] == (*k)[1]) {
        kh = (*k)[0];
        kw = (*k)[1];
      }
      if (kh > 0 && kw > 0) {
        e.mul = quark::dpu::avg_pool_scale(kh, kw);
        ++pools;
      } else {
        unknown_pools.push_back(label(n, i));
      }
    }
    if (o.reduce_mean && op == "ReduceMean" && quantized(i) && !n.inputs.empty() &&
        !n.outputs.empty()) {
      std::optional<std::vector<std::int64_t>> axes;
      if (const auto* a = ints_attribute(n, "axes"))
        axes = *a;
      else if (n.inputs.size() >= 2)
        axes = int_values(m, n.inputs[1]);
      const auto* s = static_shape(n.inputs[0]);
      std::int64_t r = 1;
      bool known = axes.has_value() && !axes->empty() && s != nullptr && !s->empty();
      for (std::size_t k = 0; known && k < axes->size(); ++k) {
        const std::int64_t rank = static_cast<std::int64_t>(s->size());
        const std::int64_t ax = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
        known = ax >= 0 && ax < rank && (*s)[static_cast<std::size_t>(ax)] > 0 &&
                r <= quark::dpu::max_mean_count / (*s)[static_cast<std::size_t>(ax)];
        if (known)
          r *= (*s)[static_cast<std::size_t>(ax)];
      }
      if (known) {
        e.mul = quark::dpu::mean_scale(r);
        ++means;
      } else {
        unknown_means.push_back(label(n, i));
      }
    }
    if (o.clip && op == "Clip" && quantized(i))
      e.clip = true;  // counted when applied: the bounds must be initializers then
    if (e.to_hard_sigmoid || e.leaky_alpha || e.mul || e.clip)
      p.edits.emplace(i, e);
  }
  std::vector<std::string> done;
  if (leaky > 0)
    done.push_back(count(leaky, "LeakyRelu") + " with alpha in 1/256 steps");
  if (sigmoid > 0)
    done.push_back(count(sigmoid, "Sigmoid") + " -> HardSigmoid(1/6, 0.5)");
  if (hard_sigmoid > 0)
    done.push_back(count(hard_sigmoid, "HardSigmoid") + " scaled by 16386/16384");
  if (pools > 0)
    done.push_back(count(pools, "average pool") + " scaled by the DPU's 1/k");
  if (means > 0)
    done.push_back(count(means, "ReduceMean") + " scaled by the DPU's 1/k");
  if (!done.empty()) {
    std::string s = "SimulateDPU: ";
    for (std::size_t k = 0; k < done.size(); ++k)
      s += (k > 0 ? ", " : "") + done[k];
    p.notes.push_back(s);
  }
  if (leaky_default > 0) {
    p.notes.push_back("SimulateDPU: " + count(leaky_default, "LeakyRelu") +
                      " without an alpha attribute keep the default 0.01 (as in Quark, which "
                      "rounds only a given alpha)");
  }
  auto unknown = [&](const std::vector<std::string>& v, const char* what) {
    if (v.empty())
      return;
    p.notes.push_back(
        "SimulateDPU: " + count(v.size(), what) + " left unscaled (" + v.front() +
        (v.size() > 1 ? " and others" : "") +
        "): the window is not a static square / the reduced sizes are unknown (the model's "
        "input sizes are symbolic; FixShapes only applies to the written model, as "
        "in Quark)");
  };
  unknown(unknown_pools, "average pool");
  unknown(unknown_means, "ReduceMean");
  return p;
}

void edit_node(::onnx::NodeProto& n, const dpu_edit& e, std::size_t index) {
  if (e.to_hard_sigmoid) {
    n.set_op_type("HardSigmoid");
    n.clear_attribute();
    add_float_attribute(n, "alpha", static_cast<float>(1.0 / 6.0));
  }
  if (e.leaky_alpha) {
    if (auto* a = find_attr(n, "alpha"))
      a->set_f(*e.leaky_alpha);
  }
  if (e.mul || e.clip)
    add_int_attribute(n, marker, static_cast<std::int64_t>(index));
}

std::vector<std::string> apply_dpu_marks(model& m, const dpu_plan& p) {
  std::vector<std::string> notes;
  ::onnx::GraphProto& g = *proto(m).mutable_graph();
  name_pool names(g);
  std::vector<::onnx::NodeProto> out;
  out.reserve(static_cast<std::size_t>(g.node_size()));
  std::set<std::string> old_bounds;
  std::size_t clips = 0, clips_skipped = 0;
  std::string clip_example;
  for (int j = 0; j < g.node_size(); ++j) {
    ::onnx::NodeProto n = g.node(j);
    const auto* a = find_attr(n, marker);
    if (a == nullptr) {
      out.push_back(std::move(n));
      continue;
    }
    const auto it = p.edits.find(static_cast<std::size_t>(a->i()));
    auto& attrs = *n.mutable_attribute();
    attrs.erase(std::remove_if(attrs.begin(), attrs.end(),
                               [](const ::onnx::AttributeProto& x) { return x.name() == marker; }),
                attrs.end());
    if (it == p.edits.end()) {
      out.push_back(std::move(n));
      continue;
    }
    const dpu_edit& e = it->second;
    if (e.clip) {
      // Bounds must be float scalar initializers (Quark leaves a Clip with other bounds alone);
      // each converted Clip gets bounds of its own, so a shared initializer keeps its value.
      const bool attr_bounds = find_attr(n, "min") != nullptr || find_attr(n, "max") != nullptr;
      float lo = -128.0f, hi = 127.0f;
      bool ok = !attr_bounds;
      for (int k = 1; ok && k <= 2; ++k) {
        if (k < n.input_size() && !n.input(k).empty()) {
          // round, then clamp to [-128, 127] (an infinite bound clamps too; NaN has no integer).
          const auto v = float_scalar(m, n.input(k));
          ok = v.has_value() && !std::isnan(*v);
          if (ok)
            (k == 1 ? lo : hi) = quark::dpu::clip_bound(*v);
        }
      }
      if (!ok) {
        if (clips_skipped++ == 0)
          clip_example = node_label(n, static_cast<std::size_t>(j));
      } else {
        const std::string base = n.name().empty() ? n.output(0) : n.name();
        while (n.input_size() < 3)
          n.add_input("");
        for (int b = 1; b <= 2; ++b) {
          if (!n.input(b).empty())
            old_bounds.insert(n.input(b));
          const std::string name = names.fresh(base + (b == 1 ? "_dpu_min" : "_dpu_max"));
          m.set_initializer(name, tensor::from_floats({}, std::vector<float>{b == 1 ? lo : hi}));
          n.set_input(b, name);
        }
        ++clips;
      }
    }
    if (!e.mul) {
      out.push_back(std::move(n));
      continue;
    }
    const std::string y = n.output(0);
    if (n.name().empty())
      n.set_name(y);
    const std::string mid = names.fresh(y + "_Mul");
    const std::string scale = names.fresh(y + "_Scale");
    n.set_output(0, mid);
    out.push_back(std::move(n));
    ::onnx::NodeProto c = make_op("Constant", scale, {}, {scale});
    auto* v = c.add_attribute();
    v->set_name("value");
    v->set_type(::onnx::AttributeProto::TENSOR);
    ::onnx::TensorProto* t = v->mutable_t();
    t->set_name("scale");
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_float_data(static_cast<float>(*e.mul));
    out.push_back(std::move(c));
    out.push_back(make_op("Mul", mid, {mid, scale}, {y}));
  }
  g.clear_node();
  for (auto& node : out)
    *g.add_node() = std::move(node);
  drop_unused_initializers(m, old_bounds);
  if (clips > 0)
    notes.push_back("SimulateDPU: " + count(clips, "Clip") + " with integer bounds");
  if (clips_skipped > 0) {
    notes.push_back("SimulateDPU: " + count(clips_skipped, "Clip") + " left as they are (" +
                    clip_example + (clips_skipped > 1 ? " and others" : "") +
                    "): ConvertClipToDPUVersion needs bounds given as float initializers");
  }
  return notes;
}

}  // namespace quark::onnx::qz
