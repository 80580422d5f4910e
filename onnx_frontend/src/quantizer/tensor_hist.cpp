// SPDX-License-Identifier: MIT
// SaveTensorHistFig (see tensor_hist.hpp).
#include "quantizer/tensor_hist.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include <quark/onnx/error.hpp>

#include "io/atomic_file.hpp"

namespace quark::onnx::qz {

namespace {

const char* method_name(act_method m) {
  switch (m) {
    case act_method::percentile:
      return "Percentile";
    case act_method::entropy:
      return "Entropy";
    case act_method::distribution:
      return "Distribution";
    case act_method::layerwise_percentile:
      return "LayerwisePercentile";
    case act_method::pof2_minmse:
    case act_method::float_minmse:
      return "MinMSE";
    case act_method::pof2_minmax:
      return "NonOverflow";
    case act_method::none:
      return "None";
    case act_method::minmax:
      break;
  }
  return "MinMax";
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

/// A bar plot of the histogram: one bar per non-empty bin (height linear in the count), the
/// chosen range as red dashed lines, the observed extrema as grey lines.
std::string svg_plot(const std::string& tensor, const char* method, const tensor_facts& f) {
  constexpr double width = 800, height = 420, left = 60, right = 20, top = 40, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  double lo = f.hist_edges.front(), hi = f.hist_edges.back();
  lo = std::min({lo, static_cast<double>(f.rmin)});
  hi = std::max({hi, static_cast<double>(f.rmax)});
  if (!(hi > lo))
    hi = lo + 1.0;
  const std::uint64_t peak =
      std::max<std::uint64_t>(1, *std::max_element(f.hist_counts.begin(), f.hist_counts.end()));
  auto x_of = [&](double v) { return left + (v - lo) / (hi - lo) * plot_w; };
  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
       num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\">\n";
  s += "<title>" + xml_escape(tensor) + "</title>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(width / 2) +
       "\" y=\"24\" text-anchor=\"middle\" font-family=\"sans-serif\" "
       "font-size=\"15\">" +
       xml_escape(tensor) + " (" + method + (f.hist_absolute ? ", histogram of |x|" : "") +
       ")</text>\n";
  s += "<g fill=\"steelblue\">\n";
  for (std::size_t i = 0; i < f.hist_counts.size(); ++i) {
    if (f.hist_counts[i] == 0)
      continue;
    const double x0 = x_of(f.hist_edges[i]);
    const double x1 = x_of(f.hist_edges[i + 1]);
    const double h = static_cast<double>(f.hist_counts[i]) / static_cast<double>(peak) * plot_h;
    s += "<rect x=\"" + num(x0) + "\" y=\"" + num(top + plot_h - h) + "\" width=\"" +
         num(std::max(x1 - x0, 0.5)) + "\" height=\"" + num(h) + "\"/>\n";
  }
  s += "</g>\n";
  auto vline = [&](double v, const char* colour, const char* dash) {
    s += "<line x1=\"" + num(x_of(v)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x_of(v)) +
         "\" y2=\"" + num(top + plot_h) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"" +
         (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : std::string()) + "/>\n";
  };
  vline(static_cast<double>(f.data_min), "grey", nullptr);
  vline(static_cast<double>(f.data_max), "grey", nullptr);
  vline(static_cast<double>(f.rmin), "red", "6,4");
  vline(static_cast<double>(f.rmax), "red", "6,4");
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top + plot_h) + "\" x2=\"" +
       num(left + plot_w) + "\" y2=\"" + num(top + plot_h) + "\" stroke=\"black\"/>\n";
  s += "<g font-family=\"sans-serif\" font-size=\"12\">\n";
  s +=
      "<text x=\"" + num(left) + "\" y=\"" + num(top + plot_h + 16) + "\">" + num(lo) + "</text>\n";
  s += "<text x=\"" + num(left + plot_w) + "\" y=\"" + num(top + plot_h + 16) +
       "\" text-anchor=\"end\">" + num(hi) + "</text>\n";
  s += "<text x=\"" + num(width / 2) + "\" y=\"" + num(height - 14) +
       "\" text-anchor=\"middle\">data min " + num(static_cast<double>(f.data_min)) + ", max " +
       num(static_cast<double>(f.data_max)) + " (grey); chosen range [" +
       num(static_cast<double>(f.rmin)) + ", " + num(static_cast<double>(f.rmax)) +
       "] (red); peak count " + std::to_string(peak) + "</text>\n";
  s += "</g>\n</svg>\n";
  return s;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  try {
    detail::atomic_file file(path);
    file.write(text);
    file.finish();
    file.commit();
  } catch (const quark::error& e) {
    throw frontend_error("quark.calib.hist_file",
                         "SaveTensorHistFig: cannot write '" + path.string() + "': " + e.what());
  }
}

}  // namespace

std::string hist_file_stem(const std::string& tensor) {
  std::string s = tensor;
  for (char& c : s) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-';
    if (!keep)
      c = '_';
  }
  return s.empty() ? std::string("_") : s;
}

tensor_hist_result write_tensor_hists(const std::filesystem::path& dir, const calib_output& cal,
                                      const std::map<std::string, calib_request>& requests) {
  tensor_hist_result r;
  bool dir_made = false;
  std::set<std::string> stems;
  for (const auto& [name, f] : cal.tensors) {
    auto req = requests.find(name);
    if (req == requests.end() || !f.calibrated)
      continue;
    if (f.hist_counts.empty() || f.hist_edges.size() != f.hist_counts.size() + 1) {
      r.without_histogram.push_back(name);
      continue;
    }
    if (!dir_made) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec || !std::filesystem::is_directory(dir)) {
        throw frontend_error("quark.calib.hist_file",
                             "SaveTensorHistFig: cannot create the folder '" + dir.string() + "'" +
                                 (ec ? ": " + ec.message() : std::string()));
      }
      dir_made = true;
    }
    std::string stem = hist_file_stem(name);
    for (int k = 2; stems.contains(stem); ++k)
      stem = hist_file_stem(name) + "_" + std::to_string(k);
    stems.insert(stem);
    const char* method = method_name(req->second.method);
    std::uint64_t total = 0;
    for (const std::uint64_t c : f.hist_counts)
      total += c;
    nlohmann::json j;
    j["format"] = "quark-cpp tensor histogram";
    j["version"] = 1;
    j["tensor"] = name;
    j["method"] = method;
    j["histogram_of"] = f.hist_absolute ? "abs(x)" : "x";
    j["samples"] = cal.samples;
    j["bins"] = f.hist_counts.size();
    j["total"] = total;
    j["data_range"] = {{"min", f.data_min}, {"max", f.data_max}};
    j["range"] = {{"min", f.rmin}, {"max", f.rmax}};
    j["edges"] = f.hist_edges;
    j["counts"] = f.hist_counts;
    write_file(dir / (stem + ".json"), j.dump(1) + "\n");
    write_file(dir / (stem + ".svg"), svg_plot(name, method, f));
    ++r.written;
  }
  return r;
}

}  // namespace quark::onnx::qz
