// SPDX-License-Identifier: MIT
// AdaRound and AdaQuant learn integer codes: a float storage type (FP8 here) is refused by the
// integral_data_type constraint.
#include <cstdint>

#include <quark/algo/adaquant.hpp>
#include <quark/algo/adaround.hpp>
#include <quark/dtype/formats.hpp>

int main() {
#ifdef QUARK_SHOULD_FAIL
  using D = quark::float8_e4m3fn;
#else
  using D = std::int8_t;
#endif
  const float w[2] = {0.1f, 0.2f};
  const float s = 0.1f;
  quark::tensor_qparams<D> p{std::span(&s, 1)};
  quark::adaround<D> ar(quark::tensor_shape{2}, w, p);
  quark::adaquant<D> aq(quark::tensor_shape{2}, w, p);
  (void)ar;
  (void)aq;
}
