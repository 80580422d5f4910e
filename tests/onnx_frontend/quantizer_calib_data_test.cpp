// SPDX-License-Identifier: MIT
// Calibration data readers: .npy round trip, folder layouts, random data and sample checks.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/calib_data.hpp>

#include "support/checks.hpp"

namespace fs = std::filesystem;
using namespace quark::onnx;
using quark::test::error_id;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("quark_qz_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// tests/onnx_frontend/data/npz (written by gen_npz.py with NumPy's np.savez).
fs::path npz_fixture(const char* name) {
  const char* src = std::getenv("QUARK_SOURCE_DIR");
  const fs::path dir = src != nullptr ? fs::path(src) / "tests" / "onnx_frontend" / "data" / "npz"
                                      : fs::path(__FILE__).parent_path() / "data" / "npz";
  return dir / name;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void put_le(std::string& b, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    b[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

tensor ramp(shape_t shape) {
  tensor t(quark::dtype_id::float32, std::move(shape));
  float v = 0.0f;
  for (auto& x : t.data<float>())
    x = (v += 0.5f);
  return t;
}

}  // namespace

TEST_CASE("npy round trip keeps type, shape and bytes") {
  const auto d = fresh_dir("npy");
  const tensor t = ramp({2, 3, 4});
  write_npy(d / "a.npy", t);
  const tensor u = read_npy(d / "a.npy");
  CHECK(u.type() == quark::dtype_id::float32);
  CHECK(u.shape() == shape_t{2, 3, 4});
  CHECK(std::equal(t.bytes().begin(), t.bytes().end(), u.bytes().begin()));
  tensor i(quark::dtype_id::int64, {3});
  i.data<std::int64_t>()[2] = -7;
  write_npy(d / "i.npy", i);
  CHECK(read_npy(d / "i.npy").data<std::int64_t>()[2] == -7);
  fs::remove_all(d);
}

TEST_CASE("an empty array (a dimension of 0) reads back with its shape") {
  // Its data section is empty: nothing to copy (a memcpy from a null buffer, which UBSan
  // reports in the asan preset, before the fix).
  const auto d = fresh_dir("npy_empty");
  const tensor t(quark::dtype_id::float32, {0, 3});
  write_npy(d / "e.npy", t);
  const tensor u = read_npy(d / "e.npy");
  CHECK(u.type() == quark::dtype_id::float32);
  CHECK(u.shape() == shape_t{0, 3});
  CHECK(u.size() == 0u);
  fs::remove_all(d);
}

TEST_CASE("a non-npy file is rejected naming the file") {
  const auto d = fresh_dir("bad");
  std::ofstream(d / "x.npy") << "hello";
  try {
    (void)read_npy(d / "x.npy");
    FAIL("no error");
  } catch (const frontend_error& e) {
    CHECK(e.id() == "quark.calib_data.npy");
    CHECK(std::string(e.what()).find("x.npy") != std::string::npos);
  }
  fs::remove_all(d);
}

TEST_CASE("a forged .npy shape is rejected before anything is allocated") {
  // Version 1.0 header by hand: magic, version, 2-byte length, the dict, 8 bytes of data (two
  // float32 values). Shapes that overflow int64, are negative or not integers, or ask for more
  // bytes than the file holds (directly or by a product past 2^64) each name the file.
  const auto d = fresh_dir("forged");
  auto write = [&](const std::string& shape) {
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(dict.size() & 0xff);
    bytes += static_cast<char>(dict.size() >> 8);
    bytes += dict + std::string(8, '\0');
    std::ofstream(d / "f.npy", std::ios::binary) << bytes;
    return d / "f.npy";
  };
  for (const char* shape : {"99999999999999999999,", "-1,", "2, x", "3,", "4294967296, 4294967296",
                            "65536, 65536, 65536, 65536, 65536", "1.5,"}) {
    CAPTURE(shape);
    const auto f = write(shape);
    try {
      (void)read_npy(f);
      FAIL("no error");
    } catch (const frontend_error& e) {
      CHECK(e.id() == "quark.calib_data.npy");
      CHECK(std::string(e.what()).find("f.npy") != std::string::npos);
    }
  }
  // The same header with a shape that fits reads back: (2,) and (1, 2), and (0, 7) is empty.
  CHECK(read_npy(write("2,")).shape() == shape_t{2});
  CHECK(read_npy(write("1, 2")).shape() == shape_t{1, 2});
  CHECK(read_npy(write("0, 7")).size() == 0u);
  fs::remove_all(d);
}

namespace {

/// Checks the arrays gen_npz.py stores in two.npz and compressed.npz:
/// x = float32 [2, 3] = 0.5 * (1..6), ids = int64 [-2, 0, 7, 2^40].
void check_two_arrays(const std::map<std::string, tensor>& m) {
  REQUIRE(m.size() == 2u);
  const tensor& x = m.at("x");
  CHECK(x.shape() == shape_t{2, 3});
  const std::vector<float> want{0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f};
  CHECK(std::vector<float>(x.data<float>().begin(), x.data<float>().end()) == want);
  const tensor& ids = m.at("ids");
  REQUIRE(ids.type() == quark::dtype_id::int64);
  REQUIRE(ids.shape() == shape_t{4});
  CHECK(ids.data<std::int64_t>()[0] == -2);
  CHECK(ids.data<std::int64_t>()[1] == 0);
  CHECK(ids.data<std::int64_t>()[2] == 7);
  CHECK(ids.data<std::int64_t>()[3] == (std::int64_t{1} << 40));
}

/// A function that writes forged archive bytes to `dir`/f.npz and reads them with read_npz.
auto forged_reader(const fs::path& dir) {
  return [dir](const std::string& bytes) {
    std::ofstream(dir / "f.npz", std::ios::binary) << bytes;
    return read_npz(dir / "f.npz");
  };
}

/// Changes 1-4 random bytes of `good` 3000 times, then cuts it at every length: each copy reads,
/// or fails with the reader's own error naming the file; never another exception (std::bad_alloc,
/// std::length_error) and, under the sanitizers, never a read out of bounds. Returns how many
/// changed copies still read.
std::size_t mutate_and_cut(const std::string& good, const fs::path& dir, unsigned seed) {
  const auto read_forged = forged_reader(dir);
  std::mt19937 rng(seed);
  std::size_t read_ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f)
      b[rng() % b.size()] = static_cast<char>(rng() & 0xff);
    CAPTURE(i);
    try {
      (void)read_forged(b);
      ++read_ok;
    } catch (const frontend_error& e) {
      CHECK(e.id().starts_with("quark.calib_data."));
    }
  }
  // (a cut after the first member used to return "x" alone)
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    try {
      (void)read_forged(good.substr(0, n));
      FAIL("no error");
    } catch (const frontend_error& e) {
      CHECK(e.id().starts_with("quark.calib_data."));
      CHECK(std::string(e.what()).find("f.npz") != std::string::npos);
    }
  }
  return read_ok;
}

}  // namespace

TEST_CASE(".npz written by NumPy: members by name, forged and cut-off archives refused") {
  check_two_arrays(read_npz(npz_fixture("two.npz")));

  // Forged copies of two.npz. Its first local header: CRC-32 at 14, sizes at 18 / 22, name
  // length at 26, extra length at 28, the name "x.npy" at 30, then a ZIP64 extra (tag 1, 16
  // bytes: the uncompressed, then the compressed size) at 35, the .npy (128-byte header) at 55.
  const std::string good = file_bytes(npz_fixture("two.npz"));
  REQUIRE(good.size() > 60);
  REQUIRE(good.substr(30, 5) == "x.npy");
  REQUIRE(good[35] == 1);
  const auto d = fresh_dir("npz_forged");
  const auto read_forged = forged_reader(d);
  {
    // Sizes of 0xffffffff send the reader to the ZIP64 extra, which holds those of them in
    // order (uncompressed first): the same arrays.
    std::string b = good;
    put_le(b, 18, 0xffffffffu, 4);
    put_le(b, 22, 0xffffffffu, 4);
    check_two_arrays(read_forged(b));
    b = good;
    put_le(b, 18, 0xffffffffu, 4);  // the compressed size alone: the extra's first field
    check_two_arrays(read_forged(b));
    put_le(b, 35, 7, 2);  // the extra's tag no longer 1
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("without a ZIP64 extra field"),
                         frontend_error);
  }
  const std::uint64_t huge[] = {~std::uint64_t{0}, std::uint64_t{1} << 63, good.size()};
  for (const std::uint64_t csize : huge) {
    // ZIP64 compressed sizes past the file (2^64 - 1 used to wrap the end offset around).
    CAPTURE(csize);
    std::string b = good;
    put_le(b, 18, 0xffffffffu, 4);
    put_le(b, 22, 0xffffffffu, 4);
    put_le(b, 35 + 12, csize, 8);
    CHECK(error_id([&] { (void)read_forged(b); }) == "quark.calib_data.npz");
  }
  {
    // An extra field longer than the file (it used to be read past the end).
    std::string b = good;
    put_le(b, 18, 0xffffffffu, 4);
    put_le(b, 28, 0xffff, 2);
    CHECK(error_id([&] { (void)read_forged(b); }) == "quark.calib_data.npz");
    // An extra entry whose size runs past the extra field.
    b = good;
    put_le(b, 18, 0xffffffffu, 4);
    put_le(b, 37, 0xfff0, 2);
    CHECK(error_id([&] { (void)read_forged(b); }) == "quark.calib_data.npz");
  }
  {
    // x's second value (1.0f, bytes 187-190) changed: a well-formed archive whose data no longer
    // matches its CRC-32. It used to read as x[1] = 1.0000001 without a word.
    std::string b = good;
    b[187] = static_cast<char>(b[187] ^ 1);
    CHECK_THROWS_WITH_AS((void)read_forged(b),
                         doctest::Contains("member 'x.npy' is corrupt: its CRC-32 does not match"),
                         frontend_error);
    // Other compression methods (12: bzip2), encryption and streamed members are named.
    b = good;
    put_le(b, 8, 12, 2);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("compression method 12"),
                         frontend_error);
    b = good;
    put_le(b, 6, 1, 2);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("'x.npy' is encrypted"),
                         frontend_error);
    b = good;
    put_le(b, 6, 8, 2);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("'x.npy' was streamed"),
                         frontend_error);
    // Stored, yet the two sizes differ.
    b = good;
    put_le(b, 22, 151, 4);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("its two sizes differ"),
                         frontend_error);
  }
  CHECK(mutate_and_cut(good, d, 35) > 0);  // changes in unread fields and the central directory
  fs::remove_all(d);
}

TEST_CASE(".npz written by np.savez_compressed: deflated members, forged sizes and streams") {
  check_two_arrays(read_npz(npz_fixture("compressed.npz")));
  {
    // gen_npz.py: ramp = float32 [600, 500], element i = i % 7 (1.2 MB deflated to 3 KB).
    const auto m = read_npz(npz_fixture("ramp_compressed.npz"));
    REQUIRE(m.size() == 1u);
    const tensor& r = m.at("ramp");
    REQUIRE(r.shape() == shape_t{600, 500});
    const auto v = r.data<float>();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      wrong += v[i] != static_cast<float>(i % 7) ? 1u : 0u;
    CHECK(wrong == 0u);
  }
  // compressed.npz's first local header: method 8 at 8, CRC-32 at 14, compressed size 90 at 18,
  // uncompressed size 152 at 22, "x.npy" at 30, a ZIP64 extra at 35 (sizes at 39 and 47), the
  // deflate stream at 55.
  const std::string good = file_bytes(npz_fixture("compressed.npz"));
  REQUIRE(good.size() > 150);
  REQUIRE(good.substr(30, 5) == "x.npy");
  REQUIRE(good[8] == 8);
  const auto d = fresh_dir("npz_deflate");
  const auto read_forged = forged_reader(d);
  {
    // Sizes through the ZIP64 extra: the same arrays.
    std::string b = good;
    put_le(b, 18, 0xffffffffu, 4);
    put_le(b, 22, 0xffffffffu, 4);
    check_two_arrays(read_forged(b));
    put_le(b, 37, 8, 2);  // an extra of one field where two are needed
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("ZIP64 extra field is too short"),
                         frontend_error);
    put_le(b, 37, 16, 2);
    // An uncompressed size deflate cannot reach from 90 bytes: refused before allocating it.
    put_le(b, 39, std::uint64_t{1} << 60, 8);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("cannot expand to the"),
                         frontend_error);
  }
  {
    // One byte more or less than the stream gives.
    std::string b = good;
    put_le(b, 22, 153, 4);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("'x.npy' is corrupt"),
                         frontend_error);
    b = good;
    put_le(b, 22, 151, 4);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("'x.npy' is corrupt"),
                         frontend_error);
    b = good;
    put_le(b, 22, 0, 4);
    CHECK_THROWS_WITH_AS((void)read_forged(b), doctest::Contains("claims 0 bytes"), frontend_error);
    // A compressed size one byte past the deflate stream's end.
    b = good;
    put_le(b, 18, 91, 4);
    CHECK_THROWS_WITH_AS((void)read_forged(b),
                         doctest::Contains("and compressed bytes follow the stream's end"),
                         frontend_error);
  }
  {
    // Every single bit of x's deflate stream flipped: an error each time (zlib's own checks or
    // the CRC-32), never a wrong array.
    for (std::size_t at = 55; at < 55 + 90; ++at) {
      for (int bit = 0; bit < 8; ++bit) {
        CAPTURE(at);
        CAPTURE(bit);
        std::string b = good;
        b[at] = static_cast<char>(b[at] ^ (1 << bit));
        try {
          const auto m = read_forged(b);
          // A flip zlib and the CRC both miss would have to leave the data intact.
          check_two_arrays(m);
        } catch (const frontend_error& e) {
          CHECK(e.id() == "quark.calib_data.npz");
        }
      }
    }
  }
  (void)mutate_and_cut(good, d, 36);
  fs::remove_all(d);
}

TEST_CASE(".npy written by NumPy in Fortran order and big-endian reads in C order, little-endian") {
  {
    // gen_npz.py: np.asfortranarray of int16 [2, 3, 4] with element (i, j, k) = 100i + 10j + k.
    const tensor t = read_npy(npz_fixture("fortran.npy"));
    REQUIRE(t.type() == quark::dtype_id::int16);
    REQUIRE(t.shape() == shape_t{2, 3, 4});
    const auto v = t.data<std::int16_t>();
    std::size_t at = 0;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k, ++at) {
          CAPTURE(at);
          CHECK(v[at] == 100 * i + 10 * j + k);
        }
  }
  {
    // np.save of arange(15).reshape(3, 5).T: a [5, 3] whose element (r, c) is 5c + r.
    const tensor t = read_npy(npz_fixture("fortran2.npy"));
    REQUIRE(t.shape() == shape_t{5, 3});
    const auto v = t.data<float>();
    for (std::size_t r = 0; r < 5; ++r)
      for (std::size_t c = 0; c < 3; ++c)
        CHECK(v[3 * r + c] == static_cast<float>(5 * c + r));
  }
  {
    const tensor f = read_npy(npz_fixture("big_endian.npy"));  // '>f4' 0.5 * (1..6)
    REQUIRE(f.type() == quark::dtype_id::float32);
    REQUIRE(f.shape() == shape_t{2, 3});
    const std::vector<float> want{0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f};
    CHECK(std::vector<float>(f.data<float>().begin(), f.data<float>().end()) == want);
    const tensor i = read_npy(npz_fixture("big_endian_i8.npy"));  // '>i8' [-2, 0, 7, 2^40]
    REQUIRE(i.type() == quark::dtype_id::int64);
    const std::vector<std::int64_t> want_i{-2, 0, 7, std::int64_t{1} << 40};
    CHECK(std::vector<std::int64_t>(i.data<std::int64_t>().begin(), i.data<std::int64_t>().end()) ==
          want_i);
  }
}

TEST_CASE("folder layouts: one sub-folder per sample, loose files for one input") {
  const auto d = fresh_dir("layout");
  fs::create_directories(d / "s0");
  fs::create_directories(d / "s1");
  write_npy(d / "s0" / "x.npy", ramp({1, 2}));
  write_npy(d / "s0" / "y.npy", ramp({1, 3}));
  write_npy(d / "s1" / "x.npy", ramp({1, 2}));
  write_npy(d / "s1" / "y.npy", ramp({1, 3}));
  npy_folder_reader r(d);
  CHECK(r.size() == 2u);
  auto s = r.next();
  REQUIRE(s);
  CHECK(s->size() == 2u);
  CHECK(s->at("y").shape() == shape_t{1, 3});
  CHECK(r.next());
  CHECK_FALSE(r.next());
  r.rewind();
  CHECK(r.next());

  const auto f = fresh_dir("flat");
  write_npy(f / "a.npy", ramp({4}));
  npy_folder_reader flat(f);
  CHECK(error_id([&] { (void)flat.next(); }) == "quark.calib_data.layout");
  flat.rewind();
  flat.set_single_input_name("x");
  CHECK(flat.next()->contains("x"));
  fs::remove_all(d);
  fs::remove_all(f);
}

TEST_CASE("a folder mixing layouts is an error, and hidden entries are no samples") {
  const auto d = fresh_dir("mixed");
  fs::create_directories(d / "s0");
  write_npy(d / "s0" / "x.npy", ramp({1, 2}));
  write_npy(d / "loose.npy", ramp({1, 2}));
  // Before: the sub-folder was the only sample and loose.npy was left out without a word.
  CHECK_THROWS_WITH_AS(npy_folder_reader{d},
                       doctest::Contains("mixes layouts (1 sub-folder(s), 0 .npz file(s), 1 .npy "
                                         "file(s))"),
                       frontend_error);
  CHECK(error_id([&] { npy_folder_reader r(d); }) == "quark.calib_data.layout");
  // A hidden folder or file beside the samples (a notebook's checkpoints, an editor's swap file)
  // neither counts as a sample nor makes the layout mixed.
  fs::remove(d / "loose.npy");
  fs::create_directories(d / ".ipynb_checkpoints");
  write_npy(d / ".ipynb_checkpoints" / "x.npy", ramp({1, 2}));
  write_npy(d / ".x.npy", ramp({1, 2}));
  npy_folder_reader r(d);
  CHECK(r.size() == 1u);
  CHECK(r.next()->at("x").shape() == shape_t{1, 2});
  fs::remove_all(d);
}

TEST_CASE("empty or missing folders are errors naming the folder") {
  const auto d = fresh_dir("empty");
  CHECK(error_id([&] { npy_folder_reader r(d); }) == "quark.calib_data.empty");
  CHECK(error_id([&] { npy_folder_reader r(d / "nope"); }) == "quark.calib_data.folder");
  fs::remove_all(d);
}

TEST_CASE("random reader: a note for each input whose dynamic dims past the batch become 1") {
  // x: dynamic batch only (the norm: no note); img: dynamic H, W; ids: rank 1, dynamic;
  // given: dynamic H, W with a shape given.
  const random_reader r({{"x", quark::dtype_id::float32, {-1, 3}},
                         {"img", quark::dtype_id::float32, {-1, 3, -1, -1}},
                         {"ids", quark::dtype_id::int64, {-1}},
                         {"given", quark::dtype_id::float32, {1, -1, -1}}},
                        {.shapes = {{"given", {1, 5, 5}}}, .ranges = {}});
  CHECK(r.notes() ==
        std::vector<std::string>{
            "calibration data: input 'img' has dynamic dims ([?x3x?x?]) and no "
            "RandomDataReaderInputShape (quark_quantize --shape img:...): its random data is "
            "[1x3x1x1], whose ranges seldom fit real inputs",
            "calibration data: input 'ids' has dynamic dims ([?]) and no "
            "RandomDataReaderInputShape (quark_quantize --shape ids:...): its random data is "
            "[1], whose ranges seldom fit real inputs"});
  CHECK(memory_reader({}).notes().empty());
}

TEST_CASE("random reader: seeded, shaped, in range, rewinds to the same data") {
  random_reader r({{"x", quark::dtype_id::float32, {-1, 3, 4, 4}}},
                  {.count = 2, .shapes = {{"x", {2, 3, 4, 4}}}, .ranges = {{"x", {-2.0, 2.0}}}});
  auto a = r.next();
  REQUIRE(a);
  CHECK(a->at("x").shape() == shape_t{2, 3, 4, 4});
  for (float v : a->at("x").data<float>())
    CHECK((v >= -2.0f && v < 2.0f));
  CHECK(r.next());
  CHECK_FALSE(r.next());
  r.rewind();
  auto b = r.next();
  CHECK(
      std::equal(a->at("x").bytes().begin(), a->at("x").bytes().end(), b->at("x").bytes().begin()));
  CHECK(error_id([] {
          random_reader bad({{"x", quark::dtype_id::float32, {1}}},
                            {.shapes = {{"y", {1}}}, .ranges = {}});
        }) == "quark.calib_data.input");
  CHECK(error_id([] {
          random_reader bad({{"x", quark::dtype_id::float32, {1, 3}}},
                            {.shapes = {{"x", {1, 4}}}, .ranges = {}});
        }) == "quark.calib_data.shape");
}

TEST_CASE("random reader: huge shapes, unbounded ranges and integer inputs past their type") {
  // A dynamic input given 3 x 10^10 values (std::bad_alloc before) or a shape whose element
  // count passes 2^64 (it wrapped around) is refused by name; 2^31 values is the bound.
  const input_signature dyn{"x", quark::dtype_id::float32, {1, -1, -1, -1}};
  for (const shape_t& huge : {shape_t{1, 3, 100000, 100000}, shape_t{1, 3, 9999999999, 9999999999},
                              shape_t{1, 2, 32768, 32769}}) {
    CAPTURE(huge.back());
    try {
      random_reader bad({dyn}, {.shapes = {{"x", huge}}, .ranges = {}});
      FAIL("no error");
    } catch (const frontend_error& e) {
      CHECK(e.id() == "quark.calib_data.shape");
      CHECK(std::string(e.what()).find("would hold more than 2^31 values") != std::string::npos);
    }
  }
  CHECK_NOTHROW(random_reader({dyn}, {.shapes = {{"x", {1, 2, 32768, 32768}}}, .ranges = {}}));
  // high - low overflowing to infinity has no uniform distribution.
  CHECK(error_id([] {
          random_reader bad({{"x", quark::dtype_id::float32, {1}}},
                            {.shapes = {}, .ranges = {{"x", {-1e308, 1e308}}}});
        }) == "quark.calib_data.range");
  // Integer inputs: values saturate at the type's bounds (a double past them converted to an
  // integer was undefined behaviour); int8 over [-1e300, 1e300] gives only -128 and 127.
  random_reader ints({{"i", quark::dtype_id::int8, {64}}, {"u", quark::dtype_id::uint16, {64}}},
                     {.shapes = {}, .ranges = {{"i", {-1e300, 1e300}}, {"u", {-1e300, 1e300}}}});
  const auto smp = ints.next();
  REQUIRE(smp);
  for (const std::int8_t v : smp->at("i").data<std::int8_t>())
    CHECK((v == -128 || v == 127));
  for (const std::uint16_t v : smp->at("u").data<std::uint16_t>())
    CHECK((v == 0 || v == 65535));
  // Within the type's range the floor of the uniform draw is kept: int8 over [-3, 3).
  random_reader small({{"i", quark::dtype_id::int8, {256}}},
                      {.shapes = {}, .ranges = {{"i", {-3.0, 3.0}}}});
  const auto sm = small.next();
  REQUIRE(sm);
  std::set<int> seen;
  for (const std::int8_t v : sm->at("i").data<std::int8_t>())
    seen.insert(v);
  CHECK(seen == std::set<int>{-3, -2, -1, 0, 1, 2});
}

TEST_CASE("check_sample names the culprit input") {
  const std::vector<input_signature> ins{{"x", quark::dtype_id::float32, {1, -1, 4}}};
  calib_sample ok{{"x", ramp({1, 7, 4})}};
  CHECK_NOTHROW(check_sample(ok, ins, 0));
  calib_sample wrong_shape{{"x", ramp({1, 7, 5})}};
  CHECK(error_id([&] { check_sample(wrong_shape, ins, 3); }) == "quark.calib_data.shape");
  calib_sample unknown{{"x", ramp({1, 7, 4})}, {"z", ramp({1})}};
  CHECK(error_id([&] { check_sample(unknown, ins, 0); }) == "quark.calib_data.input");
  calib_sample missing;
  CHECK(error_id([&] { check_sample(missing, ins, 0); }) == "quark.calib_data.input");
}

TEST_CASE("check_sample refuses NaN / Inf inputs, naming the element") {
  // Element 13 of a [1, 7, 4] ramp sits at [0, 3, 1] (13 = 3 * 4 + 1).
  const auto message = [](const calib_sample& s, const std::vector<input_signature>& ins) {
    return quark::test::error_text([&] { check_sample(s, ins, 2); });
  };
  const std::vector<input_signature> f32{{"x", quark::dtype_id::float32, {1, -1, 4}}};
  for (const auto& vt :
       {std::pair<float, std::string>{std::numeric_limits<float>::quiet_NaN(), "NaN"},
        {std::numeric_limits<float>::infinity(), "+Inf"},
        {-std::numeric_limits<float>::infinity(), "-Inf"}}) {
    const float value = vt.first;
    const std::string& text = vt.second;  // Clang 14 cannot capture a structured binding
    CAPTURE(text);
    calib_sample s{{"x", ramp({1, 7, 4})}};
    s.at("x").data<float>()[13] = value;
    s.at("x").data<float>()[20] = value;
    CHECK(message(s, f32) == "quark.calib_data.non_finite: calibration sample 2: input 'x' holds " +
                                 text +
                                 " at element 13 [0, 3, 1] (2 non-finite values in all); "
                                 "calibration and evaluation data must be finite");
  }
  // The largest finite values pass: float32's, and a float64 one past float32's range.
  calib_sample big{{"x", ramp({1, 7, 4})}};
  big.at("x").data<float>()[0] = std::numeric_limits<float>::max();
  CHECK_NOTHROW(check_sample(big, f32, 0));
  const std::vector<input_signature> f64{{"d", quark::dtype_id::float64, {3}}};
  tensor d(quark::dtype_id::float64, {3});
  d.data<double>()[0] = 1e300;
  CHECK_NOTHROW(check_sample({{"d", d}}, f64, 0));
  d.data<double>()[2] = -std::numeric_limits<double>::infinity();
  CHECK(message({{"d", d}}, f64) ==
        "quark.calib_data.non_finite: calibration sample 2: input 'd' holds -Inf at element 2 [2] "
        "(1 non-finite value in all); calibration and evaluation data must be finite");
  // float16: 0x7e00 is a NaN, 0x7c00 +Inf (IEEE binary16).
  const std::vector<input_signature> f16{{"h", quark::dtype_id::float16, {2, 2}}};
  for (const auto& bt :
       {std::pair<std::uint16_t, std::string>{0x7e00, "NaN"}, {std::uint16_t{0x7c00}, "+Inf"}}) {
    const std::uint16_t bits = bt.first;
    const std::string& text = bt.second;
    tensor h(quark::dtype_id::float16, {2, 2});
    std::memcpy(h.bytes().data() + 3 * sizeof(std::uint16_t), &bits, sizeof bits);
    CHECK(message({{"h", h}}, f16) ==
          "quark.calib_data.non_finite: calibration sample 2: input 'h' holds " + text +
              " at element 3 [1, 1] (1 non-finite value in all); calibration and evaluation data "
              "must be finite");
  }
  // Integer inputs have no such values.
  const std::vector<input_signature> i64{{"ids", quark::dtype_id::int64, {2}}};
  CHECK_NOTHROW(check_sample({{"ids", tensor(quark::dtype_id::int64, {2})}}, i64, 0));
}
