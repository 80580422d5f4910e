// SPDX-License-Identifier: MIT
// Numpy broadcasting for up to three operands. Adjacent dimensions that every operand walks
// contiguously (or every operand broadcasts) are merged first, so the innermost loop is as long
// as possible: [1,C,H,W] * [1,C,1,1] becomes C runs of H*W with a constant second operand.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "runtime/kernel.hpp"

namespace quark::onnx::rt {

struct broadcast_plan {
  std::vector<std::size_t> dims;                    ///< coalesced output dims (at least one)
  std::array<std::vector<std::size_t>, 3> strides;  ///< per operand, per coalesced dim
  std::size_t operands = 0;
  std::size_t total = 0;
};

inline broadcast_plan make_broadcast_plan(const shape_t& out, const std::vector<shape_t>& ins) {
  broadcast_plan p;
  p.operands = ins.size();
  p.total = element_count(out);
  std::array<std::vector<std::size_t>, 3> full;
  for (std::size_t k = 0; k < ins.size(); ++k)
    full[k] = broadcast_strides(ins[k], out);
  for (std::size_t d = 0; d < out.size(); ++d) {
    const auto len = to_size(out[d]);
    if (len == 1)
      continue;  // size-1 dims never move any operand
    bool merge = !p.dims.empty();
    for (std::size_t k = 0; merge && k < ins.size(); ++k) {
      merge = p.strides[k].back() == full[k][d] * len;
    }
    if (merge) {
      p.dims.back() *= len;
      for (std::size_t k = 0; k < ins.size(); ++k)
        p.strides[k].back() = full[k][d];
    } else {
      p.dims.push_back(len);
      for (std::size_t k = 0; k < ins.size(); ++k)
        p.strides[k].push_back(full[k][d]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    for (std::size_t k = 0; k < ins.size(); ++k)
      p.strides[k].push_back(0);
  }
  return p;
}

/// Calls inner(out_offset, offsets[3], n, inner_strides[3]) for every innermost run.
template <class F>
void for_each_run(const broadcast_plan& p, F&& inner) {
  if (p.total == 0)
    return;
  const std::size_t r = p.dims.size();
  const std::size_t n = p.dims[r - 1];
  std::array<std::size_t, 3> in_stride{};
  for (std::size_t k = 0; k < p.operands; ++k)
    in_stride[k] = p.strides[k][r - 1];
  std::vector<std::size_t> idx(r, 0);
  std::array<std::size_t, 3> off{};
  for (std::size_t o = 0; o < p.total; o += n) {
    inner(o, off, n, in_stride);
    // advance the outer counters
    for (std::size_t d = r - 1; d-- > 0;) {
      ++idx[d];
      for (std::size_t k = 0; k < p.operands; ++k)
        off[k] += p.strides[k][d];
      if (idx[d] < p.dims[d])
        break;
      for (std::size_t k = 0; k < p.operands; ++k)
        off[k] -= p.strides[k][d] * idx[d];
      idx[d] = 0;
    }
  }
}

}  // namespace quark::onnx::rt
