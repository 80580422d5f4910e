// SPDX-License-Identifier: MIT
// The recurrent operators RNN, GRU and LSTM (opsets 7 and 14): forward, reverse and
// bidirectional, sequence_lens, initial states, layout 0 / 1, clip and the activation functions
// ONNX lists for recurrent operators. Each direction projects the inputs of all time steps with
// one GEMM; each step then adds the recurrent projection of the previous state (one small GEMM)
// and applies the cell's gate equations. The directions of a bidirectional op run in parallel.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

float sigmoid(float v) {
  return v >= 0.0f ? 1.0f / (1.0f + std::exp(-v)) : std::exp(v) / (1.0f + std::exp(v));
}

// ---- activations --------------------------------------------------------------------------

enum class act_kind {
  relu,
  tanh,
  sigmoid,
  affine,
  leaky_relu,
  thresholded_relu,
  scaled_tanh,
  hard_sigmoid,
  elu,
  softsign,
  softplus
};

struct activation {
  act_kind kind = act_kind::tanh;
  float alpha = 0.0f;
  float beta = 0.0f;
};

/// A function of the ONNX list for recurrent operators: whether it takes a value from
/// activation_alpha / activation_beta, and the defaults of the ONNX operator of that name.
/// ScaledTanh's (experimental) operator documented no defaults: 1 and 1 make it plain Tanh.
struct act_info {
  std::string_view name;
  act_kind kind;
  bool takes_alpha;
  bool takes_beta;
  float alpha;
  float beta;
};

constexpr std::array<act_info, 11> act_table{{
    {"Relu", act_kind::relu, false, false, 0.0f, 0.0f},
    {"Tanh", act_kind::tanh, false, false, 0.0f, 0.0f},
    {"Sigmoid", act_kind::sigmoid, false, false, 0.0f, 0.0f},
    {"Affine", act_kind::affine, true, true, 1.0f, 0.0f},
    {"LeakyRelu", act_kind::leaky_relu, true, false, 0.01f, 0.0f},
    {"ThresholdedRelu", act_kind::thresholded_relu, true, false, 1.0f, 0.0f},
    {"ScaledTanh", act_kind::scaled_tanh, true, true, 1.0f, 1.0f},
    {"HardSigmoid", act_kind::hard_sigmoid, true, true, 0.2f, 0.5f},
    {"Elu", act_kind::elu, true, false, 1.0f, 0.0f},
    {"Softsign", act_kind::softsign, false, false, 0.0f, 0.0f},
    {"Softplus", act_kind::softplus, false, false, 0.0f, 0.0f},
}};

// ONNX Runtime matches the names case-insensitively, and exporters were tested against it.
bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

/// v[i] = a(v[i]) for i < n (the switch stays outside the loops).
void activate(const activation& a, float* v, std::size_t n) {
  const float alpha = a.alpha, beta = a.beta;
  switch (a.kind) {
    case act_kind::relu:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = std::max(v[i], 0.0f);  // (NaN stays NaN)
      break;
    case act_kind::tanh:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = std::tanh(v[i]);
      break;
    case act_kind::sigmoid:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = sigmoid(v[i]);
      break;
    case act_kind::affine:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = alpha * v[i] + beta;
      break;
    case act_kind::leaky_relu:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = v[i] >= 0.0f ? v[i] : alpha * v[i];
      break;
    case act_kind::thresholded_relu:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = v[i] >= alpha ? v[i] : 0.0f;
      break;
    case act_kind::scaled_tanh:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = alpha * std::tanh(beta * v[i]);
      break;
    case act_kind::hard_sigmoid:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = std::min(std::max(alpha * v[i] + beta, 0.0f), 1.0f);
      break;
    case act_kind::elu:
      // expm1: e^x - 1 without the cancellation near 0.
      for (std::size_t i = 0; i < n; ++i)
        v[i] = v[i] >= 0.0f ? v[i] : alpha * std::expm1(v[i]);
      break;
    case act_kind::softsign:
      for (std::size_t i = 0; i < n; ++i)
        v[i] = v[i] / (1.0f + std::fabs(v[i]));
      break;
    case act_kind::softplus:
      // log(1 + e^x), written so that e^x never overflows.
      for (std::size_t i = 0; i < n; ++i)
        v[i] = v[i] > 0.0f ? v[i] + std::log1p(std::exp(-v[i])) : std::log1p(std::exp(v[i]));
      break;
  }
}

/// The functions of every direction, `per_dir` each ([d * per_dir + i]): the activations
/// attribute, or the operator's defaults. Each function that takes alpha (beta) consumes the next
/// value of activation_alpha (activation_beta) in list order, or its default when none is left.
/// A bidirectional op given one direction's functions uses them for both directions.
std::vector<activation> read_activations(const kernel_context& c,
                                         std::initializer_list<std::string_view> defaults,
                                         std::size_t dirs) {
  const std::size_t per_dir = defaults.size();
  std::vector<std::string> names;
  if (const attribute* a = c.n.find("activations"); a && !a->strings.empty()) {
    names = a->strings;
  } else {
    for (std::size_t d = 0; d < dirs; ++d)
      names.insert(names.end(), defaults.begin(), defaults.end());
  }
  const std::vector<float> alphas = c.n.attr_floats("activation_alpha");
  const std::vector<float> betas = c.n.attr_floats("activation_beta");
  std::size_t next_alpha = 0, next_beta = 0;
  std::vector<activation> acts;
  for (const std::string& name : names) {
    const auto* info = std::find_if(act_table.begin(), act_table.end(),
                                    [&](const act_info& e) { return same_name(e.name, name); });
    if (info == act_table.end())
      c.fail("quark.onnx.runtime", "unknown activation '" + name + "'");
    activation a{info->kind, info->alpha, info->beta};
    if (info->takes_alpha && next_alpha < alphas.size())
      a.alpha = alphas[next_alpha++];
    if (info->takes_beta && next_beta < betas.size())
      a.beta = betas[next_beta++];
    acts.push_back(a);
  }
  if (names.size() != per_dir * dirs && names.size() != per_dir) {
    c.fail("quark.onnx.runtime", "activations holds " + std::to_string(names.size()) +
                                     " names, expected " + std::to_string(per_dir * dirs) + " (" +
                                     std::to_string(per_dir) + " per direction)");
  }
  if (acts.size() < per_dir * dirs) {
    const std::vector<activation> forward = acts;
    acts.insert(acts.end(), forward.begin(), forward.end());
  }
  return acts;
}

// ---- what the three operators share --------------------------------------------------------

/// a * b, failing instead of wrapping past what a float buffer can hold.
std::size_t checked_mul(const kernel_context& c, std::size_t a, std::size_t b) {
  constexpr std::size_t limit =
      static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / sizeof(float);
  if (b != 0 && a > limit / b)
    c.fail("quark.onnx.shape", "the outputs would hold more elements than memory can address");
  return a * b;
}

/// Attributes, validated shapes and inputs common to RNN (1 gate), GRU (3) and LSTM (4). X is
/// copied as [seq, batch, input] whatever the layout; states and Y are indexed by layout.
struct recurrent {
  std::size_t gates = 1;
  std::size_t dirs = 1;
  bool reverse_only = false;
  bool layout1 = false;
  float clip = 0.0f;  ///< 0: no clipping
  std::size_t seq = 0, batch = 0, input = 0, hidden = 0;
  std::vector<float> x;
  std::vector<std::int64_t> lens;  ///< per batch entry, in [0, seq]
  const float* w = nullptr;        ///< [dirs, gates * hidden, input]
  const float* r = nullptr;        ///< [dirs, gates * hidden, hidden]
  const float* b = nullptr;        ///< [dirs, 2 * gates * hidden] (Wb then Rb), or null
  const float* h0 = nullptr;       ///< initial_h, or null
  std::vector<activation> acts;

  std::size_t gh() const { return gates * hidden; }
  bool reverse(std::size_t d) const { return reverse_only || d == 1; }
  std::size_t step_time(std::size_t d, std::size_t step) const {
    return reverse(d) ? seq - 1 - step : step;
  }
  /// Rows past their sequence length keep their state and give zeros in Y.
  bool active(std::size_t t, std::size_t bi) const { return to_i64(t) < lens[bi]; }
  shape_t state_shape() const {
    return layout1 ? shape_t{to_i64(batch), to_i64(dirs), to_i64(hidden)}
                   : shape_t{to_i64(dirs), to_i64(batch), to_i64(hidden)};
  }
  shape_t y_shape() const {
    return layout1 ? shape_t{to_i64(batch), to_i64(seq), to_i64(dirs), to_i64(hidden)}
                   : shape_t{to_i64(seq), to_i64(dirs), to_i64(batch), to_i64(hidden)};
  }
  /// Offset of (direction d, batch entry bi) in a state tensor (initial_h, Y_h, ...).
  std::size_t state_at(std::size_t d, std::size_t bi) const {
    return (layout1 ? bi * dirs + d : d * batch + bi) * hidden;
  }
  std::size_t y_at(std::size_t t, std::size_t d, std::size_t bi) const {
    return (layout1 ? (bi * seq + t) * dirs + d : (t * dirs + d) * batch + bi) * hidden;
  }
  void clip_values(float* v, std::size_t n) const {
    if (clip > 0.0f) {
      for (std::size_t i = 0; i < n; ++i)
        v[i] = std::clamp(v[i], -clip, clip);
    }
  }
  /// Direction d's rows of a state tensor ([batch, hidden]), zeros when it is absent.
  std::vector<float> load_state(const float* src, std::size_t d) const {
    std::vector<float> s(batch * hidden, 0.0f);
    if (src) {
      for (std::size_t bi = 0; bi < batch; ++bi)
        std::copy_n(src + state_at(d, bi), hidden, s.begin() + to_i64(bi * hidden));
    }
    return s;
  }
  /// Writes direction d's final states into `dst` (zero-filled). An entry of length 0 keeps
  /// zeros, not its initial state, as in ONNX Runtime.
  void store_state(const std::vector<float>& s, std::size_t d, tensor& dst) const {
    float* p = dst.data<float>().data();
    for (std::size_t bi = 0; bi < batch; ++bi) {
      if (lens[bi] > 0)
        std::copy_n(s.begin() + to_i64(bi * hidden), hidden, p + state_at(d, bi));
    }
  }
};

/// Fails unless `t` (input `what`) has shape `want`.
void expect_shape(const kernel_context& c, const tensor& t, const char* what, const shape_t& want) {
  if (t.shape() != want) {
    c.fail("quark.onnx.shape", std::string(what) + " has shape " + shape_string(t.shape()) +
                                   ", expected " + shape_string(want));
  }
}

recurrent read_recurrent(const kernel_context& c, std::size_t gates,
                         std::initializer_list<std::string_view> default_acts) {
  recurrent s;
  s.gates = gates;
  const std::string direction = c.n.attr_s("direction", "forward");
  if (direction == "bidirectional") {
    s.dirs = 2;
  } else if (direction == "reverse") {
    s.reverse_only = true;
  } else if (direction != "forward") {
    c.fail("quark.onnx.runtime",
           "direction '" + direction + "' is not forward, reverse or bidirectional");
  }
  const std::int64_t layout = c.n.attr_i("layout", 0);
  if (layout != 0 && layout != 1)
    c.fail("quark.onnx.runtime", "layout " + std::to_string(layout) + " is not 0 or 1");
  s.layout1 = layout == 1;
  if (c.n.has("clip")) {
    s.clip = c.n.attr_f("clip", 0.0f);
    if (!(s.clip > 0.0f))
      c.fail("quark.onnx.runtime", "clip " + std::to_string(s.clip) + " is not positive");
  }
  s.acts = read_activations(c, default_acts, s.dirs);

  const tensor& x = float_input(c, 0);
  const tensor& w = float_input(c, 1);
  const tensor& r = float_input(c, 2);
  for (const auto& [t, what] : {std::pair{&x, "X"}, std::pair{&w, "W"}, std::pair{&r, "R"}}) {
    if (t->rank() != 3)
      c.fail("quark.onnx.shape",
             std::string(what) + " " + shape_string(t->shape()) + " is not 3-D");
  }
  s.seq = to_size(x.shape()[s.layout1 ? 1 : 0]);
  s.batch = to_size(x.shape()[s.layout1 ? 0 : 1]);
  s.input = to_size(x.shape()[2]);
  const std::int64_t w_rows = w.shape()[1];
  const auto g = to_i64(gates);
  if (c.n.has("hidden_size")) {
    const std::int64_t h = c.n.attr_i("hidden_size", 0);
    if (h <= 0 || w_rows % g != 0 || w_rows / g != h) {
      c.fail("quark.onnx.shape", "hidden_size " + std::to_string(h) + " disagrees with W " +
                                     shape_string(w.shape()) + " (dimension 1 should be " +
                                     std::to_string(gates) + " * hidden_size)");
    }
  } else if (w_rows <= 0 || w_rows % g != 0) {
    c.fail("quark.onnx.shape", "W " + shape_string(w.shape()) + ": dimension 1 is not a positive " +
                                   "multiple of " + std::to_string(gates));
  }
  s.hidden = to_size(w_rows / g);
  const auto dirs = to_i64(s.dirs), hidden = to_i64(s.hidden);
  // Products of these dimensions size every buffer below.
  checked_mul(c, std::max<std::size_t>(s.seq, 1),
              checked_mul(c, checked_mul(c, s.batch, s.dirs), checked_mul(c, gates, s.hidden)));
  expect_shape(c, w, "W", {dirs, g * hidden, x.shape()[2]});
  expect_shape(c, r, "R", {dirs, g * hidden, hidden});
  s.w = w.data<float>().data();
  s.r = r.data<float>().data();
  if (c.has_input(3)) {
    const tensor& bias = float_input(c, 3);
    expect_shape(c, bias, "B", {dirs, 2 * g * hidden});
    s.b = bias.data<float>().data();
  }
  s.lens.assign(s.batch, to_i64(s.seq));
  if (const tensor* sl = c.opt(4)) {
    expect_shape(c, *sl, "sequence_lens", {to_i64(s.batch)});
    s.lens = read_ints(c, *sl);
    for (std::size_t bi = 0; bi < s.batch; ++bi) {
      if (s.lens[bi] < 0 || s.lens[bi] > to_i64(s.seq)) {
        c.fail("quark.onnx.runtime", "sequence_lens[" + std::to_string(bi) +
                                         "] = " + std::to_string(s.lens[bi]) + " is outside [0, " +
                                         std::to_string(s.seq) + "]");
      }
    }
  }
  if (c.has_input(5)) {
    const tensor& h0 = float_input(c, 5);
    expect_shape(c, h0, "initial_h", s.state_shape());
    s.h0 = h0.data<float>().data();
  }

  s.x.resize(s.seq * s.batch * s.input);
  const float* src = x.data<float>().data();
  for (std::size_t t = 0; t < s.seq; ++t) {
    for (std::size_t bi = 0; bi < s.batch; ++bi) {
      const std::size_t from =
          s.layout1 ? (bi * s.seq + t) * s.input : (t * s.batch + bi) * s.input;
      std::copy_n(src + from, s.input, s.x.begin() + to_i64((t * s.batch + bi) * s.input));
    }
  }
  return s;
}

/// X W_d^T plus Wb + Rb for every step of direction d: [seq * batch, gates * hidden]. The
/// recurrent bias of the columns from `rb_end` on is left out (GRU's linear_before_reset adds it
/// inside the reset gate's product).
std::vector<float> input_projection(kernel_context& c, const recurrent& s, std::size_t d,
                                    std::size_t rb_end) {
  const std::size_t rows = s.seq * s.batch, cols = s.gh();
  std::vector<float> xw(rows * cols);
  gemm(&c.pool, false, true, rows, cols, s.input, 1.0f, s.x.data(), s.input,
       s.w + d * cols * s.input, s.input, 0.0f, xw.data(), cols);
  if (s.b) {
    const float* wb = s.b + d * 2 * cols;
    const float* rb = wb + cols;
    c.pool.parallel_for(rows, std::max<std::size_t>(1, (1 << 15) / std::max<std::size_t>(cols, 1)),
                        [&](std::size_t r0, std::size_t r1) {
                          for (std::size_t row = r0; row < r1; ++row) {
                            float* p = xw.data() + row * cols;
                            for (std::size_t j = 0; j < rb_end; ++j)
                              p[j] += wb[j] + rb[j];
                            for (std::size_t j = rb_end; j < cols; ++j)
                              p[j] += wb[j];
                          }
                        });
  }
  return xw;
}

/// Runs body(d, xw) for every direction, the two of a bidirectional op in parallel. The input
/// projections are computed first, over the pool. Each body runs its per-step GEMMs on its own
/// thread: one step's GEMM is small, and a pool call from inside the pool would run inline.
template <class Body>
void for_each_direction(kernel_context& c, const recurrent& s, std::size_t rb_end, Body&& body) {
  // A batch of 0: every output is empty, and the bodies' per-step buffers would be empty too
  // (pointer arithmetic on their null data is undefined behaviour).
  if (s.batch == 0)
    return;
  std::vector<std::vector<float>> xw;
  for (std::size_t d = 0; d < s.dirs; ++d)
    xw.push_back(input_projection(c, s, d, rb_end));
  c.pool.parallel_for(s.dirs, 1, [&](std::size_t d0, std::size_t d1) {
    for (std::size_t d = d0; d < d1; ++d)
      body(d, xw[d].data());
  });
}

/// The outputs Y (when the node uses it) and Y_h, and the kernel's pointer to Y (null when Y is
/// unused or empty).
struct rnn_outputs {
  tensor y, yh;
  bool want_y = false;
  float* py = nullptr;
  rnn_outputs(const kernel_context& c, const recurrent& s)
      : yh(dtype_id::float32, s.state_shape()) {
    want_y = c.output_count() > 0 && !c.n.outputs[0].empty();
    if (want_y) {
      y = tensor(dtype_id::float32, s.y_shape());  // zero-filled: rows past a length stay 0
      py = y.data<float>().data();
    }
  }
  void hand_over(kernel_context& c) {
    if (want_y)
      c.out(0) = std::move(y);
    if (c.output_count() > 1)
      c.out(1) = std::move(yh);
  }
};

// ---- RNN: H = f(X Wi^T + H Ri^T + Wbi + Rbi) ------------------------------------------------

void k_rnn(kernel_context& c) {
  const recurrent s = read_recurrent(c, 1, {"Tanh"});
  const std::size_t hidden = s.hidden, batch = s.batch;
  rnn_outputs out(c, s);
  for_each_direction(c, s, hidden, [&](std::size_t d, const float* xw) {
    const float* rd = s.r + d * hidden * hidden;
    const activation& f = s.acts[d];
    std::vector<float> h = s.load_state(s.h0, d);
    std::vector<float> a(batch * hidden);
    for (std::size_t step = 0; step < s.seq; ++step) {
      const std::size_t t = s.step_time(d, step);
      std::copy_n(xw + t * batch * hidden, a.size(), a.begin());
      gemm(nullptr, false, true, batch, hidden, hidden, 1.0f, h.data(), hidden, rd, hidden, 1.0f,
           a.data(), hidden);
      for (std::size_t bi = 0; bi < batch; ++bi) {
        if (!s.active(t, bi))
          continue;
        float* ab = a.data() + bi * hidden;
        s.clip_values(ab, hidden);
        activate(f, ab, hidden);
        std::copy_n(ab, hidden, h.begin() + to_i64(bi * hidden));
        if (out.py)
          std::copy_n(ab, hidden, out.py + s.y_at(t, d, bi));
      }
    }
    s.store_state(h, d, out.yh);
  });
  out.hand_over(c);
}

// ---- GRU ------------------------------------------------------------------------------------
// z = f(X Wz^T + H Rz^T + Wbz + Rbz), r = f(X Wr^T + H Rr^T + Wbr + Rbr),
// n = g(X Wh^T + (r . H) Rh^T + Rbh + Wbh)        (linear_before_reset 0)
// n = g(X Wh^T + r . (H Rh^T + Rbh) + Wbh)        (linear_before_reset 1)
// H' = (1 - z) . n + z . H

void k_gru(kernel_context& c) {
  const recurrent s = read_recurrent(c, 3, {"Sigmoid", "Tanh"});
  const bool linear_before_reset = c.n.attr_i("linear_before_reset", 0) != 0;
  const std::size_t hidden = s.hidden, batch = s.batch, h3 = 3 * hidden;
  rnn_outputs out(c, s);
  for_each_direction(
      c, s, linear_before_reset ? 2 * hidden : h3, [&](std::size_t d, const float* xw) {
        const float* rd = s.r + d * h3 * hidden;
        const float* rh = rd + 2 * hidden * hidden;  // Rh: rows 2H..3H of R
        const float* rbh = s.b ? s.b + d * 2 * h3 + h3 + 2 * hidden : nullptr;
        const activation& f = s.acts[2 * d];
        const activation& g = s.acts[2 * d + 1];
        std::vector<float> h = s.load_state(s.h0, d);
        std::vector<float> a(batch * h3);
        std::vector<float> tmp(batch * hidden);  // r . H, or H Rh^T
        for (std::size_t step = 0; step < s.seq; ++step) {
          const std::size_t t = s.step_time(d, step);
          std::copy_n(xw + t * batch * h3, a.size(), a.begin());
          gemm(nullptr, false, true, batch, 2 * hidden, hidden, 1.0f, h.data(), hidden, rd, hidden,
               1.0f, a.data(), h3);
          for (std::size_t bi = 0; bi < batch; ++bi) {
            float* ab = a.data() + bi * h3;
            s.clip_values(ab, 2 * hidden);
            activate(f, ab, 2 * hidden);
          }
          if (linear_before_reset) {
            gemm(nullptr, false, true, batch, hidden, hidden, 1.0f, h.data(), hidden, rh, hidden,
                 0.0f, tmp.data(), hidden);
            for (std::size_t bi = 0; bi < batch; ++bi) {
              float* ab = a.data() + bi * h3;
              const float* hr = tmp.data() + bi * hidden;
              for (std::size_t k = 0; k < hidden; ++k)
                ab[2 * hidden + k] += ab[hidden + k] * (hr[k] + (rbh ? rbh[k] : 0.0f));
            }
          } else {
            for (std::size_t bi = 0; bi < batch; ++bi) {
              for (std::size_t k = 0; k < hidden; ++k)
                tmp[bi * hidden + k] = a[bi * h3 + hidden + k] * h[bi * hidden + k];
            }
            gemm(nullptr, false, true, batch, hidden, hidden, 1.0f, tmp.data(), hidden, rh, hidden,
                 1.0f, a.data() + 2 * hidden, h3);
          }
          for (std::size_t bi = 0; bi < batch; ++bi) {
            if (!s.active(t, bi))
              continue;
            float* ab = a.data() + bi * h3;
            float* n = ab + 2 * hidden;
            s.clip_values(n, hidden);
            activate(g, n, hidden);
            float* hb = h.data() + bi * hidden;
            for (std::size_t k = 0; k < hidden; ++k)
              hb[k] = (1.0f - ab[k]) * n[k] + ab[k] * hb[k];
            if (out.py)
              std::copy_n(hb, hidden, out.py + s.y_at(t, d, bi));
          }
        }
        s.store_state(h, d, out.yh);
      });
  out.hand_over(c);
}

// ---- LSTM -----------------------------------------------------------------------------------
// i = f(X Wi^T + H Ri^T + Pi . C + Wbi + Rbi), f = f(... + Pf . C ...), c = g(X Wc^T + H Rc^T +
// Wbc + Rbc), C' = f . C + i . c, o = f(X Wo^T + H Ro^T + Po . C' + Wbo + Rbo), H' = o . h(C').
// W, R and B hold the gates in the order i, o, f, c; P in the order i, o, f.

void k_lstm(kernel_context& c) {
  const recurrent s = read_recurrent(c, 4, {"Sigmoid", "Tanh", "Tanh"});
  const bool input_forget = c.n.attr_i("input_forget", 0) != 0;
  const std::size_t hidden = s.hidden, batch = s.batch, h4 = 4 * hidden;
  const float* pc0 = nullptr;
  if (c.has_input(6)) {
    const tensor& c0 = float_input(c, 6);
    expect_shape(c, c0, "initial_c", s.state_shape());
    pc0 = c0.data<float>().data();
  }
  const float* pp = nullptr;
  if (c.has_input(7)) {
    const tensor& p = float_input(c, 7);
    expect_shape(c, p, "P", {to_i64(s.dirs), to_i64(3 * hidden)});
    pp = p.data<float>().data();
  }
  rnn_outputs out(c, s);
  tensor yc(dtype_id::float32, s.state_shape());
  for_each_direction(c, s, h4, [&](std::size_t d, const float* xw) {
    const float* rd = s.r + d * h4 * hidden;
    const float* peep = pp ? pp + d * 3 * hidden : nullptr;
    const activation& f = s.acts[3 * d];
    const activation& g = s.acts[3 * d + 1];
    const activation& act_h = s.acts[3 * d + 2];
    std::vector<float> h = s.load_state(s.h0, d);
    std::vector<float> cs = s.load_state(pc0, d);
    std::vector<float> gates(batch * h4);
    std::vector<float> c_new(hidden), h_new(hidden);
    for (std::size_t step = 0; step < s.seq; ++step) {
      const std::size_t t = s.step_time(d, step);
      std::copy_n(xw + t * batch * h4, gates.size(), gates.begin());
      gemm(nullptr, false, true, batch, h4, hidden, 1.0f, h.data(), hidden, rd, hidden, 1.0f,
           gates.data(), h4);
      for (std::size_t bi = 0; bi < batch; ++bi) {
        if (!s.active(t, bi))
          continue;
        float* gi = gates.data() + bi * h4;
        float* go = gi + hidden;
        float* gf = gi + 2 * hidden;
        float* gc = gi + 3 * hidden;
        float* hb = h.data() + bi * hidden;
        float* cb = cs.data() + bi * hidden;
        if (peep) {
          for (std::size_t k = 0; k < hidden; ++k) {
            gi[k] += peep[k] * cb[k];
            gf[k] += peep[2 * hidden + k] * cb[k];
          }
        }
        s.clip_values(gi, hidden);
        activate(f, gi, hidden);
        if (!input_forget) {
          s.clip_values(gf, hidden);
          activate(f, gf, hidden);
        }
        s.clip_values(gc, hidden);
        activate(g, gc, hidden);
        for (std::size_t k = 0; k < hidden; ++k) {
          const float f_t = input_forget ? 1.0f - gi[k] : gf[k];
          c_new[k] = f_t * cb[k] + gi[k] * gc[k];
        }
        if (peep) {
          for (std::size_t k = 0; k < hidden; ++k)
            go[k] += peep[hidden + k] * c_new[k];
        }
        s.clip_values(go, hidden);
        activate(f, go, hidden);
        h_new = c_new;
        activate(act_h, h_new.data(), hidden);
        for (std::size_t k = 0; k < hidden; ++k) {
          cb[k] = c_new[k];
          hb[k] = go[k] * h_new[k];
        }
        if (out.py)
          std::copy_n(hb, hidden, out.py + s.y_at(t, d, bi));
      }
    }
    s.store_state(h, d, out.yh);
    s.store_state(cs, d, yc);
  });
  out.hand_over(c);
  if (c.output_count() > 2)
    c.out(2) = std::move(yc);
}

}  // namespace

void register_rnn(registry_map& r) {
  r["RNN"] = k_rnn;
  r["GRU"] = k_gru;
  r["LSTM"] = k_lstm;
}

}  // namespace quark::onnx::rt
