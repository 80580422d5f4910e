// SPDX-License-Identifier: MIT
// MatMul (numpy semantics: 1-D promotion, broadcast batch dimensions) and Gemm.
#include <algorithm>

#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/matmul_shape.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

void k_matmul(kernel_context& c) {
  const tensor& a = float_input(c, 0);
  const tensor& b = float_input(c, 1);
  const matmul_shape s = plan_matmul(c, a.shape(), b.shape());
  tensor out(dtype_id::float32, s.out);
  const float* pa = a.data<float>().data();
  const float* pb = b.data<float>().data();
  float* po = out.data<float>().data();
  for (std::size_t bi = 0; bi < s.a_index.size(); ++bi) {
    gemm(&c.pool, false, false, s.m, s.n, s.k, 1.0f, pa + s.a_index[bi] * s.m * s.k, s.k,
         pb + s.b_index[bi] * s.k * s.n, s.n, 0.0f, po + bi * s.m * s.n, s.n);
  }
  c.out(0) = std::move(out);
}

void k_gemm(kernel_context& c) {
  const tensor& a = float_input(c, 0);
  const tensor& b = float_input(c, 1);
  if (a.rank() != 2 || b.rank() != 2)
    c.fail("quark.onnx.shape", "Gemm needs 2-D A and B");
  const bool ta = c.n.attr_i("transA", 0) != 0;
  const bool tb = c.n.attr_i("transB", 0) != 0;
  const float alpha = c.n.attr_f("alpha", 1.0f);
  float beta = c.n.attr_f("beta", 1.0f);
  const std::size_t m = to_size(ta ? a.shape()[1] : a.shape()[0]);
  const std::size_t k = to_size(ta ? a.shape()[0] : a.shape()[1]);
  const std::size_t kb = to_size(tb ? b.shape()[1] : b.shape()[0]);
  const std::size_t n = to_size(tb ? b.shape()[0] : b.shape()[1]);
  if (k != kb) {
    c.fail("quark.onnx.shape",
           "inner dimensions differ: " + shape_string(a.shape()) + " x " + shape_string(b.shape()));
  }
  tensor out(dtype_id::float32, {to_i64(m), to_i64(n)});
  float* po = out.data<float>().data();
  if (const tensor* bias = c.opt(2); bias && beta != 0.0f) {
    const tensor& cb = float_input(c, 2);
    (void)bias;
    const shape_t target{to_i64(m), to_i64(n)};
    const shape_t bs = broadcast_shapes(c, cb.shape(), target);
    if (bs != target)
      c.fail("quark.onnx.shape", "bias " + shape_string(cb.shape()) + " too big");
    const auto st = broadcast_strides(cb.shape(), target);
    const float* pc = cb.data<float>().data();
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j)
        po[i * n + j] = pc[i * st[0] + j * st[1]];
    }
  } else {
    beta = 0.0f;
  }
  gemm(&c.pool, ta, tb, m, n, k, alpha, a.data<float>().data(), to_size(a.shape()[1]),
       b.data<float>().data(), to_size(b.shape()[1]), beta, po, n);
  c.out(0) = std::move(out);
}

}  // namespace

void register_linalg(registry_map& r) {
  r["MatMul"] = k_matmul;
  r["Gemm"] = k_gemm;
}

}  // namespace quark::onnx::rt
