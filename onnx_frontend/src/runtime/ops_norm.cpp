// SPDX-License-Identifier: MIT
// Normalisations (BatchNormalization in inference mode, InstanceNormalization,
// LayerNormalization, LpNormalization, LRN, MeanVarianceNormalization) and Softmax / LogSoftmax
// with their opset-dependent axis rules.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

void k_batch_norm(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  if (c.n.attr_i("training_mode", 0) != 0 || c.output_count() > 1) {
    c.fail("quark.onnx.unsupported_op", "training mode is not supported");
  }
  if (c.n.opset < 9 && c.n.attr_i("spatial", 1) != 1) {
    c.fail("quark.onnx.unsupported_op",
           "spatial 0 (per-activation statistics, before opset 9) is not supported");
  }
  const auto scale = float_input(c, 1).data<float>();
  const auto bias = float_input(c, 2).data<float>();
  const auto mean = float_input(c, 3).data<float>();
  const auto var = float_input(c, 4).data<float>();
  const float eps = c.n.attr_f("epsilon", 1e-5f);
  if (x.rank() < 2)
    c.fail("quark.onnx.shape", "input needs a channel dimension");
  const std::size_t n = to_size(x.shape()[0]);
  const std::size_t ch = to_size(x.shape()[1]);
  if (scale.size() != ch || bias.size() != ch || mean.size() != ch || var.size() != ch) {
    c.fail("quark.onnx.shape", "per-channel parameters do not match " + shape_string(x.shape()));
  }
  const std::size_t inner = (n * ch) != 0 ? x.size() / (n * ch) : 0;
  tensor out(dtype_id::float32, x.shape());
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  c.pool.parallel_for(n * ch, 4, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t k = p % ch;
      const float a = scale[k] / std::sqrt(var[k] + eps);
      const float b = bias[k] - mean[k] * a;
      const float* src = px + p * inner;
      float* dst = py + p * inner;
      for (std::size_t i = 0; i < inner; ++i)
        dst[i] = src[i] * a + b;
    }
  });
  c.out(0) = std::move(out);
}

void k_instance_norm(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const auto scale = float_input(c, 1).data<float>();
  const auto bias = float_input(c, 2).data<float>();
  const double eps = static_cast<double>(c.n.attr_f("epsilon", 1e-5f));
  if (x.rank() < 3)
    c.fail("quark.onnx.shape", "input needs N, C and spatial dims");
  const std::size_t ch = to_size(x.shape()[1]);
  if (scale.size() != ch || bias.size() != ch)
    c.fail("quark.onnx.shape", "scale/bias size");
  const std::size_t planes = to_size(x.shape()[0]) * ch;
  const std::size_t inner = planes ? x.size() / planes : 0;
  tensor out(dtype_id::float32, x.shape());
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  for (std::size_t p = 0; p < planes; ++p) {
    const float* src = px + p * inner;
    double mean = 0.0, sq = 0.0;
    for (std::size_t i = 0; i < inner; ++i)
      mean += static_cast<double>(src[i]);
    mean /= static_cast<double>(inner);
    for (std::size_t i = 0; i < inner; ++i) {
      const double d = static_cast<double>(src[i]) - mean;
      sq += d * d;
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps);
    const double a = static_cast<double>(scale[p % ch]) * inv;
    const double b = static_cast<double>(bias[p % ch]) - mean * a;
    for (std::size_t i = 0; i < inner; ++i) {
      py[p * inner + i] = static_cast<float>(static_cast<double>(src[i]) * a + b);
    }
  }
  c.out(0) = std::move(out);
}

void k_layer_norm(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& scale = float_input(c, 1);
  const tensor* bias = c.opt(2);
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", -1), x.rank());
  const double eps = static_cast<double>(c.n.attr_f("epsilon", 1e-5f));
  const shape_t inner_shape(x.shape().begin() + static_cast<std::ptrdiff_t>(axis), x.shape().end());
  const std::size_t inner = element_count(inner_shape);
  const std::size_t rows = inner ? x.size() / inner : 0;
  // Scale and bias must broadcast to the normalised shape (checked before their strides are
  // taken: a rank above it has none).
  if (broadcast_shapes(c, scale.shape(), inner_shape) != inner_shape) {
    c.fail("quark.onnx.shape", "scale does not broadcast to " + shape_string(inner_shape));
  }
  if (bias && broadcast_shapes(c, bias->shape(), inner_shape) != inner_shape)
    c.fail("quark.onnx.shape", "bias does not broadcast to " + shape_string(inner_shape));
  // Materialise scale and bias over the normalised shape once.
  auto expand = [&](const tensor& t) {
    std::vector<float> v(inner);
    const auto st = broadcast_strides(t.shape(), inner_shape);
    const auto src = t.data<float>();
    std::vector<std::size_t> idx(inner_shape.size(), 0);
    for (std::size_t i = 0; i < inner; ++i) {
      std::size_t off = 0;
      for (std::size_t d = 0; d < idx.size(); ++d)
        off += idx[d] * st[d];
      v[i] = src[off];
      for (std::size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < to_size(inner_shape[d]))
          break;
        idx[d] = 0;
      }
    }
    return v;
  };
  const auto sv = expand(scale);
  const auto bv = bias ? expand(float_input(c, 2)) : std::vector<float>(inner, 0.0f);
  tensor out(dtype_id::float32, x.shape());
  shape_t stat_shape = x.shape();
  for (std::size_t d = axis; d < stat_shape.size(); ++d)
    stat_shape[d] = 1;
  tensor mean_t(dtype_id::float32, stat_shape);
  tensor inv_t(dtype_id::float32, stat_shape);
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* src = px + r * inner;
    double mean = 0.0, sq = 0.0;
    for (std::size_t i = 0; i < inner; ++i)
      mean += static_cast<double>(src[i]);
    mean /= static_cast<double>(inner);
    for (std::size_t i = 0; i < inner; ++i) {
      const double d = static_cast<double>(src[i]) - mean;
      sq += d * d;
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps);
    for (std::size_t i = 0; i < inner; ++i) {
      py[r * inner + i] =
          static_cast<float>((static_cast<double>(src[i]) - mean) * inv) * sv[i] + bv[i];
    }
    mean_t.data<float>()[r] = static_cast<float>(mean);
    inv_t.data<float>()[r] = static_cast<float>(inv);
  }
  c.out(0) = std::move(out);
  if (c.output_count() > 1)
    c.out(1) = std::move(mean_t);
  if (c.output_count() > 2)
    c.out(2) = std::move(inv_t);
}

template <bool Log>
void softmax(kernel_context& c) {
  const tensor& x = c.in(0);
  const bool legacy = c.n.opset < 13;
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", legacy ? 1 : -1), x.rank());
  // Legacy: the input is flattened to 2-D at `axis`; new: softmax along `axis` only.
  std::size_t outer = 1, len = 1, inner = 1;
  for (std::size_t d = 0; d < x.rank(); ++d) {
    const auto v = to_size(x.shape()[d]);
    if (d < axis) {
      outer *= v;
    } else if (d == axis || legacy) {
      len *= v;
    } else {
      inner *= v;
    }
  }
  if (x.size() == 0) {  // nothing to normalise (and no data to point into)
    c.out(0) = tensor(x.type(), x.shape());
    return;
  }
  dispatch_float(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    tensor out(x.type(), x.shape());
    const T* px = x.data<T>().data();
    T* py = out.data<T>().data();
    c.pool.parallel_for(outer * inner, 64, [&](std::size_t b, std::size_t e) {
      for (std::size_t row = b; row < e; ++row) {
        const std::size_t o = row / inner;
        const std::size_t i = row % inner;
        const T* src = px + o * len * inner + i;
        T* dst = py + o * len * inner + i;
        T mx = -std::numeric_limits<T>::infinity();
        for (std::size_t k = 0; k < len; ++k)
          mx = std::max(mx, src[k * inner]);
        double sum = 0.0;
        for (std::size_t k = 0; k < len; ++k) {
          const T ev = std::exp(src[k * inner] - mx);
          sum += static_cast<double>(ev);
          if constexpr (!Log)
            dst[k * inner] = ev;
        }
        if constexpr (Log) {
          const T ls = static_cast<T>(std::log(sum));
          for (std::size_t k = 0; k < len; ++k)
            dst[k * inner] = src[k * inner] - mx - ls;
        } else {
          const T inv = static_cast<T>(1.0 / sum);
          for (std::size_t k = 0; k < len; ++k)
            dst[k * inner] *= inv;
        }
      }
    });
    c.out(0) = std::move(out);
  });
}

void k_softmax(kernel_context& c) {
  softmax<false>(c);
}
void k_log_softmax(kernel_context& c) {
  softmax<true>(c);
}

}  // namespace

/// LRN: y = x / (bias + alpha / size * sum of x^2 over the channels c - floor((size - 1) / 2) ..
/// c + ceil((size - 1) / 2))^beta, on [N, C, ...]. A running window sum per position would
/// reorder the additions; the window is small (AlexNet's is 5), so each sum is formed anew.
void k_lrn(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  if (x.rank() < 3)
    c.fail("quark.onnx.shape", "input " + shape_string(x.shape()) + " needs N, C and spatial dims");
  const std::int64_t size = c.n.attr_i("size", 0);
  if (size < 1)
    c.fail("quark.onnx.runtime", "size must be at least 1, got " + std::to_string(size));
  const float alpha = c.n.attr_f("alpha", 1e-4f);
  const float beta = c.n.attr_f("beta", 0.75f);
  const float bias = c.n.attr_f("bias", 1.0f);
  const auto n = to_size(x.shape()[0]);
  const auto ch = to_i64(to_size(x.shape()[1]));
  const std::size_t inner = (n * to_size(ch)) != 0 ? x.size() / (n * to_size(ch)) : 0;
  const std::int64_t before = (size - 1) / 2;
  const std::int64_t after = size - 1 - before;
  const float scale = alpha / static_cast<float>(size);
  tensor out(dtype_id::float32, x.shape(), uninitialized);
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  c.pool.parallel_for(n * to_size(ch), 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t img = p / to_size(ch);
      const auto k = to_i64(p % to_size(ch));
      const std::size_t lo = to_size(std::max<std::int64_t>(0, k - before));
      const std::size_t hi = to_size(std::min<std::int64_t>(ch - 1, k + after));
      const float* base = px + img * to_size(ch) * inner;
      for (std::size_t i = 0; i < inner; ++i) {
        float sq = 0.0f;
        for (std::size_t j = lo; j <= hi; ++j) {
          const float v = base[j * inner + i];
          sq += v * v;
        }
        py[p * inner + i] = px[p * inner + i] / std::pow(bias + scale * sq, beta);
      }
    }
  });
  c.out(0) = std::move(out);
}

/// MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes` (default
/// N, H, W), the formula of the operator's ONNX function body; sums in double.
void k_mvn(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const std::size_t rank = x.rank();
  std::vector<bool> reduced(rank, false);
  for (const std::int64_t a : c.n.attr_ints("axes", {0, 2, 3})) {
    const std::size_t ax = norm_axis(c, a, rank);
    if (reduced[ax])
      c.fail("quark.onnx.runtime", "axis " + std::to_string(a) + " is listed twice in axes");
    reduced[ax] = true;
  }
  // Each element's group: its index with the reduced axes left out.
  const auto strides = strides_of(x.shape());
  std::size_t groups = 1;
  std::vector<std::size_t> group_stride(rank, 0);
  for (std::size_t d = rank; d-- > 0;) {
    if (!reduced[d]) {
      group_stride[d] = groups;
      groups *= to_size(x.shape()[d]);
    }
  }
  auto group_of = [&](std::size_t i) {
    std::size_t gidx = 0;
    for (std::size_t d = 0; d < rank; ++d)
      gidx += (i / strides[d]) % to_size(x.shape()[d]) * group_stride[d];
    return gidx;
  };
  const std::size_t per_group = groups ? x.size() / groups : 0;
  std::vector<double> sum(groups, 0.0), sum_sq(groups, 0.0);
  const float* px = x.data<float>().data();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto v = static_cast<double>(px[i]);
    const std::size_t gidx = group_of(i);
    sum[gidx] += v;
    sum_sq[gidx] += v * v;
  }
  for (std::size_t gidx = 0; gidx < groups; ++gidx) {
    const double mean = sum[gidx] / static_cast<double>(per_group);
    const double var = std::max(0.0, sum_sq[gidx] / static_cast<double>(per_group) - mean * mean);
    sum[gidx] = mean;
    sum_sq[gidx] = std::sqrt(var) + 1e-9;
  }
  tensor out(dtype_id::float32, x.shape(), uninitialized);
  float* py = out.data<float>().data();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t gidx = group_of(i);
    py[i] = static_cast<float>((static_cast<double>(px[i]) - sum[gidx]) / sum_sq[gidx]);
  }
  c.out(0) = std::move(out);
}

/// LpNormalization: x / ||x||_p along `axis` (p = 1 or 2); a zero norm gives zeros, as in ONNX
/// Runtime.
void k_lp_norm(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const std::int64_t p = c.n.attr_i("p", 2);
  if (p != 1 && p != 2)
    c.fail("quark.onnx.attribute", "p must be 1 or 2, got " + std::to_string(p));
  if (x.rank() == 0)
    c.fail("quark.onnx.shape", "input needs at least one dimension");
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", -1), x.rank());
  const std::size_t n = to_size(x.shape()[axis]);
  std::size_t inner = 1;
  for (std::size_t d = axis + 1; d < x.rank(); ++d)
    inner *= to_size(x.shape()[d]);
  const std::size_t outer = n * inner != 0 ? x.size() / (n * inner) : 0;
  tensor out(dtype_id::float32, x.shape());
  const float* px = x.data<float>().data();
  float* py = out.data<float>().data();
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      const std::size_t base = o * n * inner + i;
      double norm = 0.0;
      for (std::size_t k = 0; k < n; ++k) {
        const auto v = static_cast<double>(px[base + k * inner]);
        norm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2)
        norm = std::sqrt(norm);
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t at = base + k * inner;
        py[at] = norm != 0.0 ? static_cast<float>(static_cast<double>(px[at]) / norm) : 0.0f;
      }
    }
  }
  c.out(0) = std::move(out);
}

void register_norm(registry_map& r) {
  r["LpNormalization"] = k_lp_norm;
  r["LRN"] = k_lrn;
  r["MeanVarianceNormalization"] = k_mvn;
  r["BatchNormalization"] = k_batch_norm;
  r["InstanceNormalization"] = k_instance_norm;
  r["LayerNormalization"] = k_layer_norm;
  r["Softmax"] = k_softmax;
  r["LogSoftmax"] = k_log_softmax;
}

}  // namespace quark::onnx::rt
