// SPDX-License-Identifier: MIT
// Calibration data readers: .npy / .npz parsing (NumPy format 1.0-3.0, either byte order, C or
// Fortran order), the folder layouts of npy_folder_reader, seeded random samples and sample
// validation.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <vector>

#include <quark/core/finite.hpp>
#include <quark/core/saturate.hpp>
#include <quark/onnx/calib_data.hpp>

#include "quantizer/dynamic_dims.hpp"
#include <zlib.h>

namespace quark::onnx {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(std::string_view id, const std::string& what) {
  throw frontend_error(std::string(id), what);
}

std::string shape_str(const shape_t& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i)
      out += 'x';  // not `"x" + std::string&&`: a false -Wrestrict of GCC 12 at -O3
    out += std::to_string(s[i]);
  }
  return out + "]";
}

struct npy_kind {
  char kind;
  std::size_t bytes;
  dtype_id id;
};

constexpr npy_kind npy_kinds[] = {
    {'f', 4, dtype_id::float32}, {'f', 2, dtype_id::float16}, {'f', 8, dtype_id::float64},
    {'i', 1, dtype_id::int8},    {'i', 2, dtype_id::int16},   {'i', 4, dtype_id::int32},
    {'i', 8, dtype_id::int64},   {'u', 1, dtype_id::uint8},   {'u', 2, dtype_id::uint16},
    {'u', 4, dtype_id::uint32},  {'u', 8, dtype_id::uint64},  {'b', 1, dtype_id::boolean},
};

std::string header_field(const std::string& h, const std::string& key) {
  const auto k = h.find("'" + key + "'");
  if (k == std::string::npos)
    return {};
  auto p = h.find(':', k);
  if (p == std::string::npos)
    return {};
  ++p;
  while (p < h.size() && h[p] == ' ')
    ++p;
  if (p >= h.size())
    return {};
  if (h[p] == '\'') {
    const auto e = h.find('\'', p + 1);
    return e == std::string::npos ? std::string{} : h.substr(p + 1, e - p - 1);
  }
  if (h[p] == '(') {
    const auto e = h.find(')', p);
    return e == std::string::npos ? std::string{} : h.substr(p + 1, e - p - 1);
  }
  const auto e = h.find_first_of(",}", p);
  return h.substr(p, e - p);
}

/// Copies the elements of `f` (`size`-byte elements of `shape` in column-major order, as
/// np.save writes a Fortran-ordered array) to `out` in row-major order.
void fortran_to_c(std::string_view f, const shape_t& shape, std::size_t size, char* out) {
  const std::size_t rank = shape.size();
  if (rank == 0) {  // a scalar (also keeps GCC 12 -O3 from a false -Wfree-nonheap-object below)
    if (f.size() >= size)
      std::memcpy(out, f.data(), size);
    return;
  }
  std::vector<std::size_t> stride(rank);  // of each axis in f, in bytes
  std::size_t s = size;
  for (std::size_t k = 0; k < rank; ++k) {
    stride[k] = s;
    s *= static_cast<std::size_t>(shape[k]);
  }
  std::vector<std::size_t> index(rank, 0);
  const std::size_t n = f.size() / size;
  std::size_t from = 0;  // offset in f of the element at `index`
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(out + i * size, f.data() + from, size);
    // Next row-major index: the last axis moves fastest.
    for (std::size_t k = rank; k-- > 0;) {
      if (++index[k] < static_cast<std::size_t>(shape[k])) {
        from += stride[k];
        break;
      }
      from -= stride[k] * (index[k] - 1);
      index[k] = 0;
    }
  }
}

/// Parses .npy bytes; `what` names the file (or archive member) in errors.
tensor parse_npy(std::string_view bytes, const std::string& what) {
  auto bad = [&](const std::string& why) -> void {
    fail("quark.calib_data.npy", "'" + what + "': " + why);
  };
  if (bytes.size() < 10 || bytes.substr(0, 6) != "\x93NUMPY")
    bad("not a .npy file");
  const auto major = static_cast<unsigned char>(bytes[6]);
  std::size_t hlen = 0;
  std::size_t off = 0;
  if (major == 1) {
    hlen = static_cast<std::size_t>(static_cast<unsigned char>(bytes[8])) |
           (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      bad("truncated header");
    for (std::size_t i = 0; i < 4; ++i) {
      hlen |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    off = 12;
  } else {
    bad("unsupported format version " + std::to_string(major));
  }
  if (bytes.size() < off + hlen)
    bad("truncated header");
  const std::string h(bytes.substr(off, hlen));
  const std::string descr = header_field(h, "descr");
  const bool fortran = header_field(h, "fortran_order").find("True") != std::string::npos;
  if (descr.size() < 2 ||
      (descr[0] != '<' && descr[0] != '>' && descr[0] != '|' && descr[0] != '=')) {
    bad("unsupported dtype '" + descr + "'");
  }
  const bool big_endian = descr[0] == '>';
  const char kind = descr[1];
  const std::size_t bytes_per = static_cast<std::size_t>(std::atoi(descr.c_str() + 2));
  const npy_kind* k = nullptr;
  for (const auto& c : npy_kinds) {
    if (c.kind == kind && c.bytes == bytes_per)
      k = &c;
  }
  if (k == nullptr)
    bad("unsupported dtype '" + descr + "'");
  // The shape tuple: non-negative integers ("(2, 3)", "(5,)", "()"), checked against the bytes
  // the file holds before anything is allocated, so a forged header cannot ask for 2^80 bytes.
  const std::string shape_text = header_field(h, "shape");
  shape_t shape;
  std::stringstream ss(shape_text);
  std::string item;
  const std::size_t have = bytes.size() - off - hlen;
  std::size_t need = bytes_per;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(' ');
    if (b == std::string::npos)
      continue;
    const auto e = item.find_last_not_of(' ');
    std::int64_t d = -1;
    const auto [ptr, ec] = std::from_chars(item.data() + b, item.data() + e + 1, d);
    if (ec != std::errc{} || ptr != item.data() + e + 1 || d < 0)
      bad("bad shape '(" + shape_text + ")' in the header");
    shape.push_back(d);
    need = (need == 0 || d == 0)                       ? 0
           : need > have / static_cast<std::size_t>(d) ? have + 1
                                                       : need * static_cast<std::size_t>(d);
  }
  if (need > have) {
    bad("data truncated: " + std::to_string(have) + " bytes for shape '(" + shape_text + ")' of " +
        std::to_string(bytes_per) + "-byte values");
  }
  tensor t(k->id, shape);
  if (need == 0)  // an empty array has no buffer to copy into (memcpy from / to null is UB)
    return t;
  const std::string_view data = bytes.substr(off + hlen, need);
  auto* out = reinterpret_cast<char*>(t.bytes().data());
  if (fortran && shape.size() > 1)
    fortran_to_c(data, shape, bytes_per, out);
  else
    std::memcpy(out, data.data(), need);
  if (big_endian && bytes_per > 1) {
    for (std::size_t i = 0; i < need; i += bytes_per)
      std::reverse(out + i, out + i + bytes_per);
  }
  return t;
}

std::string read_file(const fs::path& p, std::string_view id) {
  std::ifstream f(p, std::ios::binary);
  if (!f)
    fail(id, "cannot open '" + p.string() + "'");
  std::ostringstream os;
  os << f.rdbuf();
  return std::move(os).str();
}

std::uint32_t le32(std::string_view b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  }
  return v;
}
std::uint32_t le16(std::string_view b, std::size_t at) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(b[at])) |
         (static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8);
}

/// ZIP compression methods of the members np.savez (stored) and np.savez_compressed write.
namespace npz_member {
inline constexpr std::uint32_t stored = 0, deflated = 8;
}  // namespace npz_member

std::uint32_t crc32_of(std::string_view bytes) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed pieces of at most 1 GB.
  constexpr std::size_t piece = std::size_t{1} << 30;
  for (std::size_t i = 0; i < bytes.size(); i += piece) {
    const std::size_t n = std::min(piece, bytes.size() - i);
    c = ::crc32(c, reinterpret_cast<const Bytef*>(bytes.data() + i), static_cast<uInt>(n));
  }
  return static_cast<std::uint32_t>(c);
}

/// The `usize` bytes a raw deflate stream (ZIP method 8) expands to. Deflate expands at most
/// 1032:1, so a header claiming more than that is refused before anything is allocated.
std::string inflate_member(std::string_view in, std::size_t usize, const std::string& member) {
  constexpr std::size_t max_ratio = 1032;
  if (usize / max_ratio > in.size()) {
    fail("quark.calib_data.npz", member + " is corrupt: " + std::to_string(in.size()) +
                                     " deflated bytes cannot expand to the " +
                                     std::to_string(usize) + " its header claims");
  }
  if (usize == 0)
    fail("quark.calib_data.npz", member + " is corrupt: its header claims 0 bytes");
  std::string out;
  try {
    out.resize(usize);
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    fail("quark.calib_data.npz",
         member + " expands to " + std::to_string(usize) + " bytes, more than fit in memory");
  }
  z_stream z{};
  if (::inflateInit2(&z, -MAX_WBITS) != Z_OK)
    fail("quark.calib_data.npz", member + ": zlib's inflateInit2 failed");
  struct ender {
    z_stream* z;
    ~ender() { ::inflateEnd(z); }
  } end_at_exit{&z};
  constexpr std::size_t piece = std::size_t{1} << 30;  // zlib counts in uInt
  std::size_t in_at = 0, out_at = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (z.avail_in == 0 && in_at < in.size()) {
      const std::size_t n = std::min(piece, in.size() - in_at);
      // zlib never writes through next_in; its API is not const-correct.
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_at));
      z.avail_in = static_cast<uInt>(n);
      in_at += n;
    }
    if (z.avail_out == 0 && out_at < out.size()) {
      const std::size_t n = std::min(piece, out.size() - out_at);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + out_at);
      z.avail_out = static_cast<uInt>(n);
      out_at += n;
    }
    rc = ::inflate(&z, Z_NO_FLUSH);
    // Out of input or of room with the stream unfinished: Z_BUF_ERROR once nothing can move.
    if (rc == Z_BUF_ERROR &&
        ((z.avail_in == 0 && in_at < in.size()) || (z.avail_out == 0 && out_at < out.size()))) {
      rc = Z_OK;
    }
  }
  if (rc != Z_STREAM_END) {
    fail("quark.calib_data.npz",
         member + " is corrupt: its deflate stream " +
             (rc == Z_BUF_ERROR ? std::string("ends early or expands past the size its header "
                                              "claims (") +
                                      std::to_string(usize) + " bytes)"
                                : std::string("is malformed (zlib: ") +
                                      (z.msg != nullptr ? z.msg : "error") + ")"));
  }
  if (z.total_out != usize || z.avail_in != 0 || in_at != in.size()) {
    fail("quark.calib_data.npz", member + " is corrupt: its deflate stream gives " +
                                     std::to_string(z.total_out) + " bytes, its header claims " +
                                     std::to_string(usize) +
                                     (z.avail_in != 0 || in_at != in.size()
                                          ? ", and compressed bytes follow the stream's end"
                                          : ""));
  }
  return out;
}

}  // namespace

void calibration_data_reader::rewind() {
  throw frontend_error("quark.calib_data.rewind", "this calibration reader cannot rewind");
}

std::optional<calib_sample> memory_reader::next() {
  if (pos_ >= samples_.size())
    return std::nullopt;
  return samples_[pos_++];
}

tensor read_npy(const std::filesystem::path& file) {
  return parse_npy(read_file(file, "quark.calib_data.npy"), file.string());
}

void write_npy(const std::filesystem::path& file, const tensor& t) {
  const npy_kind* k = nullptr;
  for (const auto& c : npy_kinds) {
    if (c.id == t.type())
      k = &c;
  }
  if (k == nullptr) {
    fail("quark.calib_data.npy", "cannot write a " + std::string(dtype_name(t.type())) +
                                     " tensor as .npy ('" + file.string() + "')");
  }
  std::string shape;
  for (auto d : t.shape())
    shape += std::to_string(d) + ", ";
  if (t.rank() > 1)
    shape.resize(shape.size() - 2);
  if (t.rank() == 1)
    shape.resize(shape.size() - 1);
  std::string h = "{'descr': '" + std::string(k->kind == 'b' ? "|" : "<") + k->kind +
                  std::to_string(k->bytes) + "', 'fortran_order': False, 'shape': (" + shape +
                  "), }";
  while ((10 + h.size() + 1) % 64 != 0)
    h += ' ';
  h += '\n';
  std::ofstream f(file, std::ios::binary);
  if (!f)
    fail("quark.calib_data.npy", "cannot write '" + file.string() + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
  f.write(len, 2);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(t.bytes().data()),
          static_cast<std::streamsize>(t.byte_size()));
  if (!f)
    fail("quark.calib_data.npy", "write failed for '" + file.string() + "'");
}

std::map<std::string, tensor> read_npz(const std::filesystem::path& file) {
  const std::string data = read_file(file, "quark.calib_data.npz");
  const std::string_view b(data);
  std::map<std::string, tensor> out;
  std::size_t at = 0;
  // Walk the local file headers (PK\3\4); the central directory ends the walk.
  while (at + 30 <= b.size() && le32(b, at) == 0x04034b50u) {
    const std::uint32_t flags = le16(b, at + 6);
    const std::uint32_t method = le16(b, at + 8);
    const std::uint32_t crc = le32(b, at + 14);
    std::size_t csize = le32(b, at + 18);
    std::size_t usize = le32(b, at + 22);
    const std::size_t name_len = le16(b, at + 26);
    const std::size_t extra_len = le16(b, at + 28);
    const std::string name(b.substr(at + 30, name_len));
    const std::size_t body = at + 30 + name_len + extra_len;
    const std::string member = "'" + file.string() + "': member '" + name + "'";
    if (body > b.size())
      fail("quark.calib_data.npz", member + ": its header is truncated");
    if (method != npz_member::stored && method != npz_member::deflated) {
      fail("quark.calib_data.npz",
           member + " uses ZIP compression method " + std::to_string(method) +
               "; NumPy's np.savez (stored) and np.savez_compressed (deflate) are read");
    }
    if ((flags & 0x1u) != 0)
      fail("quark.calib_data.npz", member + " is encrypted");
    if ((flags & 0x8u) != 0) {
      // Sizes and CRC after the data (a ZIP written to a pipe): where a stored member ends is
      // then known only from the central directory. NumPy writing to a file never does this.
      fail("quark.calib_data.npz",
           member +
               " was streamed (sizes in a data descriptor); write the archive to a file "
               "with np.savez or np.savez_compressed");
    }
    if (csize == 0xffffffffu || usize == 0xffffffffu) {
      // ZIP64: the sizes whose header field is 0xffffffff are in the extra field of tag 1, in
      // this order: uncompressed, then compressed (numpy writes ZIP64 extras for every member).
      std::size_t e = at + 30 + name_len;
      const std::size_t e_end = e + extra_len;
      bool found = false;
      while (e + 4 <= e_end) {
        const std::uint32_t tag = le16(b, e);
        const std::uint32_t sz = le16(b, e + 2);
        if (e + 4 + sz > e_end)
          fail("quark.calib_data.npz", member + " has an extra field past its header");
        if (tag == 1) {
          std::size_t f = e + 4;
          for (std::size_t* v : {&usize, &csize}) {
            if (*v != 0xffffffffu)
              continue;
            if (f + 8 > e + 4 + sz)
              fail("quark.calib_data.npz", member + ": its ZIP64 extra field is too short");
            *v = static_cast<std::size_t>(le32(b, f)) |
                 (static_cast<std::size_t>(le32(b, f + 4)) << 32);
            f += 8;
          }
          found = true;
        }
        e += 4 + sz;
      }
      if (!found)
        fail("quark.calib_data.npz", member + ": ZIP64 sizes without a ZIP64 extra field");
    }
    if (csize > b.size() - body)  // (body + csize could wrap: ZIP64 sizes are 64-bit)
      fail("quark.calib_data.npz", member + " truncated");
    const std::string_view stored = b.substr(body, csize);
    std::string inflated;
    if (method == npz_member::deflated)
      inflated = inflate_member(stored, usize, member);
    else if (usize != csize)
      fail("quark.calib_data.npz", member + ": stored, yet its two sizes differ");
    const std::string_view bytes = method == npz_member::deflated ? inflated : stored;
    if (crc32_of(bytes) != crc) {
      fail("quark.calib_data.npz",
           member + " is corrupt: its CRC-32 does not match the one in its header");
    }
    std::string key = name;
    if (key.size() > 4 && key.ends_with(".npy"))
      key.resize(key.size() - 4);
    out.emplace(key, parse_npy(bytes, file.string() + ":" + name));
    at = body + csize;
  }
  if (out.empty())
    fail("quark.calib_data.npz", "'" + file.string() + "' holds no array");
  // The members end where the central directory (PK\1\2) or, without one, its end record
  // (PK\5\6) starts, and the archive ends with that record (22 bytes and its comment); anything
  // else is a cut-off archive whose last members may be missing.
  bool end_record = false;
  if (b.size() >= at + 22) {
    const std::size_t lowest =
        std::max(at, b.size() - std::min<std::size_t>(b.size(), 22 + 0xffff));
    for (std::size_t e = b.size() - 22; !end_record; --e) {
      end_record = le32(b, e) == 0x06054b50u && e + 22 + le16(b, e + 20) == b.size();
      if (e == lowest)
        break;
    }
  }
  if (at + 4 > b.size() || (le32(b, at) != 0x02014b50u && le32(b, at) != 0x06054b50u) ||
      !end_record) {
    fail("quark.calib_data.npz", "'" + file.string() + "' is truncated or corrupt after member " +
                                     std::to_string(out.size()) +
                                     " (no central directory and end record where the members "
                                     "end)");
  }
  return out;
}

npy_folder_reader::npy_folder_reader(std::filesystem::path folder, std::string_view role)
    : folder_(std::move(folder)) {
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) {
    fail("quark.calib_data.folder",
         std::string(role) + " folder '" + folder_.string() +
             (fs::exists(folder_, ec) ? "' is not a folder" : "' does not exist"));
  }
  std::vector<fs::path> dirs, npz, npy;
  for (const auto& e : fs::directory_iterator(folder_)) {
    // Hidden entries (.ipynb_checkpoints, .DS_Store, an editor's .x.npy.swp) are no samples.
    if (e.path().filename().string().starts_with('.'))
      continue;
    if (e.is_directory()) {
      dirs.push_back(e.path());
    } else if (e.path().extension() == ".npz") {
      npz.push_back(e.path());
    } else if (e.path().extension() == ".npy") {
      npy.push_back(e.path());
    }
  }
  // One layout per folder: taking the sub-folders and leaving loose files out (or the other
  // way round) would calibrate on part of what the user gave without a word.
  if ((dirs.empty() ? 0 : 1) + (npz.empty() ? 0 : 1) + (npy.empty() ? 0 : 1) > 1) {
    fail("quark.calib_data.layout",
         std::string(role) + " folder '" + folder_.string() + "' mixes layouts (" +
             std::to_string(dirs.size()) + " sub-folder(s), " + std::to_string(npz.size()) +
             " .npz file(s), " + std::to_string(npy.size()) +
             " .npy file(s)): use one sub-folder per sample, one .npz per sample, or loose .npy "
             "files for a model with one input");
  }
  if (!dirs.empty()) {
    layout_ = layout::sample_dirs;
    entries_ = std::move(dirs);
  } else if (!npz.empty()) {
    layout_ = layout::npz;
    entries_ = std::move(npz);
  } else {
    layout_ = layout::flat;
    entries_ = std::move(npy);
  }
  std::sort(entries_.begin(), entries_.end());
  if (entries_.empty()) {
    fail("quark.calib_data.empty", std::string(role) + " folder '" + folder_.string() +
                                       "' holds no sample (.npy files, .npz files or one "
                                       "sub-folder per sample)");
  }
}

std::optional<calib_sample> npy_folder_reader::next() {
  if (pos_ >= entries_.size())
    return std::nullopt;
  const fs::path& p = entries_[pos_++];
  calib_sample s;
  switch (layout_) {
    case layout::sample_dirs: {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.path().extension() == ".npy")
          files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      if (files.empty())
        fail("quark.calib_data.empty", "sample folder '" + p.string() + "' holds no .npy file");
      for (const auto& f : files)
        s.emplace(f.stem().string(), read_npy(f));
      break;
    }
    case layout::npz: {
      auto m = read_npz(p);
      for (auto& [k, v] : m)
        s.emplace(k, std::move(v));
      break;
    }
    case layout::flat: {
      if (single_input_.empty()) {
        fail("quark.calib_data.layout",
             "'" + folder_.string() +
                 "' holds loose .npy files, which need a single-input model "
                 "(use one sub-folder per sample with <input name>.npy files)");
      }
      s.emplace(single_input_, read_npy(p));
      break;
    }
  }
  return s;
}

random_reader::random_reader(std::vector<input_signature> inputs, random_data_options options)
    : inputs_(std::move(inputs)), options_(std::move(options)) {
  for (const auto& [name, shape] : options_.shapes) {
    // Clang 14 cannot capture structured bindings: compare through a plain reference.
    const std::string& key = name;
    const bool known = std::any_of(inputs_.begin(), inputs_.end(),
                                   [&](const input_signature& i) { return i.name == key; });
    if (!known) {
      fail("quark.calib_data.input",
           "RandomDataReaderInputShape names '" + name + "', which is not an input of the model");
    }
  }
  for (const auto& [name, range] : options_.ranges) {
    const std::string& key = name;
    const bool known = std::any_of(inputs_.begin(), inputs_.end(),
                                   [&](const input_signature& i) { return i.name == key; });
    if (!known) {
      fail("quark.calib_data.input", "RandomDataReaderInputDataRange names '" + name +
                                         "', which is not an input of the model");
    }
    if (!(range.first < range.second)) {
      fail("quark.calib_data.range",
           "RandomDataReaderInputDataRange of '" + name + "' must have low < high");
    }
    if (!std::isfinite(range.second - range.first)) {
      fail("quark.calib_data.range",
           "RandomDataReaderInputDataRange of '" + name + "': high - low must be a finite number");
    }
  }
  for (auto& in : inputs_) {
    if (auto it = options_.shapes.find(in.name); it != options_.shapes.end()) {
      const shape_t& s = it->second;
      if (s.size() != in.shape.size() && !in.shape.empty()) {
        fail("quark.calib_data.shape", "shape " + shape_str(s) + " given for input '" + in.name +
                                           "' has rank " + std::to_string(s.size()) +
                                           ", the model declares rank " +
                                           std::to_string(in.shape.size()));
      }
      for (std::size_t d = 0; d < s.size() && d < in.shape.size(); ++d) {
        if (in.shape[d] >= 0 && s[d] != in.shape[d]) {
          fail("quark.calib_data.shape", "shape " + shape_str(s) + " given for input '" + in.name +
                                             "' contradicts the model's " + shape_str(in.shape));
        }
      }
      in.shape = s;
    }
    const shape_t declared = in.shape;
    for (auto& d : in.shape) {
      if (d < 0)
        d = 1;
    }
    if (qz::dynamic_dim_at_one(declared, in.shape)) {
      notes_.push_back("calibration data: input '" + in.name + "' has dynamic dims (" +
                       qz::dims_text(declared) +
                       ") and no RandomDataReaderInputShape (quark_quantize --shape " + in.name +
                       ":...): its random data is " + shape_str(in.shape) +
                       ", whose ranges seldom fit real inputs");
    }
    // The runtime's element bound: a shape past it would end in std::bad_alloc (or, past
    // 2^64, a size that wrapped around).
    constexpr std::uint64_t limit = std::uint64_t{1} << 31;
    std::uint64_t n = 1;
    for (const auto d : in.shape) {
      const auto u = static_cast<std::uint64_t>(d);
      n = (u != 0 && n > limit / u) ? limit + 1 : n * u;
    }
    if (n > limit) {
      fail("quark.calib_data.shape", "random data for input '" + in.name + "' of shape " +
                                         shape_str(in.shape) + " would hold more than 2^31 values");
    }
  }
}

void random_reader::rewind() {
  pos_ = 0;
}

std::optional<calib_sample> random_reader::next() {
  if (pos_ >= options_.count)
    return std::nullopt;
  // Each sample has its own stream so rewinding reproduces it.
  std::mt19937_64 gen(options_.seed + pos_);
  ++pos_;
  calib_sample s;
  for (const auto& in : inputs_) {
    double lo = 0.0, hi = 1.0;
    if (auto it = options_.ranges.find(in.name); it != options_.ranges.end()) {
      lo = it->second.first;
      hi = it->second.second;
    }
    tensor t(in.type, in.shape);
    std::uniform_real_distribution<double> u(lo, hi);
    quark::visit_dtype(in.type, [&](auto id) {
      using T = typename decltype(id)::type;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        for (auto& v : t.data<T>())
          v = static_cast<T>(u(gen));
      } else if constexpr (std::is_same_v<T, bool>) {
        for (auto& v : t.data<T>())
          v = u(gen) >= (lo + hi) / 2;
      } else if constexpr (std::is_integral_v<T>) {
        for (auto& v : t.data<T>())
          v = quark::saturate_cast<T>(std::floor(u(gen)));
      } else {
        fail("quark.calib_data.type", "random data for input '" + in.name + "' of type " +
                                          std::string(dtype_name(in.type)) +
                                          " is not implemented yet");
      }
    });
    s.emplace(in.name, std::move(t));
  }
  return s;
}

namespace {

/// The non-finite values of a floating-point tensor: how many, the first one's index and name
/// (count 0 when every element is finite or the type has no such values).
struct non_finite_scan {
  std::size_t count = 0;
  std::size_t first = 0;
  const char* what = "";
};

non_finite_scan scan_non_finite(const tensor& t) {
  non_finite_scan r;
  const auto scan = [&r](auto values) {
    // Every sample passes here: the (vectorised) count first, the search only when it finds one.
    r.count = quark::count_non_finite(values);
    if (r.count != 0) {
      r.first = *quark::first_non_finite(values);
      r.what = quark::non_finite_name(values[r.first]);
    }
  };
  switch (t.type()) {
    case dtype_id::float32:
      scan(t.data<float>());
      break;
    case dtype_id::float64:
      scan(t.data<double>());
      break;
    case dtype_id::float16:
      scan(t.data<quark::float16>());
      break;
    case dtype_id::bfloat16:
      scan(t.data<quark::bfloat16>());
      break;
    default:
      break;
  }
  return r;
}

/// "[0, 1, 2, 3]": the position of flat element `i` in a C-order tensor of `shape`.
std::string position_str(std::size_t i, const shape_t& shape) {
  std::vector<std::size_t> pos(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto n = static_cast<std::size_t>(shape[d]);
    pos[d] = n ? i % n : 0;
    i = n ? i / n : 0;
  }
  std::string out = "[";
  for (std::size_t d = 0; d < pos.size(); ++d)
    out += (d ? ", " : "") + std::to_string(pos[d]);
  return out + "]";
}

}  // namespace

void check_sample(const calib_sample& s, const std::vector<input_signature>& inputs,
                  std::size_t index, std::string_view what) {
  const std::string where = std::string(what) + " " + std::to_string(index);
  for (const auto& [name, t] : s) {
    const std::string& key = name;
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const input_signature& i) { return i.name == key; });
    if (it == inputs.end()) {
      std::string known;
      for (const auto& i : inputs)
        known += (known.empty() ? "'" : ", '") + i.name + "'";
      fail("quark.calib_data.input", where + " feeds '" + name +
                                         "', which is not an input of the model (inputs: " + known +
                                         ")");
    }
    // numpy has no bfloat16, and float16 data is often kept as float32: float32 feeds either,
    // rounded to it by the runtime.
    const bool type_ok = t.type() == it->type ||
                         ((it->type == dtype_id::float16 || it->type == dtype_id::bfloat16) &&
                          t.type() == dtype_id::float32);
    if (!type_ok) {
      fail("quark.calib_data.type", where + ": input '" + name + "' is " +
                                        std::string(dtype_name(t.type())) + ", the model expects " +
                                        std::string(dtype_name(it->type)));
    }
    bool shape_ok = it->shape.empty() || t.shape().size() == it->shape.size();
    for (std::size_t d = 0; shape_ok && d < it->shape.size(); ++d) {
      if (it->shape[d] >= 0 && t.shape()[d] != it->shape[d])
        shape_ok = false;
    }
    if (!shape_ok) {
      fail("quark.calib_data.shape", where + ": input '" + name + "' has shape " +
                                         shape_str(t.shape()) + ", the model expects " +
                                         shape_str(it->shape) + " (-1: any)");
    }
  }
  for (const auto& in : inputs) {
    if (!s.contains(in.name)) {
      fail("quark.calib_data.input", where + " does not feed input '" + in.name + "'");
    }
  }
  // Non-finite data would not fail by itself everywhere: the histogram observers skip NaN
  // (numpy's rule), pof2 MinMSE reads NaN as 0 and +-Inf as +-FLT_MAX (Quark's nan_to_num), and
  // MinMax stretches to the largest finite range: each a model calibrated on other data than
  // given, without a word. Values the model computes keep those per-method rules.
  for (const auto& [name, t] : s) {
    const non_finite_scan bad = scan_non_finite(t);
    if (bad.count == 0)
      continue;
    fail("quark.calib_data.non_finite",
         where + ": input '" + name + "' holds " + std::string(bad.what) + " at element " +
             std::to_string(bad.first) + " " + position_str(bad.first, t.shape()) + " (" +
             std::to_string(bad.count) + " non-finite value" + (bad.count == 1 ? "" : "s") +
             " in all); calibration and evaluation data must be finite");
  }
}

}  // namespace quark::onnx
