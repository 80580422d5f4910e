// SPDX-License-Identifier: MIT
// The executor: runs a prepared rt::graph node by node in topological order, hands each new value
// to the observer, and drops every value right after its last consumer.
#if defined(__GLIBC__) || __has_include(<malloc.h>)
#include <malloc.h>
#endif

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <quark/dtype/convert.hpp>
#include <quark/onnx/runtime.hpp>

#include "io/graph_util.hpp"
#include "io/inline_functions.hpp"
#include "io/proto_access.hpp"
#include "runtime/kernel.hpp"
#include "runtime/proto_decode.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx {

namespace rt {
namespace {

/// Values visible while a graph runs: its own live values, its constants, then the enclosing
/// scope (for If branches).
struct scope {
  const graph& g;
  const scope* parent = nullptr;
  std::unordered_map<std::string, std::shared_ptr<const tensor>> values;
  std::unordered_set<std::string> owned;  ///< values produced here (not feeds): reusable

  const tensor* find(const std::string& name) const {
    if (auto it = values.find(name); it != values.end())
      return it->second.get();
    if (auto it = g.constants.find(name); it != g.constants.end())
      return it->second.get();
    return parent ? parent->find(name) : nullptr;
  }
};

bool well_formed(const tensor& t) {
  return t.byte_size() == t.size() * element_size(t.type());
}

std::vector<tensor> execute(const graph& g, scope& sc, thread_pool& pool,
                            const shared_value_observer& observer, const chunk_request& chunks) {
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const node& n = g.nodes[i];
    kernel_context ctx{n, {}, {}, {}, pool, {}};
    ctx.inputs.reserve(n.inputs.size());
    for (const auto& name : n.inputs) {
      if (name.empty()) {
        ctx.inputs.push_back(nullptr);
        continue;
      }
      const tensor* t = sc.find(name);
      if (!t) {
        throw frontend_error("quark.onnx.runtime",
                             n.describe() + ": input '" + name + "' has no value");
      }
      ctx.inputs.push_back(t);
    }
    ctx.outputs.resize(n.outputs.size());
    ctx.reusable.assign(n.inputs.size(), nullptr);
    for (const auto& dead : g.release[i]) {
      if (!sc.owned.count(dead))
        continue;
      auto it = sc.values.find(dead);
      if (it == sc.values.end() || it->second.use_count() != 1)
        continue;
      if (std::count(n.inputs.begin(), n.inputs.end(), dead) != 1)
        continue;
      const auto pos = static_cast<std::size_t>(std::find(n.inputs.begin(), n.inputs.end(), dead) -
                                                n.inputs.begin());
      // The value was created non-const (make_shared<tensor>) and dies with this node.
      ctx.reusable[pos] = const_cast<tensor*>(it->second.get());
    }
    if (chunks && !n.outputs.empty() && !n.outputs[0].empty())
      ctx.chunks = chunks(n.outputs[0]);
    ctx.run_subgraph = [&](const graph& sub, std::vector<tensor> args) {
      if (args.size() != sub.inputs.size()) {
        throw frontend_error("quark.onnx.runtime",
                             n.describe() + ": subgraph '" + sub.name + "' takes " +
                                 std::to_string(sub.inputs.size()) + " inputs, given " +
                                 std::to_string(args.size()));
      }
      scope child{sub, &sc, {}, {}};
      // Formal inputs are observed like graph inputs (once per Loop or Scan iteration) and
      // owned by the body: they are fresh tensors, so its nodes may reuse them in place.
      for (std::size_t a = 0; a < args.size(); ++a) {
        std::shared_ptr<const tensor> value = std::make_shared<tensor>(std::move(args[a]));
        const auto& name = sub.inputs[a].name;
        if (observer)
          observer(name, value);
        child.values[name] = std::move(value);
        child.owned.insert(name);
      }
      return execute(sub, child, pool, observer, chunks);
    };
    try {
      n.kernel(ctx);
    } catch (const frontend_error&) {
      throw;
    } catch (const quark::error& e) {
      throw frontend_error(e.id(), n.describe() + ": " + e.message());
    } catch (const std::exception& e) {
      throw frontend_error("quark.onnx.runtime", n.describe() + ": " + e.what());
    }
    for (std::size_t o = 0; o < n.outputs.size(); ++o) {
      const auto& name = n.outputs[o];
      if (name.empty())
        continue;
      if (!well_formed(ctx.outputs[o])) {
        throw frontend_error("quark.onnx.runtime",
                             n.describe() + ": output '" + name + "' was not produced");
      }
      auto value = std::make_shared<tensor>(std::move(ctx.outputs[o]));
      if (observer)
        observer(name, value);
      sc.values[name] = std::move(value);
      sc.owned.insert(name);
    }
    for (const auto& dead : g.release[i]) {
      sc.values.erase(dead);
      sc.owned.erase(dead);
    }
  }
  std::vector<tensor> outs;
  outs.reserve(g.outputs.size());
  for (std::size_t k = 0; k < g.outputs.size(); ++k) {
    const auto& name = g.outputs[k].name;
    // A value of this scope that nothing else holds and no later output repeats is moved out
    // (the scope ends with this call): a Loop body's carried values are not copied each
    // iteration.
    auto it = sc.values.find(name);
    const bool repeated =
        std::any_of(g.outputs.begin() + static_cast<std::ptrdiff_t>(k) + 1, g.outputs.end(),
                    [&](const auto& o) { return o.name == name; });
    if (it != sc.values.end() && sc.owned.count(name) && it->second.use_count() == 1 && !repeated) {
      // Owned values were created non-const (make_shared<tensor>).
      outs.push_back(std::move(*const_cast<tensor*>(it->second.get())));
      continue;
    }
    const tensor* t = sc.find(name);
    if (!t) {
      throw frontend_error("quark.onnx.runtime", "graph output '" + name + "' has no value");
    }
    outs.push_back(*t);
  }
  return outs;
}

}  // namespace
}  // namespace rt

struct runtime::impl {
  std::shared_ptr<rt::graph> main;
  std::vector<tensor_info> inputs;
  std::vector<tensor_info> outputs;
  std::unique_ptr<rt::thread_pool> pool;

  static std::unique_ptr<impl> prepare(const ::onnx::ModelProto& m,
                                       const std::filesystem::path& base_dir,
                                       runtime_options options);
};

std::unique_ptr<runtime::impl> runtime::impl::prepare(const ::onnx::ModelProto& m,
                                                      const std::filesystem::path& base_dir,
                                                      runtime_options options) {
  // Model-local functions run as their bodies (ONNX Runtime inlines them too).
  if (m.functions_size() > 0) {
    ::onnx::ModelProto inlined = m;
    if (inline_local_functions(inlined) > 0)
      return prepare(inlined, base_dir, options);
  }
  check_runnable(m);
  int opset = 0;
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = static_cast<int>(o.version());
  }
  if (opset == 0)
    opset = 1;
  rt::build_report report;
  auto p = std::make_unique<runtime::impl>();
  p->main = rt::build_graph(m.graph(), opset, base_dir, {}, report);
  if (!report.unsupported.empty()) {
    auto& u = report.unsupported;
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    std::string list;
    for (const auto& op : u)
      list += (list.empty() ? "" : ", ") + op;
    throw frontend_error("quark.onnx.unsupported_op",
                         "the runtime does not implement: " + list + " (graph '" +
                             m.graph().name() + "', opset " + std::to_string(opset) + ")");
  }
  p->inputs = p->main->inputs;
  p->outputs = p->main->outputs;
  p->pool = std::make_unique<rt::thread_pool>(options.threads);
#if defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
  if (options.tune_malloc) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest accepted value
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }
#endif
  return p;
}

runtime::runtime(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

runtime::runtime(const std::filesystem::path& path, runtime_options options)
    : runtime(model::load(path, {.validate = false}), options) {
}

runtime::runtime(const model& m, runtime_options options)
    : impl_(impl::prepare(proto(m), proto_access::get(m).base_dir, options)) {
}

runtime runtime::from_bytes(std::span<const std::byte> bytes, const std::filesystem::path& base_dir,
                            runtime_options options) {
  return runtime(model::from_bytes(bytes, base_dir, {.validate = false}), options);
}

runtime::runtime(runtime&&) noexcept = default;
runtime& runtime::operator=(runtime&&) noexcept = default;
runtime::~runtime() = default;

const std::vector<tensor_info>& runtime::inputs() const noexcept {
  return impl_->inputs;
}
const std::vector<tensor_info>& runtime::outputs() const noexcept {
  return impl_->outputs;
}

void runtime::parallel_for(std::size_t n, std::size_t grain,
                           const std::function<void(std::size_t, std::size_t)>& fn) const {
  impl_->pool->parallel_for(n, grain, fn);
}

unsigned runtime::threads() const noexcept {
  return impl_->pool->size();
}

std::vector<std::string> runtime::supported_ops() {
  auto ops = rt::registered_ops();
  ops.push_back("Constant");
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

std::map<std::string, tensor> runtime::run(const std::map<std::string, tensor>& feeds,
                                           const value_observer& observer) const {
  if (!observer)
    return run(feeds, shared_value_observer{});
  return run(feeds, [&observer](std::string_view name, std::shared_ptr<const tensor> value) {
    observer(name, *value);
  });
}

std::map<std::string, tensor> runtime::run(const std::map<std::string, tensor>& feeds,
                                           const shared_value_observer& observer,
                                           const chunk_request& chunks) const {
  const rt::graph& g = *impl_->main;
  rt::scope sc{g, nullptr, {}, {}};
  for (const auto& in : impl_->inputs) {
    auto it = feeds.find(in.name);
    if (it == feeds.end()) {
      throw frontend_error("quark.onnx.runtime", "graph input '" + in.name + "' is not fed");
    }
    const tensor& t = it->second;
    const bool half = t.type() == dtype_id::float16 || t.type() == dtype_id::bfloat16;
    const bool widened_ok = t.type() == dtype_id::float32 &&
                            (in.type == dtype_id::float16 || in.type == dtype_id::bfloat16);
    if (in.type != dtype_id::undefined && t.type() != in.type && !widened_ok) {
      throw frontend_error("quark.onnx.runtime", "graph input '" + in.name + "' is declared " +
                                                     std::string(dtype_name(in.type)) + ", fed " +
                                                     std::string(dtype_name(t.type())));
    }
    if (in.shape.size() == t.rank() || in.shape.empty()) {
      for (std::size_t d = 0; d < in.shape.size(); ++d) {
        if (in.shape[d] >= 0 && in.shape[d] != t.shape()[d]) {
          throw frontend_error("quark.onnx.shape", "graph input '" + in.name + "' has shape " +
                                                       rt::shape_string(t.shape()) + ", declared " +
                                                       rt::shape_string(in.shape));
        }
      }
    } else {
      throw frontend_error("quark.onnx.shape", "graph input '" + in.name + "' has rank " +
                                                   std::to_string(t.rank()) + ", declared " +
                                                   std::to_string(in.shape.size()));
    }
    std::shared_ptr<const tensor> value;
    if (half) {
      value = std::make_shared<const tensor>(rt::widen_half(t));
    } else if (widened_ok) {
      // float32 fed to a float16 / bfloat16 input: encoded to the declared type (the headers'
      // bulk conversion, ties to even) and widened back as a half input is, so the graph sees
      // the values the model would receive.
      tensor h(in.type, t.shape(), uninitialized);
      if (in.type == dtype_id::float16)
        quark::convert(t.data<float>(), h.data<quark::float16>());
      else
        quark::convert(t.data<float>(), h.data<quark::bfloat16>());
      value = std::make_shared<const tensor>(rt::widen_half(std::move(h)));
    } else {
      value = std::shared_ptr<const tensor>(&t, [](const tensor*) {});  // the caller owns it
    }
    if (observer)
      observer(in.name, value);
    sc.values[in.name] = std::move(value);
  }
  auto outs = rt::execute(g, sc, *impl_->pool, observer, chunks);
  std::map<std::string, tensor> result;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    tensor& t = outs[i];
    const dtype_id want = impl_->outputs[i].type;
    if (t.type() == dtype_id::float32 &&
        (want == dtype_id::float16 || want == dtype_id::bfloat16)) {
      tensor h(want, t.shape());
      auto src = t.data<float>();
      if (want == dtype_id::float16) {
        quark::convert<quark::float16>(std::span<const float>(src), h.data<quark::float16>());
      } else {
        quark::convert<quark::bfloat16>(std::span<const float>(src), h.data<quark::bfloat16>());
      }
      t = std::move(h);
    }
    result[impl_->outputs[i].name] = std::move(t);
  }
  return result;
}

}  // namespace quark::onnx
