// SPDX-License-Identifier: MIT
// quark_quantize: quantizes an ONNX model with a preset or a JSON configuration, calibrating on a
// folder of .npy/.npz samples or on seeded random data, and writes the result atomically.
//
//     quark_quantize det.onnx det_a8w8.onnx --preset A8W8 --random --shape x:1x3x640x640 --eval 4
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <quark/onnx/config.hpp>
#include <quark/onnx/presets.hpp>
#include <quark/onnx/quantizer.hpp>

#include <unistd.h>

namespace fs = std::filesystem;
namespace qo = quark::onnx;

namespace {

/// "name:1x3x224x224" -> (name, dims).
std::pair<std::string, std::vector<std::int64_t>> parse_shape(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw std::invalid_argument("--shape '" + s + "': expected NAME:D1xD2x...");
  }
  std::vector<std::int64_t> dims;
  std::string rest = s.substr(colon + 1);
  std::size_t at = 0;
  while (at <= rest.size()) {
    const auto x = rest.find('x', at);
    const std::string d = rest.substr(at, x == std::string::npos ? std::string::npos : x - at);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(d, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != d.size() || v <= 0)
      throw std::invalid_argument("--shape '" + s + "': bad dimension '" + d + "'");
    dims.push_back(v);
    if (x == std::string::npos)
      break;
    at = x + 1;
  }
  return {s.substr(0, colon), dims};
}

/// "name:lo,hi" -> (name, lo, hi).
std::pair<std::string, std::pair<double, double>> parse_range(const std::string& s) {
  const auto colon = s.rfind(':');
  const auto comma = s.find(',', colon == std::string::npos ? 0 : colon);
  if (colon == std::string::npos || comma == std::string::npos) {
    throw std::invalid_argument("--range '" + s + "': expected NAME:LOW,HIGH");
  }
  auto number = [&](const std::string& text) {
    std::size_t used = 0;
    double v = 0.0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || !std::isfinite(v))
      throw std::invalid_argument("--range '" + s + "': bad number '" + text + "'");
    return v;
  };
  return {s.substr(0, colon),
          {number(s.substr(colon + 1, comma - colon - 1)), number(s.substr(comma + 1))}};
}

void progress_bar(std::size_t done, std::size_t total) {
  constexpr std::size_t width = 30;
  const std::size_t fill = total ? (done * width) / total : width;
  std::printf("\rCalibrating [%s%s] %zu", std::string(fill, '#').c_str(),
              std::string(width - std::min(fill, width), ' ').c_str(), done);
  if (total)
    std::printf("/%zu", total);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Quantize an ONNX model (AMD Quark's ModelQuantizer.quantize_model).\n"
      "Calibration data: --calib-data DIR (one sub-folder per sample with <input>.npy files, one\n"
      ".npz per sample, or loose .npy files for a single-input model) or --random. Dynamic\n"
      "quantization (--preset UINT8_DYNAMIC_QUANT, use_dynamic_quant) and 4-bit MatMul weights\n"
      "(--preset MATMUL_NBITS, UseMatMulNBits) need none.",
      "quark_quantize"};
  std::string in, out, config_file, preset, calib_dir, eval_dir;
  bool random = false, quiet = false, no_summary = false;
  std::vector<std::string> shapes, ranges;
  std::size_t samples = 0, eval = 0;
  std::uint64_t seed = 0;
  bool seed_given = false;
  std::string tensors_json;
  app.add_option("MODEL", in, "float model (.onnx)")->required();
  app.add_option("OUT", out, "quantized model to write (never the input; written atomically)")
      ->required();
  auto* cfg_opt =
      app.add_option("--config", config_file, "JSON configuration file (docs/config.md)");
  app.add_option("--preset", preset, "preset name: XINT8, VINT8, A8W8, A16W8, S8S8, U8S8, ...")
      ->excludes(cfg_opt);
  auto* data_opt = app.add_option("--calib-data", calib_dir, "folder of calibration samples");
  app.add_flag("--random", random, "calibrate on seeded random data (UseRandomData)")
      ->excludes(data_opt);
  app.add_option("--shape", shapes, "random data shape of an input, NAME:1x3x224x224 (repeatable)");
  app.add_option("--range", ranges, "random data range of an input, NAME:LOW,HIGH (default 0,1)");
  app.add_option("--samples", samples, "calibration samples to use (CalibDataSize; random: count)")
      ->check(
          [](const std::string& v) {
            return v.find_first_not_of('0') == std::string::npos
                       ? std::string("must be at least 1 (leave --samples out to use every sample)")
                       : std::string();
          },
          "at least 1");
  app.add_option("--seed", seed, "random data seed")->each([&](const std::string&) {
    seed_given = true;
  });
  app.add_option("--eval", eval,
                 "compare with the float model on N calibration samples and print metrics");
  app.add_option("--eval-data", eval_dir,
                 "compare with the float model on the samples of this folder instead (EvalMetrics "
                 "+ EvalDataReader; --eval N limits them to N)");
  app.add_option(
      "--tensors-json", tensors_json,
      "write per-tensor ranges and scales as JSON to this file ('-' : OUT.tensors.json)");
  std::size_t infer_only = 0;
  app.add_option("--infer-only", infer_only,
                 "benchmark: run N plain inferences of MODEL on the calibration data, print the "
                 "time and exit (OUT is not written)");
  app.add_flag_callback(
      "--list-presets",
      [] {
        // Every preset --preset accepts, with its aliases and what it sets (docs/config.md
        // lists every field).
        for (const auto& p : quark::onnx::presets()) {
          std::string name(p.name);
          for (auto a : p.aliases)
            name += " (" + std::string(a) + ")";
          std::printf("%-28s %.*s\n", name.c_str(), static_cast<int>(p.description.size()),
                      p.description.data());
        }
        throw CLI::Success();
      },
      "print every preset name with what it does, and exit");
  app.add_flag("--no-summary", no_summary, "do not print the summary table");
  app.add_flag("-q,--quiet", quiet, "print errors only");
  CLI11_PARSE(app, argc, argv);

  try {
    std::error_code ec;
    if (!fs::exists(in, ec))
      throw std::runtime_error("model '" + in + "' does not exist");
    if (fs::exists(out, ec) && fs::equivalent(in, out, ec)) {
      throw std::runtime_error("OUT '" + out + "' is the input model; refusing to overwrite it");
    }
    qo::qconfig cfg = !config_file.empty()
                          ? qo::load_config(config_file)
                          : qo::get_default_config(preset.empty() ? "A8W8" : preset);
    if (!shapes.empty()) {
      auto v = quark::onnx::option_value::object();
      for (const auto& s : shapes) {
        auto [name, dims] = parse_shape(s);
        quark::onnx::option_value::array_type a;
        for (auto d : dims)
          a.emplace_back(static_cast<long long>(d));
        v.set(name, quark::onnx::option_value(std::move(a)));
      }
      cfg.extra_options.set("RandomDataReaderInputShape", v);
    }
    if (!ranges.empty()) {
      auto v = quark::onnx::option_value::object();
      for (const auto& s : ranges) {
        auto [name, r] = parse_range(s);
        v.set(name, quark::onnx::option_value::array({r.first, r.second}));
      }
      cfg.extra_options.set("RandomDataReaderInputDataRange", v);
    }
    if (samples > 0)
      cfg.extra_options.set("CalibDataSize", static_cast<long long>(samples));
    if (random)
      cfg.extra_options.set("UseRandomData", true);
    if (!eval_dir.empty()) {
      std::error_code dir_ec;
      if (!fs::is_directory(eval_dir, dir_ec))
        throw std::runtime_error("--eval-data '" + eval_dir + "' is not a folder");
      cfg.extra_options.set("EvalMetrics", true);
      cfg.extra_options.set("EvalDataReader", eval_dir);
    }
    // CryptoMode (seed 000): every message is blocked (progress bar, summary, metrics, notes;
    // errors are still reported) and no side file is written.
    const qo::option_map eff = cfg.effective_options();
    const qo::option_value* crypto_v = eff.find("CryptoMode");
    const bool crypto = crypto_v != nullptr && crypto_v->is_bool() && crypto_v->as_bool();
    if (crypto) {
      if (!tensors_json.empty()) {
        throw std::runtime_error(
            "--tensors-json writes the tensors' ranges and scales to a side file, which "
            "CryptoMode forbids");
      }
      if (infer_only > 0)
        throw std::runtime_error("--infer-only prints timings; CryptoMode blocks every message");
      quiet = true;
    }
    // --tensors-json's file is checked before quantizing: a path that cannot be written must not
    // fail the run after the model is written (an error with the model left behind).
    const std::string tensors_path =
        tensors_json.empty() ? std::string{}
                             : (tensors_json == "-" ? out + ".tensors.json" : tensors_json);
    if (!tensors_path.empty()) {
      std::error_code tec;
      const fs::path tp(tensors_path);
      const fs::path dir = tp.has_parent_path() ? tp.parent_path() : fs::path(".");
      if (!fs::is_directory(dir, tec))
        throw std::runtime_error("--tensors-json '" + tensors_path + "': no folder '" +
                                 dir.string() + "'");
      if (fs::is_directory(tp, tec))
        throw std::runtime_error("--tensors-json '" + tensors_path + "' is a folder");
      if (fs::equivalent(tp, fs::path(in), tec) || tp == fs::path(out))
        throw std::runtime_error("--tensors-json '" + tensors_path + "' is the model itself");
    }
    std::unique_ptr<qo::calibration_data_reader> reader;
    if (!calib_dir.empty()) {
      reader = std::make_unique<qo::npy_folder_reader>(calib_dir);
    } else {
      reader = qo::default_reader(in, cfg,
                                  seed_given ? std::optional<std::uint64_t>(seed) : std::nullopt);
    }
    if (infer_only > 0) {
      const double sec = qo::time_inference(in, *reader, infer_only);
      std::printf("%zu inferences: %.3f s\n", infer_only, sec);
      return 0;
    }
    qo::quantize_run_options run;
    run.eval_samples = eval;
    const bool tty = isatty(STDOUT_FILENO) != 0 && !quiet;
    if (tty)
      run.progress = progress_bar;
    const auto t0 = std::chrono::steady_clock::now();
    const qo::quantize_report r = qo::quantize_model(in, out, cfg, *reader, run);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty)
      std::printf("\n");
    if (!quiet && !no_summary)
      std::cout << qo::summary_table(r);
    if (!tensors_path.empty()) {
      // Written beside its place and renamed (no half-written file); if that still fails (a
      // full disk), the model goes too: an error leaves no output behind.
      const std::string tmp = tensors_path + ".tmp" + std::to_string(::getpid());
      std::error_code wec;
      {
        std::ofstream f(tmp);
        f << qo::tensors_json(r);
        f.close();
        if (!f)
          wec = std::make_error_code(std::errc::io_error);
      }
      if (!wec)
        fs::rename(tmp, tensors_path, wec);
      if (wec) {
        fs::remove(tmp, wec);
        fs::remove(out, wec);
        throw std::runtime_error("cannot write '" + tensors_path + "' (" + out +
                                 " removed: an error leaves no output)");
      }
      if (!quiet)
        std::cout << "Tensor ranges and scales: " << tensors_path << '\n';
    }
    if (r.eval && !quiet) {
      const auto& e = *r.eval;
      std::printf("Evaluation against the float model (output 0, %zu samples):\n", e.samples);
      std::printf("Mean cos similarity: %.4f\nMin cos similarity: %.4f\n", e.cosine_mean,
                  e.cosine_min);
      if (e.cosine_undefined) {
        std::printf(
            "(cosine undefined for %zu of %zu samples: an all-zero output; mean and min "
            "are over the others)\n",
            e.cosine_undefined, e.samples);
      }
      std::printf("Mean l2 distance: %.4g\nMax l2 distance: %.4g\n", e.l2_mean, e.l2_max);
      std::printf("Mean psnr: %.2f\nMin psnr: %.2f\n", e.psnr_mean, e.psnr_min);
      std::printf("Mean ssim: %.4f\nMin ssim: %.4f\n", e.ssim_mean, e.ssim_min);
    }
    if (!quiet)
      std::printf("Wrote %s (%.3f s)\n", out.c_str(), sec);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "quark_quantize: error: " << e.what() << '\n';
    return 1;
  }
}
