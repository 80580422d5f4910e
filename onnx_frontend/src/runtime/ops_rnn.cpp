// SPDX-License-Identifier: MIT
// LSTM (forward, reverse, bidirectional; peepholes, clip, input_forget, sequence_lens, layout)
// with the default activations. The input projection of all time steps is one GEMM; each step
// adds the recurrent projection.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

float sigmoid(float v) {
  return v >= 0.0f ? 1.0f / (1.0f + std::exp(-v)) : std::exp(v) / (1.0f + std::exp(v));
}

void k_lstm(kernel_context& c) {
  const tensor& x_in = float_input(c, 0);
  const tensor& w = float_input(c, 1);
  const tensor& rw = float_input(c, 2);
  const auto acts = c.n.find("activations");
  if (acts && !(acts->strings.size() % 3 == 0 && [&] {
        for (std::size_t i = 0; i < acts->strings.size(); i += 3) {
          if (acts->strings[i] != "Sigmoid" || acts->strings[i + 1] != "Tanh" ||
              acts->strings[i + 2] != "Tanh") {
            return false;
          }
        }
        return true;
      }())) {
    c.fail("quark.onnx.unsupported_op", "only the default LSTM activations are supported");
  }
  const std::string direction = c.n.attr_s("direction", "forward");
  const std::size_t dirs = direction == "bidirectional" ? 2 : 1;
  const auto hidden = to_size(c.n.attr_i("hidden_size", w.shape()[1] / 4));
  const bool layout1 = c.n.attr_i("layout", 0) != 0;
  const float clip = c.n.attr_f("clip", 0.0f);
  const bool input_forget = c.n.attr_i("input_forget", 0) != 0;
  if (x_in.rank() != 3 || w.rank() != 3 || rw.rank() != 3)
    c.fail("quark.onnx.shape", "X, W, R must be 3-D");
  const std::size_t seq = to_size(x_in.shape()[layout1 ? 1 : 0]);
  const std::size_t batch = to_size(x_in.shape()[layout1 ? 0 : 1]);
  const std::size_t input = to_size(x_in.shape()[2]);
  const std::size_t h4 = 4 * hidden;
  if (to_size(w.shape()[0]) != dirs || to_size(w.shape()[1]) != h4 ||
      to_size(w.shape()[2]) != input || to_size(rw.shape()[1]) != h4 ||
      to_size(rw.shape()[2]) != hidden) {
    c.fail("quark.onnx.shape", "W " + shape_string(w.shape()) + " / R " + shape_string(rw.shape()) +
                                   " do not match X " + shape_string(x_in.shape()));
  }
  // X as [seq, batch, input].
  std::vector<float> x(seq * batch * input);
  {
    const float* src = x_in.data<float>().data();
    for (std::size_t t = 0; t < seq; ++t) {
      for (std::size_t b = 0; b < batch; ++b) {
        const std::size_t from = layout1 ? (b * seq + t) * input : (t * batch + b) * input;
        std::memcpy(x.data() + (t * batch + b) * input, src + from, input * sizeof(float));
      }
    }
  }
  std::vector<std::int64_t> lens(batch, to_i64(seq));
  if (const tensor* sl = c.opt(4))
    lens = read_ints(c, *sl);
  const float* pb = c.has_input(3) ? float_input(c, 3).data<float>().data() : nullptr;
  const float* ph0 = c.has_input(5) ? float_input(c, 5).data<float>().data() : nullptr;
  const float* pc0 = c.has_input(6) ? float_input(c, 6).data<float>().data() : nullptr;
  const float* pp = c.has_input(7) ? float_input(c, 7).data<float>().data() : nullptr;

  tensor y(dtype_id::float32,
           layout1 ? shape_t{to_i64(batch), to_i64(seq), to_i64(dirs), to_i64(hidden)}
                   : shape_t{to_i64(seq), to_i64(dirs), to_i64(batch), to_i64(hidden)});
  const shape_t state_shape = layout1 ? shape_t{to_i64(batch), to_i64(dirs), to_i64(hidden)}
                                      : shape_t{to_i64(dirs), to_i64(batch), to_i64(hidden)};
  tensor yh(dtype_id::float32, state_shape);
  tensor yc(dtype_id::float32, state_shape);
  float* py = y.data<float>().data();
  std::vector<float> xw(seq * batch * h4);
  std::vector<float> gates(batch * h4);
  for (std::size_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const float* wd = w.data<float>().data() + d * h4 * input;
    const float* rd = rw.data<float>().data() + d * h4 * hidden;
    // xw = X W^T + Wb + Rb for every step.
    gemm(&c.pool, false, true, seq * batch, h4, input, 1.0f, x.data(), input, wd, input, 0.0f,
         xw.data(), h4);
    if (pb) {
      const float* wb = pb + d * 2 * h4;
      const float* rb = wb + h4;
      for (std::size_t r = 0; r < seq * batch; ++r) {
        for (std::size_t j = 0; j < h4; ++j)
          xw[r * h4 + j] += wb[j] + rb[j];
      }
    }
    std::vector<float> h(batch * hidden, 0.0f), cs(batch * hidden, 0.0f);
    if (ph0)
      std::memcpy(h.data(), ph0 + d * batch * hidden, h.size() * sizeof(float));
    if (pc0)
      std::memcpy(cs.data(), pc0 + d * batch * hidden, cs.size() * sizeof(float));
    const float* peep = pp ? pp + d * 3 * hidden : nullptr;
    for (std::size_t step = 0; step < seq; ++step) {
      const std::size_t t = reverse ? seq - 1 - step : step;
      std::memcpy(gates.data(), xw.data() + t * batch * h4, gates.size() * sizeof(float));
      gemm(nullptr, false, true, batch, h4, hidden, 1.0f, h.data(), hidden, rd, hidden, 1.0f,
           gates.data(), h4);
      for (std::size_t b = 0; b < batch; ++b) {
        const bool active = to_i64(t) < lens[b];
        float* g = gates.data() + b * h4;
        float* hb = h.data() + b * hidden;
        float* cb = cs.data() + b * hidden;
        for (std::size_t k = 0; k < hidden; ++k) {
          auto clipped = [clip](float v) { return clip > 0.0f ? std::clamp(v, -clip, clip) : v; };
          float gi = g[k], go = g[hidden + k], gf = g[2 * hidden + k], gc = g[3 * hidden + k];
          if (peep) {
            gi += peep[k] * cb[k];
            gf += peep[2 * hidden + k] * cb[k];
          }
          const float i_t = sigmoid(clipped(gi));
          const float f_t = input_forget ? 1.0f - i_t : sigmoid(clipped(gf));
          const float c_hat = std::tanh(clipped(gc));
          const float c_new = f_t * cb[k] + i_t * c_hat;
          if (peep)
            go += peep[hidden + k] * c_new;
          const float o_t = sigmoid(clipped(go));
          const float h_new = o_t * std::tanh(c_new);
          if (active) {
            cb[k] = c_new;
            hb[k] = h_new;
          }
          const std::size_t yi = layout1 ? ((b * seq + t) * dirs + d) * hidden + k
                                         : ((t * dirs + d) * batch + b) * hidden + k;
          py[yi] = active ? h_new : 0.0f;
        }
      }
    }
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t k = 0; k < hidden; ++k) {
        const std::size_t si = layout1 ? (b * dirs + d) * hidden + k : (d * batch + b) * hidden + k;
        yh.data<float>()[si] = h[b * hidden + k];
        yc.data<float>()[si] = cs[b * hidden + k];
      }
    }
  }
  if (c.output_count() > 0)
    c.out(0) = std::move(y);
  if (c.output_count() > 1)
    c.out(1) = std::move(yh);
  if (c.output_count() > 2)
    c.out(2) = std::move(yc);
}

}  // namespace

void register_rnn(registry_map& r) {
  r["LSTM"] = k_lstm;
}

}  // namespace quark::onnx::rt
