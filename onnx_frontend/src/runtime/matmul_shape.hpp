// SPDX-License-Identifier: MIT
// The numpy-matmul shapes shared by MatMul and MatMulInteger: 1-D operands promoted to matrices
// (and the promoted dimension dropped from the output), batch dimensions broadcast.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/kernel.hpp"

namespace quark::onnx::rt {

struct matmul_shape {
  std::size_t m = 0, k = 0, n = 0;
  shape_t out;  ///< the output shape
  /// For output matrix i (row-major over the broadcast batch dimensions): the index of the
  /// [m, k] matrix of A and of the [k, n] matrix of B it multiplies.
  std::vector<std::size_t> a_index, b_index;
};

/// Fails naming the node on a scalar operand, different inner dimensions or batch dimensions
/// that do not broadcast.
inline matmul_shape plan_matmul(const kernel_context& c, const shape_t& a, const shape_t& b) {
  if (a.empty() || b.empty())
    c.fail("quark.onnx.shape", "MatMul of a scalar");
  shape_t sa = a;
  shape_t sb = b;
  const bool a_vec = sa.size() == 1;
  const bool b_vec = sb.size() == 1;
  if (a_vec)
    sa.insert(sa.begin(), 1);
  if (b_vec)
    sb.push_back(1);
  matmul_shape s;
  s.m = to_size(sa[sa.size() - 2]);
  s.k = to_size(sa.back());
  s.n = to_size(sb.back());
  if (to_size(sb[sb.size() - 2]) != s.k) {
    c.fail("quark.onnx.shape",
           "inner dimensions differ: " + shape_string(a) + " x " + shape_string(b));
  }
  const shape_t ba(sa.begin(), sa.end() - 2);
  const shape_t bb(sb.begin(), sb.end() - 2);
  const shape_t batch = broadcast_shapes(c, ba, bb);
  s.out = batch;
  if (!a_vec)
    s.out.push_back(to_i64(s.m));
  if (!b_vec)
    s.out.push_back(to_i64(s.n));
  const std::size_t nb = element_count(batch);
  const auto st_a = broadcast_strides(ba, batch);
  const auto st_b = broadcast_strides(bb, batch);
  std::vector<std::size_t> idx(batch.size(), 0);
  for (std::size_t bi = 0; bi < nb; ++bi) {
    std::size_t oa = 0, ob = 0;
    for (std::size_t d = 0; d < batch.size(); ++d) {
      oa += idx[d] * st_a[d];
      ob += idx[d] * st_b[d];
    }
    s.a_index.push_back(oa);
    s.b_index.push_back(ob);
    for (std::size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < to_size(batch[d]))
        break;
      idx[d] = 0;
    }
  }
  return s;
}

}  // namespace quark::onnx::rt
