// SPDX-License-Identifier: MIT
// Control flow: If runs one branch subgraph in the enclosing scope; Loop and Scan run their body
// once per iteration, binding its formal inputs (iteration number, condition, carried values,
// scan slices) and reading the enclosing scope for everything else. Tensors only: sequence and
// optional values never reach these kernels (their ops are refused when the model is loaded).
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

/// A one-element condition (If's cond, Loop's cond and cond_out): bool, or any number (non-zero
/// is true). `what` names the value in the error.
bool truth_of(const kernel_context& c, const tensor& t, const std::string& what) {
  if (t.size() != 1) {
    c.fail("quark.onnx.runtime",
           what + " must hold one element, has shape " + shape_string(t.shape()));
  }
  if (t.type() == dtype_id::boolean)
    return t.data<bool>()[0];
  return read_doubles(t)[0] != 0.0;
}

void k_if(kernel_context& c) {
  const tensor& cond = c.in(0);
  const bool take_then = truth_of(c, cond, "condition '" + c.n.inputs[0] + "'");
  const attribute* branch = c.n.find(take_then ? "then_branch" : "else_branch");
  if (!branch || !branch->g)
    c.fail("quark.onnx.runtime", "missing branch subgraph");
  auto outs = c.run_subgraph(*branch->g, {});
  if (outs.size() != c.output_count()) {
    c.fail("quark.onnx.runtime", "branch returns " + std::to_string(outs.size()) + " values for " +
                                     std::to_string(c.output_count()) + " outputs");
  }
  for (std::size_t i = 0; i < outs.size(); ++i)
    c.out(i) = std::move(outs[i]);
}

// ---- shared by Loop and Scan ------------------------------------------------------------------

const graph& body_of(const kernel_context& c) {
  const attribute* a = c.n.find("body");
  if (!a || !a->g)
    c.fail("quark.onnx.runtime", "missing graph attribute 'body'");
  return *a->g;
}

std::string quoted(const std::string& name) {
  return "'" + name + "'";
}

tensor scalar_i64(std::int64_t v) {
  tensor t(dtype_id::int64, {}, uninitialized);
  t.data<std::int64_t>()[0] = v;
  return t;
}

tensor scalar_bool(bool v) {
  tensor t(dtype_id::boolean, {}, uninitialized);
  t.data<bool>()[0] = v;
  return t;
}

/// Copies `rows` runs of `run` bytes, run r from src + r * src_stride to dst + r * dst_stride,
/// on the pool when there is enough to copy.
void copy_runs(thread_pool& pool, std::byte* dst, std::size_t dst_stride, const std::byte* src,
               std::size_t src_stride, std::size_t rows, std::size_t run) {
  if (rows == 0 || run == 0)
    return;
  const std::size_t grain = std::max<std::size_t>(1, (std::size_t{1} << 16) / run);
  pool.parallel_for(rows, grain, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t r = lo; r < hi; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, run);
  });
}

/// Product of shape[lo, hi).
std::size_t extent(const shape_t& s, std::size_t lo, std::size_t hi) {
  std::size_t n = 1;
  for (std::size_t d = lo; d < hi; ++d)
    n *= to_size(s[d]);
  return n;
}

/// x[..., index, ...] along `axis`, that axis removed.
tensor take_slice(thread_pool& pool, const tensor& x, std::size_t axis, std::size_t index) {
  shape_t shape = x.shape();
  const std::size_t len = to_size(shape[axis]);
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
  tensor r(x.type(), shape, uninitialized);
  if (r.byte_size() == 0)
    return r;  // (no offset into x's storage, which may be null)
  const std::size_t outer = extent(x.shape(), 0, axis);
  const std::size_t inner = extent(x.shape(), axis + 1, x.rank()) * elem_bytes(x);
  copy_runs(pool, r.bytes().data(), inner, x.bytes().data() + index * inner, len * inner, outer,
            inner);
  return r;
}

/// Writes `e` as position `index` along `axis` of `out` (e's shape with the axis inserted).
void put_slice(thread_pool& pool, tensor& out, std::size_t axis, std::size_t index,
               const tensor& e) {
  if (e.byte_size() == 0)
    return;  // (no offset into out's storage, which may be null)
  const std::size_t len = to_size(out.shape()[axis]);
  const std::size_t outer = extent(e.shape(), 0, axis);
  const std::size_t inner = extent(e.shape(), axis, e.rank()) * elem_bytes(e);
  copy_runs(pool, out.bytes().data() + index * inner, len * inner, e.bytes().data(), inner, outer,
            inner);
}

/// The element type a value declared as `t` has in the runtime (float16 and bfloat16 are
/// computed in float32; an undeclared type is taken as float32).
dtype_id runtime_type(dtype_id t) {
  if (t == dtype_id::undefined || t == dtype_id::float16 || t == dtype_id::bfloat16)
    return dtype_id::float32;
  return t;
}

/// A scan output without elements (zero iterations; Scan opset 8: an empty batch). No element
/// was computed, so its shape is the body's declaration of the element when that has a type and
/// every dimension (`length` inserted at `axis`, which may be negative as in scan_output_axes,
/// and `outer` in front); otherwise nothing tells the shape, and the output is an empty tensor of
/// shape [0] (float32 when the type is not declared either).
tensor empty_scan_output(const tensor_info& decl, std::int64_t axis, std::int64_t length = 0,
                         const shape_t& outer = {}) {
  const dtype_id type = runtime_type(decl.type);
  const bool known =
      std::all_of(decl.shape.begin(), decl.shape.end(), [](std::int64_t d) { return d >= 0; });
  const auto rank = to_i64(decl.shape.size()) + 1;
  if (decl.type == dtype_id::undefined || !known || axis < -rank || axis >= rank)
    return tensor(type, {0});
  shape_t shape = decl.shape;
  shape.insert(shape.begin() + (axis < 0 ? axis + rank : axis), length);
  shape.insert(shape.begin(), outer.begin(), outer.end());
  return tensor(type, shape);
}

/// Requires a carried or state value to keep its element type across an iteration.
void check_carried_type(const kernel_context& c, const char* kind, std::size_t j,
                        const std::string& name, dtype_id before, const tensor& after,
                        std::int64_t iteration) {
  if (after.type() != before) {
    c.fail("quark.onnx.runtime", std::string(kind) + " #" + std::to_string(j) + " (" +
                                     quoted(name) + ") is " + std::string(dtype_name(before)) +
                                     " but the body returns " +
                                     std::string(dtype_name(after.type())) + " in iteration " +
                                     std::to_string(iteration));
  }
}

/// Requires the value a body returns for a scan output in `iteration` to have the type and
/// shape it had in iteration 0.
void check_scan_element(const kernel_context& c, const std::string& output, dtype_id first_type,
                        const shape_t& first_shape, const tensor& e, std::int64_t iteration) {
  if (e.type() != first_type || e.shape() != first_shape) {
    c.fail("quark.onnx.runtime",
           "scan output " + quoted(output) + " is " + std::string(dtype_name(e.type())) + " " +
               shape_string(e.shape()) + " in iteration " + std::to_string(iteration) + " but " +
               std::string(dtype_name(first_type)) + " " + shape_string(first_shape) +
               " in iteration 0");
  }
}

/// parts[0..n) (of one type and shape) stacked along a new first axis.
tensor stack(thread_pool& pool, const std::vector<tensor>& parts) {
  shape_t shape = parts.front().shape();
  shape.insert(shape.begin(), to_i64(parts.size()));
  tensor r(parts.front().type(), shape, uninitialized);
  const std::size_t each = parts.front().byte_size();
  if (each == 0)
    return r;
  pool.parallel_for(parts.size(), std::max<std::size_t>(1, (std::size_t{1} << 16) / each),
                    [&](std::size_t lo, std::size_t hi) {
                      for (std::size_t i = lo; i < hi; ++i)
                        std::memcpy(r.bytes().data() + i * each, parts[i].bytes().data(), each);
                    });
  return r;
}

// ---- Loop -------------------------------------------------------------------------------------

/// The trip count M: one int64 (or int32) element.
std::int64_t trip_count(const kernel_context& c, const tensor& m) {
  const std::string what = "trip count M (" + quoted(c.n.inputs[0]) + ")";
  if (m.type() != dtype_id::int64 && m.type() != dtype_id::int32) {
    c.fail("quark.onnx.runtime", what + " must be int64, is " + std::string(dtype_name(m.type())));
  }
  if (m.size() != 1) {
    c.fail("quark.onnx.runtime",
           what + " must hold one element, has shape " + shape_string(m.shape()));
  }
  return read_ints(c, m)[0];
}

// Inputs (M, cond, v_initial...), body (iteration_num, cond_in, carried...) -> (cond_out,
// carried..., scan elements...), outputs (carried..., scans...). The loop runs while
// i < M and the condition holds; the condition starts as `cond` (true when absent) and is then
// the body's cond_out, also when `cond` is absent (as ONNX Runtime does): with neither M nor cond
// only cond_out ends the loop, and a body that never returns false runs until the model is
// stopped. M defaults to the int64 maximum, so the iteration number never overflows.
void k_loop(kernel_context& c) {
  const graph& body = body_of(c);
  const std::size_t carried_count = c.input_count() > 2 ? c.input_count() - 2 : 0;
  if (body.inputs.size() != 2 + carried_count) {
    c.fail("quark.onnx.runtime", "body has " + std::to_string(body.inputs.size()) +
                                     " inputs, expected " + std::to_string(2 + carried_count) +
                                     " (iteration number, condition and " +
                                     std::to_string(carried_count) + " loop-carried values)");
  }
  if (c.output_count() < carried_count) {
    c.fail("quark.onnx.runtime", "has " + std::to_string(c.output_count()) + " outputs for " +
                                     std::to_string(carried_count) + " loop-carried values");
  }
  const std::size_t scan_count = c.output_count() - carried_count;
  if (body.outputs.size() != 1 + c.output_count()) {
    c.fail("quark.onnx.runtime", "body has " + std::to_string(body.outputs.size()) +
                                     " outputs, expected " + std::to_string(1 + c.output_count()) +
                                     " (condition, " + std::to_string(carried_count) +
                                     " loop-carried values and " + std::to_string(scan_count) +
                                     " scan outputs)");
  }
  const std::int64_t trips =
      c.has_input(0) ? trip_count(c, c.in(0)) : std::numeric_limits<std::int64_t>::max();
  bool go = c.has_input(1) ? truth_of(c, c.in(1), "condition " + quoted(c.n.inputs[1])) : true;

  std::vector<tensor> carried;
  std::vector<dtype_id> carried_types;
  carried.reserve(carried_count);
  carried_types.reserve(carried_count);
  for (std::size_t j = 0; j < carried_count; ++j) {
    if (!c.has_input(2 + j))
      c.fail("quark.onnx.runtime", "loop-carried input #" + std::to_string(j) + " is absent");
    carried.push_back(c.in(2 + j));
    carried_types.push_back(carried.back().type());
  }
  std::vector<std::vector<tensor>> scans(scan_count);
  const std::string& cond_name = body.outputs[0].name;
  for (std::int64_t i = 0; i < trips && go; ++i) {
    std::vector<tensor> args;
    args.reserve(2 + carried_count);
    args.push_back(scalar_i64(i));
    args.push_back(scalar_bool(go));
    for (auto& v : carried)
      args.push_back(std::move(v));
    auto outs = c.run_subgraph(body, std::move(args));
    go = truth_of(c, outs[0],
                  "body output " + quoted(cond_name) + " in iteration " + std::to_string(i));
    for (std::size_t j = 0; j < carried_count; ++j) {
      check_carried_type(c, "loop-carried value", j, c.n.inputs[2 + j], carried_types[j],
                         outs[1 + j], i);
      carried[j] = std::move(outs[1 + j]);
    }
    for (std::size_t k = 0; k < scan_count; ++k) {
      tensor& e = outs[1 + carried_count + k];
      if (!scans[k].empty()) {
        const tensor& first = scans[k].front();
        check_scan_element(c, c.n.outputs[carried_count + k], first.type(), first.shape(), e, i);
      }
      scans[k].push_back(std::move(e));
    }
  }
  for (std::size_t j = 0; j < carried_count; ++j)
    c.out(j) = std::move(carried[j]);
  for (std::size_t k = 0; k < scan_count; ++k) {
    c.out(carried_count + k) = scans[k].empty()
                                   ? empty_scan_output(body.outputs[1 + carried_count + k], 0)
                                   : stack(c.pool, scans[k]);
  }
}

// ---- Scan -------------------------------------------------------------------------------------

/// How one Scan runs: its body, which node inputs are states and scan inputs, and the axes and
/// directions (already checked against the attribute lists' lengths and values).
struct scan_plan {
  const graph* body = nullptr;
  std::size_t first_state = 0;  ///< node input index of state 0
  std::size_t states = 0;
  std::size_t scan_inputs = 0;
  std::size_t scan_outputs = 0;
  std::vector<std::int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

/// An attribute list of `count` entries (all `fallback` when absent); directions must be 0 or 1.
std::vector<std::int64_t> scan_list(const kernel_context& c, const char* attr, std::size_t count,
                                    bool direction) {
  std::vector<std::int64_t> v = c.n.attr_ints(attr, std::vector<std::int64_t>(count, 0));
  if (v.size() != count) {
    c.fail("quark.onnx.runtime", "attribute '" + std::string(attr) + "' has " +
                                     std::to_string(v.size()) + " entries, expected " +
                                     std::to_string(count));
  }
  for (std::size_t i = 0; direction && i < v.size(); ++i) {
    if (v[i] != 0 && v[i] != 1) {
      c.fail("quark.onnx.runtime", "attribute '" + std::string(attr) + "'[" + std::to_string(i) +
                                       "] is " + std::to_string(v[i]) +
                                       ", expected 0 (forward) or 1 (reverse)");
    }
  }
  return v;
}

/// Runs the scan over `state` (moved in) and `inputs` (the scan inputs): returns the final
/// states then the scan outputs.
std::vector<tensor> run_scan(kernel_context& c, const scan_plan& p, std::vector<tensor> state,
                             const std::vector<const tensor*>& inputs) {
  const graph& body = *p.body;
  const std::size_t first_input = p.first_state + p.states;
  // Axes and the common length.
  std::vector<std::size_t> axes(p.scan_inputs);
  std::size_t length = 0;
  for (std::size_t j = 0; j < p.scan_inputs; ++j) {
    const tensor& x = *inputs[j];
    const std::string name = quoted(c.n.inputs[first_input + j]);
    const auto rank = to_i64(x.rank());
    if (p.in_axes[j] < -rank || p.in_axes[j] >= rank) {
      c.fail("quark.onnx.runtime", "scan_input_axes[" + std::to_string(j) +
                                       "] = " + std::to_string(p.in_axes[j]) +
                                       " is out of range for scan input " + name + " of shape " +
                                       shape_string(x.shape()));
    }
    axes[j] = to_size(p.in_axes[j] < 0 ? p.in_axes[j] + rank : p.in_axes[j]);
    const std::size_t len = to_size(x.shape()[axes[j]]);
    if (j == 0) {
      length = len;
    } else if (len != length) {
      c.fail("quark.onnx.runtime", "scan input " + name + " has " + std::to_string(len) +
                                       " elements along axis " + std::to_string(axes[j]) +
                                       ", scan input " + quoted(c.n.inputs[first_input]) + " has " +
                                       std::to_string(length));
    }
  }
  std::vector<dtype_id> state_types;
  state_types.reserve(state.size());
  for (const auto& s : state)
    state_types.push_back(s.type());

  std::vector<tensor> scans(p.scan_outputs);
  std::vector<std::size_t> out_axes(p.scan_outputs);
  std::vector<shape_t> element_shapes(p.scan_outputs);  ///< iteration 0's
  for (std::size_t t = 0; t < length; ++t) {
    const auto it = to_i64(t);
    std::vector<tensor> args;
    args.reserve(p.states + p.scan_inputs);
    for (auto& s : state)
      args.push_back(std::move(s));
    for (std::size_t j = 0; j < p.scan_inputs; ++j) {
      const std::size_t at = p.in_dirs[j] == 1 ? length - 1 - t : t;
      args.push_back(take_slice(c.pool, *inputs[j], axes[j], at));
    }
    auto outs = c.run_subgraph(body, std::move(args));
    for (std::size_t j = 0; j < p.states; ++j) {
      check_carried_type(c, "state variable", j, c.n.inputs[p.first_state + j], state_types[j],
                         outs[j], it);
      state[j] = std::move(outs[j]);
    }
    for (std::size_t k = 0; k < p.scan_outputs; ++k) {
      const tensor& e = outs[p.states + k];
      const std::string& name = c.n.outputs[p.states + k];
      if (t == 0) {
        const auto rank = to_i64(e.rank()) + 1;
        if (p.out_axes[k] < -rank || p.out_axes[k] >= rank) {
          c.fail("quark.onnx.runtime", "scan_output_axes[" + std::to_string(k) +
                                           "] = " + std::to_string(p.out_axes[k]) +
                                           " is out of range for scan output " + quoted(name) +
                                           " of rank " + std::to_string(rank));
        }
        out_axes[k] = to_size(p.out_axes[k] < 0 ? p.out_axes[k] + rank : p.out_axes[k]);
        shape_t shape = e.shape();
        shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(out_axes[k]), to_i64(length));
        scans[k] = tensor(e.type(), shape, uninitialized);
        element_shapes[k] = e.shape();
      } else {
        check_scan_element(c, name, scans[k].type(), element_shapes[k], e, it);
      }
      const std::size_t at = p.out_dirs[k] == 1 ? length - 1 - t : t;
      put_slice(c.pool, scans[k], out_axes[k], at, e);
    }
  }
  std::vector<tensor> result = std::move(state);
  for (std::size_t k = 0; k < p.scan_outputs; ++k) {
    result.push_back(length == 0 ? empty_scan_output(body.outputs[p.states + k], p.out_axes[k])
                                 : std::move(scans[k]));
  }
  return result;
}

/// Counts and body arity shared by both forms; `first_state` is 0 (opset 9+) or 1 (opset 8,
/// after sequence_lens).
scan_plan plan_scan(const kernel_context& c, std::size_t first_state) {
  scan_plan p;
  p.body = &body_of(c);
  p.first_state = first_state;
  const std::int64_t m = c.n.attr_i("num_scan_inputs", -1);
  const std::size_t available = c.input_count() > first_state ? c.input_count() - first_state : 0;
  if (!c.n.has("num_scan_inputs") || m < 1 || to_size(m) > available) {
    c.fail("quark.onnx.runtime",
           "attribute 'num_scan_inputs' is " +
               (c.n.has("num_scan_inputs") ? std::to_string(m) : std::string("missing")) +
               ", expected 1 to " + std::to_string(available) + " (the state and scan inputs)");
  }
  p.scan_inputs = to_size(m);
  p.states = available - p.scan_inputs;
  for (std::size_t i = first_state; i < c.input_count(); ++i) {
    if (!c.has_input(i))
      c.fail("quark.onnx.runtime", "input #" + std::to_string(i) + " is absent");
  }
  if (c.output_count() < p.states) {
    c.fail("quark.onnx.runtime", "has " + std::to_string(c.output_count()) + " outputs for " +
                                     std::to_string(p.states) + " state variables");
  }
  p.scan_outputs = c.output_count() - p.states;
  const graph& body = *p.body;
  if (body.inputs.size() != p.states + p.scan_inputs) {
    c.fail("quark.onnx.runtime",
           "body has " + std::to_string(body.inputs.size()) + " inputs, expected " +
               std::to_string(p.states + p.scan_inputs) + " (" + std::to_string(p.states) +
               " state variables and " + std::to_string(p.scan_inputs) + " scan inputs)");
  }
  if (body.outputs.size() != p.states + p.scan_outputs) {
    c.fail("quark.onnx.runtime",
           "body has " + std::to_string(body.outputs.size()) + " outputs, expected " +
               std::to_string(p.states + p.scan_outputs) + " (" + std::to_string(p.states) +
               " state variables and " + std::to_string(p.scan_outputs) + " scan outputs)");
  }
  return p;
}

// Opset 8: inputs (sequence_lens, states [B, ...]..., scan inputs [B, L, ...]...), outputs
// (states [B, ...]..., scan outputs [B, L, ...]...); every batch entry is a Scan of its own over
// axis 1, scan inputs in the attribute `directions`, scan outputs forward. Sequences shorter than
// L (sequence_lens) are refused: what the padded output positions hold is not specified.
void k_scan8(kernel_context& c) {
  scan_plan p = plan_scan(c, 1);
  p.in_axes.assign(p.scan_inputs, 0);
  p.in_dirs = scan_list(c, "directions", p.scan_inputs, true);
  p.out_axes.assign(p.scan_outputs, 0);
  p.out_dirs.assign(p.scan_outputs, 0);
  std::size_t batch = 0;
  for (std::size_t i = 1; i < c.input_count(); ++i) {
    const tensor& x = c.in(i);
    const bool scan_input = i >= 1 + p.states;
    if (x.rank() < (scan_input ? 2u : 1u)) {
      c.fail("quark.onnx.runtime", std::string(scan_input ? "scan input " : "state ") +
                                       quoted(c.n.inputs[i]) + " has shape " +
                                       shape_string(x.shape()) + ", expected [batch, " +
                                       (scan_input ? "sequence, ...]" : "...]") + " (opset 8)");
    }
    const std::size_t b = to_size(x.shape()[0]);
    if (i == 1) {
      batch = b;
    } else if (b != batch) {
      c.fail("quark.onnx.runtime", "input " + quoted(c.n.inputs[i]) + " has batch " +
                                       std::to_string(b) + ", input " + quoted(c.n.inputs[1]) +
                                       " has " + std::to_string(batch));
    }
  }
  const tensor& first_scan = c.in(1 + p.states);
  const std::int64_t length = first_scan.shape()[1];
  if (const tensor* lens = c.opt(0)) {
    const auto v = read_ints(c, *lens);
    if (v.size() != batch) {
      c.fail("quark.onnx.runtime", "sequence_lens has shape " + shape_string(lens->shape()) +
                                       ", expected [" + std::to_string(batch) + "]");
    }
    for (std::size_t b = 0; b < v.size(); ++b) {
      if (v[b] < 0 || v[b] > length) {
        c.fail("quark.onnx.runtime", "sequence_lens[" + std::to_string(b) +
                                         "] = " + std::to_string(v[b]) + " is outside [0, " +
                                         std::to_string(length) + "]");
      }
      if (v[b] != length) {
        c.fail("quark.onnx.unsupported_op",
               "sequence_lens[" + std::to_string(b) + "] = " + std::to_string(v[b]) +
                   " is shorter than the sequence (" + std::to_string(length) +
                   "): Scan opset 8 with padded sequences is not supported");
      }
    }
  }
  const graph& body = *p.body;
  if (batch == 0) {
    for (std::size_t j = 0; j < p.states; ++j)
      c.out(j) = c.in(1 + j);
    for (std::size_t k = 0; k < p.scan_outputs; ++k)
      c.out(p.states + k) = empty_scan_output(body.outputs[p.states + k], 0, length, {0});
    return;
  }
  // Per batch entry: the states and scan inputs of that entry, then one Scan.
  std::vector<std::vector<tensor>> per_output(p.states + p.scan_outputs);
  for (std::size_t b = 0; b < batch; ++b) {
    std::vector<tensor> state;
    state.reserve(p.states);
    for (std::size_t j = 0; j < p.states; ++j)
      state.push_back(take_slice(c.pool, c.in(1 + j), 0, b));
    std::vector<tensor> slices;
    slices.reserve(p.scan_inputs);
    for (std::size_t j = 0; j < p.scan_inputs; ++j)
      slices.push_back(take_slice(c.pool, c.in(1 + p.states + j), 0, b));
    std::vector<const tensor*> inputs;
    inputs.reserve(slices.size());
    for (const auto& s : slices)
      inputs.push_back(&s);
    auto outs = run_scan(c, p, std::move(state), inputs);
    for (std::size_t o = 0; o < outs.size(); ++o) {
      auto& parts = per_output[o];
      if (!parts.empty() &&
          (outs[o].type() != parts[0].type() || outs[o].shape() != parts[0].shape())) {
        c.fail("quark.onnx.runtime", "output " + quoted(c.n.outputs[o]) + " is " +
                                         shape_string(outs[o].shape()) + " for batch entry " +
                                         std::to_string(b) + " but " +
                                         shape_string(parts[0].shape()) + " for batch entry 0");
      }
      parts.push_back(std::move(outs[o]));
    }
  }
  for (std::size_t o = 0; o < per_output.size(); ++o)
    c.out(o) = stack(c.pool, per_output[o]);
}

// Opset 9+: inputs (states..., scan inputs...), body (states..., scan elements...) -> (states...,
// scan output elements...), outputs (final states..., scan outputs...). Scan input j is sliced
// along scan_input_axes[j], from its last element when scan_input_directions[j] is 1; scan output
// k stacks the elements along scan_output_axes[k], the first iteration last when
// scan_output_directions[k] is 1. Axes may be negative.
void k_scan(kernel_context& c) {
  if (c.n.opset < 9) {
    k_scan8(c);
    return;
  }
  scan_plan p = plan_scan(c, 0);
  p.in_axes = scan_list(c, "scan_input_axes", p.scan_inputs, false);
  p.in_dirs = scan_list(c, "scan_input_directions", p.scan_inputs, true);
  p.out_axes = scan_list(c, "scan_output_axes", p.scan_outputs, false);
  p.out_dirs = scan_list(c, "scan_output_directions", p.scan_outputs, true);
  std::vector<tensor> state;
  state.reserve(p.states);
  for (std::size_t j = 0; j < p.states; ++j)
    state.push_back(c.in(j));
  std::vector<const tensor*> inputs;
  inputs.reserve(p.scan_inputs);
  for (std::size_t j = 0; j < p.scan_inputs; ++j)
    inputs.push_back(&c.in(p.states + j));
  auto outs = run_scan(c, p, std::move(state), inputs);
  for (std::size_t o = 0; o < outs.size(); ++o)
    c.out(o) = std::move(outs[o]);
}

}  // namespace

void register_control(registry_map& r) {
  r["If"] = k_if;
  r["Loop"] = k_loop;
  r["Scan"] = k_scan;
}

}  // namespace quark::onnx::rt
