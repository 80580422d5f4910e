// SPDX-License-Identifier: MIT
// Miscellaneous operators: Dropout (inference only), Mod, Mean, CastLike, IsInf, IsNaN, Shrink
// and BitShift (the trigonometric family is with Sin / Cos in ops_elementwise.cpp). Plain
// single-threaded loops: none of these is hot in calibration.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/broadcast.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// Output 0 = f(a[i], b[i]) with numpy broadcasting; A/B input element types, O output type.
/// f may fail (it runs on the calling thread).
template <class A, class B, class O, class F>
void binary_plain(kernel_context& c, const tensor& a, const tensor& b, dtype_id out_type, F f) {
  const shape_t shape = broadcast_shapes(c, a.shape(), b.shape());
  const A* pa = a.data<A>().data();
  const B* pb = b.data<B>().data();
  const auto plan = make_broadcast_plan(shape, {a.shape(), b.shape()});
  tensor out(out_type, shape, uninitialized);
  O* po = out.data<O>().data();
  for_each_run(plan, [&](std::size_t o, const std::array<std::size_t, 3>& off, std::size_t n,
                         const std::array<std::size_t, 3>& st) {
    for (std::size_t i = 0; i < n; ++i)
      po[o + i] = f(pa[off[0] + i * st[0]], pb[off[1] + i * st[1]]);
  });
  c.out(0) = std::move(out);
}

/// Output 0 = pred(x) as bool for float32/float64 input 0.
template <class F>
void predicate_float(kernel_context& c, F pred) {
  const tensor& x = c.in(0);
  dispatch_float(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const auto src = x.data<T>();
    tensor out(dtype_id::boolean, x.shape(), uninitialized);
    auto dst = out.data<bool>();
    for (std::size_t i = 0; i < src.size(); ++i)
      dst[i] = pred(src[i]);
    c.out(0) = std::move(out);
  });
}

/// Optional input i (nullptr when absent) after checking that it holds exactly one element.
const tensor* single_element_input(const kernel_context& c, std::size_t i, const char* what) {
  const tensor* t = c.opt(i);
  if (t && t->size() != 1) {
    c.fail("quark.onnx.shape",
           std::string(what) + " must be a scalar, got shape " + shape_string(t->shape()));
  }
  return t;
}

// ---- Dropout ------------------------------------------------------------------------------

void k_dropout(kernel_context& c) {
  const tensor& x = c.in(0);
  if (x.type() != dtype_id::float32 && x.type() != dtype_id::float64) {
    c.fail("quark.onnx.runtime", "element type " + std::string(dtype_name(x.type())) +
                                     " not supported (float32/float64 only)");
  }
  // Opsets 1-11 have no mode input: this runtime always infers (opsets 1-6's
  // is_test, which the quantizer drops when it raises the opset, is not consulted; an old model
  // exported without it would otherwise be refused). Opset 12+: ratio and training_mode inputs.
  bool training = false;
  double ratio = 0.5;
  if (c.n.opset < 7) {
    ratio = static_cast<double>(c.n.attr_f("ratio", 0.5f));
  } else if (c.n.opset >= 12) {
    if (const tensor* r = single_element_input(c, 1, "ratio"))
      ratio = read_doubles(*r)[0];
    if (const tensor* t = single_element_input(c, 2, "training_mode")) {
      if (t->type() != dtype_id::boolean) {
        c.fail("quark.onnx.runtime",
               "training_mode must be bool, got " + std::string(dtype_name(t->type())));
      }
      training = t->data<bool>()[0];
    }
  }
  if (training && ratio != 0.0) {
    c.fail("quark.onnx.runtime",
           "Dropout in training mode (ratio " + std::to_string(ratio) +
               ") is not supported: the calibration runtime runs inference only (set "
               "training_mode to false)");
  }
  // Inference: output = input (taking its storage when it dies here), mask all true.
  const dtype_id type = x.type();
  const shape_t shape = x.shape();
  const std::byte* src = x.bytes().data();
  const std::size_t bytes = x.byte_size();
  tensor y = c.output_like({0}, type, shape);  // x may be moved from after this
  if (bytes != 0 && y.bytes().data() != src)
    std::memcpy(y.bytes().data(), src, bytes);
  c.out(0) = std::move(y);
  if (c.output_count() < 2 || c.n.outputs[1].empty())
    return;
  if (c.n.opset >= 10) {
    tensor mask(dtype_id::boolean, shape, uninitialized);
    for (bool& m : mask.data<bool>())
      m = true;
    c.out(1) = std::move(mask);
  } else {  // before opset 10 the mask has the data's type
    dispatch_float(c, type, [&](auto id) {
      using T = typename decltype(id)::type;
      tensor mask(type, shape, uninitialized);
      for (T& m : mask.data<T>())
        m = T(1);
      c.out(1) = std::move(mask);
    });
  }
}

// ---- Mod ------------------------------------------------------------------------------------

/// Integer remainder; y != 0. fmod: sign of the dividend (C %); else sign of the divisor
/// (Python %).
template <class T>
T int_mod(T x, T y, bool fmod) {
  if constexpr (std::is_signed_v<T>) {
    if (y == T(-1))
      return T(0);  // also avoids lowest() % -1, which overflows
    T r = static_cast<T>(x % y);
    if (!fmod && r != T(0) && ((r < T(0)) != (y < T(0))))
      r = static_cast<T>(r + y);
    return r;
  } else {
    static_cast<void>(fmod);
    return static_cast<T>(x % y);
  }
}

void k_mod(kernel_context& c) {
  const tensor& a = c.in(0);
  const tensor& b = c.in(1);
  require_same_type(c, a, b);
  const bool fmod = c.n.attr_i("fmod", 0) != 0;
  dispatch_numeric(c, a.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    if constexpr (is_float_v<T>) {
      if (!fmod) {
        c.fail("quark.onnx.runtime",
               "Mod on floating-point inputs requires fmod=1 (ONNX spec), got fmod=0");
      }
      binary_plain<T, T, T>(c, a, b, a.type(), [](T x, T y) { return std::fmod(x, y); });
    } else {
      binary_plain<T, T, T>(c, a, b, a.type(), [&](T x, T y) {
        if (y == T(0))
          c.fail("quark.onnx.runtime", "integer Mod by zero (a divisor element is 0)");
        return int_mod(x, y, fmod);
      });
    }
  });
}

// ---- Mean -----------------------------------------------------------------------------------

void k_mean(kernel_context& c) {
  if (c.input_count() == 0)
    c.fail("quark.onnx.runtime", "Mean needs at least one input");
  const tensor& first = c.in(0);
  shape_t shape = first.shape();
  for (std::size_t i = 1; i < c.input_count(); ++i) {
    const tensor& t = c.in(i);
    require_same_type(c, first, t);
    if (c.n.opset < 8 && t.shape() != first.shape()) {
      c.fail("quark.onnx.shape", "Mean before opset 8 needs equal shapes, got " +
                                     shape_string(first.shape()) + " and " +
                                     shape_string(t.shape()));
    }
    shape = broadcast_shapes(c, shape, t.shape());
  }
  dispatch_float(c, first.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    std::vector<double> acc(element_count(shape), 0.0);
    for (std::size_t k = 0; k < c.input_count(); ++k) {
      const tensor& t = c.in(k);
      const T* src = t.data<T>().data();
      const auto plan = make_broadcast_plan(shape, {t.shape()});
      for_each_run(plan, [&](std::size_t o, const std::array<std::size_t, 3>& off, std::size_t n,
                             const std::array<std::size_t, 3>& st) {
        for (std::size_t i = 0; i < n; ++i)
          acc[o + i] += static_cast<double>(src[off[0] + i * st[0]]);
      });
    }
    const auto count = static_cast<double>(c.input_count());
    tensor out(first.type(), shape, uninitialized);
    auto dst = out.data<T>();
    for (std::size_t i = 0; i < acc.size(); ++i)
      dst[i] = static_cast<T>(acc[i] / count);
    c.out(0) = std::move(out);
  });
}

// ---- CastLike -------------------------------------------------------------------------------

/// Runs the Cast kernel on input 0 with `to` = the element type of input 1, so both share one
/// conversion code. The node copy keeps this node's name and op for Cast's error messages.
void k_cast_like(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& like = c.in(1);
  const auto code = onnx_code(like.type());
  const kernel_fn cast = find_kernel("Cast");
  if (!code || like.type() == dtype_id::string || !cast) {
    c.fail("quark.onnx.runtime",
           "CastLike to element type " + std::string(dtype_name(like.type())) + " not supported");
  }
  node as_cast = c.n;
  attribute to;
  to.k = attribute::kind::i;
  to.i = *code;
  as_cast.attrs["to"] = std::move(to);
  kernel_context sub{as_cast, {&x}, std::vector<tensor>(1), {}, c.pool, c.run_subgraph, nullptr};
  cast(sub);
  c.out(0) = std::move(sub.outputs[0]);
}

// ---- IsInf, IsNaN ---------------------------------------------------------------------------

void k_is_inf(kernel_context& c) {
  const bool positive = c.n.attr_i("detect_positive", 1) != 0;
  const bool negative = c.n.attr_i("detect_negative", 1) != 0;
  predicate_float(c, [positive, negative](auto v) {
    using T = decltype(v);
    return std::isinf(v) && (v > T(0) ? positive : negative);
  });
}

void k_is_nan(kernel_context& c) {
  predicate_float(c, [](auto v) { return std::isnan(v); });
}

// ---- Shrink ---------------------------------------------------------------------------------

void k_shrink(kernel_context& c) {
  const float lambd = c.n.attr_f("lambd", 0.5f);
  const float bias = c.n.attr_f("bias", 0.0f);
  const tensor& x = c.in(0);
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    // Floats compute in their own type; integers through double, saturated back.
    using W = std::conditional_t<is_float_v<T>, T, double>;
    const W l = static_cast<W>(lambd);
    const W b = static_cast<W>(bias);
    const auto src = x.data<T>();
    tensor out(x.type(), x.shape(), uninitialized);
    auto dst = out.data<T>();
    for (std::size_t i = 0; i < src.size(); ++i) {
      const W v = static_cast<W>(src[i]);
      const W r = v < -l ? v + b : (v > l ? v - b : W(0));
      dst[i] = saturate_cast<T>(static_cast<double>(r));
    }
    c.out(0) = std::move(out);
  });
}

// ---- BitShift -------------------------------------------------------------------------------

void k_bit_shift(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& s = c.in(1);
  require_same_type(c, x, s);
  if (!c.n.has("direction"))
    c.fail("quark.onnx.runtime", "attribute 'direction' is required (LEFT or RIGHT)");
  const std::string dir = c.n.attr_s("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") {
    c.fail("quark.onnx.runtime", "attribute 'direction' must be LEFT or RIGHT, got '" + dir + "'");
  }
  const bool left = dir == "LEFT";
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      binary_plain<T, T, T>(c, x, s, x.type(), [left](T v, T n) {
        // Shifting by the width or more moves every bit out (undefined in C++: handled here).
        if (n >= static_cast<T>(std::numeric_limits<T>::digits))
          return T(0);
        const auto k = static_cast<unsigned>(n);
        return left ? static_cast<T>(v << k) : static_cast<T>(v >> k);
      });
    } else {
      c.fail("quark.onnx.runtime", "element type " + std::string(dtype_name(x.type())) +
                                       " not supported (BitShift takes uint8/16/32/64)");
    }
  });
}

}  // namespace

void register_misc_ops(registry_map& r) {
  r["Dropout"] = k_dropout;
  r["Mod"] = k_mod;
  r["Mean"] = k_mean;
  r["CastLike"] = k_cast_like;
  r["IsInf"] = k_is_inf;
  r["IsNaN"] = k_is_nan;
  r["Shrink"] = k_shrink;
  r["BitShift"] = k_bit_shift;
}

}  // namespace quark::onnx::rt
