// SPDX-License-Identifier: MIT
// Operators that produce or consume element indices: ArgMax, ArgMin, TopK, Hardmax, NonZero,
// GatherElements, GatherND, Scatter (opset 9/11), ScatterElements, ScatterND, OneHot, Compress,
// Trilu, CumSum, CumProd (opset 26), ReverseSequence, EyeLike, Unique (ONNX opsets up to 17; the
// max/min reductions of 18 too). Pure data movement copies elements as bytes, so it serves every
// element type; arithmetic dispatches on the numeric types. Every index is checked before use: an
// index out of range fails naming the node, never reads or writes outside a tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// A shape seen as [outer, dim, inner] around one axis.
struct axis_view {
  std::size_t outer = 1;
  std::size_t dim = 1;
  std::size_t inner = 1;
};

axis_view view_at(const shape_t& s, std::size_t axis) {
  axis_view v;
  for (std::size_t d = 0; d < s.size(); ++d) {
    const std::size_t e = to_size(s[d]);
    if (d < axis) {
      v.outer *= e;
    } else if (d == axis) {
      v.dim = e;
    } else {
      v.inner *= e;
    }
  }
  return v;
}

/// Product of the dimensions [from, to) of a shape.
std::size_t span_count(const shape_t& s, std::size_t from, std::size_t to) {
  std::size_t n = 1;
  for (std::size_t d = from; d < to; ++d)
    n *= to_size(s[d]);
  return n;
}

/// `v` as a position along a dimension of `dim` elements, negative values counting from the end;
/// fails outside [-dim, dim).
std::size_t wrap_index(const kernel_context& c, std::int64_t v, std::int64_t dim) {
  if (v < -dim || v >= dim) {
    c.fail("quark.onnx.runtime", "index " + std::to_string(v) + " out of range [" +
                                     std::to_string(-dim) + ", " + std::to_string(dim) + ")");
  }
  return to_size(v < 0 ? v + dim : v);
}

/// Advances the row-major multi-index `pos` within `shape` (last dimension fastest).
void next_index(std::vector<std::size_t>& pos, const shape_t& shape) {
  for (std::size_t d = pos.size(); d-- > 0;) {
    if (++pos[d] < to_size(shape[d]))
      return;
    pos[d] = 0;
  }
}

/// The single integer of a 0-D or one-element 1-D int32/int64 tensor (TopK's K, Trilu's k,
/// CumSum's axis).
std::int64_t scalar_int(const kernel_context& c, const tensor& t, const std::string& what) {
  const auto v = read_ints(c, t);
  if (v.size() != 1 || t.rank() > 1) {
    c.fail("quark.onnx.shape",
           what + " must be a single value, got a tensor of shape " + shape_string(t.shape()));
  }
  return v[0];
}

/// Fails for element types the runtime cannot read as numbers (string, complex).
void require_numeric_like(const kernel_context& c, const tensor& t, const std::string& what) {
  const dtype_id id = t.type();
  if (id == dtype_id::string || id == dtype_id::complex64 || id == dtype_id::complex128 ||
      id == dtype_id::undefined) {
    c.fail("quark.onnx.runtime",
           what + " of element type " + std::string(dtype_name(id)) + " is not supported");
  }
}

/// a > b, with NaN above every number (and NaNs equal among themselves): a strict weak order.
template <class T>
bool greater(T a, T b) {
  if constexpr (is_float_v<T>) {
    if (std::isnan(a))
      return !std::isnan(b);
    if (std::isnan(b))
      return false;
  }
  return a > b;
}

// ---- ArgMax / ArgMin / Hardmax / TopK ------------------------------------------------------

template <bool Max>
void k_arg_extreme(kernel_context& c) {
  const tensor& x = c.in(0);
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 0), x.rank());
  const bool keepdims = c.n.attr_i("keepdims", 1) != 0;
  const bool last = c.n.opset >= 12 && c.n.attr_i("select_last_index", 0) != 0;
  const axis_view v = view_at(x.shape(), axis);
  if (v.dim == 0 && v.outer * v.inner != 0)
    c.fail("quark.onnx.shape", "axis " + std::to_string(axis) + " of " + shape_string(x.shape()) +
                                   " is empty: no extreme to index");
  shape_t shape = x.shape();
  if (keepdims) {
    shape[axis] = 1;
  } else {
    shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
  }
  tensor out(dtype_id::int64, shape, uninitialized);
  auto dst = out.data<std::int64_t>();
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const T* px = x.data<T>().data();
    for (std::size_t o = 0; o < v.outer; ++o) {
      for (std::size_t i = 0; i < v.inner; ++i) {
        const T* p = px + o * v.dim * v.inner + i;
        std::size_t best = 0;
        for (std::size_t j = 1; j < v.dim; ++j) {
          const T a = p[j * v.inner];
          const T b = p[best * v.inner];
          // first occurrence: strictly better; last occurrence: not worse
          const bool better = Max ? (last ? !greater(b, a) : greater(a, b))
                                  : (last ? !greater(a, b) : greater(b, a));
          if (better)
            best = j;
        }
        dst[o * v.inner + i] = to_i64(best);
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_hardmax(kernel_context& c) {
  const tensor& x = c.in(0);
  axis_view v;
  if (c.n.opset < 13) {
    // Coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])] (axis == rank allowed: D = 1).
    const std::int64_t a = c.n.attr_i("axis", 1);
    const std::size_t axis = a == to_i64(x.rank()) ? x.rank() : norm_axis(c, a, x.rank());
    v.outer = span_count(x.shape(), 0, axis);
    v.dim = span_count(x.shape(), axis, x.rank());
    v.inner = 1;
  } else {
    v = view_at(x.shape(), norm_axis(c, c.n.attr_i("axis", -1), x.rank()));
  }
  tensor out(x.type(), x.shape());  // zeros
  dispatch_float(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const T* px = x.data<T>().data();
    T* po = out.data<T>().data();
    for (std::size_t o = 0; o < v.outer && v.dim != 0; ++o) {
      for (std::size_t i = 0; i < v.inner; ++i) {
        const std::size_t base = o * v.dim * v.inner + i;
        std::size_t best = 0;
        for (std::size_t j = 1; j < v.dim; ++j) {
          if (greater(px[base + j * v.inner], px[base + best * v.inner]))
            best = j;
        }
        po[base + best * v.inner] = T(1);
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_topk(kernel_context& c) {
  const tensor& x = c.in(0);
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", -1), x.rank());
  std::int64_t k = 0;
  if (c.n.opset < 10) {
    if (!c.n.has("k"))
      c.fail("quark.onnx.shape", "attribute 'k' is required before opset 10");
    k = c.n.attr_i("k", 0);
  } else {
    k = scalar_int(c, c.in(1), "K");
  }
  const bool largest = c.n.opset < 11 || c.n.attr_i("largest", 1) != 0;
  // sorted = 0 leaves the order unspecified: the sorted order is one valid answer.
  const axis_view v = view_at(x.shape(), axis);
  if (k < 0 || to_size(k) > v.dim) {
    c.fail("quark.onnx.shape", "k = " + std::to_string(k) + " outside [0, " +
                                   std::to_string(v.dim) + "] for axis " + std::to_string(axis) +
                                   " of " + shape_string(x.shape()));
  }
  const std::size_t kk = to_size(k);
  shape_t shape = x.shape();
  shape[axis] = k;
  tensor values(x.type(), shape, uninitialized);
  tensor indices(dtype_id::int64, shape, uninitialized);
  auto pi = indices.data<std::int64_t>();
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const T* px = x.data<T>().data();
    auto pv = values.data<T>();
    std::vector<std::size_t> order(v.dim);
    for (std::size_t o = 0; o < v.outer; ++o) {
      for (std::size_t i = 0; i < v.inner; ++i) {
        const T* p = px + o * v.dim * v.inner + i;
        std::iota(order.begin(), order.end(), std::size_t{0});
        // Ties: the lower index first, for largest and smallest alike.
        auto before = [&](std::size_t a, std::size_t b) {
          const T va = p[a * v.inner];
          const T vb = p[b * v.inner];
          if (greater(va, vb))
            return largest;
          if (greater(vb, va))
            return !largest;
          return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kk),
                          order.end(), before);
        for (std::size_t j = 0; j < kk; ++j) {
          const std::size_t at = (o * kk + j) * v.inner + i;
          pv[at] = p[order[j] * v.inner];
          pi[at] = to_i64(order[j]);
        }
      }
    }
  });
  c.out(0) = std::move(values);
  if (c.output_count() > 1)
    c.out(1) = std::move(indices);
}

// ---- NonZero -------------------------------------------------------------------------------

void k_nonzero(kernel_context& c) {
  const tensor& x = c.in(0);
  require_numeric_like(c, x, "input");
  const auto vals = read_doubles(x);  // NaN != 0: counted as non-zero, as numpy does
  std::vector<std::size_t> hits;
  for (std::size_t i = 0; i < vals.size(); ++i) {
    if (vals[i] != 0.0)
      hits.push_back(i);
  }
  // A scalar gives shape [0, N] (the spec departs from numpy's [1, N] there).
  const std::size_t r = x.rank();
  tensor out(dtype_id::int64, {to_i64(r), to_i64(hits.size())}, uninitialized);
  auto dst = out.data<std::int64_t>();
  const auto st = strides_of(x.shape());
  for (std::size_t h = 0; h < hits.size(); ++h) {
    for (std::size_t d = 0; d < r; ++d)
      dst[d * hits.size() + h] = to_i64(hits[h] / st[d] % to_size(x.shape()[d]));
  }
  c.out(0) = std::move(out);
}

// ---- GatherElements / GatherND -------------------------------------------------------------

/// Checks the common shape rules of GatherElements / ScatterElements: same rank r >= 1, and the
/// indices no larger than the data outside the axis. Returns the axis.
std::size_t elements_axis(const kernel_context& c, const tensor& data, const tensor& ind) {
  if (data.rank() == 0 || ind.rank() != data.rank()) {
    c.fail("quark.onnx.shape", "indices " + shape_string(ind.shape()) + " and data " +
                                   shape_string(data.shape()) + " must have the same rank (>= 1)");
  }
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", 0), data.rank());
  for (std::size_t d = 0; d < data.rank(); ++d) {
    if (d != axis && ind.shape()[d] > data.shape()[d]) {
      c.fail("quark.onnx.shape", "indices " + shape_string(ind.shape()) + " exceed data " +
                                     shape_string(data.shape()) + " in dimension " +
                                     std::to_string(d));
    }
  }
  return axis;
}

/// For each element of `ind` (row-major), the element offset in `data` it addresses along `axis`.
std::vector<std::size_t> element_targets(const kernel_context& c, const tensor& data,
                                         const tensor& ind, std::size_t axis) {
  const auto idx = read_ints(c, ind);
  const auto st = strides_of(data.shape());
  std::vector<std::size_t> pos(ind.rank(), 0);
  std::vector<std::size_t> targets(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    std::size_t off = 0;
    for (std::size_t d = 0; d < pos.size(); ++d)
      off += (d == axis ? wrap_index(c, idx[i], data.shape()[axis]) : pos[d]) * st[d];
    targets[i] = off;
    next_index(pos, ind.shape());
  }
  return targets;
}

void k_gather_elements(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& ind = c.in(1);
  const std::size_t axis = elements_axis(c, x, ind);
  const auto targets = element_targets(c, x, ind, axis);
  tensor out(x.type(), ind.shape(), uninitialized);
  const std::size_t es = element_size(x.type());
  for (std::size_t i = 0; i < targets.size(); ++i)
    std::memcpy(out.bytes().data() + i * es, x.bytes().data() + targets[i] * es, es);
  c.out(0) = std::move(out);
}

void k_gather_nd(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& ind = c.in(1);
  const std::size_t r = x.rank();
  const std::size_t q = ind.rank();
  if (r == 0 || q == 0)
    c.fail("quark.onnx.shape", "data and indices must have rank >= 1");
  const std::int64_t bd = c.n.opset >= 12 ? c.n.attr_i("batch_dims", 0) : 0;
  if (bd < 0 || to_size(bd) >= std::min(q, r)) {
    c.fail("quark.onnx.shape", "batch_dims " + std::to_string(bd) + " must be in [0, " +
                                   std::to_string(std::min(q, r)) + ")");
  }
  const std::size_t b = to_size(bd);
  for (std::size_t d = 0; d < b; ++d) {
    if (ind.shape()[d] != x.shape()[d]) {
      c.fail("quark.onnx.shape", "batch dimensions of indices " + shape_string(ind.shape()) +
                                     " and data " + shape_string(x.shape()) + " differ");
    }
  }
  const std::size_t k = to_size(ind.shape()[q - 1]);
  if (k > r - b) {
    c.fail("quark.onnx.shape", "index tuples of length " + std::to_string(k) + " exceed the rank " +
                                   std::to_string(r - b) + " of data past the batch dimensions");
  }
  shape_t shape(ind.shape().begin(), ind.shape().end() - 1);
  shape.insert(shape.end(), x.shape().begin() + static_cast<std::ptrdiff_t>(b + k),
               x.shape().end());
  const std::size_t batches = span_count(x.shape(), 0, b);
  const std::size_t tuples = span_count(ind.shape(), b, q - 1);
  const std::size_t slice = span_count(x.shape(), b + k, r);
  const std::size_t batch_stride = span_count(x.shape(), b, r);
  const auto idx = read_ints(c, ind);
  const auto st = strides_of(x.shape());
  tensor out(x.type(), shape, uninitialized);
  const std::size_t es = element_size(x.type());
  for (std::size_t bi = 0; bi < batches; ++bi) {
    for (std::size_t j = 0; j < tuples; ++j) {
      const std::size_t t = bi * tuples + j;
      std::size_t off = bi * batch_stride;
      for (std::size_t e = 0; e < k; ++e)
        off += wrap_index(c, idx[t * k + e], x.shape()[b + e]) * st[b + e];
      if (slice != 0)  // (an empty slice: x's data may be null, which memcpy must not get)
        std::memcpy(out.bytes().data() + t * slice * es, x.bytes().data() + off * es, slice * es);
    }
  }
  c.out(0) = std::move(out);
}

// ---- Scatter / ScatterElements / ScatterND -------------------------------------------------

/// Wrapping integer arithmetic (through uint64_t: no signed overflow, no int promotion traps).
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
  } else {
    return a * b;
  }
}

/// The reduction attribute of ScatterElements / ScatterND (opset 16+; "none" before).
std::string scatter_reduction(const kernel_context& c) {
  std::string red = c.n.opset >= 16 ? c.n.attr_s("reduction", "none") : "none";
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    c.fail("quark.onnx.runtime", "reduction '" + red + "' not supported");
  return red;
}

/// out[targets[j] + s] (op)= upd[j * slice + s] for every update j and s < slice, in order.
void scatter_into(const kernel_context& c, tensor& out, const tensor& upd,
                  const std::vector<std::size_t>& targets, std::size_t slice,
                  const std::string& red) {
  if (upd.type() != out.type()) {
    c.fail("quark.onnx.runtime", "updates are " + std::string(dtype_name(upd.type())) +
                                     ", data is " + std::string(dtype_name(out.type())));
  }
  if (red == "none") {
    const std::size_t es = element_size(out.type());
    for (std::size_t j = 0; j < targets.size() && slice != 0; ++j) {
      std::memcpy(out.bytes().data() + targets[j] * es, upd.bytes().data() + j * slice * es,
                  slice * es);
    }
    return;
  }
  dispatch_numeric(c, out.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    T* po = out.data<T>().data();
    const T* pu = upd.data<T>().data();
    for (std::size_t j = 0; j < targets.size(); ++j) {
      for (std::size_t s = 0; s < slice; ++s) {
        T& a = po[targets[j] + s];
        const T u = pu[j * slice + s];
        if (red == "add") {
          a = wrap_add(a, u);
        } else if (red == "mul") {
          a = wrap_mul(a, u);
        } else if (red == "max") {
          a = std::max(a, u);
        } else {
          a = std::min(a, u);
        }
      }
    }
  });
}

/// ScatterElements, and Scatter (its deprecated opset 9/11 name, no reduction).
void k_scatter_elements(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& ind = c.in(1);
  const tensor& upd = c.in(2);
  const std::size_t axis = elements_axis(c, x, ind);
  if (upd.shape() != ind.shape()) {
    c.fail("quark.onnx.shape", "updates " + shape_string(upd.shape()) + " and indices " +
                                   shape_string(ind.shape()) + " differ");
  }
  const std::string red = c.n.op == "Scatter" ? "none" : scatter_reduction(c);
  const auto targets = element_targets(c, x, ind, axis);
  tensor out = x;
  scatter_into(c, out, upd, targets, 1, red);
  c.out(0) = std::move(out);
}

void k_scatter_nd(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& ind = c.in(1);
  const tensor& upd = c.in(2);
  const std::size_t r = x.rank();
  const std::size_t q = ind.rank();
  if (r == 0 || q == 0)
    c.fail("quark.onnx.shape", "data and indices must have rank >= 1");
  const std::size_t k = to_size(ind.shape()[q - 1]);
  if (k > r) {
    c.fail("quark.onnx.shape", "index tuples of length " + std::to_string(k) +
                                   " exceed the data rank " + std::to_string(r));
  }
  shape_t want(ind.shape().begin(), ind.shape().end() - 1);
  want.insert(want.end(), x.shape().begin() + static_cast<std::ptrdiff_t>(k), x.shape().end());
  if (upd.shape() != want) {
    c.fail("quark.onnx.shape",
           "updates have shape " + shape_string(upd.shape()) + ", expected " + shape_string(want));
  }
  const std::string red = scatter_reduction(c);
  const std::size_t tuples = span_count(ind.shape(), 0, q - 1);
  const std::size_t slice = span_count(x.shape(), k, r);
  const auto idx = read_ints(c, ind);
  const auto st = strides_of(x.shape());
  std::vector<std::size_t> targets(tuples);
  for (std::size_t j = 0; j < tuples; ++j) {
    std::size_t off = 0;
    for (std::size_t e = 0; e < k; ++e)
      off += wrap_index(c, idx[j * k + e], x.shape()[e]) * st[e];
    targets[j] = off;
  }
  tensor out = x;
  scatter_into(c, out, upd, targets, slice, red);
  c.out(0) = std::move(out);
}

// ---- OneHot --------------------------------------------------------------------------------

void k_onehot(kernel_context& c) {
  const tensor& ind = c.in(0);
  const tensor& depth_t = c.in(1);
  const tensor& values = c.in(2);
  require_numeric_like(c, ind, "indices");
  require_numeric_like(c, depth_t, "depth");
  const auto depth_v = read_doubles(depth_t);
  if (depth_v.size() != 1 || depth_t.rank() > 1) {
    c.fail("quark.onnx.shape",
           "depth must be a single value, got a tensor of shape " + shape_string(depth_t.shape()));
  }
  const double depth_d = std::trunc(depth_v[0]);  // non-integer depth: cast to int64
  if (!(depth_d >= 1.0 && depth_d <= 9.0e15))
    c.fail("quark.onnx.runtime", "depth " + std::to_string(depth_v[0]) + " outside [1, 9e15]");
  const auto depth = static_cast<std::int64_t>(depth_d);
  if (values.rank() != 1 || values.size() != 2) {
    c.fail("quark.onnx.shape",
           "values must be [off_value, on_value], got shape " + shape_string(values.shape()));
  }
  const std::size_t axis = norm_axis(c, c.n.attr_i("axis", -1), ind.rank() + 1);
  shape_t shape = ind.shape();
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis), depth);
  const std::size_t outer = span_count(ind.shape(), 0, axis);
  const std::size_t inner = span_count(ind.shape(), axis, ind.rank());
  tensor out(values.type(), shape, uninitialized);
  const std::size_t es = element_size(values.type());
  const std::byte* off_value = values.bytes().data();
  const std::byte* on_value = off_value + es;
  std::byte* po = out.bytes().data();
  for (std::size_t i = 0; i < out.size(); ++i)
    std::memcpy(po + i * es, off_value, es);
  const auto idx = read_doubles(ind);  // non-integer indices: cast to int64 (truncated)
  // Opset 11 wraps [-depth, -1]; any other index outside [0, depth) leaves an all-off row.
  const bool wrap = c.n.opset >= 11;
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      const double v = idx[o * inner + i];
      if (std::isnan(v))
        continue;
      double t = std::trunc(v);
      if (wrap && t < 0.0)
        t += depth_d;
      if (t < 0.0 || t >= depth_d)
        continue;
      const auto p = static_cast<std::size_t>(t);
      std::memcpy(po + ((o * to_size(depth) + p) * inner + i) * es, on_value, es);
    }
  }
  c.out(0) = std::move(out);
}

// ---- Compress / Trilu / CumSum / ReverseSequence / EyeLike ---------------------------------

void k_compress(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& cond = c.in(1);
  if (cond.type() != dtype_id::boolean || cond.rank() != 1) {
    c.fail("quark.onnx.runtime", "condition must be a 1-D bool tensor, got " +
                                     std::string(dtype_name(cond.type())) +
                                     shape_string(cond.shape()));
  }
  const bool has_axis = c.n.has("axis");
  axis_view v;
  std::size_t axis = 0;
  if (has_axis) {
    axis = norm_axis(c, c.n.attr_i("axis", 0), x.rank());
    v = view_at(x.shape(), axis);
  } else {
    v.dim = x.size();  // flattened
  }
  const auto cv = cond.data<bool>();
  std::vector<std::size_t> keep;
  for (std::size_t j = 0; j < cv.size(); ++j) {
    if (!cv[j])
      continue;
    if (j >= v.dim) {
      c.fail("quark.onnx.runtime", "condition selects index " + std::to_string(j) +
                                       " beyond the length " + std::to_string(v.dim));
    }
    keep.push_back(j);
  }
  shape_t shape;
  if (has_axis) {
    shape = x.shape();
    shape[axis] = to_i64(keep.size());
  } else {
    shape = {to_i64(keep.size())};
  }
  tensor out(x.type(), shape, uninitialized);
  const std::size_t row = v.inner * element_size(x.type());
  std::byte* po = out.bytes().data();
  if (row == 0) {  // empty rows: x's data may be null, which memcpy must not get
    c.out(0) = std::move(out);
    return;
  }
  for (std::size_t o = 0; o < v.outer; ++o) {
    for (std::size_t j : keep) {
      std::memcpy(po, x.bytes().data() + (o * v.dim + j) * row, row);
      po += row;
    }
  }
  c.out(0) = std::move(out);
}

void k_trilu(kernel_context& c) {
  const tensor& x = c.in(0);
  const std::size_t r = x.rank();
  if (r < 2)
    c.fail("quark.onnx.shape", "input of rank " + std::to_string(r) + ", expected >= 2");
  std::int64_t k = 0;
  if (const tensor* kt = c.opt(1))
    k = scalar_int(c, *kt, "k");
  const bool upper = c.n.attr_i("upper", 1) != 0;
  const std::int64_t rows = x.shape()[r - 2];
  const std::int64_t cols = x.shape()[r - 1];
  k = std::clamp(k, -rows - 1, cols + 1);  // beyond the matrix: all or nothing, no overflow
  const std::size_t mat = to_size(rows * cols);
  const std::size_t batches = mat == 0 ? 0 : x.size() / mat;
  const std::size_t es = element_size(x.type());
  tensor out(x.type(), x.shape());  // zeros
  for (std::size_t b = 0; b < batches; ++b) {
    for (std::int64_t i = 0; i < rows; ++i) {
      // upper keeps j - i >= k, lower keeps j - i <= k
      const std::int64_t lo = upper ? std::clamp<std::int64_t>(i + k, 0, cols) : 0;
      const std::int64_t hi = upper ? cols : std::clamp<std::int64_t>(i + k + 1, 0, cols);
      if (hi <= lo)
        continue;
      const std::size_t at = (b * mat + to_size(i * cols + lo)) * es;
      std::memcpy(out.bytes().data() + at, x.bytes().data() + at, to_size(hi - lo) * es);
    }
  }
  c.out(0) = std::move(out);
}

/// CumSum (opset 11) and CumProd (opset 26): the running sum / product along `axis`, exclusive
/// (each output leaves its own element out: the first is 0 / 1) and reversed as asked.
template <bool Product>
void cumulative(kernel_context& c) {
  if constexpr (Product) {
    if (c.n.opset < 26) {
      c.fail("quark.onnx.opset", "CumProd is an operator of opset 26; the model imports opset " +
                                     std::to_string(c.n.opset));
    }
  }
  const tensor& x = c.in(0);
  const std::size_t axis = norm_axis(c, scalar_int(c, c.in(1), "axis"), x.rank());
  const bool exclusive = c.n.attr_i("exclusive", 0) != 0;
  const bool reverse = c.n.attr_i("reverse", 0) != 0;
  const axis_view v = view_at(x.shape(), axis);
  tensor out(x.type(), x.shape(), uninitialized);
  dispatch_numeric(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    // integers accumulate modulo 2^64 (no signed overflow), then wrap to T
    using A = std::conditional_t<is_float_v<T>, T, std::uint64_t>;
    const T* px = x.data<T>().data();
    T* po = out.data<T>().data();
    for (std::size_t o = 0; o < v.outer; ++o) {
      for (std::size_t i = 0; i < v.inner; ++i) {
        A acc = Product ? A{1} : A{};
        for (std::size_t s = 0; s < v.dim; ++s) {
          const std::size_t j = reverse ? v.dim - 1 - s : s;
          const std::size_t at = (o * v.dim + j) * v.inner + i;
          // an integer's two's-complement image modulo 2^64: products and sums wrap as T's do
          const A val = static_cast<A>(px[at]);
          if (exclusive)
            po[at] = static_cast<T>(acc);
          acc = Product ? static_cast<A>(acc * val) : static_cast<A>(acc + val);
          if (!exclusive)
            po[at] = static_cast<T>(acc);
        }
      }
    }
  });
  c.out(0) = std::move(out);
}

void k_reverse_sequence(kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& lens_t = c.in(1);
  if (x.rank() < 2)
    c.fail("quark.onnx.shape", "input of rank " + std::to_string(x.rank()) + ", expected >= 2");
  const std::int64_t batch_axis = c.n.attr_i("batch_axis", 1);
  const std::int64_t time_axis = c.n.attr_i("time_axis", 0);
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0))) {
    c.fail("quark.onnx.shape", "batch_axis " + std::to_string(batch_axis) + " and time_axis " +
                                   std::to_string(time_axis) + " must be 0 and 1");
  }
  const std::size_t batch = to_size(x.shape()[to_size(batch_axis)]);
  const std::int64_t steps = x.shape()[to_size(time_axis)];
  const auto lens = read_ints(c, lens_t);
  if (lens_t.rank() != 1 || lens.size() != batch) {
    c.fail("quark.onnx.shape", "sequence_lens has shape " + shape_string(lens_t.shape()) +
                                   ", expected [" + std::to_string(batch) + "]");
  }
  const std::size_t inner = span_count(x.shape(), 2, x.rank()) * element_size(x.type());
  auto row = [&](std::size_t b, std::size_t t) {
    return (time_axis == 0 ? t * batch + b : b * to_size(steps) + t) * inner;
  };
  tensor out(x.type(), x.shape(), uninitialized);
  for (std::size_t b = 0; b < batch; ++b) {
    const std::int64_t len = lens[b];
    if (len < 0 || len > steps) {
      c.fail("quark.onnx.runtime", "sequence length " + std::to_string(len) + " outside [0, " +
                                       std::to_string(steps) + "]");
    }
    for (std::int64_t t = 0; t < steps && inner != 0; ++t) {
      const std::int64_t from = t < len ? len - 1 - t : t;
      std::memcpy(out.bytes().data() + row(b, to_size(t)), x.bytes().data() + row(b, to_size(from)),
                  inner);
    }
  }
  c.out(0) = std::move(out);
}

void k_eyelike(kernel_context& c) {
  const tensor& x = c.in(0);
  if (x.rank() != 2)
    c.fail("quark.onnx.shape", "input of rank " + std::to_string(x.rank()) + ", expected 2");
  dtype_id type = x.type();
  if (c.n.has("dtype")) {
    const auto code = static_cast<std::int32_t>(c.n.attr_i("dtype", 0));
    const auto t = dtype_from_onnx(code);
    if (!t)
      c.fail("quark.onnx.runtime", "dtype " + std::to_string(code) + " not supported");
    type = *t;
  }
  // The runtime computes float16/bfloat16 in float32 (graph outputs are narrowed on return).
  if (type == dtype_id::float16 || type == dtype_id::bfloat16)
    type = dtype_id::float32;
  tensor one(type, {1});
  if (type == dtype_id::boolean) {
    one.data<bool>()[0] = true;
  } else {
    dispatch_numeric(c, type, [&](auto id) {
      using T = typename decltype(id)::type;
      one.data<T>()[0] = T(1);
    });
  }
  const std::int64_t rows = x.shape()[0];
  const std::int64_t cols = x.shape()[1];
  const std::int64_t k = std::clamp<std::int64_t>(c.n.attr_i("k", 0), -rows - 1, cols + 1);
  tensor out(type, x.shape());  // zeros
  const std::size_t es = element_size(type);
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t j = i + k;
    if (j >= 0 && j < cols)
      std::memcpy(out.bytes().data() + to_size(i * cols + j) * es, one.bytes().data(), es);
  }
  c.out(0) = std::move(out);
}

// ---- Unique --------------------------------------------------------------------------------

/// Unique's element order: ascending, with NaN equal to NaN and after every number (the spec is
/// silent; numpy.unique does the same since 1.21). -0.0 and 0.0 are equal: one entry, the first
/// occurrence's value. A strict weak order, so sorting and grouping agree.
template <class T>
bool unique_less(T a, T b) {
  if constexpr (is_float_v<T>) {
    if (std::isnan(a))
      return false;
    if (std::isnan(b))
      return true;
  }
  return a < b;
}

void k_unique(kernel_context& c) {
  const tensor& x = c.in(0);
  const std::int64_t sorted = c.n.attr_i("sorted", 1);
  if (sorted != 0 && sorted != 1)
    c.fail("quark.onnx.runtime",
           "attribute 'sorted' is " + std::to_string(sorted) + ", expected 0 or 1");
  // Without an axis the entries are the elements of the flattened input; with one, the slices
  // x[..., j, ...] along it, each read as the row-major sequence of its outer * inner elements.
  const bool has_axis = c.n.has("axis");
  std::size_t axis = 0;
  axis_view v;
  if (has_axis) {
    axis = norm_axis(c, c.n.attr_i("axis", 0), x.rank());
    v = view_at(x.shape(), axis);
  } else {
    v.dim = x.size();
  }
  const std::size_t len = v.outer * v.inner;
  std::vector<std::size_t> order(v.dim);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<std::size_t> group_of(v.dim);  // entry -> its group, in sorted group order
  std::vector<std::size_t> first;            // group -> first (lowest) entry index
  std::vector<std::int64_t> counts;
  auto group = [&](auto id) {
    using T = typename decltype(id)::type;
    const T* px = x.data<T>().data();
    // Entries as contiguous rows (a transpose when the axis has outer dimensions before it).
    // (not std::vector<T>: no data() for bool)
    std::unique_ptr<T[]> gathered;
    const T* rows = px;
    if (v.outer > 1) {
      gathered = std::make_unique_for_overwrite<T[]>(v.dim * len);
      for (std::size_t o = 0; o < v.outer; ++o) {
        for (std::size_t j = 0; j < v.dim; ++j)
          std::copy_n(px + (o * v.dim + j) * v.inner, v.inner,
                      gathered.get() + j * len + o * v.inner);
      }
      rows = gathered.get();
    }
    // lexicographic order of rows; 0 when equal
    auto compare = [&](std::size_t a, std::size_t b) {
      const T* ra = rows + a * len;
      const T* rb = rows + b * len;
      for (std::size_t e = 0; e < len; ++e) {
        if (unique_less(ra[e], rb[e]))
          return -1;
        if (unique_less(rb[e], ra[e]))
          return 1;
      }
      return 0;
    };
    // Stable: within a group the lowest entry index comes first.
    if (len == 1) {
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return unique_less(rows[a], rows[b]); });
    } else {
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return compare(a, b) < 0; });
    }
    for (std::size_t s = 0; s < order.size(); ++s) {
      if (s == 0 || compare(order[s - 1], order[s]) != 0) {
        first.push_back(order[s]);
        counts.push_back(0);
      }
      group_of[order[s]] = first.size() - 1;
      ++counts.back();
    }
  };
  if (x.type() == dtype_id::boolean) {
    group(std::type_identity<bool>{});
  } else {
    dispatch_numeric(c, x.type(), group);
  }
  const std::size_t u = first.size();
  // out_pos[g]: where sorted group g goes in the outputs (by first occurrence when not sorted).
  std::vector<std::size_t> out_pos(u);
  std::iota(out_pos.begin(), out_pos.end(), std::size_t{0});
  if (sorted == 0) {
    std::vector<std::size_t> by_first(u);
    std::iota(by_first.begin(), by_first.end(), std::size_t{0});
    std::sort(by_first.begin(), by_first.end(),
              [&](std::size_t a, std::size_t b) { return first[a] < first[b]; });
    for (std::size_t p = 0; p < u; ++p)
      out_pos[by_first[p]] = p;
  }
  shape_t shape{to_i64(u)};
  if (has_axis) {
    shape = x.shape();
    shape[axis] = to_i64(u);
  }
  tensor y(x.type(), shape, uninitialized);
  tensor indices(dtype_id::int64, {to_i64(u)}, uninitialized);
  tensor inverse(dtype_id::int64, {to_i64(v.dim)}, uninitialized);
  tensor count_t(dtype_id::int64, {to_i64(u)}, uninitialized);
  const std::size_t row = v.inner * element_size(x.type());
  for (std::size_t g = 0; g < u; ++g) {
    const std::size_t p = out_pos[g];
    indices.data<std::int64_t>()[p] = to_i64(first[g]);
    count_t.data<std::int64_t>()[p] = counts[g];
    for (std::size_t o = 0; o < v.outer && row != 0; ++o) {
      std::memcpy(y.bytes().data() + (o * u + p) * row,
                  x.bytes().data() + (o * v.dim + first[g]) * row, row);
    }
  }
  for (std::size_t j = 0; j < v.dim; ++j)
    inverse.data<std::int64_t>()[j] = to_i64(out_pos[group_of[j]]);
  c.out(0) = std::move(y);
  if (c.output_count() > 1)
    c.out(1) = std::move(indices);
  if (c.output_count() > 2)
    c.out(2) = std::move(inverse);
  if (c.output_count() > 3)
    c.out(3) = std::move(count_t);
}

}  // namespace

void register_index_ops(registry_map& r) {
  r["ArgMax"] = k_arg_extreme<true>;
  r["ArgMin"] = k_arg_extreme<false>;
  r["TopK"] = k_topk;
  r["Hardmax"] = k_hardmax;
  r["NonZero"] = k_nonzero;
  r["GatherElements"] = k_gather_elements;
  r["GatherND"] = k_gather_nd;
  r["Scatter"] = k_scatter_elements;
  r["ScatterElements"] = k_scatter_elements;
  r["ScatterND"] = k_scatter_nd;
  r["OneHot"] = k_onehot;
  r["Compress"] = k_compress;
  r["Trilu"] = k_trilu;
  r["CumSum"] = cumulative<false>;
  r["CumProd"] = cumulative<true>;
  r["ReverseSequence"] = k_reverse_sequence;
  r["EyeLike"] = k_eyelike;
  r["Unique"] = k_unique;
}

}  // namespace quark::onnx::rt
