// SPDX-License-Identifier: MIT
// TensorProto <-> quark::onnx::tensor (see tensor_proto.hpp). Sizes are checked against the shape
// before any allocation, so a malformed or hostile model cannot make us allocate or read out of
// bounds. Element values are only moved (memcpy, bit patterns, quark::pack/unpack); the one
// "conversion" is range-checking integers stored widened in int32_data / uint64_data.
#include "io/tensor_proto.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>
#include <type_traits>
#include <utility>

#include <quark/dtype/formats.hpp>
#include <quark/dtype/pack.hpp>
#include <quark/dtype/traits.hpp>

static_assert(std::endian::native == std::endian::little,
              "the ONNX frontend assumes a little-endian host (raw_data is little-endian)");

namespace quark::onnx {
namespace {

constexpr std::int32_t code_string = 8;
constexpr std::int32_t code_complex64 = 14;
constexpr std::int32_t code_complex128 = 15;

/// Element counts above this are rejected: they cannot be real and would overflow byte sizes.
constexpr std::uint64_t max_elements = std::uint64_t{1} << 56;

[[noreturn]] void fail(const ::onnx::TensorProto& tp, const std::string& what) {
  throw frontend_error("quark.onnx.tensor", tensor_label(tp) + ": " + what);
}

/// T is one of quark's bit-pattern value types (minifloat or int_n).
template <class T>
constexpr bool is_bit_type = requires(T v) {
  v.to_bits();
};

template <class T>
constexpr int bits_of() {
  if constexpr (is_bit_type<T>) {
    return dtype_traits<T>::bits;
  } else {
    return static_cast<int>(sizeof(T) * 8);
  }
}

/// Which typed repeated field the ONNX spec assigns to a data_type code.
enum class field {
  none,
  float_data,
  int32_data,
  int64_data,
  double_data,
  uint64_data,
  string_data
};

field typed_field_for(std::int32_t code) {
  switch (code) {
    case 1:
    case code_complex64:
      return field::float_data;
    case 11:
    case code_complex128:
      return field::double_data;
    case 7:
      return field::int64_data;
    case 12:
    case 13:
      return field::uint64_data;
    case code_string:
      return field::string_data;
    default:
      break;
  }
  return (code >= 1 && code <= 26) ? field::int32_data : field::none;
}

const char* field_name(field f) {
  switch (f) {
    case field::float_data:
      return "float_data";
    case field::int32_data:
      return "int32_data";
    case field::int64_data:
      return "int64_data";
    case field::double_data:
      return "double_data";
    case field::uint64_data:
      return "uint64_data";
    case field::string_data:
      return "string_data";
    case field::none:
      break;
  }
  return "none";
}

std::size_t field_size(const ::onnx::TensorProto& tp, field f) {
  switch (f) {
    case field::float_data:
      return static_cast<std::size_t>(tp.float_data_size());
    case field::int32_data:
      return static_cast<std::size_t>(tp.int32_data_size());
    case field::int64_data:
      return static_cast<std::size_t>(tp.int64_data_size());
    case field::double_data:
      return static_cast<std::size_t>(tp.double_data_size());
    case field::uint64_data:
      return static_cast<std::size_t>(tp.uint64_data_size());
    case field::string_data:
      return static_cast<std::size_t>(tp.string_data_size());
    case field::none:
      break;
  }
  return 0;
}

/// Number of entries the typed field must hold for n elements.
std::uint64_t typed_entries(std::int32_t code, std::uint64_t n) {
  if (code == code_complex64 || code == code_complex128)
    return 2 * n;
  const int bits = dtype_bits(static_cast<dtype_id>(code));
  if (bits > 0 && bits < 8)
    return packed_size(n, bits);  // one packed byte per int32 entry
  return n;
}

/// Bytes raw_data must hold for n elements (0 for string, which has no raw form).
std::uint64_t raw_bytes_for(std::int32_t code, std::uint64_t n) {
  const int bits = dtype_bits(static_cast<dtype_id>(code));
  return packed_size(n, bits);
}

/// The populated data fields other than raw_data, for the "two data fields" check.
std::vector<field> populated_fields(const ::onnx::TensorProto& tp) {
  std::vector<field> out;
  for (field f : {field::float_data, field::int32_data, field::int64_data, field::double_data,
                  field::uint64_data, field::string_data}) {
    if (field_size(tp, f) != 0)
      out.push_back(f);
  }
  return out;
}

/// Strict unsigned decimal parse of an external_data value.
std::optional<std::uint64_t> parse_u64(const std::string& s) {
  if (s.empty() || s.size() > 20)
    return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
      return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

std::uint64_t checked_count(const ::onnx::TensorProto& tp) {
  std::uint64_t n = 1;
  for (int i = 0; i < tp.dims_size(); ++i) {
    const std::int64_t d = tp.dims(i);
    if (d < 0)
      fail(tp, "negative dim " + std::to_string(d) + " at axis " + std::to_string(i));
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && n > max_elements / ud)
      fail(tp, "element count overflows");
    n *= ud;
  }
  return n;
}

/// Reads [offset, offset + length) of an external file after checking it exists and is large
/// enough.
std::string read_external_range(const ::onnx::TensorProto& tp, const std::filesystem::path& file,
                                std::uint64_t offset, std::uint64_t length) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec)
    fail(tp, "cannot open external data file '" + file.string() + "': " + ec.message());
  if (offset > size || length > size - offset) {
    fail(tp, "external data range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                 ") lies outside '" + file.string() + "' (" + std::to_string(size) + " bytes)");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in)
    fail(tp, "cannot open external data file '" + file.string() + "'");
  std::string bytes(static_cast<std::size_t>(length), '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(length));
  if (!in || static_cast<std::uint64_t>(in.gcount()) != length) {
    fail(tp, "short read from external data file '" + file.string() + "'");
  }
  return bytes;
}

/// Fills t (already shaped) from little-endian packed bytes of exactly the right length.
void decode_raw(const std::string& raw, tensor& t) {
  const auto n = t.size();
  quark::visit_dtype(t.type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto dst = t.data<T>();
    if constexpr (std::is_same_v<T, bool>) {
      // A bool byte other than 0/1 must not be copied into a bool object.
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = raw[i] != '\0';
    } else if constexpr (bits_of<T>() < 8) {
      quark::unpack<T>(std::span(reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()),
                       dst);
    } else {
      static_assert(sizeof(T) * 8 == static_cast<std::size_t>(bits_of<T>()),
                    "byte-sized element types must have no padding");
      if (n != 0)
        std::memcpy(dst.data(), raw.data(), n * sizeof(T));
    }
  });
}

/// Narrows an int32_data / uint64_data entry into T, rejecting values T cannot hold.
template <class T, class Wide>
T narrow_entry(const ::onnx::TensorProto& tp, Wide v, const char* fname) {
  if constexpr (std::is_same_v<T, bool>) {
    if (v != 0 && v != 1)
      fail(tp, std::string(fname) + " holds " + std::to_string(v) + " for a bool");
    return v != 0;
  } else if constexpr (is_bit_type<T>) {
    using S = typename T::storage_type;
    if (v < 0 || static_cast<std::uint64_t>(v) > std::numeric_limits<S>::max()) {
      fail(tp,
           std::string(fname) + " holds " + std::to_string(v) + ", not a bit pattern of this type");
    }
    return T::from_bits(static_cast<S>(v));
  } else {
    if (!std::in_range<T>(v)) {
      fail(tp, std::string(fname) + " holds " + std::to_string(v) + ", out of range for " +
                   std::string(dtype_name(tensor_dtype(tp))));
    }
    return static_cast<T>(v);
  }
}

/// Fills t (already shaped) from the typed field (its entry count is already checked).
void decode_typed(const ::onnx::TensorProto& tp, tensor& t) {
  const auto n = t.size();
  quark::visit_dtype(t.type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto dst = t.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = tp.float_data(static_cast<int>(i));
    } else if constexpr (std::is_same_v<T, double>) {
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = tp.double_data(static_cast<int>(i));
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = tp.int64_data(static_cast<int>(i));
    } else if constexpr (std::is_same_v<T, std::uint64_t> || std::is_same_v<T, std::uint32_t>) {
      for (std::size_t i = 0; i < n; ++i) {
        dst[i] = narrow_entry<T>(tp, tp.uint64_data(static_cast<int>(i)), "uint64_data");
      }
    } else if constexpr (bits_of<T>() < 8) {
      // One packed byte per int32 entry, elements LSB-first as in raw_data.
      std::vector<std::uint8_t> packed(static_cast<std::size_t>(tp.int32_data_size()));
      for (std::size_t i = 0; i < packed.size(); ++i) {
        packed[i] =
            narrow_entry<std::uint8_t>(tp, tp.int32_data(static_cast<int>(i)), "int32_data");
      }
      quark::unpack<T>(std::span<const std::uint8_t>(packed), dst);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        dst[i] = narrow_entry<T>(tp, tp.int32_data(static_cast<int>(i)), "int32_data");
      }
    }
  });
}

void clear_data(::onnx::TensorProto& tp) {
  tp.clear_raw_data();
  tp.clear_float_data();
  tp.clear_int32_data();
  tp.clear_int64_data();
  tp.clear_double_data();
  tp.clear_uint64_data();
  tp.clear_string_data();
  tp.clear_external_data();
  tp.clear_data_location();
  tp.clear_segment();
}

}  // namespace

std::string tensor_label(const ::onnx::TensorProto& tp) {
  return "tensor '" + tp.name() + "' (data_type " + std::to_string(tp.data_type()) + ")";
}

dtype_id tensor_dtype(const ::onnx::TensorProto& tp) {
  const auto id = dtype_from_onnx(tp.data_type());
  if (!id)
    fail(tp, "data_type " + std::to_string(tp.data_type()) + " is not an ONNX type (1..26)");
  return *id;
}

shape_t tensor_shape(const ::onnx::TensorProto& tp) {
  checked_count(tp);
  return shape_t(tp.dims().begin(), tp.dims().end());
}

bool has_external_data(const ::onnx::TensorProto& tp) {
  return tp.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL;
}

external_ref external_reference(const ::onnx::TensorProto& tp) {
  external_ref ref;
  bool have_location = false;
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "location") {
      const std::string& loc = kv.value();
      if (loc.empty() || loc.find('\0') != std::string::npos) {
        fail(tp, "external data location is empty or contains NUL");
      }
      std::filesystem::path p(loc);
      if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) {
        fail(tp, "external data location '" + loc + "' must be relative to the model's folder");
      }
      for (const auto& part : p) {
        if (part == "..") {
          fail(tp, "external data location '" + loc + "' leaves the model's folder (\"..\")");
        }
      }
      ref.location = p;
      have_location = true;
    } else if (kv.key() == "offset" || kv.key() == "length") {
      const auto v = parse_u64(kv.value());
      if (!v)
        fail(tp, "external data " + kv.key() + " '" + kv.value() + "' is not an integer");
      if (kv.key() == "offset") {
        ref.offset = *v;
      } else {
        ref.length = *v;
      }
    }
    // "checksum" and unknown keys are informational.
  }
  if (!have_location)
    fail(tp, "external data without a 'location' entry");
  return ref;
}

std::filesystem::path resolve_external_path(const ::onnx::TensorProto& tp,
                                            const std::filesystem::path& base_dir,
                                            const external_ref& ref) {
  if (base_dir.empty()) {
    fail(tp, "uses external data but the model has no folder (loaded from bytes without base_dir)");
  }
  std::error_code ec;
  const auto base = std::filesystem::weakly_canonical(base_dir, ec);
  if (ec)
    fail(tp, "cannot resolve model folder '" + base_dir.string() + "': " + ec.message());
  auto full = std::filesystem::weakly_canonical(base / ref.location, ec);
  if (ec)
    fail(tp, "cannot resolve external data file '" + ref.location.string() + "': " + ec.message());
  // Symlinks may not lead outside the model's folder either.
  auto b = base.begin();
  auto f = full.begin();
  for (; b != base.end(); ++b, ++f) {
    if (f == full.end() || *b != *f) {
      if (b->empty())
        continue;  // trailing separator of base
      fail(tp, "external data location '" + ref.location.string() + "' resolves outside '" +
                   base.string() + "'");
    }
  }
  return full;
}

void validate_tensor(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir) {
  const std::int32_t code = tp.data_type();
  tensor_dtype(tp);
  const std::uint64_t n = checked_count(tp);
  if (tp.has_segment()) {
    fail(tp, "segmented tensors are not supported");
  }
  const auto others = populated_fields(tp);
  if (has_external_data(tp)) {
    if (code == code_string)
      fail(tp, "string tensors cannot use external data");
    if (tp.has_raw_data() || !others.empty())
      fail(tp, "has both external data and inline data");
    const auto ref = external_reference(tp);
    const auto file = resolve_external_path(tp, base_dir, ref);
    const std::uint64_t expected = raw_bytes_for(code, n);
    const std::uint64_t length = ref.length.value_or(expected);
    if (length != expected) {
      fail(tp, "external data length " + std::to_string(length) + " does not match shape (" +
                   std::to_string(expected) + " bytes expected)");
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec)
      fail(tp, "cannot open external data file '" + file.string() + "': " + ec.message());
    if (ref.offset > size || length > size - ref.offset) {
      fail(tp, "external data range [" + std::to_string(ref.offset) + ", +" +
                   std::to_string(length) + ") lies outside '" + file.string() + "' (" +
                   std::to_string(size) + " bytes)");
    }
    return;
  }
  if (tp.has_raw_data()) {
    if (code == code_string)
      fail(tp, "string tensors cannot use raw_data");
    if (!others.empty()) {
      fail(tp, std::string("has both raw_data and ") + field_name(others.front()));
    }
    const std::uint64_t expected = raw_bytes_for(code, n);
    if (tp.raw_data().size() != expected) {
      fail(tp, "raw_data holds " + std::to_string(tp.raw_data().size()) + " bytes, shape needs " +
                   std::to_string(expected));
    }
    return;
  }
  const field f = typed_field_for(code);
  for (field o : others) {
    if (o != f) {
      fail(tp, std::string(field_name(o)) + " is not the field for data_type " +
                   std::to_string(code) + " (expected " + field_name(f) + ")");
    }
  }
  const std::uint64_t expected = typed_entries(code, n);
  const std::uint64_t have = field_size(tp, f);
  if (have != expected) {
    fail(tp, std::string(field_name(f)) + " holds " + std::to_string(have) +
                 " entries, shape needs " + std::to_string(expected));
  }
}

std::string tensor_raw_bytes(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir) {
  validate_tensor(tp, base_dir);
  const std::int32_t code = tp.data_type();
  if (code == code_string)
    fail(tp, "string tensors have no raw byte form");
  if (has_external_data(tp)) {
    const auto ref = external_reference(tp);
    const auto file = resolve_external_path(tp, base_dir, ref);
    return read_external_range(tp, file, ref.offset, raw_bytes_for(code, checked_count(tp)));
  }
  if (tp.has_raw_data())
    return tp.raw_data();
  if (code == code_complex64) {
    std::string out(static_cast<std::size_t>(tp.float_data_size()) * sizeof(float), '\0');
    if (!out.empty())
      std::memcpy(out.data(), tp.float_data().data(), out.size());
    return out;
  }
  if (code == code_complex128) {
    std::string out(static_cast<std::size_t>(tp.double_data_size()) * sizeof(double), '\0');
    if (!out.empty())
      std::memcpy(out.data(), tp.double_data().data(), out.size());
    return out;
  }
  ::onnx::TensorProto raw;
  write_tensor(read_tensor(tp, base_dir), raw, tensor_encoding::raw);
  return raw.raw_data();
}

tensor read_tensor(const ::onnx::TensorProto& tp, const std::filesystem::path& base_dir) {
  validate_tensor(tp, base_dir);
  const std::int32_t code = tp.data_type();
  if (code == code_string || code == code_complex64 || code == code_complex128) {
    fail(tp, "no quark::onnx::tensor representation for " +
                 std::string(dtype_name(tensor_dtype(tp))) + " elements");
  }
  tensor t(tensor_dtype(tp), tensor_shape(tp));
  if (has_external_data(tp)) {
    const auto ref = external_reference(tp);
    const auto file = resolve_external_path(tp, base_dir, ref);
    decode_raw(read_external_range(tp, file, ref.offset, raw_bytes_for(code, t.size())), t);
  } else if (tp.has_raw_data()) {
    decode_raw(tp.raw_data(), t);
  } else {
    decode_typed(tp, t);
  }
  return t;
}

void write_tensor(const tensor& t, ::onnx::TensorProto& tp, tensor_encoding encoding) {
  const auto code = onnx_code(t.type());
  if (!code) {
    throw frontend_error("quark.onnx.tensor", "tensor '" + tp.name() + "': element type " +
                                                  std::string(dtype_name(t.type())) +
                                                  " has no ONNX data_type code");
  }
  clear_data(tp);
  tp.set_data_type(*code);
  tp.clear_dims();
  for (auto d : t.shape())
    tp.add_dims(d);
  const std::size_t n = t.size();
  quark::visit_dtype(t.type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto src = t.data<T>();
    if (encoding == tensor_encoding::raw) {
      std::string* raw = tp.mutable_raw_data();
      if constexpr (std::is_same_v<T, bool>) {
        raw->resize(n);
        for (std::size_t i = 0; i < n; ++i)
          (*raw)[i] = src[i] ? '\1' : '\0';
      } else if constexpr (bits_of<T>() < 8) {
        raw->resize(packed_size(n, bits_of<T>()));
        quark::pack<T>(src, std::span(reinterpret_cast<std::uint8_t*>(raw->data()), raw->size()));
      } else {
        raw->resize(n * sizeof(T));
        if (n != 0)
          std::memcpy(raw->data(), src.data(), n * sizeof(T));
      }
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      tp.mutable_float_data()->Add(src.begin(), src.end());
    } else if constexpr (std::is_same_v<T, double>) {
      tp.mutable_double_data()->Add(src.begin(), src.end());
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      tp.mutable_int64_data()->Add(src.begin(), src.end());
    } else if constexpr (std::is_same_v<T, std::uint64_t> || std::is_same_v<T, std::uint32_t>) {
      for (auto v : src)
        tp.add_uint64_data(v);
    } else if constexpr (bits_of<T>() < 8) {
      std::vector<std::uint8_t> packed(packed_size(n, bits_of<T>()));
      quark::pack<T>(src, std::span<std::uint8_t>(packed));
      for (auto b : packed)
        tp.add_int32_data(b);
    } else if constexpr (is_bit_type<T>) {
      for (auto v : src)
        tp.add_int32_data(static_cast<std::int32_t>(v.to_bits()));
    } else {
      for (auto v : src)
        tp.add_int32_data(static_cast<std::int32_t>(v));
    }
  });
}

}  // namespace quark::onnx
