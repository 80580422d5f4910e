// SPDX-License-Identifier: MIT
// Einsum (opset 12): the whole equation grammar (explicit and implicit output, '...' broadcast
// dimensions of any rank per operand, repeated subscripts within a term as diagonals, summed
// subscripts, any number of operands, whitespace) for the numeric element types.
//
// Operands are contracted pairwise from left to right, each step keeping the subscripts the output
// or a later operand still needs, so a chain never multiplies every summed range together. A
// float32 pair is laid out as [batch, rows, inner] x [batch, inner, cols] and handed to the
// runtime's GEMM (operands already in such a layout, transposed or not, are used in place); other
// element types and tiny products use a strided loop that accumulates in double (floats) or
// modulo 2^64 (integers, as the integer types wrap).
#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <string>
#include <vector>

#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

// ---- the equation -------------------------------------------------------------------------

/// Subscript ids: 'A'-'Z' are 0-25, 'a'-'z' 26-51 (ASCII order, which the implicit output
/// sorts by), and dimension j of the broadcast ('...') dimensions is 52 + j.
constexpr std::size_t letter_ids = 52;
constexpr std::size_t no_id = std::numeric_limits<std::size_t>::max();

std::size_t letter_id(char ch) {
  if (ch >= 'A' && ch <= 'Z')
    return static_cast<std::size_t>(ch - 'A');
  if (ch >= 'a' && ch <= 'z')
    return 26 + static_cast<std::size_t>(ch - 'a');
  return no_id;
}

/// One term of the equation: its letters, and where '...' stands among them (none if absent).
struct term {
  std::string text;
  std::vector<std::size_t> letters;
  std::size_t ellipsis = no_id;
};

struct equation {
  std::vector<term> inputs;
  term output;
  bool explicit_output = false;
};

[[noreturn]] void bad_term(const kernel_context& c, const std::string& eq, const std::string& text,
                           const std::string& problem) {
  c.fail("quark.onnx.runtime", "equation '" + eq + "': " + problem + " in term '" + text + "'");
}

term parse_term(const kernel_context& c, const std::string& eq, const std::string& text) {
  term t;
  t.text = text;
  for (std::size_t i = 0; i < text.size();) {
    const char ch = text[i];
    if (ch == '.') {
      if (text.compare(i, 3, "...") != 0)
        bad_term(c, eq, text, "a '.' outside an ellipsis '...'");
      if (t.ellipsis != no_id)
        bad_term(c, eq, text, "more than one ellipsis");
      t.ellipsis = t.letters.size();
      i += 3;
      continue;
    }
    const std::size_t id = letter_id(ch);
    if (id == no_id)
      bad_term(c, eq, text, std::string("unexpected character '") + ch + "'");
    t.letters.push_back(id);
    ++i;
  }
  return t;
}

equation parse_equation(const kernel_context& c, const std::string& eq, std::size_t operands) {
  std::string s;
  for (const char ch : eq) {
    if (std::isspace(static_cast<unsigned char>(ch)) == 0)
      s += ch;
  }
  equation e;
  std::string lhs = s;
  if (const std::size_t arrow = s.find("->"); arrow != std::string::npos) {
    if (s.find("->", arrow + 2) != std::string::npos)
      c.fail("quark.onnx.runtime", "equation '" + eq + "': more than one '->'");
    lhs = s.substr(0, arrow);
    e.explicit_output = true;
    const std::string rhs = s.substr(arrow + 2);
    if (rhs.find(',') != std::string::npos)
      c.fail("quark.onnx.runtime", "equation '" + eq + "': a ',' in the output term");
    e.output = parse_term(c, eq, rhs);
  }
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = lhs.find(',', from);
    e.inputs.push_back(parse_term(c, eq, lhs.substr(from, comma - from)));
    if (comma == std::string::npos)
      break;
    from = comma + 1;
  }
  if (e.inputs.size() != operands) {
    c.fail("quark.onnx.runtime", "equation '" + eq + "' has " + std::to_string(e.inputs.size()) +
                                     " operand terms for " + std::to_string(operands) + " inputs");
  }
  return e;
}

std::string subscript_name(std::size_t id) {
  if (id < 26)
    return std::string(1, static_cast<char>('A' + id));
  if (id < letter_ids)
    return std::string(1, static_cast<char>('a' + (id - 26)));
  return "... dimension " + std::to_string(id - letter_ids);
}

// ---- operands as strided views over subscripts ----------------------------------------------

/// An operand seen through its subscripts: for each subscript id, whether the operand has it, its
/// extent there (1 on a broadcast '...' dimension) and its stride in elements (the sum of the
/// strides of the dimensions a repeated letter names: a diagonal).
struct view {
  std::vector<unsigned char> has;
  std::vector<std::size_t> ext;
  std::vector<std::size_t> stride;

  explicit view(std::size_t ids) : has(ids, 0), ext(ids, 1), stride(ids, 0) {}
  /// The stride to step along `id`: 0 where the operand lacks it or broadcasts it.
  std::size_t step(std::size_t id) const { return has[id] != 0 && ext[id] > 1 ? stride[id] : 0; }
};

template <class T>
struct operand {
  const T* data = nullptr;
  view v;
  tensor storage;  ///< an intermediate's own values (data points into it); empty for inputs
};

/// A dense row-major operand with subscripts `order` of extents `ext`.
template <class T>
operand<T> dense_operand(std::size_t ids, const std::vector<std::size_t>& order,
                         const std::vector<std::size_t>& ext, dtype_id type) {
  operand<T> r{nullptr, view(ids), {}};
  shape_t shape;
  std::size_t acc = 1;
  for (std::size_t d = order.size(); d-- > 0;) {
    r.v.has[order[d]] = 1;
    r.v.ext[order[d]] = ext[d];
    r.v.stride[order[d]] = acc;
    acc *= ext[d];
  }
  for (const std::size_t e : ext)
    shape.push_back(to_i64(e));
  r.storage = tensor(type, shape, uninitialized);
  r.data = r.storage.template data<T>().data();
  return r;
}

/// Whether `v` is laid out densely row-major in the subscript order `order` (extent-1 subscripts
/// ignored), so it can be read as a matrix without a copy.
bool dense_in(const view& v, const std::vector<std::size_t>& order) {
  std::size_t expect = 1;
  for (std::size_t d = order.size(); d-- > 0;) {
    const std::size_t id = order[d];
    if (v.ext[id] == 1)
      continue;
    if (v.stride[id] != expect)
      return false;
    expect *= v.ext[id];
  }
  return true;
}

std::size_t product(const std::vector<std::size_t>& v) {
  std::size_t n = 1;
  for (const std::size_t e : v)
    n *= e;
  return n;
}

/// Floats accumulate in double; integers modulo 2^64 (the product and sum of the wrapped values
/// are then the wrapped result, with no signed overflow).
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, std::uint64_t>;

template <class T>
acc_t<T> to_acc(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(v);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));  // sign-extended
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

/// table[id] for each id of `ids`.
std::vector<std::size_t> pick(const std::vector<std::size_t>& table,
                              const std::vector<std::size_t>& ids) {
  std::vector<std::size_t> r;
  r.reserve(ids.size());
  for (const std::size_t id : ids)
    r.push_back(table[id]);
  return r;
}

/// dst[out] = sum over `sum` of the product of the N operands (N = 1 or 2), for every index of
/// the subscripts `out` (extents out_ext, row-major into dst). Loop extents are the given ones; an
/// operand of extent 1 on a subscript is broadcast along it.
template <class T, std::size_t N>
void contract_loop(thread_pool& pool, const std::array<const operand<T>*, N>& ops,
                   const std::vector<std::size_t>& out, const std::vector<std::size_t>& out_ext,
                   const std::vector<std::size_t>& sum, const std::vector<std::size_t>& sum_ext,
                   T* dst) {
  using A = acc_t<T>;
  const std::size_t p = out.size();
  const std::size_t q = sum.size();
  std::array<std::vector<std::size_t>, N> os;
  std::array<std::vector<std::size_t>, N> ss;
  std::array<std::size_t, N> inner_step{};
  for (std::size_t k = 0; k < N; ++k) {
    for (const std::size_t id : out)
      os[k].push_back(ops[k]->v.step(id));
    for (const std::size_t id : sum)
      ss[k].push_back(ops[k]->v.step(id));
    inner_step[k] = q != 0 ? ss[k][q - 1] : 0;
  }
  const std::size_t total = product(out_ext);
  const std::size_t inner = q != 0 ? sum_ext[q - 1] : 1;
  std::size_t outer = 1;  // index count of the summed subscripts but the innermost
  for (std::size_t e = 0; e + 1 < q; ++e)
    outer *= sum_ext[e];
  const bool empty_sum = product(sum_ext) == 0;
  if (total == 0)
    return;
  const std::size_t work = std::max<std::size_t>(1, product(sum_ext) * N);
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 15) / work);
  pool.parallel_for(total, grain, [&](std::size_t lo, std::size_t hi) {
    std::vector<std::size_t> idx(p, 0);
    std::vector<std::size_t> sidx(q, 0);
    std::array<std::size_t, N> base{};
    std::size_t rem = lo;
    for (std::size_t d = p; d-- > 0;) {
      idx[d] = rem % out_ext[d];
      rem /= out_ext[d];
      for (std::size_t k = 0; k < N; ++k)
        base[k] += idx[d] * os[k][d];
    }
    for (std::size_t o = lo; o < hi; ++o) {
      A acc{};
      if (!empty_sum) {
        std::array<std::size_t, N> off = base;
        for (std::size_t s = 0; s < outer; ++s) {
          for (std::size_t j = 0; j < inner; ++j) {
            A t = to_acc(ops[0]->data[off[0] + j * inner_step[0]]);
            for (std::size_t k = 1; k < N; ++k)
              t *= to_acc(ops[k]->data[off[k] + j * inner_step[k]]);
            acc += t;
          }
          // next index of the summed subscripts but the innermost
          for (std::size_t e = q > 0 ? q - 1 : 0; e-- > 0;) {
            ++sidx[e];
            for (std::size_t k = 0; k < N; ++k)
              off[k] += ss[k][e];
            if (sidx[e] < sum_ext[e])
              break;
            for (std::size_t k = 0; k < N; ++k)
              off[k] -= ss[k][e] * sidx[e];
            sidx[e] = 0;
          }
        }
      }
      dst[o] = static_cast<T>(acc);
      for (std::size_t d = p; d-- > 0;) {
        ++idx[d];
        for (std::size_t k = 0; k < N; ++k)
          base[k] += os[k][d];
        if (idx[d] < out_ext[d])
          break;
        for (std::size_t k = 0; k < N; ++k)
          base[k] -= os[k][d] * idx[d];
        idx[d] = 0;
      }
    }
  });
}

/// `x` rewritten densely in the subscript order `order` (extents `ext`, which may exceed x's
/// broadcast extents), summed over the subscripts `sum`.
template <class T>
operand<T> repack(thread_pool& pool, std::size_t ids, dtype_id type, const operand<T>& x,
                  const std::vector<std::size_t>& order, const std::vector<std::size_t>& ext,
                  const std::vector<std::size_t>& sum) {
  operand<T> r = dense_operand<T>(ids, order, ext, type);
  contract_loop<T, 1>(pool, {&x}, order, ext, sum, pick(x.v.ext, sum),
                      r.storage.template data<T>().data());
  return r;
}

/// Below this many multiply-adds per matrix product, the strided loop beats a GEMM call.
constexpr std::size_t gemm_min_volume = 64;

/// The contraction of a and b over every subscript not in `keep`, as a dense operand whose
/// subscripts are [batch, rows, cols]: batch = kept subscripts of both, rows = kept of a only,
/// cols = kept of b only. Within each group the order follows `rank` (output position), then
/// the operand's own memory order, so an already-dense operand needs no copy.
template <class T>
operand<T> contract_pair(kernel_context& c, std::size_t ids, dtype_id type, const operand<T>& a,
                         const operand<T>& b, const std::vector<unsigned char>& keep,
                         const std::vector<std::size_t>& rank) {
  std::vector<std::size_t> batch, rows, cols, inner, only_a, only_b;
  std::vector<std::size_t> ext(ids, 1);
  for (std::size_t id = 0; id < ids; ++id) {
    const bool ia = a.v.has[id] != 0;
    const bool ib = b.v.has[id] != 0;
    if (!ia && !ib)
      continue;
    // numpy broadcasting: an extent 1 stretches to the other (which may be 0: not std::max,
    // which turned a 0 against an absent subscript into 1 and read past an empty operand)
    const std::size_t ea = ia ? a.v.ext[id] : 1;
    const std::size_t eb = ib ? b.v.ext[id] : 1;
    ext[id] = ea == 1 ? eb : ea;
    if (keep[id] != 0) {
      (ia && ib ? batch : ia ? rows : cols).push_back(id);
    } else {
      (ia && ib ? inner : ia ? only_a : only_b).push_back(id);
    }
  }
  auto order_by = [&](std::vector<std::size_t>& group, const view& mem) {
    std::stable_sort(group.begin(), group.end(), [&](std::size_t x, std::size_t y) {
      if (rank[x] != rank[y])
        return rank[x] < rank[y];
      return mem.stride[x] > mem.stride[y];
    });
  };
  order_by(batch, a.v);
  order_by(rows, a.v);
  order_by(cols, b.v);
  order_by(inner, a.v);
  auto exts = [&](const std::vector<std::size_t>& g) { return pick(ext, g); };
  const std::size_t m = product(exts(rows));
  const std::size_t n = product(exts(cols));
  const std::size_t k = product(exts(inner));
  const bool use_gemm = std::is_same_v<T, float> && m * n * k >= gemm_min_volume;

  std::vector<std::size_t> result_order = batch;
  result_order.insert(result_order.end(), rows.begin(), rows.end());
  result_order.insert(result_order.end(), cols.begin(), cols.end());
  operand<T> r = dense_operand<T>(ids, result_order, exts(result_order), type);
  T* dst = r.storage.template data<T>().data();

  // Operand x as [batch, g1, g2] (or [batch, g2, g1], transposed), packed when it is not already
  // laid out so or has subscripts of its own to sum first. The GEMM needs the summed extents
  // materialised (an operand may broadcast a summed '...' dimension); the loop does not.
  auto prepare = [&](const operand<T>& x, const std::vector<std::size_t>& g1,
                     const std::vector<std::size_t>& g2, const std::vector<std::size_t>& own_sum,
                     const std::vector<std::size_t>& summed, operand<T>& packed,
                     bool& transposed) -> const operand<T>& {
    transposed = false;
    std::vector<std::size_t> order = batch;
    order.insert(order.end(), g1.begin(), g1.end());
    order.insert(order.end(), g2.begin(), g2.end());
    bool broadcast_sum = false;
    for (const std::size_t id : summed)
      broadcast_sum = broadcast_sum || x.v.ext[id] != ext[id];
    if (own_sum.empty() && (!use_gemm || (!broadcast_sum && dense_in(x.v, order))))
      return x;
    if (use_gemm && own_sum.empty() && !broadcast_sum) {
      std::vector<std::size_t> flipped = batch;
      flipped.insert(flipped.end(), g2.begin(), g2.end());
      flipped.insert(flipped.end(), g1.begin(), g1.end());
      if (dense_in(x.v, flipped)) {
        transposed = true;
        return x;
      }
    }
    std::vector<std::size_t> pext;
    pext.reserve(order.size());
    for (const std::size_t id : batch)
      pext.push_back(x.v.ext[id]);
    for (const std::size_t id : g1)
      pext.push_back(use_gemm ? ext[id] : x.v.ext[id]);
    for (const std::size_t id : g2)
      pext.push_back(use_gemm ? ext[id] : x.v.ext[id]);
    packed = repack<T>(c.pool, ids, type, x, order, pext, own_sum);
    return packed;
  };
  operand<T> pa{nullptr, view(ids), {}};
  operand<T> pb{nullptr, view(ids), {}};
  bool ta = false;
  bool tb = false;
  const operand<T>& xa = prepare(a, rows, inner, only_a, inner, pa, ta);
  const operand<T>& xb = prepare(b, inner, cols, only_b, inner, pb, tb);

  if (!use_gemm) {
    contract_loop<T, 2>(c.pool, {&xa, &xb}, result_order, exts(result_order), inner, exts(inner),
                        dst);
    return r;
  }
  if constexpr (std::is_same_v<T, float>) {
    const std::vector<std::size_t> bext = exts(batch);
    const std::size_t nb = product(bext);
    std::vector<std::size_t> sa, sb;
    for (const std::size_t id : batch) {
      sa.push_back(xa.v.step(id));
      sb.push_back(xb.v.step(id));
    }
    const std::size_t lda = ta ? m : k;
    const std::size_t ldb = tb ? k : n;
    auto one = [&](thread_pool* pool, std::size_t bi) {
      std::size_t oa = 0, ob = 0, rem = bi;
      for (std::size_t d = batch.size(); d-- > 0;) {
        const std::size_t i = rem % bext[d];
        rem /= bext[d];
        oa += i * sa[d];
        ob += i * sb[d];
      }
      gemm(pool, ta, tb, m, n, k, 1.0f, xa.data + oa, lda, xb.data + ob, ldb, 0.0f,
           dst + bi * m * n, n);
    };
    const double flops =
        2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    if (nb > 1 && flops < 2e6) {
      // Small products: one thread per run of batches (GEMM would not split them itself).
      const auto grain = static_cast<std::size_t>(std::max(1.0, 2e6 / flops));
      c.pool.parallel_for(nb, grain, [&](std::size_t lo, std::size_t hi) {
        for (std::size_t bi = lo; bi < hi; ++bi)
          one(nullptr, bi);
      });
    } else {
      for (std::size_t bi = 0; bi < nb; ++bi)
        one(&c.pool, bi);
    }
  }
  return r;
}

// ---- the kernel -----------------------------------------------------------------------------

/// The operands bound to the equation: every subscript's extent checked and known.
struct binding {
  std::size_t ids = letter_ids;  ///< subscript ids in use: letters, then '...' dimensions
  std::vector<view> views;       ///< per input
  std::vector<std::size_t> out;  ///< output subscripts, in output order
  shape_t out_shape;
};

binding bind_operands(const kernel_context& c, const std::string& eq, const equation& e) {
  binding b;
  const std::size_t n = e.inputs.size();
  // Rank of each operand's '...' part, and the widest, which all of them broadcast to.
  std::vector<std::size_t> ell(n, 0);
  std::size_t ell_rank = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const term& t = e.inputs[i];
    const tensor& x = c.in(i);
    const bool fits =
        t.ellipsis == no_id ? x.rank() == t.letters.size() : x.rank() >= t.letters.size();
    if (!fits) {
      c.fail("quark.onnx.shape", "term '" + t.text + "' of equation '" + eq + "' needs rank " +
                                     (t.ellipsis == no_id ? "" : ">= ") +
                                     std::to_string(t.letters.size()) + ", input '" +
                                     c.n.inputs[i] + "' has shape " + shape_string(x.shape()));
    }
    if (t.ellipsis != no_id) {
      ell[i] = x.rank() - t.letters.size();
      ell_rank = std::max(ell_rank, ell[i]);
    }
  }
  b.ids = letter_ids + ell_rank;
  std::vector<std::size_t> size(b.ids, no_id);
  std::vector<std::size_t> bound_by(b.ids, 0);  // the input that fixed a subscript's size
  std::vector<std::size_t> count(b.ids, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const term& t = e.inputs[i];
    const tensor& x = c.in(i);
    const auto st = strides_of(x.shape());
    view v(b.ids);
    for (std::size_t d = 0; d < x.rank(); ++d) {
      // dimension d is a letter before the ellipsis, a '...' dimension, or a letter after it
      std::size_t id = 0;
      const bool in_ellipsis = t.ellipsis != no_id && d >= t.ellipsis && d < t.ellipsis + ell[i];
      if (in_ellipsis) {
        id = letter_ids + (ell_rank - ell[i]) + (d - t.ellipsis);
      } else {
        id = t.letters[t.ellipsis != no_id && d >= t.ellipsis ? d - ell[i] : d];
      }
      const auto len = to_size(x.shape()[d]);
      ++count[id];
      if (in_ellipsis) {
        // numpy broadcasting: 1 stretches, other extents must agree
        if (size[id] == no_id || size[id] == 1) {
          size[id] = len;
          bound_by[id] = i;
        } else if (len != 1 && len != size[id]) {
          c.fail("quark.onnx.shape",
                 "the '...' dimensions of input '" + c.n.inputs[bound_by[id]] + "' " +
                     shape_string(c.in(bound_by[id]).shape()) + " and input '" + c.n.inputs[i] +
                     "' " + shape_string(x.shape()) + " do not broadcast (equation '" + eq + "')");
        }
      } else if (size[id] == no_id) {
        size[id] = len;
        bound_by[id] = i;
      } else if (size[id] != len) {
        c.fail("quark.onnx.shape", "subscript '" + subscript_name(id) + "' of equation '" + eq +
                                       "' is bound to sizes " + std::to_string(size[id]) +
                                       " (input '" + c.n.inputs[bound_by[id]] + "' " +
                                       shape_string(c.in(bound_by[id]).shape()) + ") and " +
                                       std::to_string(len) + " (input '" + c.n.inputs[i] + "' " +
                                       shape_string(x.shape()) + ")");
      }
      if (v.has[id] != 0) {
        v.stride[id] += st[d];  // a repeated letter: walk the diagonal
      } else {
        v.has[id] = 1;
        v.ext[id] = len;
        v.stride[id] = st[d];
      }
    }
    b.views.push_back(std::move(v));
  }
  auto add_ellipsis = [&]() {
    for (std::size_t j = 0; j < ell_rank; ++j)
      b.out.push_back(letter_ids + j);
  };
  if (e.explicit_output) {
    // Without '...' in the output, the '...' dimensions are summed like any absent letter.
    std::vector<unsigned char> seen(letter_ids, 0);
    for (std::size_t j = 0; j <= e.output.letters.size(); ++j) {
      if (j == e.output.ellipsis)
        add_ellipsis();
      if (j == e.output.letters.size())
        break;
      const std::size_t id = e.output.letters[j];
      if (count[id] == 0) {
        c.fail("quark.onnx.runtime", "output subscript '" + subscript_name(id) + "' of equation '" +
                                         eq + "' appears in no input term");
      }
      if (seen[id] != 0) {
        c.fail("quark.onnx.runtime", "output subscript '" + subscript_name(id) +
                                         "' is repeated in equation '" + eq + "'");
      }
      seen[id] = 1;
      b.out.push_back(id);
    }
  } else {
    // Implicit output: the '...' dimensions, then the letters seen once, in ASCII order.
    add_ellipsis();
    for (std::size_t id = 0; id < letter_ids; ++id) {
      if (count[id] == 1)
        b.out.push_back(id);
    }
  }
  for (const std::size_t id : b.out)
    b.out_shape.push_back(to_i64(size[id]));
  return b;
}

template <class T>
void run_einsum(kernel_context& c, const binding& b, dtype_id type) {
  const std::size_t n = b.views.size();
  std::vector<operand<T>> ops;
  for (std::size_t i = 0; i < n; ++i)
    ops.push_back(operand<T>{c.in(i).template data<T>().data(), b.views[i], {}});
  // rank[id]: position in the output (output subscripts first, in output order).
  std::vector<std::size_t> rank(b.ids, b.out.size());
  for (std::size_t j = 0; j < b.out.size(); ++j)
    rank[b.out[j]] = j;
  operand<T> acc = std::move(ops[0]);
  for (std::size_t i = 1; i < n; ++i) {
    std::vector<unsigned char> keep(b.ids, 0);
    for (const std::size_t id : b.out)
      keep[id] = 1;
    for (std::size_t later = i + 1; later < n; ++later) {
      for (std::size_t id = 0; id < b.ids; ++id)
        keep[id] = keep[id] != 0 || ops[later].v.has[id] != 0 ? 1 : 0;
    }
    operand<T> next = contract_pair<T>(c, b.ids, type, acc, ops[i], keep, rank);
    acc = std::move(next);
  }
  // acc's storage moved with it (the buffer keeps its address), so acc.data is still valid.
  // What is left: sum what the output drops, put the rest in output order.
  std::vector<std::size_t> order;
  std::vector<std::size_t> sum;
  for (std::size_t id = 0; id < b.ids; ++id) {
    if (acc.v.has[id] != 0 && rank[id] == b.out.size())
      sum.push_back(id);
  }
  const bool in_place =
      n > 1 && sum.empty() && acc.storage.shape() == b.out_shape && dense_in(acc.v, b.out);
  if (in_place) {
    c.out(0) = std::move(acc.storage);
    return;
  }
  std::vector<std::size_t> out_ext;
  out_ext.reserve(b.out_shape.size());
  for (const auto d : b.out_shape)
    out_ext.push_back(to_size(d));
  tensor out(type, b.out_shape, uninitialized);
  contract_loop<T, 1>(c.pool, {&acc}, b.out, out_ext, sum, pick(acc.v.ext, sum),
                      out.data<T>().data());
  c.out(0) = std::move(out);
}

void k_einsum(kernel_context& c) {
  if (c.input_count() == 0)
    c.fail("quark.onnx.runtime", "Einsum needs at least one input");
  if (!c.n.has("equation"))
    c.fail("quark.onnx.runtime", "attribute 'equation' is required");
  const std::string eq = c.n.attr_s("equation", "");
  const dtype_id type = c.in(0).type();
  for (std::size_t i = 1; i < c.input_count(); ++i) {
    if (c.in(i).type() != type) {
      c.fail("quark.onnx.runtime", "input '" + c.n.inputs[i] + "' is " +
                                       std::string(dtype_name(c.in(i).type())) + ", input '" +
                                       c.n.inputs[0] + "' is " + std::string(dtype_name(type)) +
                                       ": the operands must share one element type");
    }
  }
  const equation e = parse_equation(c, eq, c.input_count());
  const binding b = bind_operands(c, eq, e);
  dispatch_numeric(c, type, [&](auto id) {
    using T = typename decltype(id)::type;
    run_einsum<T>(c, b, type);
  });
}

}  // namespace

void register_einsum(registry_map& r) {
  r["Einsum"] = k_einsum;
}

}  // namespace quark::onnx::rt
