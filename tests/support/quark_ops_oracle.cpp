// SPDX-License-Identifier: MIT
#include "support/quark_ops_oracle.hpp"

namespace quark::test {

void bfp_oracle(const bfp_op_attributes& a, std::span<const float> in,
                std::span<const std::int64_t> shape, std::span<float> out) {
  bfp_quantize_dequantize(a, in, shape, out);
}

void bfp_oracle(const bfp_op_attributes& a, std::span<const float16> in,
                std::span<const std::int64_t> shape, std::span<float16> out) {
  bfp_quantize_dequantize(a, in, shape, out);
}

void mx_oracle(const mx_op_attributes& a, std::span<const float> in,
               std::span<const std::int64_t> shape, std::span<float> out) {
  mx_quantize_dequantize(a, in, shape, out);
}

}  // namespace quark::test
