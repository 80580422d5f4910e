// SPDX-License-Identifier: MIT
// Umbrella header: everything except the third-party adapters in quark/adapt/.
#pragma once

#include <quark/config.hpp>
#include <quark/core/bit.hpp>
#include <quark/core/concepts.hpp>
#include <quark/core/error.hpp>
#include <quark/core/policy.hpp>
#include <quark/core/type_list.hpp>
#include <quark/dtype/convert.hpp>
#include <quark/dtype/dtype_id.hpp>
#include <quark/dtype/formats.hpp>
#include <quark/dtype/limits.hpp>
#include <quark/dtype/pack.hpp>
#include <quark/dtype/traits.hpp>
#include <quark/dtype/visit.hpp>
#include <quark/version.hpp>
