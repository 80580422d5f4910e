// SPDX-License-Identifier: MIT
// Serialized TensorProto files (io.hpp): the ONNX test-data `.pb` format.
#include <climits>
#include <fstream>

#include <google/protobuf/io/coded_stream.h>

#include <quark/onnx/io.hpp>

#include "io/atomic_file.hpp"
#include "io/tensor_proto.hpp"

namespace quark::onnx {
namespace {

::onnx::TensorProto parse_tensor(std::string_view bytes, const std::string& where) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    throw frontend_error("quark.onnx.tensor", where + ": larger than protobuf's 2 GB limit");
  }
  ::onnx::TensorProto tp;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(INT_MAX);
  if (!tp.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    throw frontend_error("quark.onnx.tensor",
                         where + ": not a valid TensorProto (truncated or corrupt)");
  }
  return tp;
}

}  // namespace

named_tensor tensor_from_bytes(std::string_view bytes, const std::filesystem::path& base_dir) {
  const auto tp = parse_tensor(bytes, "<bytes>");
  return {tp.name(), read_tensor(tp, base_dir)};
}

std::string tensor_to_bytes(const tensor& t, std::string_view name, tensor_encoding encoding) {
  ::onnx::TensorProto tp;
  tp.set_name(std::string(name));
  write_tensor(t, tp, encoding);
  std::string out;
  if (tp.ByteSizeLong() > static_cast<std::size_t>(INT_MAX) || !tp.SerializeToString(&out)) {
    throw frontend_error("quark.onnx.tensor", tensor_label(tp) + ": cannot serialize (over 2 GB?)");
  }
  return out;
}

named_tensor load_tensor(const std::filesystem::path& path) {
  std::string where = "'";  // appended, not `"'" + string&&`: a false GCC 12 -Wrestrict at -O3
  where += path.string();
  where += '\'';
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    throw frontend_error("quark.onnx.load", where + ": cannot open file");
  const auto end = in.tellg();
  if (end < 0 || static_cast<std::uint64_t>(end) > static_cast<std::uint64_t>(INT_MAX)) {
    throw frontend_error("quark.onnx.load", where + ": unreadable or over 2 GB");
  }
  std::string bytes(static_cast<std::size_t>(end), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in)
    throw frontend_error("quark.onnx.load", where + ": read failed");
  const auto tp = parse_tensor(bytes, where);
  const auto dir = path.parent_path();
  return {tp.name(), read_tensor(tp, dir.empty() ? std::filesystem::path(".") : dir)};
}

void save_tensor(const std::filesystem::path& path, const tensor& t, std::string_view name,
                 tensor_encoding encoding) {
  detail::atomic_file file(path);
  file.write(tensor_to_bytes(t, name, encoding));
  file.commit();
}

}  // namespace quark::onnx
