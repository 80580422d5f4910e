# Strict warnings for our own compiled targets only (never on the quark INTERFACE target).
set(QUARK_WARNING_FLAGS
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wdouble-promotion
  -Wold-style-cast)
if(QUARK_WARNINGS_AS_ERRORS)
  list(APPEND QUARK_WARNING_FLAGS -Werror)
endif()
# No fused multiply-add contraction in our own targets: quark's numerics are specified without
# fusion, and GCC 12 contracts a*b+c into an FMA even in ISO C++ mode when the target has FMA
# (-march=native, x86-64-v3): a search's sum of squares then rounds differently (session 30: one
# MSE scale one ulp off). Explicit FMA intrinsics (Eigen's packets, our AVX-512 kernels) are
# unaffected. Users of the headers who want the same bits with FMA targets pass it too (README).
set(QUARK_NUMERIC_FLAGS)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  set(QUARK_NUMERIC_FLAGS -ffp-contract=off)
endif()
add_library(quark_warnings INTERFACE)
target_compile_options(quark_warnings INTERFACE ${QUARK_WARNING_FLAGS} ${QUARK_NUMERIC_FLAGS})
