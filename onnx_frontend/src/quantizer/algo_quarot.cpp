// SPDX-License-Identifier: MIT
// QuaRot's R1 rotation on the float model (quark-spec §10.6; see algorithms.hpp). The rotation is
// include/quark/algo/rotation.hpp's.
//
// The rotation config file (r_config_path) is Quark's: {"R1_pairs": [{"prev_nodes": [...],
// "next_nodes": [...], "norm_node": "..."}, ...]}. Per pair: the norm node's scale is folded into
// the next nodes' weights and set to 1; the prev nodes (a Gather embedding, MatMul, Gemm: the
// layers that write into the residual stream) get their output rotated, W R (and their bias); the
// next nodes (MatMul, Gemm: the readers after the norm) their input, R^T W.
//
// Where quark-cpp departs from Quark's code (docs/compatibility.md): weights are found by the
// operator's inputs (MatMul B, Gemm B with transB and C, Gather data, the norm's scale), not by
// "weight" / "bias" in the tensor names; a norm node is a Mul by a constant vector or an
// RMSNormalization / SimplifiedLayerNormalization (LayerNormalization is refused: its mean
// subtraction does not commute with R, Quark rotates it anyway); a weight read by another node,
// a node named twice, a rotated dimension other than r_matrix_dim and a size with no Hadamard
// matrix here (rotation.hpp) are errors; sizes other than powers of two use Paley matrices where
// Quark has tables of its own (the rotated weights differ, the function is kept either way);
// use_random_had's signs come from a fixed seed (Quark's are unseeded).
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <quark/algo/rotation.hpp>

#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/graph_util.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::NodeProto;

[[noreturn]] void bad(const std::string& what) {
  throw config_error("quark.config.value", "algo_config quarot: " + what);
}

/// The R1 pairs of the rotation config file.
struct r1_pair {
  std::vector<std::string> prev, next;
  std::string norm;
};

std::vector<r1_pair> read_config(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    bad("r_config_path \"" + path + "\" cannot be read");
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    bad("r_config_path \"" + path + "\" is not JSON: " + e.what());
  }
  if (!j.is_object())
    bad("r_config_path \"" + path + "\": the top level must be an object with \"R1_pairs\"");
  for (const auto& [key, value] : j.items()) {
    if (key != "R1_pairs") {
      bad("r_config_path \"" + path + "\": unknown key \"" + key +
          "\" (quark-cpp implements R1 only, as Quark's ONNX QuaRot)");
    }
  }
  std::vector<r1_pair> out;
  if (!j.contains("R1_pairs") || !j["R1_pairs"].is_array())
    bad("r_config_path \"" + path + "\": \"R1_pairs\" must be an array");
  for (std::size_t i = 0; i < j["R1_pairs"].size(); ++i) {
    const auto& p = j["R1_pairs"][i];
    const std::string at = "R1_pairs[" + std::to_string(i) + "]";
    if (!p.is_object())
      bad(at + " must be an object");
    r1_pair r;
    for (const auto& [key, value] : p.items()) {
      if (key == "prev_nodes" || key == "next_nodes") {
        if (!value.is_array())
          bad(at + "." + key + " must be an array of node names");
        for (const auto& n : value) {
          if (!n.is_string())
            bad(at + "." + key + " must be an array of node names");
          (key == "prev_nodes" ? r.prev : r.next).push_back(n.get<std::string>());
        }
      } else if (key == "norm_node") {
        if (!value.is_null() && !value.is_string())
          bad(at + ".norm_node must be a node name or null");
        if (value.is_string())
          r.norm = value.get<std::string>();
      } else {
        bad(at + ": unknown key \"" + key + "\" (prev_nodes, next_nodes, norm_node)");
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

/// hadamard_rotate_matrix on a 2-D float32 initializer value.
void rotate_matrix(tensor& w, int axis, std::span<const double> signs) {
  hadamard_rotate_matrix(w.data<float>(), static_cast<std::size_t>(w.shape()[0]),
                         static_cast<std::size_t>(w.shape()[1]), axis, signs);
}

}  // namespace

std::string rotate_r1(model& m, const quarot_options& o) {
  if (o.config_path.empty()) {
    bad("r_config_path is required (the file naming the R1 pairs: prev_nodes, next_nodes, "
        "norm_node), as in Quark");
  }
  const std::vector<r1_pair> pairs = read_config(o.config_path);
  const std::size_t n = o.dim;
  if (hadamard_matrix::paley_order(n) == 0) {
    throw not_implemented("quark.config.not_implemented",
                          "algo_config quarot.r_matrix_dim " + std::to_string(n) +
                              ": no Hadamard matrix of that order here (m 2^k with m = 1, "
                              "q + 1 for a prime q = 3 mod 4 or 2 (q + 1) for a prime q = 1 "
                              "mod 4; Quark's own tables cover a few more)");
  }
  const std::vector<double> signs = hadamard_signs(n, o.random, 1705472343u);
  ::onnx::GraphProto& g = *proto(m).mutable_graph();
  const graph_index ix(g);
  std::map<std::string, int> by_name;
  for (int i = 0; i < g.node_size(); ++i)
    by_name[g.node(i).name()] = i;
  std::set<std::string> seen;
  auto node = [&](const std::string& name, const std::string& role) -> const NodeProto& {
    auto it = by_name.find(name);
    if (name.empty() || it == by_name.end())
      bad(role + " \"" + name + "\" is not a node of the main graph");
    if (!seen.insert(name).second)
      bad(role + " \"" + name + "\" is named twice (it would be rotated twice)");
    return g.node(it->second);
  };
  // A float32 initializer read only by `n`.
  auto weight = [&](const NodeProto& nd, int input, const std::string& what) {
    if (nd.input_size() <= input || nd.input(input).empty() || !m.has_initializer(nd.input(input)))
      bad("node \"" + nd.name() + "\": its " + what + " is not a constant initializer");
    const std::string& name = nd.input(input);
    const tensor t = m.initializer(name);
    if (t.type() != dtype_id::float32)
      bad("node \"" + nd.name() + "\": its " + what + " '" + name + "' is not float32");
    if (ix.uses(name) != 1)
      bad("node \"" + nd.name() + "\": its " + what + " '" + name +
          "' is shared with another node");
    return t;
  };
  auto check_dim = [&](const NodeProto& nd, std::int64_t d) {
    if (static_cast<std::size_t>(d) != n) {
      bad("node \"" + nd.name() + "\": the rotated dimension is " + std::to_string(d) +
          ", r_matrix_dim is " + std::to_string(n));
    }
  };
  std::size_t prev_count = 0, next_count = 0, norms = 0;
  for (const r1_pair& p : pairs) {
    std::vector<const NodeProto*> next;
    for (const auto& name : p.next) {
      const NodeProto& nd = node(name, "next node");
      if (nd.op_type() != "MatMul" && nd.op_type() != "Gemm")
        bad("next node \"" + name + "\" is a " + nd.op_type() + " (MatMul or Gemm expected)");
      next.push_back(&nd);
    }
    // The next node's weight as B [n, out] (axis 0 along n) or, for Gemm with transB, [out, n].
    auto next_axis = [](const NodeProto& nd) {
      return nd.op_type() == "Gemm" && attr_i(nd, "transB", 0) != 0 ? 1 : 0;
    };
    // A next node's 2-D weight, its rotated axis checked against r_matrix_dim.
    auto next_weight = [&](const NodeProto& nd) {
      tensor w = weight(nd, 1, "weight");
      if (w.rank() != 2)
        bad("next node \"" + nd.name() + "\": its weight is not 2-D");
      check_dim(nd, w.shape()[static_cast<std::size_t>(next_axis(nd))]);
      return w;
    };
    // Step 1: the norm's scale into the next nodes' weights.
    if (!p.norm.empty()) {
      const NodeProto& nn = node(p.norm, "norm node");
      int scale_input = -1;
      if (nn.op_type() == "Mul" && nn.input_size() == 2) {
        scale_input =
            m.has_initializer(nn.input(1)) ? 1 : (m.has_initializer(nn.input(0)) ? 0 : -1);
      } else if ((nn.op_type() == "RMSNormalization" ||
                  nn.op_type() == "SimplifiedLayerNormalization") &&
                 nn.input_size() >= 2) {
        scale_input = 1;
      } else if (nn.op_type() == "LayerNormalization") {
        throw not_implemented("quark.config.not_implemented",
                              "algo_config quarot: norm node \"" + p.norm +
                                  "\" is a LayerNormalization: its mean subtraction does not "
                                  "commute with the rotation (an RMS norm does)");
      }
      if (scale_input < 0)
        bad("norm node \"" + p.norm + "\" is a " + nn.op_type() +
            " (a Mul by a constant scale, RMSNormalization or SimplifiedLayerNormalization "
            "expected)");
      tensor gamma = weight(nn, scale_input, "scale");
      if (gamma.size() != n)
        bad("norm node \"" + p.norm + "\": its scale holds " + std::to_string(gamma.size()) +
            " values, r_matrix_dim is " + std::to_string(n));
      const auto gv = gamma.data<float>();
      for (const NodeProto* nd : next) {
        tensor w = next_weight(*nd);
        const int ax = next_axis(*nd);
        auto d = w.data<float>();
        const auto cols = static_cast<std::size_t>(w.shape()[1]);
        for (std::size_t i = 0; i < w.size(); ++i) {
          const std::size_t k = ax == 0 ? i / cols : i % cols;
          d[i] = static_cast<float>(static_cast<double>(d[i]) * static_cast<double>(gv[k]));
        }
        m.set_initializer(nd->input(1), w);
      }
      std::fill(gamma.data<float>().begin(), gamma.data<float>().end(), 1.0f);
      m.set_initializer(nn.input(scale_input), gamma);
      ++norms;
    }
    // Step 2: the writers, output rotated.
    for (const auto& name : p.prev) {
      const NodeProto& nd = node(name, "prev node");
      if (nd.op_type() == "Gather") {
        tensor e = weight(nd, 0, "embedding table");
        if (e.rank() != 2 || attr_i(nd, "axis", 0) != 0)
          bad("prev node \"" + name + "\": a Gather of rows of a 2-D table is expected");
        check_dim(nd, e.shape()[1]);
        rotate_matrix(e, 1, signs);
        m.set_initializer(nd.input(0), e);
      } else if (nd.op_type() == "MatMul" || nd.op_type() == "Gemm") {
        tensor w = weight(nd, 1, "weight");
        if (w.rank() != 2)
          bad("prev node \"" + name + "\": its weight is not 2-D");
        const int ax = nd.op_type() == "Gemm" && attr_i(nd, "transB", 0) != 0 ? 0 : 1;
        check_dim(nd, w.shape()[static_cast<std::size_t>(ax)]);
        rotate_matrix(w, ax, signs);
        m.set_initializer(nd.input(1), w);
        if (nd.op_type() == "Gemm" && nd.input_size() >= 3 && !nd.input(2).empty()) {
          tensor b = weight(nd, 2, "bias");
          if (b.size() != n)
            bad("prev node \"" + name + "\": its bias is not a vector of r_matrix_dim values");
          b.reshape({1, static_cast<std::int64_t>(n)});
          rotate_matrix(b, 1, signs);
          b.reshape({static_cast<std::int64_t>(n)});
          m.set_initializer(nd.input(2), b);
        }
      } else {
        bad("prev node \"" + name + "\" is a " + nd.op_type() +
            " (Gather, MatMul or Gemm expected)");
      }
      ++prev_count;
    }
    // Step 3: the readers, input rotated back.
    for (const NodeProto* nd : next) {
      tensor w = next_weight(*nd);
      rotate_matrix(w, next_axis(*nd), signs);
      m.set_initializer(nd->input(1), w);
      ++next_count;
    }
  }
  std::ostringstream note;
  note << "quarot: R1 (" << n << " x " << n << (o.random ? " random" : "") << " Hadamard) over "
       << pairs.size() << " pair" << (pairs.size() == 1 ? "" : "s") << ": " << prev_count
       << " writers rotated, " << next_count << " readers rotated back, " << norms << " norm scale"
       << (norms == 1 ? "" : "s") << " folded";
  return note.str();
}

}  // namespace quark::onnx::qz
