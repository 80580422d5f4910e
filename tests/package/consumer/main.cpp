// SPDX-License-Identifier: MIT
// A consumer of the installed package: returns 0 only if the library computes correctly.
#include <quark/quark.hpp>
#ifdef QUARK_CONSUMER_FRONTEND
#include <quark/onnx/version.hpp>
#endif

int main() {
  const auto q = quark::convert<quark::float8_e4m3fn, quark::policies::onnx_saturate>(1000.0f);
  if (quark::to_float(q) != 448.0f)
    return 1;
#ifdef QUARK_CONSUMER_FRONTEND
  if (quark::onnx::frontend_version() == nullptr)
    return 2;
#endif
  return 0;
}
