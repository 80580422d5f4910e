// SPDX-License-Identifier: MIT
// PRIVATE: SimulateDPU (quark-spec §9.2; docs/config.md §7.5): after Q/DQ insertion and the
// RemoveQDQ* passes, before NPULimitationCheck's rules, the quantized float graph is made to
// compute what the DPU does (the factors come from <quark/scale/dpu.hpp>):
//
//   ConvertLeakyReluToDPUVersion    LeakyRelu's alpha attribute (when the node has one) becomes
//                                   round(alpha * 256) / 256
//   ConvertSigmoidToHardSigmoid     Sigmoid -> HardSigmoid(alpha = 1/6) under the same name
//   ConvertHardSigmoidToDPUVersion  HardSigmoid(1/6, 0.5) (a converted Sigmoid included) ->
//                                   HardSigmoid then Mul by 16386 / 16384
//   ConvertAvgPoolToDPUVersion      AveragePool with a square 2-D kernel, GlobalAveragePool on a
//                                   static square H x W -> the pool then Mul by the DPU's factor
//   ConvertReduceMeanToDPUVersion   ReduceMean over constant axes of static sizes -> Mul likewise
//   ConvertClipToDPUVersion         Clip bounds (initializers) rounded and clamped to
//                                   [-128, 127]; a missing bound becomes -128 / 127
//
// A Mul is inserted as Quark does: the node writes `<out>_Mul`, a Constant `<out>_Scale` holds
// the factor, the Mul `<out>_Mul` writes `<out>`, so the Q/DQ pair on `<out>` quantizes the
// scaled value. Converted nodes are the quantized ones (Quark's should_quantize_node); the
// HardSigmoid scaling applies to every HardSigmoid not excluded by name (its
// should_simulate_node). Nodes whose shapes are unknown are left as they are, with a note.
//
// Two steps, because the rewrite of static_quant.cpp rebuilds the node list: plan (before the
// NPU rules, which must see a converted Sigmoid as a HardSigmoid), then edit each node as the
// rewrite copies it (op type and attributes; a marker for what must wait), then apply the marked
// edits once the Q/DQ removal passes are done (so a Mul never hides a pool from them).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include <quark/onnx/model.hpp>

#include "quantizer/plan.hpp"

namespace quark::onnx::qz {

/// What SimulateDPU does to one node.
struct dpu_edit {
  bool to_hard_sigmoid = false;      ///< Sigmoid -> HardSigmoid(1/6)
  std::optional<float> leaky_alpha;  ///< LeakyRelu's new alpha
  std::optional<double> mul;         ///< a Mul by this factor after output 0
  bool clip = false;                 ///< Clip bounds rounded (on the rewritten graph)
};

struct dpu_plan {
  std::map<std::size_t, dpu_edit> edits;  ///< by node index
  std::vector<std::string> notes;
};

/// HardSigmoid with alpha 1/6 and beta 0.5 or absent (within 1e-6, as Quark's
/// check_hard_sigmoid_condition): the one the DPU runs.
[[nodiscard]] bool is_dpu_hard_sigmoid(const node_info& n);

/// Plans the conversions `o` enables on `nodes` (of the float model `m`, which gives the static
/// shapes). `quantized(i)` is Quark's should_quantize_node, `simulate(i)` its
/// should_simulate_node. Throws frontend_error naming the node for a non-finite LeakyRelu alpha.
dpu_plan plan_dpu(const model& m, const std::vector<node_info>& nodes,
                  const settings::dpu_conversions& o,
                  const std::function<bool(std::size_t)>& quantized,
                  const std::function<bool(std::size_t)>& simulate);

/// Applies edit `e` of node `index` to its rewritten copy `n`: op type and attributes now, and a
/// marker for the Mul and the Clip bounds, which apply_dpu_marks does.
void edit_node(::onnx::NodeProto& n, const dpu_edit& e, std::size_t index);

/// Inserts the planned Mul nodes and rewrites the Clip bounds of the marked nodes of `m`,
/// removing the markers. Returns notes for what it could not do.
std::vector<std::string> apply_dpu_marks(model& m, const dpu_plan& p);

}  // namespace quark::onnx::qz
