// SPDX-License-Identifier: MIT
// AMD Quark's fused quantize-dequantize ops, domain com.amd.quark version 1 (quark-spec §1.7-
// §1.11): BFPQuantizeDequantize (BFP16, MX4/6/9) and MXQuantizeDequantize (OCP MX). The numbers
// come from include/quark/block/quark_ops.hpp; this file reads and checks the attributes (an error
// names the node and the attribute) and handles float32 / float16 tensors.
#include <span>
#include <string>

#include <quark/block/quark_ops.hpp>

#include "runtime/block_ops.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// Every attribute of the node must be one the op knows, with the right kind.
void check_attributes(const kernel_context& c,
                      std::initializer_list<std::pair<std::string_view, attribute::kind>> known) {
  for (const auto& [name, a] : c.n.attrs) {
    bool found = false;
    for (const auto& [k, kind] : known) {
      if (name != k)
        continue;
      found = true;
      if (a.k != kind) {
        c.fail("quark.block.attribute",
               "attribute '" + name + "' must be " +
                   (kind == attribute::kind::s ? "a string" : "an integer"));
      }
    }
    if (!found) {
      c.fail("quark.block.attribute",
             "unknown attribute '" + name + "' (" + c.n.op + " of domain com.amd.quark)");
    }
  }
}

/// Runs `fn(attrs, in, shape, out)` on float32 or float16 input 0; header errors (bad attribute
/// values, axis out of range) are rethrown naming the node and the attribute.
template <class Attr, class Fn>
void run_block_op(kernel_context& c, const Attr& a, Fn&& fn) {
  const tensor& x = c.in(0);
  if (x.type() != dtype_id::float32 && x.type() != dtype_id::float16) {
    c.fail("quark.onnx.runtime", "input '" + c.n.inputs[0] + "' is " +
                                     std::string(dtype_name(x.type())) +
                                     ", expected float32 or float16");
  }
  try {
    validate(a);
    const shape_t shape = x.shape();
    const std::size_t n = x.size();  // x may be moved into the output below
    if (x.type() == dtype_id::float32) {
      const float* src = x.data<float>().data();
      tensor out = c.output_like({0}, dtype_id::float32, shape);
      fn(a, std::span<const float>(src, n), std::span<const std::int64_t>(shape),
         out.data<float>());
      c.out(0) = std::move(out);
    } else {
      const quark::float16* src = x.data<quark::float16>().data();
      tensor out = c.output_like({0}, dtype_id::float16, shape);
      fn(a, std::span<const quark::float16>(src, n), std::span<const std::int64_t>(shape),
         out.data<quark::float16>());
      c.out(0) = std::move(out);
    }
  } catch (const quark::error& e) {
    // "quark.block.rounding_mode" names the attribute; axis errors name the axis.
    std::string attr(e.id());
    if (const auto dot = attr.rfind('.'); dot != std::string::npos)
      attr = attr.substr(dot + 1);
    c.fail(std::string(e.id()), "attribute '" + attr + "': " + e.what());
  }
}

void k_bfp(kernel_context& c) {
  using K = attribute::kind;
  check_attributes(c, {{"bfp_method", K::s},
                       {"axis", K::i},
                       {"bit_width", K::i},
                       {"block_size", K::i},
                       {"rounding_mode", K::i},
                       {"sub_block_size", K::i},
                       {"sub_block_shift_bits", K::i},
                       {"convert_to_bfloat_before_bfp", K::i},
                       {"use_compiler_version_cpu_kernel", K::i}});
  const quark::bfp_op_attributes a = quark::read_bfp_attributes(
      [&](const char* k, std::int64_t d) { return c.n.attr_i(k, d); },
      [&](const char* k, const std::string& d) { return c.n.attr_s(k, d); });
  run_block_op(c, a, [](const auto& at, auto in, auto shape, auto out) {
    quark::bfp_quantize_dequantize(at, in, shape, out);
  });
}

void k_mx(kernel_context& c) {
  using K = attribute::kind;
  check_attributes(
      c, {{"element_dtype", K::s}, {"axis", K::i}, {"block_size", K::i}, {"rounding_mode", K::i}});
  const quark::mx_op_attributes a = quark::read_mx_attributes(
      [&](const char* k, std::int64_t d) { return c.n.attr_i(k, d); },
      [&](const char* k, const std::string& d) { return c.n.attr_s(k, d); });
  run_block_op(c, a, [](const auto& at, auto in, auto shape, auto out) {
    quark::mx_quantize_dequantize(at, in, shape, out);
  });
}

}  // namespace

void bfp_quantize_dequantize_f32(const quark::bfp_op_attributes& a, std::span<const float> in,
                                 std::span<const std::int64_t> shape, std::span<float> out) {
  quark::bfp_quantize_dequantize(a, in, shape, out);
}

void mx_quantize_dequantize_f32(const quark::mx_op_attributes& a, std::span<const float> in,
                                std::span<const std::int64_t> shape, std::span<float> out) {
  quark::mx_quantize_dequantize(a, in, shape, out);
}

void register_quark_ops(registry_map& r) {
  r["com.amd.quark:BFPQuantizeDequantize"] = k_bfp;
  r["com.amd.quark:MXQuantizeDequantize"] = k_mx;
}

}  // namespace quark::onnx::rt
