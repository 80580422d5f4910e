// SPDX-License-Identifier: MIT
// The extra_options of a quantization configuration: a JSON-shaped value type (option_value), the
// registry of every key Quark documents (name, category, value type, default, doc string, whether
// quark-cpp implements it), and the extra_options container with a typed accessor.
//
// Source of truth: seed 000 ("Full List of Quantization Configuration Features", the extra_options
// list and its 11 categories) and quark-spec.md Appendix A. The categories, types and defaults in
// the registry are ours, written from those documents; docs/config.md lists every key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <quark/core/error.hpp>
#include <quark/dtype/dtype_id.hpp>

namespace quark::onnx {

struct option_member;

/// A JSON-shaped value: null, boolean, integer, number, string, array or object (objects keep
/// insertion order). It is how extra options and algorithm parameters are stored; typed views are
/// obtained with `option_cast<T>` or `option_map::get<T>`.
///
/// ```cpp
/// option_value v = option_value::array({"Conv", "Gemm"});
/// auto names = option_cast<std::vector<std::string>>(v, "OpTypesToQuantize");
/// ```
class option_value {
 public:
  enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };
  using array_type = std::vector<option_value>;
  using object_type = std::vector<option_member>;

  option_value();
  option_value(std::nullptr_t);      // NOLINT: implicit by design (JSON-like)
  option_value(bool b);              // NOLINT: implicit by design (JSON-like)
  option_value(int i);               // NOLINT: implicit by design (JSON-like)
  option_value(long i);              // NOLINT: implicit by design (JSON-like)
  option_value(long long i);         // NOLINT: implicit by design (JSON-like)
  option_value(double d);            // NOLINT: implicit by design (JSON-like)
  option_value(const char* s);       // NOLINT: implicit by design (JSON-like)
  option_value(std::string s);       // NOLINT: implicit by design (JSON-like)
  option_value(std::string_view s);  // NOLINT: implicit by design (JSON-like)
  option_value(array_type a);        // NOLINT
  option_value(object_type o);       // NOLINT

  /// An array from a brace list: `option_value::array({1, 2, 3})`.
  static option_value array(std::initializer_list<option_value> items);
  /// An empty object; fill it with `set()`.
  static option_value object();

  kind type() const noexcept { return static_cast<kind>(v_.index()); }
  bool is_null() const noexcept { return type() == kind::null; }
  bool is_bool() const noexcept { return type() == kind::boolean; }
  bool is_int() const noexcept { return type() == kind::integer; }
  /// True for integers too: every integer is a number.
  bool is_number() const noexcept { return is_int() || type() == kind::number; }
  bool is_string() const noexcept { return type() == kind::string; }
  bool is_array() const noexcept { return type() == kind::array; }
  bool is_object() const noexcept { return type() == kind::object; }

  // Checked accessors; they throw config_error "quark.config.type" naming only the expected type
  // (callers that know the key or JSON path use option_cast, which names it).
  bool as_bool() const;
  std::int64_t as_int() const;
  double as_number() const;
  const std::string& as_string() const;
  const array_type& as_array() const;
  const object_type& as_object() const;

  /// Member `key` of an object, nullptr when absent (or when this is not an object).
  const option_value* find(std::string_view key) const noexcept;
  /// Sets (or replaces) member `key`; a null value first becomes an empty object.
  option_value& set(std::string_view key, option_value value);

  friend bool operator==(const option_value& a, const option_value& b);

 private:
  std::variant<std::monostate, bool, std::int64_t, double, std::string, array_type, object_type> v_;
};

/// One member of an object value.
struct option_member {
  std::string key;
  option_value value;
  friend bool operator==(const option_member&, const option_member&) = default;
};

// Defined here, where option_member is complete (Clang instantiates the vector members eagerly).
inline option_value::option_value() = default;
inline option_value::option_value(std::nullptr_t) {
}
inline option_value::option_value(bool b) : v_(b) {
}
inline option_value::option_value(int i) : v_(std::int64_t{i}) {
}
inline option_value::option_value(long i) : v_(std::int64_t{i}) {
}
inline option_value::option_value(long long i) : v_(std::int64_t{i}) {
}
inline option_value::option_value(double d) : v_(d) {
}
inline option_value::option_value(const char* s) : v_(std::string(s)) {
}
inline option_value::option_value(std::string s) : v_(std::move(s)) {
}
inline option_value::option_value(std::string_view s) : v_(std::string(s)) {
}
inline option_value::option_value(array_type a) : v_(std::move(a)) {
}
inline option_value::option_value(object_type o) : v_(std::move(o)) {
}
inline option_value option_value::array(std::initializer_list<option_value> items) {
  return option_value(array_type(items));
}
inline option_value option_value::object() {
  return option_value(object_type{});
}

/// "null", "a boolean", "an integer", "a number", "a string", "an array", "an object".
std::string_view describe(option_value::kind k) noexcept;

/// Compact JSON text of a value (used in messages and docs).
std::string to_string(const option_value& v);

// ---- the registry ------------------------------------------------------------------------------

/// The 11 categories of seed 000's "Extra Options — Categorized Summary" table (same numbers).
enum class option_category : std::uint8_t {
  preprocessing = 1,     ///< graph simplification, fusion, BN folding, layout/opset conversion
  target_selection = 2,  ///< which op types / nodes / subgraphs are quantized
  qdq_management = 3,    ///< QDQ insertion style and removal of redundant QDQ pairs
  calibration = 4,       ///< range symmetry, smoothing, percentiles, random data, overrides, ...
  bias = 5,              ///< bias quantization (int32 / int16 / like weights) and bias scale
  scale_and_type = 6,    ///< scale representation and reduced-range numeric types
  npu_adaptation = 7,    ///< DPU approximations and NPU position adjustments
  block_formats = 8,     ///< BF16 / BFP / MX specific options
  matmul_nbits = 9,      ///< MatMulNBits weight-only LLM quantization
  runtime = 10,          ///< execution providers, temp dirs, shapes, custom ops, crypto
  debug_and_eval = 11,   ///< logging, debug output, evaluation against the float model
};

/// "Preprocessing & Graph Optimization", ... (the seed's category titles).
std::string_view category_title(option_category c) noexcept;

/// The shape an option's value must have. `nullable` in option_info says whether null is also
/// legal.
enum class option_type : std::uint8_t {
  boolean,
  integer,
  number,  ///< integer or floating point
  string,
  string_list,       ///< ["Conv", "Gemm"]
  number_list,       ///< [99.99, 99.999]
  string_int_map,    ///< {"MatMul": 1}
  shape_map,         ///< {"input": [1, 3, 224, 224]}
  range_map,         ///< {"input": [0.0, 1.0]}
  op_type_pairs,     ///< [["Conv", "Relu"], ...]
  tensor_overrides,  ///< TensorQuantOverrides: {"tensor": [{"quant_type": "QInt8", "axis": 1}]}
  object,            ///< a free-form object (only for keys that are not implemented)
};

/// "a boolean", "a list of strings", ... (used in error messages).
std::string_view describe(option_type t) noexcept;

/// Whether the default is one fixed value or depends on the rest of the configuration.
enum class option_default : std::uint8_t {
  fixed,    ///< `default_value` is the default
  context,  ///< computed from the global specs and other options (see `default_doc`); resolved by
            ///< qconfig::effective_options()
};

/// Whether quark-cpp honours a key.
enum class option_support : std::uint8_t {
  implemented,      ///< accepted with any valid value; the quantizer honours it
  not_implemented,  ///< only `inert_value` is accepted; any other value raises not_implemented
};

/// One registry row.
struct option_info {
  std::string_view name;
  option_category category;
  option_type type;
  bool nullable;  ///< Quark's None is a legal value
  option_default default_rule;
  option_value default_value;    ///< the documented default (null when context-dependent or None)
  std::string_view default_doc;  ///< the default as documented, in words
  option_support support;
  /// For not-implemented keys: the value that asks for nothing (what quark-cpp does today).
  option_value inert_value;
  std::string_view doc;  ///< one-line description (our words)
};

/// Every key, in seed 000 order followed by the keys only quark-spec.md names.
std::span<const option_info> option_registry() noexcept;

/// The registry row of `name` (exact, case-sensitive), nullptr if unknown.
const option_info* find_option(std::string_view name) noexcept;

/// The known key closest to `name` (case-insensitive edit distance), empty if none is close.
std::string_view closest_option(std::string_view name) noexcept;

// ---- typed views -----------------------------------------------------------------------------

/// Quantization data type of a TensorQuantOverrides entry (Quark's QuantType / ExtendedQuantType).
enum class override_quant_type : std::uint8_t {
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int4,
  uint4,
  float16,
  bfloat16,
  float8_e4m3fn,
  bfp,
  mx
};

/// Parses "QInt8", "QuantType.QInt8", "ExtendedQuantType.QBFP", "Int8", ... (nullopt if unknown).
std::optional<override_quant_type> parse_override_quant_type(std::string_view s) noexcept;
/// The canonical spelling, e.g. "QInt8", "QBFP".
std::string_view to_string(override_quant_type t) noexcept;

/// QBFP / QMX: a fused block node (BFPQuantizeDequantize / MXQuantizeDequantize), not a Q/DQ type.
constexpr bool is_block_type(override_quant_type t) noexcept {
  return t == override_quant_type::bfp || t == override_quant_type::mx;
}

/// The element type a quant type stores (QInt8 -> int8, QFLOAT8E4M3FN -> float8_e4m3fn, ...);
/// nullopt for the block types QBFP / QMX, which have none.
constexpr std::optional<dtype_id> element_type(override_quant_type t) noexcept {
  using q = override_quant_type;
  switch (t) {
    case q::int8:
      return dtype_id::int8;
    case q::uint8:
      return dtype_id::uint8;
    case q::int16:
      return dtype_id::int16;
    case q::uint16:
      return dtype_id::uint16;
    case q::int32:
      return dtype_id::int32;
    case q::uint32:
      return dtype_id::uint32;
    case q::int4:
      return dtype_id::int4;
    case q::uint4:
      return dtype_id::uint4;
    case q::float16:
      return dtype_id::float16;
    case q::bfloat16:
      return dtype_id::bfloat16;
    case q::float8_e4m3fn:
      return dtype_id::float8_e4m3fn;
    case q::bfp:
    case q::mx:
      break;
  }
  return std::nullopt;
}

/// Why reduce_range true is refused on a float8 tensor: it selects a reduced integer code table
/// (int8 -64..64, ...), and Quark's get_qmin_qmax_for_qType has none for float8 (it raises).
inline constexpr std::string_view reduce_range_fp8_why =
    "reduce_range selects a reduced integer code range (int8 -64..64, uint8 0..127, ...); a "
    "float8 type has none (Quark's get_qmin_qmax_for_qType raises for it)";

/// One dictionary of a TensorQuantOverrides list (seed 000: quant_type, axis, scale, zero_point,
/// symmetric, reduce_range, rmax, rmin).
struct tensor_override {
  std::optional<override_quant_type> quant_type;
  std::optional<std::int64_t> axis;
  std::optional<double> scale;
  std::optional<std::int64_t> zero_point;
  std::optional<bool> symmetric;
  std::optional<bool> reduce_range;
  std::optional<double> rmax;
  std::optional<double> rmin;
  friend bool operator==(const tensor_override&, const tensor_override&) = default;
};

/// tensor name -> one override (per tensor) or one per channel.
using tensor_quant_overrides = std::map<std::string, std::vector<tensor_override>>;

namespace detail {
/// Checks that `v` has the shape of `type` (null allowed when `nullable`); throws
/// config_error "quark.config.type" naming `where` otherwise. Shared by the extra-options registry
/// and the algorithm parameter tables.
void check_option_value(option_type type, bool nullable, const option_value& v,
                        std::string_view where);
[[noreturn]] void throw_option_type(std::string_view where, std::string_view expected,
                                    const option_value& got);
tensor_quant_overrides to_tensor_overrides(const option_value& v, std::string_view where);

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};
template <class T>
struct is_pair : std::false_type {};
template <class A, class B>
struct is_pair<std::pair<A, B>> : std::true_type {};
}  // namespace detail

/// Converts `v` to T, throwing config_error "quark.config.type" that names `where` (a key or a
/// JSON path) on a mismatch. T is one of: option_value, bool, an integer type, float, double,
/// std::string, std::optional<U> (null -> nullopt), std::vector<U>, std::pair<A, B> (from a
/// 2-element array), std::map<std::string, U>, tensor_quant_overrides.
///
/// ```cpp
/// auto shapes = option_cast<std::map<std::string, std::vector<std::int64_t>>>(v, "shapes");
/// ```
template <class T>
T option_cast(const option_value& v, std::string_view where) {
  if constexpr (std::is_same_v<T, option_value>) {
    return v;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_bool())
      detail::throw_option_type(where, "a boolean", v);
    return v.as_bool();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_int())
      detail::throw_option_type(where, "an integer", v);
    const std::int64_t i = v.as_int();
    if (!std::in_range<T>(i))
      detail::throw_option_type(where, "an integer in range", v);
    return static_cast<T>(i);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number())
      detail::throw_option_type(where, "a number", v);
    return static_cast<T>(v.as_number());
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string())
      detail::throw_option_type(where, "a string", v);
    return v.as_string();
  } else if constexpr (std::is_same_v<T, tensor_quant_overrides>) {
    return detail::to_tensor_overrides(v, where);
  } else if constexpr (detail::is_optional<T>::value) {
    if (v.is_null())
      return T{};
    return T{option_cast<typename T::value_type>(v, where)};
  } else if constexpr (detail::is_pair<T>::value) {
    if (!v.is_array() || v.as_array().size() != 2) {
      detail::throw_option_type(where, "an array of 2 elements", v);
    }
    const auto& a = v.as_array();
    return T{option_cast<typename T::first_type>(a[0], std::string(where) + "[0]"),
             option_cast<typename T::second_type>(a[1], std::string(where) + "[1]")};
  } else if constexpr (detail::is_vector<T>::value) {
    if (!v.is_array())
      detail::throw_option_type(where, "an array", v);
    T out;
    std::size_t i = 0;
    for (const auto& item : v.as_array()) {
      out.push_back(option_cast<typename T::value_type>(
          item, std::string(where) + "[" + std::to_string(i++) + "]"));
    }
    return out;
  } else if constexpr (detail::is_string_map<T>::value) {
    if (!v.is_object())
      detail::throw_option_type(where, "an object", v);
    T out;
    for (const auto& m : v.as_object()) {
      out.emplace(m.key,
                  option_cast<typename T::mapped_type>(m.value, std::string(where) + "." + m.key));
    }
    return out;
  } else {
    static_assert(sizeof(T) == 0, "option_cast: unsupported target type");
  }
}

// ---- the container ---------------------------------------------------------------------------

/// The extra_options dictionary: explicitly set keys only, each checked against the registry when
/// it is set. Reading a key that was not set gives its default.
///
/// ```cpp
/// option_map o;
/// o.set("Int32Bias", false);
/// o.set("Percentile", 99.99);
/// bool b = o.get<bool>("Int32Bias");           // false
/// double p = o.get<double>("Percentile");      // 99.99
/// o.set("Int32Bais", true);  // throws quark.config.unknown_key ... did you mean "Int32Bias"?
/// ```
class option_map {
 public:
  /// Sets `key`. Throws config_error "quark.config.unknown_key" (with the closest known key),
  /// "quark.config.type" (wrong value type) or "quark.config.value" (value outside what the key
  /// accepts), and not_implemented "quark.config.not_implemented" for a key quark-cpp does not
  /// implement yet unless `value` is its inert value.
  void set(std::string_view key, option_value value);

  /// Removes an explicit setting (the key returns to its default). No effect if not set.
  void erase(std::string_view key);

  /// True if `key` was set explicitly.
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }

  /// The explicit value of `key`, nullptr if it was not set.
  const option_value* find(std::string_view key) const noexcept;

  /// The explicit value, else the fixed default (the inert value for not-implemented keys).
  /// Throws config_error "quark.config.unknown_key" for unknown keys and
  /// "quark.config.context_default" for a key whose default depends on the rest of the
  /// configuration and which was not set: read those from qconfig::effective_options().
  option_value value(std::string_view key) const;

  /// value(key) converted to T (see option_cast). Use std::optional<U> for nullable keys.
  template <class T>
  T get(std::string_view key) const {
    return option_cast<T>(value(key), key);
  }

  /// The explicitly set entries, in the order they were first set.
  const std::vector<option_member>& entries() const noexcept { return entries_; }
  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }

  friend bool operator==(const option_map&, const option_map&) = default;

 private:
  std::vector<option_member> entries_;
};

}  // namespace quark::onnx
