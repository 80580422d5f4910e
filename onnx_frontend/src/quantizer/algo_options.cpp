// SPDX-License-Identifier: MIT
// qconfig -> algo_options (its own translation unit: config.hpp and model.hpp are kept apart, as
// in plan.cpp).
#include <cmath>
#include <string_view>

#include <quark/onnx/config.hpp>

#include "quantizer/algorithms.hpp"

namespace quark::onnx::qz {

namespace {

[[noreturn]] void bad_mp(const std::string& key, const std::string& what) {
  throw config_error("quark.config.value", "algo_config auto_mixprecision." + key + ": " + what);
}

/// A *_target_quant_type value: Quark's QuantType / ExtendedQuantType names.
std::optional<dtype_id> mp_type(const option_value& v, const std::string& key) {
  if (v.is_null())
    return std::nullopt;
  const std::string& s = v.as_string();
  static const std::pair<std::string_view, dtype_id> ints[] = {
      {"QInt8", dtype_id::int8},     {"QUInt8", dtype_id::uint8}, {"QInt16", dtype_id::int16},
      {"QUInt16", dtype_id::uint16}, {"QInt32", dtype_id::int32}, {"QUInt32", dtype_id::uint32}};
  for (const auto& [name, t] : ints) {
    if (s == name)
      return t;
  }
  for (const char* other : {"QInt4", "QUInt4", "QFloat16", "QBFloat16", "QBFP", "QMX",
                            "QFloat8E4M3FN", "QFloat8E5M2"}) {
    if (s == other) {
      throw not_implemented("quark.config.not_implemented",
                            "algo_config auto_mixprecision." + key + ": \"" + s +
                                "\" is not implemented yet (QInt8, QUInt8, QInt16, QUInt16 and, "
                                "for biases, QInt32 / QUInt32 are)");
    }
  }
  bad_mp(key,
         "\"" + s + "\" is not a quant type (QInt8, QUInt8, QInt16, QUInt16, QInt32, QUInt32)");
}

std::size_t mp_count(const option_value& v, const std::string& key, std::int64_t min) {
  const std::int64_t n = v.as_int();
  if (n < min)
    bad_mp(key, "must be >= " + std::to_string(min) + ", got " + std::to_string(n));
  return static_cast<std::size_t>(n);
}

std::vector<std::size_t> mp_indices(const option_value& v, const std::string& key) {
  std::vector<std::size_t> out;
  for (const auto& x : v.as_array()) {
    const double d = x.as_number();
    if (d < 0 || d != std::floor(d) || d > 1e9)
      bad_mp(key, "indices are integers >= 0, got " + std::to_string(d));
    out.push_back(static_cast<std::size_t>(d));
  }
  return out;
}

auto_mp_options read_auto_mp(const algo_entry& e) {
  auto_mp_options o;
  auto p = [&](const char* key) { return algo_param(e, key); };
  o.data_size = mp_count(p("data_size"), "data_size", 1);
  o.target_op_types.clear();
  const option_value ops = p("target_op_type");  // named: as_array() of a temporary dangles
  for (const auto& x : ops.as_array())
    o.target_op_types.push_back(x.as_string());
  if (o.target_op_types.empty())
    bad_mp("target_op_type", "is empty: no node could change precision");
  o.act_type = mp_type(p("act_target_quant_type"), "act_target_quant_type");
  o.weight_type = mp_type(p("weight_target_quant_type"), "weight_target_quant_type");
  o.bias_type = mp_type(p("bias_target_quant_type"), "bias_target_quant_type");
  for (const auto& [t, key] : {std::pair{o.act_type, "act_target_quant_type"},
                               std::pair{o.weight_type, "weight_target_quant_type"}}) {
    if (t && (*t == dtype_id::int32 || *t == dtype_id::uint32))
      bad_mp(key, "32-bit types are for biases only (bias_target_quant_type)");
  }
  if (!o.act_type && !o.weight_type) {
    bad_mp("act_target_quant_type",
           "act_target_quant_type or weight_target_quant_type must be given (the types the "
           "chosen nodes take)");
  }
  if (o.bias_type && o.weight_type && *o.bias_type != *o.weight_type &&
      *o.bias_type != dtype_id::int32) {
    bad_mp("bias_target_quant_type",
           "must equal weight_target_quant_type (or be QInt32), as in Quark");
  }
  if (!p("evaluate_function").is_null()) {
    throw not_implemented("quark.config.not_implemented",
                          "algo_config auto_mixprecision.evaluate_function: a Python callable in "
                          "Quark; quark-cpp measures top-1 agreement with the float model "
                          "(top1_acc_target) instead");
  }
  o.dual_quant_nodes = p("dual_quant_nodes").as_bool();
  o.output_index = mp_count(p("output_index"), "output_index", 0);
  const option_value l2 = p("l2_target");
  const option_value top1 = p("top1_acc_target");
  o.l2_target.reset();
  if (!l2.is_null()) {
    if (!(l2.as_number() >= 0))
      bad_mp("l2_target", "must be >= 0, got " + std::to_string(l2.as_number()));
    o.l2_target = l2.as_number();
  }
  if (!top1.is_null()) {
    const double t = top1.as_number();
    if (!(t >= 0 && t <= 1))
      bad_mp("top1_acc_target", "is a top-1 loss in [0, 1], got " + std::to_string(t));
    o.top1_acc_target = t;
    if (o.l2_target) {
      o.l2_target.reset();  // Quark: "Drop l2_target and use only top1_acc_target"
      o.notes.push_back(
          "auto_mixprecision: l2_target and top1_acc_target both set; l2_target dropped (as in "
          "Quark)");
    }
  }
  o.num_target = mp_count(p("num_target"), "num_target", 0);
  const option_value tensors = p("target_tensors");
  for (const auto& x : tensors.as_array())
    o.target_tensors.push_back(x.as_string());
  o.target_indices = mp_indices(p("target_indices"), "target_indices");
  o.exclude_indices = mp_indices(p("exclude_indices"), "exclude_indices");
  o.no_input_qdq_shared = p("no_input_qdq_shared").as_bool();
  if (!o.l2_target && !o.top1_acc_target && o.num_target == 0 && o.target_tensors.empty() &&
      o.target_indices.empty() && o.exclude_indices.empty()) {
    bad_mp("l2_target",
           "l2_target and top1_acc_target are both null and nothing else (num_target, "
           "target_tensors, target_indices, exclude_indices) says which nodes change (Quark "
           "would change every node; ask for it with num_target)");
  }
  if (p("auto_mix_use_fast_ft").as_bool()) {
    throw not_implemented("quark.config.not_implemented",
                          "algo_config auto_mixprecision.auto_mix_use_fast_ft: fast finetuning "
                          "(AdaRound / AdaQuant) is not implemented yet");
  }
  return o;
}

}  // namespace

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
    } else if (e.name == algo_name::auto_mixprecision) {
      a.auto_mp = read_auto_mp(e);
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
