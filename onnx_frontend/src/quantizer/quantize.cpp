// SPDX-License-Identifier: MIT
// quantize_model: the float stage (preprocessing, graph passes, fusions, conversions, CLE, QuaRot,
// SmoothQuant) and the plan, then dynamic quantization (dynamic.cpp), MatMulNBits, or the static
// flow (static_quant.cpp: calibrate, choose the tensors, compute their parameters, insert
// QuantizeLinear / DequantizeLinear, the algorithms on the quantized model); the summary table
// and the per-tensor JSON of the report. quark-spec §5-§7.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <quark/onnx/config.hpp>
#include <quark/onnx/quantizer.hpp>

#include "io/atomic_file.hpp"
#include "io/graph_util.hpp"
#include "io/inline_functions.hpp"
#include "io/proto_access.hpp"
#include "quantizer/algorithms.hpp"
#include "quantizer/calibrate.hpp"
#include "quantizer/conversions.hpp"
#include "quantizer/dynamic.hpp"
#include "quantizer/fp16_model.hpp"
#include "quantizer/graph_passes.hpp"
#include "quantizer/plan.hpp"
#include "quantizer/preprocess.hpp"
#include "quantizer/static_quant.hpp"

namespace quark::onnx {

namespace qz {
// Defined in plan.cpp / tools.cpp (they include config.hpp, which this file cannot).
settings read_settings(const qconfig& cfg);
}  // namespace qz

namespace {

using qz::node_choice;

/// Mask of the nodes on a path from one of `starts` to one of `ends` (both included).
std::vector<bool> subgraph_mask(const model& m, const std::vector<node_info>& nodes,
                                const std::vector<std::string>& starts,
                                const std::vector<std::string>& ends) {
  std::map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    by_name[nodes[i].name] = i;
  auto index_of = [&](const std::string& n) {
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      throw config_error("quark.config.subgraph",
                         "subgraph names node '" + n + "', which is not in the model");
    }
    return it->second;
  };
  const value_users users(proto(m).graph());
  std::vector<bool> fwd(nodes.size()), bwd(nodes.size());
  std::vector<std::size_t> stack;
  for (const auto& s : starts)
    stack.push_back(index_of(s));
  while (!stack.empty()) {
    const std::size_t i = stack.back();
    stack.pop_back();
    if (fwd[i])
      continue;
    fwd[i] = true;
    for (const auto& o : nodes[i].outputs) {
      for (auto c : users.consumers(o))
        stack.push_back(c);
    }
  }
  for (const auto& e : ends)
    stack.push_back(index_of(e));
  while (!stack.empty()) {
    const std::size_t i = stack.back();
    stack.pop_back();
    if (bwd[i])
      continue;
    bwd[i] = true;
    for (const auto& in : nodes[i].inputs) {
      if (auto p = users.producer(in))
        stack.push_back(*p);
    }
  }
  std::vector<bool> out(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i)
    out[i] = fwd[i] && bwd[i];
  return out;
}

/// InputNodes / OutputNodes (quark-spec §7.2): every node before an input node (its strict
/// ancestors) and every node after an output node (its strict descendants) stays float.
void limit_to_input_output_nodes(const model& m, const std::vector<node_info>& nodes,
                                 const qz::settings& opt, std::vector<node_choice>& choices) {
  if (opt.input_nodes.empty() && opt.output_nodes.empty())
    return;
  std::map<std::string, std::size_t> by_name;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    by_name[nodes[i].name] = i;
  const value_users users(proto(m).graph());
  auto walk = [&](const std::vector<std::string>& from, const char* key, bool down) {
    std::vector<bool> seen(nodes.size());
    std::vector<std::size_t> stack;
    auto push_next = [&](std::size_t i) {
      if (down) {
        for (const auto& o : nodes[i].outputs) {
          for (auto c : users.consumers(o))
            stack.push_back(c);
        }
      } else {
        for (const auto& x : nodes[i].inputs) {
          if (auto p = users.producer(x))
            stack.push_back(*p);
        }
      }
    };
    for (const auto& name : from) {
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        throw config_error("quark.config.value",
                           std::string(key) + ": node '" + name + "' is not in the model");
      }
      push_next(it->second);
    }
    while (!stack.empty()) {
      const std::size_t i = stack.back();
      stack.pop_back();
      if (seen[i])
        continue;
      seen[i] = true;
      push_next(i);
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (seen[i] && choices[i].quantize) {
        choices[i].quantize = false;
        choices[i].reason = down ? "after OutputNodes" : "before InputNodes";
      }
    }
  };
  walk(opt.input_nodes, "InputNodes", false);
  walk(opt.output_nodes, "OutputNodes", true);
}

/// Notes for the configuration's node names, regular expressions and op types that match no
/// node of `nodes` (the graph after the passes): a misspelt name in `exclude` or
/// NodesToQuantize would otherwise change nothing without a word. Quark ignores them too, and
/// a node SimplifyModel merged away can be named on purpose, so this is a note, not an error.
/// Subgraph selectors are checked when their masks are made (quark.config.subgraph).
std::vector<std::string> unmatched_selector_notes(const qconfig& cfg,
                                                  const std::vector<node_info>& nodes) {
  std::set<std::string> op_types;
  bool bodies = false;
  for (const auto& n : nodes) {
    op_types.insert(n.op_type);
    bodies = bodies || n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan";
  }
  const auto quoted = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v)
      out += (out.empty() ? "'" : ", '") + s + "'";
    return out;
  };
  const std::string where = bodies ? " (If / Loop / Scan bodies not searched)" : std::string();
  std::vector<std::string> notes;
  const auto selectors = [&](const char* field, const std::vector<node_selector>& sel) {
    std::vector<std::string> missed;
    for (const auto& s : sel) {
      if (s.kind() == selector_kind::subgraph)
        continue;
      const bool hit = std::any_of(nodes.begin(), nodes.end(),
                                   [&](const node_info& n) { return s.matches_name(n.name); });
      if (!hit)
        missed.push_back(s.text());
    }
    if (!missed.empty()) {
      notes.push_back(std::string("config: ") + field + " matches no node" + where + ": " +
                      quoted(missed) +
                      " (names are those of the graph after SimplifyModel / OptimizeModel)");
    }
  };
  const auto names = [&](const char* field, const std::vector<std::string>& v, bool op_type) {
    std::vector<std::string> missed;
    for (const auto& s : v) {
      const bool hit = op_type ? op_types.contains(s)
                               : std::any_of(nodes.begin(), nodes.end(),
                                             [&](const node_info& n) { return n.name == s; });
      if (!hit)
        missed.push_back(s);
    }
    if (!missed.empty()) {
      notes.push_back(std::string("config: ") + field +
                      (op_type ? " names op types" : " names nodes") + " the model does not have" +
                      where + ": " + quoted(missed));
    }
  };
  selectors("exclude", cfg.exclude);
  std::vector<node_selector> layers;
  for (const auto& rule : cfg.specific_layer_config)
    layers.insert(layers.end(), rule.layers.begin(), rule.layers.end());
  selectors("specific_layer_config", layers);
  std::vector<std::string> rule_types;
  for (const auto& rule : cfg.layer_type_config)
    rule_types.insert(rule_types.end(), rule.op_types.begin(), rule.op_types.end());
  names("layer_type_config", rule_types, true);
  const option_map eff = cfg.effective_options();
  for (const auto& [key, op_type] : {std::pair<const char*, bool>{"OpTypesToQuantize", true},
                                     {"ExtraOpTypesToQuantize", true},
                                     {"OpTypesToExcludeOutputQuantization", true},
                                     {"NodesToQuantize", false},
                                     {"NodesToExcludeOutputQuantization", false}}) {
    const option_value* v = eff.find(key);
    if (v != nullptr && !v->is_null())
      names(key, option_cast<std::vector<std::string>>(*v, key), op_type);
  }
  return notes;
}

/// Quark leaves float a node reading a float initializer that is entirely +-Inf (an additive
/// attention mask, say): such a constant has no scale (quark-spec §3.7).
void keep_all_inf_readers_float(const model& m, const std::vector<node_info>& nodes,
                                std::vector<node_choice>& choices) {
  std::map<std::string, bool> all_inf;  // per initializer name
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!choices[i].quantize)
      continue;
    for (const std::string& x : nodes[i].inputs) {
      if (x.empty() || !m.has_initializer(x))
        continue;
      auto [it, fresh] = all_inf.try_emplace(x, false);
      if (fresh) {
        const tensor t = m.initializer(x);
        const auto v = t.type() == dtype_id::float32 ? t.data<float>() : std::span<const float>();
        it->second =
            !v.empty() && std::all_of(v.begin(), v.end(), [](float f) { return std::isinf(f); });
      }
      if (it->second) {
        choices[i].quantize = false;
        choices[i].reason = "reads '" + x + "', entirely +-Inf";
        break;
      }
    }
  }
}

}  // namespace

namespace qz {

void name_single_input(const model& m, calibration_data_reader& reader) {
  if (auto* folder = dynamic_cast<npy_folder_reader*>(&reader)) {
    const auto ins = m.inputs();
    if (ins.size() == 1)
      folder->set_single_input_name(ins.front().name);
  }
}

void evaluate_against_float(quantize_report& report, const settings& opt,
                            const std::string& float_bytes, const model& m,
                            calibration_data_reader& reader, const quantize_run_options& run,
                            std::size_t default_n) {
  std::size_t eval_n = run.eval_samples;
  std::unique_ptr<npy_folder_reader> eval_reader;
  if (opt.eval_data_dir) {
    if (eval_n == 0 && opt.eval_metrics.empty()) {
      report.notes.push_back("EvalDataReader is used only with EvalMetrics; no evaluation ran");
    } else {
      eval_reader = std::make_unique<npy_folder_reader>(*opt.eval_data_dir, "evaluation");
      const auto ins = m.inputs();
      if (ins.size() == 1)
        eval_reader->set_single_input_name(ins.front().name);
      if (eval_n == 0)
        eval_n = eval_reader->size().value_or(0);
    }
  }
  if (eval_n == 0 && !opt.eval_metrics.empty())
    eval_n = default_n;
  if (eval_n > 0) {
    calibration_data_reader& er = eval_reader ? *eval_reader : reader;
    er.rewind();
    report.eval = qz::compare_models(float_bytes, m.to_bytes(), m.base_dir(), er, eval_n);
  }
}

}  // namespace qz

namespace {

using qz::evaluate_against_float;
using qz::name_single_input;

/// The node choices for `m` as it is (no graph pass), with InputNodes / OutputNodes applied.
qz::plan plan_as_given(const model& m, const qconfig& cfg) {
  const std::vector<node_info> nodes = m.nodes();
  std::vector<qz::node_ref> refs;
  for (const auto& n : nodes)
    refs.push_back({n.name, n.op_type});
  qz::plan pl = qz::make_plan(
      cfg, refs, [&](const auto& s, const auto& e) { return subgraph_mask(m, nodes, s, e); });
  limit_to_input_output_nodes(m, nodes, pl.opt, pl.nodes);
  return pl;
}

/// The float stage before calibration, on `m` (a copy of the input): (a) constants ->
/// initializers, the preprocessing (ConvertOpsetVersion, RemoveInputInit, Copy*Init;
/// preprocess.cpp), the graph passes (OptimizeModel, FoldBatchNorm; graph_passes.cpp), the
/// Fuse* rewrites (preprocess.cpp),
/// ReplaceClip6Relu, the category-1 conversions (conversions.cpp), the plan (node selection and
/// specs), then CLE (algo_cle.cpp), which changes initializers only, so the plan's node list stays
/// valid, then SmoothQuant (algo_smooth_quant.cpp) on the calibration data of `reader`, which
/// adds Mul nodes: the plan is made again after it.
qz::plan prepare_float_model(model& m, const qconfig& cfg, const qz::algo_options& algos,
                             std::vector<std::string>& notes,
                             calibration_data_reader* reader = nullptr) {
  m.constants_to_initializers();
  const qz::graph_pass_options passes = qz::read_pass_options(cfg);
  for (auto& note : qz::preprocess_model(m, passes))
    notes.push_back("graph: " + note);
  for (auto& note : qz::optimize_graph(m, passes))
    notes.push_back("graph: " + note);
  for (auto& note : qz::fuse_patterns(m, passes))
    notes.push_back("graph: " + note);
  if (algos.cle && algos.replace_clip6_relu) {
    if (const std::size_t k = qz::replace_clip6_relu(m); k > 0)
      notes.push_back("graph: ReplaceClip6Relu replaced " + std::to_string(k) + " Clip(0, 6)");
  }
  // Category-1 conversions (conversions.hpp) on the nodes whose converted form the quantizer
  // would quantize (Quark's should_quantize_node): a plan of the graph as it would look.
  if (passes.bn_to_conv || passes.clip_to_relu || passes.split_to_slice ||
      passes.reduce_mean_to_gap || passes.split_large_kernel_pool) {
    const std::vector<node_info> before = m.nodes();
    std::vector<qz::node_ref> as_converted;
    for (const auto& n : before) {
      const std::string to = qz::converted_op_type(n.op_type, passes);
      as_converted.push_back({n.name, to.empty() ? n.op_type : to});
    }
    const qz::plan pre = qz::make_plan(cfg, as_converted, [&](const auto& s, const auto& e) {
      return subgraph_mask(m, before, s, e);
    });
    for (auto& note :
         qz::convert_graph(m, passes, [&](std::size_t i) { return pre.nodes[i].quantize; }))
      notes.push_back("graph: " + note);
  }
  const std::vector<node_info> nodes = m.nodes();
  qz::plan pl = plan_as_given(m, cfg);
  for (auto& note : unmatched_selector_notes(cfg, nodes))
    notes.push_back(std::move(note));
  keep_all_inf_readers_float(m, nodes, pl.nodes);
  if (algos.cle) {
    std::set<std::string> quantized;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (pl.nodes[i].quantize)
        quantized.insert(nodes[i].name);
    }
    const qz::cle_stats st = qz::cross_layer_equalize(
        m, *algos.cle, [&](const std::string& n) { return quantized.contains(n); });
    notes.push_back(
        "cle: " + std::to_string(st.pairs) + " pairs, " + std::to_string(st.triples) +
        " triples, " + std::to_string(st.steps) + " steps" +
        (st.skipped > 0 ? ", " + std::to_string(st.skipped) + " patterns skipped" : std::string()));
  }
  // QuaRot's R1 rotation (algo_quarot.cpp) after CLE, as in Quark; initializers only.
  if (algos.quarot)
    notes.push_back(qz::rotate_r1(m, *algos.quarot));
  // SmoothQuant (algo_smooth_quant.cpp) after the rotation, as in Quark; it adds Mul nodes, so
  // the plan is made again afterwards.
  if (algos.smooth_quant) {
    if (reader == nullptr) {
      notes.push_back("smooth_quant: not applied here (it needs the calibration data)");
      return pl;
    }
    name_single_input(m, *reader);
    std::set<std::string> quantized;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (pl.nodes[i].quantize)
        quantized.insert(nodes[i].name);
    }
    const qz::smooth_quant_stats st =
        qz::smooth_quant(m, *algos.smooth_quant, *reader, pl.opt.calib_data_size,
                         [&](const std::string& n) { return quantized.contains(n); });
    notes.push_back(qz::smooth_quant_note(*algos.smooth_quant, st));
    if (st.matmuls > 0) {
      const std::vector<node_info> now = m.nodes();
      pl = plan_as_given(m, cfg);
      keep_all_inf_readers_float(m, now, pl.nodes);
      // The smoothing Muls stay float: quantizing their input would quantize the unsmoothed
      // activation again (Quark quantizes them with the other Muls; docs/compatibility.md).
      const std::set<std::string> muls(st.mul_nodes.begin(), st.mul_nodes.end());
      for (std::size_t i = 0; i < now.size(); ++i) {
        if (muls.contains(now[i].name)) {
          pl.nodes[i].quantize = false;
          pl.nodes[i].reason = "smooth_quant's scaling";
        }
      }
    }
  }
  return pl;
}

}  // namespace

model equalize_model(const model& in, const qconfig& cfg, std::vector<std::string>* notes) {
  check_runnable(proto(in));
  model m = in;
  std::vector<std::string> n;
  prepare_float_model(m, cfg, qz::read_algo_options(cfg), n);
  if (notes != nullptr)
    *notes = std::move(n);
  return m;
}

namespace {

/// Quantizes the float32 model `m` (the caller's copy, or the caller's model moved in).
model quantize_float32_model(model m, const qconfig& cfg, calibration_data_reader& reader,
                             quantize_report* report_out, const quantize_run_options& run);

model quantize_float32_copy(const model& in, const qconfig& cfg, calibration_data_reader& reader,
                            quantize_report* report_out, const quantize_run_options& run) {
  return quantize_float32_model(in, cfg, reader, report_out, run);
}

/// ConvertFP16ToFP32 = true on a float16 model (qz::converts_float16): it is quantized as the
/// float32 model it converts to (and stays float32), its float16 calibration samples converted on
/// the way.
model quantize_converted_float16(const model& in, const qconfig& cfg,
                                 calibration_data_reader& reader, quantize_report* report_out,
                                 const quantize_run_options& run) {
  model m = in;
  m.constants_to_initializers();
  qz::to_float32(m);
  qz::float32_reader r32(reader);
  quantize_report report;
  model q = quantize_float32_model(std::move(m), cfg, r32, &report, run);
  report.notes.insert(report.notes.begin(),
                      "graph: ConvertFP16ToFP32: the float16 model was converted to float32");
  if (report_out)
    *report_out = std::move(report);
  return q;
}

}  // namespace

model quantize_model(const model& in, const qconfig& cfg, calibration_data_reader& reader,
                     quantize_report* report_out, const quantize_run_options& run) {
  if (proto(in).functions_size() > 0)  // inlined first, by the overload below, on a copy
    return quantize_model(model(in), cfg, reader, report_out, run);
  check_runnable(proto(in));
  // QuantizeFP16 (fp16_model.cpp): a float16 model is quantized through a float32 copy; not
  // with UseMatMulNBits, which leaves everything but the MatMul weights as it is.
  if (!qz::uses_matmul_nbits(cfg) && qz::converts_float16(in, cfg))
    return quantize_converted_float16(in, cfg, reader, report_out, run);
  if (!qz::uses_matmul_nbits(cfg) && qz::float16_path(in, cfg))
    return qz::quantize_float16_model(in, cfg, reader, report_out, run, &quantize_float32_copy);
  return quantize_float32_model(in, cfg, reader, report_out, run);
}

model quantize_model(model&& in, const qconfig& cfg, calibration_data_reader& reader,
                     quantize_report* report_out, const quantize_run_options& run) {
  // Model-local functions are replaced by their bodies, so that the operators inside them are
  // quantized; the output has no functions left (ONNX Runtime runs it as it ran the input).
  check_runnable(proto(in));
  inline_local_functions(proto(in));
  if (!qz::uses_matmul_nbits(cfg) && qz::converts_float16(in, cfg))
    return quantize_converted_float16(in, cfg, reader, report_out, run);
  if (!qz::uses_matmul_nbits(cfg) && qz::float16_path(in, cfg))
    return qz::quantize_float16_model(in, cfg, reader, report_out, run, &quantize_float32_copy);
  return quantize_float32_model(std::move(in), cfg, reader, report_out, run);
}

namespace {

model quantize_float32_model(model m, const qconfig& cfg, calibration_data_reader& reader,
                             quantize_report* report_out, const quantize_run_options& run) {
  quantize_report report;
  // An evaluation folder that is missing or empty fails now, not after the quantization.
  if (const option_value* e = cfg.extra_options.find("EvalDataReader"); e && e->is_string()) {
    const option_value* m_v = cfg.extra_options.find("EvalMetrics");
    const bool metrics = m_v != nullptr && ((m_v->is_bool() && m_v->as_bool()) ||
                                            (m_v->is_array() && !m_v->as_array().empty()));
    if (metrics || run.eval_samples > 0)
      (void)npy_folder_reader(e->as_string(), "evaluation");
  }
  const qz::algo_options algos = qz::read_algo_options(cfg);
  // UseMatMulNBits changes the MatMul weights and nothing else (no graph passes, as ONNX
  // Runtime's MatMulNBits quantizer): the plan is made on the model as given, after the opset
  // conversion if one is asked for.
  if (qz::uses_matmul_nbits(cfg)) {
    const qz::graph_pass_options passes = qz::read_pass_options(cfg);
    if (passes.opset)
      report.notes.push_back("graph: " + qz::convert_opset_version(m, *passes.opset));
  }
  for (auto& note : reader.notes())
    report.notes.push_back(std::move(note));
  qz::plan pl = qz::uses_matmul_nbits(cfg)
                    ? plan_as_given(m, cfg)
                    : prepare_float_model(m, cfg, algos, report.notes, &reader);
  if (pl.opt.dynamic || pl.opt.matmul_nbits) {
    // No calibration (dynamic.cpp); the reader serves only the evaluation.
    const bool eval = run.eval_samples > 0 || !pl.opt.eval_metrics.empty();
    if (eval && reader.size() == std::size_t{0}) {
      throw config_error("quark.quantize.no_data",
                         std::string("evaluation (EvalMetrics / --eval) needs data: give a "
                                     "reader (or a folder) or set UseRandomData; ") +
                             (pl.opt.dynamic ? "dynamic quantization" : "UseMatMulNBits") +
                             " itself needs none");
    }
    const std::string float_bytes = eval ? m.to_bytes() : std::string();
    const qz::body_planner bodies = [&cfg](const std::vector<qz::node_ref>& refs) {
      return qz::make_plan(cfg, refs, [](const auto&, const auto&) {
        throw config_error("quark.config.value",
                           "a subgraph selector (start nodes, end nodes) does not reach into "
                           "If / Loop / Scan bodies");
        return std::vector<bool>{};
      });
    };
    if (pl.opt.matmul_nbits) {
      if (pl.opt.nbits_unused_specs) {
        report.notes.push_back(
            "UseMatMulNBits: global_config's tensor specs are not used (MatMulNBitsParams "
            "describes the weights; activations stay float)");
      }
      std::map<std::string, std::vector<double>> hessians;
      if (pl.opt.nbits_algo == qz::nbits_algorithm::gptq) {
        if (reader.size() == std::size_t{0}) {
          throw config_error("quark.quantize.no_data",
                             "MatMulNBitsParams.Algorithm \"GPTQ\" needs calibration data: give "
                             "a reader (or a folder) or set UseRandomData");
        }
        name_single_input(m, reader);
        hessians = qz::gptq_nbits_hessians(m, reader, pl.opt.calib_data_size, report.notes);
      }
      qz::quantize_matmul_nbits(
          m, pl, bodies, report,
          pl.opt.nbits_algo == qz::nbits_algorithm::gptq ? &hessians : nullptr);
    } else {
      qz::quantize_dynamic(m, pl, pl.opt.enable_subgraph ? &bodies : nullptr, report);
    }
    evaluate_against_float(report, pl.opt, float_bytes, m, reader, run,
                           reader.size().value_or(pl.opt.calib_data_size.value_or(1)));
    if (report_out)
      *report_out = std::move(report);
    return m;
  }
  m = qz::quantize_static(std::move(m), cfg, pl, algos, reader, report, run);
  if (report_out)
    *report_out = std::move(report);
  return m;
}

}  // namespace

std::unique_ptr<calibration_data_reader> default_reader(const std::filesystem::path& model_path,
                                                        const qconfig& cfg,
                                                        std::optional<std::uint64_t> seed) {
  return default_reader(model::load(model_path), cfg, seed);
}

std::unique_ptr<calibration_data_reader> default_reader(const model& m, const qconfig& cfg,
                                                        std::optional<std::uint64_t> seed) {
  // QuantizeFP16 / UseFP32Scale are quantize_model's to take (fp16_model.cpp): a float32 model
  // with QuantizeFP16 = true gets its error from there, not "not implemented" from the settings.
  const bool half = qz::float16_path(m, cfg);
  qconfig c = cfg;
  if (half) {
    c.extra_options.erase("QuantizeFP16");
    c.extra_options.erase("UseFP32Scale");
  }
  const qz::settings o = qz::read_settings(c);
  if (!o.use_random_data && (o.dynamic || o.matmul_nbits))
    return std::make_unique<memory_reader>(std::vector<calib_sample>{});  // needs no data
  if (!o.use_random_data) {
    throw config_error("quark.quantize.no_data",
                       "no calibration data: give a reader (or a folder) or set UseRandomData");
  }
  std::vector<input_signature> ins;
  for (const auto& v : m.inputs()) {
    auto t = dtype_from_onnx(v.elem_type);
    // A float16 model is calibrated through its float32 copy (QuantizeFP16): float32 samples.
    if (t == dtype_id::float16)
      t = dtype_id::float32;
    ins.push_back({v.name, t ? *t : dtype_id::float32, v.shape});
  }
  random_data_options ro;
  ro.count = o.calib_data_size.value_or(1);
  ro.shapes = o.random_shapes;
  ro.ranges = o.random_ranges;
  if (seed)
    ro.seed = *seed;
  return std::make_unique<random_reader>(std::move(ins), std::move(ro));
}

quantize_report quantize_model(const std::filesystem::path& model_in,
                               const std::filesystem::path& model_out, const qconfig& cfg,
                               calibration_data_reader& reader, const quantize_run_options& run) {
  std::error_code ec;
  if (std::filesystem::exists(model_out, ec) &&
      std::filesystem::equivalent(model_in, model_out, ec)) {
    throw frontend_error(
        "quark.quantize.same_path",
        "output '" + model_out.string() + "' is the input model; refusing to overwrite it");
  }
  const auto dir = model_out.parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
    throw frontend_error(
        "quark.quantize.output_dir",
        "output folder '" + dir.string() +
            (std::filesystem::exists(dir, ec) ? "' is not a folder" : "' does not exist"));
  }
  if (std::filesystem::is_directory(model_out, ec)) {
    throw frontend_error("quark.quantize.output_dir",
                         "output '" + model_out.string() + "' is a folder, not a file path");
  }
  // Whether the folder takes the output's temporary file, found out now rather than after
  // calibration (minutes on a large model); the probe removes its file.
  { const detail::atomic_file probe(model_out); }
  model in = model::load(model_in);
  quantize_report r;
  const model q = quantize_model(std::move(in), cfg, reader, &r, run);
  q.save(model_out, {.external_data = qz::read_settings(cfg).external_data});
  return r;
}

std::string summary_table(const quantize_report& r) {
  std::ostringstream os;
  if (r.dynamic) {
    os << "Quantization summary (dynamic: activations quantized at run time, opset "
       << r.opset_before;
  } else if (r.matmul_nbits) {
    os << "Quantization summary (MatMulNBits: MatMul weights only, no calibration, opset "
       << r.opset_before;
  } else {
    os << "Quantization summary (" << r.calibration_samples << " calibration sample"
       << (r.calibration_samples == 1 ? "" : "s") << ", opset " << r.opset_before;
  }
  if (r.opset_after != r.opset_before)
    os << " -> " << r.opset_after;
  os << ")\n";
  std::size_t w = 7;
  for (const auto& [op, c] : r.op_types)
    w = std::max(w, op.size());
  auto pad = [](const std::string& s, std::size_t n) {
    return s + std::string(n > s.size() ? n - s.size() : 0, ' ');
  };
  os << pad("Op type", w) << "  Quantized  Float\n";
  std::size_t tq = 0, tf = 0;
  for (const auto& [op, c] : r.op_types) {
    os << pad(op, w) << "  " << pad(std::to_string(c.quantized), 9) << "  " << c.kept_float << '\n';
    tq += c.quantized;
    tf += c.kept_float;
  }
  os << pad("Total", w) << "  " << pad(std::to_string(tq), 9) << "  " << tf << '\n';
  os << "\nTensors per data type:\n";
  for (const auto& [t, n] : r.tensors_per_type)
    os << "  " << pad(t, 8) << ' ' << n << '\n';
  if (std::all_of(r.tensors_per_type.begin(), r.tensors_per_type.end(),
                  [](const auto& e) { return e.second == 0; }))
    os << "  none: the model is written unchanged but for its opset and the graph passes\n";
  for (const auto& n : r.notes)
    os << "note: " << n << '\n';
  return os.str();
}

std::string tensors_json(const quantize_report& r) {
  std::ostringstream os;
  os.precision(9);
  os << "{\n  \"tensors\": [\n";
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    const auto& t = r.tensors[i];
    std::string name;
    for (char ch : t.name) {
      if (ch == '"' || ch == '\\')
        name += '\\';
      name += ch;
    }
    // JSON has no NaN / Inf: those print as null.
    auto num = [&](float v) -> std::ostream& {
      return std::isfinite(v) ? (os << v) : (os << "null");
    };
    os << "    {\"name\": \"" << name << "\", \"role\": \"" << t.role << "\", \"type\": \""
       << t.type << "\", \"min\": ";
    num(t.rmin) << ", \"max\": ";
    num(t.rmax) << ", \"axis\": " << t.axis << ", \"scale\": [";
    for (std::size_t k = 0; k < t.scale.size(); ++k)
      num(t.scale[k]) << (k + 1 < t.scale.size() ? ", " : "");
    os << "], \"zero_point\": [";
    for (std::size_t k = 0; k < t.zero_point.size(); ++k)
      os << (k ? ", " : "") << t.zero_point[k];
    os << "]}" << (i + 1 < r.tensors.size() ? "," : "") << '\n';
  }
  os << "  ]\n}\n";
  return os.str();
}

}  // namespace quark::onnx
