// SPDX-License-Identifier: MIT
// libFuzzer target for the JSON configuration format (docs/config.md): parses arbitrary bytes
// with quark::onnx::config_from_json. Text that parses must print back (to_json) to text that
// parses to an equal configuration, and validate(), effective_options() and plan_node() on it may
// only fail with a quark::error. The only acceptable failure of the parse is a quark::error
// (config_error, not_implemented); anything else (a crash, a sanitizer report, another exception,
// a round trip that changes the configuration) is a bug. Build and run: see fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <quark/core/error.hpp>
#include <quark/onnx/config.hpp>

namespace qo = quark::onnx;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  qo::qconfig cfg;
  try {
    cfg = qo::config_from_json(text);
  } catch (const quark::error&) {
    return 0;
  }
  const std::string printed = qo::to_json(cfg);
  qo::qconfig again;
  try {
    again = qo::config_from_json(printed);
  } catch (const quark::error& e) {
    std::fprintf(stderr, "to_json printed text config_from_json refuses: %s\n%s\n", e.what(),
                 printed.c_str());
    std::abort();
  }
  if (!(again == cfg)) {
    std::fprintf(stderr, "the round trip changed the configuration:\n%s\n%s\n", printed.c_str(),
                 qo::to_json(again).c_str());
    std::abort();
  }
  try {
    cfg.validate();
    static_cast<void>(cfg.effective_options());
  } catch (const quark::error&) {
    return 0;
  }
  for (const char* op : {"Conv", "MatMul", "Add", "Relu"}) {
    try {
      const qo::node_query q{.name = "/block/conv_1", .op_type = op, .in_subgraph = {}};
      const qo::node_plan p = qo::plan_node(cfg, q);
      if (p.quantized()) {
        for (auto role : {qo::tensor_role::input, qo::tensor_role::output, qo::tensor_role::weight,
                          qo::tensor_role::bias})
          static_cast<void>(qo::effective_spec(cfg, *p.config, role));
      }
    } catch (const quark::error&) {
    }
  }
  return 0;
}
