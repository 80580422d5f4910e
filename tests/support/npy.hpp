// SPDX-License-Identifier: MIT
// Minimal .npy reader and writer for the test harness (format versions 1.0 and 2.0, little-endian,
// C order). Only the element types the ONNX Runtime oracle exchanges are supported:
// f4 f2 i1 u1 i2 u2 i4 u4 i8 (plus b1 read as u1). Bytes are moved verbatim, so NaN payloads and
// signs survive a round trip.
//
//     quark::test::npy_array a = quark::test::npy_array::from<float>({1.f, 2.f}, {2});
//     quark::test::write_npy("/tmp/x.npy", a);
//     auto b = quark::test::read_npy("/tmp/x.npy");   // b.descr == "<f4", b.values<float>()
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace quark::test {

/// The npy `descr` string of a C++ element type ("<f4", "|i1", ...). float16 travels as
/// std::uint16_t bits with descr "<f2" (pass the descr explicitly for it).
template <class T>
constexpr std::string_view npy_descr_of() {
  if constexpr (std::is_same_v<T, float>)
    return "<f4";
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return "|i1";
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return "|u1";
  else if constexpr (std::is_same_v<T, std::int16_t>)
    return "<i2";
  else if constexpr (std::is_same_v<T, std::uint16_t>)
    return "<u2";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "<i4";
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return "<u4";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "<i8";
  else
    static_assert(sizeof(T) == 0, "npy: unsupported element type");
}

/// Bytes per element of a supported descr; throws for anything else.
inline std::size_t npy_item_size(std::string_view descr) {
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '|')) {
    throw std::runtime_error("npy: unsupported descr '" + std::string(descr) + "'");
  }
  const char kind = descr[1];
  const char width = descr[2];
  const bool kind_ok = kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b';
  if (!kind_ok || (width != '1' && width != '2' && width != '4' && width != '8') ||
      (kind == 'f' && width != '2' && width != '4')) {
    throw std::runtime_error("npy: unsupported descr '" + std::string(descr) + "'");
  }
  return static_cast<std::size_t>(width - '0');
}

/// An n-dimensional array as raw little-endian bytes plus its descr and shape.
struct npy_array {
  std::string descr;  ///< "<f4", "<f2", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8"
  std::vector<std::size_t> shape;  ///< empty for a scalar
  std::vector<std::uint8_t> bytes;

  std::size_t size() const {
    std::size_t n = 1;
    for (const auto d : shape)
      n *= d;
    return n;
  }

  /// Builds an array from typed values; shape defaults to 1-D.
  template <class T>
  static npy_array from(std::span<const T> values, std::vector<std::size_t> shape_ = {},
                        std::string_view descr_ = npy_descr_of<T>()) {
    npy_array a;
    a.descr = std::string(descr_);
    a.shape = shape_.empty() ? std::vector<std::size_t>{values.size()} : std::move(shape_);
    if (a.size() != values.size() || npy_item_size(a.descr) != sizeof(T)) {
      throw std::runtime_error("npy: shape or descr does not match the values");
    }
    a.bytes.resize(values.size_bytes());
    if (!values.empty())
      std::memcpy(a.bytes.data(), values.data(), values.size_bytes());
    return a;
  }
  template <class T>
  static npy_array from(const std::vector<T>& values, std::vector<std::size_t> shape_ = {},
                        std::string_view descr_ = npy_descr_of<T>()) {
    return from(std::span<const T>(values), std::move(shape_), descr_);
  }

  /// Copies the elements out as T; T's size must equal the item size (descr kind is not checked,
  /// so "<f2" data can be read as std::uint16_t bits and "<f4" as std::uint32_t bits).
  template <class T>
  std::vector<T> values() const {
    if (npy_item_size(descr) != sizeof(T)) {
      throw std::runtime_error("npy: reading descr '" + descr + "' as a type of " +
                               std::to_string(sizeof(T)) + " bytes");
    }
    std::vector<T> v(bytes.size() / sizeof(T));
    if (!v.empty())
      std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
  }
};

/// Writes `a` as an .npy file (version 1.0). Throws std::runtime_error on I/O failure.
inline void write_npy(const std::string& path, const npy_array& a) {
  if (a.bytes.size() != a.size() * npy_item_size(a.descr)) {
    throw std::runtime_error("npy: byte count does not match shape for " + path);
  }
  std::string shape = "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(a.shape[i]);
  }
  shape += a.shape.size() == 1 ? ",)" : ")";  // a 1-tuple needs its comma: "(5,)"
  std::string header =
      "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // magic(6) + version(2) + header_len(2) + header + '\n' must be a multiple of 64.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xFFFF)
    throw std::runtime_error("npy: header too long");
  std::ofstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error("npy: cannot open " + path + " for writing");
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00'};
  f.write(magic, 8);
  const char len[2] = {static_cast<char>(header.size() & 0xFFu),
                       static_cast<char>(header.size() >> 8)};
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(a.bytes.data()),
          static_cast<std::streamsize>(a.bytes.size()));
  if (!f)
    throw std::runtime_error("npy: write failed for " + path);
}

namespace detail {
/// The quoted value after `'key':` in an npy header dict.
inline std::string npy_header_field(const std::string& h, const std::string& key,
                                    const std::string& path) {
  const auto k = h.find("'" + key + "'");
  if (k == std::string::npos)
    throw std::runtime_error("npy: no '" + key + "' in " + path);
  auto p = h.find(':', k);
  if (p == std::string::npos)
    throw std::runtime_error("npy: malformed header in " + path);
  ++p;
  while (p < h.size() && h[p] == ' ')
    ++p;
  return h.substr(p);
}
}  // namespace detail

/// Reads an .npy file written by numpy, by ort_run.js or by write_npy.
inline npy_array read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error("npy: cannot open " + path);
  std::vector<char> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 10 || std::memcmp(all.data(), "\x93NUMPY", 6) != 0) {
    throw std::runtime_error("npy: bad magic in " + path);
  }
  const auto byte = [&](std::size_t i) {
    return static_cast<std::size_t>(static_cast<unsigned char>(all[i]));
  };
  const int major = static_cast<int>(byte(6));
  std::size_t hlen = 0;
  std::size_t off = 0;
  if (major == 1) {
    hlen = byte(8) | (byte(9) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (all.size() < 12)
      throw std::runtime_error("npy: truncated header in " + path);
    hlen = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
    off = 12;
  } else {
    throw std::runtime_error("npy: unsupported version in " + path);
  }
  if (all.size() < off + hlen)
    throw std::runtime_error("npy: truncated header in " + path);
  const std::string h(all.data() + off, hlen);
  npy_array a;
  const std::string d = detail::npy_header_field(h, "descr", path);
  if (d.size() < 5 || d[0] != '\'')
    throw std::runtime_error("npy: bad descr in " + path);
  a.descr = d.substr(1, d.find('\'', 1) - 1);
  if (a.descr == "|b1")
    a.descr = "|u1";
  if (a.descr == "<u1" || a.descr == "<i1")
    a.descr[0] = '|';
  if (detail::npy_header_field(h, "fortran_order", path).rfind("False", 0) != 0) {
    throw std::runtime_error("npy: fortran_order arrays are not supported: " + path);
  }
  const std::string s = detail::npy_header_field(h, "shape", path);
  if (s.empty() || s[0] != '(')
    throw std::runtime_error("npy: bad shape in " + path);
  std::size_t i = 1;
  while (i < s.size() && s[i] != ')') {
    if (s[i] >= '0' && s[i] <= '9') {
      std::size_t v = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + static_cast<std::size_t>(s[i] - '0');
        ++i;
      }
      a.shape.push_back(v);
    } else {
      ++i;
    }
  }
  const std::size_t nbytes = a.size() * npy_item_size(a.descr);
  const std::size_t data_off = off + hlen;
  if (all.size() < data_off + nbytes)
    throw std::runtime_error("npy: truncated data in " + path);
  a.bytes.assign(all.begin() + static_cast<std::ptrdiff_t>(data_off),
                 all.begin() + static_cast<std::ptrdiff_t>(data_off + nbytes));
  return a;
}

}  // namespace quark::test
