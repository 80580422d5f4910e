// SPDX-License-Identifier: MIT
// DFT, STFT, the window functions (Hann, Hamming, Blackman) and MelWeightMatrix.
//
// Every transform works on complex lines of double gathered along the transform axis, so float32
// inputs keep float64 accuracy until the final store. A line of length n is transformed by an
// iterative radix-2 FFT when n is a power of two, by Bluestein's chirp-z algorithm (a circular
// convolution done with three power-of-two FFTs, O(n log n)) for other n from `direct_below` on,
// and by a direct O(n^2) sum with an exact twiddle table for the short remaining lengths, where
// the direct sum costs no more than Bluestein's three padded transforms. Lines are independent
// and are spread over the thread pool.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

using cplx = std::complex<double>;

/// Transform and window lengths above this (16M points, far past any audio or image model's)
/// are refused, and so are MelWeightMatrix outputs of more elements: a window of size 2^31 from
/// a malformed model allocated 24 GB and ran for minutes. The limit also keeps every size
/// computation (2n - 1, k^2 mod 2n) far from overflow.
constexpr std::int64_t max_length = std::int64_t{1} << 24;

/// Non-power-of-two lengths below this use the direct sum.
constexpr std::size_t direct_below = 32;

/// a * b without the NaN/Inf recovery of std::complex's operator* (a library call per product
/// at -O0; the transforms never see an infinity that the recovery would rescue).
inline cplx mul(cplx a, cplx b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

/// e^(-i pi num / den): the angle is reduced to an exact integer ratio before the
/// multiplication by pi, so large indices lose no accuracy.
inline cplx unit_root(std::size_t num, std::size_t den) {
  const double a = -std::numbers::pi * static_cast<double>(num) / static_cast<double>(den);
  return {std::cos(a), std::sin(a)};
}

/// The forward DFT of one length, X[k] = sum_j x[j] e^(-2 pi i jk / n), with its tables built
/// once and shared read-only by every thread.
class fft_plan {
 public:
  explicit fft_plan(std::size_t n) : n_(n) {
    if ((n & (n - 1)) == 0) {
      kind_ = kind::radix2;
      roots_.resize(n / 2);
      for (std::size_t k = 0; k < n / 2; ++k)
        roots_[k] = unit_root(2 * k, n);
    } else if (n < direct_below) {
      kind_ = kind::direct;
      roots_.resize(n);
      for (std::size_t k = 0; k < n; ++k)
        roots_[k] = unit_root(2 * k, n);
    } else {
      // Bluestein: jk = (j^2 + k^2 - (k - j)^2) / 2 turns the DFT into chirp(k) times the
      // circular convolution of x(j) chirp(j) with conj(chirp), chirp(k) = e^(-i pi k^2 / n).
      kind_ = kind::bluestein;
      std::size_t m = 1;
      while (m < 2 * n - 1)
        m <<= 1;
      inner_ = std::make_unique<fft_plan>(m);
      chirp_.resize(n);
      std::size_t sq = 0;  // k^2 mod 2n, so the angle stays small and exact
      for (std::size_t k = 0; k < n; ++k) {
        chirp_[k] = unit_root(sq, n);
        sq = (sq + 2 * k + 1) % (2 * n);
      }
      // The filter spans lags -(n-1) .. n-1, wrapped around m; its spectrum is stored already
      // divided by m, the scale of the inverse transform that follows the product.
      filter_.assign(m, cplx{});
      filter_[0] = std::conj(chirp_[0]);
      for (std::size_t k = 1; k < n; ++k)
        filter_[k] = filter_[m - k] = std::conj(chirp_[k]);
      inner_->forward(filter_.data(), nullptr);
      const double scale = 1.0 / static_cast<double>(m);
      for (cplx& v : filter_)
        v *= scale;
    }
  }

  std::size_t size() const noexcept { return n_; }
  /// Scratch values forward() needs per call.
  std::size_t work_size() const noexcept {
    return kind_ == kind::direct ? n_ : kind_ == kind::bluestein ? filter_.size() : 0;
  }

  /// Transforms x[0, n) in place; `work` holds work_size() values.
  void forward(cplx* x, cplx* work) const {
    switch (kind_) {
      case kind::radix2:
        radix2(x);
        break;
      case kind::direct:
        direct(x, work);
        break;
      case kind::bluestein:
        bluestein(x, work);
        break;
    }
  }

 private:
  enum class kind { radix2, direct, bluestein };

  void radix2(cplx* x) const {
    const std::size_t n = n_;
    for (std::size_t i = 1, j = 0; i < n; ++i) {  // bit-reversal permutation
      std::size_t bit = n >> 1;
      for (; (j & bit) != 0; bit >>= 1)
        j ^= bit;
      j ^= bit;
      if (i < j)
        std::swap(x[i], x[j]);
    }
    for (std::size_t len = 2; len <= n; len <<= 1) {
      const std::size_t half = len / 2;
      const std::size_t stride = n / len;  // roots_ index step at this stage
      for (std::size_t s = 0; s < n; s += len) {
        for (std::size_t k = 0; k < half; ++k) {
          const cplx t = mul(roots_[k * stride], x[s + k + half]);
          x[s + k + half] = x[s + k] - t;
          x[s + k] += t;
        }
      }
    }
  }

  void direct(cplx* x, cplx* work) const {
    const std::size_t n = n_;
    for (std::size_t k = 0; k < n; ++k) {
      cplx acc{};
      std::size_t r = 0;  // j * k mod n
      for (std::size_t j = 0; j < n; ++j) {
        acc += mul(x[j], roots_[r]);
        r += k;
        if (r >= n)
          r -= n;
      }
      work[k] = acc;
    }
    std::copy(work, work + n, x);
  }

  void bluestein(cplx* x, cplx* work) const {
    const std::size_t n = n_;
    const std::size_t m = filter_.size();
    for (std::size_t j = 0; j < n; ++j)
      work[j] = mul(x[j], chirp_[j]);
    std::fill(work + n, work + m, cplx{});
    inner_->forward(work, nullptr);
    // Inverse transform of the product as conj(forward(conj(.))), the 1/m being in filter_.
    for (std::size_t t = 0; t < m; ++t)
      work[t] = std::conj(mul(work[t], filter_[t]));
    inner_->forward(work, nullptr);
    for (std::size_t k = 0; k < n; ++k)
      x[k] = mul(chirp_[k], std::conj(work[k]));
  }

  std::size_t n_;
  kind kind_ = kind::radix2;
  std::vector<cplx> roots_;  ///< radix2: e^(-2 pi i k/n), k < n/2; direct: k < n
  std::vector<cplx> chirp_;  ///< bluestein: e^(-i pi k^2/n), k < n
  std::vector<cplx> filter_;
  std::unique_ptr<fft_plan> inner_;
};

/// Transforms `lines` lines of plan.size() values over the pool: load(line, buf) fills buf,
/// then the forward or inverse (conjugated, scaled by 1/n) transform runs, then
/// store(line, buf). load and store must not fail (they run on pool threads).
template <class Load, class Store>
void transform_lines(thread_pool& pool, const fft_plan& plan, bool inverse, std::size_t lines,
                     const Load& load, const Store& store) {
  const std::size_t n = plan.size();
  const double scale = 1.0 / static_cast<double>(n);
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 14) / n);
  pool.parallel_for(lines, grain, [&](std::size_t lo, std::size_t hi) {
    std::vector<cplx> buf(n);
    std::vector<cplx> work(plan.work_size());
    for (std::size_t line = lo; line < hi; ++line) {
      load(line, buf.data());
      if (inverse) {  // inverse(x) = conj(forward(conj(x))) / n
        for (cplx& v : buf)
          v = std::conj(v);
        plan.forward(buf.data(), work.data());
        for (cplx& v : buf)
          v = std::conj(v) * scale;
      } else {
        plan.forward(buf.data(), work.data());
      }
      store(line, buf.data());
    }
  });
}

// ---- input and attribute readers -----------------------------------------------------------

/// The value of a one-element int32/int64 input (`what` names it in errors).
std::int64_t scalar_int(const kernel_context& c, std::size_t i, const char* what) {
  const tensor& t = c.in(i);
  if (t.size() != 1) {
    c.fail("quark.onnx.shape",
           std::string(what) + " must be a scalar, got shape " + shape_string(t.shape()));
  }
  return read_ints(c, t)[0];
}

/// The value of a one-element floating-point input.
double scalar_float(const kernel_context& c, std::size_t i, const char* what) {
  const tensor& t = c.in(i);
  if (t.size() != 1) {
    c.fail("quark.onnx.shape",
           std::string(what) + " must be a scalar, got shape " + shape_string(t.shape()));
  }
  const dtype_id ty = t.type();
  if (ty != dtype_id::float32 && ty != dtype_id::float64 && ty != dtype_id::float16 &&
      ty != dtype_id::bfloat16) {
    c.fail("quark.onnx.runtime", std::string(what) + " must be a floating-point scalar, got " +
                                     std::string(dtype_name(ty)));
  }
  return read_doubles(t)[0];
}

/// A 0/1 attribute.
bool flag_attr(const kernel_context& c, const char* name, std::int64_t fallback) {
  const std::int64_t v = c.n.attr_i(name, fallback);
  if (v != 0 && v != 1) {
    c.fail("quark.onnx.runtime",
           "attribute '" + std::string(name) + "' must be 0 or 1, got " + std::to_string(v));
  }
  return v == 1;
}

/// Refuses a length the runtime does not allocate (`what` names it).
void check_length(const kernel_context& c, std::int64_t n, const std::string& what) {
  if (n > max_length) {
    c.fail("quark.onnx.unsupported_op", what + " " + std::to_string(n) +
                                            " exceeds the supported maximum " +
                                            std::to_string(max_length));
  }
}

/// The element type named by attribute output_datatype (default FLOAT): a numeric type.
dtype_id output_datatype(const kernel_context& c) {
  const std::int64_t code = c.n.attr_i("output_datatype", 1);
  std::optional<dtype_id> t;
  if (code >= 1 && code <= 26)
    t = dtype_from_onnx(static_cast<std::int32_t>(code));
  if (t) {
    switch (*t) {
      case dtype_id::float32:
      case dtype_id::float64:
      case dtype_id::float16:
      case dtype_id::bfloat16:
      case dtype_id::int8:
      case dtype_id::uint8:
      case dtype_id::int16:
      case dtype_id::uint16:
      case dtype_id::int32:
      case dtype_id::uint32:
      case dtype_id::int64:
      case dtype_id::uint64:
        return *t;
      default:
        break;
    }
  }
  c.fail("quark.onnx.runtime", "attribute 'output_datatype' " + std::to_string(code) +
                                   " is not a supported numeric type (float, double, float16, "
                                   "bfloat16 or an 8- to 64-bit integer)");
}

/// A tensor of element type `type` holding `v`: integers truncate and saturate; float16 and
/// bfloat16 are rounded to that type and held as float32, as the runtime computes them.
tensor typed_output(const kernel_context& c, dtype_id type, shape_t shape,
                    const std::vector<double>& v) {
  if (type == dtype_id::float16 || type == dtype_id::bfloat16) {
    tensor out(dtype_id::float32, std::move(shape), uninitialized);
    auto dst = out.data<float>();
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto f = static_cast<float>(v[i]);
      dst[i] = type == dtype_id::float16 ? quark::to_float(quark::convert<quark::float16>(f))
                                         : quark::to_float(quark::convert<quark::bfloat16>(f));
    }
    return out;
  }
  return dispatch_numeric(c, type, [&](auto id) {
    using T = typename decltype(id)::type;
    tensor out(type, std::move(shape), uninitialized);
    auto dst = out.data<T>();
    for (std::size_t i = 0; i < v.size(); ++i)
      dst[i] = saturate_cast<T>(v[i]);
    return out;
  });
}

// ---- DFT ------------------------------------------------------------------------------------

void k_dft(kernel_context& c) {
  const tensor& x = c.in(0);
  const shape_t& shape = x.shape();
  const bool inverse = flag_attr(c, "inverse", 0);
  const bool onesided = flag_attr(c, "onesided", 0);
  const std::size_t rank = x.rank();
  if (rank < 2) {
    c.fail(
        "quark.onnx.shape",
        "input must have rank 2 or more ([..., signal, 1 or 2]), got shape " + shape_string(shape));
  }
  const auto comps = to_size(shape.back());
  if (comps != 1 && comps != 2) {
    c.fail("quark.onnx.shape", "the last dimension of input shape " + shape_string(shape) +
                                   " must be 1 (real) or 2 (complex), got " +
                                   std::to_string(shape.back()));
  }
  // Opset 20 moved axis from an attribute (default 1) to input 2 (default -2).
  std::int64_t axis = c.n.opset >= 20 ? -2 : c.n.attr_i("axis", 1);
  if (c.n.opset >= 20 && c.has_input(2))
    axis = scalar_int(c, 2, "axis");
  const auto r = to_i64(rank);
  if (axis < -r || axis > r - 2 || axis == -1) {
    c.fail("quark.onnx.runtime", "axis " + std::to_string(axis) + " out of range for input shape " +
                                     shape_string(shape) + " (accepted: [" + std::to_string(-r) +
                                     ", -2] or [0, " + std::to_string(r - 2) +
                                     "]; the last dimension holds the real and imaginary parts)");
  }
  const std::size_t ax = to_size(axis < 0 ? axis + r : axis);
  const std::size_t len = to_size(shape[ax]);
  // onesided: forward = RFFT (real in, half spectrum out), inverse = IRFFT (half spectrum in,
  // real out).
  const bool rfft = onesided && !inverse;
  const bool irfft = onesided && inverse;
  if (rfft && comps != 1) {
    c.fail("quark.onnx.runtime",
           "onesided=1 (forward) needs a real input (last dimension 1), "
           "got input shape " +
               shape_string(shape));
  }
  if (irfft && comps != 2) {
    c.fail("quark.onnx.runtime",
           "onesided=1 with inverse=1 needs a complex half spectrum (last "
           "dimension 2), got input shape " +
               shape_string(shape));
  }
  std::int64_t n = irfft ? 2 * (to_i64(len) - 1) : to_i64(len);
  if (c.has_input(1)) {
    n = scalar_int(c, 1, "dft_length");
    if (n <= 0)
      c.fail("quark.onnx.runtime", "dft_length must be positive, got " + std::to_string(n));
  } else if (n <= 0) {
    c.fail("quark.onnx.runtime", "the DFT length derived from axis " + std::to_string(axis) +
                                     " of input shape " + shape_string(shape) + " is " +
                                     std::to_string(n) + " (give dft_length)");
  }
  check_length(c, n, "dft_length");
  const auto nn = to_size(n);
  const std::size_t out_len = rfft ? nn / 2 + 1 : nn;
  const std::size_t out_comps = irfft ? 1 : 2;
  shape_t out_shape = shape;
  out_shape[ax] = to_i64(out_len);
  out_shape.back() = to_i64(out_comps);

  std::size_t outer = 1;
  std::size_t inner = 1;
  for (std::size_t d = 0; d < ax; ++d)
    outer *= to_size(shape[d]);
  for (std::size_t d = ax + 1; d + 1 < rank; ++d)
    inner *= to_size(shape[d]);
  const std::size_t lines = outer * inner;

  dispatch_float(c, x.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    tensor out(x.type(), out_shape, uninitialized);
    if (lines == 0) {
      c.out(0) = std::move(out);
      return;
    }
    const T* src = x.data<T>().data();
    T* dst = out.data<T>().data();
    const std::size_t in_step = inner * comps;  // between neighbours along the axis
    const std::size_t out_step = inner * out_comps;
    const fft_plan plan(nn);
    auto load = [&](std::size_t line, cplx* buf) {
      const T* p = src + (line / inner) * len * in_step + (line % inner) * comps;
      auto at = [&](std::size_t k) {
        const T* e = p + k * in_step;
        return cplx{static_cast<double>(e[0]), comps == 2 ? static_cast<double>(e[1]) : 0.0};
      };
      if (irfft) {
        // Bins 0 .. n/2 come from the input (zero past its end); the rest mirror them,
        // X[n-k] = conj(X[k]), the spectrum of a real signal.
        const std::size_t half = nn / 2;
        const std::size_t take = std::min(len, half + 1);
        for (std::size_t k = 0; k < take; ++k)
          buf[k] = at(k);
        std::fill(buf + take, buf + half + 1, cplx{});
        for (std::size_t k = half + 1; k < nn; ++k)
          buf[k] = std::conj(buf[nn - k]);
      } else {
        const std::size_t take = std::min(len, nn);  // truncate or zero-pad to dft_length
        for (std::size_t k = 0; k < take; ++k)
          buf[k] = at(k);
        std::fill(buf + take, buf + nn, cplx{});
      }
    };
    auto store = [&](std::size_t line, const cplx* buf) {
      T* q = dst + (line / inner) * out_len * out_step + (line % inner) * out_comps;
      for (std::size_t k = 0; k < out_len; ++k) {
        q[k * out_step] = static_cast<T>(buf[k].real());
        if (out_comps == 2)
          q[k * out_step + 1] = static_cast<T>(buf[k].imag());
      }
    };
    transform_lines(c.pool, plan, inverse, lines, load, store);
    c.out(0) = std::move(out);
  });
}

// ---- STFT -----------------------------------------------------------------------------------

void k_stft(kernel_context& c) {
  const tensor& sig = c.in(0);
  const shape_t& shape = sig.shape();
  if (sig.rank() != 3 || (shape[2] != 1 && shape[2] != 2)) {
    c.fail("quark.onnx.shape",
           "signal must have shape [batch, length, 1 or 2], got " + shape_string(shape));
  }
  const auto batch = to_size(shape[0]);
  const auto len = to_size(shape[1]);
  const auto comps = to_size(shape[2]);
  const std::int64_t step = scalar_int(c, 1, "frame_step");
  if (step <= 0)
    c.fail("quark.onnx.runtime", "frame_step must be positive, got " + std::to_string(step));
  const tensor* win = c.opt(2);
  if (win && win->rank() != 1) {
    c.fail("quark.onnx.shape", "window must have rank 1, got shape " + shape_string(win->shape()));
  }
  if (win && win->type() != sig.type()) {
    c.fail("quark.onnx.runtime", "window is " + std::string(dtype_name(win->type())) +
                                     " but signal is " + std::string(dtype_name(sig.type())));
  }
  std::int64_t frame = 0;
  if (c.has_input(3)) {
    frame = scalar_int(c, 3, "frame_length");
    if (frame <= 0) {
      c.fail("quark.onnx.runtime", "frame_length must be positive, got " + std::to_string(frame));
    }
    if (win && win->shape()[0] != frame) {
      c.fail("quark.onnx.shape", "window length " + std::to_string(win->shape()[0]) +
                                     " differs from frame_length " + std::to_string(frame));
    }
  } else if (win) {
    frame = win->shape()[0];
    if (frame == 0)
      c.fail("quark.onnx.shape", "window is empty and no frame_length is given");
  } else {
    c.fail("quark.onnx.runtime", "STFT needs a window or a frame_length (both are absent)");
  }
  if (frame > to_i64(len)) {
    c.fail("quark.onnx.shape", "frame_length " + std::to_string(frame) +
                                   " exceeds the signal length (signal shape " +
                                   shape_string(shape) + "): no frame fits");
  }
  const bool onesided = flag_attr(c, "onesided", 1);
  if (onesided && comps == 2) {
    c.fail("quark.onnx.runtime",
           "onesided=1 needs a real signal (last dimension 1), got signal "
           "shape " +
               shape_string(shape) + " (set onesided=0)");
  }
  const auto nf = to_size(frame);
  const auto hop = to_size(step);
  const std::size_t frames = (len - nf) / hop + 1;
  const std::size_t bins = onesided ? nf / 2 + 1 : nf;
  const shape_t out_shape{to_i64(batch), to_i64(frames), to_i64(bins), 2};

  dispatch_float(c, sig.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    tensor out(sig.type(), out_shape, uninitialized);
    const std::size_t lines = batch * frames;
    if (lines == 0) {
      c.out(0) = std::move(out);
      return;
    }
    std::vector<double> w;
    if (win) {
      for (T v : win->data<T>())
        w.push_back(static_cast<double>(v));
    }
    const T* src = sig.data<T>().data();
    T* dst = out.data<T>().data();
    const fft_plan plan(nf);
    auto load = [&](std::size_t line, cplx* buf) {
      const std::size_t b = line / frames;
      const std::size_t t = line % frames;
      const T* p = src + (b * len + t * hop) * comps;
      for (std::size_t j = 0; j < nf; ++j) {
        const double re = static_cast<double>(p[j * comps]);
        const double im = comps == 2 ? static_cast<double>(p[j * comps + 1]) : 0.0;
        const double g = w.empty() ? 1.0 : w[j];
        buf[j] = {re * g, im * g};
      }
    };
    auto store = [&](std::size_t line, const cplx* buf) {
      T* q = dst + line * bins * 2;
      for (std::size_t k = 0; k < bins; ++k) {
        q[2 * k] = static_cast<T>(buf[k].real());
        q[2 * k + 1] = static_cast<T>(buf[k].imag());
      }
    };
    transform_lines(c.pool, plan, false, lines, load, store);
    c.out(0) = std::move(out);
  });
}

// ---- HannWindow, HammingWindow, BlackmanWindow ----------------------------------------------

/// w[k] = a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N), k < size, with N = size (periodic) or
/// size - 1 (symmetric).
void cosine_sum_window(kernel_context& c, double a0, double a1, double a2) {
  const std::int64_t size = scalar_int(c, 0, "size");
  if (size <= 0)
    c.fail("quark.onnx.runtime", "size must be positive, got " + std::to_string(size));
  check_length(c, size, "size");
  const bool periodic = flag_attr(c, "periodic", 1);
  const dtype_id type = output_datatype(c);
  const auto n = to_size(size);
  const std::size_t period = periodic ? n : n - 1;
  std::vector<double> v(n);
  if (period == 0) {
    // A symmetric window of one point: N = 0 leaves the angle 0/0. It is 1, as in numpy,
    // scipy and PyTorch, the value that makes a one-point window the identity.
    v[0] = 1.0;
  } else {
    for (std::size_t k = 0; k < n; ++k) {
      const double a =
          2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(period);
      v[k] = a0 - a1 * std::cos(a) + a2 * std::cos(2.0 * a);
    }
  }
  c.out(0) = typed_output(c, type, {size}, v);
}

void k_hann_window(kernel_context& c) {
  cosine_sum_window(c, 0.5, 0.5, 0.0);
}

void k_hamming_window(kernel_context& c) {
  cosine_sum_window(c, 25.0 / 46.0, 21.0 / 46.0, 0.0);  // the spec's alpha and beta
}

void k_blackman_window(kernel_context& c) {
  cosine_sum_window(c, 0.42, 0.5, 0.08);
}

// ---- MelWeightMatrix ------------------------------------------------------------------------

/// The ONNX definition: num_mel_bins + 2 points evenly spaced on the mel scale,
/// mel(f) = 2595 log10(1 + f / 700), from mel(lower) in steps of
/// (mel(upper) - mel(lower)) / (num_mel_bins + 2) (the divisor is the point count, as in the
/// definition, so the last point falls short of upper), each mapped back to hertz and to the
/// integer bin floor((dft_length + 1) f / sample_rate). Mel band i is the triangle over bins
/// (b[i], b[i+1], b[i+2]) peaking at 1 on b[i+1]; a band whose left and centre bins coincide is
/// a single 1. Output [dft_length / 2 + 1, num_mel_bins]; triangle parts past the last row (an
/// upper edge above the Nyquist frequency) are cut off.
void k_mel_weight_matrix(kernel_context& c) {
  const std::int64_t mel_bins = scalar_int(c, 0, "num_mel_bins");
  const std::int64_t dft_length = scalar_int(c, 1, "dft_length");
  const std::int64_t sample_rate = scalar_int(c, 2, "sample_rate");
  const double lower = scalar_float(c, 3, "lower_edge_hertz");
  const double upper = scalar_float(c, 4, "upper_edge_hertz");
  if (mel_bins <= 0) {
    c.fail("quark.onnx.runtime", "num_mel_bins must be positive, got " + std::to_string(mel_bins));
  }
  if (dft_length <= 0) {
    c.fail("quark.onnx.runtime", "dft_length must be positive, got " + std::to_string(dft_length));
  }
  if (sample_rate <= 0) {
    c.fail("quark.onnx.runtime",
           "sample_rate must be positive, got " + std::to_string(sample_rate));
  }
  if (!std::isfinite(lower) || !std::isfinite(upper) || lower < 0.0 || upper < lower) {
    c.fail("quark.onnx.runtime", "lower_edge_hertz " + std::to_string(lower) +
                                     " and upper_edge_hertz " + std::to_string(upper) +
                                     " must be finite with 0 <= lower_edge_hertz <= "
                                     "upper_edge_hertz");
  }
  check_length(c, mel_bins, "num_mel_bins");
  check_length(c, dft_length, "dft_length");
  check_length(c, (dft_length / 2 + 1) * mel_bins,
               "the output's element count ((dft_length / 2 + 1) * num_mel_bins)");
  const dtype_id type = output_datatype(c);
  const auto cols = to_size(mel_bins);
  const std::size_t rows = to_size(dft_length) / 2 + 1;

  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double mel_low = mel(lower);
  const double mel_step = (mel(upper) - mel_low) / static_cast<double>(cols + 2);
  std::vector<std::int64_t> bin(cols + 2);
  for (std::size_t i = 0; i < cols + 2; ++i) {
    const double m = mel_low + static_cast<double>(i) * mel_step;
    const double hz = 700.0 * (std::pow(10.0, m / 2595.0) - 1.0);
    const double b =
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate));
    // Clamped in the float domain before the cast; bins are >= 0 since lower >= 0, and any
    // bin this large lies far past the last row.
    bin[i] = static_cast<std::int64_t>(std::clamp(b, 0.0, 4.0e15));
  }

  std::vector<double> v(rows * cols, 0.0);
  const auto last = to_i64(rows) - 1;
  auto put = [&](std::int64_t row, std::size_t col, double value) {
    v[to_size(row) * cols + col] = value;
  };
  for (std::size_t i = 0; i < cols; ++i) {
    const std::int64_t left = bin[i];
    const std::int64_t centre = bin[i + 1];
    const std::int64_t right = bin[i + 2];
    if (centre == left) {
      if (centre <= last)
        put(centre, i, 1.0);
    } else {
      const auto rise = static_cast<double>(centre - left);
      for (std::int64_t j = left; j <= std::min(centre, last); ++j)
        put(j, i, static_cast<double>(j - left) / rise);
    }
    if (right > centre) {
      const auto fall = static_cast<double>(right - centre);
      for (std::int64_t j = centre; j < std::min(right, last + 1); ++j)
        put(j, i, static_cast<double>(right - j) / fall);
    }
  }
  c.out(0) = typed_output(c, type, {to_i64(rows), mel_bins}, v);
}

}  // namespace

void register_signal(registry_map& r) {
  r["DFT"] = k_dft;
  r["STFT"] = k_stft;
  r["HannWindow"] = k_hann_window;
  r["HammingWindow"] = k_hamming_window;
  r["BlackmanWindow"] = k_blackman_window;
  r["MelWeightMatrix"] = k_mel_weight_matrix;
}

}  // namespace quark::onnx::rt
