// SPDX-License-Identifier: MIT
// SmoothQuant on the float model (quark-spec §10.2; see algorithms.hpp). The factors are
// include/quark/algo/smooth_quant.hpp's.
//
// Where quark-cpp departs from Quark's code (docs/compatibility.md): only MatMuls the quantizer
// will quantize take part (Quark smooths every MatMul with an initializer weight, excluded ones
// too); the Muls stay float (Quark quantizes them like any Mul, and the Q/DQ pair on their input
// is the per-tensor quantization of the unsmoothed activation that SmoothQuant exists to avoid);
// a weight initializer shared with another node is left alone (Quark scales it once per reader);
// the weight must be 2-D; channels with no usable statistic keep s = 1 (smooth_quant.hpp).
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <quark/algo/smooth_quant.hpp>

#include "quantizer/algorithms.hpp"

namespace quark::onnx::qz {

namespace {

/// One MatMul to smooth.
struct sq_target {
  std::size_t node = 0;  ///< index into the node list taken before any edit
  std::string name;      ///< node name (or its output's, when the node has none)
  std::string x, w;
  std::size_t k = 0, n = 0;
};

/// `base`, or `base` + "_<i>" for the first i that names nothing in `taken`; added to `taken`.
std::string unique_name(const std::string& base, std::set<std::string>& taken) {
  std::string name = base;
  for (std::size_t i = 1; taken.contains(name); ++i)
    name = base + "_" + std::to_string(i);
  taken.insert(name);
  return name;
}

}  // namespace

smooth_quant_stats smooth_quant(model& m, const smooth_quant_options& o,
                                calibration_data_reader& reader,
                                std::optional<std::size_t> max_samples,
                                const std::function<bool(const std::string&)>& quantized) {
  smooth_quant_stats st;
  const std::vector<node_info> nodes = m.nodes();
  std::map<std::string, std::size_t> readers;  // node inputs reading each value
  std::set<std::string> taken;                 // every node, value and initializer name
  for (const auto& n : nodes) {
    taken.insert(n.name);
    for (const auto& x : n.inputs) {
      if (!x.empty())
        ++readers[x];
      taken.insert(x);
    }
    taken.insert(n.outputs.begin(), n.outputs.end());
  }
  for (const auto& i : m.initializer_names())
    taken.insert(i);
  for (const auto& i : m.inputs())
    taken.insert(i.name);
  std::set<std::string> graph_outputs;
  for (const auto& out : m.outputs())
    graph_outputs.insert(out.name);

  std::vector<sq_target> targets;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const node_info& n = nodes[i];
    if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.empty() ||
        !quantized(n.name))
      continue;
    const std::string label = n.name.empty() ? n.outputs.front() : n.name;
    const std::string& x = n.inputs[0];
    const std::string& w = n.inputs[1];
    if (w.empty() || !m.has_initializer(w))
      continue;  // no constant weight: not a SmoothQuant target (as in Quark)
    auto skip = [&](const std::string& why) { st.skipped.push_back(label + " (" + why + ")"); };
    if (x.empty() || m.has_initializer(x)) {
      skip("its input 0 is a constant");
      continue;
    }
    const tensor wt = m.initializer(w);
    if (wt.type() != dtype_id::float32 || wt.rank() != 2 || wt.size() == 0) {
      skip("its weight is not a non-empty 2-D float32 matrix");
      continue;
    }
    if (readers[w] != 1 || graph_outputs.contains(w)) {
      skip("its weight '" + w + "' is shared with another node");
      continue;
    }
    targets.push_back({i, label, x, w, static_cast<std::size_t>(wt.shape()[0]),
                       static_cast<std::size_t>(wt.shape()[1])});
  }
  if (targets.empty())
    return st;

  // Per-channel maxima of each activation over the calibration data.
  std::map<std::string, std::vector<float>> amax;
  std::map<std::string, std::string> first_reader;  // for messages
  for (const auto& t : targets) {
    auto [it, fresh] = amax.try_emplace(t.x, std::vector<float>(t.k, 0.0f));
    if (fresh) {
      first_reader[t.x] = t.name;
    } else if (it->second.size() != t.k) {
      throw frontend_error("quark.onnx.shape",
                           "smooth_quant: MatMul '" + t.name + "' reads '" + t.x +
                               "' with a weight of " + std::to_string(t.k) + " rows, MatMul '" +
                               first_reader[t.x] + "' with " + std::to_string(it->second.size()));
    }
  }
  if (!reader.can_rewind()) {
    throw config_error("quark.config.value",
                       "algo_config smooth_quant: the calibration data is read twice (for the "
                       "smoothing factors, then for calibration): give a reader that can rewind "
                       "(a folder, memory or random data)");
  }
  std::set<std::string> seen;
  std::map<std::string, std::size_t> features;
  for (const auto& [x, maxima] : amax)
    features.emplace(x, maxima.size());
  st.samples =
      for_each_activation(m, features, reader, max_samples, "algo_config smooth_quant",
                          [&](const std::string& name, std::span<const float> rows, std::size_t) {
                            smooth_quant_observe(rows, features.at(name), amax.at(name));
                            seen.insert(name);
                          });

  // Factors, weights and one Mul per MatMul, inserted from the last node back so the indices of
  // the nodes before it stay valid.
  std::set<std::string> activations;
  for (auto t = targets.rbegin(); t != targets.rend(); ++t) {
    if (!seen.contains(t->x)) {
      st.skipped.push_back(t->name + " (its input '" + t->x + "' was never computed)");
      continue;
    }
    tensor w = m.initializer(t->w);
    std::vector<float> s(t->k), inv(t->k);
    st.channels_kept += smooth_quant_factors(amax.at(t->x), w.data<float>(), t->n, o.alpha, s, inv);
    st.channels += t->k;
    smooth_quant_scale_rows(w.data<float>(), t->n, s);
    m.set_initializer(t->w, w);
    const std::string base = t->x + "_" + t->name;
    const std::string scale = unique_name(base + "_smooth_scale", taken);
    const std::string out = unique_name(base + "_smooth_output", taken);
    const std::string mul = unique_name(base + "_smooth_mul", taken);
    m.set_initializer(scale,
                      tensor::from_floats({static_cast<std::int64_t>(t->k)}, std::span(inv)));
    m.set_node_input(t->node, 0, out);
    m.insert_node(t->node, {.name = mul,
                            .op_type = "Mul",
                            .domain = "",
                            .inputs = {t->x, scale},
                            .outputs = {out},
                            .attributes = {}});
    ++st.matmuls;
    st.mul_nodes.push_back(mul);
    activations.insert(t->x);
  }
  st.activations = activations.size();
  return st;
}

std::string smooth_quant_note(const smooth_quant_options& o, const smooth_quant_stats& s) {
  std::string note = "smooth_quant: alpha " + std::to_string(o.alpha).substr(0, 4) + ", " +
                     std::to_string(s.matmuls) + " MatMul" + (s.matmuls == 1 ? "" : "s") +
                     " smoothed (" + std::to_string(s.activations) + " activation" +
                     (s.activations == 1 ? "" : "s") + ", " + std::to_string(s.samples) +
                     " sample" + (s.samples == 1 ? "" : "s") + ")";
  if (s.channels_kept > 0) {
    note += ", " + std::to_string(s.channels_kept) + " of " + std::to_string(s.channels) +
            " channels kept at 1 (zero or non-finite statistics)";
  }
  if (!s.skipped.empty()) {
    note += "; left alone:";
    for (std::size_t i = 0; i < s.skipped.size(); ++i)
      note += (i == 0 ? " " : ", ") + s.skipped[i];
  }
  return note;
}

}  // namespace quark::onnx::qz
