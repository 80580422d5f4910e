// SPDX-License-Identifier: MIT
// PRIVATE (src/ only): conversion between ::onnx::TensorProto and quark::onnx::tensor, following
// the ONNX IR spec (onnx.proto, "TensorProto"): little-endian raw_data with sub-byte types packed
// LSB-first, or the typed repeated fields (float_data, int32_data, int64_data, double_data,
// uint64_data), and external data (location / offset / length relative to the model folder).
// data_type is handled as a plain int32 through quark's dtype table, because Debian's onnx 1.12
// enum stops at BFLOAT16 = 16. Every size is validated before anything is allocated or copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include <quark/onnx/io.hpp>
#include <quark/onnx/tensor.hpp>

namespace quark::onnx {

/// "tensor 'w' (data_type 22)": the label used in every error message about a tensor.
std::string tensor_label(const ::onnx::TensorProto& tp);

/// The dtype of a TensorProto; throws frontend_error("quark.onnx.tensor") for codes outside 1..26.
dtype_id tensor_dtype(const ::onnx::TensorProto& tp);

/// The dims of a TensorProto; throws frontend_error("quark.onnx.tensor") for a negative dim or an
/// element count that overflows.
shape_t tensor_shape(const ::onnx::TensorProto& tp);

/// True when the tensor's bytes live in an external file (data_location == EXTERNAL).
bool has_external_data(const ::onnx::TensorProto& tp);

/// The parsed external_data entries of a tensor.
struct external_ref {
  std::filesystem::path location;  ///< relative to the model folder, validated
  std::uint64_t offset = 0;
  std::optional<std::uint64_t> length;
};

/// Reads and validates the external_data entries: location must be a relative path that stays in
/// base_dir (no "..", no absolute path, no symlink escaping it); offset/length must be integers.
external_ref external_reference(const ::onnx::TensorProto& tp);

/// Resolves `ref.location` against `base_dir`, rejecting any path that leaves base_dir.
std::filesystem::path resolve_external_path(const ::onnx::TensorProto& tp,
                                            const std::filesystem::path& base_dir,
                                            const external_ref& ref);

/// Checks the tensor without decoding it: data_type, dims, and that the stored data (raw_data
/// length, typed field length, or external file range) matches the shape. Throws frontend_error
/// ("quark.onnx.tensor") naming the tensor. String and complex tensors are checked too.
void validate_tensor(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir);

/// The little-endian packed bytes of a tensor as stored in raw_data (reading external files and
/// re-encoding typed fields as needed). Not available for string tensors.
std::string tensor_raw_bytes(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir);

/// Decodes a TensorProto into an owning tensor. `base_dir` is the folder of the model file, used
/// for external data (an empty base_dir rejects external data). Throws frontend_error
/// ("quark.onnx.tensor") naming the tensor on any inconsistency; string and complex tensors have
/// no quark::onnx::tensor representation and are rejected with their code.
tensor read_tensor(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir);

/// Encodes `t` into `tp`: sets data_type and dims, clears every data field and external-data
/// entry, then writes raw_data (or the typed field). tp's name and doc_string are kept.
void write_tensor(const tensor& t, ::onnx::TensorProto& tp,
                  tensor_encoding encoding = tensor_encoding::raw);

}  // namespace quark::onnx
