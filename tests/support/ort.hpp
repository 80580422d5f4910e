// SPDX-License-Identifier: MIT
// ONNX Runtime as a test oracle. Three pieces:
//
//  * ort_available() / ort_unavailable_reason(): is node + onnxruntime-node usable here?
//  * model_builder: a tiny builder on the onnx protobuf classes for one- or few-node graphs with
//    attributes, an opset and initializers. Element types are plain ONNX TensorProto codes
//    (onnx_type::float8e4m3fn == 17 ...) because Debian's libonnx 1.12 enum stops at 16.
//  * run_ort(model, inputs): writes the model and the inputs (.npy) to a fresh temp dir, runs
//    tests/ort/ort_run.js in a node child kept for the whole process (detail::ort_child), and reads
//    every output back. Any failure throws std::runtime_error whose text includes the equivalent
//    command line and node's message.
//
// The Node binding of ORT cannot describe fp8/bf16/e8m0/fp4 tensors as graph inputs or outputs, so
// graphs take float32 (or integer) inputs and return float32/float16/int*/uint* outputs; cast to
// and from the exotic type inside the graph (Cast(float->fp8) then Cast(fp8->float) is exact for
// every non-NaN value). The 1.30 binding crashes when it returns an int4/uint4 output, so
// ort_run.js refuses such graphs: add Cast(to=INT8) after the int4 value. ORT 1.30's CPU provider
// has no kernel for Cast-23 / QuantizeLinear-23 to FLOAT4E2M1. Every run_ort call is one request to
// the node child (its first one loads onnxruntime-node, 0.2 s): still, batch many values and
// several outputs into one graph.
//
//     using namespace quark::test;
//     model_builder m(21);
//     m.input("x", onnx_type::float32, {n})
//         .node("Cast", {"x"}, {"q"}, {attr_int("to", onnx_type::float8e4m3fn),
//                                      attr_int("saturate", 1)})
//         .node("Cast", {"q"}, {"y"}, {attr_int("to", onnx_type::float32)})
//         .output("y", onnx_type::float32, {n});
//     auto out = run_ort(m.build(), {npy_array::from(xs)});
//     std::vector<float> y = out.at("y").values<float>();
//
// Paths: the runner script is $QUARK_SOURCE_DIR/tests/ort/ort_run.js (falling back to the path of
// this header), onnxruntime-node is looked up in $QUARK_ORT_DIR/node_modules (falling back to
// <source>/.cache/ort, the CMake default), temp dirs go under
// $QUARK_BINARY_DIR/ort_tmp (falling back to the system temp dir) and are removed after success;
// they are kept after a failure so the model and inputs can be inspected. Set QUARK_ORT_KEEP=1
// to keep them always.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <onnx/onnx_pb.h>

#include "support/npy.hpp"
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace quark::test {

/// ONNX TensorProto.DataType codes, as plain ints (codes 17..26 are missing from libonnx 1.12).
namespace onnx_type {
inline constexpr int float32 = 1;
inline constexpr int uint8 = 2;
inline constexpr int int8 = 3;
inline constexpr int uint16 = 4;
inline constexpr int int16 = 5;
inline constexpr int int32 = 6;
inline constexpr int int64 = 7;
inline constexpr int boolean = 9;
inline constexpr int float16 = 10;
inline constexpr int float64 = 11;
inline constexpr int uint32 = 12;
inline constexpr int uint64 = 13;
inline constexpr int bfloat16 = 16;
inline constexpr int float8e4m3fn = 17;
inline constexpr int float8e4m3fnuz = 18;
inline constexpr int float8e5m2 = 19;
inline constexpr int float8e5m2fnuz = 20;
inline constexpr int uint4 = 21;
inline constexpr int int4 = 22;
inline constexpr int float4e2m1 = 23;
inline constexpr int float8e8m0 = 24;
inline constexpr int uint2 = 25;
inline constexpr int int2 = 26;
}  // namespace onnx_type

/// One node attribute: name plus an int, float, string, ints or floats value.
struct attribute {
  std::string name;
  std::variant<std::int64_t, float, std::string, std::vector<std::int64_t>, std::vector<float>>
      value;
};
inline attribute attr_int(std::string name, std::int64_t v) {
  return {std::move(name), v};
}
inline attribute attr_float(std::string name, float v) {
  return {std::move(name), v};
}
inline attribute attr_string(std::string name, std::string v) {
  return {std::move(name), std::move(v)};
}
inline attribute attr_ints(std::string name, std::vector<std::int64_t> v) {
  return {std::move(name), std::move(v)};
}
inline attribute attr_floats(std::string name, std::vector<float> v) {
  return {std::move(name), std::move(v)};
}

/// Builds a ModelProto for a small graph. Node names are generated ("n0", "n1", ...).
class model_builder {
 public:
  /// `opset` of the default domain; the IR version defaults to one ORT 1.30 accepts for it.
  explicit model_builder(int opset, int ir_version = 0) {
    model_.set_ir_version(ir_version != 0 ? ir_version : (opset >= 23 ? 11 : 10));
    model_.set_producer_name("quark-tests");
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("quark_test_graph");
  }

  /// Adds another opset import (e.g. "com.microsoft", 1).
  model_builder& opset(const std::string& domain, int version) {
    auto* op = model_.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
    return *this;
  }

  /// A graph input; a negative dim becomes a symbolic dim.
  model_builder& input(const std::string& name, int elem_type, std::vector<std::int64_t> shape) {
    fill_value_info(model_.mutable_graph()->add_input(), name, elem_type, shape);
    return *this;
  }
  /// A graph output; pass an empty shape to leave it to shape inference.
  model_builder& output(const std::string& name, int elem_type,
                        std::vector<std::int64_t> shape = {}) {
    fill_value_info(model_.mutable_graph()->add_output(), name, elem_type, shape);
    return *this;
  }

  model_builder& node(const std::string& op_type, std::vector<std::string> inputs,
                      std::vector<std::string> outputs, std::vector<attribute> attrs = {},
                      const std::string& domain = "") {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op_type);
    n->set_name("n" + std::to_string(model_.graph().node_size() - 1));
    if (!domain.empty())
      n->set_domain(domain);
    for (auto& i : inputs)
      n->add_input(i);
    for (auto& o : outputs)
      n->add_output(o);
    for (auto& a : attrs)
      add_attribute(n, a);
    return *this;
  }

  /// An initializer from raw little-endian bytes (sub-byte types must already be packed).
  model_builder& initializer_raw(const std::string& name, int elem_type,
                                 std::vector<std::int64_t> dims, const void* data,
                                 std::size_t nbytes) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(elem_type);
    for (auto d : dims)
      t->add_dims(d);
    t->set_raw_data(std::string(static_cast<const char*>(data), nbytes));
    return *this;
  }
  template <class T>
  model_builder& initializer(const std::string& name, int elem_type, std::vector<std::int64_t> dims,
                             const std::vector<T>& values) {
    return initializer_raw(name, elem_type, std::move(dims), values.data(),
                           values.size() * sizeof(T));
  }

  const ::onnx::ModelProto& build() const { return model_; }

 private:
  static void fill_value_info(::onnx::ValueInfoProto* vi, const std::string& name, int elem_type,
                              const std::vector<std::int64_t>& shape) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    if (shape.empty())
      return;
    auto* sh = tt->mutable_shape();
    for (std::size_t i = 0; i < shape.size(); ++i) {
      auto* d = sh->add_dim();
      if (shape[i] < 0)
        d->set_dim_param("d" + std::to_string(i));
      else
        d->set_dim_value(shape[i]);
    }
  }

  static void add_attribute(::onnx::NodeProto* n, const attribute& a) {
    auto* p = n->add_attribute();
    p->set_name(a.name);
    if (const auto* i = std::get_if<std::int64_t>(&a.value)) {
      p->set_type(::onnx::AttributeProto::INT);
      p->set_i(*i);
    } else if (const auto* f = std::get_if<float>(&a.value)) {
      p->set_type(::onnx::AttributeProto::FLOAT);
      p->set_f(*f);
    } else if (const auto* s = std::get_if<std::string>(&a.value)) {
      p->set_type(::onnx::AttributeProto::STRING);
      p->set_s(*s);
    } else if (const auto* is = std::get_if<std::vector<std::int64_t>>(&a.value)) {
      p->set_type(::onnx::AttributeProto::INTS);
      for (auto v : *is)
        p->add_ints(v);
    } else if (const auto* fs = std::get_if<std::vector<float>>(&a.value)) {
      p->set_type(::onnx::AttributeProto::FLOATS);
      for (auto v : *fs)
        p->add_floats(v);
    }
  }

  ::onnx::ModelProto model_;
};

namespace detail {

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

/// Single-quotes a string for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The source tree: $QUARK_SOURCE_DIR, else three levels above this header.
inline std::filesystem::path source_dir() {
  return env_or("QUARK_SOURCE_DIR",
                std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string());
}

inline std::filesystem::path ort_script() {
  return source_dir() / "tests" / "ort" / "ort_run.js";
}

/// $QUARK_ORT_DIR, else the CMake default <source>/.cache/ort.
inline std::string ort_dir() {
  return env_or("QUARK_ORT_DIR", (source_dir() / ".cache" / "ort").string());
}

inline std::string install_hint() {
  return "Install ONNX Runtime for Node with: npm install --prefix \"$QUARK_ORT_DIR\" "
         "onnxruntime-node@1.30 (scripts/install-deps.sh does this; QUARK_ORT_DIR defaults to "
         "<source>/.cache/ort) and make sure `node` (>= 18) is on PATH.";
}

/// Where runs and the node child's stderr go: $QUARK_BINARY_DIR/ort_tmp, else the system temp
/// dir's quark_ort_tmp (created).
inline std::filesystem::path ort_tmp_base() {
  std::filesystem::path base = env_or("QUARK_BINARY_DIR", "");
  base = base.empty() ? std::filesystem::temp_directory_path() / "quark_ort_tmp" : base / "ort_tmp";
  std::filesystem::create_directories(base);
  return base;
}

/// Creates a fresh directory for one run.
inline std::filesystem::path make_run_dir() {
  const std::filesystem::path base = ort_tmp_base();
  std::string tmpl = (base / "run-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    throw std::runtime_error("run_ort: cannot create a temp dir under " + base.string());
  }
  return std::filesystem::path(buf.data());
}

/// A JSON string literal of `s` (the serve protocol's requests).
inline std::string json_string(const std::string& s) {
  std::string q = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      q += "\\u00";
      q += hex[u >> 4];
      q += hex[u & 15];
    } else {
      q += c;
    }
  }
  return q + "\"";
}

/// One `node ort_run.js --serve` child kept for the whole test process: a run costs a request
/// line instead of a node start plus `require('onnxruntime-node')` (0.2 s of the 0.27 s median
/// call; a full test suite made 591 such starts). Started on first use, restarted after it dies,
/// and ended (stdin closed, then waited for) when the process exits. Spawned with posix_spawn
/// (tests may have threads running); the parent's pipe ends are close-on-exec, so programs the
/// tests start later do not hold them.
class ort_child {
 public:
  static ort_child& instance() {
    static ort_child c;
    return c;
  }
  ort_child(const ort_child&) = delete;
  ort_child& operator=(const ort_child&) = delete;
  ~ort_child() { static_cast<void>(stop_and_collect()); }

  /// The running child's pid, -1 when none (for the harness test that kills it).
  pid_t pid() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pid_;
  }

  /// Runs ort_run.js with `args`; returns "" on success, else the error text (node's message,
  /// or how the child ended with its stderr).
  std::string request(const std::vector<std::string>& args) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ < 0) {
      if (std::string e = start(); !e.empty())
        return e;
    }
    std::string line = "[";
    for (std::size_t i = 0; i < args.size(); ++i)
      line += (i ? "," : "") + json_string(args[i]);
    line += "]\n";
    if (!write_all(line))
      return died("writing the request failed");
    std::string reply;
    if (!read_line(reply))
      return died("no reply");
    if (reply == "ok")
      return std::string();
    if (reply.rfind("error ", 0) == 0 && reply.size() > 6 &&
        reply.find_first_not_of("0123456789", 6) == std::string::npos && reply.size() < 16) {
      const std::size_t n = std::stoul(reply.substr(6));
      std::string msg(n, '\0');
      if (!read_exact(msg.data(), n))
        return died("truncated error message");
      return msg;
    }
    return died("unexpected reply '" + reply + "'");
  }

 private:
  ort_child() = default;

  std::string start() {
    ::signal(SIGPIPE, SIG_IGN);  // a child that died must not kill the test process
    try {
      err_path_ = (ort_tmp_base() / ("child-" + std::to_string(::getpid()) + ".stderr")).string();
    } catch (const std::filesystem::filesystem_error& e) {
      return std::string("run_ort: cannot create the temp dir: ") + e.what();
    }
    int to[2];
    int from[2];
    if (::pipe2(to, O_CLOEXEC) != 0)
      return "run_ort: pipe failed";
    if (::pipe2(from, O_CLOEXEC) != 0) {
      ::close(to[0]);
      ::close(to[1]);
      return "run_ort: pipe failed";
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const std::string script = ort_script().string();
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("QUARK_ORT_DIR=", 0) != 0)
        env_strings.emplace_back(*e);
    }
    env_strings.push_back("QUARK_ORT_DIR=" + ort_dir());
    std::vector<char*> envp;
    for (auto& e : env_strings)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string a0 = "node";
    std::string a1 = script;
    std::string a2 = "--serve";
    char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, "node", &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(to[0]);
    ::close(from[1]);
    if (rc != 0) {
      ::close(to[1]);
      ::close(from[0]);
      return "run_ort: cannot start node (posix_spawnp: " + std::to_string(rc) + ")";
    }
    pid_ = pid;
    in_ = to[1];
    out_ = from[0];
    buf_.clear();
    return std::string();
  }

  void stop() {
    if (pid_ < 0)
      return;
    ::close(in_);  // node's stdin ends: it finishes the queued runs and exits
    ::close(out_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  /// Ends the child and returns what it wrote to stderr (its file removed).
  std::string stop_and_collect() {
    stop();
    std::string text = read_text(err_path_);
    std::error_code ec;
    std::filesystem::remove(err_path_, ec);
    return text;
  }

  std::string died(const std::string& what) {
    const pid_t pid = pid_;
    const std::string err = stop_and_collect();
    return "run_ort: the node child (pid " + std::to_string(pid) + ") failed: " + what +
           "; its stderr: " + err;
  }

  bool write_all(const std::string& s) {
    std::size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::write(in_, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  bool fill() {
    char tmp[4096];
    for (;;) {
      const ssize_t n = ::read(out_, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      buf_.append(tmp, static_cast<std::size_t>(n));
      return true;
    }
  }

  bool read_line(std::string& line) {
    for (;;) {
      if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return true;
      }
      if (!fill())
        return false;
    }
  }

  bool read_exact(char* dst, std::size_t n) {
    while (buf_.size() < n) {
      if (!fill())
        return false;
    }
    std::copy_n(buf_.data(), n, dst);
    buf_.erase(0, n);
    return true;
  }

  std::mutex mutex_;
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buf_;
  std::string err_path_;
};

}  // namespace detail

/// Empty when node and onnxruntime-node are usable, otherwise a message that says why and how to
/// install them. The check runs node once and is cached.
inline const std::string& ort_unavailable_reason() {
  static const std::string reason = [] {
    const std::string dir = detail::ort_dir();
    const auto mod = std::filesystem::path(dir) / "node_modules" / "onnxruntime-node";
    if (!std::filesystem::exists(mod)) {
      return "onnxruntime-node not found at " + mod.string() + ". " + detail::install_hint();
    }
    if (!std::filesystem::exists(detail::ort_script())) {
      return "runner script not found at " + detail::ort_script().string() +
             " (set QUARK_SOURCE_DIR)";
    }
    // The first request starts the node child run_ort keeps (no node start of its own).
    if (const std::string e = detail::ort_child::instance().request({"--ping"}); !e.empty())
      return "node could not load " + mod.string() + ": " + e + ". " + detail::install_hint();
    return std::string();
  }();
  return reason;
}

inline bool ort_available() {
  return ort_unavailable_reason().empty();
}

/// Runs `model` once in ONNX Runtime (CPU, no graph optimizations). `inputs` bind to the graph
/// inputs in graph order. Returns every graph output by name. Throws std::runtime_error with the
/// command line and node's stderr on failure. Output names must be usable as file names.
inline std::map<std::string, npy_array> run_ort(const ::onnx::ModelProto& model,
                                                const std::vector<npy_array>& inputs) {
  if (!ort_available())
    throw std::runtime_error("run_ort: " + ort_unavailable_reason());
  const auto dir = detail::make_run_dir();
  const auto model_path = dir / "model.onnx";
  {
    std::ofstream f(model_path, std::ios::binary);
    if (!f || !model.SerializeToOstream(&f)) {
      throw std::runtime_error("run_ort: cannot write " + model_path.string());
    }
  }
  std::vector<std::string> args = {model_path.string(), (dir / "out").string()};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto p = dir / ("in" + std::to_string(i) + ".npy");
    write_npy(p.string(), inputs[i]);
    args.push_back(p.string());
  }
  if (const std::string err = detail::ort_child::instance().request(args); !err.empty()) {
    // The same run as a command line, to repeat it by hand.
    std::string cmd = "QUARK_ORT_DIR=" + detail::shell_quote(detail::ort_dir()) + " node " +
                      detail::shell_quote(detail::ort_script().string());
    for (const auto& a : args)
      cmd += " " + detail::shell_quote(a);
    throw std::runtime_error("run_ort: ONNX Runtime failed (files kept in " + dir.string() +
                             ")\n  command: " + cmd + "\n  error: " + err);
  }
  std::map<std::string, npy_array> out;
  for (const auto& o : model.graph().output()) {
    const auto p = dir / "out" / (o.name() + ".npy");
    try {
      out.emplace(o.name(), read_npy(p.string()));
    } catch (const std::exception& e) {
      throw std::runtime_error("run_ort: reading output '" + o.name() + "' failed: " + e.what() +
                               " (files kept in " + dir.string() + ")");
    }
  }
  if (detail::env_or("QUARK_ORT_KEEP", "") != "1") {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return out;
}

/// Whether ONNX Runtime's uint8 x int8 MatMulInteger / ConvInteger saturate on this CPU. Without
/// VNNI, MLAS multiplies uint8 by int8 with vpmaddubsw, which adds pairs of products in int16
/// with saturation: [255, 255] x [-128, -128] gives -32768 instead of -65280, so ORT is not the
/// exact integer product there (ORT's quantization docs advise reduce_range on such CPUs). Asked
/// of ORT once per process with that product.
inline bool ort_u8s8_saturates() {
  static const bool saturates = [] {
    model_builder b(13);
    b.input("a", onnx_type::uint8, {1, 2});
    b.initializer("b", onnx_type::int8, {2, 1}, std::vector<std::int8_t>{-128, -128});
    b.node("MatMulInteger", {"a", "b"}, {"y"});
    b.output("y", onnx_type::int32, {1, 1});
    const std::vector<std::uint8_t> a{255, 255};
    const auto out = run_ort(b.build(), {npy_array::from(a, {1, 2})});
    return out.at("y").values<std::int32_t>().at(0) != -65280;
  }();
  return saturates;
}

}  // namespace quark::test
