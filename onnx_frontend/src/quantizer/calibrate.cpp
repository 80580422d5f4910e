// SPDX-License-Identifier: MIT
// The calibration pass (see calibrate.hpp).
#include "quantizer/calibrate.hpp"

#include <chrono>
#include <memory>
#include <span>
#include <unordered_map>
#include <variant>

#include <quark/calib/distribution_calibrator.hpp>
#include <quark/calib/percentile_calibrator.hpp>
#include <quark/observer/histogram_observer.hpp>
#include <quark/observer/minmax_observer.hpp>
#include <quark/onnx/runtime.hpp>

#include "quantizer/numerics.hpp"

namespace quark::onnx::qz {

namespace {

runtime make_runtime(const std::string& bytes, const std::filesystem::path& base_dir) {
  return runtime::from_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      base_dir);
}

/// Element type of a graph input description (the runtime's or the model's value_info).
template <class V>
dtype_id type_of(const V& v) {
  if constexpr (requires { v.type; }) {
    return v.type;
  } else {
    const auto t = dtype_from_onnx(v.elem_type);
    return t ? *t : dtype_id::undefined;
  }
}

std::vector<input_signature> signatures(const runtime& rt) {
  std::vector<input_signature> out;
  for (const auto& in : rt.inputs())
    out.push_back({in.name, type_of(in), in.shape});
  return out;
}

struct observer_slot {
  calib_request req;
  std::variant<minmax_observer, histogram_observer> obs;
};

observer_slot make_slot(const calib_request& r, std::size_t bins) {
  switch (r.method) {
    case act_method::percentile:
      return {r, histogram_observer({.mode = r.symmetric_range ? histogram_mode::absolute
                                                               : histogram_mode::signed_symmetric,
                                     .num_bins = bins})};
    case act_method::distribution:
      return {r, histogram_observer({.mode = histogram_mode::signed_symmetric, .num_bins = bins})};
    case act_method::pof2_minmse:
      return {r, histogram_observer({.mode = histogram_mode::signed_extend,
                                     .num_bins = bins,
                                     .non_finite = non_finite_policy::to_finite})};
    default:
      return {r, minmax_observer{}};
  }
}

}  // namespace

std::vector<input_signature> model_inputs(const std::string& model_bytes,
                                          const std::filesystem::path& base_dir) {
  return signatures(make_runtime(model_bytes, base_dir));
}

calib_output calibrate(const std::string& model_bytes, const std::filesystem::path& base_dir,
                       const std::map<std::string, calib_request>& requests,
                       calibration_data_reader& reader, const calib_params& params) {
  const runtime rt = make_runtime(model_bytes, base_dir);
  calib_output out;
  out.inputs = signatures(rt);
  std::unordered_map<std::string, observer_slot> slots;
  for (const auto& [name, r] : requests)
    slots.emplace(name, make_slot(r, params.num_bins));
  const std::size_t total = params.max_samples ? *params.max_samples : reader.size().value_or(0);
  bool first = true;
  while (!params.max_samples || out.samples < *params.max_samples) {
    std::optional<calib_sample> s = reader.next();
    if (!s)
      break;
    check_sample(*s, out.inputs, out.samples);
    rt.run(*s, [&](std::string_view name, const tensor& t) {
      if (first) {
        auto& f = out.tensors[std::string(name)];
        f.type = t.type();
        f.shape = t.shape();
      }
      if (t.type() != dtype_id::float32)
        return;
      auto it = slots.find(std::string(name));
      if (it == slots.end())
        return;
      const std::span<const float> x = t.data<float>();
      std::visit([&](auto& o) { o.observe(x); }, it->second.obs);
    });
    first = false;
    ++out.samples;
    if (params.progress)
      params.progress(out.samples, total);
  }
  if (out.samples == 0) {
    throw frontend_error("quark.calib_data.empty", "the calibration data holds no sample");
  }
  for (auto& [name, slot] : slots) {
    auto it = out.tensors.find(name);
    if (it == out.tensors.end() || it->second.type != dtype_id::float32)
      continue;
    tensor_facts& f = it->second;
    float lo = 0.0f, hi = 0.0f;
    if (auto* mm = std::get_if<minmax_observer>(&slot.obs)) {
      const range_stats r = mm->stats();
      if (r.count > 0 || r.nan_count > 0) {
        lo = r.min;
        hi = r.max;
      }
      if (slot.req.symmetric_range) {
        const float m = std::fmax(std::fabs(lo), std::fabs(hi));
        lo = -m;
        hi = m;
      }
    } else {
      const histogram_data& h = std::get<histogram_observer>(slot.obs).stats();
      if (h.total() > 0) {
        if (slot.req.method == act_method::percentile) {
          const calibrated_range r = percentile_calibrator{params.percentile}(h);
          lo = r.min;
          hi = r.max;
        } else if (slot.req.method == act_method::distribution) {
          const distribution_stats d = distribution_calibrator{}(h);
          f.std_dev = d.std_dev;
          lo = static_cast<float>(h.edges.front());
          hi = static_cast<float>(h.edges.back());
        } else {
          const value_range r = pof2_minmse_from_histogram(h, slot.req.type, name);
          lo = r.min;
          hi = r.max;
        }
      }
    }
    f.calibrated = true;
    f.rmin = lo;
    f.rmax = hi;
  }
  return out;
}

std::vector<std::pair<std::string, tensor>> run_model(const std::string& model_bytes,
                                                      const std::filesystem::path& base_dir,
                                                      const calib_sample& sample) {
  const runtime rt = make_runtime(model_bytes, base_dir);
  auto res = rt.run(sample);
  std::vector<std::pair<std::string, tensor>> out;
  for (const auto& o : rt.outputs()) {
    auto it = res.find(o.name);
    if (it != res.end())
      out.emplace_back(o.name, std::move(it->second));
  }
  return out;
}

}  // namespace quark::onnx::qz

#include <quark/metrics.hpp>

namespace quark::onnx::qz {

eval_report compare_models(const std::string& float_bytes, const std::string& quant_bytes,
                           const std::filesystem::path& base_dir, calibration_data_reader& reader,
                           std::size_t samples) {
  const runtime ref = make_runtime(float_bytes, base_dir);
  const runtime q = make_runtime(quant_bytes, base_dir);
  if (ref.outputs().empty())
    throw frontend_error("quark.eval.no_output", "the model has no output");
  const std::string out0 = ref.outputs().front().name;
  metrics::summary cos, l2, psnr, ssim;
  eval_report r;
  while (r.samples < samples) {
    auto s = reader.next();
    if (!s)
      break;
    const auto a = ref.run(*s).at(out0);
    const auto b = q.run(*s).at(out0);
    if (a.type() != dtype_id::float32 || b.type() != dtype_id::float32) {
      throw frontend_error("quark.eval.type", "output '" + out0 + "' is not float32");
    }
    const auto x = a.data<float>();
    const auto y = b.data<float>();
    cos.add(metrics::cosine(x, y));
    l2.add(metrics::l2_distance(x, y));
    psnr.add(metrics::psnr(x, y));
    ssim.add(metrics::ssim_global(x, y));
    ++r.samples;
  }
  r.cosine_mean = cos.mean();
  r.cosine_min = cos.min;
  r.l2_mean = l2.mean();
  r.l2_max = l2.max;
  r.psnr_mean = psnr.mean();
  r.psnr_min = psnr.min;
  r.ssim_mean = ssim.mean();
  r.ssim_min = ssim.min;
  return r;
}

}  // namespace quark::onnx::qz

namespace quark::onnx {

std::map<std::string, tensor> run_model(const std::filesystem::path& model_path,
                                        const calib_sample& sample) {
  const runtime rt(model_path);
  return rt.run(sample);
}

double time_inference(const std::filesystem::path& model_path, calibration_data_reader& reader,
                      std::size_t samples) {
  const runtime rt(model_path);
  double seconds = 0.0;
  for (std::size_t i = 0; i < samples; ++i) {
    auto s = reader.next();
    if (!s)
      break;
    const auto t0 = std::chrono::steady_clock::now();
    (void)rt.run(*s);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds;
}

}  // namespace quark::onnx
