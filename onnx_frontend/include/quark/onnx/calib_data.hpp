// SPDX-License-Identifier: MIT
// Calibration data for quantize_model: a reader hands out one sample (input name -> tensor) at a
// time, so the quantizer never holds more than one sample. Three readers come with the library:
// in-memory samples, a folder of .npy / .npz files, and seeded random data (Quark's
// UseRandomData with RandomDataReaderInputShape / RandomDataReaderInputDataRange).
//
//     quark::onnx::npy_folder_reader calib("calib/");          // calib/<sample>/<input>.npy
//     auto q = quark::onnx::quantize_model(m, cfg, calib);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <quark/onnx/error.hpp>
#include <quark/onnx/tensor.hpp>

namespace quark::onnx {

/// One calibration sample: graph input name -> value.
using calib_sample = std::map<std::string, tensor>;

/// Declared graph input (name, element type, shape with -1 for dynamic dims), as the readers
/// need it to validate or generate samples.
struct input_signature {
  std::string name;
  dtype_id type = dtype_id::float32;
  shape_t shape;
};

/// The calibration reader interface (Quark's CalibrationDataReader.get_next, in C++).
///
///     struct my_reader : quark::onnx::calibration_data_reader {
///       std::optional<quark::onnx::calib_sample> next() override { ... }
///     };
class calibration_data_reader {
 public:
  virtual ~calibration_data_reader() = default;
  /// The next sample, or nullopt when the data is exhausted.
  virtual std::optional<calib_sample> next() = 0;
  /// Starts again from the first sample (used when the data is read twice, e.g. for EvalMetrics).
  /// Readers that cannot rewind throw frontend_error "quark.calib_data.rewind".
  virtual void rewind();
  /// Whether rewind() works. A reader that says so lets calibration take shortcuts that may, on
  /// rare data, need a second pass over the samples (the Percentile histograms' lumping,
  /// docs/quantizer.md); one that does not (the default) is read once unless the configuration
  /// itself needs a second pass.
  [[nodiscard]] virtual bool can_rewind() const noexcept { return false; }
  /// Number of samples if known (for the progress bar), else nullopt.
  virtual std::optional<std::size_t> size() const { return std::nullopt; }
  /// What the quantizer's summary should say about the data (random_reader: dynamic dims it
  /// set to 1). None by default.
  virtual std::vector<std::string> notes() const { return {}; }
};

/// Samples kept in memory.
class memory_reader final : public calibration_data_reader {
 public:
  explicit memory_reader(std::vector<calib_sample> samples) : samples_(std::move(samples)) {}
  std::optional<calib_sample> next() override;
  void rewind() override { pos_ = 0; }
  [[nodiscard]] bool can_rewind() const noexcept override { return true; }
  std::optional<std::size_t> size() const override { return samples_.size(); }

 private:
  std::vector<calib_sample> samples_;
  std::size_t pos_ = 0;
};

/// A folder of NumPy files, in one of three layouts:
///  1. one sub-folder per sample holding `<input name>.npy` per input (sorted by folder name);
///  2. one `.npz` per sample whose members are named after the inputs (stored, not compressed);
///  3. `.npy` files directly in the folder, one per sample, for a model with a single input.
/// A folder mixing them is "quark.calib_data.layout"; hidden entries (names starting with '.')
/// are skipped. Files are read lazily, one sample at a time. Errors ("quark.calib_data.*") name
/// the file.
class npy_folder_reader final : public calibration_data_reader {
 public:
  /// `role` names the folder in errors ("calibration folder 'x' does not exist").
  explicit npy_folder_reader(std::filesystem::path folder, std::string_view role = "calibration");
  std::optional<calib_sample> next() override;
  void rewind() override { pos_ = 0; }
  [[nodiscard]] bool can_rewind() const noexcept override { return true; }
  std::optional<std::size_t> size() const override { return entries_.size(); }
  /// Layout 3 needs the single input's name; the quantizer sets it from the model.
  void set_single_input_name(std::string name) { single_input_ = std::move(name); }

 private:
  std::filesystem::path folder_;
  std::vector<std::filesystem::path> entries_;
  enum class layout : std::uint8_t { sample_dirs, npz, flat } layout_ = layout::flat;
  std::string single_input_;
  std::size_t pos_ = 0;
};

/// Options of random_reader (Quark's random data reader).
struct random_data_options {
  std::size_t count = 1;  ///< samples produced (CalibDataSize caps it again in the quantizer)
  /// Shapes for inputs with dynamic dims (RandomDataReaderInputShape); other dynamic dims are 1.
  std::map<std::string, shape_t> shapes;
  /// Value range per input (RandomDataReaderInputDataRange); default [0, 1).
  std::map<std::string, std::pair<double, double>> ranges;
  std::uint64_t seed = 1705472343;
};

/// Seeded uniform random samples matching the model's inputs (float inputs in [lo, hi), integer
/// inputs as integers in [lo, hi), bool inputs 0/1).
class random_reader final : public calibration_data_reader {
 public:
  random_reader(std::vector<input_signature> inputs, random_data_options options);
  std::optional<calib_sample> next() override;
  void rewind() override;
  [[nodiscard]] bool can_rewind() const noexcept override { return true; }
  std::optional<std::size_t> size() const override { return options_.count; }
  /// The concrete shape used for each input.
  const std::vector<input_signature>& inputs() const noexcept { return inputs_; }
  /// One note per input whose dynamic dims past the batch were set to 1 for want of a shape.
  std::vector<std::string> notes() const override { return notes_; }

 private:
  std::vector<input_signature> inputs_;
  random_data_options options_;
  std::vector<std::string> notes_;
  std::size_t pos_ = 0;
};

/// Reads one .npy file: bool, int8..int64, uint8..uint64, float16/32/64, either byte order, C or
/// Fortran order (returned in C order, little-endian).
/// Throws frontend_error "quark.calib_data.npy" naming the file.
tensor read_npy(const std::filesystem::path& file);
/// Writes a tensor as .npy (float32, float16, integer and bool types).
void write_npy(const std::filesystem::path& file, const tensor& t);
/// Reads every member of a .npz archive, stored (np.savez) or deflated (np.savez_compressed):
/// member name (without ".npy") -> tensor. Each member's CRC-32 is checked. Other ZIP methods,
/// encrypted or streamed members and damaged archives raise "quark.calib_data.npz".
std::map<std::string, tensor> read_npz(const std::filesystem::path& file);

/// Checks a sample against the model inputs: every input present, no unknown name, element type
/// and static dims matching. Throws frontend_error "quark.calib_data.input" / ".shape" / ".type"
/// naming the input and the sample as `what` and its index ("calibration sample 3").
void check_sample(const calib_sample& s, const std::vector<input_signature>& inputs,
                  std::size_t index, std::string_view what = "calibration sample");

}  // namespace quark::onnx
