// SPDX-License-Identifier: MIT
// Data movement and shape arithmetic: Shape, Size, Reshape, Flatten, Transpose, Squeeze,
// Unsqueeze, Concat, Split, Slice, Gather, Expand, Tile, Pad, ConstantOfShape, Identity, Range,
// DepthToSpace, SpaceToDepth. Kernels move bytes, so they work for every element type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/broadcast.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

tensor int64_vector(const std::vector<std::int64_t>& v) {
  tensor t(dtype_id::int64, {to_i64(v.size())});
  std::copy(v.begin(), v.end(), t.data<std::int64_t>().begin());
  return t;
}

/// A tensor with x's bytes and a new shape.
tensor reshaped(const kernel_context& c, const tensor& x, shape_t shape) {
  if (element_count(shape) != x.size()) {
    c.fail("quark.onnx.shape",
           "cannot reshape " + shape_string(x.shape()) + " to " + shape_string(shape));
  }
  tensor t = x;
  t.reshape(std::move(shape));
  return t;
}

/// Generic strided gather: out[i...] = in[base + sum(i_d * stride_d)] element-wise, by bytes.
void strided_copy(const tensor& in, tensor& out, std::size_t base,
                  const std::vector<std::int64_t>& strides) {
  const std::size_t es = element_size(in.type());
  const std::size_t total = out.size();
  if (total == 0)
    return;
  const shape_t& shape = out.shape();
  const std::size_t r = shape.size();
  const std::byte* src = in.bytes().data();
  std::byte* dst = out.bytes().data();
  if (r == 0) {
    std::memcpy(dst, src + base * es, es);
    return;
  }
  const std::size_t n = to_size(shape[r - 1]);
  const std::int64_t inner = strides[r - 1];
  std::vector<std::size_t> idx(r, 0);
  std::int64_t off = to_i64(base);
  for (std::size_t o = 0; o < total; o += n) {
    if (inner == 1) {
      std::memcpy(dst + o * es, src + to_size(off) * es, n * es);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        std::memcpy(dst + (o + i) * es, src + to_size(off + to_i64(i) * inner) * es, es);
      }
    }
    for (std::size_t d = r - 1; d-- > 0;) {
      ++idx[d];
      off += strides[d];
      if (idx[d] < to_size(shape[d]))
        break;
      off -= strides[d] * to_i64(idx[d]);
      idx[d] = 0;
    }
  }
}

tensor permute(const tensor& x, const std::vector<std::size_t>& perm) {
  shape_t shape(perm.size());
  std::vector<std::int64_t> st(perm.size());
  const auto own = strides_of(x.shape());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    shape[i] = x.shape()[perm[i]];
    st[i] = to_i64(own[perm[i]]);
  }
  tensor out(x.type(), shape);
  strided_copy(x, out, 0, st);
  return out;
}

void k_identity(kernel_context& c) {
  c.out(0) = c.in(0);
}

void k_shape(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto r = to_i64(x.rank());
  auto clampi = [r](std::int64_t v) { return std::clamp(v < 0 ? v + r : v, std::int64_t{0}, r); };
  const std::int64_t start = clampi(c.n.attr_i("start", 0));
  const std::int64_t end = c.n.has("end") ? clampi(c.n.attr_i("end", r)) : r;
  std::vector<std::int64_t> v;
  for (std::int64_t d = start; d < end; ++d)
    v.push_back(x.shape()[to_size(d)]);
  c.out(0) = int64_vector(v);
}

void k_size(kernel_context& c) {
  tensor t(dtype_id::int64, {});
  t.data<std::int64_t>()[0] = to_i64(c.in(0).size());
  c.out(0) = std::move(t);
}

void k_reshape(kernel_context& c) {
  const tensor& x = c.in(0);
  std::vector<std::int64_t> spec = c.n.opset < 5 ? c.n.attr_ints("shape") : read_ints(c, c.in(1));
  const bool allow_zero = c.n.attr_i("allowzero", 0) != 0;
  shape_t shape(spec.size());
  std::ptrdiff_t infer = -1;
  std::size_t known = 1;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == -1) {
      if (infer >= 0)
        c.fail("quark.onnx.shape", "more than one -1 in the target shape");
      infer = static_cast<std::ptrdiff_t>(i);
      continue;
    }
    if (spec[i] == 0 && !allow_zero) {
      if (i >= x.rank())
        c.fail("quark.onnx.shape", "0 copies a dimension the input lacks");
      shape[i] = x.shape()[i];
    } else if (spec[i] < 0) {
      c.fail("quark.onnx.shape", "negative dimension in the target shape");
    } else {
      shape[i] = spec[i];
    }
    known *= to_size(shape[i]);
  }
  if (infer >= 0) {
    if (known == 0 || x.size() % known != 0) {
      c.fail("quark.onnx.shape", "cannot infer -1 reshaping " + shape_string(x.shape()));
    }
    shape[static_cast<std::size_t>(infer)] = to_i64(x.size() / known);
  }
  c.out(0) = reshaped(c, x, shape);
}

void k_flatten(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto r = to_i64(x.rank());
  std::int64_t axis = c.n.attr_i("axis", 1);
  if (axis < 0)
    axis += r;
  if (axis < 0 || axis > r)
    c.fail("quark.onnx.shape", "axis out of range");
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d)
    outer *= x.shape()[to_size(d)];
  const std::int64_t inner = outer ? to_i64(x.size()) / outer : 0;
  c.out(0) = reshaped(c, x, {outer, inner});
}

void k_transpose(kernel_context& c) {
  const tensor& x = c.in(0);
  std::vector<std::size_t> perm;
  if (c.n.has("perm")) {
    for (auto p : c.n.attr_ints("perm"))
      perm.push_back(norm_axis(c, p, x.rank()));
  } else {
    for (std::size_t i = x.rank(); i-- > 0;)
      perm.push_back(i);
  }
  if (perm.size() != x.rank())
    c.fail("quark.onnx.shape", "perm length differs from the rank");
  std::vector<bool> seen(perm.size(), false);
  for (const std::size_t p : perm) {
    if (seen[p])
      c.fail("quark.onnx.shape", "perm names axis " + std::to_string(p) + " twice");
    seen[p] = true;
  }
  c.out(0) = permute(x, perm);
}

std::vector<std::int64_t> axes_of(const kernel_context& c, std::size_t input, int from_opset) {
  if (c.n.opset >= from_opset) {
    if (const tensor* t = c.opt(input))
      return read_ints(c, *t);
    return {};
  }
  return c.n.attr_ints("axes");
}

void k_squeeze(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto axes = axes_of(c, 1, 13);
  std::vector<bool> drop(x.rank(), false);
  if (axes.empty()) {
    for (std::size_t d = 0; d < x.rank(); ++d)
      drop[d] = x.shape()[d] == 1;
  }
  for (auto a : axes) {
    const std::size_t d = norm_axis(c, a, x.rank());
    if (x.shape()[d] != 1)
      c.fail("quark.onnx.shape", "squeezed axis is not 1");
    drop[d] = true;
  }
  shape_t shape;
  for (std::size_t d = 0; d < x.rank(); ++d) {
    if (!drop[d])
      shape.push_back(x.shape()[d]);
  }
  c.out(0) = reshaped(c, x, shape);
}

void k_unsqueeze(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto axes = axes_of(c, 1, 13);
  const std::size_t r = x.rank() + axes.size();
  std::vector<bool> ins(r, false);
  for (auto a : axes) {
    const std::size_t d = norm_axis(c, a, r);
    if (ins[d])
      c.fail("quark.onnx.shape", "repeated axis");
    ins[d] = true;
  }
  shape_t shape;
  std::size_t k = 0;
  for (std::size_t d = 0; d < r; ++d)
    shape.push_back(ins[d] ? 1 : x.shape()[k++]);
  c.out(0) = reshaped(c, x, shape);
}

void k_concat(kernel_context& c) {
  const tensor& first = c.in(0);
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 0), first.rank());
  shape_t shape = first.shape();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < c.input_count(); ++i) {
    const tensor& t = c.in(i);
    if (t.rank() != first.rank() || t.type() != first.type()) {
      c.fail("quark.onnx.shape", "inputs differ in rank or type");
    }
    for (std::size_t d = 0; d < t.rank(); ++d) {
      if (d != axis && t.shape()[d] != first.shape()[d]) {
        c.fail("quark.onnx.shape", "input " + shape_string(t.shape()) + " does not match " +
                                       shape_string(first.shape()));
      }
    }
    total += t.shape()[axis];
  }
  shape[axis] = total;
  tensor out(first.type(), shape);
  const std::size_t es = element_size(first.type());
  std::size_t outer = 1;
  for (std::size_t d = 0; d < axis; ++d)
    outer *= to_size(shape[d]);
  const std::size_t inner =
      element_count(shape_t(shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, shape.end()));
  const std::size_t out_row = to_size(total) * inner * es;
  std::size_t col = 0;
  for (std::size_t i = 0; i < c.input_count(); ++i) {
    const tensor& t = c.in(i);
    const std::size_t row = to_size(t.shape()[axis]) * inner * es;
    for (std::size_t o = 0; row != 0 && o < outer; ++o) {
      std::memcpy(out.bytes().data() + o * out_row + col, t.bytes().data() + o * row, row);
    }
    col += row;
  }
  c.out(0) = std::move(out);
}

void k_split(kernel_context& c) {
  const tensor& x = c.in(0);
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 0), x.rank());
  std::vector<std::int64_t> sizes;
  if (c.n.opset >= 13) {
    if (const tensor* t = c.opt(1))
      sizes = read_ints(c, *t);
  } else {
    sizes = c.n.attr_ints("split");
  }
  const std::int64_t len = x.shape()[axis];
  const std::size_t parts = c.output_count();
  if (sizes.empty()) {
    const std::int64_t num = c.n.has("num_outputs") ? c.n.attr_i("num_outputs", 1) : to_i64(parts);
    if (num < 1)
      c.fail("quark.onnx.shape", "num_outputs must be positive, got " + std::to_string(num));
    if (num != to_i64(parts))
      c.fail("quark.onnx.shape", "num_outputs " + std::to_string(num) + " differs from the " +
                                     std::to_string(parts) + " outputs");
    const std::int64_t chunk = (len + num - 1) / num;
    for (std::int64_t i = 0; i < num; ++i)
      sizes.push_back(std::min(chunk, len - i * chunk));
  }
  if (sizes.size() != parts)
    c.fail("quark.onnx.shape", "split sizes differ from output count");
  // Checked before any copy: a size past the axis would read beyond the input.
  std::int64_t total = 0;
  for (const std::int64_t v : sizes) {
    if (v < 0 || v > len)
      c.fail("quark.onnx.shape",
             "split size " + std::to_string(v) + " is outside [0, " + std::to_string(len) + "]");
    total += v;
  }
  if (total != len)
    c.fail("quark.onnx.shape", "split sizes do not add up to the axis length");
  std::int64_t start = 0;
  const auto st = strides_of(x.shape());
  std::vector<std::int64_t> strides(st.begin(), st.end());
  for (std::size_t p = 0; p < parts; ++p) {
    shape_t shape = x.shape();
    shape[axis] = sizes[p];
    tensor out(x.type(), shape);
    strided_copy(x, out, to_size(start) * st[axis], strides);
    start += sizes[p];
    c.out(p) = std::move(out);
  }
}

void k_slice(kernel_context& c) {
  const tensor& x = c.in(0);
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (c.n.opset < 10) {
    starts = c.n.attr_ints("starts");
    ends = c.n.attr_ints("ends");
    axes = c.n.attr_ints("axes");
  } else {
    starts = read_ints(c, c.in(1));
    ends = read_ints(c, c.in(2));
    if (const tensor* t = c.opt(3))
      axes = read_ints(c, *t);
    if (const tensor* t = c.opt(4))
      steps = read_ints(c, *t);
  }
  if (axes.empty()) {
    for (std::size_t i = 0; i < starts.size(); ++i)
      axes.push_back(to_i64(i));
  }
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    c.fail("quark.onnx.shape", "starts/ends/axes/steps lengths differ");
  }
  const auto own = strides_of(x.shape());
  shape_t shape = x.shape();
  std::vector<std::int64_t> strides(own.begin(), own.end());
  std::int64_t base = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::size_t d = norm_axis(c, axes[i], x.rank());
    const std::int64_t dim = x.shape()[d];
    const std::int64_t step = steps[i];
    if (step == 0)
      c.fail("quark.onnx.shape", "step 0");
    std::int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    std::int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (step > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
    } else {
      s = std::clamp<std::int64_t>(s, 0, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
    }
    const std::int64_t n = step > 0 ? (e > s ? (e - s + step - 1) / step : 0)
                                    : (s > e ? (s - e + (-step) - 1) / (-step) : 0);
    shape[d] = n;
    if (n > 0)
      base += s * to_i64(own[d]);
    strides[d] = to_i64(own[d]) * step;
  }
  tensor out(x.type(), shape);
  strided_copy(x, out, to_size(base), strides);
  c.out(0) = std::move(out);
}

void k_gather(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& ind = c.in(1);
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 0), x.rank());
  const auto idx = read_ints(c, ind);
  shape_t shape(x.shape().begin(), x.shape().begin() + static_cast<std::ptrdiff_t>(axis));
  shape.insert(shape.end(), ind.shape().begin(), ind.shape().end());
  shape.insert(shape.end(), x.shape().begin() + static_cast<std::ptrdiff_t>(axis) + 1,
               x.shape().end());
  tensor out(x.type(), shape);
  const std::size_t es = element_size(x.type());
  std::size_t outer = 1;
  for (std::size_t d = 0; d < axis; ++d)
    outer *= to_size(x.shape()[d]);
  const std::int64_t dim = x.shape()[axis];
  const std::size_t inner = x.size() / std::max<std::size_t>(1, outer * to_size(dim)) * es;
  const std::size_t ni = idx.size();
  for (std::size_t o = 0; inner != 0 && o < outer; ++o) {
    for (std::size_t j = 0; j < ni; ++j) {
      std::int64_t k = idx[j] < 0 ? idx[j] + dim : idx[j];
      if (k < 0 || k >= dim) {
        c.fail("quark.onnx.runtime", "index " + std::to_string(idx[j]) + " out of range [" +
                                         std::to_string(-dim) + ", " + std::to_string(dim) + ")");
      }
      std::memcpy(out.bytes().data() + (o * ni + j) * inner,
                  x.bytes().data() + (o * to_size(dim) + to_size(k)) * inner, inner);
    }
  }
  c.out(0) = std::move(out);
}

void k_expand(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto target = read_ints(c, c.in(1));
  const shape_t shape = broadcast_shapes(c, x.shape(), target);
  check_output_elements(c, shape);
  tensor out(x.type(), shape);
  const auto st = broadcast_strides(x.shape(), shape);
  strided_copy(x, out, 0, std::vector<std::int64_t>(st.begin(), st.end()));
  c.out(0) = std::move(out);
}

void k_tile(kernel_context& c) {
  const tensor& x = c.in(0);
  const auto reps = read_ints(c, c.in(1));
  if (reps.size() != x.rank())
    c.fail("quark.onnx.shape", "repeats length differs from the rank");
  // View the output as [r0, d0, r1, d1, ...] with stride 0 over each repeat dimension.
  shape_t view;
  std::vector<std::int64_t> st;
  const auto own = strides_of(x.shape());
  shape_t shape;
  for (std::size_t d = 0; d < x.rank(); ++d) {
    if (reps[d] < 0 || reps[d] > max_extent)
      c.fail("quark.onnx.shape", "repeats must be in [0, 2^31], got " + std::to_string(reps[d]));
    view.push_back(reps[d]);
    st.push_back(0);
    view.push_back(x.shape()[d]);
    st.push_back(to_i64(own[d]));
    shape.push_back(reps[d] * x.shape()[d]);
  }
  check_output_elements(c, view);
  tensor out(x.type(), view);
  strided_copy(x, out, 0, st);
  out.reshape(shape);
  c.out(0) = std::move(out);
}

void k_constant_of_shape(kernel_context& c) {
  const auto shape = read_ints(c, c.in(0));
  for (const auto d : shape) {
    if (d < 0)
      c.fail("quark.onnx.shape", "negative dimension in " + shape_string(shape));
  }
  check_output_elements(c, shape);
  const attribute* value = c.n.find("value");
  tensor out(value && value->t ? value->t->type() : dtype_id::float32, shape);
  if (value && value->t && out.size() != 0) {
    // One value, then copies of the filled prefix doubling in length (a few memcpy calls, not
    // one per element).
    const std::size_t es = element_size(out.type());
    std::byte* dst = out.bytes().data();
    const std::size_t total = out.size() * es;
    std::memcpy(dst, value->t->bytes().data(), es);
    for (std::size_t filled = es; filled < total; filled *= 2)
      std::memcpy(dst + filled, dst, std::min(filled, total - filled));
  }
  c.out(0) = std::move(out);
}

void k_range(kernel_context& c) {
  const tensor& start = c.in(0);
  dispatch_numeric(c, start.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const T s = start.data<T>()[0];
    const T l = c.in(1).data<T>()[0];
    const T d = c.in(2).data<T>()[0];
    if (const auto dd = static_cast<double>(d); dd == 0.0 || std::isnan(dd))
      c.fail("quark.onnx.shape", "delta must be a non-zero number");
    const double n =
        std::ceil((static_cast<double>(l) - static_cast<double>(s)) / static_cast<double>(d));
    if (std::isnan(n) || n > static_cast<double>(max_extent))
      c.fail("quark.onnx.unsupported_op", "Range of more than 2^31 values (or NaN bounds)");
    const std::size_t count = n > 0 ? static_cast<std::size_t>(n) : 0;
    tensor out(start.type(), {to_i64(count)});
    auto dst = out.data<T>();
    for (std::size_t i = 0; i < count; ++i) {
      if constexpr (std::is_integral_v<T>) {
        // Modular (unsigned) arithmetic: exact whenever the value fits T, which every element
        // of the range does; a signed i * d may overflow on the way for large deltas.
        dst[i] = static_cast<T>(static_cast<std::uint64_t>(s) +
                                static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(d));
      } else {
        dst[i] = static_cast<T>(s + static_cast<T>(static_cast<T>(i) * d));
      }
    }
    c.out(0) = std::move(out);
  });
}

void k_pad(kernel_context& c) {
  const tensor& x = c.in(0);
  std::vector<std::int64_t> pads;
  double value = 0.0;
  std::vector<std::int64_t> axes;
  if (c.n.opset < 11) {
    pads = c.n.attr_ints("pads");
    value = static_cast<double>(c.n.attr_f("value", 0.0f));
  } else {
    pads = read_ints(c, c.in(1));
    if (const tensor* v = c.opt(2); v && v->size() > 0)
      value = read_doubles(*v)[0];
    if (const tensor* a = c.opt(3))
      axes = read_ints(c, *a);
  }
  const std::string mode = c.n.attr_s("mode", "constant");
  const std::size_t r = x.rank();
  std::vector<std::int64_t> begin(r, 0), end(r, 0);
  if (axes.empty()) {
    if (pads.size() != 2 * r)
      c.fail("quark.onnx.shape", "pads length must be twice the rank");
    for (std::size_t d = 0; d < r; ++d) {
      begin[d] = pads[d];
      end[d] = pads[d + r];
    }
  } else {
    if (pads.size() != 2 * axes.size())
      c.fail("quark.onnx.shape", "pads/axes lengths differ");
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const std::size_t d = norm_axis(c, axes[i], r);
      begin[d] = pads[i];
      end[d] = pads[i + axes.size()];
    }
  }
  shape_t shape(r);
  for (std::size_t d = 0; d < r; ++d) {
    if (begin[d] < -max_extent || begin[d] > max_extent || end[d] < -max_extent ||
        end[d] > max_extent)
      c.fail("quark.onnx.shape", "pads must be within [-2^31, 2^31]");
    shape[d] = x.shape()[d] + begin[d] + end[d];
    if (shape[d] < 0)
      c.fail("quark.onnx.shape", "negative output dimension");
  }
  check_output_elements(c, shape);
  tensor out(x.type(), shape);
  const std::size_t es = element_size(x.type());
  // The fill value in the element type.
  std::vector<std::byte> fill(es);
  quark::visit_dtype(x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    T v{};
    if constexpr (std::is_arithmetic_v<T>) {
      v = static_cast<T>(value);
    } else {
      v = quark::convert<T>(static_cast<float>(value));
    }
    std::memcpy(fill.data(), &v, es);
  });
  const auto in_st = strides_of(x.shape());
  const std::size_t total = out.size();
  std::vector<std::int64_t> idx(r, 0);
  for (std::size_t o = 0; o < total; ++o) {
    bool outside = false;
    std::size_t off = 0;
    for (std::size_t d = 0; d < r; ++d) {
      std::int64_t i = idx[d] - begin[d];
      const std::int64_t n = x.shape()[d];
      if (i < 0 || i >= n) {
        if (mode == "constant" || n == 0) {
          outside = true;
          break;
        }
        if (mode == "edge") {
          i = std::clamp<std::int64_t>(i, 0, n - 1);
        } else if (mode == "reflect") {
          if (n == 1) {
            i = 0;
          } else {
            const std::int64_t period = 2 * (n - 1);
            i = ((i % period) + period) % period;
            if (i >= n)
              i = period - i;
          }
        } else if (mode == "wrap") {
          i = ((i % n) + n) % n;
        } else {
          c.fail("quark.onnx.unsupported_op", "pad mode '" + mode + "'");
        }
      }
      off += to_size(i) * in_st[d];
    }
    std::memcpy(out.bytes().data() + o * es, outside ? fill.data() : x.bytes().data() + off * es,
                es);
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  c.out(0) = std::move(out);
}

void space_depth(kernel_context& c, bool to_space) {
  const tensor& x = c.in(0);
  if (x.rank() != 4)
    c.fail("quark.onnx.shape", "input must be 4-D");
  const auto b = c.n.attr_i("blocksize", 0);
  if (b <= 0 || b > max_extent)
    c.fail("quark.onnx.shape", "blocksize must be in [1, 2^31]");
  const auto n = x.shape()[0], ch = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  if (to_space) {
    if (ch % (b * b) != 0)
      c.fail("quark.onnx.shape", "channels not divisible by blocksize^2");
    const bool crd = c.n.attr_s("mode", "DCR") == "CRD";
    const auto co = ch / (b * b);
    tensor v = reshaped(c, x, crd ? shape_t{n, co, b, b, h, w} : shape_t{n, b, b, co, h, w});
    tensor p = crd ? permute(v, {0, 1, 4, 2, 5, 3}) : permute(v, {0, 3, 4, 1, 5, 2});
    c.out(0) = reshaped(c, p, {n, co, h * b, w * b});
  } else {
    if (h % b != 0 || w % b != 0)
      c.fail("quark.onnx.shape", "spatial dims not divisible");
    tensor v = reshaped(c, x, {n, ch, h / b, b, w / b, b});
    tensor p = permute(v, {0, 3, 5, 1, 2, 4});
    c.out(0) = reshaped(c, p, {n, ch * b * b, h / b, w / b});
  }
}
void k_depth_to_space(kernel_context& c) {
  space_depth(c, true);
}
void k_space_to_depth(kernel_context& c) {
  space_depth(c, false);
}

}  // namespace

void register_shape_ops(registry_map& r) {
  r["Identity"] = k_identity;
  r["Shape"] = k_shape;
  r["Size"] = k_size;
  r["Reshape"] = k_reshape;
  r["Flatten"] = k_flatten;
  r["Transpose"] = k_transpose;
  r["Squeeze"] = k_squeeze;
  r["Unsqueeze"] = k_unsqueeze;
  r["Concat"] = k_concat;
  r["Split"] = k_split;
  r["Slice"] = k_slice;
  r["Gather"] = k_gather;
  r["Expand"] = k_expand;
  r["Tile"] = k_tile;
  r["ConstantOfShape"] = k_constant_of_shape;
  r["Range"] = k_range;
  r["Pad"] = k_pad;
  r["DepthToSpace"] = k_depth_to_space;
  r["SpaceToDepth"] = k_space_to_depth;
}

}  // namespace quark::onnx::rt
