// SPDX-License-Identifier: MIT
// QuantizeFP16 / UseFP32Scale: float16 models through a float32 copy (see fp16_model.hpp).
#include "quantizer/fp16_model.hpp"

#include <cstring>
#include <map>
#include <type_traits>

#include <quark/core/concepts.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/onnx/config.hpp>

#include "io/proto_access.hpp"
#include "quantizer/graph_util.hpp"

namespace quark::onnx::qz {

namespace {

int elem_type(const ::onnx::ValueInfoProto& v) {
  return v.type().has_tensor_type() ? v.type().tensor_type().elem_type() : 0;
}

void set_elem_type(::onnx::ValueInfoProto& v, int t) {
  v.mutable_type()->mutable_tensor_type()->set_elem_type(t);
}

bool qdq_op(const ::onnx::NodeProto& n, const char* op) {
  return n.op_type() == op &&
         (n.domain().empty() || n.domain() == "ai.onnx" || n.domain() == "com.microsoft");
}

}  // namespace

tensor float16_to_float32(const tensor& h) {
  tensor f(dtype_id::float32, h.shape(), uninitialized);
  quark::to_float(h.data<quark::float16>(), f.data<float>());
  return f;
}

std::optional<tensor> numeric_as_float32(tensor v) {
  const dtype_id t = v.type();
  if (t == dtype_id::float32)
    return v;
  if (t == dtype_id::string || t == dtype_id::complex64 || t == dtype_id::complex128)
    return std::nullopt;
  tensor f(dtype_id::float32, v.shape(), uninitialized);
  bool numeric = false;
  quark::visit_dtype(t, [&](auto id) {
    using D = typename decltype(id)::type;
    auto dst = f.data<float>();
    const auto src = v.data<D>();
    if constexpr (std::is_arithmetic_v<D>) {  // integers and bool
      numeric = true;
      for (std::size_t i = 0; i < src.size(); ++i)
        dst[i] = static_cast<float>(src[i]);
    } else if constexpr (quantized_type<D>) {  // float16 / bfloat16, float8, int4
      numeric = true;
      quark::to_float(std::span<const D>(src), dst);
    }
  });
  if (!numeric)
    return std::nullopt;
  return f;
}

tensor float32_to_float16(const tensor& f) {
  tensor h(dtype_id::float16, f.shape());
  quark::convert<quark::float16>(f.data<float>(), h.data<quark::float16>());
  return h;
}

namespace {

/// A single-element float16 TensorProto attribute value (ConstantOfShape) as float32.
void attr_tensor_to_f32(::onnx::TensorProto& t) {
  if (t.data_type() != ::onnx::TensorProto::FLOAT16)
    return;
  std::uint16_t bits = 0;
  if (t.raw_data().size() >= 2)
    std::memcpy(&bits, t.raw_data().data(), 2);
  else if (t.int32_data_size() > 0)
    bits = static_cast<std::uint16_t>(t.int32_data(0));
  const float v = quark::to_float(quark::float16::from_bits(bits));
  t.clear_raw_data();
  t.clear_int32_data();
  t.set_data_type(::onnx::TensorProto::FLOAT);
  t.add_float_data(v);
}

}  // namespace

bool is_float16_model(const model& m) {
  const auto& g = proto(m).graph();
  bool half = false;
  for (const auto* list : {&g.input(), &g.output()}) {
    for (const auto& v : *list) {
      if (elem_type(v) == ::onnx::TensorProto::FLOAT)
        return false;
      half = half || elem_type(v) == ::onnx::TensorProto::FLOAT16;
    }
  }
  for (const auto& t : g.initializer())
    half = half || t.data_type() == ::onnx::TensorProto::FLOAT16;
  return half;
}

fp16_record to_float32(model& m) {
  fp16_record r;
  auto& g = *proto(m).mutable_graph();
  for (auto* list : {g.mutable_input(), g.mutable_output(), g.mutable_value_info()}) {
    for (auto& v : *list) {
      if (elem_type(v) != ::onnx::TensorProto::FLOAT16)
        continue;
      if (list != g.mutable_value_info())
        r.io.insert(v.name());
      set_elem_type(v, ::onnx::TensorProto::FLOAT);
    }
  }
  for (const auto& name : m.initializer_names()) {
    const tensor t = m.initializer(name);
    if (t.type() == dtype_id::float32)
      r.float32_inits.insert(name);
    else if (t.type() == dtype_id::float16)
      m.set_initializer(name, float16_to_float32(t));
  }
  for (auto& n : *g.mutable_node()) {
    if (n.op_type() == "Cast" && n.domain().empty()) {
      if (auto* to = find_attr(n, "to"); to != nullptr && to->i() == ::onnx::TensorProto::FLOAT16) {
        to->set_i(::onnx::TensorProto::FLOAT);
        r.casts.insert(n.output(0));
      } else if (to != nullptr && to->i() == ::onnx::TensorProto::FLOAT) {
        r.float_casts.insert(n.output(0));
      }
    } else if (n.op_type() == "ConstantOfShape") {
      if (auto* v = find_attr(n, "value"); v != nullptr)
        attr_tensor_to_f32(*v->mutable_t());
    }
  }
  return r;
}

void to_float16(model& m, const fp16_record& r, bool fp32_scales) {
  auto& g = *proto(m).mutable_graph();
  // Scales of the Q/DQ nodes.
  std::set<std::string> scales;
  bool standard_qdq = false;
  for (const auto& n : g.node()) {
    if ((qdq_op(n, "QuantizeLinear") || qdq_op(n, "DequantizeLinear")) && n.input_size() > 1) {
      scales.insert(n.input(1));
      standard_qdq = standard_qdq || n.domain() != "com.microsoft";
    }
  }
  // Initializers: float32 ones that were float16 or are new (weights, scales) become float16,
  // except the scales with UseFP32Scale and those the float16 model had in float32 already
  // (e.g. Resize scales, which ONNX defines as float).
  for (const auto& name : m.initializer_names()) {
    if (r.float32_inits.contains(name) || (fp32_scales && scales.contains(name)))
      continue;
    const tensor t = m.initializer(name);
    if (t.type() == dtype_id::float32)
      m.set_initializer(name, float32_to_float16(t));
  }
  for (auto* list : {g.mutable_input(), g.mutable_output()}) {
    for (auto& v : *list) {
      if (r.io.contains(v.name()) && elem_type(v) == ::onnx::TensorProto::FLOAT)
        set_elem_type(v, ::onnx::TensorProto::FLOAT16);
    }
  }
  if (fp32_scales) {
    g.clear_value_info();  // the Casts add float32 values; FillAllValueInfo's types are stale
  } else {
    for (auto& v : *g.mutable_value_info()) {
      if (elem_type(v) == ::onnx::TensorProto::FLOAT)
        set_elem_type(v, ::onnx::TensorProto::FLOAT16);
    }
  }
  for (auto& n : *g.mutable_node()) {
    if (n.op_type() != "Cast" || !n.domain().empty())
      continue;
    auto* to = find_attr(n, "to");
    if (to == nullptr)
      continue;
    // The model's Casts to float16, and the quantizer's Casts back to float (the dequantizing
    // half of a BFloat16 / Float16 pair, a bfloat16 weight's Cast) return to float16: their
    // consumers are float16 again. The model's own Casts to float stay float.
    if (r.casts.contains(n.output(0)) ||
        (to->i() == ::onnx::TensorProto::FLOAT && !r.float_casts.contains(n.output(0))))
      to->set_i(::onnx::TensorProto::FLOAT16);
  }
  if (fp32_scales) {
    // float32 scales: the float16 activations are cast to float32 before each QuantizeLinear
    // and each DequantizeLinear's float32 output is cast back to float16.
    ::google::protobuf::RepeatedPtrField<::onnx::NodeProto> out;
    auto cast = [&](const std::string& from, const std::string& to, int type) {
      ::onnx::NodeProto c;
      c.set_op_type("Cast");
      c.set_name(to + "_Cast");
      c.add_input(from);
      c.add_output(to);
      auto* a = c.add_attribute();
      a->set_name("to");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(type);
      return c;
    };
    for (auto& n : *g.mutable_node()) {
      const bool q =
          qdq_op(n, "QuantizeLinear") && n.input_size() > 1 && scales.contains(n.input(1));
      const bool dq =
          qdq_op(n, "DequantizeLinear") && n.input_size() > 1 && scales.contains(n.input(1));
      if (q) {
        const std::string x32 = n.input(0) + "_" + n.name() + "_fp32";
        *out.Add() = cast(n.input(0), x32, ::onnx::TensorProto::FLOAT);
        n.set_input(0, x32);
        *out.Add() = std::move(n);
      } else if (dq) {
        const std::string y = n.output(0), y32 = y + "_fp32";
        n.set_output(0, y32);
        *out.Add() = std::move(n);
        *out.Add() = cast(y32, y, ::onnx::TensorProto::FLOAT16);
      } else {
        *out.Add() = std::move(n);
      }
    }
    g.mutable_node()->Swap(&out);
  } else if (standard_qdq) {
    // QuantizeLinear takes a float16 input and DequantizeLinear returns float16 from opset 19.
    if (m.opset("").value_or(1) < 19)
      m.set_opset("", 19);
    if (m.ir_version() < 9)
      m.set_ir_version(9);
  }
}

bool float16_path(const model& in, const qconfig& cfg) {
  const bool half = is_float16_model(in);
  const option_value* q = cfg.extra_options.find("QuantizeFP16");
  if (!half && q != nullptr && q->is_bool() && q->as_bool()) {
    throw config_error("quark.quantize.fp16",
                       "QuantizeFP16 = true needs a float16 model (float16 graph inputs, outputs "
                       "or weights and no float32 graph input or output)");
  }
  return half;
}

bool converts_float16(const model& in, const qconfig& cfg) {
  const option_value* c = cfg.extra_options.find("ConvertFP16ToFP32");
  if (c == nullptr || !c->is_bool() || !c->as_bool())
    return false;
  const option_value* q = cfg.extra_options.find("QuantizeFP16");
  if (q != nullptr && q->is_bool() && q->as_bool()) {
    throw config_error("quark.config.conflict",
                       "ConvertFP16ToFP32 = true (quantize a float32 copy and keep it) and "
                       "QuantizeFP16 = true (quantize the model as float16) exclude each other");
  }
  return is_float16_model(in);
}

model quantize_float16_model(const model& in, const qconfig& cfg, calibration_data_reader& reader,
                             quantize_report* report, const quantize_run_options& run,
                             const float32_quantizer& quantize) {
  const option_value* u = cfg.extra_options.find("UseFP32Scale");
  const bool fp32_scales = u == nullptr || !u->is_bool() || u->as_bool();
  model m = in;
  m.constants_to_initializers();
  const fp16_record rec = to_float32(m);
  qconfig c = cfg;
  c.extra_options.erase("QuantizeFP16");
  c.extra_options.erase("UseFP32Scale");
  c.extra_options.set("OptimizeModel", false);
  float32_reader r32(reader);
  quantize_report rep;
  model q = quantize(m, c, r32, &rep, run);
  to_float16(q, rec, fp32_scales);
  q.validate();
  rep.notes.push_back(
      std::string("QuantizeFP16: float16 model quantized through a float32 copy; ") +
      (fp32_scales ? "float32 scales with Casts (UseFP32Scale)" : "float16 scales"));
  if (report != nullptr)
    *report = std::move(rep);
  return q;
}

std::optional<calib_sample> float32_reader::next() {
  auto s = inner_.next();
  if (!s)
    return s;
  for (auto& kv : *s) {
    if (kv.second.type() == dtype_id::float16)
      kv.second = float16_to_float32(kv.second);
  }
  return s;
}

}  // namespace quark::onnx::qz
