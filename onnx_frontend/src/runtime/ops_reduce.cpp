// SPDX-License-Identifier: MIT
// ReduceX operators. Axes come from the attribute before opset 13 (ReduceSum) / 18 (the others)
// and from the optional second input after; noop_with_empty_axes as the spec defines it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/broadcast.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

enum class reduce_kind { sum, mean, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };

template <reduce_kind K>
void reduce(kernel_context& c) {
  const tensor& x = c.in(0);
  const int axes_input_from = K == reduce_kind::sum ? 13 : 18;
  std::vector<std::int64_t> axes;
  bool axes_given = false;
  if (c.n.opset >= axes_input_from) {
    if (const tensor* t = c.opt(1)) {
      axes = read_ints(c, *t);
      axes_given = true;
    }
  } else if (c.n.has("axes")) {
    axes = c.n.attr_ints("axes");
    axes_given = true;
  }
  const bool keepdims = c.n.attr_i("keepdims", 1) != 0;
  const bool noop = c.n.attr_i("noop_with_empty_axes", 0) != 0;
  if (axes.empty() && noop && c.n.opset >= axes_input_from) {
    c.out(0) = x;
    return;
  }
  (void)axes_given;
  std::vector<bool> reduced(x.rank(), axes.empty());
  for (auto a : axes)
    reduced[norm_axis(c, a, x.rank())] = true;
  shape_t keep_shape = x.shape();
  shape_t out_shape;
  std::size_t count = 1;
  for (std::size_t d = 0; d < x.rank(); ++d) {
    if (reduced[d]) {
      count *= to_size(x.shape()[d]);
      keep_shape[d] = 1;
      if (keepdims)
        out_shape.push_back(1);
    } else {
      out_shape.push_back(x.shape()[d]);
    }
  }
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const std::size_t n_out = element_count(keep_shape);
    double init = 0.0;
    if constexpr (K == reduce_kind::max)
      init = -std::numeric_limits<double>::infinity();
    if constexpr (K == reduce_kind::min)
      init = std::numeric_limits<double>::infinity();
    if constexpr (K == reduce_kind::prod)
      init = 1.0;
    std::vector<double> acc(n_out, init);
    double shift = 0.0;
    std::vector<double> maxes;
    const T* px = x.data<T>().data();
    const auto plan = make_broadcast_plan(x.shape(), {keep_shape});
    auto visit = [&](auto&& f) {
      for_each_run(plan, [&](std::size_t o, const std::array<std::size_t, 3>& off, std::size_t n,
                             const std::array<std::size_t, 3>& st) {
        for (std::size_t i = 0; i < n; ++i)
          f(acc[off[0] + i * st[0]], static_cast<double>(px[o + i]), off[0] + i * st[0]);
      });
    };
    if constexpr (K == reduce_kind::log_sum_exp) {
      maxes.assign(n_out, -std::numeric_limits<double>::infinity());
      visit([&](double&, double v, std::size_t j) { maxes[j] = std::max(maxes[j], v); });
      visit([&](double& a, double v, std::size_t j) { a += std::exp(v - maxes[j]); });
    } else {
      visit([&](double& a, double v, std::size_t) {
        if constexpr (K == reduce_kind::sum || K == reduce_kind::mean ||
                      K == reduce_kind::log_sum) {
          a += v;
        } else if constexpr (K == reduce_kind::max) {
          a = std::max(a, v);
        } else if constexpr (K == reduce_kind::min) {
          a = std::min(a, v);
        } else if constexpr (K == reduce_kind::prod) {
          a *= v;
        } else if constexpr (K == reduce_kind::l1) {
          a += std::abs(v);
        } else {
          a += v * v;
        }
      });
    }
    (void)shift;
    tensor out(x.type(), out_shape);
    auto dst = out.data<T>();
    for (std::size_t j = 0; j < n_out; ++j) {
      double v = acc[j];
      if constexpr (K == reduce_kind::mean)
        v /= static_cast<double>(count);
      if constexpr (K == reduce_kind::l2)
        v = std::sqrt(v);
      if constexpr (K == reduce_kind::log_sum)
        v = std::log(v);
      if constexpr (K == reduce_kind::log_sum_exp)
        v = std::log(v) + maxes[j];
      if constexpr (std::is_integral_v<T>) {
        if constexpr (K == reduce_kind::max || K == reduce_kind::min) {
          if (count == 0)
            v = 0.0;
        }
      }
      dst[j] = saturate_cast<T>(v);
    }
    c.out(0) = std::move(out);
  });
}

}  // namespace

void register_reduce(registry_map& r) {
  r["ReduceSum"] = reduce<reduce_kind::sum>;
  r["ReduceMean"] = reduce<reduce_kind::mean>;
  r["ReduceMax"] = reduce<reduce_kind::max>;
  r["ReduceMin"] = reduce<reduce_kind::min>;
  r["ReduceProd"] = reduce<reduce_kind::prod>;
  r["ReduceL1"] = reduce<reduce_kind::l1>;
  r["ReduceL2"] = reduce<reduce_kind::l2>;
  r["ReduceLogSum"] = reduce<reduce_kind::log_sum>;
  r["ReduceLogSumExp"] = reduce<reduce_kind::log_sum_exp>;
  r["ReduceSumSquare"] = reduce<reduce_kind::sum_square>;
}

}  // namespace quark::onnx::rt
