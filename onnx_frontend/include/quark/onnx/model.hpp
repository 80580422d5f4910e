// SPDX-License-Identifier: MIT
// An ONNX model (ONNX IR spec, onnx.proto ModelProto) behind a std-only interface: load from a
// file or from bytes (external data files and models over 2 GB included), validate, inspect and
// edit the main graph, and save atomically, optionally with large initializers as external data.
// The protobuf object stays inside the library (pimpl); frontend sources reach it through the
// private header src/io/proto_access.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <quark/dtype/dtype_id.hpp>
#include <quark/onnx/error.hpp>
#include <quark/onnx/tensor.hpp>

namespace quark::onnx {

/// A graph input or output: name, element type and shape. Unknown dims are -1; a symbolic dim
/// keeps its name in `dim_params` (same length as `shape`, "" where the dim is numeric or unknown).
///
///     for (const auto& in : m.inputs()) std::cout << in.name << " rank " << in.shape.size();
struct value_info {
  std::string name{};
  std::int32_t elem_type = 0;  ///< ONNX data_type code (0 when the type is not a tensor type)
  bool has_shape = false;      ///< false when the rank is unknown
  shape_t shape{};
  std::vector<std::string> dim_params{};
};

/// The value of a node attribute. Graph and sparse-tensor attributes are not represented.
using attribute_value = std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>,
                                     std::vector<float>, std::vector<std::string>, tensor>;

/// One named attribute.
struct attribute {
  std::string name{};
  attribute_value value{};
};

/// A node of the main graph, by value (edits go through model's node functions).
///
///     m.insert_node(0, {.name = "q0", .op_type = "QuantizeLinear",
///                       .inputs = {"x", "s", "zp"}, .outputs = {"x_q"},
///                       .attributes = {{"axis", std::int64_t{1}}}});
struct node_info {
  std::string name{};
  std::string op_type{};
  std::string domain{};               ///< "" for the default ai.onnx domain
  std::vector<std::string> inputs{};  ///< "" marks an omitted optional input
  std::vector<std::string> outputs{};
  /// Attributes in file order. Graph, sparse-tensor and non-numeric tensor attributes are left out
  /// of this view (they stay in the model untouched).
  std::vector<attribute> attributes{};
};

/// One opset_import entry.
struct opset_import {
  std::string domain{};  ///< "" is the default ai.onnx domain
  std::int64_t version = 0;
};

/// Options for loading.
struct load_options {
  /// Run validate() after parsing (recommended: malformed models fail at load, naming the culprit).
  bool validate = true;
};

/// Options for saving. Every member has a default, so designated initializers may name any subset.
struct save_options {
  /// Store initializers of at least `external_threshold` bytes in one data file next to the model.
  bool external_data = false;
  std::size_t external_threshold = 1024;
  /// Name of the data file, relative to the model's folder; empty: "<model file name>.data".
  std::string external_file{};
};

/// An ONNX model. Movable and copyable (a copy is deep); a moved-from model may only be assigned
/// to or destroyed.
///
///     auto m = quark::onnx::model::load("det.onnx");
///     m.constants_to_initializers();
///     m.ensure_opset("", 13);
///     m.save("det_q.onnx", {.external_data = true});
class model {
 public:
  /// An empty model: IR version 8, opset_import {"" : 13}, an empty graph named "main".
  model();
  ~model();
  model(model&&) noexcept;
  model& operator=(model&&) noexcept;
  model(const model&);
  model& operator=(const model&);

  /// Loads a model file; external data is resolved relative to the file's folder and read lazily.
  /// Throws frontend_error("quark.onnx.load") naming the path for unreadable, truncated or
  /// non-protobuf files, and the validate() errors when options.validate is set.
  static model load(const std::filesystem::path& path, const load_options& options = {});
  /// Parses serialized bytes. `base_dir` is the folder external data paths are relative to
  /// (empty: models with external data are rejected).
  static model from_bytes(std::span<const std::byte> bytes,
                          const std::filesystem::path& base_dir = {},
                          const load_options& options = {});
  static model from_bytes(std::string_view bytes, const std::filesystem::path& base_dir = {},
                          const load_options& options = {});

  /// Writes the model atomically: a temporary file in the destination folder, fsync, rename.
  /// On failure nothing is left behind and frontend_error("quark.onnx.save") names the path.
  /// External data of the loaded model is copied (embedded or into the new data file).
  void save(const std::filesystem::path& path, const save_options& options = {}) const;
  /// The serialized model with all external data embedded (fails beyond protobuf's 2 GB).
  std::string to_bytes() const;

  /// The folder external data paths are resolved against (empty for models built in memory).
  const std::filesystem::path& base_dir() const noexcept;

  // -- versions ---------------------------------------------------------------------------------
  std::int64_t ir_version() const;
  void set_ir_version(std::int64_t version);
  /// Every opset_import entry, in file order.
  std::vector<opset_import> opsets() const;
  /// The imported version of `domain` ("" and "ai.onnx" are the same domain), if imported.
  std::optional<std::int64_t> opset(std::string_view domain) const;
  /// Sets (adds or replaces) the version of `domain`.
  void set_opset(std::string_view domain, std::int64_t version);
  /// Raises `domain` to at least `min_version` (adds it if absent); returns the resulting version.
  std::int64_t ensure_opset(std::string_view domain, std::int64_t min_version);

  // -- graph inputs / outputs -------------------------------------------------------------------
  /// Graph inputs that are not initializers (IR < 4 lists initializers as inputs too).
  std::vector<value_info> inputs() const;
  std::vector<value_info> outputs() const;

  // -- initializers -----------------------------------------------------------------------------
  std::vector<std::string> initializer_names() const;
  bool has_initializer(std::string_view name) const;
  /// Decodes an initializer; throws frontend_error("quark.onnx.graph") if there is none of that
  /// name and ("quark.onnx.tensor") if it cannot be decoded.
  tensor initializer(std::string_view name) const;
  /// Adds or replaces an initializer (stored as raw_data).
  void set_initializer(std::string_view name, const tensor& value);
  /// Removes an initializer (and its graph input entry if IR < 4 listed it); false if absent.
  bool remove_initializer(std::string_view name);

  // -- nodes of the main graph ------------------------------------------------------------------
  std::size_t node_count() const;
  node_info node(std::size_t index) const;
  std::vector<node_info> nodes() const;
  /// Inserts a node before position `index` (index == node_count() appends).
  void insert_node(std::size_t index, const node_info& n);
  void remove_node(std::size_t index);
  /// Replaces input `slot` of node `index` (slot == input count appends an input).
  void set_node_input(std::size_t index, std::size_t slot, std::string_view name);
  void set_node_output(std::size_t index, std::size_t slot, std::string_view name);
  /// Renames a tensor everywhere in the main graph: node inputs and outputs, graph inputs and
  /// outputs, value_info and initializers. Returns the number of references renamed.
  std::size_t rename_edge(std::string_view from, std::string_view to);
  /// Indices of the nodes that read `name`.
  std::vector<std::size_t> consumers(std::string_view name) const;
  /// Index of the node producing `name`, if any.
  std::optional<std::size_t> producer(std::string_view name) const;
  /// Node indices in an order where every node follows its producers; throws
  /// frontend_error("quark.onnx.graph") naming a node on a cycle or a missing tensor.
  std::vector<std::size_t> topological_order() const;

  // -- passes and checks ------------------------------------------------------------------------
  /// Turns every main-graph Constant node holding `value`, `value_float(s)` or `value_int(s)` into
  /// an initializer named after its output and removes the node. Returns the number converted.
  std::size_t constants_to_initializers();
  /// Replaces every call of a model-local function (ModelProto.functions, IR 8+), in the main
  /// graph and in If / Loop / Scan bodies, by the function's nodes, as ONNX Runtime does before
  /// it runs a model; then drops the functions. Body values and nodes are named
  /// "<calling node>/<name>"; attribute references take the call's attribute, else the
  /// function's default. Returns the number of calls inlined (0: nothing changed). Throws
  /// frontend_error "quark.onnx.function" for a recursive function, an operator-set version
  /// other than the model's, or a call with more inputs / outputs than its function declares.
  /// The runtime and quantize_model do this by themselves.
  std::size_t inline_functions();
  /// Structural checks: IR/opset present, every tensor well-formed (type, dims, data size,
  /// external range), unique tensor names, every node input and graph output defined, no cycles.
  /// And the attributes ONNX Runtime refuses at load: a name the default-domain operator's schema
  /// does not define (at opsets the linked libonnx knows, <= 17), and convolution / pooling
  /// windows with a stride, dilation or kernel size below 1 or negative pads / output padding.
  /// Throws frontend_error ("quark.onnx.tensor" / "quark.onnx.graph" / "quark.onnx.attribute")
  /// naming the culprit.
  void validate() const;
  /// Runs the ONNX reference checker of the linked libonnx (1.12 on Debian 12: IR <= 8, opset
  /// <= 17, data types <= 16) and throws frontend_error("quark.onnx.check") with its message.
  void run_onnx_checker() const;
  /// The distinct op types of the graph (including subgraphs) missing from `supported`, sorted.
  /// Default-domain ops are spelled "Conv"; other domains "domain:Op" (e.g. "com.microsoft:Gelu").
  std::vector<std::string> unsupported_ops(
      const std::set<std::string, std::less<>>& supported) const;
  /// Throws frontend_error("quark.onnx.unsupported_op") listing unsupported_ops() if any.
  void check_ops(const std::set<std::string, std::less<>>& supported) const;

  struct impl;

 private:
  friend struct proto_access;
  std::unique_ptr<impl> impl_;
};

}  // namespace quark::onnx
