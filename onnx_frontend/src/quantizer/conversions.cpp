// SPDX-License-Identifier: MIT
// Category-1 graph conversions before calibration and the FoldRelu fold after Q/DQ insertion
// (see conversions.hpp).
#include "quantizer/conversions.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include <onnx/shape_inference/implementation.h>

#include "io/infer_shapes.hpp"
#include "io/proto_access.hpp"
#include "quantizer/graph_passes.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

using ::onnx::GraphProto;
using ::onnx::NodeProto;

/// Clip bounds: attributes before opset 11, optional initializer inputs from 11 on. A bound
/// that is given but not constant makes the whole result nullopt.
struct clip_bounds {
  std::optional<float> lo, hi;
};
std::optional<clip_bounds> clip_bounds_of(const model& m, const NodeProto& n) {
  clip_bounds b;
  if (const auto* a = find_attr(n, "min"))
    b.lo = a->f();
  if (const auto* a = find_attr(n, "max"))
    b.hi = a->f();
  for (int k = 1; k <= 2 && k < n.input_size(); ++k) {
    if (n.input(k).empty())
      continue;
    const auto v = float_scalar(m, n.input(k));
    if (!v)
      return std::nullopt;
    (k == 1 ? b.lo : b.hi) = *v;
  }
  return b;
}

/// Removes the initializers of `candidates` that no node (nor any If / Loop / Scan body) reads
/// and no graph output names.
void drop_unused(model& m, const std::set<std::string>& candidates) {
  drop_unused_initializers(m, candidates);  // (one pass; it skips names that are no initializer)
}

struct converter {
  model& m;
  const graph_pass_options& o;
  std::map<std::string, std::vector<std::int64_t>> shapes;
  name_pool names;
  std::int64_t opset;
  std::map<std::string, int> counts;
  std::set<std::string> retired;  ///< initializers that may have become unused

  converter(model& mm, const graph_pass_options& oo)
      : m(mm),
        o(oo),
        shapes(inferred_shapes(mm)),
        names(proto(mm).graph()),
        opset(mm.opset("").value_or(1)) {}

  const std::vector<std::int64_t>* shape_of(const std::string& name) const {
    auto it = shapes.find(name);
    return it == shapes.end() ? nullptr : &it->second;
  }
  std::string base(const NodeProto& n) const { return n.name().empty() ? n.output(0) : n.name(); }

  /// BatchNormalization -> depthwise Conv (false: left as it is).
  bool bn_to_conv(const NodeProto& n, std::vector<NodeProto>& out) {
    if (n.input_size() != 5 || n.output_size() < 1 || attr_i(n, "training_mode", 0) != 0)
      return false;
    for (int k = 1; k < n.output_size(); ++k) {
      if (!n.output(k).empty())
        return false;
    }
    const auto* s = shape_of(n.input(0));
    if (s == nullptr || (s->size() != 3 && s->size() != 4))
      return false;
    std::vector<tensor> p;
    for (int k = 1; k < 5; ++k) {
      if (!m.has_initializer(n.input(k)) || m.initializer(n.input(k)).type() != dtype_id::float32)
        return false;
      p.push_back(m.initializer(n.input(k)));
    }
    // Per-channel statistics only: BatchNormalization-7's spatial 0 (per-activation, its
    // parameters shaped like one sample) has no depthwise Conv form.
    if (attr_i(n, "spatial", 1) != 1)
      return false;
    const std::size_t c = p[0].size();
    for (const auto& t : p) {
      if (t.size() != c || c == 0 || t.rank() != 1)
        return false;
    }
    if ((*s)[1] > 0 && static_cast<std::size_t>((*s)[1]) != c)
      return false;
    // ONNX's default epsilon (Quark's code falls back to 1e-10 when the attribute is absent;
    // the ONNX operator's own default is what the float model computes).
    const auto* ea = find_attr(n, "epsilon");
    const double eps = ea != nullptr ? static_cast<double>(ea->f()) : 1e-5;
    const channel_affine f = batchnorm_affine(p[0], p[1], p[2], p[3], eps);
    std::vector<float> w(c), b(c);
    for (std::size_t i = 0; i < c; ++i) {
      w[i] = static_cast<float>(f.a[i]);
      b[i] = static_cast<float>(f.b[i]);
    }
    const auto ci = static_cast<std::int64_t>(c);
    const bool two_d = s->size() == 4;
    const std::string wn = names.fresh(n.output(0) + "_bn2conv_w");
    const std::string bn = names.fresh(n.output(0) + "_bn2conv_b");
    m.set_initializer(wn, tensor::from_floats(two_d ? shape_t{ci, 1, 1, 1} : shape_t{ci, 1, 1}, w));
    m.set_initializer(bn, tensor::from_floats({ci}, b));
    NodeProto conv;
    conv.set_name(n.name());
    conv.set_op_type("Conv");
    conv.add_input(n.input(0));
    conv.add_input(wn);
    conv.add_input(bn);
    conv.add_output(n.output(0));
    add_int_attribute(conv, "group", ci);
    add_ints_attribute(conv, "kernel_shape",
                       two_d ? std::vector<std::int64_t>{1, 1} : std::vector<std::int64_t>{1});
    for (int k = 1; k < 5; ++k)
      retired.insert(n.input(k));
    out.push_back(std::move(conv));
    ++counts["BatchNormalization converted to Conv"];
    return true;
  }

  /// Clip with min 0 and no finite max -> Relu. A finite max is kept (not Quark's code, which
  /// drops it: on a hardswish x * Clip(x + 3, 0, 6) / 6 that makes the float model grow without
  /// bound, and calibration with it; docs/compatibility.md).
  bool clip_to_relu(const NodeProto& n, std::vector<NodeProto>& out) {
    const auto b = clip_bounds_of(m, n);
    if (!b || !b->lo || *b->lo != 0.0f || n.input_size() < 1 || n.output_size() != 1)
      return false;
    if (b->hi && *b->hi < std::numeric_limits<float>::max())
      return false;
    NodeProto r;
    r.set_name(n.name());
    r.set_op_type("Relu");
    r.add_input(n.input(0));
    r.add_output(n.output(0));
    for (int k = 1; k < n.input_size(); ++k)
      retired.insert(n.input(k));
    out.push_back(std::move(r));
    ++counts["Clip converted to Relu"];
    return true;
  }

  /// GlobalAveragePool over more than 512 elements -> AveragePool + GlobalAveragePool.
  /// `n` is appended to `out` either way (split or not).
  void split_pool(NodeProto n, std::vector<NodeProto>& out) {
    const auto* s = shape_of(n.input(0));
    auto factors = [](std::int64_t v) {
      for (auto f = static_cast<std::int64_t>(std::sqrt(static_cast<double>(v))); f > 1; --f) {
        if (v % f == 0)
          return std::pair<std::int64_t, std::int64_t>{f, v / f};
      }
      return std::pair<std::int64_t, std::int64_t>{1, v};
    };
    std::vector<std::int64_t> kernel;
    if (s != nullptr && s->size() >= 3 && s->size() <= 4) {
      std::int64_t before = 1, after = 1, all = 1;
      for (std::size_t d = 2; d < s->size(); ++d) {
        if ((*s)[d] <= 0) {
          all = 0;
          break;
        }
        const auto [f1, f2] = factors((*s)[d]);
        kernel.push_back(f1);
        before *= f1;
        after *= f2;
        all *= (*s)[d];
      }
      if (all <= 512 || before > 512 || after > 512 || before == 1)
        kernel.clear();
    }
    if (kernel.empty()) {
      out.push_back(std::move(n));
      return;
    }
    NodeProto pool;
    const std::string t = names.fresh(n.input(0) + "_Split");
    pool.set_name(names.fresh(base(n) + "_split_pool"));
    pool.set_op_type("AveragePool");
    pool.add_input(n.input(0));
    pool.add_output(t);
    add_ints_attribute(pool, "kernel_shape", kernel);
    add_ints_attribute(pool, "strides", kernel);
    n.set_input(0, t);
    out.push_back(std::move(pool));
    out.push_back(std::move(n));
    ++counts["GlobalAveragePool split (SplitLargeKernelPool)"];
  }

  /// ReduceMean over the spatial axes -> GlobalAveragePool (+ Squeeze).
  bool reduce_mean_to_gap(const NodeProto& n, std::vector<NodeProto>& out) {
    const auto* s = shape_of(n.input(0));
    if (s == nullptr || (s->size() != 3 && s->size() != 4) || n.output_size() != 1)
      return false;
    const auto given = reduce_axes(m, n);
    if (!given)
      return false;  // not constant, or every axis
    std::vector<std::int64_t> axes = *given;
    const auto rank = static_cast<std::int64_t>(s->size());
    for (auto& a : axes)
      a = a < 0 ? a + rank : a;
    std::sort(axes.begin(), axes.end());
    const std::vector<std::int64_t> spatial =
        rank == 4 ? std::vector<std::int64_t>{2, 3} : std::vector<std::int64_t>{2};
    if (axes != spatial)
      return false;
    NodeProto gap;
    gap.set_name(n.name());
    gap.set_op_type("GlobalAveragePool");
    gap.add_input(n.input(0));
    if (n.input_size() >= 2)
      retired.insert(n.input(1));
    ++counts["ReduceMean converted to GlobalAveragePool"];
    if (attr_i(n, "keepdims", 1) != 0) {
      gap.add_output(n.output(0));
      if (o.split_large_kernel_pool)
        split_pool(std::move(gap), out);
      else
        out.push_back(std::move(gap));
      return true;
    }
    const std::string t = names.fresh(n.output(0) + "_gap");
    gap.add_output(t);
    if (gap.name().empty())
      gap.set_name(names.fresh(t));
    NodeProto sq;
    sq.set_name(names.fresh(base(n) + "_squeeze"));
    sq.set_op_type("Squeeze");
    sq.add_input(t);
    if (opset >= 13) {
      const std::string an = names.fresh(n.output(0) + "_squeeze_axes");
      m.set_initializer(an, int64_tensor(spatial));
      sq.add_input(an);
    } else {
      add_ints_attribute(sq, "axes", spatial);
    }
    sq.add_output(n.output(0));
    if (o.split_large_kernel_pool)
      split_pool(std::move(gap), out);
    else
      out.push_back(std::move(gap));
    out.push_back(std::move(sq));
    return true;
  }

  /// Split -> one Slice per output.
  bool split_to_slice(const NodeProto& n, std::vector<NodeProto>& out) {
    if (n.input_size() < 1 || n.output_size() < 1)
      return false;
    const auto* s = shape_of(n.input(0));
    std::int64_t axis = attr_i(n, "axis", 0);
    if (axis < 0) {
      if (s == nullptr)
        return false;
      axis += static_cast<std::int64_t>(s->size());
    }
    const std::int64_t dim = s != nullptr && axis < static_cast<std::int64_t>(s->size())
                                 ? (*s)[static_cast<std::size_t>(axis)]
                                 : -1;
    const auto parts = static_cast<std::int64_t>(n.output_size());
    std::vector<std::int64_t> sizes;
    if (const auto* a = find_attr(n, "split")) {
      sizes.assign(a->ints().begin(), a->ints().end());
    } else if (n.input_size() >= 2 && !n.input(1).empty()) {
      const auto v = int_values(m, n.input(1));
      if (!v)
        return false;
      sizes = *v;
      retired.insert(n.input(1));
    } else {
      if (dim <= 0)
        return false;
      if (find_attr(n, "num_outputs") != nullptr) {
        const std::int64_t chunk = (dim + parts - 1) / parts;  // opset 18: the last one smaller
        for (std::int64_t k = 0; k < parts; ++k)
          sizes.push_back(std::max<std::int64_t>(0, std::min(chunk, dim - k * chunk)));
      } else {
        if (dim % parts != 0)
          return false;
        sizes.assign(static_cast<std::size_t>(parts), dim / parts);
      }
    }
    if (static_cast<std::int64_t>(sizes.size()) != parts)
      return false;
    const std::string axes_name = opset >= 10 ? names.fresh(base(n) + "_slice_axes") : "";
    if (opset >= 10)
      m.set_initializer(axes_name, int64_tensor({axis}));
    std::int64_t start = 0;
    for (int k = 0; k < n.output_size(); ++k) {
      const std::int64_t end = start + sizes[static_cast<std::size_t>(k)];
      if (!n.output(k).empty()) {
        NodeProto sl;
        sl.set_name(names.fresh(base(n) + "_slice_" + std::to_string(k)));
        sl.set_op_type("Slice");
        sl.add_input(n.input(0));
        if (opset >= 10) {
          const std::string sn = names.fresh(n.output(k) + "_slice_starts");
          const std::string en = names.fresh(n.output(k) + "_slice_ends");
          m.set_initializer(sn, int64_tensor({start}));
          m.set_initializer(en, int64_tensor({end}));
          sl.add_input(sn);
          sl.add_input(en);
          sl.add_input(axes_name);
        } else {
          add_ints_attribute(sl, "starts", {start});
          add_ints_attribute(sl, "ends", {end});
          add_ints_attribute(sl, "axes", {axis});
        }
        sl.add_output(n.output(k));
        out.push_back(std::move(sl));
      }
      start = end;
    }
    ++counts["Split converted to Slice"];
    return true;
  }
};

/// Quantization parameters of a QuantizeLinear node: scalar scale, zero point, code range.
struct q_params {
  float scale = 0.0f;
  std::int64_t zp = 0;
  std::int64_t qmin = 0, qmax = 0;
  friend bool operator==(const q_params&, const q_params&) = default;
};

bool quantize_op(const NodeProto& n) {
  return n.op_type() == "QuantizeLinear" &&
         (n.domain().empty() || n.domain() == "ai.onnx" || n.domain() == "com.microsoft");
}
bool dequantize_op(const NodeProto& n) {
  return n.op_type() == "DequantizeLinear" &&
         (n.domain().empty() || n.domain() == "ai.onnx" || n.domain() == "com.microsoft");
}

std::optional<q_params> params_of(const model& m, const NodeProto& q) {
  if (q.input_size() < 2 || find_attr(q, "block_size") != nullptr)
    return std::nullopt;
  const auto s = float_scalar(m, q.input(1));
  if (!s || !(*s > 0.0f))
    return std::nullopt;
  q_params p;
  p.scale = *s;
  if (q.input_size() < 3 || q.input(2).empty()) {
    p.qmin = 0;
    p.qmax = 255;  // no zero point: uint8, zero point 0
    return p;
  }
  if (!m.has_initializer(q.input(2)))
    return std::nullopt;
  const tensor z = m.initializer(q.input(2));
  if (z.size() != 1)
    return std::nullopt;
  switch (z.type()) {
    case dtype_id::int8:
      p.zp = z.data<std::int8_t>()[0];
      p.qmin = -128;
      p.qmax = 127;
      break;
    case dtype_id::uint8:
      p.zp = z.data<std::uint8_t>()[0];
      p.qmax = 255;
      break;
    case dtype_id::int16:
      p.zp = z.data<std::int16_t>()[0];
      p.qmin = -32768;
      p.qmax = 32767;
      break;
    case dtype_id::uint16:
      p.zp = z.data<std::uint16_t>()[0];
      p.qmax = 65535;
      break;
    default:
      return std::nullopt;
  }
  return p;
}

/// QuantizeLinear's code for `v` (division, round half to even, + zero point, saturation).
std::int64_t code_of(float v, const q_params& p) {
  const float r = std::nearbyint(v / p.scale);
  const double c = static_cast<double>(r) + static_cast<double>(p.zp);
  return static_cast<std::int64_t>(
      std::clamp(c, static_cast<double>(p.qmin), static_cast<double>(p.qmax)));
}

/// Whether Q(clip(x, lo, hi)) == Q(x) for every x: values below lo and above hi already
/// saturate to the same codes.
bool clip_redundant(const q_params& p, float lo, std::optional<float> hi) {
  // A NaN bound (or scale: the quantizer writes finite positive ones, a loaded model may not)
  // has no code; such a Clip is never dropped.
  if (std::isnan(lo) || (hi && std::isnan(*hi)) || !(std::isfinite(p.scale) && p.scale > 0.0f))
    return false;
  if (code_of(lo, p) != p.qmin)
    return false;
  return !hi || code_of(*hi, p) == p.qmax;
}

}  // namespace

/// Static shapes from ONNX shape inference on a copy of the model: name -> dims (-1 unknown).
inferred_values infer_values(const model& m) {
  ::onnx::ModelProto p = proto(m);
  try {
    infer_shapes(p);
  } catch (const std::exception&) {
    // Partial results are still in value_info; what stays unknown is left out.
  }
  inferred_values out;
  auto add = [&](const ::onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type())
      return;
    const auto& tt = v.type().tensor_type();
    if (tt.elem_type() != 0)
      out.elem[v.name()] = tt.elem_type();
    if (!tt.has_shape())
      return;
    std::vector<std::int64_t> d;
    for (const auto& dim : tt.shape().dim())
      d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    out.shape[v.name()] = std::move(d);
  };
  for (const auto& v : p.graph().input())
    add(v);
  for (const auto& v : p.graph().value_info())
    add(v);
  for (const auto& v : p.graph().output())
    add(v);
  for (const auto& t : p.graph().initializer()) {
    out.shape[t.name()] = std::vector<std::int64_t>(t.dims().begin(), t.dims().end());
    out.elem[t.name()] = t.data_type();
  }
  return out;
}

std::map<std::string, std::vector<std::int64_t>> inferred_shapes(const model& m) {
  return infer_values(m).shape;
}

std::string converted_op_type(const std::string& op_type, const graph_pass_options& o) {
  if (op_type == "BatchNormalization" && o.bn_to_conv)
    return "Conv";
  if (op_type == "Clip" && o.clip_to_relu)
    return "Relu";
  if (op_type == "Split" && o.split_to_slice)
    return "Slice";
  if (op_type == "ReduceMean" && o.reduce_mean_to_gap)
    return "GlobalAveragePool";
  if (op_type == "GlobalAveragePool" && o.split_large_kernel_pool)
    return "GlobalAveragePool";
  return {};
}

std::vector<std::string> convert_graph(model& m, const graph_pass_options& o,
                                       const std::function<bool(std::size_t)>& convert) {
  if (!o.bn_to_conv && !o.clip_to_relu && !o.split_to_slice && !o.reduce_mean_to_gap &&
      !o.split_large_kernel_pool)
    return {};
  bool any = false;
  {
    const GraphProto& g = proto(m).graph();
    for (int i = 0; i < g.node_size() && !any; ++i)
      any = !converted_op_type(g.node(i).op_type(), o).empty() &&
            convert(static_cast<std::size_t>(i));
  }
  if (!any)
    return {};
  converter cv(m, o);
  GraphProto& g = *proto(m).mutable_graph();
  std::vector<NodeProto> out;
  for (int i = 0; i < g.node_size(); ++i) {
    NodeProto& n = *g.mutable_node(i);
    const bool ours = n.domain().empty() || n.domain() == "ai.onnx";
    const std::string& op = n.op_type();
    bool done = false;
    if (ours && !converted_op_type(op, o).empty() && convert(static_cast<std::size_t>(i))) {
      if (op == "BatchNormalization")
        done = cv.bn_to_conv(n, out);
      else if (op == "Clip")
        done = cv.clip_to_relu(n, out);
      else if (op == "Split")
        done = cv.split_to_slice(n, out);
      else if (op == "ReduceMean")
        done = cv.reduce_mean_to_gap(n, out);
      else if (op == "GlobalAveragePool") {
        cv.split_pool(std::move(n), out);
        done = true;
      }
    }
    if (!done)
      out.push_back(std::move(n));
  }
  g.clear_node();
  for (auto& n : out)
    *g.add_node() = std::move(n);
  drop_unused(m, cv.retired);
  std::vector<std::string> notes;
  for (const auto& [what, k] : cv.counts)
    notes.push_back(what + ": " + std::to_string(k));
  return notes;
}

std::set<std::string> fold_relu(model& m, std::size_t& folded) {
  std::set<std::string> gone;
  folded = 0;
  GraphProto& g = *proto(m).mutable_graph();
  std::set<std::string> graph_io;
  for (const auto& v : g.input())
    graph_io.insert(v.name());
  for (const auto& v : g.output())
    graph_io.insert(v.name());
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::string, int> producer;
    std::map<std::string, std::vector<int>> readers;
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& x : g.node(i).output())
        producer[x] = i;
      for (const auto& x : g.node(i).input()) {
        if (!x.empty())
          readers[x].push_back(i);
      }
    }
    auto only_reader = [&](const std::string& t, int node) {
      auto it = readers.find(t);
      return !graph_io.contains(t) && it != readers.end() && it->second.size() == 1 &&
             it->second.front() == node;
    };
    // One pass folds every Relu it can whose nodes no fold of this pass touched (the maps above
    // are not updated); the others wait for the next pass. (Starting over after each fold made
    // this quadratic in the node count.)
    std::set<int> touched;
    std::vector<int> dead_all;
    std::set<std::string> stale_info;  // value_info of values that no longer exist
    std::set<std::string> candidates;
    auto untouched = [&](int k) { return !touched.contains(k); };
    for (int i = 0; i < g.node_size(); ++i) {
      if (!untouched(i))
        continue;
      const NodeProto& r = g.node(i);
      if (!(r.domain().empty() || r.domain() == "ai.onnx") || r.output_size() != 1 ||
          r.input_size() < 1)
        continue;
      float lo = 0.0f;
      std::optional<float> hi;
      if (r.op_type() == "Clip") {
        const auto b = clip_bounds_of(m, r);
        if (!b || !b->lo)
          continue;
        lo = *b->lo;
        hi = b->hi;
      } else if (r.op_type() != "Relu") {
        continue;
      }
      // Every reader of the output quantizes it with parameters that make the node redundant.
      const std::string& y = r.output(0);
      auto ry = readers.find(y);
      if (graph_io.contains(y) || ry == readers.end())
        continue;
      std::optional<q_params> out_p;
      bool ok = true;
      for (const int k : ry->second) {
        const auto p = quantize_op(g.node(k)) ? params_of(m, g.node(k)) : std::nullopt;
        ok = ok && p && clip_redundant(*p, lo, hi) && (!out_p || *out_p == *p);
        if (p)
          out_p = p;
      }
      if (!ok || !out_p || !std::all_of(ry->second.begin(), ry->second.end(), untouched))
        continue;
      // The input: straight from a node, or through a Q/DQ pair with the same parameters.
      const std::string& u = r.input(0);
      auto pu = producer.find(u);
      if (!only_reader(u, i) || pu == producer.end() || !untouched(pu->second))
        continue;
      std::vector<int> dead = {i};
      std::string src = u;  // the value whose producer will write y
      int src_node = pu->second;
      if (dequantize_op(g.node(src_node))) {
        const NodeProto& dq = g.node(src_node);
        auto pq = producer.find(dq.input(0));
        if (pq == producer.end() || !quantize_op(g.node(pq->second)) ||
            !only_reader(dq.input(0), src_node) || !untouched(pq->second))
          continue;
        const NodeProto& q = g.node(pq->second);
        const auto in_p = params_of(m, q);
        auto pt = producer.find(q.input(0));
        if (!in_p || !(*in_p == *out_p) || pt == producer.end() ||
            !only_reader(q.input(0), pq->second) || !untouched(pt->second))
          continue;
        dead.push_back(src_node);
        dead.push_back(pq->second);
        src = q.input(0);
        src_node = pt->second;
        gone.insert(src);
      }
      // The producer writes y; the Relu (and the pair) go.
      NodeProto& p = *g.mutable_node(src_node);
      for (int k = 0; k < p.output_size(); ++k) {
        if (p.output(k) == src)
          p.set_output(k, y);
      }
      for (const int d : dead) {
        for (const auto& x : g.node(d).input())
          candidates.insert(x);
      }
      touched.insert(dead.begin(), dead.end());
      touched.insert(src_node);
      touched.insert(ry->second.begin(), ry->second.end());
      dead_all.insert(dead_all.end(), dead.begin(), dead.end());
      stale_info.insert(u);
      stale_info.insert(src);
      ++folded;
      changed = true;
    }
    if (!changed)
      break;
    std::vector<bool> is_dead(static_cast<std::size_t>(g.node_size()));
    for (const int d : dead_all)
      is_dead[static_cast<std::size_t>(d)] = true;
    compact_nodes(g, is_dead);
    erase_if(*g.mutable_value_info(), [&](const auto& v) { return stale_info.contains(v.name()); });
    drop_unused(m, candidates);
  }
  return gone;
}

}  // namespace quark::onnx::qz
