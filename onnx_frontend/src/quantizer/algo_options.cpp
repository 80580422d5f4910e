// SPDX-License-Identifier: MIT
// qconfig -> algo_options (its own translation unit: config.hpp and model.hpp are kept apart, as
// in plan.cpp).
#include <quark/onnx/config.hpp>

#include "quantizer/algorithms.hpp"

namespace quark::onnx::qz {

algo_options read_algo_options(const qconfig& cfg) {
  algo_options a;
  // The legacy extra options (CLESteps, ..., BiasCorrection) are the same parameters under Quark's
  // old names: a parameter given in the algo_config entry wins over its extra option.
  const option_map eff = cfg.effective_options();
  const option_map& explicit_opts = cfg.extra_options;
  auto param = [&](const algo_entry& e, const char* key, const char* legacy) {
    if (e.params.find(key) == nullptr) {
      if (const option_value* v = explicit_opts.find(legacy))
        return *v;
    }
    return algo_param(e, key);
  };
  bool has_cle = false;
  for (const auto& e : cfg.algo_config) {
    if (e.name == algo_name::cle) {
      has_cle = true;
      cle_options c;
      const std::string method = param(e, "cle_balance_method", "CLEBalanceMethod").as_string();
      if (method != "max") {
        throw config_error("quark.config.value",
                           "algo_config cle.cle_balance_method: \"" + method +
                               "\" is not a balance method (Quark has only \"max\")");
      }
      const std::int64_t steps = param(e, "cle_steps", "CLESteps").as_int();
      if (steps < -1 || steps > 1000000) {
        throw config_error("quark.config.value",
                           "algo_config cle.cle_steps: must be -1 (until the stop rule) or a "
                           "number of passes >= 0, got " +
                               std::to_string(steps));
      }
      c.steps = static_cast<int>(steps);
      c.weight_threshold = param(e, "cle_weight_threshold", "CLEWeightThreshold").as_number();
      c.scale_append_bias = param(e, "cle_scale_append_bias", "CLEScaleAppendBias").as_bool();
      c.scale_use_threshold = param(e, "cle_scale_use_threshold", "CLEScaleUseThreshold").as_bool();
      c.total_layer_diff_threshold =
          param(e, "cle_total_layer_diff_threshold", "CLETotalLayerDiffThreshold").as_number();
      a.cle = c;
    } else if (e.name == algo_name::bias_correction) {
      a.bias_correction = true;
    }
  }
  if (!has_cle) {
    for (const char* k :
         {"CLEBalanceMethod", "CLESteps", "CLEWeightThreshold", "CLEScaleAppendBias",
          "CLEScaleUseThreshold", "CLETotalLayerDiffThreshold"}) {
      if (explicit_opts.find(k) != nullptr) {
        throw config_error("quark.config.conflict",
                           std::string(k) +
                               " is set but algo_config has no \"cle\" entry (it tunes CLE, "
                               "which algo_config enables)");
      }
    }
  }
  if (const option_value* v = eff.find("BiasCorrection"); v != nullptr && v->is_bool())
    a.bias_correction = a.bias_correction || v->as_bool();
  if (const option_value* v = eff.find("ReplaceClip6Relu"); v != nullptr && v->is_bool())
    a.replace_clip6_relu = v->as_bool();
  return a;
}

}  // namespace quark::onnx::qz
