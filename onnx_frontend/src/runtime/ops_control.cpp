// SPDX-License-Identifier: MIT
// Control flow: If runs one branch subgraph in the enclosing scope.
#include "runtime/kernel.hpp"
#include "runtime/registry.hpp"

namespace quark::onnx::rt {
namespace {

void k_if(kernel_context& c) {
  const tensor& cond = c.in(0);
  if (cond.size() != 1)
    c.fail("quark.onnx.runtime", "condition must hold one element");
  bool take_then = false;
  if (cond.type() == dtype_id::boolean) {
    take_then = cond.data<bool>()[0];
  } else {
    take_then = read_doubles(cond)[0] != 0.0;
  }
  const attribute* branch = c.n.find(take_then ? "then_branch" : "else_branch");
  if (!branch || !branch->g)
    c.fail("quark.onnx.runtime", "missing branch subgraph");
  auto outs = c.run_subgraph(*branch->g);
  if (outs.size() != c.output_count()) {
    c.fail("quark.onnx.runtime", "branch returns " + std::to_string(outs.size()) + " values for " +
                                     std::to_string(c.output_count()) + " outputs");
  }
  for (std::size_t i = 0; i < outs.size(); ++i)
    c.out(i) = std::move(outs[i]);
}

}  // namespace

void register_control(registry_map& r) {
  r["If"] = k_if;
}

}  // namespace quark::onnx::rt
