// SPDX-License-Identifier: MIT
// qconfig -> algo_options (its own translation unit: config.hpp and model.hpp are kept apart, as
// in plan.cpp).
#include <quark/onnx/config.hpp>

#include "quantizer/algorithms.hpp"

namespace quark::onnx::qz {

algo_options read_algo_options(const qconfig& cfg) {
  algo_options a;
  for (const auto& e : cfg.algo_config) {
    if (e.name == algo_name::cle) {
      cle_options c;
      const std::string method = algo_param(e, "cle_balance_method").as_string();
      if (method != "max") {
        throw config_error("quark.config.value",
                           "algo_config cle.cle_balance_method: \"" + method +
                               "\" is not a balance method (Quark has only \"max\")");
      }
      const std::int64_t steps = algo_param(e, "cle_steps").as_int();
      if (steps < -1 || steps > 1000000) {
        throw config_error("quark.config.value",
                           "algo_config cle.cle_steps: must be -1 (until the stop rule) or a "
                           "number of passes >= 0, got " +
                               std::to_string(steps));
      }
      c.steps = static_cast<int>(steps);
      c.weight_threshold = algo_param(e, "cle_weight_threshold").as_number();
      c.scale_append_bias = algo_param(e, "cle_scale_append_bias").as_bool();
      c.scale_use_threshold = algo_param(e, "cle_scale_use_threshold").as_bool();
      c.total_layer_diff_threshold = algo_param(e, "cle_total_layer_diff_threshold").as_number();
      a.cle = c;
    } else if (e.name == algo_name::bias_correction) {
      a.bias_correction = true;
    }
  }
  const option_map eff = cfg.effective_options();
  if (const option_value* v = eff.find("ReplaceClip6Relu"); v != nullptr && v->is_bool())
    a.replace_clip6_relu = v->as_bool();
  return a;
}

}  // namespace quark::onnx::qz
