// SPDX-License-Identifier: MIT
// Element-wise operators: arithmetic and comparisons with numpy broadcasting, activations,
// logic, Where, Clip, Cast.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include <quark/core/policy.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/traits.hpp>
#include <quark/dtype/visit.hpp>

#include "runtime/broadcast.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

// ---- binary ---------------------------------------------------------------------------------

/// out[i] = f(a[i], b[i]) with broadcasting; A/B input element types, O output type.
template <class A, class B, class O, class F>
void binary(kernel_context& c, const tensor& a, const tensor& b, dtype_id out_type, F f) {
  const shape_t shape = broadcast_shapes(c, a.shape(), b.shape());
  const A* pa = a.data<A>().data();
  const B* pb = b.data<B>().data();
  const auto plan = make_broadcast_plan(shape, {a.shape(), b.shape()});
  // In place when an operand dies here: element i of the output only reads element i of it.
  tensor out = (&a == c.inputs[0] && &b == c.inputs[1]) ? c.output_like({0, 1}, out_type, shape)
                                                        : tensor(out_type, shape);
  O* po = out.data<O>().data();
  if constexpr (!std::is_same_v<A, float>) {
    // Other element types (shape arithmetic, masks, the rare int or double tensor): one strided
    // loop, no split over the pool. Each of the ~150 (operator, type) instantiations in this file
    // then compiles to a few lines instead of four specialised loops and a chunked parallel path.
    for_each_run(plan, [&](std::size_t o, const std::array<std::size_t, 3>& off, std::size_t n,
                           const std::array<std::size_t, 3>& st) {
      for (std::size_t i = 0; i < n; ++i)
        po[o + i] = f(pa[off[0] + i * st[0]], pb[off[1] + i * st[1]]);
    });
  } else {
    auto run = [&](std::size_t o, const std::array<std::size_t, 3>& off, std::size_t n,
                   const std::array<std::size_t, 3>& st) {
      const A* x = pa + off[0];
      const B* y = pb + off[1];
      O* z = po + o;
      if (st[0] == 1 && st[1] == 1) {
        for (std::size_t i = 0; i < n; ++i)
          z[i] = f(x[i], y[i]);
      } else if (st[0] == 1 && st[1] == 0) {
        const B yv = *y;
        for (std::size_t i = 0; i < n; ++i)
          z[i] = f(x[i], yv);
      } else if (st[0] == 0 && st[1] == 1) {
        const A xv = *x;
        for (std::size_t i = 0; i < n; ++i)
          z[i] = f(xv, y[i]);
      } else {
        for (std::size_t i = 0; i < n; ++i)
          z[i] = f(x[i * st[0]], y[i * st[1]]);
      }
    };
    // A broadcast of at most two levels (same shapes or a scalar operand: one run; a per-channel
    // operand: one run per row): chunks of whole rows (or of the one run) are split over the pool,
    // each taken by whichever thread is free and handed to the chunk sink (if any) by the thread
    // that computed it, while it is still in that core's cache.
    if (plan.dims.size() <= 2 && plan.total >= stream_min_values) {
      const std::size_t inner = plan.dims.back();
      const std::size_t rows = plan.dims.size() == 2 ? plan.dims[0] : 1;
      const std::array<std::size_t, 3> st{plan.strides[0].back(), plan.strides[1].back(), 0};
      const bool sink = std::is_same_v<O, float> && c.chunks;
      auto hand_on = [&](std::size_t part, std::size_t at, std::size_t m) {
        if constexpr (std::is_same_v<O, float>) {
          if (sink)
            c.stream(part, po + at, 1, m, m);
        }
      };
      if (rows == 1) {
        for_each_chunk(c.pool, inner, stream_chunk,
                       [&](std::size_t part, std::size_t lo, std::size_t hi) {
                         run(lo, {lo * st[0], lo * st[1], 0}, hi - lo, st);
                         hand_on(part, lo, hi - lo);
                       });
      } else {
        const std::array<std::size_t, 2> row_st{plan.strides[0][0], plan.strides[1][0]};
        const std::size_t per = std::max<std::size_t>(1, stream_chunk / inner);
        for_each_chunk(c.pool, rows, per, [&](std::size_t part, std::size_t r0, std::size_t r1) {
          for (std::size_t r = r0; r < r1; ++r)
            run(r * inner, {r * row_st[0], r * row_st[1], 0}, inner, st);
          hand_on(part, r0 * inner, (r1 - r0) * inner);
        });
      }
    } else {
      for_each_run(plan, run);
    }
  }
  c.out(0) = std::move(out);
}

template <class Op>
void arith(kernel_context& c) {
  const tensor& a = c.in(0);
  const tensor& b = c.in(1);
  require_same_type(c, a, b);
  dispatch_numeric(c, a.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    binary<T, T, T>(c, a, b, a.type(), [](T x, T y) { return static_cast<T>(Op{}(x, y)); });
  });
}

struct add_op {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x + y);
  }
};
struct sub_op {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x - y);
  }
};
struct mul_op {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x * y);
  }
};
struct div_op {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return y == 0 ? T(0) : static_cast<T>(x / y);
    } else {
      return x / y;
    }
  }
};
struct min_op {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (is_float_v<T>) {
      if (std::isnan(x) || std::isnan(y))
        return std::numeric_limits<T>::quiet_NaN();
    }
    return std::min(x, y);
  }
};
struct max_op {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (is_float_v<T>) {
      if (std::isnan(x) || std::isnan(y))
        return std::numeric_limits<T>::quiet_NaN();
    }
    return std::max(x, y);
  }
};

void k_add(kernel_context& c) {
  arith<add_op>(c);
}
void k_sub(kernel_context& c) {
  arith<sub_op>(c);
}
void k_mul(kernel_context& c) {
  arith<mul_op>(c);
}
void k_div(kernel_context& c) {
  arith<div_op>(c);
}

template <class Op>
void variadic(kernel_context& c) {
  if (c.input_count() == 0)
    c.fail("quark.onnx.runtime", "needs at least one input");
  tensor acc = c.in(0);
  for (std::size_t i = 1; i < c.input_count(); ++i) {
    const tensor& b = c.in(i);
    require_same_type(c, acc, b);
    dispatch_numeric(c, acc.type(), [&](auto id) {
      using T = typename decltype(id)::type;
      binary<T, T, T>(c, acc, b, acc.type(), [](T x, T y) { return Op{}(x, y); });
    });
    acc = std::move(c.out(0));
  }
  c.out(0) = std::move(acc);
}
void k_min(kernel_context& c) {
  variadic<min_op>(c);
}
void k_max(kernel_context& c) {
  variadic<max_op>(c);
}
void k_sum(kernel_context& c) {
  variadic<add_op>(c);
}

void k_pow(kernel_context& c) {
  const tensor& a = c.in(0);
  const tensor& b = c.in(1);
  // The exponent is converted to double; the result has the base's type.
  tensor e(dtype_id::float64, b.shape());
  const auto ev = read_doubles(b);
  std::copy(ev.begin(), ev.end(), e.data<double>().begin());
  dispatch_numeric(c, a.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    binary<T, double, T>(c, a, e, a.type(), [](T x, double y) {
      if constexpr (std::is_same_v<T, float>) {
        if (y == 2.0)
          return x * x;
        if (y == 0.5)
          return std::sqrt(x);
        return std::pow(x, static_cast<float>(y));
      } else if constexpr (std::is_same_v<T, double>) {
        return std::pow(x, y);
      } else {
        return saturate_cast<T>(std::pow(static_cast<double>(x), y));
      }
    });
  });
}

void k_prelu(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& slope = c.in(1);
  require_same_type(c, x, slope);
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    binary<T, T, T>(c, x, slope, x.type(),
                    [](T v, T s) { return v < T(0) ? static_cast<T>(v * s) : v; });
  });
}

template <class Cmp>
void compare(kernel_context& c) {
  const tensor& a = c.in(0);
  const tensor& b = c.in(1);
  require_same_type(c, a, b);
  if (a.type() == dtype_id::boolean) {
    binary<bool, bool, bool>(c, a, b, dtype_id::boolean,
                             [](bool x, bool y) { return Cmp{}(x, y); });
    return;
  }
  dispatch_numeric(c, a.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    binary<T, T, bool>(c, a, b, dtype_id::boolean, [](T x, T y) { return Cmp{}(x, y); });
  });
}
void k_equal(kernel_context& c) {
  compare<std::equal_to<>>(c);
}
void k_less(kernel_context& c) {
  compare<std::less<>>(c);
}
void k_greater(kernel_context& c) {
  compare<std::greater<>>(c);
}
void k_less_equal(kernel_context& c) {
  compare<std::less_equal<>>(c);
}
void k_greater_equal(kernel_context& c) {
  compare<std::greater_equal<>>(c);
}

template <class Op>
void logic(kernel_context& c) {
  const tensor& a = c.in(0);
  const tensor& b = c.in(1);
  if (a.type() != dtype_id::boolean || b.type() != dtype_id::boolean) {
    c.fail("quark.onnx.runtime", "logical operators need bool inputs");
  }
  binary<bool, bool, bool>(c, a, b, dtype_id::boolean, [](bool x, bool y) { return Op{}(x, y); });
}
struct xor_op {
  bool operator()(bool x, bool y) const { return x != y; }
};
void k_and(kernel_context& c) {
  logic<std::logical_and<>>(c);
}
void k_or(kernel_context& c) {
  logic<std::logical_or<>>(c);
}
void k_xor(kernel_context& c) {
  logic<xor_op>(c);
}

void k_not(kernel_context& c) {
  const tensor& a = c.in(0);
  if (a.type() != dtype_id::boolean)
    c.fail("quark.onnx.runtime", "Not needs a bool input");
  tensor out(dtype_id::boolean, a.shape());
  auto src = a.data<bool>();
  auto dst = out.data<bool>();
  for (std::size_t i = 0; i < src.size(); ++i)
    dst[i] = !src[i];
  c.out(0) = std::move(out);
}

void k_where(kernel_context& c) {
  const tensor& cond = c.in(0);
  const tensor& x = c.in(1);
  const tensor& y = c.in(2);
  if (cond.type() != dtype_id::boolean)
    c.fail("quark.onnx.runtime", "condition must be bool");
  require_same_type(c, x, y);
  const shape_t shape =
      broadcast_shapes(c, broadcast_shapes(c, cond.shape(), x.shape()), y.shape());
  const auto plan = make_broadcast_plan(shape, {cond.shape(), x.shape(), y.shape()});
  tensor out(x.type(), shape);
  const std::size_t es = element_size(x.type());
  const bool* pc = cond.data<bool>().data();
  const std::byte* px = x.bytes().data();
  const std::byte* py = y.bytes().data();
  std::byte* po = out.bytes().data();
  for_each_run(plan, [&](std::size_t o, const std::array<std::size_t, 3>& off, std::size_t n,
                         const std::array<std::size_t, 3>& st) {
    for (std::size_t i = 0; i < n; ++i) {
      const bool pick = pc[off[0] + i * st[0]];
      const std::byte* src = pick ? px + (off[1] + i * st[1]) * es : py + (off[2] + i * st[2]) * es;
      std::copy(src, src + es, po + (o + i) * es);
    }
  });
  c.out(0) = std::move(out);
}

// ---- unary ----------------------------------------------------------------------------------

/// Runs fill(begin, end), which writes elements [begin, end) of output 0 (`dst`, n elements),
/// over the pool; a float output of at least stream_min_values elements goes in stream_chunk
/// chunks, each handed to the chunk sink (if any) by the thread that computed it.
template <class T, class F>
void map_elements(kernel_context& c, std::size_t n, T* dst, F&& fill) {
  if (!std::is_same_v<T, float> || n < stream_min_values) {
    c.pool.parallel_for(n, 1 << 15, fill);
    return;
  }
  for_each_chunk(c.pool, n, stream_chunk, [&](std::size_t part, std::size_t b, std::size_t e) {
    fill(b, e);
    if constexpr (std::is_same_v<T, float>)
      c.stream(part, dst + b, 1, e - b, e - b);
  });
}

/// out = f(x) for float32/float64 inputs, split over the pool for large tensors.
template <class F>
void unary_float(kernel_context& c, F f) {
  const tensor& x = c.in(0);
  dispatch_float(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const T* src = x.data<T>().data();
    const std::size_t n = x.size();
    tensor out = c.output_like({0}, x.type(), x.shape());
    T* dst = out.data<T>().data();
    map_elements(c, n, dst, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i)
        dst[i] = static_cast<T>(f(src[i]));
    });
    c.out(0) = std::move(out);
  });
}

/// out = f(x) for any numeric input.
template <class F>
void unary_numeric(kernel_context& c, F f) {
  const tensor& x = c.in(0);
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    tensor out(x.type(), x.shape());
    auto src = x.data<T>();
    auto dst = out.data<T>();
    for (std::size_t i = 0; i < src.size(); ++i)
      dst[i] = static_cast<T>(f(src[i]));
    c.out(0) = std::move(out);
  });
}

void k_sqrt(kernel_context& c) {
  unary_float(c, [](auto v) { return std::sqrt(v); });
}
void k_exp(kernel_context& c) {
  unary_float(c, [](auto v) { return std::exp(v); });
}
void k_log(kernel_context& c) {
  unary_float(c, [](auto v) { return std::log(v); });
}
void k_erf(kernel_context& c) {
  unary_float(c, [](auto v) { return std::erf(v); });
}
void k_tanh(kernel_context& c) {
  unary_float(c, [](auto v) { return std::tanh(v); });
}
void k_floor(kernel_context& c) {
  unary_float(c, [](auto v) { return std::floor(v); });
}
void k_ceil(kernel_context& c) {
  unary_float(c, [](auto v) { return std::ceil(v); });
}
void k_round(kernel_context& c) {
  unary_float(c, [](auto v) { return std::nearbyint(v); });
}
void k_sin(kernel_context& c) {
  unary_float(c, [](auto v) { return std::sin(v); });
}
void k_cos(kernel_context& c) {
  unary_float(c, [](auto v) { return std::cos(v); });
}
void k_tan(kernel_context& c) {
  unary_float(c, [](auto v) { return std::tan(v); });
}
void k_asin(kernel_context& c) {
  unary_float(c, [](auto v) { return std::asin(v); });
}
void k_acos(kernel_context& c) {
  unary_float(c, [](auto v) { return std::acos(v); });
}
void k_atan(kernel_context& c) {
  unary_float(c, [](auto v) { return std::atan(v); });
}
void k_sinh(kernel_context& c) {
  unary_float(c, [](auto v) { return std::sinh(v); });
}
void k_cosh(kernel_context& c) {
  unary_float(c, [](auto v) { return std::cosh(v); });
}
void k_asinh(kernel_context& c) {
  unary_float(c, [](auto v) { return std::asinh(v); });
}
void k_acosh(kernel_context& c) {
  unary_float(c, [](auto v) { return std::acosh(v); });
}
void k_atanh(kernel_context& c) {
  unary_float(c, [](auto v) { return std::atanh(v); });
}
void k_reciprocal(kernel_context& c) {
  unary_float(c, [](auto v) { return decltype(v)(1) / v; });
}
void k_sigmoid(kernel_context& c) {
  unary_float(c, [](auto v) {
    using T = decltype(v);
    // Stable on both sides: exp of a non-positive number only.
    if (v >= T(0))
      return T(1) / (T(1) + std::exp(-v));
    const T e = std::exp(v);
    return e / (T(1) + e);
  });
}
void k_softplus(kernel_context& c) {
  unary_float(c, [](auto v) {
    using T = decltype(v);
    return v > T(0) ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
  });
}
void k_softsign(kernel_context& c) {
  unary_float(c, [](auto v) { return v / (decltype(v)(1) + std::abs(v)); });
}
void k_abs(kernel_context& c) {
  unary_numeric(c, [](auto v) {
    if constexpr (std::is_unsigned_v<decltype(v)>) {
      return v;
    } else {
      return v < 0 ? -v : v;
    }
  });
}
void k_neg(kernel_context& c) {
  unary_numeric(c, [](auto v) { return -v; });
}
void k_sign(kernel_context& c) {
  unary_numeric(c, [](auto v) {
    using T = decltype(v);
    return v > T(0) ? T(1) : (v < T(0) ? static_cast<T>(-1) : T(0));
  });
}
void k_relu(kernel_context& c) {
  if (c.in(0).type() == dtype_id::float32 || c.in(0).type() == dtype_id::float64) {
    unary_float(c, [](auto v) { return v > decltype(v)(0) ? v : decltype(v)(0); });
  } else {
    unary_numeric(c, [](auto v) { return v > decltype(v)(0) ? v : decltype(v)(0); });
  }
}
void k_leaky_relu(kernel_context& c) {
  const auto alpha = static_cast<double>(c.n.attr_f("alpha", 0.01f));
  unary_float(c, [alpha](auto v) {
    using T = decltype(v);
    return v >= T(0) ? v : static_cast<T>(alpha) * v;
  });
}
void k_elu(kernel_context& c) {
  const auto alpha = static_cast<double>(c.n.attr_f("alpha", 1.0f));
  unary_float(c, [alpha](auto v) {
    using T = decltype(v);
    return v >= T(0) ? v : static_cast<T>(alpha) * (std::exp(v) - T(1));
  });
}
void k_celu(kernel_context& c) {
  const auto alpha = static_cast<double>(c.n.attr_f("alpha", 1.0f));
  unary_float(c, [alpha](auto v) {
    using T = decltype(v);
    const T a = static_cast<T>(alpha);
    return std::max(T(0), v) + std::min(T(0), a * (std::exp(v / a) - T(1)));
  });
}
void k_selu(kernel_context& c) {
  const auto alpha = static_cast<double>(c.n.attr_f("alpha", 1.67326319217681884765625f));
  const auto gamma = static_cast<double>(c.n.attr_f("gamma", 1.05070102214813232421875f));
  unary_float(c, [alpha, gamma](auto v) {
    using T = decltype(v);
    const T r = v > T(0) ? v : static_cast<T>(alpha) * (std::exp(v) - T(1));
    return static_cast<T>(gamma) * r;
  });
}
void k_thresholded_relu(kernel_context& c) {
  const auto alpha = static_cast<double>(c.n.attr_f("alpha", 1.0f));
  unary_float(c, [alpha](auto v) {
    using T = decltype(v);
    return v > static_cast<T>(alpha) ? v : T(0);
  });
}
void k_hard_sigmoid(kernel_context& c) {
  const auto alpha = static_cast<double>(c.n.attr_f("alpha", 0.2f));
  const auto beta = static_cast<double>(c.n.attr_f("beta", 0.5f));
  unary_float(c, [alpha, beta](auto v) {
    using T = decltype(v);
    return std::clamp(static_cast<T>(alpha) * v + static_cast<T>(beta), T(0), T(1));
  });
}
void k_hard_swish(kernel_context& c) {
  unary_float(c, [](auto v) {
    using T = decltype(v);
    return v * std::clamp(v / T(6) + T(0.5), T(0), T(1));
  });
}
void k_gelu(kernel_context& c) {
  const bool tanh_approx = c.n.attr_s("approximate", "none") == "tanh";
  unary_float(c, [tanh_approx](auto v) {
    using T = decltype(v);
    if (tanh_approx) {
      const T k = static_cast<T>(0.7978845608028654);  // sqrt(2/pi)
      return T(0.5) * v * (T(1) + std::tanh(k * (v + static_cast<T>(0.044715) * v * v * v)));
    }
    return T(0.5) * v * (T(1) + std::erf(v * static_cast<T>(0.7071067811865476)));
  });
}

void k_clip(kernel_context& c) {
  const tensor& x = c.in(0);
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    T lo = std::numeric_limits<T>::lowest();
    T hi = std::numeric_limits<T>::max();
    if (c.n.opset < 11) {
      if (c.n.has("min"))
        lo = static_cast<T>(c.n.attr_f("min", 0.0f));
      if (c.n.has("max"))
        hi = static_cast<T>(c.n.attr_f("max", 0.0f));
    } else {
      // min and max are scalars (ONNX Runtime takes shape [] or [1] and refuses anything else);
      // load-time validation bound their type to the input's.
      auto bound = [&](std::size_t i, const char* name, T& v) {
        const tensor* t = c.opt(i);
        if (!t)
          return;
        if (t->size() != 1 || t->rank() > 1) {
          c.fail("quark.onnx.shape",
                 std::string(name) + " must be a scalar, got " + shape_string(t->shape()));
        }
        v = t->data<T>()[0];
      };
      bound(1, "min", lo);
      bound(2, "max", hi);
    }
    const T* src = x.data<T>().data();
    const std::size_t n = x.size();
    tensor out = c.output_like({0}, x.type(), x.shape());
    T* dst = out.data<T>().data();
    map_elements(c, n, dst, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i)
        dst[i] = std::min(std::max(src[i], lo), hi);
    });
    c.out(0) = std::move(out);
  });
}

// ---- Cast -----------------------------------------------------------------------------------

/// One element from double to T with ONNX Cast semantics (float->int truncates; out-of-range
/// values saturate here instead of being undefined; NaN -> 0).
template <class T>
T cast_from_double(double v, bool saturate) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_integral_v<T>) {
    return saturate_cast<T>(v);
  } else if constexpr (quark::floating_data_type<T>) {
    const float f = static_cast<float>(v);
    return saturate ? quark::convert<T, quark::policies::onnx_saturate>(f)
                    : quark::convert<T, quark::policies::onnx_no_saturate>(f);
  } else {
    return quark::convert<T>(static_cast<float>(v));
  }
}

template <class T>
double to_double(T v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(quark::to_float(v));
  }
}

void k_cast(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto code = static_cast<std::int32_t>(c.n.attr_i("to", 0));
  auto target = dtype_from_onnx(code);
  if (!target || *target == dtype_id::string) {
    c.fail("quark.onnx.runtime", "Cast to data_type " + std::to_string(code) + " not supported");
  }
  const bool saturate = c.n.attr_i("saturate", 1) != 0;
  // The runtime computes float16/bfloat16 in float32: round through the narrow type.
  const bool narrow = *target == dtype_id::float16 || *target == dtype_id::bfloat16;
  const dtype_id store = narrow ? dtype_id::float32 : *target;
  tensor out(store, x.shape());
  if (!narrow && x.type() == store) {
    std::copy(x.bytes().begin(), x.bytes().end(), out.bytes().begin());
    c.out(0) = std::move(out);
    return;
  }
  // Through double, a block at a time: one instantiation per source type and one per target
  // type instead of one per pair (the pairs took a fifth of this file's compile time).
  constexpr std::size_t block = 1024;
  std::array<double, block> buf{};
  const std::size_t n = x.size();
  for (std::size_t lo = 0; lo < n; lo += block) {
    const std::size_t m = std::min(block, n - lo);
    quark::visit_dtype(x.type(), [&](auto sid) {
      using S = typename decltype(sid)::type;
      const auto src = x.data<S>().subspan(lo, m);
      for (std::size_t i = 0; i < m; ++i)
        buf[i] = to_double(src[i]);
    });
    if (narrow) {
      auto dst = out.data<float>().subspan(lo, m);
      for (std::size_t i = 0; i < m; ++i) {
        const auto f = static_cast<float>(buf[i]);
        dst[i] = *target == dtype_id::float16 ? quark::to_float(quark::convert<quark::float16>(f))
                                              : quark::to_float(quark::convert<quark::bfloat16>(f));
      }
      continue;
    }
    quark::visit_dtype(store, [&](auto did) {
      using D = typename decltype(did)::type;
      auto dst = out.data<D>().subspan(lo, m);
      for (std::size_t i = 0; i < m; ++i)
        dst[i] = cast_from_double<D>(buf[i], saturate);
    });
  }
  c.out(0) = std::move(out);
}

/// The bit pattern of v, zero-extended (bool: 0 / 1).
template <class T>
std::uint64_t bits_of_value(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1u : 0u;
  } else if constexpr (std::is_arithmetic_v<T>) {
    std::uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));  // little-endian host (tensor_proto.cpp asserts it)
    return u;
  } else {
    return static_cast<std::uint64_t>(v.to_bits());
  }
}

/// The value whose bit pattern is the low bits of u (bool: any set bit is true).
template <class T>
T value_of_bits(std::uint64_t u) {
  if constexpr (std::is_same_v<T, bool>) {
    return u != 0;
  } else if constexpr (std::is_arithmetic_v<T>) {
    T v{};
    std::memcpy(&v, &u, sizeof(T));
    return v;
  } else {
    return T::from_bits(static_cast<typename T::storage_type>(u));
  }
}

int element_bits_of(dtype_id t) {
  return quark::visit_dtype(
      t, [](auto id) { return quark::dtype_traits<typename decltype(id)::type>::bits; });
}

/// BitCast (opset 26): the input's bits read as `to`, which must be as wide. float16 / bfloat16
/// values live widened to float32 in the runtime: a 16-bit result of either is narrowed back
/// from its bits; a float16 / bfloat16 input cannot be told from a float32 one and is refused.
void k_bitcast(kernel_context& c) {
  if (c.n.opset < 26) {
    c.fail("quark.onnx.opset", "BitCast is an operator of opset 26; the model imports opset " +
                                   std::to_string(c.n.opset));
  }
  const tensor& x = c.in(0);
  const auto code = static_cast<std::int32_t>(c.n.attr_i("to", 0));
  const auto target = dtype_from_onnx(code);
  if (!target || *target == dtype_id::string || *target == dtype_id::complex64 ||
      *target == dtype_id::complex128 || *target == dtype_id::undefined) {
    c.fail("quark.onnx.runtime",
           "BitCast to data_type " + std::to_string(code) + " is not supported");
  }
  const dtype_id from = x.type();
  if (from == dtype_id::string || from == dtype_id::complex64 || from == dtype_id::complex128) {
    c.fail("quark.onnx.runtime",
           "BitCast of element type " + std::string(dtype_name(from)) + " is not supported");
  }
  const bool narrow = *target == dtype_id::float16 || *target == dtype_id::bfloat16;
  const int in_bits = element_bits_of(from);
  const int out_bits = element_bits_of(*target);
  if (from == dtype_id::float32 && out_bits == 16) {
    c.fail("quark.onnx.runtime",
           "BitCast of a float16 or bfloat16 value is not implemented: the runtime holds such "
           "values widened to float32");
  }
  if (in_bits != out_bits) {
    c.fail("quark.onnx.type", "BitCast from " + std::string(dtype_name(from)) + " (" +
                                  std::to_string(in_bits) + " bits) to " +
                                  std::string(dtype_name(*target)) + " (" +
                                  std::to_string(out_bits) + " bits): the widths must be equal");
  }
  tensor out(narrow ? dtype_id::float32 : *target, x.shape(), uninitialized);
  const std::size_t n = x.size();
  quark::visit_dtype(from, [&](auto sid) {
    using S = typename decltype(sid)::type;
    const auto src = x.data<S>();
    if (narrow) {
      auto dst = out.data<float>();
      for (std::size_t i = 0; i < n; ++i) {
        const auto b = static_cast<std::uint16_t>(bits_of_value(src[i]));
        dst[i] = *target == dtype_id::float16 ? quark::to_float(quark::float16::from_bits(b))
                                              : quark::to_float(quark::bfloat16::from_bits(b));
      }
      return;
    }
    quark::visit_dtype(*target, [&](auto did) {
      using D = typename decltype(did)::type;
      auto dst = out.data<D>();
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = value_of_bits<D>(bits_of_value(src[i]));
    });
  });
  c.out(0) = std::move(out);
}

}  // namespace

void register_elementwise(registry_map& r) {
  r["Add"] = k_add;
  r["Sub"] = k_sub;
  r["Mul"] = k_mul;
  r["Div"] = k_div;
  r["Pow"] = k_pow;
  r["Min"] = k_min;
  r["Max"] = k_max;
  r["Sum"] = k_sum;
  r["PRelu"] = k_prelu;
  r["Equal"] = k_equal;
  r["Less"] = k_less;
  r["Greater"] = k_greater;
  r["LessOrEqual"] = k_less_equal;
  r["GreaterOrEqual"] = k_greater_equal;
  r["And"] = k_and;
  r["Or"] = k_or;
  r["Xor"] = k_xor;
  r["Not"] = k_not;
  r["Where"] = k_where;
  r["Sqrt"] = k_sqrt;
  r["Exp"] = k_exp;
  r["Log"] = k_log;
  r["Erf"] = k_erf;
  r["Tanh"] = k_tanh;
  r["Floor"] = k_floor;
  r["Ceil"] = k_ceil;
  r["Round"] = k_round;
  r["Sin"] = k_sin;
  r["Cos"] = k_cos;
  r["Tan"] = k_tan;
  r["Asin"] = k_asin;
  r["Acos"] = k_acos;
  r["Atan"] = k_atan;
  r["Sinh"] = k_sinh;
  r["Cosh"] = k_cosh;
  r["Asinh"] = k_asinh;
  r["Acosh"] = k_acosh;
  r["Atanh"] = k_atanh;
  r["Reciprocal"] = k_reciprocal;
  r["Sigmoid"] = k_sigmoid;
  r["Softplus"] = k_softplus;
  r["Softsign"] = k_softsign;
  r["Abs"] = k_abs;
  r["Neg"] = k_neg;
  r["Sign"] = k_sign;
  r["Relu"] = k_relu;
  r["LeakyRelu"] = k_leaky_relu;
  r["Elu"] = k_elu;
  r["Celu"] = k_celu;
  r["Selu"] = k_selu;
  r["ThresholdedRelu"] = k_thresholded_relu;
  r["HardSigmoid"] = k_hard_sigmoid;
  r["HardSwish"] = k_hard_swish;
  r["Gelu"] = k_gelu;
  r["Clip"] = k_clip;
  r["Cast"] = k_cast;
  r["BitCast"] = k_bitcast;
}

}  // namespace quark::onnx::rt
