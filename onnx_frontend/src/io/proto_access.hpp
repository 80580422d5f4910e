// SPDX-License-Identifier: MIT
// PRIVATE (src/ only): direct access to the ModelProto behind quark::onnx::model, for the runtime
// and the quantizer, which walk and rewrite the graph with the protobuf API. Code that edits the
// proto keeps the model valid; model::validate() re-checks it.
//
//     const ::onnx::GraphProto& g = quark::onnx::proto(m).graph();
//     for (const auto& n : g.node()) ...
#pragma once

#include <filesystem>
#include <mutex>
#include <string_view>
#include <utility>

#include <onnx/onnx_pb.h>

#include <quark/onnx/model.hpp>

#include "io/graph_util.hpp"

namespace quark::onnx {

/// model's initializer_index behind a mutex (const methods fill it, and a const model may be read
/// from several threads). A copy starts empty.
class initializer_cache {
 public:
  initializer_cache() = default;
  initializer_cache(const initializer_cache&) noexcept {}
  initializer_cache& operator=(const initializer_cache&) noexcept {
    clear();
    return *this;
  }
  [[nodiscard]] int find(const ::onnx::GraphProto& g, std::string_view name) const {
    const std::lock_guard lock(mutex_);
    return index_.find(g, name);
  }
  ::onnx::TensorProto& get_or_add(::onnx::GraphProto& g, std::string_view name) {
    const std::lock_guard lock(mutex_);
    return index_.get_or_add(g, name);
  }
  void add(::onnx::GraphProto& g, ::onnx::TensorProto&& t) {
    const std::lock_guard lock(mutex_);
    index_.add(g, std::move(t));
  }
  void clear() noexcept {
    const std::lock_guard lock(mutex_);
    index_.clear();
  }

 private:
  mutable std::mutex mutex_;
  mutable initializer_index index_;
};

/// The state behind a model: the protobuf, the folder its external data is relative to, and
/// the main graph's initializers by name (see initializer_index for what it notices by itself;
/// code that renames initializers through the protobuf calls inits.clear()).
struct model::impl {
  ::onnx::ModelProto proto;
  std::filesystem::path base_dir;
  initializer_cache inits;
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
