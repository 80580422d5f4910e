// SPDX-License-Identifier: MIT
// quark_quantize: quantizes an ONNX model with a preset or a JSON configuration, calibrating on a
// folder of .npy/.npz samples or on seeded random data, and writes the result atomically.
//
//     quark_quantize det.onnx det_a8w8.onnx --preset A8W8 --random --shape x:1x3x640x640 --eval 4
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
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

/// The check of a count option: decimal digits only, in [lo, hi]. (CLI11 would read "-3" or a
/// number beyond 64 bits into an unsigned option wrapped around.) `hint` follows the message
/// for a value below lo.
CLI::Validator count_check(std::string hint, std::uint64_t lo = 1,
                           std::uint64_t hi = std::numeric_limits<std::uint32_t>::max()) {
  auto check = [=](const std::string& v) -> std::string {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
      return "expected a whole number, got '" + v + "'";
    errno = 0;
    const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);  // ERANGE beyond 64 bits
    if (errno == ERANGE || x > hi)
      return "'" + v + "' is too large (at most " + std::to_string(hi) + ")";
    if (x < lo)
      return "must be at least " + std::to_string(lo) + (hint.empty() ? "" : " (" + hint + ")");
    return {};
  };
  return {check, lo > 0 ? "whole number >= " + std::to_string(lo) : "whole number"};
}

/// The command line, as parsed.
struct cli_args {
  std::string in, out, config_file, preset, calib_dir, eval_dir, tensors_json;
  bool random = false, quiet = false, no_summary = false, print_config = false;
  std::vector<std::string> shapes, ranges, sets;
  std::size_t samples = 0, eval = 0, infer_only = 0;
  std::uint64_t seed = 0;
  bool seed_given = false;
};

void add_options(CLI::App& app, cli_args& a) {
  // MODEL and OUT are required unless --print-config (checked in run()).
  app.add_option("MODEL", a.in, "float model (.onnx)");
  app.add_option("OUT", a.out, "quantized model to write (never the input; written atomically)");
  auto* cfg_opt =
      app.add_option("--config", a.config_file, "JSON configuration file (docs/config.md)");
  app.add_option("--preset", a.preset, "preset name: XINT8, VINT8, A8W8, A16W8, S8S8, U8S8, ...")
      ->excludes(cfg_opt);
  auto* data_opt = app.add_option("--calib-data", a.calib_dir, "folder of calibration samples");
  app.add_flag("--random", a.random, "calibrate on seeded random data (UseRandomData)")
      ->excludes(data_opt);
  app.add_option("--shape", a.shapes,
                 "random data shape of an input, NAME:1x3x224x224 (repeatable)");
  app.add_option("--range", a.ranges, "random data range of an input, NAME:LOW,HIGH (default 0,1)");
  app.add_option("--samples", a.samples,
                 "calibration samples to use (CalibDataSize; random: count)")
      ->check(count_check("leave --samples out to use every sample"));
  app.add_option("--seed", a.seed, "random data seed")
      ->check(count_check({}, 0, std::numeric_limits<std::uint64_t>::max()))
      ->each([&a](const std::string&) { a.seed_given = true; });
  app.add_option("--eval", a.eval,
                 "compare with the float model on N calibration samples and print metrics")
      ->check(count_check("leave --eval out not to evaluate"));
  app.add_option("--eval-data", a.eval_dir,
                 "compare with the float model on the samples of this folder instead (EvalMetrics "
                 "+ EvalDataReader; --eval N limits them to N)");
  app.add_option(
      "--tensors-json", a.tensors_json,
      "write per-tensor ranges and scales as JSON to this file ('-' : OUT.tensors.json)");
  app.add_option("--set", a.sets,
                 "set an extra option on top of the preset or file, KEY=VALUE with VALUE in "
                 "JSON (true, 0.5, [\"Conv\"], {...}; a bare word is a string) (repeatable)");
  app.add_option("--infer-only", a.infer_only,
                 "benchmark: run N plain inferences of MODEL on the calibration data, print the "
                 "time and exit (OUT is not written)")
      ->check(count_check({}));
  app.add_flag_callback(
      "--list-presets",
      [] {
        // Every preset --preset accepts, with its aliases and what it sets (docs/config.md
        // lists every field).
        for (const auto& p : quark::onnx::presets()) {
          std::string name(p.name);
          for (auto alias : p.aliases)
            name += " (" + std::string(alias) + ")";
          std::printf("%-28s %.*s\n", name.c_str(), static_cast<int>(p.description.size()),
                      p.description.data());
        }
        throw CLI::Success();
      },
      "print every preset name with what it does, and exit");
  app.add_flag("--print-config", a.print_config,
               "print the configuration (the preset or file with --set and the data options "
               "applied) as JSON, the file format --config reads, and exit; MODEL and OUT are "
               "not needed");
  app.add_flag("--no-summary", a.no_summary, "do not print the summary table");
  app.add_flag("-q,--quiet", a.quiet, "print errors only");
}

/// `text` as a JSON string literal.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// --set KEY=VALUE: VALUE read as JSON through the configuration's own parser (so a wrong type
/// or an unknown key is the same named error a file gives); text that is not JSON at all is a
/// string (--set MinMSEModeFloatScale=HistCenter).
void apply_set(qo::qconfig& cfg, const std::string& kv) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw std::invalid_argument("--set '" + kv +
                                "': expected KEY=VALUE (VALUE in JSON: true, 0.5, \"text\", "
                                "[...], {...})");
  }
  const std::string key = kv.substr(0, eq), text = kv.substr(eq + 1);
  auto parse = [&](const std::string& value) {
    return qo::config_from_json("{\"extra_options\": {" + json_string(key) + ": " + value + "}}");
  };
  qo::qconfig one;
  try {
    one = parse(text);
  } catch (const quark::config_error& e) {
    if (std::string_view(e.id()) != "quark.config.json")
      throw;
    one = parse(json_string(text));  // not JSON: the text itself
  }
  const qo::option_value* v = one.extra_options.find(key);
  if (v == nullptr)
    throw std::invalid_argument("--set '" + kv + "': no value for " + key);
  cfg.extra_options.set(key, *v);
}

/// The configuration: the file or preset, with the options the command line sets on top,
/// validated. A validation error the file's own content causes names the file (its parse errors
/// already do); one only the command-line options cause does not.
qo::qconfig make_config(const cli_args& a) {
  qo::qconfig cfg = !a.config_file.empty()
                        ? qo::load_config(a.config_file)
                        : qo::get_default_config(a.preset.empty() ? "A8W8" : a.preset);
  if (!a.shapes.empty()) {
    auto v = quark::onnx::option_value::object();
    for (const auto& s : a.shapes) {
      auto [name, dims] = parse_shape(s);
      quark::onnx::option_value::array_type arr;
      for (auto d : dims)
        arr.emplace_back(static_cast<long long>(d));
      v.set(name, quark::onnx::option_value(std::move(arr)));
    }
    cfg.extra_options.set("RandomDataReaderInputShape", v);
  }
  if (!a.ranges.empty()) {
    auto v = quark::onnx::option_value::object();
    for (const auto& s : a.ranges) {
      auto [name, r] = parse_range(s);
      v.set(name, quark::onnx::option_value::array({r.first, r.second}));
    }
    cfg.extra_options.set("RandomDataReaderInputDataRange", v);
  }
  if (a.samples > 0)
    cfg.extra_options.set("CalibDataSize", static_cast<long long>(a.samples));
  if (a.random)
    cfg.extra_options.set("UseRandomData", true);
  for (const auto& kv : a.sets)
    apply_set(cfg, kv);
  if (!a.eval_dir.empty()) {
    std::error_code dir_ec;
    if (!fs::is_directory(a.eval_dir, dir_ec))
      throw std::runtime_error("--eval-data '" + a.eval_dir + "' is not a folder");
    cfg.extra_options.set("EvalMetrics", true);
    cfg.extra_options.set("EvalDataReader", a.eval_dir);
  }
  try {
    cfg.validate();
  } catch (const quark::config_error& e) {
    if (a.config_file.empty())
      throw;
    try {
      qo::load_config(a.config_file).validate();  // the file alone (read again: errors only)
    } catch (const quark::config_error& own) {
      if (own.message() == e.message())
        throw quark::config_error(e.id(), a.config_file + ": " + e.message());
    }
    throw;
  }
  return cfg;
}

/// --tensors-json's file, checked before quantizing: a path that cannot be written must not fail
/// the run after the model is written (an error with the model left behind). "" when not asked.
std::string tensors_json_path(const cli_args& a) {
  if (a.tensors_json.empty())
    return {};
  const std::string path = a.tensors_json == "-" ? a.out + ".tensors.json" : a.tensors_json;
  std::error_code ec;
  const fs::path tp(path);
  const fs::path dir = tp.has_parent_path() ? tp.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error("--tensors-json '" + path + "': no folder '" + dir.string() + "'");
  if (fs::is_directory(tp, ec))
    throw std::runtime_error("--tensors-json '" + path + "' is a folder");
  if (fs::equivalent(tp, fs::path(a.in), ec) || tp == fs::path(a.out))
    throw std::runtime_error("--tensors-json '" + path + "' is the model itself");
  return path;
}

/// Writes the report's per-tensor JSON beside its place and renames it (no half-written file);
/// if that still fails (a full disk), the model goes too: an error leaves no output behind.
void write_tensors_json(const qo::quantize_report& r, const std::string& path,
                        const std::string& model_out) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::error_code wec;
  {
    std::ofstream f(tmp);
    f << qo::tensors_json(r);
    f.close();
    if (!f)
      wec = std::make_error_code(std::errc::io_error);
  }
  if (!wec)
    fs::rename(tmp, path, wec);
  if (wec) {
    fs::remove(tmp, wec);
    fs::remove(model_out, wec);
    throw std::runtime_error("cannot write '" + path + "' (" + model_out +
                             " removed: an error leaves no output)");
  }
}

/// The metric lines of seed 002 (quark_evaluate prints the same ones).
void print_eval(const qo::eval_report& e) {
  std::printf("Evaluation against the float model (output 0, %zu samples):\n", e.samples);
  std::printf("Mean cos similarity: %.4f\nMin cos similarity: %.4f\n", e.cosine_mean, e.cosine_min);
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

/// Quantizes as the command line says; returns the exit status.
int run(cli_args a) {
  if (a.print_config) {
    std::cout << qo::to_json(make_config(a)) << '\n';
    return 0;
  }
  if (a.in.empty() || a.out.empty())
    throw std::runtime_error("MODEL and OUT are required (see --help)");
  std::error_code ec;
  if (!fs::exists(a.in, ec))
    throw std::runtime_error("model '" + a.in + "' does not exist");
  if (fs::exists(a.out, ec) && fs::equivalent(a.in, a.out, ec))
    throw std::runtime_error("OUT '" + a.out + "' is the input model; refusing to overwrite it");
  const qo::qconfig cfg = make_config(a);
  // CryptoMode (seed 000): every message is blocked (progress bar, summary, metrics, notes;
  // errors are still reported) and no side file is written.
  const qo::option_map eff = cfg.effective_options();
  const qo::option_value* crypto_v = eff.find("CryptoMode");
  if (crypto_v != nullptr && crypto_v->is_bool() && crypto_v->as_bool()) {
    if (!a.tensors_json.empty()) {
      throw std::runtime_error(
          "--tensors-json writes the tensors' ranges and scales to a side file, which "
          "CryptoMode forbids");
    }
    if (a.infer_only > 0)
      throw std::runtime_error("--infer-only prints timings; CryptoMode blocks every message");
    a.quiet = true;
  }
  const std::string tensors_path = tensors_json_path(a);
  std::unique_ptr<qo::calibration_data_reader> reader;
  if (!a.calib_dir.empty()) {
    reader = std::make_unique<qo::npy_folder_reader>(a.calib_dir);
  } else {
    reader = qo::default_reader(a.in, cfg,
                                a.seed_given ? std::optional<std::uint64_t>(a.seed) : std::nullopt);
  }
  if (a.infer_only > 0) {
    const double sec = qo::time_inference(a.in, *reader, a.infer_only);
    std::printf("%zu inferences: %.3f s\n", a.infer_only, sec);
    return 0;
  }
  qo::quantize_run_options run_opts;
  run_opts.eval_samples = a.eval;
  const bool tty = isatty(STDOUT_FILENO) != 0 && !a.quiet;
  if (tty)
    run_opts.progress = progress_bar;
  const auto t0 = std::chrono::steady_clock::now();
  const qo::quantize_report r = qo::quantize_model(a.in, a.out, cfg, *reader, run_opts);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty)
    std::printf("\n");
  if (!a.quiet && !a.no_summary)
    std::cout << qo::summary_table(r);
  if (!tensors_path.empty()) {
    write_tensors_json(r, tensors_path, a.out);
    if (!a.quiet)
      std::cout << "Tensor ranges and scales: " << tensors_path << '\n';
  }
  if (r.eval && !a.quiet)
    print_eval(*r.eval);
  if (!a.quiet)
    std::printf("Wrote %s (%.3f s)\n", a.out.c_str(), sec);
  return 0;
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
  cli_args args;
  add_options(app, args);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(std::move(args));
  } catch (const std::exception& e) {
    std::cerr << "quark_quantize: error: " << e.what() << '\n';
    return 1;
  }
}
