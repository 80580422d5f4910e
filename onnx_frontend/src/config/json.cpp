// SPDX-License-Identifier: MIT
// The JSON spelling of qconfig (docs/config.md). nlohmann/json stays in this file: the public
// header only speaks std::string. Every error names its JSON path.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <quark/onnx/config.hpp>

#include "config/text.hpp"

namespace quark::onnx {

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void type_error(const std::string& path, std::string_view expected, const json& got) {
  std::string shown = got.dump();
  if (shown.size() > 60)
    shown = shown.substr(0, 57) + "...";
  throw config_error("quark.config.type",
                     path + ": expected " + std::string(expected) + ", got " + shown);
}

[[noreturn]] void value_error(const std::string& path, const std::string& what) {
  throw config_error("quark.config.value", path + ": " + what);
}

std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// Rejects keys of `obj` not in `known`, suggesting the closest one.
void check_keys(const json& obj, const std::string& path,
                std::initializer_list<std::string_view> known,
                std::string_view hint_for_unknown = {}) {
  for (const auto& [key, unused] : obj.items()) {
    (void)unused;
    bool ok = false;
    for (auto k : known)
      ok = ok || k == key;
    if (ok)
      continue;
    std::string_view best;
    std::size_t best_d = std::string::npos;
    for (auto k : known) {
      std::size_t d = distance(key, k);
      // A key that is part of a known one ("granularity" in "quant_granularity") is a near miss.
      if (key.size() >= 4 && (k.find(key) != std::string_view::npos ||
                              std::string_view(key).find(k) != std::string_view::npos)) {
        d = std::min<std::size_t>(d, 1);
      }
      if (d < best_d) {
        best_d = d;
        best = k;
      }
    }
    std::string msg = (path.empty() ? key : path + "." + key) + ": unknown key";
    if (best_d <= std::max<std::size_t>(2, key.size() / 3)) {
      msg += "; did you mean \"" + std::string(best) + "\"?";
    } else {
      msg += " (known: " + join(known) + ")";
    }
    if (!hint_for_unknown.empty())
      msg += std::string(" ") + std::string(hint_for_unknown);
    throw config_error("quark.config.unknown_key", msg);
  }
}

// ---- option_value <-> json ---------------------------------------------------------------------

option_value to_value(const json& j, const std::string& path) {
  switch (j.type()) {
    case json::value_t::null:
      return option_value{};
    case json::value_t::boolean:
      return option_value(j.get<bool>());
    case json::value_t::number_integer:
      return option_value(j.get<std::int64_t>());
    case json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX))
        value_error(path, "integer out of range");
      return option_value(static_cast<std::int64_t>(u));
    }
    case json::value_t::number_float:
      return option_value(j.get<double>());
    case json::value_t::string:
      return option_value(j.get<std::string>());
    case json::value_t::array: {
      option_value::array_type a;
      std::size_t i = 0;
      for (const auto& item : j)
        a.push_back(to_value(item, path + "[" + std::to_string(i++) + "]"));
      return option_value(std::move(a));
    }
    case json::value_t::object: {
      option_value o = option_value::object();
      for (const auto& [k, v] : j.items())
        o.set(k, to_value(v, path + "." + k));
      return o;
    }
    default:
      type_error(path, "a JSON value", j);
  }
}

json from_value(const option_value& v) {
  switch (v.type()) {
    case option_value::kind::null:
      return nullptr;
    case option_value::kind::boolean:
      return v.as_bool();
    case option_value::kind::integer:
      return v.as_int();
    case option_value::kind::number:
      return v.as_number();
    case option_value::kind::string:
      return v.as_string();
    case option_value::kind::array: {
      json a = json::array();
      for (const auto& item : v.as_array())
        a.push_back(from_value(item));
      return a;
    }
    case option_value::kind::object: {
      json o = json::object();
      for (const auto& m : v.as_object())
        o[m.key] = from_value(m.value);
      return o;
    }
  }
  return nullptr;
}

// ---- typed readers -----------------------------------------------------------------------------

bool read_bool(const json& j, const std::string& path) {
  if (!j.is_boolean())
    type_error(path, "a boolean", j);
  return j.get<bool>();
}

int read_int(const json& j, const std::string& path) {
  if (!j.is_number_integer())
    type_error(path, "an integer", j);
  const auto i = j.get<std::int64_t>();
  if (!std::in_range<int>(i))
    value_error(path, "integer out of range");
  return static_cast<int>(i);
}

std::string read_string(const json& j, const std::string& path) {
  if (!j.is_string())
    type_error(path, "a string", j);
  return j.get<std::string>();
}

std::vector<std::string> read_strings(const json& j, const std::string& path) {
  if (!j.is_array())
    type_error(path, "a list of strings", j);
  std::vector<std::string> out;
  std::size_t i = 0;
  for (const auto& item : j)
    out.push_back(read_string(item, path + "[" + std::to_string(i++) + "]"));
  return out;
}

template <class E>
E read_enum(const json& j, const std::string& path, std::optional<E> (*parse)(std::string_view),
            std::initializer_list<std::string_view> valid) {
  const std::string s = read_string(j, path);
  const auto e = parse(s);
  if (!e)
    value_error(path, "unknown value \"" + s + "\" (valid: " + join(valid) + ")");
  return *e;
}

tensor_spec read_spec(const json& j, const std::string& path) {
  if (j.is_string()) {
    try {
      return make_spec(j.get<std::string>());
    } catch (const config_error& e) {
      throw config_error(e.id(), path + ": " + e.message());
    }
  }
  if (!j.is_object())
    type_error(path, "a spec object or a spec name", j);
  check_keys(j, path,
             {"spec", "symmetric", "scale_type", "calibration_method", "quant_granularity",
              "group_size", "axis", "block"});
  if (!j.contains("spec"))
    value_error(path, "missing \"spec\" (e.g. \"Int8Spec\")");
  tensor_spec s;
  try {
    s = make_spec(read_string(j.at("spec"), path + ".spec"));
  } catch (const config_error& e) {
    if (e.id() != "quark.config.unknown_spec")
      throw;
    throw config_error(e.id(), path + ".spec: " + e.message());
  }
  if (j.contains("symmetric"))
    s.symmetric = read_bool(j.at("symmetric"), path + ".symmetric");
  if (j.contains("scale_type")) {
    s.scale_type = read_enum<scale_kind>(j.at("scale_type"), path + ".scale_type",
                                         &parse_scale_kind, {"Float32", "PowerOf2", "Int16"});
  }
  if (j.contains("calibration_method")) {
    s.calibration_method = read_enum<calib_method>(
        j.at("calibration_method"), path + ".calibration_method", &parse_calib_method,
        {"MinMax", "MinMSE", "Percentile", "Entropy", "LayerwisePercentile", "Distribution"});
  }
  if (j.contains("quant_granularity")) {
    s.quant_granularity =
        read_enum<granularity>(j.at("quant_granularity"), path + ".quant_granularity",
                               &parse_granularity, {"Tensor", "Channel", "Group"});
  }
  if (j.contains("group_size"))
    s.group_size = read_int(j.at("group_size"), path + ".group_size");
  if (j.contains("axis")) {
    const auto& a = j.at("axis");
    s.axis = a.is_null() ? std::nullopt : std::optional<int>(read_int(a, path + ".axis"));
  }
  if (j.contains("block")) {
    const auto& b = j.at("block");
    const std::string bp = path + ".block";
    if (!b.is_object())
      type_error(bp, "an object", b);
    check_keys(b, bp,
               {"method", "block_size", "bit_width", "sub_block_size", "sub_block_shift_bits",
                "rounding_mode"});
    if (b.contains("method")) {
      s.block.method = read_enum<block_method>(b.at("method"), bp + ".method", &parse_block_method,
                                               {"none", "to_bfp", "to_bfp_prime", "ocp_mx"});
    }
    if (b.contains("block_size"))
      s.block.block_size = read_int(b.at("block_size"), bp + ".block_size");
    if (b.contains("bit_width"))
      s.block.bit_width = read_int(b.at("bit_width"), bp + ".bit_width");
    if (b.contains("sub_block_size")) {
      s.block.sub_block_size = read_int(b.at("sub_block_size"), bp + ".sub_block_size");
    }
    if (b.contains("sub_block_shift_bits")) {
      s.block.sub_block_shift_bits =
          read_int(b.at("sub_block_shift_bits"), bp + ".sub_block_shift_bits");
    }
    if (b.contains("rounding_mode")) {
      s.block.rounding_mode = read_int(b.at("rounding_mode"), bp + ".rounding_mode");
    }
  }
  return s;
}

std::optional<tensor_spec> read_opt_spec(const json& obj, const char* key,
                                         const std::string& path) {
  if (!obj.contains(key) || obj.at(key).is_null())
    return std::nullopt;
  return read_spec(obj.at(key), path + "." + key);
}

layer_config read_layer(const json& j, const std::string& path) {
  if (!j.is_object())
    type_error(path, "an object (a QLayerConfig)", j);
  check_keys(j, path, {"input_tensors", "output_tensors", "weight", "bias"});
  layer_config l;
  l.input_tensors = read_opt_spec(j, "input_tensors", path);
  l.output_tensors = read_opt_spec(j, "output_tensors", path);
  l.weight = read_opt_spec(j, "weight", path);
  l.bias = read_opt_spec(j, "bias", path);
  return l;
}

node_selector read_selector(const json& j, const std::string& path) {
  try {
    if (j.is_string())
      return node_selector::parse(j.get<std::string>());
    if (j.is_array()) {
      // Quark's tuple spelling: [["start", ...], ["end", ...]].
      if (j.size() != 2)
        type_error(path, "a subgraph [[start nodes], [end nodes]]", j);
      return node_selector::from_subgraph(
          {read_strings(j[0], path + "[0]"), read_strings(j[1], path + "[1]")});
    }
    if (j.is_object()) {
      check_keys(j, path, {"start_nodes", "end_nodes"});
      if (!j.contains("start_nodes") || !j.contains("end_nodes")) {
        value_error(path, "a subgraph needs \"start_nodes\" and \"end_nodes\"");
      }
      return node_selector::from_subgraph({read_strings(j.at("start_nodes"), path + ".start_nodes"),
                                           read_strings(j.at("end_nodes"), path + ".end_nodes")});
    }
  } catch (const config_error& e) {
    const std::string what = e.message();
    if (what.rfind(path, 0) == 0)
      throw;
    throw config_error(e.id(), path + ": " + what);
  }
  type_error(path, "a node name, a \"^regex\" or a subgraph", j);
}

std::vector<node_selector> read_selectors(const json& j, const std::string& path) {
  if (!j.is_array())
    type_error(path, "a list of node names, regexes or subgraphs", j);
  std::vector<node_selector> out;
  std::size_t i = 0;
  for (const auto& item : j)
    out.push_back(read_selector(item, path + "[" + std::to_string(i++) + "]"));
  return out;
}

algo_entry read_algo(const json& j, const std::string& path) {
  if (!j.is_object())
    type_error(path, "an object {\"name\": ..., parameters...}", j);
  if (!j.contains("name"))
    value_error(path, "missing \"name\" (e.g. \"cle\")");
  const std::string name = read_string(j.at("name"), path + ".name");
  const auto a = parse_algo_name(name);
  if (!a) {
    throw config_error("quark.config.unknown_algorithm",
                       path + ".name: unknown algorithm \"" + name +
                           "\" (valid: cle, smooth_quant, bias_correction, gptq, adaround, "
                           "adaquant, quarot, auto_mixprecision; or their Quark class names)");
  }
  algo_entry e;
  e.name = *a;
  for (const auto& [k, v] : j.items()) {
    if (k == "name")
      continue;
    e.params.set(k, to_value(v, path + "." + k));
  }
  check_algo_params(e.name, e.params, path);
  return e;
}

option_map read_extra_options(const json& j, const std::string& path) {
  if (!j.is_object())
    type_error(path, "an object", j);
  option_map o;
  for (const auto& [k, v] : j.items()) {
    const std::string kp = path + "." + k;
    const option_value value = to_value(v, kp);
    if (find_option(k) == nullptr) {
      std::string msg = kp + ": unknown extra option";
      const auto near = closest_option(k);
      if (!near.empty())
        msg += "; did you mean \"" + std::string(near) + "\"?";
      throw config_error("quark.config.unknown_key", msg + " (docs/config.md lists every key)");
    }
    try {
      o.set(k, value);
    } catch (const not_implemented& e) {
      throw not_implemented(e.id(), path + "." + e.message());
    } catch (const config_error& e) {
      throw config_error(e.id(), path + "." + e.message());
    }
  }
  return o;
}

constexpr std::string_view legacy_hint =
    "(legacy names map as follows: enable_npu_cnn -> extra_options.EnableNPUCnn, "
    "enable_npu_transformer -> extra_options.EnableNPUTransformer, subgraphs_to_exclude and "
    "nodes_to_exclude -> exclude; see docs/config.md)";

// ---- writers
// -------------------------------------------------------------------------------------

json write_spec(const tensor_spec& s) {
  json j = json::object();
  j["spec"] = std::string(spec_class_name(s.name));
  j["symmetric"] = s.symmetric;
  j["scale_type"] = std::string(to_string(s.scale_type));
  j["calibration_method"] = std::string(to_string(s.calibration_method));
  j["quant_granularity"] = std::string(to_string(s.quant_granularity));
  if (s.group_size != 0)
    j["group_size"] = s.group_size;
  if (s.axis)
    j["axis"] = *s.axis;
  if (s.block.method != block_method::none || !(s.block == block_params{})) {
    json b = json::object();
    b["method"] = std::string(to_string(s.block.method));
    b["block_size"] = s.block.block_size;
    b["bit_width"] = s.block.bit_width;
    b["sub_block_size"] = s.block.sub_block_size;
    b["sub_block_shift_bits"] = s.block.sub_block_shift_bits;
    b["rounding_mode"] = s.block.rounding_mode;
    j["block"] = b;
  }
  return j;
}

json write_opt_spec(const std::optional<tensor_spec>& s) {
  return s ? write_spec(*s) : json(nullptr);
}

json write_layer(const layer_config& l) {
  json j = json::object();
  j["input_tensors"] = write_opt_spec(l.input_tensors);
  j["output_tensors"] = write_opt_spec(l.output_tensors);
  j["weight"] = write_opt_spec(l.weight);
  j["bias"] = write_opt_spec(l.bias);
  return j;
}

json write_selector(const node_selector& s) {
  if (s.kind() != selector_kind::subgraph)
    return s.text();
  json j = json::object();
  j["start_nodes"] = s.graph().start_nodes;
  j["end_nodes"] = s.graph().end_nodes;
  return j;
}

}  // namespace

qconfig config_from_json(std::string_view text) {
  json root;
  // JSON leaves a repeated key to the reader (nlohmann keeps the last, as Python's json does);
  // in a configuration it is a slip whichever copy wins, so it is an error naming the key.
  struct level {
    std::string name;  ///< for the message: "\"extra_options\"", "an entry of \"x\""
    bool array = false;
    std::set<std::string> keys;
  };
  std::vector<level> open;
  std::string last_key;
  const json::parser_callback_t no_repeats = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open.push_back({open.empty()        ? std::string("the top level")
                        : open.back().array ? "an entry of \"" + open.back().name + "\""
                                            : "\"" + last_key + "\"",
                        false,
                        {}});
        break;
      case json::parse_event_t::array_start:
        open.push_back({last_key, true, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty())
          open.pop_back();
        break;
      case json::parse_event_t::key:
        last_key = parsed.get<std::string>();
        if (!open.empty() && !open.back().keys.insert(last_key).second) {
          throw config_error("quark.config.duplicate_key",
                             "key \"" + last_key + "\" appears twice in " + open.back().name);
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    root = json::parse(text.begin(), text.end(), no_repeats);
  } catch (const json::parse_error& e) {
    throw config_error("quark.config.json", std::string("malformed JSON: ") + e.what());
  } catch (const json::out_of_range& e) {
    // A number beyond the double range (1e999): nlohmann's message quotes it.
    throw config_error("quark.config.json", std::string("malformed JSON: ") + e.what());
  }
  if (!root.is_object())
    type_error("(root)", "an object", root);
  check_keys(root, "",
             {"global_config", "specific_layer_config", "layer_type_config", "exclude",
              "algo_config", "use_external_data_format", "use_dynamic_quant", "extra_options"},
             legacy_hint);
  qconfig cfg;
  if (root.contains("global_config")) {
    cfg.global_config = read_layer(root.at("global_config"), "global_config");
  }
  if (root.contains("specific_layer_config")) {
    const auto& list = root.at("specific_layer_config");
    const std::string path = "specific_layer_config";
    if (!list.is_array())
      type_error(path, "a list of {\"config\", \"layers\"} objects", list);
    std::size_t i = 0;
    for (const auto& item : list) {
      const std::string ip = path + "[" + std::to_string(i++) + "]";
      if (!item.is_object())
        type_error(ip, "an object {\"config\": ..., \"layers\": [...]}", item);
      check_keys(item, ip, {"config", "layers"});
      if (!item.contains("config") || !item.contains("layers")) {
        value_error(ip, "needs \"config\" and \"layers\"");
      }
      cfg.specific_layer_config.push_back({read_layer(item.at("config"), ip + ".config"),
                                           read_selectors(item.at("layers"), ip + ".layers")});
    }
  }
  if (root.contains("layer_type_config")) {
    const auto& list = root.at("layer_type_config");
    const std::string path = "layer_type_config";
    if (!list.is_array())
      type_error(path, "a list of {\"config\", \"op_types\"} objects", list);
    std::size_t i = 0;
    for (const auto& item : list) {
      const std::string ip = path + "[" + std::to_string(i++) + "]";
      if (!item.is_object())
        type_error(ip, "an object {\"config\": ..., \"op_types\": [...]}", item);
      check_keys(item, ip, {"config", "op_types"});
      if (!item.contains("config") || !item.contains("op_types")) {
        value_error(ip, "needs \"config\" (an object, or null to exclude) and \"op_types\"");
      }
      op_type_rule r;
      if (!item.at("config").is_null())
        r.config = read_layer(item.at("config"), ip + ".config");
      r.op_types = read_strings(item.at("op_types"), ip + ".op_types");
      cfg.layer_type_config.push_back(std::move(r));
    }
  }
  if (root.contains("exclude"))
    cfg.exclude = read_selectors(root.at("exclude"), "exclude");
  if (root.contains("algo_config")) {
    const auto& list = root.at("algo_config");
    if (!list.is_array() && !list.is_null())
      type_error("algo_config", "a list", list);
    std::size_t i = 0;
    if (list.is_array()) {
      for (const auto& item : list) {
        cfg.algo_config.push_back(read_algo(item, "algo_config[" + std::to_string(i++) + "]"));
      }
    }
  }
  if (root.contains("use_external_data_format")) {
    cfg.use_external_data_format =
        read_bool(root.at("use_external_data_format"), "use_external_data_format");
  }
  if (root.contains("use_dynamic_quant"))
    cfg.use_dynamic_quant = read_bool(root.at("use_dynamic_quant"), "use_dynamic_quant");
  if (root.contains("extra_options") && !root.at("extra_options").is_null()) {
    cfg.extra_options = read_extra_options(root.at("extra_options"), "extra_options");
  }
  return cfg;
}

std::string to_json(const qconfig& cfg) {
  json root = json::object();
  root["global_config"] = write_layer(cfg.global_config);
  json specific = json::array();
  for (const auto& r : cfg.specific_layer_config) {
    json layers = json::array();
    for (const auto& s : r.layers)
      layers.push_back(write_selector(s));
    specific.push_back(json{{"config", write_layer(r.config)}, {"layers", layers}});
  }
  root["specific_layer_config"] = specific;
  json types = json::array();
  for (const auto& r : cfg.layer_type_config) {
    types.push_back(json{{"config", r.config ? write_layer(*r.config) : json(nullptr)},
                         {"op_types", r.op_types}});
  }
  root["layer_type_config"] = types;
  json excl = json::array();
  for (const auto& s : cfg.exclude)
    excl.push_back(write_selector(s));
  root["exclude"] = excl;
  json algos = json::array();
  for (const auto& a : cfg.algo_config) {
    json e = json::object();
    e["name"] = std::string(to_string(a.name));
    for (const auto& m : a.params.as_object())
      e[m.key] = from_value(m.value);
    algos.push_back(e);
  }
  root["algo_config"] = algos;
  root["use_external_data_format"] = cfg.use_external_data_format;
  if (cfg.use_dynamic_quant)
    root["use_dynamic_quant"] = true;
  json extra = json::object();
  for (const auto& m : cfg.extra_options.entries())
    extra[m.key] = from_value(m.value);
  root["extra_options"] = extra;
  return root.dump(2) + "\n";
}

qconfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw config_error("quark.config.io", "cannot open config file \"" + path + "\"");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return config_from_json(ss.str());
  } catch (const not_implemented& e) {
    throw not_implemented(e.id(), path + ": " + e.message());
  } catch (const config_error& e) {
    throw config_error(e.id(), path + ": " + e.message());
  }
}

void save_config(const qconfig& cfg, const std::string& path) {
  const std::string text = to_json(cfg);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw config_error("quark.config.io", "cannot write config file \"" + path + "\"");
  out << text;
  if (!out)
    throw config_error("quark.config.io", "failed writing config file \"" + path + "\"");
}

}  // namespace quark::onnx
