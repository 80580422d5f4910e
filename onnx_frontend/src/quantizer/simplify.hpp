// SPDX-License-Identifier: MIT
// PRIVATE: SimplifyModel (seed 000 category 1; Quark runs onnxslim after RemoveInputInit):
// quark-cpp's own simplifier, exact rewrites only (docs/config.md §7.3). It folds Shape / Size of
// statically shaped values and nodes whose inputs are all constant, removes nodes that compute
// nothing (Identity, inference Dropout, a Cast to its input's type, an identity Transpose, a
// single-input Concat, a Reshape to its input's shape), merges Transpose and Reshape chains, folds
// a zero constant Pad into the Conv after it, merges nodes that compute the same thing
// (subexpression elimination) and drops the nodes no graph output needs.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <quark/onnx/model.hpp>
#include <quark/onnx/options.hpp>

namespace quark::onnx::qz {

/// What SimplifyModelOptions asks for (onnxslim's keyword arguments that apply here).
struct simplify_options {
  bool constant_folding = true;  ///< no_constant_folding; skip_optimizations "constant_folding"
  bool shape_inference = true;   ///< no_shape_infer: no Shape folding, no shape / type rewrites
  bool dead_nodes = true;        ///< skip_optimizations "dead_node_elimination"
  bool subexpressions = true;    ///< skip_optimizations "subexpression_elimination"
  bool fusion = true;            ///< skip_optimizations "graph_fusion": every pattern below
  std::set<std::string> skip_patterns;  ///< skip_fusion_patterns
};

/// The rewrite patterns by name (skip_fusion_patterns accepts these).
const std::vector<std::string_view>& simplify_patterns();

/// Reads SimplifyModelOptions (an object). Throws config_error "quark.config.value" naming the
/// key for an unknown key, a value of the wrong type or an unknown pattern / optimization name.
simplify_options read_simplify_options(const option_value& v);

/// Simplifies `m` in place (constants already initializers). Returns one note per kind of
/// rewrite done ("SimplifyModel: 2 Identity removed", ...). Values an If / Loop / Scan body reads
/// from the graph, and graph outputs, keep their names.
std::vector<std::string> simplify_model(model& m, const simplify_options& o);

}  // namespace quark::onnx::qz
