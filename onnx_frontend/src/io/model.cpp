// SPDX-License-Identifier: MIT
// quark::onnx::model: loading (file / bytes, raised protobuf size limit), saving (atomic, optional
// external data), version bookkeeping and main-graph access. Validation lives in validate.cpp.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <quark/dtype/pack.hpp>
#include <quark/onnx/model.hpp>

#include "io/atomic_file.hpp"
#include "io/graph_util.hpp"
#include "io/inline_functions.hpp"
#include "io/proto_access.hpp"
#include "io/tensor_proto.hpp"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace quark::onnx {
namespace {

using google::protobuf::RepeatedPtrField;

[[noreturn]] void load_error(const std::string& where, const std::string& what) {
  throw frontend_error("quark.onnx.load", where + ": " + what);
}

/// A message that parsed but lacks the two fields every model has is some other protobuf.
void check_is_model(const ::onnx::ModelProto& p, const std::string& where) {
  if (!p.has_ir_version() || !p.has_graph()) {
    load_error(where, std::string("not an ONNX model (no ") +
                          (p.has_ir_version() ? "graph" : "ir_version") + ")");
  }
}

/// protobuf's default nesting limit, 100 messages, is also the one ONNX Runtime parses with: a
/// model nested deeper (about 32 levels of If / Loop / Scan bodies) fails to parse in both. A
/// failed parse is tried once more under this higher limit, only to say which of the two it was.
constexpr int default_recursion_limit = 100;
constexpr int diagnosis_recursion_limit = 1000;

bool parse_stream(google::protobuf::io::CodedInputStream& in, ::onnx::ModelProto& out, int depth) {
  in.SetTotalBytesLimit(INT_MAX);
  in.SetRecursionLimit(depth);
  return out.ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}

/// The load error of a model that failed to parse; `parses_deeper`: it parses under
/// diagnosis_recursion_limit.
[[noreturn]] void parse_failure(const std::string& where, bool parses_deeper) {
  if (parses_deeper) {
    load_error(where, "messages nested deeper than protobuf's limit of " +
                          std::to_string(default_recursion_limit) +
                          " (subgraphs of If / Loop / Scan or functions about 32 levels deep); "
                          "ONNX Runtime refuses such a model too, flatten the nesting");
  }
  load_error(where, "not a valid ONNX protobuf (truncated or corrupt)");
}

/// Parses `size` bytes into `out` with the total-bytes limit raised to protobuf's hard maximum
/// (INT_MAX): the default limit would reject models between 64 MB and 2 GB.
void parse_model(const char* data, std::size_t size, const std::string& where,
                 ::onnx::ModelProto& out) {
  if (size == 0)
    load_error(where, "empty input, not an ONNX model");
  if (size > static_cast<std::size_t>(INT_MAX)) {
    load_error(where, "larger than protobuf's 2 GB message limit (" + std::to_string(size) +
                          " bytes); models this large must keep their weights as external data");
  }
  const auto parse = [&](::onnx::ModelProto& m, int depth) {
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(data),
                                              static_cast<int>(size));
    return parse_stream(in, m, depth);
  };
  if (!parse(out, default_recursion_limit)) {
    ::onnx::ModelProto scratch;
    parse_failure(where, parse(scratch, diagnosis_recursion_limit));
  }
  check_is_model(out, where);
}

/// Parses the whole file open at `fd` (from its start) into `out`.
bool parse_file(int fd, ::onnx::ModelProto& out, int depth) {
  if (::lseek(fd, 0, SEEK_SET) != 0)
    return false;
  google::protobuf::io::FileInputStream file(fd);
  google::protobuf::io::CodedInputStream in(&file);
  return parse_stream(in, out, depth) && file.GetErrno() == 0;
}

value_info to_value_info(const ::onnx::ValueInfoProto& v) {
  value_info out;
  out.name = v.name();
  if (!v.type().has_tensor_type())
    return out;
  const auto& tt = v.type().tensor_type();
  out.elem_type = tt.elem_type();
  if (!tt.has_shape())
    return out;
  out.has_shape = true;
  for (const auto& d : tt.shape().dim()) {
    // A negative dim_value (seen in some exporters' output) is read as dynamic.
    out.shape.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
    out.dim_params.push_back(d.has_dim_param() ? d.dim_param() : std::string());
  }
  return out;
}

std::optional<attribute_value> to_attribute_value(const ::onnx::AttributeProto& a,
                                                  const std::filesystem::path& base_dir) {
  using A = ::onnx::AttributeProto;
  switch (attribute_kind(a)) {
    case A::FLOAT:
      return attribute_value(a.f());
    case A::INT:
      return attribute_value(std::int64_t{a.i()});
    case A::STRING:
      return attribute_value(a.s());
    case A::FLOATS:
      return attribute_value(std::vector<float>(a.floats().begin(), a.floats().end()));
    case A::INTS:
      return attribute_value(std::vector<std::int64_t>(a.ints().begin(), a.ints().end()));
    case A::STRINGS:
      return attribute_value(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case A::TENSOR: {
      const auto code = a.t().data_type();
      if (code == 8 || code == 14 || code == 15)
        return std::nullopt;  // no tensor form
      return attribute_value(read_tensor(a.t(), base_dir));
    }
    default:
      break;
  }
  return std::nullopt;
}

node_info to_node_info(const ::onnx::NodeProto& n, const std::filesystem::path& base_dir) {
  node_info out;
  out.name = n.name();
  out.op_type = n.op_type();
  out.domain = n.domain();
  out.inputs.assign(n.input().begin(), n.input().end());
  out.outputs.assign(n.output().begin(), n.output().end());
  for (const auto& a : n.attribute()) {
    if (auto v = to_attribute_value(a, base_dir))
      out.attributes.push_back({a.name(), std::move(*v)});
  }
  return out;
}

void fill_node(const node_info& in, ::onnx::NodeProto& n) {
  using A = ::onnx::AttributeProto;
  if (in.op_type.empty())
    graph_error("insert_node: node '" + in.name + "' has no op_type");
  n.Clear();
  n.set_name(in.name);
  n.set_op_type(in.op_type);
  if (!in.domain.empty())
    n.set_domain(in.domain);
  for (const auto& s : in.inputs)
    n.add_input(s);
  for (const auto& s : in.outputs)
    n.add_output(s);
  for (const auto& at : in.attributes) {
    auto* a = n.add_attribute();
    a->set_name(at.name);
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::int64_t>) {
            a->set_type(A::INT);
            a->set_i(v);
          } else if constexpr (std::is_same_v<V, float>) {
            a->set_type(A::FLOAT);
            a->set_f(v);
          } else if constexpr (std::is_same_v<V, std::string>) {
            a->set_type(A::STRING);
            a->set_s(v);
          } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
            a->set_type(A::INTS);
            a->mutable_ints()->Add(v.begin(), v.end());
          } else if constexpr (std::is_same_v<V, std::vector<float>>) {
            a->set_type(A::FLOATS);
            a->mutable_floats()->Add(v.begin(), v.end());
          } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
            a->set_type(A::STRINGS);
            for (const auto& s : v)
              a->add_strings(s);
          } else {
            a->set_type(A::TENSOR);
            write_tensor(v, *a->mutable_t());
          }
        },
        at.value);
  }
}

std::string default_data_file(const std::filesystem::path& path) {
  return path.filename().string() + ".data";
}

/// Writes tensors appended by build_output into the external data file.
struct data_sink {
  detail::atomic_file* file = nullptr;
  std::string location;
};

/// Copies the non-data fields of a TensorProto.
void copy_header(const ::onnx::TensorProto& src, ::onnx::TensorProto& dst) {
  dst.set_name(src.name());
  if (src.has_doc_string())
    dst.set_doc_string(src.doc_string());
  dst.set_data_type(src.data_type());
  dst.mutable_dims()->CopyFrom(src.dims());
}

/// The model as it will be written: every external reference of the loaded model resolved, and
/// initializers of at least `threshold` bytes appended to `sink` when sink.file is set. The
/// source's initializers are swapped out while the rest of the proto is copied, so the weights
/// are never duplicated in memory.
::onnx::ModelProto build_output(model::impl& src, const data_sink& sink, std::size_t threshold) {
  ::onnx::ModelProto out;
  auto* g = src.proto.mutable_graph();
  RepeatedPtrField<::onnx::TensorProto> inits;
  inits.Swap(g->mutable_initializer());
  struct restore {
    RepeatedPtrField<::onnx::TensorProto>& a;
    RepeatedPtrField<::onnx::TensorProto>* b;
    ~restore() { a.Swap(b); }
  } guard{inits, g->mutable_initializer()};
  out.CopyFrom(src.proto);

  auto* og = out.mutable_graph();
  for (const auto& t : inits) {
    auto* dst = og->add_initializer();
    const bool string_type = t.data_type() == 8;
    const bool external = has_external_data(t);
    std::uint64_t bytes = 0;
    if (!string_type) {
      validate_tensor(t, src.base_dir);
      std::uint64_t n = 1;
      for (auto d : t.dims())
        n *= static_cast<std::uint64_t>(d);
      bytes = packed_size(n, dtype_bits(tensor_dtype(t)));
    }
    const bool to_file = sink.file != nullptr && !string_type && bytes >= threshold;
    if (!to_file && !external) {
      dst->CopyFrom(t);
      continue;
    }
    copy_header(t, *dst);
    std::string raw = tensor_raw_bytes(t, src.base_dir);
    if (!to_file) {
      dst->set_raw_data(std::move(raw));
      continue;
    }
    const std::size_t offset = sink.file->size();
    sink.file->write(raw);
    dst->set_data_location(::onnx::TensorProto_DataLocation_EXTERNAL);
    auto add = [&](const char* k, std::string v) {
      auto* e = dst->add_external_data();
      e->set_key(k);
      e->set_value(std::move(v));
    };
    add("location", sink.location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(raw.size()));
  }
  return out;
}

/// Fails early when embedding the external data of `src` would exceed protobuf's 2 GB, before
/// any of it is read into memory.
void check_embeddable(const model::impl& src, std::size_t threshold, bool external,
                      const std::string& where) {
  std::uint64_t total = src.proto.ByteSizeLong();
  for (const auto& t : src.proto.graph().initializer()) {
    if (!has_external_data(t) || t.data_type() == 8)
      continue;
    std::uint64_t n = 1;
    for (auto d : t.dims())
      n *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
    const std::uint64_t bytes = packed_size(n, dtype_bits(tensor_dtype(t)));
    if (!external || bytes < threshold)
      total += bytes;
  }
  if (total > static_cast<std::uint64_t>(INT_MAX)) {
    throw frontend_error("quark.onnx.save",
                         where + ": the model would be about " + std::to_string(total) +
                             " bytes, beyond protobuf's 2 GB limit; save with external_data");
  }
}

std::string serialize(const ::onnx::ModelProto& out, const std::string& where) {
  const std::size_t size = out.ByteSizeLong();
  if (size > static_cast<std::size_t>(INT_MAX)) {
    throw frontend_error("quark.onnx.save",
                         where + ": the model is " + std::to_string(size) +
                             " bytes, beyond protobuf's 2 GB limit; save with external_data");
  }
  std::string bytes;
  if (!out.SerializeToString(&bytes)) {
    throw frontend_error("quark.onnx.save", where + ": serialization failed");
  }
  return bytes;
}

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

}  // namespace

// -- construction ---------------------------------------------------------------------------------

model::model() : impl_(std::make_unique<impl>()) {
  impl_->proto.set_ir_version(8);
  auto* op = impl_->proto.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  impl_->proto.mutable_graph()->set_name("main");
}
model::~model() = default;
model::model(model&&) noexcept = default;
model& model::operator=(model&&) noexcept = default;
model::model(const model& other) : impl_(std::make_unique<impl>(*other.impl_)) {
}
model& model::operator=(const model& other) {
  if (this != &other)
    impl_ = std::make_unique<impl>(*other.impl_);
  return *this;
}

model model::load(const std::filesystem::path& path, const load_options& options) {
  const std::string where = "'" + path.string() + "'";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    load_error(where, "is a directory");
  // Parse straight from the file descriptor: no second copy of a model of up to 2 GB.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    load_error(where, std::string("cannot open file: ") + std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_at_exit{fd};
  struct ::stat st {};
  if (::fstat(fd, &st) != 0)
    load_error(where, std::string("cannot stat: ") + std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0)
    load_error(where, "empty input, not an ONNX model");
  if (size > static_cast<std::uint64_t>(INT_MAX)) {
    load_error(where, "larger than protobuf's 2 GB message limit (" + std::to_string(size) +
                          " bytes); models this large must keep their weights as external data");
  }
  model m;
  auto& state = *m.impl_;
  state.proto.Clear();
  if (!parse_file(fd, state.proto, default_recursion_limit)) {
    ::onnx::ModelProto scratch;
    parse_failure(where, parse_file(fd, scratch, diagnosis_recursion_limit));
  }
  check_is_model(state.proto, where);
  auto dir = path.parent_path();
  state.base_dir = dir.empty() ? std::filesystem::path(".") : dir;
  if (options.validate)
    m.validate();
  return m;
}

model model::from_bytes(std::span<const std::byte> bytes, const std::filesystem::path& base_dir,
                        const load_options& options) {
  return from_bytes(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                    base_dir, options);
}

model model::from_bytes(std::string_view bytes, const std::filesystem::path& base_dir,
                        const load_options& options) {
  model m;
  m.impl_->proto.Clear();
  parse_model(bytes.data(), bytes.size(), "<bytes>", m.impl_->proto);
  m.impl_->base_dir = base_dir;
  if (options.validate)
    m.validate();
  return m;
}

const std::filesystem::path& model::base_dir() const noexcept {
  return impl_->base_dir;
}

// -- saving ---------------------------------------------------------------------------------------

void model::save(const std::filesystem::path& path, const save_options& options) const {
  const std::string where = "'" + path.string() + "'";
  std::unique_ptr<detail::atomic_file> data;
  data_sink sink;
  std::filesystem::path data_path;
  if (options.external_data) {
    sink.location = options.external_file.empty() ? default_data_file(path) : options.external_file;
    ::onnx::TensorProto probe;
    probe.set_name(sink.location);
    probe.add_external_data()->set_key("location");
    probe.mutable_external_data(0)->set_value(sink.location);
    try {
      external_reference(probe);  // same rules as for loading: relative, no ".."
    } catch (const frontend_error& e) {
      throw frontend_error("quark.onnx.save", where + ": bad external_file: " + e.what());
    }
    data_path = (path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path()) /
                sink.location;
    if (same_file(data_path, path) || data_path == path) {
      throw frontend_error("quark.onnx.save", where + ": external_file names the model itself");
    }
    data = std::make_unique<detail::atomic_file>(data_path);
    sink.file = data.get();
  }
  check_embeddable(*impl_, options.external_threshold, options.external_data, where);
  detail::atomic_file model_file(path);
  const ::onnx::ModelProto out = build_output(*impl_, sink, options.external_threshold);
  model_file.write(serialize(out, where));

  // Does the new data file replace a file this in-memory model still reads from?
  std::vector<int> repoint;
  if (data) {
    const auto& g = impl_->proto.graph();
    for (int i = 0; i < g.initializer_size(); ++i) {
      const auto& t = g.initializer(i);
      if (!has_external_data(t))
        continue;
      const auto ref = external_reference(t);
      if (same_file(resolve_external_path(t, impl_->base_dir, ref), data_path))
        repoint.push_back(i);
    }
    data->finish();
  }
  model_file.finish();
  // An empty data file is not written (nothing was above the threshold).
  const bool data_written = data && data->size() > 0;
  if (data_written)
    data->commit();
  model_file.commit();
  if (!data_written)
    return;
  // Keep the in-memory model readable: its old data file has just been replaced.
  for (int i : repoint) {
    auto* t = impl_->proto.mutable_graph()->mutable_initializer(i);
    const auto& o = out.graph().initializer(i);
    if (has_external_data(o)) {
      t->mutable_external_data()->CopyFrom(o.external_data());
    } else {
      t->clear_external_data();
      t->clear_data_location();
      t->set_raw_data(o.raw_data());
    }
  }
}

std::string model::to_bytes() const {
  check_embeddable(*impl_, 0, false, "to_bytes");
  return serialize(build_output(*impl_, data_sink{}, 0), "to_bytes");
}

// -- versions -------------------------------------------------------------------------------------

std::int64_t model::ir_version() const {
  return impl_->proto.ir_version();
}
void model::set_ir_version(std::int64_t version) {
  if (version <= 0)
    graph_error("ir_version must be positive, got " + std::to_string(version));
  impl_->proto.set_ir_version(version);
}

std::vector<opset_import> model::opsets() const {
  std::vector<opset_import> out;
  for (const auto& o : impl_->proto.opset_import())
    out.push_back({o.domain(), o.version()});
  return out;
}

std::optional<std::int64_t> model::opset(std::string_view domain) const {
  const bool def = is_default_domain(domain);
  for (const auto& o : impl_->proto.opset_import()) {
    if (def ? is_default_domain(o.domain()) : o.domain() == domain)
      return o.version();
  }
  return std::nullopt;
}

void model::set_opset(std::string_view domain, std::int64_t version) {
  if (version <= 0) {
    graph_error("opset version for domain '" + std::string(domain) + "' must be positive, got " +
                std::to_string(version));
  }
  const bool def = is_default_domain(domain);
  for (auto& o : *impl_->proto.mutable_opset_import()) {
    if (def ? is_default_domain(o.domain()) : o.domain() == domain) {
      o.set_version(version);
      return;
    }
  }
  auto* o = impl_->proto.add_opset_import();
  o->set_domain(def ? std::string() : std::string(domain));
  o->set_version(version);
}

std::int64_t model::ensure_opset(std::string_view domain, std::int64_t min_version) {
  const auto current = opset(domain);
  if (current && *current >= min_version)
    return *current;
  set_opset(domain, min_version);
  return min_version;
}

// -- inputs / outputs / initializers --------------------------------------------------------------

std::vector<value_info> model::inputs() const {
  const auto& g = impl_->proto.graph();
  std::vector<value_info> out;
  for (const auto& v : g.input()) {
    if (impl_->inits.find(g, v.name()) < 0)
      out.push_back(to_value_info(v));
  }
  return out;
}

std::vector<value_info> model::outputs() const {
  std::vector<value_info> out;
  for (const auto& v : impl_->proto.graph().output())
    out.push_back(to_value_info(v));
  return out;
}

std::vector<std::string> model::initializer_names() const {
  std::vector<std::string> out;
  for (const auto& t : impl_->proto.graph().initializer())
    out.push_back(t.name());
  return out;
}

bool model::has_initializer(std::string_view name) const {
  return impl_->inits.find(impl_->proto.graph(), name) >= 0;
}

tensor model::initializer(std::string_view name) const {
  const int i = impl_->inits.find(impl_->proto.graph(), name);
  if (i < 0)
    graph_error("no initializer named '" + std::string(name) + "'");
  return read_tensor(impl_->proto.graph().initializer(i), impl_->base_dir);
}

void model::set_initializer(std::string_view name, const tensor& value) {
  if (name.empty())
    graph_error("set_initializer: empty name");
  ::onnx::TensorProto& t = impl_->inits.get_or_add(*impl_->proto.mutable_graph(), name);
  write_tensor(value, t);
}

bool model::remove_initializer(std::string_view name) {
  auto* g = impl_->proto.mutable_graph();
  const int i = impl_->inits.find(*g, name);
  if (i < 0)
    return false;
  g->mutable_initializer()->DeleteSubrange(i, 1);
  // The index starts over: it notices a new length, but a removal followed by an addition
  // through the protobuf would keep the length.
  impl_->inits.clear();
  if (impl_->proto.ir_version() < 4) {
    for (int k = 0; k < g->input_size(); ++k) {
      if (g->input(k).name() == name) {
        g->mutable_input()->DeleteSubrange(k, 1);
        break;
      }
    }
  }
  return true;
}

// -- nodes ----------------------------------------------------------------------------------------

std::size_t model::node_count() const {
  return static_cast<std::size_t>(impl_->proto.graph().node_size());
}

namespace {
int checked_index(std::size_t index, std::size_t count, const char* what) {
  if (index >= count) {
    graph_error(std::string(what) + ": node index " + std::to_string(index) + " out of range (" +
                std::to_string(count) + " nodes)");
  }
  return static_cast<int>(index);
}
}  // namespace

node_info model::node(std::size_t index) const {
  return to_node_info(impl_->proto.graph().node(checked_index(index, node_count(), "node")),
                      impl_->base_dir);
}

std::vector<node_info> model::nodes() const {
  std::vector<node_info> out;
  for (const auto& n : impl_->proto.graph().node())
    out.push_back(to_node_info(n, impl_->base_dir));
  return out;
}

void model::insert_node(std::size_t index, const node_info& n) {
  const std::size_t count = node_count();
  if (index > count)
    checked_index(index, count + 1, "insert_node");
  auto* nodes = impl_->proto.mutable_graph()->mutable_node();
  ::onnx::NodeProto tmp;
  fill_node(n, tmp);
  *nodes->Add() = std::move(tmp);
  // Bubble the new last element down to `index`.
  for (int i = nodes->size() - 1; i > static_cast<int>(index); --i)
    nodes->SwapElements(i, i - 1);
}

void model::remove_node(std::size_t index) {
  const int i = checked_index(index, node_count(), "remove_node");
  impl_->proto.mutable_graph()->mutable_node()->DeleteSubrange(i, 1);
}

void model::set_node_input(std::size_t index, std::size_t slot, std::string_view name) {
  auto* n = impl_->proto.mutable_graph()->mutable_node(
      checked_index(index, node_count(), "set_node_input"));
  const auto size = static_cast<std::size_t>(n->input_size());
  if (slot == size) {
    n->add_input(std::string(name));
  } else if (slot < size) {
    n->set_input(static_cast<int>(slot), std::string(name));
  } else {
    graph_error("set_node_input: node '" + n->name() + "' has " + std::to_string(size) +
                " inputs, slot " + std::to_string(slot) + " out of range");
  }
}

void model::set_node_output(std::size_t index, std::size_t slot, std::string_view name) {
  auto* n = impl_->proto.mutable_graph()->mutable_node(
      checked_index(index, node_count(), "set_node_output"));
  const auto size = static_cast<std::size_t>(n->output_size());
  if (slot == size) {
    n->add_output(std::string(name));
  } else if (slot < size) {
    n->set_output(static_cast<int>(slot), std::string(name));
  } else {
    graph_error("set_node_output: node '" + n->name() + "' has " + std::to_string(size) +
                " outputs, slot " + std::to_string(slot) + " out of range");
  }
}

namespace {
/// Renames node inputs/outputs and graph outputs in every subgraph of `n` (outer-scope reads).
void rename_in_subgraphs(::onnx::NodeProto& n, std::string_view from, std::string_view to,
                         std::size_t& count) {
  auto fix = [&](std::string* s) {
    if (*s == from) {
      s->assign(to);
      ++count;
    }
  };
  for (auto& a : *n.mutable_attribute()) {
    std::vector<::onnx::GraphProto*> graphs;
    if (a.has_g())
      graphs.push_back(a.mutable_g());
    for (auto& g : *a.mutable_graphs())
      graphs.push_back(&g);
    for (auto* g : graphs) {
      for (auto& sn : *g->mutable_node()) {
        for (auto& s : *sn.mutable_input())
          fix(&s);
        for (auto& s : *sn.mutable_output())
          fix(&s);
        rename_in_subgraphs(sn, from, to, count);
      }
      for (auto& v : *g->mutable_output())
        fix(v.mutable_name());
    }
  }
}
}  // namespace

std::size_t model::rename_edge(std::string_view from, std::string_view to) {
  if (from.empty() || to.empty())
    graph_error("rename_edge: empty tensor name");
  std::size_t count = 0;
  auto fix = [&](std::string* s) {
    if (*s == from) {
      s->assign(to);
      ++count;
    }
  };
  auto* g = impl_->proto.mutable_graph();
  for (auto& n : *g->mutable_node()) {
    for (auto& s : *n.mutable_input())
      fix(&s);
    for (auto& s : *n.mutable_output())
      fix(&s);
    rename_in_subgraphs(n, from, to, count);
  }
  for (auto& v : *g->mutable_input())
    fix(v.mutable_name());
  for (auto& v : *g->mutable_output())
    fix(v.mutable_name());
  for (auto& v : *g->mutable_value_info())
    fix(v.mutable_name());
  for (auto& t : *g->mutable_initializer())
    fix(t.mutable_name());
  impl_->inits.clear();  // initializers renamed in place
  return count;
}

std::vector<std::size_t> model::consumers(std::string_view name) const {
  std::vector<std::size_t> out;
  const auto& g = impl_->proto.graph();
  const std::string key(name);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& in = g.node(i).input();
    if (std::find(in.begin(), in.end(), name) != in.end() ||
        node_implicit_inputs(g.node(i)).count(key) != 0) {
      out.push_back(static_cast<std::size_t>(i));
    }
  }
  return out;
}

std::optional<std::size_t> model::producer(std::string_view name) const {
  const auto& g = impl_->proto.graph();
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& o = g.node(i).output();
    if (std::find(o.begin(), o.end(), name) != o.end())
      return static_cast<std::size_t>(i);
  }
  return std::nullopt;
}

std::vector<std::size_t> model::topological_order() const {
  return graph_topological_order(impl_->proto.graph(), {});
}

// -- Model-local functions
// --------------------------------------------------------------------------

std::size_t model::inline_functions() {
  return inline_local_functions(impl_->proto);
}

// -- Constant nodes -------------------------------------------------------------------------------

std::size_t model::constants_to_initializers() {
  auto* g = impl_->proto.mutable_graph();
  auto* nodes = g->mutable_node();
  const bool inputs_too = impl_->proto.ir_version() < 4;
  std::size_t converted = 0;
  int keep = 0;
  for (int i = 0; i < nodes->size(); ++i) {
    const auto& n = nodes->Get(i);
    const ::onnx::AttributeProto* attr = nullptr;
    if (n.op_type() == "Constant" && is_default_domain(n.domain()) && n.output_size() == 1 &&
        n.attribute_size() == 1 && !n.output(0).empty()) {
      attr = &n.attribute(0);
    }
    ::onnx::TensorProto t;
    bool ok = attr != nullptr;
    if (ok) {
      const auto& name = attr->name();
      if (name == "value" && attr->has_t()) {
        t = attr->t();
      } else if (name == "value_float") {
        t.set_data_type(1);
        t.add_float_data(attr->f());
      } else if (name == "value_floats") {
        t.set_data_type(1);
        t.add_dims(attr->floats_size());
        t.mutable_float_data()->CopyFrom(attr->floats());
      } else if (name == "value_int") {
        t.set_data_type(7);
        t.add_int64_data(attr->i());
      } else if (name == "value_ints") {
        t.set_data_type(7);
        t.add_dims(attr->ints_size());
        t.mutable_int64_data()->CopyFrom(attr->ints());
      } else if (name == "value_string") {
        t.set_data_type(8);
        t.add_string_data(attr->s());
      } else if (name == "value_strings") {
        t.set_data_type(8);
        t.add_dims(attr->strings_size());
        t.mutable_string_data()->CopyFrom(attr->strings());
      } else {
        ok = false;  // sparse_value (or a malformed node) stays a node
      }
    }
    if (!ok) {
      if (keep != i)
        nodes->SwapElements(keep, i);
      ++keep;
      continue;
    }
    const std::string& out_name = n.output(0);
    if (impl_->inits.find(*g, out_name) >= 0) {
      graph_error("Constant node '" + n.name() + "' output '" + out_name +
                  "' duplicates an initializer name");
    }
    t.set_name(out_name);
    validate_tensor(t, impl_->base_dir);
    if (inputs_too) {
      auto* in = g->add_input();
      in->set_name(out_name);
      auto* tt = in->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(t.data_type());
      auto* shape = tt->mutable_shape();
      for (auto d : t.dims())
        shape->add_dim()->set_dim_value(d);
    }
    impl_->inits.add(*g, std::move(t));
    ++converted;
  }
  while (nodes->size() > keep)
    nodes->RemoveLast();
  return converted;
}

}  // namespace quark::onnx
