// SPDX-License-Identifier: MIT
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference: the loss value as a function
// of its inputs, as evaluation graphs exported with their loss compute it). Both share one pass:
// validate every target first (so an error names the first bad position whatever the thread
// count), then gather -w[t] * logprob[n, t, d] per position. Sums run over fixed-size chunks
// added in order, so sum and mean do not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

enum class reduction { none, sum, mean };

reduction reduction_of(const kernel_context& c) {
  const std::string r = c.n.attr_s("reduction", "mean");
  if (r == "none")
    return reduction::none;
  if (r == "sum")
    return reduction::sum;
  if (r == "mean")
    return reduction::mean;
  c.fail("quark.onnx.runtime", "attribute 'reduction' is '" + r + "', expected none, sum or mean");
}

/// The problem in the flat view [N, C, D] (D: product of d1..dk, 1 when there are none).
struct loss_problem {
  std::size_t n = 0;
  std::size_t classes = 0;
  std::size_t inner = 1;
  shape_t target_shape;
  reduction red = reduction::mean;
  std::optional<std::int64_t> ignore;
  std::vector<std::int64_t> target;
  const tensor* weight = nullptr;
};

/// Checks ranks, shapes and element types of input 0 (scores or log-probabilities), input 1
/// (targets) and the optional input 2 (class weights); reads the targets and the attributes.
loss_problem prepare(const kernel_context& c) {
  const tensor& x = c.in(0);
  const tensor& t = c.in(1);
  const std::string& xn = c.n.inputs[0];
  const std::string& tn = c.n.inputs[1];
  if (x.type() != dtype_id::float32 && x.type() != dtype_id::float64) {
    c.fail("quark.onnx.runtime", "input '" + xn + "' is " + std::string(dtype_name(x.type())) +
                                     ", expected float32 or float64");
  }
  if (t.type() != dtype_id::int32 && t.type() != dtype_id::int64) {
    c.fail("quark.onnx.runtime", "target '" + tn + "' is " + std::string(dtype_name(t.type())) +
                                     ", expected int32 or int64");
  }
  if (x.rank() < 2) {
    c.fail("quark.onnx.shape", "input '" + xn + "' has shape " + shape_string(x.shape()) +
                                   ", expected [N, C] or [N, C, d1, ..., dk]");
  }
  loss_problem p;
  p.n = to_size(x.shape()[0]);
  p.classes = to_size(x.shape()[1]);
  p.target_shape.push_back(x.shape()[0]);
  for (std::size_t d = 2; d < x.rank(); ++d) {
    p.target_shape.push_back(x.shape()[d]);
    p.inner *= to_size(x.shape()[d]);
  }
  if (t.shape() != p.target_shape) {
    c.fail("quark.onnx.shape", "target '" + tn + "' has shape " + shape_string(t.shape()) +
                                   ", expected " + shape_string(p.target_shape) + " for input '" +
                                   xn + "' of shape " + shape_string(x.shape()));
  }
  if (const tensor* w = c.opt(2)) {
    const std::string& wn = c.n.inputs[2];
    if (w->type() != x.type()) {
      c.fail("quark.onnx.runtime", "weight '" + wn + "' is " + std::string(dtype_name(w->type())) +
                                       ", expected " + std::string(dtype_name(x.type())) +
                                       " like input '" + xn + "'");
    }
    if (w->rank() != 1 || to_size(w->shape()[0]) != p.classes) {
      c.fail("quark.onnx.shape", "weight '" + wn + "' has shape " + shape_string(w->shape()) +
                                     ", expected [" + std::to_string(p.classes) +
                                     "] (C of input '" + xn + "' of shape " +
                                     shape_string(x.shape()) + ")");
    }
    p.weight = w;
  }
  p.red = reduction_of(c);
  if (c.n.has("ignore_index"))
    p.ignore = c.n.attr_i("ignore_index", 0);
  p.target = read_ints(c, t);
  return p;
}

/// Fails on the first target outside [0, C) that is not ignore_index, naming its position.
void check_targets(const kernel_context& c, const loss_problem& p) {
  const auto classes = to_i64(p.classes);
  for (std::size_t i = 0; i < p.target.size(); ++i) {
    const std::int64_t v = p.target[i];
    if ((v >= 0 && v < classes) || (p.ignore && v == *p.ignore))
      continue;
    // The multi-index of flat position i in the target's shape.
    std::vector<std::size_t> coord(p.target_shape.size());
    std::size_t rest = i;
    for (std::size_t d = coord.size(); d-- > 0;) {
      const auto len = to_size(p.target_shape[d]);
      coord[d] = rest % len;
      rest /= len;
    }
    std::string at;
    for (std::size_t d = 0; d < coord.size(); ++d) {
      if (d)
        at += ',';
      at += std::to_string(coord[d]);
    }
    c.fail("quark.onnx.runtime",
           "target '" + c.n.inputs[1] + "'[" + at + "] is " + std::to_string(v) + ", outside [0, " +
               std::to_string(p.classes) + ")" +
               (p.ignore ? " and not ignore_index " + std::to_string(*p.ignore)
                         : std::string(" (no ignore_index)")));
  }
}

/// Positions per chunk: fixed, so the order of the partial sums never depends on the threads.
constexpr std::size_t loss_chunk = std::size_t{1} << 14;

/// Output 0 from the (checked) targets; logprob(n, cls, d) is the log-probability of class cls
/// at sample n, inner position d. Computes in double, stores T.
template <class T, class LogProb>
void gather_loss(kernel_context& c, const loss_problem& p, LogProb logprob) {
  const std::size_t positions = p.n * p.inner;
  const T* w = p.weight ? p.weight->data<T>().data() : nullptr;
  const std::int64_t* tgt = p.target.data();
  // Loss and weight of one position; an ignored target contributes neither.
  auto one = [&](std::size_t pos) -> std::pair<double, double> {
    const std::int64_t t = tgt[pos];
    if (p.ignore && t == *p.ignore)
      return {0.0, 0.0};
    const auto cls = to_size(t);
    const double wt = w ? static_cast<double>(w[cls]) : 1.0;
    return {-logprob(pos / p.inner, cls, pos % p.inner) * wt, wt};
  };
  const std::size_t chunks = (positions + loss_chunk - 1) / loss_chunk;
  if (p.red == reduction::none) {
    tensor out(c.in(0).type(), p.target_shape, uninitialized);
    T* dst = out.data<T>().data();
    c.pool.parallel_for(chunks, 1, [&](std::size_t k0, std::size_t k1) {
      for (std::size_t pos = k0 * loss_chunk; pos < std::min(positions, k1 * loss_chunk); ++pos)
        dst[pos] = static_cast<T>(one(pos).first);
    });
    c.out(0) = std::move(out);
    return;
  }
  std::vector<std::pair<double, double>> partial(chunks, {0.0, 0.0});
  c.pool.parallel_for(chunks, 1, [&](std::size_t k0, std::size_t k1) {
    for (std::size_t k = k0; k < k1; ++k) {
      double loss = 0.0, weight = 0.0;
      for (std::size_t pos = k * loss_chunk; pos < std::min(positions, (k + 1) * loss_chunk);
           ++pos) {
        const auto [l, wt] = one(pos);
        loss += l;
        weight += wt;
      }
      partial[k] = {loss, weight};
    }
  });
  double loss = 0.0, weight = 0.0;
  for (const auto& [l, wt] : partial) {
    loss += l;
    weight += wt;
  }
  // mean divides by the summed weights of the counted targets (their count without weights);
  // when every target is ignored that is 0 / 0 = NaN, as the ONNX definition computes it.
  const double value = p.red == reduction::sum ? loss : loss / weight;
  tensor out(c.in(0).type(), {}, uninitialized);
  out.data<T>()[0] = static_cast<T>(value);
  c.out(0) = std::move(out);
}

void k_nll_loss(kernel_context& c) {
  const loss_problem p = prepare(c);
  check_targets(c, p);
  dispatch_float(c, c.in(0).type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const T* x = c.in(0).data<T>().data();
    const std::size_t classes = p.classes, inner = p.inner;
    gather_loss<T>(c, p, [x, classes, inner](std::size_t n, std::size_t cls, std::size_t d) {
      return static_cast<double>(x[(n * classes + cls) * inner + d]);
    });
  });
}

/// Inner positions per work item of the log-softmax: the class loop then walks `block`
/// contiguous values per class instead of one value `inner` apart.
constexpr std::size_t softmax_block = 256;

void k_softmax_cross_entropy(kernel_context& c) {
  const loss_problem p = prepare(c);
  check_targets(c, p);
  const bool want_log_prob = c.output_count() > 1 && !c.n.outputs[1].empty();
  dispatch_float(c, c.in(0).type(), [&](auto id) {
    using T = typename decltype(id)::type;
    const tensor& scores = c.in(0);
    const T* x = scores.data<T>().data();
    const std::size_t classes = p.classes, inner = p.inner;
    tensor log_prob;
    T* lp = nullptr;
    if (want_log_prob) {
      log_prob = tensor(scores.type(), scores.shape(), uninitialized);
      lp = log_prob.data<T>().data();
    }
    // lse[n * inner + d] = log(sum_c exp(x[n, c, d])), computed as max + log(sum exp(x - max))
    // so no exp overflows.
    std::vector<double> lse(p.n * inner);
    const std::size_t blocks = (inner + softmax_block - 1) / softmax_block;
    c.pool.parallel_for(p.n * blocks, 1, [&](std::size_t j0, std::size_t j1) {
      std::vector<double> mx(softmax_block), sum(softmax_block);
      for (std::size_t j = j0; j < j1; ++j) {
        const std::size_t n = j / blocks;
        const std::size_t d0 = (j % blocks) * softmax_block;
        const std::size_t len = std::min(softmax_block, inner - d0);
        const T* base = x + n * classes * inner + d0;
        std::fill_n(mx.begin(), len, -std::numeric_limits<double>::infinity());
        std::fill_n(sum.begin(), len, 0.0);
        for (std::size_t k = 0; k < classes; ++k) {
          for (std::size_t b = 0; b < len; ++b)
            mx[b] = std::max(mx[b], static_cast<double>(base[k * inner + b]));
        }
        for (std::size_t k = 0; k < classes; ++k) {
          for (std::size_t b = 0; b < len; ++b)
            sum[b] += std::exp(static_cast<double>(base[k * inner + b]) - mx[b]);
        }
        double* out_lse = lse.data() + n * inner + d0;
        for (std::size_t b = 0; b < len; ++b)
          out_lse[b] = mx[b] + std::log(sum[b]);
        if (lp) {
          T* dst = lp + n * classes * inner + d0;
          for (std::size_t k = 0; k < classes; ++k) {
            for (std::size_t b = 0; b < len; ++b)
              dst[k * inner + b] =
                  static_cast<T>(static_cast<double>(base[k * inner + b]) - out_lse[b]);
          }
        }
      }
    });
    const double* pl = lse.data();
    gather_loss<T>(c, p, [x, pl, classes, inner](std::size_t n, std::size_t cls, std::size_t d) {
      return static_cast<double>(x[(n * classes + cls) * inner + d]) - pl[n * inner + d];
    });
    if (want_log_prob)
      c.out(1) = std::move(log_prob);
  });
}

}  // namespace

void register_loss(registry_map& r) {
  r["NegativeLogLikelihoodLoss"] = k_nll_loss;
  r["SoftmaxCrossEntropyLoss"] = k_softmax_cross_entropy;
}

}  // namespace quark::onnx::rt
