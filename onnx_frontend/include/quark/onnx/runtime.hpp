// SPDX-License-Identifier: MIT
// The calibration runtime: a small CPU executor for ONNX graphs, so a model can be calibrated with
// no other runtime installed. float32 graphs (float16/bfloat16 tensors are computed in float32),
// int64 shape arithmetic, bool masks; dynamic shapes are resolved from the inputs as the graph
// runs.
//
//     quark::onnx::runtime rt("model.onnx");
//     std::map<std::string, quark::onnx::tensor> feeds;
//     feeds.emplace("x", quark::onnx::tensor(quark::dtype_id::float32, {1, 3, 224, 224}));
//     auto outputs = rt.run(feeds, [&](std::string_view name, const quark::onnx::tensor& t) {
//       observers[std::string(name)].update(t);   // every activation, once, as it is produced
//     });
//
// The observer sees each graph input and each node output right after it is computed: once per
// run for the main graph and an If branch, once per iteration for the inputs and node outputs of
// a Loop or Scan body (so one name can come several times in a run). A value is freed as soon as
// its last consumer ran, so a calibration pass holds only the live activations of one sample:
// memory is proportional to the model, never to the number of samples. An observer that wants to
// fold values on another thread while the graph runs on takes a shared_value_observer instead: it
// may keep the value (a kernel then leaves it alone instead of overwriting it in place), and the
// value is freed when the last of the graph and the observer lets go of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <quark/onnx/error.hpp>
#include <quark/onnx/model.hpp>
#include <quark/onnx/tensor.hpp>

namespace quark::onnx {

/// Called with (value name, value) for every graph input and every node output.
using value_observer = std::function<void(std::string_view name, const tensor& value)>;
/// Same, with shared ownership of the value: the observer may hold it past the call. A graph
/// input is the caller's feed (not copied), so it must not be held past run()'s return.
using shared_value_observer =
    std::function<void(std::string_view name, std::shared_ptr<const tensor> value)>;

/// A part of a node's output handed to a chunk_sink: `rows` runs of `cols` consecutive values,
/// run r starting at data + r * stride (a contiguous chunk is one run). A convolution hands over
/// a block of columns of its [channels, pixels] output this way, so a sink that pays a setup per
/// call pays it once for the block.
struct value_chunk {
  const float* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t stride = 0;

  [[nodiscard]] static value_chunk contiguous(std::span<const float> v) noexcept {
    return {v.data(), 1, v.size(), v.size()};
  }
  [[nodiscard]] std::size_t size() const noexcept { return rows * cols; }
  [[nodiscard]] std::span<const float> row(std::size_t r) const noexcept {
    return {data + r * stride, cols};
  }
};

/// Receives a node's output chunk by chunk, from the thread that just computed each chunk (so
/// the values are still in that core's cache): sink(part, chunk), where `part` < threads()
/// names the calling thread's share (one thread per part at a time; parts run in parallel).
/// The chunks cover the output exactly once when the kernel streams it. Kernels stream outputs
/// of at least stream_min_values elements: element-wise binary nodes whose broadcast has at
/// most two levels (same shapes, a scalar, a per-channel operand), float unary activations,
/// Clip and Conv. Other kernels never call the sink, so a sink's owner compares what it
/// received with the value the observer then sees.
using chunk_sink = std::function<void(std::size_t part, const value_chunk& chunk)>;
/// Outputs smaller than this are never streamed (two chunks of 2^17 values).
inline constexpr std::size_t stream_min_values = std::size_t{1} << 18;
/// Asked before each node runs, with the name of its first output (a float32 output or not):
/// a sink for that output, or nullptr. The sink must stay valid until the node's observer call.
using chunk_request = std::function<const chunk_sink*(std::string_view name)>;

struct runtime_options {
  /// Worker threads for convolutions and matrix products; 0 = std::thread::hardware_concurrency().
  unsigned threads = 0;
  /// With glibc, raise malloc's mmap and trim thresholds (process-wide mallopt) so activation
  /// buffers are reused from the heap instead of being mapped and page-faulted anew for every
  /// node; this halves the time of large convolutional models. Freed memory stays in the heap.
  bool tune_malloc = true;
};

/// Name, element type and declared shape (-1 for a dynamic dimension) of a graph input or output.
struct tensor_info {
  std::string name;
  dtype_id type = dtype_id::undefined;
  shape_t shape;
};

class runtime {
 public:
  /// Loads and prepares the model at `path` (external data is resolved next to it). Throws
  /// frontend_error "quark.onnx.unsupported_op" listing every operator the runtime lacks,
  /// "quark.onnx.load" for unreadable or malformed models.
  explicit runtime(const std::filesystem::path& path, runtime_options options = {});
  /// Prepares an already loaded model (the runtime keeps no reference to it).
  explicit runtime(const model& m, runtime_options options = {});
  /// Same, from the serialized bytes of a ModelProto; `base_dir` resolves external data.
  static runtime from_bytes(std::span<const std::byte> bytes,
                            const std::filesystem::path& base_dir = {},
                            runtime_options options = {});

  runtime(runtime&&) noexcept;
  runtime& operator=(runtime&&) noexcept;
  ~runtime();

  /// Graph inputs the caller must feed (initializers listed as inputs are excluded).
  const std::vector<tensor_info>& inputs() const noexcept;
  const std::vector<tensor_info>& outputs() const noexcept;

  /// Runs the graph once. Every input of inputs() must be fed; types must match (float16 inputs
  /// may also be fed as float32). Returns the graph outputs by name.
  std::map<std::string, tensor> run(const std::map<std::string, tensor>& feeds,
                                    const value_observer& observer = {}) const;
  /// Same, with an observer that may hold values past the call (for asynchronous observation)
  /// and, optionally, chunk sinks for node outputs (see chunk_request).
  std::map<std::string, tensor> run(const std::map<std::string, tensor>& feeds,
                                    const shared_value_observer& observer,
                                    const chunk_request& chunks = {}) const;

  /// Calls fn(begin, end) on disjoint chunks covering [0, n) on the runtime's worker threads
  /// (the calling thread runs one of them) and waits for all; chunks smaller than `grain` items
  /// are not split. Lets an observer fold a large value in parallel between two nodes.
  void parallel_for(std::size_t n, std::size_t grain,
                    const std::function<void(std::size_t, std::size_t)>& fn) const;
  /// Number of threads parallel_for and the kernels use (the calling thread included).
  unsigned threads() const noexcept;

  /// Operator types the runtime implements, sorted: default-domain ops as "Conv", others as
  /// "domain:Op" ("com.amd.quark:BFPQuantizeDequantize"), as model::unsupported_ops spells them.
  static std::vector<std::string> supported_ops();

 private:
  struct impl;
  explicit runtime(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace quark::onnx
