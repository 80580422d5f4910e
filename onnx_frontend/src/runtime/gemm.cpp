// SPDX-License-Identifier: MIT
#include "runtime/gemm.hpp"

// GCC 12 reports false maybe-uninitialized warnings inside Eigen's AVX-512 packet code (with
// -march=native), at the point where our GEMM instantiates it; silence them for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

namespace quark::onnx::rt {

namespace {

using stride_t = Eigen::OuterStride<>;
using row_mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using cmap = Eigen::Map<const row_mat, Eigen::Unaligned, stride_t>;
using mmap = Eigen::Map<row_mat, Eigen::Unaligned, stride_t>;

Eigen::Index idx(std::size_t v) {
  return static_cast<Eigen::Index>(v);
}

/// One block: rows [r0, r1) and columns [c0, c1) of C.
void gemm_block(bool trans_a, bool trans_b, std::size_t r0, std::size_t r1, std::size_t c0,
                std::size_t c1, std::size_t k, float alpha, const float* a, std::size_t lda,
                const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const std::size_t m = r1 - r0;
  const std::size_t n = c1 - c0;
  mmap C(c + r0 * ldc + c0, idx(m), idx(n), stride_t(idx(ldc)));
  // Views of the A rows and B columns this block needs.
  auto run = [&](const auto& A, const auto& B) {
    if (beta == 0.0f) {
      if (alpha == 1.0f) {
        C.noalias() = A * B;
      } else {
        C.noalias() = alpha * (A * B);
      }
    } else {
      if (beta != 1.0f)
        C *= beta;
      C.noalias() += alpha * (A * B);
    }
  };
  if (!trans_a && !trans_b) {
    run(cmap(a + r0 * lda, idx(m), idx(k), stride_t(idx(lda))),
        cmap(b + c0, idx(k), idx(n), stride_t(idx(ldb))));
  } else if (!trans_a && trans_b) {
    run(cmap(a + r0 * lda, idx(m), idx(k), stride_t(idx(lda))),
        cmap(b + c0 * ldb, idx(n), idx(k), stride_t(idx(ldb))).transpose());
  } else if (trans_a && !trans_b) {
    run(cmap(a + r0, idx(k), idx(m), stride_t(idx(lda))).transpose(),
        cmap(b + c0, idx(k), idx(n), stride_t(idx(ldb))));
  } else {
    run(cmap(a + r0, idx(k), idx(m), stride_t(idx(lda))).transpose(),
        cmap(b + c0 * ldb, idx(n), idx(k), stride_t(idx(ldb))).transpose());
  }
}

}  // namespace

void gemm(thread_pool* pool, bool trans_a, bool trans_b, std::size_t m, std::size_t n,
          std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
          std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0)
    return;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (!pool || pool->size() == 1 || flops < 2e6) {
    gemm_block(trans_a, trans_b, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= n) {
    pool->parallel_for(m, 16, [&](std::size_t r0, std::size_t r1) {
      gemm_block(trans_a, trans_b, r0, r1, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
  } else {
    // Column blocks rounded to 16 floats keep each thread's stores on whole cache lines.
    const std::size_t blocks = (n + 15) / 16;
    pool->parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
      const std::size_t c0 = b0 * 16;
      const std::size_t c1 = std::min(n, b1 * 16);
      gemm_block(trans_a, trans_b, 0, m, c0, c1, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
  }
}

}  // namespace quark::onnx::rt
