// SPDX-License-Identifier: MIT
// PRIVATE (src/ only): direct access to the ModelProto behind quark::onnx::model, for the runtime
// and the quantizer, which walk and rewrite the graph with the protobuf API. Code that edits the
// proto keeps the model valid; model::validate() re-checks it.
//
//     const ::onnx::GraphProto& g = quark::onnx::proto(m).graph();
//     for (const auto& n : g.node()) ...
#pragma once

#include <filesystem>
#include <utility>

#include <onnx/onnx_pb.h>

#include <quark/onnx/model.hpp>

namespace quark::onnx {

/// The state behind a model: the protobuf and the folder its external data is relative to.
struct model::impl {
  ::onnx::ModelProto proto;
  std::filesystem::path base_dir;
};

/// The friend through which src/ reaches model::impl.
struct proto_access {
  static model::impl& get(model& m) noexcept { return *m.impl_; }
  static const model::impl& get(const model& m) noexcept { return *m.impl_; }
};

/// The ModelProto of `m` (mutable).
inline ::onnx::ModelProto& proto(model& m) noexcept {
  return proto_access::get(m).proto;
}
/// The ModelProto of `m`.
inline const ::onnx::ModelProto& proto(const model& m) noexcept {
  return proto_access::get(m).proto;
}

/// A model owning `p`; external data is resolved relative to `base_dir`. Not validated.
inline model make_model(::onnx::ModelProto p, std::filesystem::path base_dir = {}) {
  model m;
  proto_access::get(m).proto = std::move(p);
  proto_access::get(m).base_dir = std::move(base_dir);
  return m;
}

}  // namespace quark::onnx
