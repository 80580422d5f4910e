// SPDX-License-Identifier: MIT
// Graph rewrites before calibration and after Q/DQ insertion (see graph_passes.hpp).
#include "quantizer/graph_passes.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <quark/dtype/convert.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/onnx/runtime.hpp>

#include "io/proto_access.hpp"
#include "quantizer/block_nodes.hpp"
#include "quantizer/graph_util.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

void set_attr_f(NodeProto& n, const char* name, float v) {
  for (auto& a : *n.mutable_attribute()) {
    if (a.name() == name) {
      a.set_f(v);
      return;
    }
  }
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

/// A fused com.amd.quark quantize-dequantize node (BFP or MX block formats).
bool is_fused_qdq(const NodeProto& n) {
  return n.domain() == block_domain &&
         (n.op_type() == "BFPQuantizeDequantize" || n.op_type() == "MXQuantizeDequantize");
}

/// A fresh initializer name derived from `base`.
std::string fresh_name(const model& m, const std::string& base) {
  std::string n = base + "_folded";
  for (int k = 1; m.has_initializer(n); ++k)
    n = base + "_folded" + std::to_string(k);
  return n;
}

/// The affine map y[c] = a[c] * x[c] + b[c] applied per output channel of a weighted node.
/// Output channels of the Conv / ConvTranspose / Gemm `n` (from its weight), 0 if unknown.
std::size_t out_channels(const model& m, const NodeProto& n) {
  if (n.input_size() < 2 || !float_init(m, n.input(1)))
    return 0;
  const tensor w = m.initializer(n.input(1));
  if (w.size() == 0)
    return 0;  // an empty weight: nothing to fold into (and no channel to divide by)
  if (n.op_type() == "Conv")
    return w.rank() >= 3 ? static_cast<std::size_t>(w.shape()[0]) : 0;
  if (n.op_type() == "ConvTranspose") {
    // Weight (C_in, C_out / group, k...): a group that does not divide C_in is a malformed
    // node (the runtime names it when it runs), not one to fold into.
    const std::int64_t group = attr_i(n, "group", 1);
    if (w.rank() < 3 || group < 1 || w.shape()[0] % group != 0)
      return 0;
    return static_cast<std::size_t>(w.shape()[1] * group);
  }
  if (n.op_type() == "Gemm" && w.rank() == 2)
    return static_cast<std::size_t>(w.shape()[attr_i(n, "transB", 0) != 0 ? 0 : 1]);
  return 0;
}

/// Whether `n` is a node whose output channels an affine map can be folded into.
bool foldable_producer(const model& m, const NodeProto& n, bool gemm_ok) {
  const std::string& op = n.op_type();
  if (op != "Conv" && op != "ConvTranspose" && !(gemm_ok && op == "Gemm"))
    return false;
  if (n.output_size() != 1 || out_channels(m, n) == 0)
    return false;
  if (n.input_size() >= 3 && !n.input(2).empty() && !float_init(m, n.input(2)))
    return false;
  // The bias must be per output channel (or absent) to take the shift; a Conv bias of another
  // size is malformed (the runtime names it when it runs) and is not read here.
  if (n.input_size() >= 3 && !n.input(2).empty() &&
      m.initializer(n.input(2)).size() != out_channels(m, n))
    return false;
  return true;
}

/// Folds `f` into the weight and bias of `n` (which foldable_producer accepted). Shared
/// initializers are copied, never changed in place.
void fold_into(model& m, NodeProto& n, const channel_affine& f, const graph_index& ix) {
  const std::size_t cout = out_channels(m, n);
  const std::string& op = n.op_type();
  // Weight.
  tensor w = m.initializer(n.input(1));
  auto wv = w.data<float>();
  if (op == "Conv") {
    const std::size_t per = wv.size() / cout;
    for (std::size_t c = 0; c < cout; ++c) {
      for (std::size_t k = 0; k < per; ++k)
        wv[c * per + k] = static_cast<float>(f.a[c] * static_cast<double>(wv[c * per + k]));
    }
  } else if (op == "ConvTranspose") {
    const auto cin = static_cast<std::size_t>(w.shape()[0]);
    const auto cpg = static_cast<std::size_t>(w.shape()[1]);  // output channels per group
    const std::size_t groups = cout / cpg;
    const std::size_t inner = wv.size() / (cin * cpg);
    for (std::size_t i = 0; i < cin; ++i) {
      const std::size_t grp = i / (cin / groups);
      for (std::size_t j = 0; j < cpg; ++j) {
        const double s = f.a[grp * cpg + j];
        float* p = wv.data() + (i * cpg + j) * inner;
        for (std::size_t k = 0; k < inner; ++k)
          p[k] = static_cast<float>(s * static_cast<double>(p[k]));
      }
    }
  } else {  // Gemm: B is [K, N] or [N, K] (transB); alpha stays, so scale B by a.
    const bool trans_b = attr_i(n, "transB", 0) != 0;
    const auto rows = static_cast<std::size_t>(w.shape()[0]);
    const auto cols = static_cast<std::size_t>(w.shape()[1]);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c)
        wv[r * cols + c] =
            static_cast<float>(f.a[trans_b ? r : c] * static_cast<double>(wv[r * cols + c]));
    }
  }
  std::string wname = n.input(1);
  if (ix.uses(wname) > 1)
    wname = fresh_name(m, wname);
  m.set_initializer(wname, w);
  n.set_input(1, wname);
  // Bias: b' = a * (beta * b) + shift (Gemm's beta is folded in and reset to 1).
  const bool has_bias = n.input_size() >= 3 && !n.input(2).empty();
  std::vector<float> old(cout, 0.0f);
  if (has_bias) {
    const tensor b = m.initializer(n.input(2));
    const auto bv = b.data<float>();
    for (std::size_t c = 0; c < cout; ++c)
      old[c] = bv[c];
  }
  const double beta = op == "Gemm" ? static_cast<double>(attr_f(n, "beta", 1.0f)) : 1.0;
  std::vector<float> nb(cout);
  for (std::size_t c = 0; c < cout; ++c)
    nb[c] = static_cast<float>(f.a[c] * beta * static_cast<double>(old[c]) + f.b[c]);
  std::string bname = has_bias ? n.input(2) : n.output(0) + "_bias";
  if (!has_bias || ix.uses(bname) > 1)
    bname = fresh_name(m, bname);
  m.set_initializer(bname, tensor::from_floats({static_cast<std::int64_t>(cout)}, nb));
  while (n.input_size() < 3)
    n.add_input("");
  n.set_input(2, bname);
  if (op == "Gemm")
    set_attr_f(n, "beta", 1.0f);
}

/// The per-output-channel values of the constant `c` when it broadcasts against the output of
/// rank `rank` only along the channel axis (1) with `channels` channels; nullopt otherwise.
std::optional<std::vector<double>> per_channel_values(const tensor& c, std::size_t rank,
                                                      std::size_t channels) {
  if (c.type() != dtype_id::float32 || c.rank() > rank)
    return std::nullopt;
  const auto v = c.data<float>();
  if (v.size() == 1)
    return std::vector<double>(channels, static_cast<double>(v[0]));
  for (std::size_t j = 0; j < c.rank(); ++j) {
    const std::size_t axis = rank - c.rank() + j;
    const auto d = static_cast<std::size_t>(c.shape()[j]);
    if (d != 1 && !(axis == 1 && d == channels))
      return std::nullopt;
  }
  if (v.size() != channels)
    return std::nullopt;
  std::vector<double> out(channels);
  for (std::size_t k = 0; k < channels; ++k)
    out[k] = static_cast<double>(v[k]);
  return out;
}

/// Rank of the output of a Conv / ConvTranspose (its weight's rank) or Gemm (2).
std::size_t out_rank(const model& m, const NodeProto& n) {
  return n.op_type() == "Gemm" ? 2 : m.initializer(n.input(1)).rank();
}

/// One sweep of the pre-calibration folds; returns whether anything changed.
bool fold_sweep(model& m, const graph_pass_options& o, std::map<std::string, int>& counts,
                std::set<std::string>& retired) {
  GraphProto& g = *proto(m).mutable_graph();
  const graph_index ix(g);
  std::vector<bool> dead(static_cast<std::size_t>(g.node_size()));
  bool changed = false;
  auto touched = [&](int i) { return dead[static_cast<std::size_t>(i)]; };
  for (int i = 0; i < g.node_size(); ++i) {
    if (touched(i))
      continue;
    NodeProto& n = *g.mutable_node(i);
    // Identity: consumers read its input instead (kept when it is a graph output).
    if (o.remove_identity && n.op_type() == "Identity" && n.input_size() == 1 &&
        !ix.outputs.contains(n.output(0)) && !ix.outputs.contains(n.input(0)) &&
        !ix.implicit.contains(n.output(0))) {
      const std::string from = n.output(0), to = n.input(0);
      for (auto& k : *g.mutable_node()) {
        for (int s = 0; s < k.input_size(); ++s) {
          if (k.input(s) == from)
            k.set_input(s, to);
        }
      }
      dead[static_cast<std::size_t>(i)] = true;
      ++counts["Identity removed"];
      changed = true;
      break;  // the index is stale now
    }
    const bool is_bn = n.op_type() == "BatchNormalization";
    const bool is_mul = n.op_type() == "Mul", is_add = n.op_type() == "Add";
    if (!(is_bn && o.fold_batch_norm) && !((is_mul || is_add) && o.fuse_conv_affine))
      continue;
    if (n.output_size() < 1 || n.input_size() < (is_bn ? 5 : 2))
      continue;
    if (is_bn) {
      bool extra_outputs = attr_i(n, "training_mode", 0) != 0;
      for (int k = 1; k < n.output_size(); ++k)
        extra_outputs = extra_outputs || ix.uses(n.output(k)) > 0;
      // Per-channel statistics only (not BatchNormalization-7's per-activation spatial 0).
      bool params = attr_i(n, "spatial", 1) == 1;
      for (int k = 1; k < 5; ++k)
        params = params && float_init(m, n.input(k)) && m.initializer(n.input(k)).rank() == 1;
      if (extra_outputs || !params)
        continue;
    }
    // The activation operand and (Mul / Add) the constant one.
    int act = 0;
    std::string cname;
    if (!is_bn) {
      if (float_init(m, n.input(1)) && !m.has_initializer(n.input(0))) {
        act = 0;
        cname = n.input(1);
      } else if (float_init(m, n.input(0)) && !m.has_initializer(n.input(1))) {
        act = 1;
        cname = n.input(0);
      } else {
        continue;
      }
    }
    const std::string x = n.input(act);
    auto p = ix.producer.find(x);
    if (p == ix.producer.end() || touched(p->second) || ix.only_consumer(x) != i)
      continue;
    NodeProto& prod = *g.mutable_node(p->second);
    std::vector<int> producers;  // nodes that take the fold
    std::vector<std::size_t> offsets;
    std::size_t channels = 0;
    std::size_t rank = 0;
    if (foldable_producer(m, prod, is_bn)) {
      producers.push_back(p->second);
      offsets.push_back(0);
      channels = out_channels(m, prod);
      rank = out_rank(m, prod);
    } else if (is_bn && prod.op_type() == "Concat" && attr_i(prod, "axis", 0) == 1) {
      // BatchNormalization after a channel Concat of Conv / ConvTranspose / Gemm outputs.
      std::set<std::string> seen;
      bool ok = prod.input_size() > 0;
      for (const auto& in : prod.input()) {
        auto q = ix.producer.find(in);
        if (!ok || q == ix.producer.end() || touched(q->second) || !seen.insert(in).second ||
            ix.only_consumer(in) != p->second || !foldable_producer(m, g.node(q->second), true)) {
          ok = false;
          break;
        }
        const std::size_t r = out_rank(m, g.node(q->second));
        if (rank != 0 && r != rank) {
          ok = false;
          break;
        }
        rank = r;
        producers.push_back(q->second);
        offsets.push_back(channels);
        channels += out_channels(m, g.node(q->second));
      }
      if (!ok)
        continue;
    } else {
      continue;
    }
    channel_affine f;
    if (is_bn) {
      const tensor sc = m.initializer(n.input(1)), bb = m.initializer(n.input(2)),
                   mean = m.initializer(n.input(3)), var = m.initializer(n.input(4));
      if (sc.size() != channels || bb.size() != channels || mean.size() != channels ||
          var.size() != channels)
        continue;
      f = batchnorm_affine(sc, bb, mean, var, static_cast<double>(attr_f(n, "epsilon", 1e-5f)));
    } else {
      const auto v = per_channel_values(m.initializer(cname), rank, channels);
      if (!v)
        continue;
      if (is_mul) {
        f.a = *v;
        f.b.assign(channels, 0.0);
      } else {
        f.a.assign(channels, 1.0);
        f.b = *v;
      }
    }
    for (std::size_t k = 0; k < producers.size(); ++k) {
      NodeProto& q = *g.mutable_node(producers[k]);
      const std::size_t c = out_channels(m, q);
      channel_affine part;
      part.a.assign(f.a.begin() + static_cast<std::ptrdiff_t>(offsets[k]),
                    f.a.begin() + static_cast<std::ptrdiff_t>(offsets[k] + c));
      part.b.assign(f.b.begin() + static_cast<std::ptrdiff_t>(offsets[k]),
                    f.b.begin() + static_cast<std::ptrdiff_t>(offsets[k] + c));
      retired.insert(q.input(1));
      if (q.input_size() >= 3)
        retired.insert(q.input(2));
      fold_into(m, q, part, ix);
    }
    // The folded node's output now comes straight from its producer.
    prod.set_output(0, n.output(0));
    if (is_bn) {
      for (int k = 1; k < n.input_size(); ++k)
        retired.insert(n.input(k));
    } else {
      retired.insert(cname);
    }
    dead[static_cast<std::size_t>(i)] = true;
    ++counts[is_bn ? (prod.op_type() == "Concat" ? "BatchNormalization folded through Concat"
                                                 : "BatchNormalization folded")
                   : (is_mul ? "Mul folded into Conv" : "Add folded into Conv")];
    changed = true;
    break;  // weights were rewritten: re-index before the next fold
  }
  if (changed)
    compact_nodes(g, dead);
  return changed;
}

/// Whether a node may be evaluated at quantization time when its inputs are constant.
bool foldable_op(const NodeProto& n) {
  static const std::set<std::string> never = {"QuantizeLinear",
                                              "DequantizeLinear",
                                              "If",
                                              "Loop",
                                              "Scan",
                                              "RandomNormal",
                                              "RandomUniform",
                                              "RandomNormalLike",
                                              "RandomUniformLike",
                                              "Multinomial",
                                              "Bernoulli",
                                              "Dropout"};
  return (n.domain().empty() || n.domain() == "ai.onnx") && n.input_size() > 0 &&
         !never.contains(n.op_type());
}

/// Constant folding: a node whose inputs are all initializers is run once in quark-cpp's runtime
/// and replaced by initializers holding its outputs. Nodes the runtime cannot run stay.
int fold_constants(model& m, std::set<std::string>& retired) {
  ::onnx::ModelProto& mp = proto(m);
  GraphProto& g = *mp.mutable_graph();
  std::set<std::string> overridable;  // IR >= 4: an initializer listed as input is a default
  if (mp.ir_version() >= 4) {
    for (const auto& in : g.input())
      overridable.insert(in.name());
  }
  std::set<std::string> outputs;
  for (const auto& o : g.output())
    outputs.insert(o.name());
  std::vector<bool> dead(static_cast<std::size_t>(g.node_size()));
  int folded = 0;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!foldable_op(n))
      continue;
    bool constant = true;
    for (const auto& x : n.input())
      constant = constant && (x.empty() || (m.has_initializer(x) && !overridable.contains(x)));
    for (const auto& o : n.output())
      constant = constant && !outputs.contains(o) && !o.empty();
    if (!constant)
      continue;
    ::onnx::ModelProto sub;
    sub.set_ir_version(mp.ir_version());
    *sub.mutable_opset_import() = mp.opset_import();
    GraphProto& sg = *sub.mutable_graph();
    sg.set_name("constant_fold");
    *sg.add_node() = n;
    for (const auto& x : n.input()) {
      for (const auto& t : g.initializer()) {
        if (!x.empty() && t.name() == x) {
          *sg.add_initializer() = t;
          break;
        }
      }
    }
    for (const auto& o : n.output())
      sg.add_output()->set_name(o);
    std::map<std::string, tensor> values;
    try {
      const std::string bytes = sub.SerializeAsString();
      const auto rt = runtime::from_bytes(std::as_bytes(std::span(bytes.data(), bytes.size())),
                                          m.base_dir(), {.threads = 1, .tune_malloc = false});
      values = rt.run({});
    } catch (const std::exception&) {
      continue;  // an op or type the runtime does not evaluate: the node stays
    }
    bool complete = true;
    for (const auto& o : n.output())
      complete = complete && values.contains(o);
    if (!complete)
      continue;
    for (const auto& o : n.output())
      m.set_initializer(o, values.at(o));
    for (const auto& x : n.input())
      retired.insert(x);
    dead[static_cast<std::size_t>(i)] = true;
    ++folded;
  }
  if (folded > 0)
    compact_nodes(g, dead);
  return folded;
}

}  // namespace

int fold_constant_nodes(model& m, std::set<std::string>& retired) {
  return fold_constants(m, retired);
}

std::vector<std::string> optimize_graph(model& m, const graph_pass_options& o) {
  std::map<std::string, int> counts;
  std::set<std::string> retired;
  if (o.fold_constants) {
    if (const int k = fold_constants(m, retired); k > 0)
      counts["constant nodes folded"] = k;
  }
  while (fold_sweep(m, o, counts, retired)) {
  }
  drop_unused_initializers(m, retired);
  std::vector<std::string> notes;
  for (const auto& [what, k] : counts)
    notes.push_back(what + ": " + std::to_string(k));
  return notes;
}

std::set<std::string> remove_qdq_pairs(model& m, const graph_pass_options& o) {
  std::set<std::string> gone;
  if (o.remove_qdq_between.empty())
    return gone;
  GraphProto& g = *proto(m).mutable_graph();
  const graph_index ix(g);
  std::vector<bool> dead(static_cast<std::size_t>(g.node_size()));
  std::set<std::string> retired;
  std::set<std::string> touched_values;
  // RemoveFusedQDQ: a fused BFP/MX node between the same op types goes too; its consumers
  // read the producer's output (it has no scale or zero point to retire).
  auto fused_removable = [&](const NodeProto& f) {
    if (!o.remove_fused || !is_fused_qdq(f) || f.input_size() != 1 || f.output_size() != 1)
      return false;
    auto xp = ix.producer.find(f.input(0));
    auto readers = ix.consumers.find(f.output(0));
    if (xp == ix.producer.end() || readers == ix.consumers.end() ||
        ix.outputs.contains(f.output(0)))
      return false;
    const std::string& prod_op = g.node(xp->second).op_type();
    return std::all_of(readers->second.begin(), readers->second.end(), [&](int c) {
      return o.remove_qdq_between.contains({prod_op, g.node(c).op_type()});
    });
  };
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& dq = g.node(i);
    if (fused_removable(dq)) {
      for (const int c : ix.consumers.at(dq.output(0))) {
        NodeProto& r = *g.mutable_node(c);
        for (int s = 0; s < r.input_size(); ++s) {
          if (r.input(s) == dq.output(0))
            r.set_input(s, dq.input(0));
        }
      }
      dead[static_cast<std::size_t>(i)] = true;
      touched_values.insert(dq.input(0));
      continue;
    }
    if (dq.op_type() != "DequantizeLinear" || dq.output_size() != 1)
      continue;
    auto qp = ix.producer.find(dq.input(0));
    if (qp == ix.producer.end() || g.node(qp->second).op_type() != "QuantizeLinear")
      continue;
    const NodeProto& q = g.node(qp->second);
    const std::string x = q.input(0);
    auto xp = ix.producer.find(x);
    if (xp == ix.producer.end() || ix.outputs.contains(dq.output(0)))
      continue;
    const std::string& prod_op = g.node(xp->second).op_type();
    auto readers = ix.consumers.find(dq.output(0));
    if (readers == ix.consumers.end())
      continue;
    bool all = true;
    for (const int c : readers->second)
      all = all && o.remove_qdq_between.contains({prod_op, g.node(c).op_type()});
    if (!all)
      continue;
    for (const int c : readers->second) {
      NodeProto& r = *g.mutable_node(c);
      for (int s = 0; s < r.input_size(); ++s) {
        if (r.input(s) == dq.output(0))
          r.set_input(s, x);
      }
    }
    dead[static_cast<std::size_t>(i)] = true;
    for (int k = 1; k < dq.input_size(); ++k)
      retired.insert(dq.input(k));
    // The Quantize goes too once no other Dequantize reads it.
    bool q_used = false;
    for (const int c : ix.consumers.at(dq.input(0)))
      q_used = q_used || !dead[static_cast<std::size_t>(c)];
    if (!q_used && !ix.outputs.contains(dq.input(0))) {
      dead[static_cast<std::size_t>(qp->second)] = true;
      for (int k = 1; k < q.input_size(); ++k)
        retired.insert(q.input(k));
    }
    touched_values.insert(x);
  }
  compact_nodes(g, dead);
  drop_unused_initializers(m, retired);
  // Values with no QuantizeLinear reading them any more are no longer quantized.
  const graph_index after(g);
  for (const auto& x : touched_values) {
    bool quantized = false;
    if (auto it = after.consumers.find(x); it != after.consumers.end()) {
      for (const int c : it->second)
        quantized = quantized || g.node(c).op_type() == "QuantizeLinear" || is_fused_qdq(g.node(c));
    }
    if (!quantized)
      gone.insert(x);
  }
  return gone;
}

bf16_cast_removal remove_bf16_casts(model& m) {
  bf16_cast_removal r;
  GraphProto& g = *proto(m).mutable_graph();
  const graph_index ix(g);
  auto cast_to = [](const NodeProto& n, std::int64_t to) {
    return n.op_type() == "Cast" && n.domain().empty() && n.attribute_size() == 1 &&
           n.attribute(0).name() == "to" && n.attribute(0).i() == to && n.input_size() == 1 &&
           n.output_size() == 1;
  };
  std::vector<bool> dead(static_cast<std::size_t>(g.node_size()));
  std::map<std::string, std::string> rewire;  // a second Cast's output -> what its readers read
  std::set<std::string> old_weights;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& c1 = g.node(i);
    if (!cast_to(c1, ::onnx::TensorProto::BFLOAT16))
      continue;
    const auto j = ix.only_consumer(c1.output(0));
    if (!j || !cast_to(g.node(*j), ::onnx::TensorProto::FLOAT))
      continue;
    const NodeProto& c2 = g.node(*j);
    const std::string& x = c1.input(0);
    const std::string& y = c2.output(0);
    if (ix.implicit.contains(x) || ix.implicit.contains(y))
      continue;
    // An asymmetric pair (Add(., zp) -> Cast -> Cast -> Sub(., zp), emit_cast_pair) stays: Quark
    // keeps its Q/DQ nodes with a non-zero zero point as quantize-dequantize, so removing the
    // casts would leave x + zp - zp.
    if (const auto pa = ix.producer.find(x); pa != ix.producer.end()) {
      const NodeProto& add = g.node(pa->second);
      const auto sub = ix.only_consumer(y);
      if (add.op_type() == "Add" && add.input_size() == 2 && sub &&
          g.node(*sub).op_type() == "Sub" && g.node(*sub).input_size() == 2 &&
          g.node(*sub).input(1) == add.input(1))
        continue;
    }
    const bool read = ix.consumers.contains(y);
    auto p = ix.producer.find(x);
    if (p != ix.producer.end()) {
      const NodeProto& first = g.node(p->second);
      if (!ix.only_consumer(x) || first.output_size() != 1)
        continue;
      if (ix.outputs.contains(y)) {
        g.mutable_node(p->second)->set_output(0, y);  // the node writes the graph output
        ++r.outputs;
      } else if (read) {
        rewire[y] = x;
        ++r.activations;
      } else {
        continue;
      }
    } else if (m.has_initializer(x) && read && !ix.outputs.contains(y)) {
      const tensor w = m.initializer(x);
      if (w.type() != dtype_id::float32)
        continue;
      std::vector<float> v(w.data<float>().begin(), w.data<float>().end());
      for (float& e : v)
        e = quark::to_float(quark::convert<quark::bfloat16>(e));
      const std::string name = x + "_bf16";
      m.set_initializer(name, tensor::from_floats(w.shape(), v));
      rewire[y] = name;
      old_weights.insert(x);
      ++r.weights;
    } else {
      continue;
    }
    dead[static_cast<std::size_t>(i)] = true;
    dead[static_cast<std::size_t>(*j)] = true;
  }
  for (auto& n : *g.mutable_node()) {
    for (int k = 0; k < n.input_size(); ++k) {
      if (auto it = rewire.find(n.input(k)); it != rewire.end())
        n.set_input(k, it->second);
    }
  }
  compact_nodes(g, dead);
  drop_unused_initializers(m, old_weights);
  return r;
}

}  // namespace quark::onnx::qz
