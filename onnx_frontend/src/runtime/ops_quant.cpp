// SPDX-License-Identifier: MIT
// QuantizeLinear / DequantizeLinear with ONNX semantics: per-tensor, per-axis and blocked
// (opset 21) scales. The numbers come from quark::convert (round half to even, saturate).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <quark/core/concepts.hpp>
#include <quark/dtype/convert.hpp>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// Maps each element of x to the index of its scale (and zero point).
struct scale_map {
  enum class kind { tensor, axis, block } k = kind::tensor;
  std::size_t inner = 1, dim = 1, block = 1, outer = 1, scale_dim = 1;

  std::size_t operator()(std::size_t i) const {
    switch (k) {
      case kind::tensor:
        return 0;
      case kind::axis:
        return (i / inner) % dim;
      case kind::block: {
        const std::size_t in = i % inner;
        const std::size_t a = (i / inner) % dim;
        const std::size_t o = i / (inner * dim);
        return (o * scale_dim + a / block) * inner + in;
      }
    }
    return 0;
  }

  /// Calls run(b', e', s) on the pieces of [b, e) that share one scale index s (whole range per
  /// tensor, runs of `inner` elements per axis, single elements per block).
  template <class Run>
  void for_each_run(std::size_t b, std::size_t e, Run&& run) const {
    if (k == kind::tensor) {
      run(b, e, std::size_t{0});
    } else if (k == kind::axis) {
      for (std::size_t i = b; i < e;) {
        const std::size_t end = std::min(e, (i / inner + 1) * inner);
        run(i, end, (*this)(i));
        i = end;
      }
    } else {
      for (std::size_t i = b; i < e; ++i)
        run(i, i + 1, (*this)(i));
    }
  }
};

scale_map make_scale_map(const kernel_context& c, const tensor& x, const tensor& scale) {
  scale_map m;
  if (scale.size() == 1 && scale.rank() <= 1)
    return m;
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 1), x.rank());
  m.dim = to_size(x.shape()[axis]);
  m.inner = 1;
  for (std::size_t d = axis + 1; d < x.rank(); ++d)
    m.inner *= to_size(x.shape()[d]);
  const std::int64_t block = c.n.attr_i("block_size", 0);
  if (block > 0) {
    m.k = scale_map::kind::block;
    m.block = to_size(block);
    if (scale.rank() != x.rank())
      c.fail("quark.onnx.shape", "blocked scale must have x's rank");
    m.scale_dim = to_size(scale.shape()[axis]);
    if (m.scale_dim != (m.dim + m.block - 1) / m.block) {
      c.fail("quark.onnx.shape", "blocked scale " + shape_string(scale.shape()) +
                                     " does not match x " + shape_string(x.shape()));
    }
    return m;
  }
  if (scale.rank() != 1 || to_size(scale.shape()[0]) != m.dim) {
    c.fail("quark.onnx.shape", "per-axis scale " + shape_string(scale.shape()) +
                                   " does not match axis " + std::to_string(axis) + " of " +
                                   shape_string(x.shape()));
  }
  m.k = scale_map::kind::axis;
  return m;
}

template <class T>
float as_float(T v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<float>(v);
  } else {
    return quark::to_float(v);
  }
}

/// QuantizeLinear of one value v = x / scale to an 8- or 16-bit integer type with zero point
/// `z`. Equal to the general form, convert<T>(float(convert<int32>(v)) + z), with NaN taken as
/// -inf: the lowest code, as ONNX Runtime 1.30 stores it (its MLAS kernels clamp with
/// max(NaN, lo) = lo) and as the headers' policies::onnx_qdq does (nan_output::to_qmin); ONNX
/// itself leaves a NaN's code unspecified. Values beyond +-2^30 saturate T either way, so v is
/// clamped there first, where truncation to int32 is exact; round half to even then comes from the
/// exact fraction v - trunc(v); and for |round(v)| <= 2^30 and |z| < 2^16 the float sum of the
/// general form saturates exactly when the integer sum does.
template <class T>
QUARK_ALWAYS_INLINE T quantize_small_int(float v, std::int32_t z) noexcept {
  float w = v != v ? -0x1p30f : v;
  w = w < -0x1p30f ? -0x1p30f : w;
  w = w > 0x1p30f ? 0x1p30f : w;
  const auto t = static_cast<std::int32_t>(w);   // toward zero, exact
  const float frac = w - static_cast<float>(t);  // exact, in (-1, 1)
  const float af = frac < 0.0f ? -frac : frac;
  const bool away = af > 0.5f || (af == 0.5f && (t & 1) != 0);
  std::int32_t q = (away ? (w < 0.0f ? t - 1 : t + 1) : t) + z;
  constexpr auto lo = static_cast<std::int32_t>(std::numeric_limits<T>::min());
  constexpr auto hi = static_cast<std::int32_t>(std::numeric_limits<T>::max());
  q = q < lo ? lo : q;
  q = q > hi ? hi : q;
  return static_cast<T>(q);
}

#if defined(__GNUC__)
/// quantize_small_int on x[0, n) / sc, 8 values at a time in GCC vector types (the compiler does
/// not vectorise the scalar form: under -ftrapping-math it keeps float -> int conversions behind
/// the branches); the same operations lane by lane, so the same codes.
template <class T>
void quantize_small_int_n(const float* QUARK_RESTRICT x, T* QUARK_RESTRICT out, std::size_t n,
                          float sc, std::int32_t z) noexcept {
  using vf = float __attribute__((vector_size(32)));
  using vi = std::int32_t __attribute__((vector_size(32)));
  constexpr auto lo = static_cast<std::int32_t>(std::numeric_limits<T>::min());
  constexpr auto hi = static_cast<std::int32_t>(std::numeric_limits<T>::max());
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vf v;
    std::memcpy(&v, x + i, sizeof(v));
    v = v / sc;
    vf w = v != v ? vf{} - 0x1p30f : v;
    w = w < -0x1p30f ? vf{} - 0x1p30f : w;
    w = w > 0x1p30f ? vf{} + 0x1p30f : w;
    const vi t = __builtin_convertvector(w, vi);
    const vf frac = w - __builtin_convertvector(t, vf);
    const vf af = frac < 0.0f ? -frac : frac;
    const vi away = (af > 0.5f) | ((af == 0.5f) & -(t & 1));  // -1: round away from 0
    const vi step = w < 0.0f ? vi{} - 1 : vi{} + 1;
    vi q = t + (step & away) + z;
    q = q < lo ? vi{} + lo : q;
    q = q > hi ? vi{} + hi : q;
    for (std::size_t j = 0; j < 8; ++j)
      out[i + j] = static_cast<T>(q[j]);
  }
  for (; i < n; ++i)
    out[i] = quantize_small_int<T>(x[i] / sc, z);
}
#else
template <class T>
void quantize_small_int_n(const float* x, T* out, std::size_t n, float sc,
                          std::int32_t z) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = quantize_small_int<T>(x[i] / sc, z);
}
#endif

void k_quantize(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& scale = float_input(c, 1);
  const tensor* zp = c.opt(2);
  dtype_id out_type = dtype_id::uint8;
  if (zp) {
    out_type = zp->type();
  } else if (c.n.has("output_dtype") && c.n.attr_i("output_dtype", 0) != 0) {
    out_type = dtype_from_onnx(static_cast<std::int32_t>(c.n.attr_i("output_dtype", 0)))
                   .value_or(dtype_id::undefined);
  }
  const bool saturate = c.n.attr_i("saturate", 1) != 0;
  const scale_map map = make_scale_map(c, x, scale);
  if (zp && zp->size() != scale.size())
    c.fail("quark.onnx.shape", "zero point and scale differ");
  tensor out(out_type, x.shape(), uninitialized);  // every element is written below
  const float* px = x.data<float>().data();
  const float* ps = scale.data<float>().data();
  quark::visit_dtype(out_type, [&](auto id) {
    using T = typename decltype(id)::type;
    if constexpr (quark::quantized_type<T>) {
      T* dst = out.data<T>().data();
      const T* pz = zp ? zp->data<T>().data() : nullptr;
      // Elements [b, e), all with scale index s.
      auto run = [&](std::size_t b, std::size_t e, std::size_t s) {
        const float sc = ps[s];
        const float z = pz ? as_float(pz[s]) : 0.0f;
        const float* QUARK_RESTRICT src = px;
        T* QUARK_RESTRICT out_p = dst;
        if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t> ||
                      std::is_same_v<T, std::int16_t> || std::is_same_v<T, std::uint16_t>) {
          quantize_small_int_n<T>(src + b, out_p + b, e - b, sc, static_cast<std::int32_t>(z));
        } else {
          for (std::size_t i = b; i < e; ++i) {
            const float v = src[i] / sc;
            if constexpr (quark::integral_data_type<T>) {
              // round(x / scale) first, then add the zero point, then saturate (ONNX order);
              // NaN takes the lowest code, as above.
              if (v != v) {
                out_p[i] = quark::convert<T, quark::policies::onnx_quantize>(-0x1p40f);
                continue;
              }
              const auto r = quark::convert<std::int32_t, quark::policies::onnx_quantize>(v);
              out_p[i] =
                  quark::convert<T, quark::policies::onnx_quantize>(static_cast<float>(r) + z);
            } else {
              out_p[i] = saturate ? quark::convert<T, quark::policies::onnx_saturate>(v + z)
                                  : quark::convert<T, quark::policies::onnx_no_saturate>(v + z);
            }
          }
        }
      };
      // Elements are independent: pieces on the pool, each split where the scale index changes.
      c.pool.parallel_for(x.size(), 1 << 15,
                          [&](std::size_t b, std::size_t e) { map.for_each_run(b, e, run); });
    } else {
      c.fail("quark.onnx.runtime", "cannot quantize to " + std::string(dtype_name(out_type)));
    }
  });
  c.out(0) = std::move(out);
}

void k_dequantize(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& scale = float_input(c, 1);
  const tensor* zp = c.opt(2);
  if (zp && zp->type() != x.type())
    c.fail("quark.onnx.runtime", "zero point type differs from x");
  const scale_map map = make_scale_map(c, x, scale);
  tensor out(dtype_id::float32, x.shape(), uninitialized);  // every element is written below
  const float* ps = scale.data<float>().data();
  float* dst = out.data<float>().data();
  quark::visit_dtype(x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    auto src = x.data<T>();
    const T* pz = zp ? zp->data<T>().data() : nullptr;
    // Elements [b, e), all with scale index s (restrict: the loop vectorises).
    auto run = [&](std::size_t b, std::size_t e, std::size_t s) {
      const float sc = ps[s];
      const float z = pz ? as_float(pz[s]) : 0.0f;
      const T* QUARK_RESTRICT in = src.data();
      float* QUARK_RESTRICT out_p = dst;
      for (std::size_t i = b; i < e; ++i)
        out_p[i] = (as_float(in[i]) - z) * sc;
    };
    c.pool.parallel_for(src.size(), 1 << 15,
                        [&](std::size_t b, std::size_t e) { map.for_each_run(b, e, run); });
  });
  c.out(0) = std::move(out);
}

}  // namespace

void register_quant(registry_map& r) {
  r["QuantizeLinear"] = k_quantize;
  r["DequantizeLinear"] = k_dequantize;
}

}  // namespace quark::onnx::rt
