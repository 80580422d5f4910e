// SPDX-License-Identifier: MIT
// Single tensors in ONNX's serialized TensorProto form (the `.pb` files of the ONNX test suites and
// of calibration dumps), without exposing protobuf: every data_type code 1..26 that has a
// quark::onnx::tensor form, from raw_data or the typed fields, sub-byte types packed LSB-first.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <quark/onnx/tensor.hpp>

namespace quark::onnx {

/// How a tensor's elements are stored in a TensorProto.
enum class tensor_encoding {
  raw,    ///< little-endian raw_data (sub-byte types packed); valid for every numeric type
  typed,  ///< the typed repeated field the ONNX spec assigns to the data_type
};

/// A tensor with its TensorProto name.
struct named_tensor {
  std::string name{};
  tensor value{};
};

/// Parses a serialized TensorProto. `base_dir` resolves external data (empty: rejected).
/// Throws frontend_error("quark.onnx.tensor") naming the tensor for malformed input.
///
///     auto t = quark::onnx::tensor_from_bytes(bytes).value;
named_tensor tensor_from_bytes(std::string_view bytes, const std::filesystem::path& base_dir = {});
/// Serializes `t` as a TensorProto called `name`.
std::string tensor_to_bytes(const tensor& t, std::string_view name = {},
                            tensor_encoding encoding = tensor_encoding::raw);
/// Reads a TensorProto file (external data relative to its folder).
named_tensor load_tensor(const std::filesystem::path& path);
/// Writes a TensorProto file atomically (frontend_error("quark.onnx.save") on failure).
void save_tensor(const std::filesystem::path& path, const tensor& t, std::string_view name = {},
                 tensor_encoding encoding = tensor_encoding::raw);

}  // namespace quark::onnx
