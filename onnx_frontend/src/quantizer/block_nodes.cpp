// SPDX-License-Identifier: MIT
#include "quantizer/block_nodes.hpp"

#include "quantizer/tensor_build.hpp"

namespace quark::onnx::qz {

namespace {

void add_string(::onnx::NodeProto& n, const char* name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}

std::int64_t int_attr(const node_info& n, const char* name, std::int64_t fallback) {
  for (const auto& a : n.attributes) {
    if (a.name == name) {
      if (const auto* v = std::get_if<std::int64_t>(&a.value))
        return *v;
    }
  }
  return fallback;
}

/// §7.7 for one reader: the axis its reduction runs along, if the op fixes one.
std::optional<std::int64_t> reader_axis(const node_info& n, const std::string& tensor,
                                        std::optional<std::size_t> rank, std::int64_t opset) {
  const bool known = rank.has_value();
  const std::int64_t r = known ? static_cast<std::int64_t>(*rank) : 0;
  const bool a = !n.inputs.empty() && n.inputs[0] == tensor;
  const bool b = n.inputs.size() > 1 && n.inputs[1] == tensor;
  if (n.op_type == "MatMul") {
    if (a)
      return known ? r - 1 : -1;
    if (b)
      return known ? r - 2 : -2;
  } else if (n.op_type == "Gemm") {
    if (a)
      return int_attr(n, "transA", 0) != 0 ? 0 : 1;
    if (b)
      return int_attr(n, "transB", 0) != 0 ? 1 : 0;
  } else if (n.op_type == "Softmax" && a) {
    return int_attr(n, "axis", opset >= 13 ? -1 : 1);  // Softmax's default axis moved at 13
  }
  return std::nullopt;
}

}  // namespace

::onnx::NodeProto make_block_node(const block_op& b, const std::string& name, const std::string& in,
                                  const std::string& out, std::int64_t axis) {
  ::onnx::NodeProto n;
  n.set_op_type(b.op);
  n.set_domain(block_domain);
  n.set_name(name);
  n.add_input(in);
  n.add_output(out);
  if (b.op == "MXQuantizeDequantize") {
    add_string(n, "element_dtype", b.element_dtype);
    add_int_attribute(n, "axis", axis);
    add_int_attribute(n, "block_size", b.block_size);
    add_int_attribute(n, "rounding_mode", b.rounding_mode);
    return n;
  }
  add_string(n, "bfp_method", b.bfp_method);
  add_int_attribute(n, "axis", axis);
  add_int_attribute(n, "bit_width", b.bit_width);
  add_int_attribute(n, "block_size", b.block_size);
  add_int_attribute(n, "rounding_mode", b.rounding_mode);
  if (b.bfp_method != "to_bfp") {
    add_int_attribute(n, "sub_block_size", b.sub_block_size);
    add_int_attribute(n, "sub_block_shift_bits", b.sub_block_shift_bits);
  }
  // Legacy BFPAttributes only (the op defaults are 0).
  if (b.convert_to_bfloat_before_bfp != 0)
    add_int_attribute(n, "convert_to_bfloat_before_bfp", b.convert_to_bfloat_before_bfp);
  if (b.use_compiler_version_cpu_kernel != 0)
    add_int_attribute(n, "use_compiler_version_cpu_kernel", b.use_compiler_version_cpu_kernel);
  return n;
}

std::int64_t block_axis(const model& m, const std::vector<node_info>& nodes,
                        const std::string& tensor, const std::vector<std::size_t>& readers,
                        const tspec& spec, bool refine, std::optional<std::size_t> rank) {
  if (spec.axis)
    return *spec.axis;
  if (rank && *rank <= 1)
    return 0;
  if (refine) {
    for (const std::size_t i : readers) {
      if (const auto a = reader_axis(nodes[i], tensor, rank, m.opset("").value_or(1)))
        return *a;
    }
    if (const auto p = m.producer(tensor); p && nodes[*p].op_type == "MatMul")
      return -1;  // the output follows input A's block axis (an activation: -1)
  }
  return 1;
}

}  // namespace quark::onnx::qz
