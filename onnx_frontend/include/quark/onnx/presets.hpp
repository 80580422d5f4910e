// SPDX-License-Identifier: MIT
// Named configurations, as Quark's QConfig.get_default_config(name) provides them (quark-spec §8:
// the new-API presets of §8.1 and, for names only the legacy API has, their legacy settings of
// §8.2 expressed with tensor specs). docs/config.md lists every field each preset sets.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include <quark/onnx/config.hpp>

namespace quark::onnx {

/// A setting Quark's preset makes that quark-cpp leaves out because the option is not implemented
/// yet (graph rewrites, NPU position adjustments). The quantizer reports these in its summary.
struct omitted_option {
  std::string_view key;
  option_value value;
  std::string_view reason;
};

/// One preset: its name, the spellings that also select it, a one-line description and what it
/// leaves out.
struct preset_info {
  std::string_view name;                  ///< e.g. "S8S8_AAWS"
  std::vector<std::string_view> aliases;  ///< e.g. {"S8S8"}
  std::string_view description;
  std::vector<omitted_option> omitted;
};

/// Every preset, in documentation order.
std::span<const preset_info> presets();

/// The preset called `name` (or one of its aliases; case-insensitive), nullptr if unknown.
const preset_info* find_preset(std::string_view name);

/// The configuration of preset `name`. Throws config_error "quark.config.unknown_preset" that
/// lists the valid names.
///
/// ```cpp
/// qconfig cfg = get_default_config("VINT8");
/// cfg.extra_options.set("UseRandomData", true);
/// ```
qconfig get_default_config(std::string_view name);

}  // namespace quark::onnx
