// SPDX-License-Identifier: MIT
// The header functions of include/quark/block/quark_ops.hpp (proven in tests/block) as the oracle
// of the quantizer tests, compiled once in quark_ops_oracle.cpp for every test that links it:
// their run-time dispatch instantiates every block kernel, which was more than half of one
// test's compile time under the sanitizers (25 of 45 s) and was paid again by each test using it.
#pragma once

#include <cstdint>
#include <span>

#include <quark/block/quark_ops.hpp>

namespace quark::test {

/// quark::bfp_quantize_dequantize (float32).
void bfp_oracle(const bfp_op_attributes& a, std::span<const float> in,
                std::span<const std::int64_t> shape, std::span<float> out);
/// quark::bfp_quantize_dequantize (float16 in and out).
void bfp_oracle(const bfp_op_attributes& a, std::span<const float16> in,
                std::span<const std::int64_t> shape, std::span<float16> out);
/// quark::mx_quantize_dequantize (float32).
void mx_oracle(const mx_op_attributes& a, std::span<const float> in,
               std::span<const std::int64_t> shape, std::span<float> out);

}  // namespace quark::test
