// SPDX-License-Identifier: MIT
// quark_evaluate: compares the outputs of a float model (baseline folder) with those of its
// quantized version (quantized folder), file by file (.npy files with the same name), and prints
// the mean / min / max lines of Quark's evaluate tool: cosine similarity, L2 distance, PSNR and
// SSIM (standard SSIM: Gaussian 11x11 window over the last two dims; quark/metrics.hpp).
//
//     quark_evaluate --baseline output_fp32 --quantized output_int8
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <quark/metrics.hpp>
#include <quark/onnx/calib_data.hpp>

namespace fs = std::filesystem;

namespace {

/// The values of `t` as float32. A NaN or an infinity (also a value beyond float32's range,
/// such as a float64 1e300) has no metric: an error naming the file and the element.
std::vector<float> as_floats(const quark::onnx::tensor& t, const fs::path& p) {
  std::vector<float> out(t.size());
  quark::visit_dtype(t.type(), [&](auto id) {
    using T = typename decltype(id)::type;
    if constexpr (std::is_arithmetic_v<T>) {
      const auto d = t.data<T>();
      for (std::size_t i = 0; i < d.size(); ++i) {
        const auto v = static_cast<double>(d[i]);
        if (!std::isfinite(v) ||
            std::abs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
          throw std::runtime_error("'" + p.string() + "': element " + std::to_string(i) + " is " +
                                   (std::isnan(v)   ? std::string("NaN")
                                    : std::isinf(v) ? std::string("infinite")
                                                    : "beyond float32's range") +
                                   ": the metrics need finite values");
        }
        out[i] = static_cast<float>(v);
      }
    } else {
      throw std::runtime_error("'" + p.string() + "': unsupported element type " +
                               std::string(quark::dtype_name(t.type())));
    }
  });
  return out;
}

std::string shape_text(const quark::onnx::shape_t& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i)
      r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Compare quantized model outputs with float baseline outputs (.npy files of the same name)\n"
      "and print cosine similarity, L2 distance, PSNR and SSIM (mean / min / max)."};
  std::string baseline, quantized;
  double range = 255.0;
  bool per_file = false;
  app.add_option("--baseline,--baseline_results_folder", baseline, "folder of float outputs (.npy)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--quantized,--quantized_results_folder", quantized,
                 "folder of quantized outputs (.npy)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--ssim-range", range, "SSIM dynamic range L (C1 = (0.01 L)^2, C2 = (0.03 L)^2)")
      ->capture_default_str()
      ->check(
          [](const std::string& v) {
            // L = 0 makes C1 = C2 = 0, and SSIM 0/0 on constant windows; a negative, NaN or
            // infinite L gives no meaningful SSIM either.
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            return end != v.c_str() && *end == '\0' && std::isfinite(x) && x > 0.0
                       ? std::string()
                       : "expected a finite number > 0, got '" + v + "'";
          },
          "finite > 0");
  app.add_flag("--per-file", per_file, "also print the metrics of every file");
  CLI11_PARSE(app, argc, argv);
  try {
    std::set<fs::path> names;
    for (const auto& e : fs::directory_iterator(baseline)) {
      if (e.path().extension() == ".npy")
        names.insert(e.path().filename());
    }
    quark::metrics::summary cos, l2, psnr, ssim;
    std::size_t skipped = 0;
    for (const auto& n : names) {
      const fs::path qp = fs::path(quantized) / n;
      if (!fs::exists(qp)) {
        ++skipped;
        continue;
      }
      const auto a = quark::onnx::read_npy(fs::path(baseline) / n);
      const auto b = quark::onnx::read_npy(qp);
      if (a.shape() != b.shape()) {
        std::cerr << "quark_evaluate: error: '" << n.string() << "': shapes differ ("
                  << shape_text(a.shape()) << " in the baseline, " << shape_text(b.shape())
                  << " quantized)\n";
        return 1;
      }
      if (a.size() == 0) {
        std::cerr << "quark_evaluate: error: '" << n.string() << "' is empty (shape "
                  << shape_text(a.shape()) << "): nothing to compare\n";
        return 1;
      }
      const auto x = as_floats(a, fs::path(baseline) / n);
      const auto y = as_floats(b, qp);
      std::size_t h = 1, w = x.size();
      if (a.rank() >= 2) {
        h = static_cast<std::size_t>(a.shape()[a.rank() - 2]);
        w = static_cast<std::size_t>(a.shape()[a.rank() - 1]);
      }
      const std::size_t planes = h * w == 0 ? 0 : x.size() / (h * w);
      const double c = quark::metrics::cosine(x, y);
      const double d = quark::metrics::l2_distance(x, y);
      const double p = quark::metrics::psnr(x, y);
      const double s =
          planes == 0 ? 1.0 : quark::metrics::ssim(x, y, planes, h, w, {.dynamic_range = range});
      cos.add(c);
      l2.add(d);
      psnr.add(p);
      ssim.add(s);
      if (per_file) {
        std::printf("%s: cos %.6f  l2 %.4f  psnr %.2f  ssim %.6f\n", n.string().c_str(), c, d, p,
                    s);
      }
    }
    if (cos.count + cos.undefined == 0) {
      std::cerr << "quark_evaluate: no matching .npy files in '" << baseline << "' and '"
                << quantized << "'\n";
      return 1;
    }
    if (skipped)
      std::cerr << "quark_evaluate: " << skipped << " baseline file(s) have no quantized match\n";
    std::size_t unmatched = 0;  // the other way round: outputs with no baseline
    for (const auto& e : fs::directory_iterator(quantized)) {
      if (e.path().extension() == ".npy" && !names.contains(e.path().filename()))
        ++unmatched;
    }
    if (unmatched)
      std::cerr << "quark_evaluate: " << unmatched << " quantized file(s) have no baseline match\n";
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::printf("Files compared: %zu\n", cos.count + cos.undefined);
    std::printf("Mean cos similarity: %.4f\nMin cos similarity: %.4f\n", cos.mean(),
                cos.count ? cos.min : nan);
    if (cos.undefined) {
      std::printf(
          "(cosine undefined for %zu file(s): an all-zero array; mean and min are over "
          "the others)\n",
          cos.undefined);
    }
    std::printf("Mean l2 distance: %.4g\nMax l2 distance: %.4g\n", l2.mean(), l2.max);
    std::printf("Mean psnr: %.2f\nMin psnr: %.2f\n", psnr.mean(), psnr.min);
    std::printf("Mean ssim: %.4f\nMin ssim: %.4f\n", ssim.mean(), ssim.min);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "quark_evaluate: error: " << e.what() << '\n';
    return 1;
  }
}
