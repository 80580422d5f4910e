// SPDX-License-Identifier: MIT
// Dynamic quantization (dynamic.hpp). Which nodes: the plan's quantized MatMul, Conv and Gather
// nodes (of Quark's IntegerOps registry, quark-spec §7.1), a MatMul only with a constant B when
// MatMulConstBOnly (default True here, seed 000), a Conv only with a constant weight. The weight
// parameters come from qparams_for (Quark's weight rule: min/max including 0, INT8 clipped to
// +-127) and the values from quark::quantize; per-channel signed weights are symmetric (§5.2).
// The same rewriter (scopes, bodies, constant lookup, clean-up of float weights) serves
// UseMatMulNBits: MatMul with a 2-D float32 / float16 constant B -> com.microsoft MatMulNBits,
// B stored by quark::quantize_nbits (quark-spec §10.7).
#include "quantizer/dynamic.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <quark/algo/gptq.hpp>
#include <quark/observer/minmax_observer.hpp>
#include <quark/observer/per_channel.hpp>
#include <quark/quant/nbits.hpp>

#include "io/graph_util.hpp"
#include "io/proto_access.hpp"
#include "io/tensor_proto.hpp"
#include "quantizer/fp16_model.hpp"
#include "quantizer/graph_util.hpp"
#include "quantizer/numerics.hpp"
#include "quantizer/opset.hpp"
#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {
namespace {

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
  minmax_observer all;
  all.observe(v);
  if (const range_stats r = all.stats(); r.has_values()) {
    out.rmin = r.min;
    out.rmax = r.max;
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
    std::vector<std::size_t> dims(w.shape().begin(), w.shape().end());
    const auto ax = static_cast<std::size_t>(axis);
    per_channel_observer<minmax_observer> obs(dims[ax]);
    obs.observe(v, dims, static_cast<std::ptrdiff_t>(axis));
    for (std::size_t ch = 0; ch < dims[ax]; ++ch) {
      const range_stats r = obs[ch].stats();
      one(r.has_values() ? r.min : 0.0f, r.has_values() ? r.max : 0.0f);
    }
  }
  out.q = quantize_values(w, spec.type, out.scale, out.zp, axis, qmin, qmax);
  return out;
}

bool is_constant_node(const ::onnx::NodeProto& n) {
  return n.op_type() == "Constant" && n.output_size() == 1;
}

/// The rewrite of one graph and, with EnableSubgraph, of the If / Loop / Scan bodies in it.
class rewriter {
 public:
  rewriter(model& m, const settings& opt, const body_planner* bodies, quantize_report& report)
      : m_(m), opt_(opt), bodies_(bodies), report_(report), names_(proto(m).graph()) {}

  /// Rewrites `g` (the main graph when `outer` is empty) with `choices` aligned to its nodes.
  void graph(::onnx::GraphProto& g, const std::vector<node_choice>& choices,
             std::vector<::onnx::GraphProto*> outer) {
    state st{g, std::move(outer), {}, {}};
    for (int i = 0; i < g.node_size(); ++i) {
      ::onnx::NodeProto& src = *g.mutable_node(i);
      body_nodes(src, st);
      const node_choice& c = choices.at(static_cast<std::size_t>(i));
      st.index = static_cast<std::size_t>(i);
      if (!node(src, c, st)) {
        st.rebuilt.push_back(src);
        count(src.op_type(), false);
      }
    }
    g.clear_node();
    for (auto& n : st.rebuilt)
      *g.add_node() = std::move(n);
    scopes_.erase(&g);
    // Float weights of this graph that nothing reads any more (bodies included) go, in one pass
    // over the initializers and one over the Constant nodes.
    const graph_index after(g);
    std::set<std::string, std::less<>> unused;
    for (const std::string& w : replaced_[&g]) {
      if (after.uses(w) == 0)
        unused.insert(w);
    }
    if (unused.empty())
      return;
    erase_if(*g.mutable_initializer(), [&](const auto& t) { return unused.contains(t.name()); });
    if (&g == &proto(m_).graph())
      proto_access::get(m_).inits.clear();  // (see model::remove_initializer)
    erase_if(*g.mutable_node(), [&](const ::onnx::NodeProto& n) {
      return is_constant_node(n) && unused.contains(n.output(0));
    });
  }

  std::size_t dql_nodes() const noexcept { return dql_; }
  std::size_t rewritten() const noexcept { return done_; }
  std::size_t body_nodes_left() const noexcept { return body_left_; }

 private:
  struct dq_out {
    std::string q, s, z;
  };
  struct state {
    ::onnx::GraphProto& g;
    std::vector<::onnx::GraphProto*> outer;  ///< enclosing graphs, innermost last
    std::map<std::string, dq_out> dynamic;   ///< value -> its DynamicQuantizeLinear outputs
    std::vector<::onnx::NodeProto> rebuilt;
    std::size_t index = 0;  ///< of the node being rewritten (its label when unnamed)
  };

  /// The bodies of `n`: rewritten (EnableSubgraph) or counted as left float.
  void body_nodes(::onnx::NodeProto& n, const state& st) {
    for (auto& a : *n.mutable_attribute()) {
      std::vector<::onnx::GraphProto*> subs;
      if (a.has_g())
        subs.push_back(a.mutable_g());
      for (auto& sg : *a.mutable_graphs())
        subs.push_back(&sg);
      for (::onnx::GraphProto* sg : subs) {
        if (bodies_ == nullptr) {
          body_left_ += static_cast<std::size_t>(sg->node_size()) + body_node_count(*sg);
          continue;
        }
        std::vector<node_ref> refs;
        for (const auto& b : sg->node())
          refs.push_back({b.name(), b.op_type()});
        const plan bp = (*bodies_)(refs);
        std::vector<::onnx::GraphProto*> outer = st.outer;
        outer.push_back(&st.g);
        graph(*sg, bp.nodes, std::move(outer));
      }
    }
  }

  /// A float32 constant visible in `st.g` (its initializers and Constant nodes, then those of
  /// the enclosing graphs), with the graph that holds it; nullopt if `name` is no such constant.
  std::optional<std::pair<tensor, ::onnx::GraphProto*>> constant(const std::string& name,
                                                                 const state& st) const {
    const auto c = constant_proto(name, st);
    if (!c || c->first->data_type() != ::onnx::TensorProto::FLOAT)
      return std::nullopt;
    return std::make_pair(read_tensor(*c->first, m_.base_dir()), c->second);
  }

  /// The TensorProto of the constant `name` visible in `st.g` (as constant()), of any type.
  std::optional<std::pair<const ::onnx::TensorProto*, ::onnx::GraphProto*>> constant_proto(
      const std::string& name, const state& st) const {
    if (name.empty())
      return std::nullopt;
    std::vector<::onnx::GraphProto*> scopes = st.outer;
    scopes.push_back(&st.g);
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      ::onnx::GraphProto& g = **it;
      scope_index& ix = scope(g);
      if (const int k = ix.inits.find(g, name); k >= 0)
        return std::make_pair(&g.initializer(k), &g);
      // A Constant node writing it; a value another node of this graph produces hides the
      // outer scopes' names.
      if (auto c = ix.constants.find(name); c != ix.constants.end()) {
        const auto* v = find_attr(g.node(c->second), "value");
        if (v == nullptr || !v->has_t())
          return std::nullopt;
        return std::make_pair(&v->t(), &g);
      }
      if (ix.produced.contains(name))
        return std::nullopt;
    }
    return std::nullopt;
  }

  /// The names of one graph: its initializers, the values its Constant nodes write (the first
  /// such node of each) and every value a node writes. Looking them up by scanning made the
  /// rewrite quadratic in the node count. A graph's nodes do not change while it or a body in it
  /// is rewritten; its entry goes once they do.
  struct scope_index {
    initializer_index inits;  // (checks itself: sees the initializers the rewrite adds)
    std::map<std::string, int, std::less<>> constants;
    std::set<std::string, std::less<>> produced;
  };
  scope_index& scope(const ::onnx::GraphProto& g) const {
    auto [it, added] = scopes_.try_emplace(&g);
    if (added) {
      for (int k = 0; k < g.node_size(); ++k) {
        const ::onnx::NodeProto& n = g.node(k);
        if (is_constant_node(n))
          it->second.constants.try_emplace(n.output(0), k);
        for (const auto& o : n.output())
          it->second.produced.insert(o);
      }
    }
    return it->second;
  }

  void add_initializer(::onnx::GraphProto& g, const std::string& name, const tensor& t) {
    write_tensor(t, scope(g).inits.get_or_add(g, name));  // (names_ makes every name new)
  }

  const dq_out& activation(const std::string& x, state& st) {
    auto it = st.dynamic.find(x);
    if (it != st.dynamic.end())
      return it->second;
    dq_out d{names_.fresh(x + "_quantized"), names_.fresh(x + "_scale"),
             names_.fresh(x + "_zero_point")};
    st.rebuilt.push_back(make_op("DynamicQuantizeLinear",
                                 names_.fresh(x + "_DynamicQuantizeLinear"), {x}, {d.q, d.s, d.z}));
    ++dql_;
    tensor_report tr;
    tr.name = x;
    tr.role = "activation (dynamic)";
    tr.type = "uint8";
    report_.tensors.push_back(std::move(tr));
    ++report_.tensors_per_type["uint8"];
    return st.dynamic.emplace(x, d).first->second;
  }

  /// The quantized weight `w` of node `n` as three initializers of `st.g` (values, scale, zero
  /// point); `home` is the graph holding the float weight.
  dq_out store(const ::onnx::NodeProto& n, const std::string& w, const tensor& value,
               ::onnx::GraphProto* home, const tspec& spec, std::int64_t axis,
               const shape_t& scale_shape, state& st, bool one_zero_point = false) {
    if (const std::string bad =
            non_finite_values(value.data<float>(), node_label(n, st.index), w, "weight");
        !bad.empty()) {
      throw frontend_error("quark.quantize.non_finite",
                           bad + ": a quantized weight or bias must be finite");
    }
    const stored_weight sw = quantize_weight(value, spec, axis, w);
    const dq_out d{names_.fresh(w + "_quantized"), names_.fresh(w + "_scale"),
                   names_.fresh(w + "_zero_point")};
    const bool scalar = axis < 0;
    add_initializer(st.g, d.q, sw.q);
    add_initializer(st.g, d.s, scale_tensor(sw.scale, scalar, scalar ? shape_t{} : scale_shape));
    // An integer op's zero point is a scalar or 1-D (one per column / output channel);
    // `one_zero_point`: ConvInteger's single one, which per-channel weights share (they are
    // symmetric int8, node() refuses any other per-channel Conv spec, so every one is 0).
    add_initializer(st.g, d.z,
                    zero_point_tensor(spec.type, one_zero_point ? std::vector{sw.zp.at(0)} : sw.zp,
                                      scalar || one_zero_point));
    replaced_[home].insert(w);
    if (scalar) {
      const std::string w0 = zeroed_weight_note(value.data<float>(), sw.q, sw.zp.front(),
                                                sw.scale.front(), w, n.name(), n.op_type());
      if (!w0.empty())
        report_.notes.push_back(w0);
    }
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
    report_.tensors.push_back(std::move(tr));
    ++report_.tensors_per_type[std::string(dtype_name(spec.type))];
    return d;
  }

  /// y = Cast(integer product) * (x_scale * w_scale) [+ bias]: the float tail of both ops.
  void tail(const ::onnx::NodeProto& n, const std::string& product, const std::string& x_scale,
            const std::string& w_scale, const std::string& bias, state& st) {
    const std::string& y = n.output(0);
    const std::string f = names_.fresh(y + "_output_quantized_cast");
    const std::string scales = names_.fresh(y + "_scales_mul");
    st.rebuilt.push_back(make_cast(names_.fresh(n.name() + "_output_quantized_cast"), product, f,
                                   dtype_id::float32));
    st.rebuilt.push_back(
        make_binary("Mul", names_.fresh(n.name() + "_scales_mul"), x_scale, w_scale, scales));
    const std::string scaled = bias.empty() ? y : names_.fresh(y + "_unbiased");
    st.rebuilt.push_back(
        make_binary("Mul", names_.fresh(n.name() + "_output_scale_mul"), f, scales, scaled));
    if (!bias.empty())
      st.rebuilt.push_back(
          make_binary("Add", names_.fresh(n.name() + "_bias_add"), scaled, bias, y));
  }

  void count(const std::string& op, bool quantized) {
    op_type_count& k = report_.op_types[op];
    ++(quantized ? k.quantized : k.kept_float);
  }

  /// Gather from a constant table (an embedding): the table stored quantized, the gathered
  /// codes dequantized (Quark's IntegerOps registry quantizes Gather's data the same way).
  bool gather(const ::onnx::NodeProto& src, const node_choice& c, state& st) {
    auto d = constant(src.input(0), st);
    if (!d || !c.quantize || !c.weight)
      return false;
    const dq_out t = store(src, src.input(0), d->first, d->second, *c.weight, -1, {}, st);
    ::onnx::NodeProto g = src;
    g.set_name(names_.fresh(src.name() + "_quant"));
    g.set_input(0, t.q);
    const std::string codes = names_.fresh(src.output(0) + "_quantized");
    g.set_output(0, codes);
    st.rebuilt.push_back(std::move(g));
    st.rebuilt.push_back(make_op("DequantizeLinear", names_.fresh(src.name() + "_DequantizeLinear"),
                                 {codes, t.s, t.z}, {src.output(0)}));
    count(src.op_type(), true);
    ++done_;
    return true;
  }

  /// UseMatMulNBits: a MatMul whose B is a 2-D float32 constant becomes com.microsoft
  /// MatMulNBits with B stored block-wise (quark/quant/nbits.hpp). Names as ONNX Runtime's
  /// quantizer gives them (node "<name>_Q4"; "<B>_Q4", "<B>_scales", "<B>_zero_points"); a B
  /// that several MatMul nodes read is stored once.
  bool nbits(const ::onnx::NodeProto& src, const node_choice& c, state& st) {
    if (!(src.op_type() == "MatMul" && src.domain().empty() && src.input_size() == 2) ||
        !c.quantize) {
      return false;
    }
    // B: a float32 or (ONNX Runtime's quantizer takes those too) float16 constant; a float16 B
    // gets float16 scales, which MatMulNBits then wants with a float16 A.
    const auto bp = constant_proto(src.input(1), st);
    const bool half = bp && bp->first->data_type() == ::onnx::TensorProto::FLOAT16;
    if (!bp || (bp->first->data_type() != ::onnx::TensorProto::FLOAT && !half) ||
        bp->first->dims_size() != 2 || bp->first->dims(0) <= 0 || bp->first->dims(1) <= 0) {
      ++nbits_skipped_;
      return false;
    }
    const auto w = std::make_pair(half ? float16_to_float32(read_tensor(*bp->first, m_.base_dir()))
                                       : read_tensor(*bp->first, m_.base_dir()),
                                  bp->second);
    const tensor& b = w.first;
    const std::string& bname = src.input(1);
    const nbits_layout l{b.shape()[0], b.shape()[1], opt_.nbits_bits, opt_.nbits_block_size};
    // HQQ's zero points are floats, one per block, whatever Symmetric says (ONNX Runtime's).
    const bool hqq = opt_.nbits_algo == nbits_algorithm::hqq;
    const bool sym = opt_.nbits_symmetric && !hqq;
    auto& names = nbits_stored_[&st.g][bname];
    if (names.empty()) {
      // A GroupSize far past K pads every column to one huge block: refused past 2^31 bytes
      // of codes (the runtime's element bound) instead of allocating them.
      if (l.packed_bytes() > (std::int64_t{1} << 31)) {
        throw frontend_error("quark.quantize.nbits",
                             node_label(src, st.index) + ": MatMulNBitsParams.GroupSize " +
                                 std::to_string(l.block_size) + " on a " + std::to_string(l.k) +
                                 " x " + std::to_string(l.n) + " weight needs " +
                                 std::to_string(l.packed_bytes()) +
                                 " bytes of codes (at most 2^31)");
      }
      if (const std::string bad =
              non_finite_values(b.data<float>(), node_label(src, st.index), bname, "weight");
          !bad.empty()) {
        throw frontend_error("quark.quantize.non_finite",
                             bad + ": a quantized weight or bias must be finite");
      }
      tensor packed(dtype_id::uint8, shape_t{l.n, l.k_blocks(), l.blob_size()});
      tensor scales(dtype_id::float32, shape_t{l.scale_count()});
      tensor zp = hqq ? tensor(dtype_id::float32, shape_t{l.scale_count()})
                      : tensor(dtype_id::uint8, shape_t{sym ? 0 : l.zero_point_bytes()});
      if (hqq) {
        nbits_hqq_rounds_ = std::max(
            nbits_hqq_rounds_, quantize_nbits_hqq(b.data<float>(), l, packed.data<std::uint8_t>(),
                                                  scales.data<float>(), zp.data<float>()));
        if (half) {  // stored as float16, the codes chosen with float32 (ORT's .to(dtype))
          scales = float16_to_float32(float32_to_float16(scales));
          zp = float16_to_float32(float32_to_float16(zp));
        }
      } else if (hessians_ != nullptr) {
        gptq_store(b, bname, l, sym, half, src, st, packed, scales, zp);
      } else {
        quantize_nbits(b.data<float>(), l, sym, packed.data<std::uint8_t>(), scales.data<float>(),
                       zp.data<std::uint8_t>(), half);
      }
      names.push_back(names_.fresh(bname + "_Q4"));
      names.push_back(names_.fresh(bname + "_scales"));
      add_initializer(st.g, names[0], packed);
      add_initializer(st.g, names[1], half ? float32_to_float16(scales) : scales);
      if (!sym) {
        names.push_back(names_.fresh(bname + "_zero_points"));
        add_initializer(st.g, names[2], half && hqq ? float32_to_float16(zp) : zp);
      }
      replaced_[w.second].insert(bname);
      nbits_bytes_before_ += b.byte_size() / (half ? 2 : 1);
      nbits_bytes_after_ += packed.byte_size() + scales.byte_size() / (half ? 2 : 1) +
                            zp.byte_size() / (half && hqq ? 2 : 1);
      tensor_report tr;
      tr.name = bname;
      tr.role = "weight";
      tr.type = "uint" + std::to_string(l.bits) + " (MatMulNBits blocks of " +
                std::to_string(l.block_size) + ")";
      minmax_observer all;
      all.observe(b.data<float>());
      if (const range_stats r = all.stats(); r.has_values()) {
        tr.rmin = r.min;
        tr.rmax = r.max;
      }
      report_.tensors.push_back(std::move(tr));
      ++report_.tensors_per_type["uint" + std::to_string(l.bits) + " (blocks)"];
    }
    ::onnx::NodeProto q =
        make_op("MatMulNBits", names_.fresh(src.name() + "_Q4"), {}, {src.output(0)});
    q.set_domain("com.microsoft");
    q.add_input(src.input(0));
    for (const auto& n : names)
      q.add_input(n);
    add_int_attribute(q, "K", l.k);
    add_int_attribute(q, "N", l.n);
    add_int_attribute(q, "bits", l.bits);
    add_int_attribute(q, "block_size", l.block_size);
    add_int_attribute(q, "accuracy_level", opt_.nbits_accuracy_level);
    st.rebuilt.push_back(std::move(q));
    count(src.op_type(), true);
    ++done_;
    return true;
  }

  /// MatMulNBits storage of B from GPTQ (Algorithm "GPTQ"): blocks of block_size rows per
  /// column, Quark's GPTQ grid (symmetric: zero point 2^(bits-1), MatMulNBits' implicit one;
  /// else min/max with a rounded zero point), GPTQConfig's other defaults (perc_damp 0.01,
  /// lazy blocks of 128, no act_order, no MSE search). A float16 weight's scales are rounded to
  /// float16 after GPTQ chose the codes.
  void gptq_store(const tensor& b, const std::string& bname, const nbits_layout& l, bool sym,
                  bool half, const ::onnx::NodeProto& src, const state& st, tensor& packed,
                  tensor& scales, tensor& zp) {
    const auto h = hessians_->find(bname);
    if (h == hessians_->end()) {
      throw frontend_error("quark.quantize.internal", "MatMulNBits GPTQ: no Hessian for '" + bname +
                                                          "' of " + node_label(src, st.index));
    }
    gptq_computed_params grid;
    grid.bits = l.bits;
    grid.symmetric = sym;
    grid.per_channel = true;
    gptq_options go;
    go.group_size = static_cast<std::ptrdiff_t>(l.block_size);
    gptq_result r;
    const auto k = static_cast<std::size_t>(l.k), n = static_cast<std::size_t>(l.n);
    try {
      r = gptq_quantize(b.data<float>(), k, n, std::span<const double>(h->second), grid, go);
    } catch (const quark::error& e) {
      throw frontend_error("quark.quantize.gptq",
                           "MatMulNBits GPTQ: " + node_label(src, st.index) + ": " + e.what());
    }
    gptq_loss_ += r.loss;
    // r's grid is [k_blocks][N]; MatMulNBits wants [N][k_blocks].
    const std::size_t kb = r.groups;
    std::vector<std::int32_t> zeros(kb * n);
    auto s = scales.data<float>();
    for (std::size_t g = 0; g < kb; ++g) {
      for (std::size_t c = 0; c < n; ++c) {
        const float v = r.scales[g * n + c];
        s[c * kb + g] = half ? to_float(convert<float16>(v)) : v;
        zeros[c * kb + g] = r.zeros[g * n + c];
      }
    }
    pack_nbits(r.codes, l, packed.data<std::uint8_t>(),
               sym ? std::span<const std::int32_t>() : std::span<const std::int32_t>(zeros),
               zp.data<std::uint8_t>());
  }

  /// Rewrites `src` into st.rebuilt; false when it stays as it is.
  bool node(const ::onnx::NodeProto& src, const node_choice& c, state& st) {
    if (opt_.matmul_nbits)
      return nbits(src, c, st);
    if (src.op_type() == "Gather" && src.domain().empty() && src.input_size() == 2)
      return gather(src, c, st);
    const bool matmul = src.op_type() == "MatMul" && src.domain().empty() && src.input_size() == 2;
    const bool conv = src.op_type() == "Conv" && src.domain().empty() && src.input_size() >= 2;
    if (!(matmul || conv) || !c.quantize || !c.weight)
      return false;
    auto w = constant(src.input(1), st);
    if (!w && (conv || opt_.matmul_const_b_only))
      return false;
    const tspec& ws = *c.weight;
    const std::string product = names_.fresh(src.output(0) + "_output_quantized");
    if (matmul) {
      const dq_out a = activation(src.input(0), st);
      // B constant: stored quantized, per column of a 2-D B (N scales and zero points) or per
      // tensor; else quantized at run time as A is.
      const dq_out b = w ? store(src, src.input(1), w->first, w->second, ws,
                                 ws.per_channel && w->first.rank() == 2 ? 1 : -1,
                                 shape_t{w->first.rank() == 2 ? w->first.shape()[1] : 1}, st)
                         : activation(src.input(1), st);
      st.rebuilt.push_back(make_op("MatMulInteger", names_.fresh(src.name() + "_quant"),
                                   {a.q, b.q, a.z, b.z}, {product}));
      tail(src, product, a.s, b.s, "", st);
    } else {
      // ConvInteger takes one weight zero point in ONNX Runtime ("Non per-tensor quantization
      // is not supported"): per-channel weights are symmetric int8 (zero point 0, passed as a
      // scalar) with their scales applied per output channel in the float tail.
      const tensor& wt = w->first;
      // Nothing has run the model (no calibration): check what the rewrite reads. A Conv
      // weight is [M, C / group, k...] (rank >= 3, M >= 1), a bias holds M values.
      if (wt.rank() < 3 || wt.shape()[0] < 1) {
        throw frontend_error("quark.quantize.dynamic",
                             "node '" + src.name() + "' (Conv): the weight '" + src.input(1) +
                                 "' (rank " + std::to_string(wt.rank()) +
                                 ") is not [M, C / group, k...] with M >= 1");
      }
      const bool per_channel = ws.per_channel;
      if (per_channel && ws.type != dtype_id::int8) {
        throw config_error("quark.config.value",
                           "use_dynamic_quant: node '" + src.name() +
                               "' (Conv): per-channel weights need Int8Spec (symmetric, zero "
                               "point 0): ConvInteger takes a single weight zero point");
      }
      // [M, 1, ..., 1] (one 1 per spatial dimension) against the output [N, M, spatial...].
      shape_t per_out(wt.rank() >= 2 ? wt.rank() - 2 : 0, 1);
      per_out.insert(per_out.begin(), wt.shape()[0]);
      const dq_out wq =
          store(src, src.input(1), wt, w->second, ws, per_channel ? 0 : -1, per_out, st, true);
      std::string bias;
      if (src.input_size() > 2 && !src.input(2).empty()) {
        // The bias as [M, 1, ..., 1], so that it adds per output channel.
        auto bv = constant(src.input(2), st);
        if (!bv) {
          throw frontend_error("quark.quantize.dynamic", "node '" + src.name() +
                                                             "' (Conv): the bias '" + src.input(2) +
                                                             "' is not a float32 constant");
        }
        if (bv->first.size() != static_cast<std::size_t>(wt.shape()[0])) {
          throw frontend_error("quark.quantize.dynamic",
                               "node '" + src.name() + "' (Conv): the bias '" + src.input(2) +
                                   "' holds " + std::to_string(bv->first.size()) + " values for " +
                                   std::to_string(wt.shape()[0]) + " output channels");
        }
        tensor r(dtype_id::float32, per_out);
        std::copy(bv->first.data<float>().begin(), bv->first.data<float>().end(),
                  r.data<float>().begin());
        bias = names_.fresh(src.input(2) + "_reshaped");
        add_initializer(st.g, bias, r);
        replaced_[bv->second].insert(src.input(2));
      }
      const dq_out x = activation(src.input(0), st);
      ::onnx::NodeProto ci = make_op("ConvInteger", names_.fresh(src.name() + "_quant"),
                                     {x.q, wq.q, x.z, wq.z}, {product});
      for (const auto& a : src.attribute())
        *ci.add_attribute() = a;
      st.rebuilt.push_back(std::move(ci));
      tail(src, product, x.s, wq.s, bias, st);
    }
    count(src.op_type(), true);
    ++done_;
    return true;
  }

  model& m_;
  const settings& opt_;
  const body_planner* bodies_;
  quantize_report& report_;
  name_pool names_;
  mutable std::map<const ::onnx::GraphProto*, scope_index> scopes_;
  std::map<const ::onnx::GraphProto*, std::set<std::string>> replaced_;
  std::size_t dql_ = 0, done_ = 0, body_left_ = 0;
  /// UseMatMulNBits: per graph, B -> the names of its stored initializers.
  std::map<const ::onnx::GraphProto*, std::map<std::string, std::vector<std::string>>>
      nbits_stored_;
  std::size_t nbits_skipped_ = 0, nbits_bytes_before_ = 0, nbits_bytes_after_ = 0;
  /// Algorithm GPTQ: B -> Hessian (K x K) of the activations that read it.
  const std::map<std::string, std::vector<double>>* hessians_ = nullptr;
  double gptq_loss_ = 0.0;
  int nbits_hqq_rounds_ = 0;

 public:
  void set_hessians(const std::map<std::string, std::vector<double>>* h) noexcept { hessians_ = h; }
  double gptq_loss() const noexcept { return gptq_loss_; }
  int hqq_rounds() const noexcept { return nbits_hqq_rounds_; }
  std::size_t nbits_skipped() const noexcept { return nbits_skipped_; }
  std::size_t nbits_bytes_before() const noexcept { return nbits_bytes_before_; }
  std::size_t nbits_bytes_after() const noexcept { return nbits_bytes_after_; }
};

}  // namespace

void quantize_dynamic(model& m, const plan& pl, const body_planner* bodies,
                      quantize_report& report) {
  report.dynamic = true;
  rewriter rw(m, pl.opt, bodies, report);
  rw.graph(*proto(m).mutable_graph(), pl.nodes, {});
  report.opset_before = m.opset("").value_or(1);
  if (rw.dql_nodes() > 0 && report.opset_before < 11) {
    // DynamicQuantizeLinear: opset 11 (MatMulInteger / ConvInteger: 10).
    for (const auto& note : upgrade_opset(proto(m), report.opset_before, 11, {}))
      report.notes.push_back(note);
  }
  report.opset_after = m.opset("").value_or(1);
  if (rw.rewritten() == 0) {
    report.notes.push_back("none: no MatMul / Conv / Gather with a constant weight was selected");
  } else {
    report.notes.push_back(
        "dynamic: " + std::to_string(rw.rewritten()) +
        " MatMul / Conv / Gather nodes quantized: MatMulInteger / ConvInteger on uint8 "
        "activations quantized at run time (" +
        std::to_string(rw.dql_nodes()) + " DynamicQuantizeLinear); no calibration");
  }
  if (rw.body_nodes_left() > 0) {
    report.notes.push_back("graph: " + std::to_string(rw.body_nodes_left()) +
                           " nodes inside If / Loop / Scan bodies stay float (set "
                           "EnableSubgraph to quantize them)");
  }
  m.validate();
}

void quantize_matmul_nbits(model& m, const plan& pl, const body_planner& bodies,
                           quantize_report& report,
                           const std::map<std::string, std::vector<double>>* hessians) {
  report.matmul_nbits = true;
  rewriter rw(m, pl.opt, &bodies, report);
  rw.set_hessians(hessians);
  rw.graph(*proto(m).mutable_graph(), pl.nodes, {});
  report.opset_before = m.opset("").value_or(1);
  report.opset_after = report.opset_before;
  if (rw.rewritten() > 0 && !m.opset("com.microsoft"))
    m.set_opset("com.microsoft", 1);
  const auto& o = pl.opt;
  std::string what =
      std::to_string(o.nbits_bits) + "-bit " +
      (o.nbits_symmetric && !(o.nbits_algo == nbits_algorithm::hqq) ? "symmetric" : "asymmetric") +
      " blocks of " + std::to_string(o.nbits_block_size) + " along K";
  if (rw.rewritten() == 0) {
    report.notes.push_back(
        "MatMulNBits: no MatMul with a 2-D float32 / float16 constant B was selected");
  } else {
    const auto mb = [](std::size_t bytes) {
      std::ostringstream os;
      os.precision(3);
      os << static_cast<double>(bytes) / 1e6 << " MB";
      return os.str();
    };
    std::string how = "; no calibration";
    if ((o.nbits_algo == nbits_algorithm::hqq)) {
      how = "; HQQ codes and float zero points (at most " + std::to_string(rw.hqq_rounds()) +
            " rounds), no calibration";
    } else if (hessians != nullptr) {
      std::ostringstream os;
      os.precision(4);
      os << "; GPTQ codes (proxy loss " << rw.gptq_loss() << ")";
      how = os.str();
    }
    report.notes.push_back("MatMulNBits: " + std::to_string(rw.rewritten()) +
                           " MatMul nodes with weights in " + what + " (" +
                           mb(rw.nbits_bytes_before()) + " of float weights -> " +
                           mb(rw.nbits_bytes_after()) + ")" + how);
  }
  if (rw.nbits_skipped() > 0) {
    report.notes.push_back("MatMulNBits: " + std::to_string(rw.nbits_skipped()) +
                           " MatMul nodes stay float (B is not a 2-D float32 / float16 constant)");
  }
  m.validate();
}

}  // namespace quark::onnx::qz
