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
#include <quark/quant/fake_quant.hpp>
#include <quark/quant/granularity.hpp>
#include <quark/quant/quant_policy.hpp>
#include <quark/quant/quantize.hpp>
#include <quark/quant/range.hpp>
#include <quark/quant/tensor_qparams.hpp>
#include <quark/quant/tensor_view.hpp>
#include <quark/quant/two_stage.hpp>
#include <quark/scale/e8m0_scale.hpp>
#include <quark/scale/fixed_point_scale.hpp>
#include <quark/scale/float_scale.hpp>
#include <quark/scale/pow2_scale.hpp>
#include <quark/scale/qparams.hpp>
#include <quark/scale/qrange.hpp>
#include <quark/scale/traits.hpp>
#include <quark/version.hpp>
