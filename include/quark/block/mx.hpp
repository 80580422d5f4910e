// SPDX-License-Identifier: MIT
// OCP Microscaling (MX) formats, OCP MX v1.0: blocks of k elements (32 by default, any size)
// share one E8M0 scale X = 2^E; element i stores round(V_i / X) in an FP8/FP6/FP4 minifloat or
// MXINT8 (two's complement, implicit 2^-6), saturated to the element's max normal. An Inf/NaN
// element makes the block's scale NaN (every element decodes to NaN) and E is clamped to E8M0's
// [-127, 127]; compat_mode::quark reproduces AMD Quark's MXQuantizeDequantize instead (Inf/NaN
// elements pass through, E unclamped below, zeros from underflow lose their sign).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include <quark/block/block_format.hpp>
#include <quark/block/detail/block_loop.hpp>
#include <quark/block/detail/mx_kernel.hpp>
#include <quark/block/shared_scale.hpp>
#include <quark/block/storage.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/formats.hpp>

namespace quark {

/// MXFP8 (E4M3 elements, max 448, emax 8): 32 x 8 bits + 8-bit scale = 8.25 bits/element.
using mxfp8_e4m3 = block_format<float8_e4m3fn, float8_e8m0fnu, 32>;
/// MXFP8 (E5M2 elements, max 57344, emax 15): 8.25 bits/element.
using mxfp8_e5m2 = block_format<float8_e5m2, float8_e8m0fnu, 32>;
/// MXFP6 (E3M2 elements, max 28, emax 4): 6.25 bits/element.
using mxfp6_e3m2 = block_format<float6_e3m2fn, float8_e8m0fnu, 32>;
/// MXFP6 (E2M3 elements, max 7.5, emax 2): 6.25 bits/element.
using mxfp6_e2m3 = block_format<float6_e2m3fn, float8_e8m0fnu, 32>;
/// MXFP4 (E2M1 elements, values 0, .5, 1, 1.5, 2, 3, 4, 6, emax 2): 4.25 bits/element.
using mxfp4_e2m1 = block_format<float4_e2m1fn, float8_e8m0fnu, 32>;
/// MXINT8 (int8 q, element q * 2^-6 in [-2, 127/64], emax 0): 8.25 bits/element.
using mxint8 = block_format<std::int8_t, float8_e8m0fnu, 32>;

/// Options of the OCP MX kernels.
///
///     quark::mx_options o;                                  // OCP: floor scale, RNE, NaN blocks
///     o.scale_mode = quark::e8m0_scale_mode::even;          // Quark torch's default scale
///     o.compat = quark::compat_mode::quark;                 // Quark ONNX op bit-compatibility
struct mx_options {
  e8m0_scale_mode scale_mode = e8m0_scale_mode::floor;
  rounding element_rounding = rounding::nearest_even;  ///< any mode but stochastic
  compat_mode compat = compat_mode::standard;
};

/// Fake-quantizes (quantize then dequantize) an N-d row-major tensor with MX blocks of
/// `block_size` along `axis` (the last block of each row may be partial). No allocation; in and
/// out may alias exactly. Throws quark::invalid_argument on a bad shape, axis or block size.
///
///     std::size_t shape[] = {4, 64};
///     quark::mx_fake_quantize<quark::float4_e2m1fn>(x, y, shape, 1, 32);
template <class Element>
  requires detail::is_mx_element_v<Element>
void mx_fake_quantize(std::span<const float> in, std::span<float> out,
                      std::span<const std::size_t> shape, std::size_t axis, std::size_t block_size,
                      const mx_options& opt = {}) {
  if (block_size == 0) {
    QUARK_THROW(invalid_argument("quark.block.block_size", "block size must be positive"));
  }
  if (out.size() != in.size()) {
    QUARK_THROW(invalid_argument("quark.block.shape", "input and output sizes differ"));
  }
  const detail::block_layout l = detail::make_block_layout(shape, axis, in.size());
  detail::dispatch_rounding(opt.element_rounding, [&](auto r) {
    if (opt.compat == compat_mode::standard) {
      detail::mx_fake_quantize_impl<Element, decltype(r)::value, compat_mode::standard>(
          in.data(), out.data(), l, block_size, opt.scale_mode);
    } else {
      detail::mx_fake_quantize_impl<Element, decltype(r)::value, compat_mode::quark>(
          in.data(), out.data(), l, block_size, opt.scale_mode);
    }
  });
}

/// Fake-quantizes a 1-D sequence in blocks of B's block size (the last block may be partial).
///
///     quark::fake_quantize<quark::mxfp4_e2m1>(std::span<const float>(x), std::span(y));
template <block_format_of<block_family::ocp_mx> B>
void fake_quantize(std::span<const float> in, std::span<float> out, const mx_options& opt = {}) {
  const std::size_t shape[1] = {in.size()};
  mx_fake_quantize<typename block_traits<B>::element_type>(
      in, out, shape, 0, static_cast<std::size_t>(block_traits<B>::block_size), opt);
}

/// Fake-quantizes an N-d row-major tensor with blocks along `axis`.
template <block_format_of<block_family::ocp_mx> B>
void fake_quantize(std::span<const float> in, std::span<float> out,
                   std::span<const std::size_t> shape, std::size_t axis,
                   const mx_options& opt = {}) {
  mx_fake_quantize<typename block_traits<B>::element_type>(
      in, out, shape, axis, static_cast<std::size_t>(block_traits<B>::block_size), opt);
}

/// Quantizes rows x row_length floats (blocks along each row) into packed storage (layout in
/// storage.hpp). Storage always follows the OCP rules: compat_mode::quark has values with no
/// encoding and throws quark::invalid_argument ("quark.block.storage_compat").
///
///     auto l = quark::block_storage_layout_for<quark::mxfp4_e2m1>(1, x.size());
///     std::vector<std::uint8_t> e(l.element_bytes), s(l.scale_bytes);
///     quark::quantize<quark::mxfp4_e2m1>(x, x.size(), {e, s, {}});
template <block_format_of<block_family::ocp_mx> B>
void quantize(std::span<const float> in, std::size_t row_length, block_buffers out,
              const mx_options& opt = {}) {
  using elem = typename block_traits<B>::element_type;
  constexpr auto bs = static_cast<std::size_t>(block_traits<B>::block_size);
  constexpr int bits = block_traits<B>::element_bits;
  if (opt.compat != compat_mode::standard) {
    QUARK_THROW(invalid_argument("quark.block.storage_compat",
                                 "packed MX storage follows OCP; use compat_mode::standard"));
  }
  const std::size_t rows = row_length == 0 ? 0 : in.size() / row_length;
  const block_storage_layout l = block_storage_layout_for<B>(rows, row_length);
  detail::check_buffers(l, in.size(), out.elements.size(), out.scales.size(), 0);
  for (std::size_t i = 0; i < l.element_bytes; ++i)
    out.elements[i] = 0;
  detail::dispatch_rounding(opt.element_rounding, [&](auto r) {
    float tmp[bs];
    for (std::size_t row = 0; row < rows; ++row) {
      for (std::size_t b = 0; b < l.blocks_per_row; ++b) {
        // 1. The block's exponent and its fake-quantized values (exactly on the element grid).
        const std::size_t off = row * row_length + b * bs;
        const std::size_t n = row_length - b * bs < bs ? row_length - b * bs : bs;
        bool special = false;
        const int ef =
            detail::mx_block_exponent<elem>(in.data() + off, n, detail::unit_stride{},
                                            opt.scale_mode, compat_mode::standard, special);
        const bool nan_block = ef == std::numeric_limits<int>::min();
        out.scales[row * l.blocks_per_row + b] = static_cast<std::uint8_t>(nan_block ? 0xFF : ef);
        if (nan_block)
          continue;  // element codes stay 0
        detail::mx_block_apply<elem, decltype(r)::value, compat_mode::standard>(
            in.data() + off, tmp, n, detail::unit_stride{}, ef, false);
        // 2. Element codes: v / X is an element value, so the conversion is exact.
        for (std::size_t i = 0; i < n; ++i) {
          const float ev = detail::mul_pow2(tmp[i], 127 - ef);
          std::uint32_t code = 0;
          if constexpr (std::same_as<elem, std::int8_t>) {
            code = static_cast<std::uint8_t>(convert<std::int8_t>(ev * 64.0f));
          } else {
            code = convert<elem, policies::ocp_mx_element>(ev).to_bits();
          }
          detail::put_code(out.elements, off + i, bits, code);
        }
      }
    }
  });
}

/// Dequantizes packed MX storage (layout in storage.hpp) to rows x row_length floats.
template <block_format_of<block_family::ocp_mx> B>
void dequantize(block_const_buffers in, std::size_t row_length, std::span<float> out) {
  using elem = typename block_traits<B>::element_type;
  constexpr auto bs = static_cast<std::size_t>(block_traits<B>::block_size);
  constexpr int bits = block_traits<B>::element_bits;
  const std::size_t rows = row_length == 0 ? 0 : out.size() / row_length;
  const block_storage_layout l = block_storage_layout_for<B>(rows, row_length);
  detail::check_buffers(l, out.size(), in.elements.size(), in.scales.size(), 0);
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t i = 0; i < row_length; ++i) {
      const std::uint8_t s = in.scales[row * l.blocks_per_row + i / bs];
      const std::size_t idx = row * row_length + i;
      const std::uint32_t code = detail::get_code(in.elements, idx, bits);
      float v = 0.0f;
      if constexpr (std::same_as<elem, std::int8_t>) {
        v = static_cast<float>(static_cast<std::int8_t>(code)) * 0.015625f;
      } else {
        v = to_float(elem::from_bits(static_cast<typename elem::storage_type>(code)));
      }
      out[idx] = s == 0xFF ? std::numeric_limits<float>::quiet_NaN()
                           : detail::mul_pow2(v, static_cast<int>(s) - 127);
    }
  }
}

/// Quantizes rows x row_length floats into an owning packed tensor.
///
///     auto t = quark::make_block_tensor<quark::mxfp4_e2m1>(x, 64);
template <block_format_of<block_family::ocp_mx> B>
block_tensor<B> make_block_tensor(std::span<const float> in, std::size_t row_length,
                                  const mx_options& opt = {}) {
  const std::size_t rows = row_length == 0 ? 0 : in.size() / row_length;
  block_tensor<B> t(block_storage_layout_for<B>(rows, row_length));
  quantize<B>(in, row_length, t.buffers(), opt);
  return t;
}

}  // namespace quark
