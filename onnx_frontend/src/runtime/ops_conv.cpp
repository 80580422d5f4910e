// SPDX-License-Identifier: MIT
// Conv and ConvTranspose for 1-D, 2-D and 3-D spatial inputs (1-D runs as 2-D with height 1).
// Conv: 1x1 stride-1 kernels are one GEMM on the input; depthwise kernels run directly per
// channel (PaddleOCR is full of them); everything else is im2col + GEMM per group.
// ConvTranspose: GEMM into columns, then col2im scatter-add. 3-D inputs take a separate, plain
// im2col / col2im path (conv_3d below) so the 2-D kernels keep their tuned loops.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/conv_geometry.hpp"
#include "runtime/gemm.hpp"
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// Reads a 1-D or 2-D spatial attribute list into (h, w) order; 1-D gives (1, v).
std::pair<std::int64_t, std::int64_t> pair_of(const std::vector<std::int64_t>& v, std::size_t sp,
                                              std::int64_t fallback, std::size_t offset = 0) {
  if (v.empty())
    return {fallback, fallback};
  if (sp == 1)
    return {fallback == 0 ? 0 : 1, v[offset]};
  return {v[offset], v[offset + 1]};
}

/// Checks the lengths and ranges of a 1-D or 2-D Conv / ConvTranspose's strides, dilations, pads
/// and output_padding (pair_of reads two values of a 2-D list: a shorter one was read past).
void check_spatial_attrs(const kernel_context& c, std::size_t sp, bool transpose) {
  struct list {
    const char* name;
    std::size_t length;  // values expected
    bool step;           // strides / dilations: in [1, 2^31]; else in [-2^31, 2^31]
  };
  const list lists[] = {{"strides", sp, true}, {"dilations", sp, true}, {"pads", 2 * sp, false}};
  const list output_padding{"output_padding", sp, false};
  auto check = [&](const list& l) {
    const auto v = c.n.attr_ints(l.name);
    if (!v.empty() && v.size() != l.length) {
      c.fail("quark.onnx.shape", std::string(l.name) + " has " + std::to_string(v.size()) +
                                     " values for a " + std::to_string(sp) + "-D input (expected " +
                                     std::to_string(l.length) + ")");
    }
    for (const std::int64_t x : v) {
      if (l.step && (x < 1 || x > max_extent)) {
        c.fail("quark.onnx.shape",
               std::string(l.name) + " must be in [1, 2^31], got " + std::to_string(x));
      }
      if (!l.step && (x < -max_extent || x > max_extent)) {
        c.fail("quark.onnx.shape",
               std::string(l.name) + " must be in [-2^31, 2^31], got " + std::to_string(x));
      }
    }
  };
  for (const list& l : lists)
    check(l);
  if (transpose)
    check(output_padding);
}

/// A kernel_shape attribute, when given, names the weight's spatial dimensions (ONNX Runtime
/// refuses a Conv whose kernel_shape disagrees with W; the kernel is always read off W).
void check_kernel_shape(const kernel_context& c, const tensor& w, std::size_t sp) {
  const auto k = c.n.attr_ints("kernel_shape");
  if (!k.empty() && (k.size() != sp || w.rank() != sp + 2 ||
                     !std::equal(k.begin(), k.end(), w.shape().begin() + 2))) {
    std::string listed;
    for (const std::int64_t v : k) {
      if (!listed.empty())
        listed += ',';  // not `"," + string&&`: a false GCC 12 -Wrestrict at -O3
      listed += std::to_string(v);
    }
    c.fail("quark.onnx.shape",
           "kernel_shape [" + listed + "] disagrees with the weight " + shape_string(w.shape()));
  }
}

std::size_t spatial_rank(const kernel_context& c, const tensor& x) {
  if (x.rank() != 3 && x.rank() != 4) {
    c.fail("quark.onnx.shape",
           "only 1-D, 2-D and 3-D convolutions are supported, input is " + shape_string(x.shape()));
  }
  return x.rank() - 2;
}

/// Pads for auto_pad SAME_*: total = max(0, (ceil(in/s)-1)*s + eff_k - in).
void same_pads(const std::string& mode, std::size_t in, std::size_t s, std::size_t eff_k,
               std::int64_t& begin, std::int64_t& end) {
  const std::size_t out = (in + s - 1) / s;
  const auto need = to_i64((out - 1) * s + eff_k);
  const std::int64_t total = std::max<std::int64_t>(0, need - to_i64(in));
  if (mode == "SAME_UPPER") {
    begin = total / 2;
    end = total - begin;
  } else {
    end = total / 2;
    begin = total - end;
  }
}

}  // namespace

geometry conv_geometry(const kernel_context& c, const tensor& x, const tensor& w) {
  const std::size_t sp = spatial_rank(c, x);
  geometry g;
  g.n = to_size(x.shape()[0]);
  g.c = to_size(x.shape()[1]);
  g.h = sp == 2 ? to_size(x.shape()[2]) : 1;
  g.w = to_size(x.shape().back());
  if (w.rank() != x.rank())
    c.fail("quark.onnx.shape", "weight rank differs from input rank");
  g.m = to_size(w.shape()[0]);
  g.kh = sp == 2 ? to_size(w.shape()[2]) : 1;
  g.kw = to_size(w.shape().back());
  if (g.kh == 0 || g.kw == 0)
    c.fail("quark.onnx.shape", "weight " + shape_string(w.shape()) + " has an empty kernel");
  g.group = to_size(c.n.attr_i("group", 1));
  check_spatial_attrs(c, sp, false);
  check_kernel_shape(c, w, sp);
  const auto s = pair_of(c.n.attr_ints("strides"), sp, 1);
  const auto d = pair_of(c.n.attr_ints("dilations"), sp, 1);
  g.sh = to_size(s.first);
  g.sw = to_size(s.second);
  g.dh = to_size(d.first);
  g.dw = to_size(d.second);
  const auto pads = c.n.attr_ints("pads");
  if (!pads.empty()) {
    if (pads.size() != 2 * sp)
      c.fail("quark.onnx.shape", "pads has the wrong length");
    std::tie(g.pt, g.pl) = pair_of(pads, sp, 0, 0);
    std::tie(g.pb, g.pr) = pair_of(pads, sp, 0, sp);
  }
  const std::string auto_pad = c.n.attr_s("auto_pad", "NOTSET");
  const std::size_t ekh = (g.kh - 1) * g.dh + 1;
  const std::size_t ekw = (g.kw - 1) * g.dw + 1;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    same_pads(auto_pad, g.h, g.sh, ekh, g.pt, g.pb);
    same_pads(auto_pad, g.w, g.sw, ekw, g.pl, g.pr);
  } else if (auto_pad == "VALID") {
    g.pt = g.pl = g.pb = g.pr = 0;
  }
  const std::int64_t hh = to_i64(g.h) + g.pt + g.pb - to_i64(ekh);
  const std::int64_t ww = to_i64(g.w) + g.pl + g.pr - to_i64(ekw);
  if (hh < 0 || ww < 0)
    c.fail("quark.onnx.shape", "kernel larger than the padded input");
  g.oh = to_size(hh) / g.sh + 1;
  g.ow = to_size(ww) / g.sw + 1;
  if (g.group == 0 || g.c % g.group != 0 || g.m % g.group != 0 ||
      to_size(w.shape()[1]) * g.group != g.c) {
    c.fail("quark.onnx.shape", "input channels " + std::to_string(g.c) + ", weight " +
                                   shape_string(w.shape()) + " and group " +
                                   std::to_string(g.group) + " disagree");
  }
  return g;
}

namespace {

/// One output channel of a depthwise convolution (one input channel, one filter).
void depthwise_channel(const geometry& g, const float* x, const float* k, float bias, float* y) {
  std::fill(y, y + g.oh * g.ow, bias);
  for (std::size_t ky = 0; ky < g.kh; ++ky) {
    for (std::size_t kx = 0; kx < g.kw; ++kx) {
      const float wv = k[ky * g.kw + kx];
      const std::int64_t xoff = to_i64(kx * g.dw) - g.pl;
      // Output columns whose input column is inside [0, w).
      std::int64_t ox0 = 0;
      while (ox0 < to_i64(g.ow) && ox0 * to_i64(g.sw) + xoff < 0)
        ++ox0;
      std::int64_t ox1 = to_i64(g.ow);
      while (ox1 > ox0 && (ox1 - 1) * to_i64(g.sw) + xoff >= to_i64(g.w))
        --ox1;
      if (ox0 >= ox1)
        continue;
      for (std::size_t oy = 0; oy < g.oh; ++oy) {
        const std::int64_t iy = to_i64(oy * g.sh + ky * g.dh) - g.pt;
        if (iy < 0 || iy >= to_i64(g.h))
          continue;
        const float* src = x + to_size(iy) * g.w;
        float* dst = y + oy * g.ow;
        if (g.sw == 1) {
          const float* s = src + xoff;
          for (std::int64_t ox = ox0; ox < ox1; ++ox)
            dst[ox] += wv * s[ox];
        } else {
          for (std::int64_t ox = ox0; ox < ox1; ++ox) {
            dst[ox] += wv * src[ox * to_i64(g.sw) + xoff];
          }
        }
      }
    }
  }
}

/// y[o][p] += bias[o] for channels [o0, o1) and pixels [p0, p1) of a [channels, npix] output.
void add_bias(const float* bias, std::size_t o0, std::size_t o1, std::size_t p0, std::size_t p1,
              float* y, std::size_t npix) {
  for (std::size_t o = o0; o < o1; ++o) {
    const float bv = bias[o];
    float* row = y + o * npix;
    for (std::size_t p = p0; p < p1; ++p)
      row[p] += bv;
  }
}

void conv_3d(kernel_context& c, bool transpose);

void k_conv(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& w = float_input(c, 1);
  if (x.rank() == 5)
    return conv_3d(c, false);
  const geometry g = conv_geometry(c, x, w);
  const tensor* b = c.opt(2);
  if (b && b->size() != g.m)
    c.fail("quark.onnx.shape", "bias size differs from output channels");
  shape_t out_shape{to_i64(g.n), to_i64(g.m)};
  if (x.rank() == 4)
    out_shape.push_back(to_i64(g.oh));
  out_shape.push_back(to_i64(g.ow));
  check_output_elements(c, out_shape);
  // Every element is written below (GEMM with beta 0, or depthwise_channel's bias fill).
  tensor out(dtype_id::float32, out_shape, uninitialized);
  const float* px = x.data<float>().data();
  const float* pw = w.data<float>().data();
  const float* pb = b ? float_input(c, 2).data<float>().data() : nullptr;
  float* py = out.data<float>().data();
  const std::size_t npix = g.oh * g.ow;
  const std::size_t cg = g.c / g.group;
  const std::size_t mg = g.m / g.group;
  const std::size_t kdim = cg * g.kh * g.kw;
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 &&
                         g.pl == 0 && g.pb == 0 && g.pr == 0;
  // Output values per image; an output of at least stream_min_values elements goes to the chunk
  // sink (if any) block by block, from the thread that just computed (and biased) the block.
  const bool streamed = c.chunks && g.n * g.m * npix >= stream_min_values;
  for (std::size_t img = 0; img < g.n; ++img) {
    const float* xi = px + img * g.c * g.h * g.w;
    float* yi = py + img * g.m * npix;
    if (cg == 1 && mg == 1) {
      // Depthwise: chunks of whole channels, about stream_chunk values each but at least four
      // per thread so small layers still split.
      const std::size_t per =
          std::max<std::size_t>(1, std::min(stream_chunk / std::max<std::size_t>(npix, 1),
                                            (g.m + 4 * c.pool.size() - 1) / (4 * c.pool.size())));
      for_each_chunk(c.pool, g.m, per, [&](std::size_t part, std::size_t c0, std::size_t c1) {
        for (std::size_t ch = c0; ch < c1; ++ch) {
          depthwise_channel(g, xi + ch * g.h * g.w, pw + ch * g.kh * g.kw, pb ? pb[ch] : 0.0f,
                            yi + ch * npix);
        }
        if (streamed)
          c.stream(part, yi + c0 * npix, 1, (c1 - c0) * npix, (c1 - c0) * npix);
      });
      continue;
    }
    for (std::size_t gi = 0; gi < g.group; ++gi) {
      const float* xg = xi + gi * cg * g.h * g.w;
      const float* wg = pw + gi * mg * kdim;
      const float* bg = pb ? pb + gi * mg : nullptr;
      float* yg = yi + gi * mg * npix;
      if (pointwise) {
        gemm(&c.pool, false, false, mg, npix, kdim, 1.0f, wg, kdim, xg, npix, 0.0f, yg, npix);
        if (bg || streamed) {
          // Bias and hand-on in one parallel pass over chunks of whole channels.
          const std::size_t per =
              std::max<std::size_t>(1, stream_chunk / std::max<std::size_t>(npix, 1));
          for_each_chunk(c.pool, mg, per, [&](std::size_t part, std::size_t o0, std::size_t o1) {
            if (bg)
              add_bias(bg, o0, o1, 0, npix, yg, npix);
            if (streamed)
              c.stream(part, yg + o0 * npix, 1, (o1 - o0) * npix, (o1 - o0) * npix);
          });
        }
      } else {
        // Column blocks of the im2col matrix small enough to stay in cache; each thread
        // expands one block into its own buffer, multiplies it and adds the bias right away.
        const std::size_t block = std::clamp<std::size_t>((std::size_t{1} << 17) / kdim, 64, 4096);
        for_each_chunk(c.pool, npix, block, [&](std::size_t part, std::size_t p0, std::size_t p1) {
          thread_local std::vector<float> col;
          col.resize(kdim * (p1 - p0));
          im2col(g, xg, kdim, p0, p1, col.data());
          gemm(nullptr, false, false, mg, p1 - p0, kdim, 1.0f, wg, kdim, col.data(), p1 - p0, 0.0f,
               yg + p0, npix);
          if (bg)
            add_bias(bg, 0, mg, p0, p1, yg, npix);
          if (streamed)
            c.stream(part, yg + p0, mg, p1 - p0, npix);
        });
      }
    }
  }
  c.out(0) = std::move(out);
}

void k_conv_transpose(kernel_context& c) {
  const tensor& x = float_input(c, 0);
  const tensor& w = float_input(c, 1);
  if (x.rank() == 5)
    return conv_3d(c, true);
  const std::size_t sp = spatial_rank(c, x);
  if (w.rank() != x.rank())
    c.fail("quark.onnx.shape", "weight rank differs from input rank");
  geometry g;
  g.n = to_size(x.shape()[0]);
  g.c = to_size(x.shape()[1]);
  g.h = sp == 2 ? to_size(x.shape()[2]) : 1;
  g.w = to_size(x.shape().back());
  g.group = to_size(c.n.attr_i("group", 1));
  if (g.group == 0 || g.c % g.group != 0 || to_size(w.shape()[0]) != g.c) {
    c.fail("quark.onnx.shape", "weight " + shape_string(w.shape()) + " does not match input " +
                                   shape_string(x.shape()));
  }
  g.m = to_size(w.shape()[1]) * g.group;
  g.kh = sp == 2 ? to_size(w.shape()[2]) : 1;
  g.kw = to_size(w.shape().back());
  if (g.kh == 0 || g.kw == 0)
    c.fail("quark.onnx.shape", "weight " + shape_string(w.shape()) + " has an empty kernel");
  check_spatial_attrs(c, sp, true);
  check_kernel_shape(c, w, sp);
  const auto s = pair_of(c.n.attr_ints("strides"), sp, 1);
  const auto d = pair_of(c.n.attr_ints("dilations"), sp, 1);
  const auto op = pair_of(c.n.attr_ints("output_padding"), sp, 0);
  g.sh = to_size(s.first);
  g.sw = to_size(s.second);
  g.dh = to_size(d.first);
  g.dw = to_size(d.second);
  const auto ekh = to_i64((g.kh - 1) * g.dh + 1);
  const auto ekw = to_i64((g.kw - 1) * g.dw + 1);
  const auto pads = c.n.attr_ints("pads");
  if (!pads.empty()) {
    if (pads.size() != 2 * sp)
      c.fail("quark.onnx.shape", "pads has the wrong length");
    std::tie(g.pt, g.pl) = pair_of(pads, sp, 0, 0);
    std::tie(g.pb, g.pr) = pair_of(pads, sp, 0, sp);
  }
  const std::string auto_pad = c.n.attr_s("auto_pad", "NOTSET");
  const auto full_h = to_i64(g.sh) * (to_i64(g.h) - 1) + op.first + ekh;
  const auto full_w = to_i64(g.sw) * (to_i64(g.w) - 1) + op.second + ekw;
  auto split_total = [&](std::int64_t total, std::int64_t& begin, std::int64_t& end) {
    if (total < 0) {  // the requested output is larger: extra rows/columns at the end
      begin = 0;
      end = total;
    } else if (auto_pad == "SAME_UPPER") {
      begin = total / 2;
      end = total - begin;
    } else {
      end = total / 2;
      begin = total - end;
    }
  };
  const auto out_shape_attr = c.n.attr_ints("output_shape");
  if (!out_shape_attr.empty() && out_shape_attr.size() < sp) {
    c.fail("quark.onnx.shape", "output_shape has " + std::to_string(out_shape_attr.size()) +
                                   " values for a " + std::to_string(sp) + "-D input");
  }
  if (!out_shape_attr.empty()) {
    const auto target = pair_of(out_shape_attr, sp, 1, out_shape_attr.size() - sp);
    split_total(full_h - target.first, g.pt, g.pb);
    split_total(full_w - target.second, g.pl, g.pr);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    split_total(full_h - to_i64(g.h * g.sh), g.pt, g.pb);
    split_total(full_w - to_i64(g.w * g.sw), g.pl, g.pr);
  }
  const std::int64_t oh = full_h - g.pt - g.pb;
  const std::int64_t ow = full_w - g.pl - g.pr;
  if (oh <= 0 || ow <= 0)
    c.fail("quark.onnx.shape", "empty output");
  g.oh = to_size(oh);
  g.ow = to_size(ow);
  shape_t out_shape{to_i64(g.n), to_i64(g.m)};
  if (sp == 2)
    out_shape.push_back(oh);
  out_shape.push_back(ow);
  check_output_elements(c, out_shape);
  const tensor* b = c.opt(2);
  if (b && b->size() != g.m)
    c.fail("quark.onnx.shape", "bias size differs from output channels");
  tensor out(dtype_id::float32, out_shape);
  const float* pb = b ? float_input(c, 2).data<float>().data() : nullptr;
  const std::size_t cg = g.c / g.group;
  const std::size_t mg = g.m / g.group;
  const std::size_t kdim = mg * g.kh * g.kw;
  const std::size_t npix_in = g.h * g.w;
  const std::size_t npix = g.oh * g.ow;
  std::vector<float> col(kdim * npix_in);
  const float* px = x.data<float>().data();
  const float* pw = w.data<float>().data();
  float* py = out.data<float>().data();
  for (std::size_t img = 0; img < g.n; ++img) {
    for (std::size_t gi = 0; gi < g.group; ++gi) {
      const float* xg = px + (img * g.c + gi * cg) * npix_in;
      const float* wg = pw + gi * cg * kdim;  // [cg, kdim]
      float* yg = py + (img * g.m + gi * mg) * npix;
      // col[kdim, npix_in] = wg^T [kdim, cg] * xg [cg, npix_in]
      gemm(&c.pool, true, false, kdim, npix_in, cg, 1.0f, wg, kdim, xg, npix_in, 0.0f, col.data(),
           npix_in);
      c.pool.parallel_for(mg, 1, [&](std::size_t o0, std::size_t o1) {
        for (std::size_t oc = o0; oc < o1; ++oc) {
          float* plane = yg + oc * npix;
          std::fill(plane, plane + npix, pb ? pb[gi * mg + oc] : 0.0f);
          for (std::size_t ky = 0; ky < g.kh; ++ky) {
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
              const float* src = col.data() + ((oc * g.kh + ky) * g.kw + kx) * npix_in;
              for (std::size_t iy = 0; iy < g.h; ++iy) {
                const std::int64_t oy = to_i64(iy * g.sh + ky * g.dh) - g.pt;
                if (oy < 0 || oy >= oh)
                  continue;
                float* drow = plane + to_size(oy) * g.ow;
                const float* srow = src + iy * g.w;
                for (std::size_t ix = 0; ix < g.w; ++ix) {
                  const std::int64_t ox = to_i64(ix * g.sw + kx * g.dw) - g.pl;
                  if (ox >= 0 && ox < ow)
                    drow[ox] += srow[ix];
                }
              }
            }
          }
        }
      });
    }
  }
  c.out(0) = std::move(out);
}

// ---- 3-D -------------------------------------------------------------------------------

/// Extents in (d, h, w) order.
using dims3 = std::array<std::size_t, 3>;

struct geometry3 {
  std::size_t n = 0, c = 0, m = 0, group = 1;
  dims3 in{}, out{}, k{}, s{1, 1, 1}, d{1, 1, 1};
  std::array<std::int64_t, 3> pb{}, pe{};  ///< pads at the beginning / end of each dimension
  std::size_t in_size() const { return in[0] * in[1] * in[2]; }
  std::size_t out_size() const { return out[0] * out[1] * out[2]; }
  std::size_t k_size() const { return k[0] * k[1] * k[2]; }
};

/// Reads strides, dilations, pads and auto_pad for both ops; for ConvTranspose also
/// output_padding and output_shape. Sets g.out.
void geometry_3d(const kernel_context& c, geometry3& g, bool transpose) {
  const auto strides = c.n.attr_ints("strides");
  const auto dilations = c.n.attr_ints("dilations");
  const auto pads = c.n.attr_ints("pads");
  const auto out_pad = c.n.attr_ints("output_padding");
  const auto out_shape = c.n.attr_ints("output_shape");
  if ((!strides.empty() && strides.size() != 3) || (!dilations.empty() && dilations.size() != 3) ||
      (!pads.empty() && pads.size() != 6) || (!out_pad.empty() && out_pad.size() != 3)) {
    c.fail("quark.onnx.shape",
           "strides, dilations, pads or output_padding have the wrong length "
           "for a 3-D convolution");
  }
  if (!out_shape.empty() && out_shape.size() != 3 && out_shape.size() != 5)
    c.fail("quark.onnx.shape", "output_shape needs 3 (or 5) values for a 3-D convolution");
  const std::string auto_pad = c.n.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
      auto_pad != "SAME_LOWER") {
    c.fail("quark.onnx.runtime", "unknown auto_pad \"" + auto_pad + "\"");
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const std::int64_t si = strides.empty() ? 1 : strides[i];
    const std::int64_t di = dilations.empty() ? 1 : dilations[i];
    if (si < 1 || di < 1)
      c.fail("quark.onnx.shape", "strides and dilations must be positive");
    if (si > max_extent || di > max_extent) {
      c.fail("quark.onnx.shape", "strides and dilations must be at most 2^31, got " +
                                     std::to_string(si) + " and " + std::to_string(di));
    }
    g.s[i] = to_size(si);
    g.d[i] = to_size(di);
    g.pb[i] = pads.empty() ? 0 : pads[i];
    g.pe[i] = pads.empty() ? 0 : pads[i + 3];
    if (g.pb[i] < 0 || g.pe[i] < 0)
      c.fail("quark.onnx.shape", "negative pads are not supported");
    if (g.pb[i] > max_extent || g.pe[i] > max_extent)
      c.fail("quark.onnx.shape", "pads must be at most 2^31");
    const auto ek = to_i64((g.k[i] - 1) * g.d[i] + 1);
    const auto in = to_i64(g.in[i]);
    if (!transpose) {
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        same_pads(auto_pad, g.in[i], g.s[i], to_size(ek), g.pb[i], g.pe[i]);
      } else if (auto_pad == "VALID") {
        g.pb[i] = g.pe[i] = 0;
      }
      const std::int64_t span = in + g.pb[i] + g.pe[i] - ek;
      if (span < 0)
        c.fail("quark.onnx.shape", "kernel larger than the padded input");
      g.out[i] = to_size(span) / g.s[i] + 1;
      continue;
    }
    const std::int64_t op = out_pad.empty() ? 0 : out_pad[i];
    const std::int64_t full = to_i64(g.s[i]) * (in - 1) + op + ek;
    // Pads to remove from the full output: a negative total (a larger requested output) adds
    // rows at the end; SAME_UPPER puts the odd one at the end, SAME_LOWER at the beginning.
    auto split_total = [&](std::int64_t total) {
      if (total < 0) {
        g.pb[i] = 0;
        g.pe[i] = total;
      } else if (auto_pad == "SAME_UPPER") {
        g.pb[i] = total / 2;
        g.pe[i] = total - g.pb[i];
      } else {
        g.pe[i] = total / 2;
        g.pb[i] = total - g.pe[i];
      }
    };
    if (!out_shape.empty()) {
      split_total(full - out_shape[out_shape.size() - 3 + i]);
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      split_total(full - in * to_i64(g.s[i]));
    } else if (auto_pad == "VALID") {
      g.pb[i] = g.pe[i] = 0;
    }
    const std::int64_t o = full - g.pb[i] - g.pe[i];
    if (o <= 0)
      c.fail("quark.onnx.shape", "empty output");
    g.out[i] = to_size(o);
  }
}

/// Columns [p0, p1) (output positions) of the 3-D im2col matrix, row = (ci, kd, ky, kx).
void im2col_3d(const geometry3& g, const float* x, std::size_t kdim, std::size_t p0, std::size_t p1,
               float* col) {
  const std::size_t ld = p1 - p0;
  for (std::size_t r = 0; r < kdim; ++r) {
    const std::size_t kx = r % g.k[2];
    const std::size_t ky = (r / g.k[2]) % g.k[1];
    const std::size_t kz = (r / (g.k[2] * g.k[1])) % g.k[0];
    const std::size_t ci = r / g.k_size();
    const float* vol = x + ci * g.in_size();
    float* dst = col + r * ld;
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t ox = p % g.out[2];
      const std::size_t oy = (p / g.out[2]) % g.out[1];
      const std::size_t oz = p / (g.out[2] * g.out[1]);
      const std::int64_t iz = to_i64(oz * g.s[0] + kz * g.d[0]) - g.pb[0];
      const std::int64_t iy = to_i64(oy * g.s[1] + ky * g.d[1]) - g.pb[1];
      const std::int64_t ix = to_i64(ox * g.s[2] + kx * g.d[2]) - g.pb[2];
      const bool inside = iz >= 0 && iz < to_i64(g.in[0]) && iy >= 0 && iy < to_i64(g.in[1]) &&
                          ix >= 0 && ix < to_i64(g.in[2]);
      dst[p - p0] =
          inside ? vol[(to_size(iz) * g.in[1] + to_size(iy)) * g.in[2] + to_size(ix)] : 0.0f;
    }
  }
}

/// Conv and ConvTranspose on [N, C, D, H, W] inputs.
void conv_3d(kernel_context& c, bool transpose) {
  const tensor& x = float_input(c, 0);
  const tensor& w = float_input(c, 1);
  if (w.rank() != 5) {
    c.fail("quark.onnx.shape",
           "weight " + shape_string(w.shape()) + " must have rank 5 for a 3-D input");
  }
  geometry3 g;
  g.n = to_size(x.shape()[0]);
  g.c = to_size(x.shape()[1]);
  g.group = to_size(c.n.attr_i("group", 1));
  for (std::size_t i = 0; i < 3; ++i) {
    g.in[i] = to_size(x.shape()[2 + i]);
    g.k[i] = to_size(w.shape()[2 + i]);
    if (g.k[i] == 0)
      c.fail("quark.onnx.shape", "weight " + shape_string(w.shape()) + " has an empty kernel");
  }
  check_kernel_shape(c, w, 3);
  if (g.group == 0 || g.c % g.group != 0) {
    c.fail("quark.onnx.shape", "input channels " + std::to_string(g.c) + " and group " +
                                   std::to_string(g.group) + " disagree");
  }
  if (transpose) {
    if (to_size(w.shape()[0]) != g.c) {
      c.fail("quark.onnx.shape", "weight " + shape_string(w.shape()) + " does not match input " +
                                     shape_string(x.shape()));
    }
    g.m = to_size(w.shape()[1]) * g.group;
  } else {
    g.m = to_size(w.shape()[0]);
    if (g.m % g.group != 0 || to_size(w.shape()[1]) * g.group != g.c) {
      c.fail("quark.onnx.shape", "input channels " + std::to_string(g.c) + ", weight " +
                                     shape_string(w.shape()) + " and group " +
                                     std::to_string(g.group) + " disagree");
    }
  }
  geometry_3d(c, g, transpose);
  const tensor* b = c.opt(2);
  if (b && b->size() != g.m)
    c.fail("quark.onnx.shape", "bias size differs from output channels");
  const float* pb = b ? float_input(c, 2).data<float>().data() : nullptr;
  shape_t out_shape{to_i64(g.n), to_i64(g.m)};
  for (std::size_t i = 0; i < 3; ++i)
    out_shape.push_back(to_i64(g.out[i]));
  check_output_elements(c, out_shape);
  const std::size_t cg = g.c / g.group;
  const std::size_t mg = g.m / g.group;
  const std::size_t npix = g.out_size();
  const float* px = x.data<float>().data();
  const float* pw = w.data<float>().data();
  if (!transpose) {
    tensor out(dtype_id::float32, out_shape, uninitialized);
    float* py = out.data<float>().data();
    const std::size_t kdim = cg * g.k_size();
    const std::size_t block = std::clamp<std::size_t>((std::size_t{1} << 17) / kdim, 64, 4096);
    for (std::size_t img = 0; img < g.n; ++img) {
      for (std::size_t gi = 0; gi < g.group; ++gi) {
        const float* xg = px + (img * g.c + gi * cg) * g.in_size();
        const float* wg = pw + gi * mg * kdim;
        float* yg = py + (img * g.m + gi * mg) * npix;
        for_each_chunk(c.pool, npix, block, [&](std::size_t, std::size_t p0, std::size_t p1) {
          thread_local std::vector<float> col;
          col.resize(kdim * (p1 - p0));
          im2col_3d(g, xg, kdim, p0, p1, col.data());
          gemm(nullptr, false, false, mg, p1 - p0, kdim, 1.0f, wg, kdim, col.data(), p1 - p0, 0.0f,
               yg + p0, npix);
          if (pb)
            add_bias(pb + gi * mg, 0, mg, p0, p1, yg, npix);
        });
      }
    }
    c.out(0) = std::move(out);
    return;
  }
  // ConvTranspose: col[kdim, in] = W_g^T x_g, then each column entry is added at its output
  // position (col2im), one output channel per task.
  tensor out(dtype_id::float32, out_shape);
  float* py = out.data<float>().data();
  const std::size_t kdim = mg * g.k_size();
  const std::size_t nin = g.in_size();
  std::vector<float> col(kdim * nin);
  for (std::size_t img = 0; img < g.n; ++img) {
    for (std::size_t gi = 0; gi < g.group; ++gi) {
      const float* xg = px + (img * g.c + gi * cg) * nin;
      const float* wg = pw + gi * cg * kdim;  // [cg, kdim]
      float* yg = py + (img * g.m + gi * mg) * npix;
      gemm(&c.pool, true, false, kdim, nin, cg, 1.0f, wg, kdim, xg, nin, 0.0f, col.data(), nin);
      c.pool.parallel_for(mg, 1, [&](std::size_t o0, std::size_t o1) {
        for (std::size_t oc = o0; oc < o1; ++oc) {
          float* vol = yg + oc * npix;
          std::fill(vol, vol + npix, pb ? pb[gi * mg + oc] : 0.0f);
          for (std::size_t kk = 0; kk < g.k_size(); ++kk) {
            const std::size_t kx = kk % g.k[2];
            const std::size_t ky = (kk / g.k[2]) % g.k[1];
            const std::size_t kz = kk / (g.k[2] * g.k[1]);
            const float* src = col.data() + (oc * g.k_size() + kk) * nin;
            for (std::size_t i = 0; i < nin; ++i) {
              const std::size_t ix = i % g.in[2];
              const std::size_t iy = (i / g.in[2]) % g.in[1];
              const std::size_t iz = i / (g.in[2] * g.in[1]);
              const std::int64_t oz = to_i64(iz * g.s[0] + kz * g.d[0]) - g.pb[0];
              const std::int64_t oy = to_i64(iy * g.s[1] + ky * g.d[1]) - g.pb[1];
              const std::int64_t ox = to_i64(ix * g.s[2] + kx * g.d[2]) - g.pb[2];
              if (oz >= 0 && oz < to_i64(g.out[0]) && oy >= 0 && oy < to_i64(g.out[1]) && ox >= 0 &&
                  ox < to_i64(g.out[2])) {
                vol[(to_size(oz) * g.out[1] + to_size(oy)) * g.out[2] + to_size(ox)] += src[i];
              }
            }
          }
        }
      });
    }
  }
  c.out(0) = std::move(out);
}

}  // namespace

void register_conv(registry_map& r) {
  r["Conv"] = k_conv;
  r["ConvTranspose"] = k_conv_transpose;
}

}  // namespace quark::onnx::rt
