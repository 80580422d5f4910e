// SPDX-License-Identifier: MIT
// The quantization configuration of the ONNX frontend, mirroring Quark's QConfig (seed 000,
// "Quantization Configuration"): a global QLayerConfig of tensor specs, per-node and per-op-type
// overrides, exclusions, algorithm entries, use_external_data_format and extra_options. The
// tensor-spec defaults follow quark-spec.md §1.1; validation follows §1.4, §3.2, §4.0 and §6.
//
// The same configuration has two spellings: this C++ API and a JSON file (config_from_json /
// to_json, documented in docs/config.md). Presets are in presets.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <quark/dtype/dtype_id.hpp>
#include <quark/onnx/options.hpp>

namespace quark::onnx {

// ---- tensor specs ----------------------------------------------------------------------------

/// Quark's ScaleType: how a scale is represented.
enum class scale_kind : std::uint8_t {
  float32,     ///< ScaleType.Float32
  power_of_2,  ///< ScaleType.PowerOf2: s = 2^-pos
  int16,       ///< ScaleType.Int16: s = M * 2^-N with int16 M (quark-spec §2.3)
};

/// Quark's CalibMethod.
enum class calib_method : std::uint8_t {
  min_max,
  min_mse,
  percentile,
  entropy,
  layerwise_percentile,
  distribution,  ///< FP8 only (seed 003)
};

/// Quark's QuantGranularity.
enum class granularity : std::uint8_t { tensor, channel, group };

/// Which named spec a tensor_spec was made from (Quark's spec classes, one per enumerator).
enum class spec_name : std::uint8_t {
  int8,
  uint8,
  xint8,
  int16,
  xint16,
  uint16,
  int32,
  uint32,
  int4,
  uint4,
  bfloat16,
  float16,
  fp8_e4m3fn,
  fp8_e4m3fnuz,
  fp8_e5m2,
  fp8_e5m2fnuz,
  bfp16,
  mx4,
  mx6,
  mx9,
  mxfp8_e5m2,
  mxfp8_e4m3,
  mxfp6_e3m2,
  mxfp6_e2m3,
  mxfp4_e2m1,
  mxint8,
};

/// The kind of block quantization a block spec uses (none for element-wise specs).
enum class block_method : std::uint8_t {
  none,
  to_bfp,        ///< BFP16: shared 8-bit exponent per block (quark-spec §1.8)
  to_bfp_prime,  ///< MX4/MX6/MX9: shared exponent plus per-pair micro-exponents (§1.9)
  ocp_mx,        ///< OCP microscaling, E8M0 scale per block of 32 (§1.7)
};

/// Block parameters of BFP16 / MX4/6/9 / OCP MX specs (the BFPQuantizeDequantize and
/// MXQuantizeDequantize attributes, quark-spec §1.7–§1.10). Unused fields are 0.
struct block_params {
  block_method method = block_method::none;
  int block_size = 0;
  int bit_width = 0;             ///< BFP: total bits (16 -> 7 magnitude bits); 0 for OCP MX
  int sub_block_size = 0;        ///< MX4/6/9: 2
  int sub_block_shift_bits = 0;  ///< MX4/6/9: 1
  int rounding_mode = 0;         ///< 0 half away from zero, 1 half up, 2 half to even
  friend bool operator==(const block_params&, const block_params&) = default;
};

/// One tensor spec (Quark's QTensorConfig: Int8Spec(), XInt8Spec(), BFP16Spec(), ...). Build one
/// with make_spec() or the named functions below, then change fields as needed.
///
/// ```cpp
/// tensor_spec s = int8_spec();              // symmetric, Float32, Percentile, per tensor
/// s.calibration_method = calib_method::min_max;
/// tensor_spec w = int8_spec();
/// w.quant_granularity = granularity::channel;  // axis: the op's default (Conv 0, MatMul 1, ...)
/// ```
struct tensor_spec {
  spec_name name = spec_name::int8;
  /// The element type: int8 for Int8Spec/XInt8Spec/MXInt8Spec, float8_e4m3fn for MXFP8E4M3Spec,
  /// ...; undefined for BFP16 and MX4/6/9, whose elements are sign-magnitude integers in `block`.
  dtype_id dtype = dtype_id::int8;
  bool symmetric = true;
  scale_kind scale_type = scale_kind::float32;
  calib_method calibration_method = calib_method::percentile;
  granularity quant_granularity = granularity::tensor;
  /// Elements per group for granularity::group (must be > 0 then, 0 otherwise).
  int group_size = 0;
  /// Channel axis (granularity::channel), group axis (group) or block axis (block specs);
  /// nullopt means the default: the op's channel axis (quark-spec §5.2), 1 for block specs.
  std::optional<int> axis;
  block_params block;

  bool is_block() const noexcept { return block.method != block_method::none; }
  friend bool operator==(const tensor_spec&, const tensor_spec&) = default;
};

/// Quark's class name: "Int8Spec", "XInt8Spec", "MXFP8E4M3Spec", ...
std::string_view spec_class_name(spec_name n) noexcept;
/// Parses a class name ("Int8Spec"; the "Spec" suffix and case are optional: "int8", "MXINT8").
std::optional<spec_name> parse_spec_name(std::string_view s) noexcept;
/// Every spec name, in enum order.
std::span<const spec_name> all_spec_names() noexcept;

/// The spec `n` with the defaults of quark-spec §1.1 (Int4/UInt4 and FP8 specs, which Quark's
/// spec.py lacks, follow seed 000: signed -> symmetric; FP8 calibrates with Distribution).
tensor_spec make_spec(spec_name n);
/// make_spec(parse_spec_name(s)); throws config_error "quark.config.unknown_spec" listing the
/// valid names.
tensor_spec make_spec(std::string_view class_name);

inline tensor_spec int8_spec() {
  return make_spec(spec_name::int8);
}
inline tensor_spec uint8_spec() {
  return make_spec(spec_name::uint8);
}
inline tensor_spec xint8_spec() {
  return make_spec(spec_name::xint8);
}
inline tensor_spec int16_spec() {
  return make_spec(spec_name::int16);
}
inline tensor_spec xint16_spec() {
  return make_spec(spec_name::xint16);
}
inline tensor_spec uint16_spec() {
  return make_spec(spec_name::uint16);
}
inline tensor_spec int32_spec() {
  return make_spec(spec_name::int32);
}
inline tensor_spec uint32_spec() {
  return make_spec(spec_name::uint32);
}
inline tensor_spec int4_spec() {
  return make_spec(spec_name::int4);
}
inline tensor_spec uint4_spec() {
  return make_spec(spec_name::uint4);
}
inline tensor_spec bfloat16_spec() {
  return make_spec(spec_name::bfloat16);
}
inline tensor_spec float16_spec() {
  return make_spec(spec_name::float16);
}
inline tensor_spec bfp16_spec() {
  return make_spec(spec_name::bfp16);
}

/// True for Int*/UInt*/XInt* specs (integer grid with a scale and zero point).
bool is_integer_spec(const tensor_spec& s) noexcept;
/// True for BFloat16Spec, Float16Spec and the FP8 specs (element-wise float types).
bool is_float_spec(const tensor_spec& s) noexcept;

std::string_view to_string(scale_kind k) noexcept;    ///< "Float32", "PowerOf2", "Int16"
std::string_view to_string(calib_method m) noexcept;  ///< "MinMax", "MinMSE", ...
std::string_view to_string(granularity g) noexcept;   ///< "Tensor", "Channel", "Group"
std::string_view to_string(
    block_method m) noexcept;  ///< "none", "to_bfp", "to_bfp_prime", "ocp_mx"
std::optional<scale_kind> parse_scale_kind(std::string_view s) noexcept;
std::optional<calib_method> parse_calib_method(std::string_view s) noexcept;
std::optional<granularity> parse_granularity(std::string_view s) noexcept;
std::optional<block_method> parse_block_method(std::string_view s) noexcept;

// ---- layers and selectors --------------------------------------------------------------------

/// Quark's QLayerConfig: the specs of one layer's tensors. An empty optional means "not set here":
/// a per-layer config falls back to the global config role by role; in the global config, no
/// input_tensors spec leaves activations in float, no weight spec leaves weights in float,
/// output_tensors falls back to input_tensors, and no bias spec means the bias follows
/// QuantizeBias / Int32Bias / Int16Bias.
struct layer_config {
  std::optional<tensor_spec> input_tensors;
  std::optional<tensor_spec> output_tensors;
  std::optional<tensor_spec> weight;
  std::optional<tensor_spec> bias;
  friend bool operator==(const layer_config&, const layer_config&) = default;
};

/// The role of a tensor at a node.
enum class tensor_role : std::uint8_t { input, output, weight, bias };

/// A set of nodes given as start and end nodes: every node on a path from a start node to an end
/// node, both included (Quark's `(["Conv1", "Conv2"], ["Relu9", "MatMul10"])`).
struct subgraph {
  std::vector<std::string> start_nodes;
  std::vector<std::string> end_nodes;
  friend bool operator==(const subgraph&, const subgraph&) = default;
};

/// How a node_selector matches.
enum class selector_kind : std::uint8_t {
  name,      ///< exact node name
  regex,     ///< a pattern starting with '^', matched from the start of the name (ECMAScript)
  subgraph,  ///< a (start nodes, end nodes) subgraph
};

/// One entry of specific_layer_config's lists or of exclude: a node name, a regular expression
/// (any string starting with '^') or a subgraph.
///
/// ```cpp
/// auto a = node_selector::parse("/conv1/Conv");      // name
/// auto b = node_selector::parse("^/layer0/.*");      // regex; bad syntax throws
/// quark.config.regex auto c = node_selector::from_subgraph({{"Conv1"}, {"Relu9"}});
/// ```
class node_selector {
 public:
  /// A name, or a regex when `s` starts with '^'.
  static node_selector parse(std::string_view s);
  static node_selector from_subgraph(subgraph g);

  selector_kind kind() const noexcept { return kind_; }
  /// The node name or the pattern (empty for subgraphs).
  const std::string& text() const noexcept { return text_; }
  /// The subgraph (empty for names and regexes).
  const subgraph& graph() const noexcept { return graph_; }

  /// For names and regexes: does `node_name` match? Always false for subgraphs (those need the
  /// graph: see node_query::in_subgraph).
  bool matches_name(std::string_view node_name) const;

  friend bool operator==(const node_selector& a, const node_selector& b) {
    return a.kind_ == b.kind_ && a.text_ == b.text_ && a.graph_ == b.graph_;
  }

 private:
  selector_kind kind_ = selector_kind::name;
  std::string text_;
  subgraph graph_;
  std::shared_ptr<const std::regex> regex_;
};

/// specific_layer_config entry: `config` applies to every node matched by one of `layers`.
struct layer_rule {
  layer_config config;
  std::vector<node_selector> layers;
  friend bool operator==(const layer_rule&, const layer_rule&) = default;
};

/// layer_type_config entry: `config` applies to every node whose op type is in `op_types`; an empty
/// config (Quark's None key) excludes those op types from quantization.
struct op_type_rule {
  std::optional<layer_config> config;
  std::vector<std::string> op_types;
  friend bool operator==(const op_type_rule&, const op_type_rule&) = default;
};

// ---- algorithms ------------------------------------------------------------------------------

/// The algorithms algo_config may name (quark-spec §10). They are parsed and validated here; the
/// algorithms themselves come with a later issue, and the quantizer rejects them until then.
enum class algo_name : std::uint8_t {
  cle,
  smooth_quant,
  bias_correction,
  gptq,
  adaround,
  adaquant,
  quarot,
  auto_mixprecision
};

/// "cle", "smooth_quant", ... (canonical); parse also accepts Quark's class names ("CLEConfig").
std::string_view to_string(algo_name a) noexcept;
std::optional<algo_name> parse_algo_name(std::string_view s) noexcept;

/// One algo_config element: the algorithm and its explicitly given parameters (an object whose keys
/// are the Quark config fields, e.g. {"cle_steps": 2}). Unknown parameters and wrong types are
/// rejected when the entry is made or parsed.
struct algo_entry {
  algo_name name = algo_name::cle;
  option_value params = option_value::object();
  friend bool operator==(const algo_entry&, const algo_entry&) = default;
};

/// Checks `params` against the parameter table of `name`; `where` prefixes error messages.
void check_algo_params(algo_name name, const option_value& params, std::string_view where);

/// The value of parameter `key` of `a`: explicit, else the documented default.
option_value algo_param(const algo_entry& a, std::string_view key);

// ---- the configuration -------------------------------------------------------------------------

/// Quark's QConfig. Default-constructed, it is Quark's default: input_tensors and weight Int8Spec.
///
/// ```cpp
/// qconfig cfg;                                         // A8W8-like default
/// cfg.global_config.weight->quant_granularity = granularity::channel;
/// cfg.exclude.push_back(node_selector::parse("^/head/.*"));
/// cfg.extra_options.set("UseRandomData", true);
/// cfg.validate();                                      // throws config_error on inconsistencies
/// ```
struct qconfig {
  layer_config global_config{.input_tensors = int8_spec(),
                             .output_tensors = std::nullopt,
                             .weight = int8_spec(),
                             .bias = std::nullopt};
  std::vector<layer_rule> specific_layer_config;
  std::vector<op_type_rule> layer_type_config;
  std::vector<node_selector> exclude;
  std::vector<algo_entry> algo_config;
  bool use_external_data_format = false;
  /// Dynamic quantization (Quark's QuantizationConfig.use_dynamic_quant, preset
  /// UINT8_DYNAMIC_QUANT; ONNX Runtime's quantize_dynamic): no calibration. Weights of MatMul and
  /// Conv are stored quantized; their activations are quantized to uint8 at run time by
  /// DynamicQuantizeLinear and the products run in MatMulInteger / ConvInteger
  /// (docs/quantizer.md, "Dynamic quantization").
  bool use_dynamic_quant = false;
  option_map extra_options;

  /// Checks the rules Quark enforces (quark-spec §1.4 XINT8 constraints, §3.2, §4.0, §6, and the
  /// seed's per-option constraints). Throws config_error ("quark.config.value",
  /// "quark.config.conflict") whose message names the field or option.
  void validate() const;

  /// extra_options with every implemented key resolved: explicit values, fixed defaults, and the
  /// context-dependent defaults computed from the global specs (ActivationSymmetric, Int32Bias,
  /// AddQDQPairToWeight, CalibTensorRangeSymmetric, NumBins, EnableNPUCnn, ...).
  ///
  /// ```cpp
  /// auto opts = cfg.effective_options();
  /// bool int32_bias = opts.get<bool>("Int32Bias");
  /// ```
  option_map effective_options() const;

  friend bool operator==(const qconfig&, const qconfig&) = default;
};

/// What the quantizer needs to know about a node to pick its configuration.
struct node_query {
  std::string_view name;
  std::string_view op_type;
  /// Is the node inside `g`? Supplied by the graph layer; may be empty when the configuration has
  /// no subgraph selectors (a subgraph selector then throws quark.config.value).
  std::function<bool(const subgraph& g)> in_subgraph;
};

/// Why a node is or is not quantized.
enum class node_decision : std::uint8_t {
  excluded,             ///< matched `exclude`
  excluded_by_op_type,  ///< layer_type_config maps its op type to None
  specific,             ///< matched specific_layer_config
  by_op_type,           ///< matched layer_type_config
  global,               ///< global_config
};

/// The configuration chosen for a node.
struct node_plan {
  node_decision decision = node_decision::global;
  /// The layer config to use (nullptr when excluded). Points into the qconfig.
  const layer_config* config = nullptr;
  bool quantized() const noexcept { return config != nullptr; }
};

/// Chooses the configuration for `node`: exclude first, then specific_layer_config (the last
/// matching rule wins, as later entries override earlier ones in Quark), then layer_type_config
/// (last match wins; a None config excludes), then global_config.
node_plan plan_node(const qconfig& cfg, const node_query& node);

/// The spec for a tensor of role `role` at a node configured by `layer`: the layer's own spec,
/// else the global config's, and for outputs finally the input_tensors spec. nullopt means "keep
/// float" (or, for the bias, "derive from QuantizeBias / Int32Bias / Int16Bias").
///
/// ```cpp
/// auto plan = plan_node(cfg, {.name = "/conv1/Conv", .op_type = "Conv"});
/// if (plan.quantized()) {
///   auto w = effective_spec(cfg, *plan.config, tensor_role::weight);
/// }
/// ```
std::optional<tensor_spec> effective_spec(const qconfig& cfg, const layer_config& layer,
                                          tensor_role role);

// ---- JSON ------------------------------------------------------------------------------------

/// Parses a configuration from JSON text (format: docs/config.md). Errors are config_error with
/// the JSON path, e.g. "global_config.weight.symmetric: expected a boolean, got "yes"", and
/// not_implemented for keys quark-cpp does not implement yet. Does not call validate().
qconfig config_from_json(std::string_view text);
/// Reads and parses a file; I/O failures throw config_error "quark.config.io".
qconfig load_config(const std::string& path);
/// JSON text of `cfg` (2-space indent); config_from_json(to_json(c)) == c.
std::string to_json(const qconfig& cfg);
/// Writes to_json(cfg) to `path`.
void save_config(const qconfig& cfg, const std::string& path);

}  // namespace quark::onnx
