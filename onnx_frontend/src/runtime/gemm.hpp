// SPDX-License-Identifier: MIT
// Row-major float GEMM on Eigen, split over the pool by rows of C (or by columns when C is
// short and wide, as in convolutions): C[m,n] = alpha * op(A) op(B) + beta * C.
#pragma once

#include <cstddef>

#include "runtime/thread_pool.hpp"

namespace quark::onnx::rt {

/// C (m x n, leading dim ldc) = A (m x k) * B (k x n) [+ C if accumulate]. A and B row-major with
/// leading dims lda, ldb; trans_a / trans_b read A as (k x m) / B as (n x k) storage.
void gemm(thread_pool* pool, bool trans_a, bool trans_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc);

}  // namespace quark::onnx::rt
