// SPDX-License-Identifier: MIT
// qconfig -> algo_options (its own translation unit: config.hpp and model.hpp are kept apart, as
// in plan.cpp).
#include <cmath>
#include <filesystem>
#include <string_view>

#include <quark/core/error.hpp>
#include <quark/onnx/config.hpp>

#include "quantizer/algorithms.hpp"

namespace quark::onnx::qz {

namespace {

[[noreturn]] void bad_mp(const std::string& key, const std::string& what) {
  throw config_error("quark.config.value", "algo_config auto_mixprecision." + key + ": " + what);
}

/// A *_target_quant_type value: Quark's QuantType / ExtendedQuantType names, read as
/// TensorQuantOverrides' quant_type is (parse_override_quant_type: "QInt8", "QuantType.QInt8",
/// "QFLOAT8E4M3FN", any case).
std::optional<dtype_id> mp_type(const option_value& v, const std::string& key) {
  if (v.is_null())
    return std::nullopt;
  const std::string& s = v.as_string();
  if (const auto t = parse_override_quant_type(s)) {
    // QBFP / QMX (no element type) are read by read_block_target, for both tensors together.
    if (const auto d = element_type(*t))
      return d;
  }
  bad_mp(key, "\"" + s +
                  "\" is not a quant type (QInt4, QUInt4, QInt8, QUInt8, QInt16, QUInt16, QInt32, "
                  "QUInt32, QBFloat16, QFloat16, QFLOAT8E4M3FN; QBFP / QMX for activations and "
                  "weights together)");
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

/// QBFP / QMX target types (Quark's mixing of a block format into a model, usually a bfloat16
/// one): the activation target decides, as in Quark (its TargetQuantType defaults to the
/// activation's); the weight and bias targets are the same block type or null. Every target
/// node is mixed and nothing is measured, so the selection parameters have no use: set
/// explicitly, they are errors rather than silently ignored (Quark ignores them).
std::optional<tspec> read_block_target(const algo_entry& e, const qconfig& cfg) {
  auto kind = [&](const char* key) -> std::optional<override_quant_type> {
    const option_value v = algo_param(e, key);
    if (!v.is_string())
      return std::nullopt;
    const auto t = parse_override_quant_type(v.as_string());
    if (t == override_quant_type::bfp || t == override_quant_type::mx)
      return t;
    return std::nullopt;
  };
  const auto act = kind("act_target_quant_type");
  const auto weight = kind("weight_target_quant_type");
  const auto bias = kind("bias_target_quant_type");
  if (!act && !weight && !bias)
    return std::nullopt;
  if (!act) {
    bad_mp(weight ? "weight_target_quant_type" : "bias_target_quant_type",
           "QBFP / QMX mix a block format into the activations and weights of every target "
           "node together: set act_target_quant_type to the same type");
  }
  for (const char* key : {"weight_target_quant_type", "bias_target_quant_type"}) {
    if (!algo_param(e, key).is_null() && kind(key) != act) {
      bad_mp(key, "must be null or " +
                      std::string(*act == override_quant_type::bfp ? "QBFP" : "QMX") +
                      " like act_target_quant_type (a block format is mixed into activations "
                      "and weights together)");
    }
  }
  for (const auto& m : e.params.as_object()) {
    for (const char* unused : {"l2_target", "top1_acc_target", "num_target", "target_tensors",
                               "target_indices", "exclude_indices", "auto_mix_use_fast_ft",
                               "no_input_qdq_shared", "data_size", "evaluate_function"}) {
      if (m.key == unused) {
        bad_mp(m.key,
               "has no use with QBFP / QMX targets: every target_op_type node takes the "
               "block format and nothing is measured (as in Quark); remove it");
      }
    }
  }
  return override_block_spec(*act, cfg, true, std::nullopt);
}

auto_mp_options read_auto_mp(const algo_entry& e, const qconfig& cfg) {
  auto_mp_options o;
  auto p = [&](const char* key) { return algo_param(e, key); };
  if ((o.block = read_block_target(e, cfg))) {
    const option_value ops = p("target_op_type");  // named: as_array() of a temporary dangles
    o.target_op_types.clear();
    for (const auto& x : ops.as_array())
      o.target_op_types.push_back(x.as_string());
    if (o.target_op_types.empty())
      bad_mp("target_op_type", "is empty: no node could change precision");
    o.dual_quant_nodes = p("dual_quant_nodes").as_bool();
    o.l2_target.reset();
    return o;
  }
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
  // A float8 target is a standard QuantizeLinear / DequantizeLinear pair (opset 19); ONNX
  // Runtime's com.microsoft ones have no float8 types.
  const option_map eff = cfg.effective_options();
  if (const option_value* c = eff.find("UseQDQContribOps"); c && c->is_bool() && c->as_bool()) {
    for (const auto& [t, key] : {std::pair{o.act_type, "act_target_quant_type"},
                                 std::pair{o.weight_type, "weight_target_quant_type"},
                                 std::pair{o.bias_type, "bias_target_quant_type"}}) {
      if (t && *t == dtype_id::float8_e4m3fn) {
        throw config_error("quark.config.unsupported_type",
                           "algo_config auto_mixprecision." + std::string(key) + ": " +
                               std::string(dtype_name(*t)) +
                               " with UseQDQContribOps: the com.microsoft QuantizeLinear / "
                               "DequantizeLinear take int4, uint4, int8, uint8, int16 and uint16 "
                               "only");
      }
    }
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
  if (p("auto_mix_use_fast_ft").as_bool())
    o.fast_ft = finetune_options{};  // filled by read_algo_options (the adaround / adaquant entry)
  return o;
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw config_error("quark.config.value", "algo_config " + where + ": " + what);
}

[[noreturn]] void unsupported(const std::string& where, const std::string& what) {
  throw quark::not_implemented("quark.config.not_implemented",
                               "algo_config " + where + ": " + what);
}

/// AdaRoundConfig / AdaQuantConfig parameters (quark-spec §10.5), validated.
finetune_options read_finetune(const algo_entry& e) {
  finetune_options f;
  const std::string entry(to_string(e.name));
  f.adaquant = e.name == algo_name::adaquant;
  auto p = [&](const char* key) { return algo_param(e, key); };
  auto where = [&](const char* key) { return entry + "." + key; };
  auto count = [&](const char* key, std::int64_t lo) -> std::size_t {
    const std::int64_t v = p(key).as_int();
    if (v < lo)
      bad(where(key), "must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
    return static_cast<std::size_t>(v);
  };
  const std::string algorithm = p("algorithm").as_string();
  if (algorithm != entry) {
    bad(where("algorithm"), "\"" + algorithm + "\" does not match the entry (the " + entry +
                                " entry runs \"" + entry + "\")");
  }
  for (const char* dev : {"optim_device", "infer_device"}) {
    const std::string d = p(dev).as_string();
    if (d != "cpu")
      unsupported(where(dev), "\"" + d + "\": quark-cpp fine-tunes on the CPU only (\"cpu\")");
  }
  if (const option_value v = p("fixed_seed"); !v.is_null()) {
    if (v.as_int() < 0)
      bad(where("fixed_seed"), "must be >= 0, got " + std::to_string(v.as_int()));
    f.fixed_seed = static_cast<std::uint64_t>(v.as_int());
  }
  if (const option_value v = p("data_size"); !v.is_null())
    f.data_size = count("data_size", 1);
  f.batch_size = count("batch_size", 1);
  f.num_batches = count("num_batches", 1);
  f.num_iterations = count("num_iterations", 0);
  f.learning_rate = p("learning_rate").as_number();
  if (!(f.learning_rate > 0.0) || !std::isfinite(f.learning_rate))
    bad(where("learning_rate"), "must be a finite number > 0");
  f.early_stop = p("early_stop").as_bool();
  if (const option_value v = p("output_index"); !v.is_null() && v.as_int() != 0) {
    bad(where("output_index"),
        "must be 0 or null (the fine-tuned Conv / Gemm / MatMul have one output), got " +
            std::to_string(v.as_int()));
  }
  // lr_adjust (Quark's TrainParameters.lr_adjust): [threshold, lr]; a module whose reconstruction
  // MSE before training exceeds the threshold trains with lr. null or [] (Quark's default ()):
  // none. Quark ignores any other form without a word; here it is an error.
  if (const option_value v = p("lr_adjust"); !v.is_null() && !v.as_array().empty()) {
    const auto& a = v.as_array();
    if (a.size() != 2)
      bad(where("lr_adjust"), "must be null, [] or [threshold, learning_rate], got " +
                                  std::to_string(a.size()) + " numbers");
    const double threshold = a[0].as_number();
    const double lr = a[1].as_number();
    if (!(threshold >= 0.0) || !std::isfinite(threshold))
      bad(where("lr_adjust"), "the threshold (first number) must be a finite number >= 0");
    if (!(lr > 0.0) || !std::isfinite(lr))
      bad(where("lr_adjust"), "the learning rate (second number) must be a finite number > 0");
    f.lr_adjust = std::pair{threshold, lr};
  }
  const option_value types = p("target_op_type");
  for (const auto& t : types.as_array()) {
    const std::string& op = t.as_string();
    if (op != "Conv" && op != "ConvTranspose" && op != "Gemm" && op != "MatMul" &&
        op != "InstanceNormalization" && op != "LayerNormalization") {
      bad(where("target_op_type"),
          "\"" + op +
              "\" is not a module type (Conv, ConvTranspose, Gemm, MatMul, InstanceNormalization, "
              "LayerNormalization)");
    }
    f.target_op_type.push_back(op);
  }
  f.selective_update = p("selective_update").as_bool();
  f.update_bias = p("update_bias").as_bool();
  if (f.update_bias && !f.adaquant)
    bad(where("update_bias"), "AdaRound learns roundings only; update_bias needs adaquant");
  f.output_qdq = p("output_qdq").as_bool();
  f.drop_ratio = p("drop_ratio").as_number();
  if (!(f.drop_ratio >= 0.0 && f.drop_ratio <= 1.0))
    bad(where("drop_ratio"), "must be in [0, 1]");
  const std::int64_t mem = p("mem_opt_level").as_int();
  if (mem < 0 || mem > 2)
    bad(where("mem_opt_level"), "must be 0, 1 or 2, got " + std::to_string(mem));
  f.log_period = count("log_period", 1);
  if (const option_value v = p("ref_model_path"); !v.is_null()) {
    f.ref_model_path = v.as_string();
    std::error_code ec;
    if (f.ref_model_path.empty() || !std::filesystem::is_regular_file(f.ref_model_path, ec))
      bad(where("ref_model_path"), "\"" + f.ref_model_path + "\" is not a readable model file");
  }
  f.reg_param = p("reg_param").as_number();
  if (!(f.reg_param >= 0.0) || !std::isfinite(f.reg_param))
    bad(where("reg_param"), "must be a finite number >= 0");
  const option_value beta = p("beta_range");
  if (beta.as_array().size() != 2)
    bad(where("beta_range"), "must be two numbers (start, end)");
  f.beta_start = beta.as_array()[0].as_number();
  f.beta_end = beta.as_array()[1].as_number();
  if (!(f.beta_start > 0.0 && f.beta_end > 0.0) || !std::isfinite(f.beta_start) ||
      !std::isfinite(f.beta_end))
    bad(where("beta_range"), "both values must be finite numbers > 0");
  f.warm_start = p("warm_start").as_number();
  if (!(f.warm_start >= 0.0 && f.warm_start <= 1.0))
    bad(where("warm_start"), "must be in [0, 1]");
  if (p("num_workers").as_int() < 1)
    bad(where("num_workers"), "must be >= 1");
  if (p("use_gds").as_bool())
    unsupported(where("use_gds"), "GPUDirect Storage needs a GPU; quark-cpp runs on the CPU");
  // pin_memory, num_workers, parallel, mem_opt_level, cache_dir, dynamic_batch,
  // select_max_mem_layer: validated above or by the table; nothing to do on one CPU process that
  // holds one module's data at a time.
  return f;
}

/// GPTQConfig parameters (quark-spec §10.4), validated.
gptq_config read_gptq(const algo_entry& e) {
  gptq_config c;
  auto p = [&](const char* key) { return algo_param(e, key); };
  auto where = [](const char* key) { return std::string("gptq.") + key; };
  const std::int64_t bits = p("bits").as_int();
  if (bits < 2 || bits > 16) {
    bad(where("bits"),
        "must be in [2, 16] (codes stored as uint4, uint8 or uint16), got " + std::to_string(bits));
  }
  c.bits = static_cast<int>(bits);
  const std::int64_t block = p("block_size").as_int();
  if (block < 1)
    bad(where("block_size"), "must be >= 1, got " + std::to_string(block));
  c.block_size = static_cast<std::size_t>(block);
  c.group_size = p("group_size").as_int();
  if (c.group_size == 0 || c.group_size < -1) {
    bad(where("group_size"), "must be -1 (one group) or >= 1, got " + std::to_string(c.group_size));
  }
  c.perc_damp = p("perc_damp").as_number();
  if (!(c.perc_damp >= 0.0) || !std::isfinite(c.perc_damp))
    bad(where("perc_damp"), "must be a finite number >= 0");
  c.act_order = p("act_order").as_bool();
  c.per_channel = p("per_channel").as_bool();
  c.mse = p("mse").as_bool();
  c.symmetric = p("weight_symmetric").as_bool();
  return c;
}

}  // namespace

algo_options read_algo_options(const qconfig& cfg) {
  algo_options a;
  // The parameter types first (qconfig::validate checks them too, but runs later): a wrong type
  // read below would be reported without the parameter's name.
  for (std::size_t i = 0; i < cfg.algo_config.size(); ++i) {
    check_algo_params(cfg.algo_config[i].name, cfg.algo_config[i].params,
                      "algo_config[" + std::to_string(i) + "]");
  }
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
    } else if (e.name == algo_name::smooth_quant) {
      smooth_quant_options q;
      q.alpha = algo_param(e, "alpha").as_number();
      if (!(q.alpha >= 0.0 && q.alpha <= 1.0)) {
        throw config_error("quark.config.value",
                           "algo_config smooth_quant.alpha: must be in [0, 1] (the share of the "
                           "activation's range moved into the weight), got " +
                               to_string(algo_param(e, "alpha")));
      }
      a.smooth_quant = q;
    } else if (e.name == algo_name::gptq) {
      a.gptq = read_gptq(e);
    } else if (e.name == algo_name::quarot) {
      quarot_options q;
      const std::int64_t dim = algo_param(e, "r_matrix_dim").as_int();
      if (dim < 1)
        bad("quarot.r_matrix_dim", "must be >= 1, got " + std::to_string(dim));
      q.dim = static_cast<std::size_t>(dim);
      q.random = algo_param(e, "use_random_had").as_bool();
      if (const option_value v = algo_param(e, "r_config_path"); !v.is_null())
        q.config_path = v.as_string();
      a.quarot = q;
    } else if (e.name == algo_name::bias_correction) {
      a.bias_correction = true;
    } else if (e.name == algo_name::auto_mixprecision) {
      a.auto_mp = read_auto_mp(e, cfg);
    } else if (e.name == algo_name::adaround || e.name == algo_name::adaquant) {
      a.finetune = read_finetune(e);
    }
  }
  if (a.gptq && a.finetune) {
    throw config_error("quark.config.conflict",
                       "algo_config: gptq and " +
                           std::string(a.finetune->adaquant ? "adaquant" : "adaround") +
                           " both choose the weights' integers; use one of them");
  }
  if (a.auto_mp && a.auto_mp->fast_ft) {
    // auto_mix_use_fast_ft: the adaround / adaquant entry's parameters (Quark's FastFinetune
    // options), AdaRound at its defaults without one.
    a.auto_mp->fast_ft = a.finetune ? *a.finetune : read_finetune(algo_entry{algo_name::adaround});
    a.auto_mp->fast_ft->selective_update = false;  // the candidate's own metric decides
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
