// SPDX-License-Identifier: MIT
// algo_config entries: algorithm names and their parameter tables (quark-spec §10: CLEConfig,
// SmoothQuantConfig, BiasCorrectionConfig, GPTQConfig, AdaRoundConfig, AdaQuantConfig,
// QuarotConfig, AutoMixprecisionConfig). Structure only; the algorithms come later.
#include <cctype>
#include <string>
#include <vector>

#include <quark/onnx/config.hpp>

#include "config/text.hpp"

namespace quark::onnx {

namespace {

struct param {
  std::string_view key;
  option_type type;
  bool nullable;
  option_value default_value;
};

struct algo_row {
  algo_name name;
  std::string_view canonical;
  std::string_view class_name;
  std::vector<param> params;
};

using ty = option_type;

std::vector<param> finetune_params(double lr, std::int64_t iters, const char* algorithm) {
  return {
      {"algorithm", ty::string, false, algorithm},
      {"optim_device", ty::string, false, "cpu"},
      {"infer_device", ty::string, false, "cpu"},
      {"fixed_seed", ty::integer, true, 1705472343},
      {"data_size", ty::integer, true, nullptr},
      {"batch_size", ty::integer, false, 1},
      {"num_batches", ty::integer, false, 1},
      {"num_iterations", ty::integer, false, iters},
      {"learning_rate", ty::number, false, lr},
      {"early_stop", ty::boolean, false, false},
      {"output_index", ty::integer, true, 0},
      {"lr_adjust", ty::number_list, true, nullptr},
      {"target_op_type", ty::string_list, false,
       option_value::array({"Conv", "ConvTranspose", "Gemm", "MatMul", "InstanceNormalization",
                            "LayerNormalization"})},
      {"selective_update", ty::boolean, false, false},
      {"update_bias", ty::boolean, false, false},
      {"output_qdq", ty::boolean, false, false},
      {"drop_ratio", ty::number, false, 1.0},
      {"mem_opt_level", ty::integer, false, 1},
      {"cache_dir", ty::string, true, nullptr},
      {"log_period", ty::integer, false, 100},
      {"ref_model_path", ty::string, true, nullptr},
      {"dynamic_batch", ty::boolean, false, false},
      {"parallel", ty::boolean, false, false},
      {"reg_param", ty::number, false, 0.01},
      {"beta_range", ty::number_list, false, option_value::array({20, 2})},
      {"warm_start", ty::number, false, 0.2},
      {"select_max_mem_layer", ty::boolean, false, false},
      {"num_workers", ty::integer, false, 1},
      {"pin_memory", ty::boolean, false, false},
      {"use_gds", ty::boolean, false, false},
  };
}

const std::vector<algo_row>& algo_table() {
  static const std::vector<algo_row> rows = {
      {algo_name::cle,
       "cle",
       "CLEConfig",
       {{"cle_balance_method", ty::string, false, "max"},
        {"cle_steps", ty::integer, false, 1},
        {"cle_weight_threshold", ty::number, false, 0.5},
        {"cle_scale_append_bias", ty::boolean, false, true},
        {"cle_scale_use_threshold", ty::boolean, false, true},
        {"cle_total_layer_diff_threshold", ty::number, false, 1.9e-7}}},
      {algo_name::smooth_quant,
       "smooth_quant",
       "SmoothQuantConfig",
       {{"alpha", ty::number, false, 0.5}}},
      {algo_name::bias_correction, "bias_correction", "BiasCorrectionConfig", {}},
      {algo_name::gptq,
       "gptq",
       "GPTQConfig",
       {{"bits", ty::integer, false, 8},
        {"block_size", ty::integer, false, 128},
        {"group_size", ty::integer, false, -1},
        {"perc_damp", ty::number, false, 0.01},
        {"act_order", ty::boolean, false, false},
        {"per_channel", ty::boolean, false, false},
        {"mse", ty::boolean, false, false},
        {"weight_symmetric", ty::boolean, false, true}}},
      {algo_name::adaround, "adaround", "AdaRoundConfig", finetune_params(0.1, 1000, "adaround")},
      {algo_name::adaquant, "adaquant", "AdaQuantConfig", finetune_params(1e-5, 3000, "adaquant")},
      {algo_name::quarot,
       "quarot",
       "QuarotConfig",
       {{"r_matrix_dim", ty::integer, false, 4096},
        {"use_random_had", ty::boolean, false, false},
        {"r_config_path", ty::string, true, nullptr}}},
      {algo_name::auto_mixprecision,
       "auto_mixprecision",
       "AutoMixprecisionConfig",
       {{"data_size", ty::integer, false, 10000000},
        {"target_op_type", ty::string_list, false,
         option_value::array({"Conv", "ConvTranspose", "Gemm", "MatMul"})},
        {"act_target_quant_type", ty::string, true, nullptr},
        {"weight_target_quant_type", ty::string, true, nullptr},
        {"bias_target_quant_type", ty::string, true, nullptr},
        {"dual_quant_nodes", ty::boolean, false, false},
        {"output_index", ty::integer, false, 0},
        {"l2_target", ty::number, true, 0.5},
        {"top1_acc_target", ty::number, true, nullptr},
        {"evaluate_function", ty::string, true, nullptr},
        {"num_target", ty::integer, false, 0},
        {"target_tensors", ty::string_list, false, option_value::array({})},
        {"target_indices", ty::number_list, false, option_value::array({})},
        {"exclude_indices", ty::number_list, false, option_value::array({})},
        {"no_input_qdq_shared", ty::boolean, false, true},
        {"auto_mix_use_fast_ft", ty::boolean, false, false}}},
  };
  return rows;
}

const algo_row& row_of(algo_name n) {
  for (const auto& r : algo_table()) {
    if (r.name == n)
      return r;
  }
  return algo_table().front();
}

void check_param_shape(const param& p, const option_value& v, const std::string& where) {
  detail::check_option_value(p.type, p.nullable, v, where);
}

}  // namespace

std::string_view to_string(algo_name a) noexcept {
  return row_of(a).canonical;
}

std::optional<algo_name> parse_algo_name(std::string_view s) noexcept {
  const std::string l = lower(s);
  for (const auto& r : algo_table()) {
    if (l == r.canonical || l == lower(r.class_name))
      return r.name;
  }
  return std::nullopt;
}

void check_algo_params(algo_name name, const option_value& params, std::string_view where) {
  if (!params.is_object())
    detail::throw_option_type(where, "an object", params);
  const algo_row& row = row_of(name);
  for (const auto& [key, value] : params.as_object()) {
    const std::string path = std::string(where) + "." + key;
    const param* found = nullptr;
    for (const auto& p : row.params) {
      if (p.key == key)
        found = &p;
    }
    if (found == nullptr) {
      std::string known;
      for (const auto& p : row.params) {
        if (!known.empty())
          known += ", ";
        known += p.key;
      }
      throw config_error("quark.config.unknown_key",
                         path + ": unknown parameter of " + std::string(row.class_name) +
                             (known.empty() ? " (it takes none)" : " (known: " + known + ")"));
    }
    check_param_shape(*found, value, path);
  }
}

option_value algo_param(const algo_entry& a, std::string_view key) {
  if (const auto* v = a.params.find(key))
    return *v;
  for (const auto& p : row_of(a.name).params) {
    if (p.key == key)
      return p.default_value;
  }
  throw config_error("quark.config.unknown_key", "unknown parameter \"" + std::string(key) +
                                                     "\" of " +
                                                     std::string(row_of(a.name).class_name));
}

}  // namespace quark::onnx
