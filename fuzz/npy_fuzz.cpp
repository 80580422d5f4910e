// SPDX-License-Identifier: MIT
// libFuzzer target for the calibration-data file readers: writes each input to a file and reads
// it with quark::onnx::read_npy and read_npz (the .npy and .npz parsers, stored or deflated, behind
// npy_folder_reader). A file that reads must hold the bytes its shape and type say, and a
// float32 one written back with write_npy must read back to the same bytes. The only acceptable
// failure is quark::onnx::frontend_error; anything else is a bug. Build and run: see
// fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <quark/onnx/calib_data.hpp>

#include <unistd.h>

namespace qo = quark::onnx;
namespace fs = std::filesystem;

namespace {

fs::path dir;

void check_tensor(const qo::tensor& t) {
  if (t.byte_size() != t.size() * qo::element_size(t.type())) {
    std::fprintf(stderr, "%zu bytes for %zu elements\n", t.byte_size(), t.size());
    std::abort();
  }
  if (t.type() != quark::dtype_id::float32)
    return;
  write_npy(dir / "back.npy", t);
  const qo::tensor u = qo::read_npy(dir / "back.npy");
  if (u.shape() != t.shape() || u.size() != t.size() ||
      (t.size() > 0 && std::memcmp(u.data<float>().data(), t.data<float>().data(),
                                   t.size() * sizeof(float)) != 0)) {
    std::fprintf(stderr, "write_npy / read_npy changed a float32 tensor\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dir = fs::temp_directory_path() / ("quark_npy_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path file = dir / "in.bin";
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    check_tensor(qo::read_npy(file));
  } catch (const qo::frontend_error&) {
  }
  try {
    for (const auto& [name, t] : qo::read_npz(file))
      check_tensor(t);
  } catch (const qo::frontend_error&) {
  }
  return 0;
}
