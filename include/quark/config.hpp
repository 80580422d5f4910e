// SPDX-License-Identifier: MIT
// Configuration macros: assertions, the exception switch and forced inlining. Each can be
// redefined by the user before the first quark include (as Eigen's eigen_assert and nlohmann's
// JSON_THROW can).
#pragma once

#include <cstdlib>

#ifndef QUARK_ASSERT
#ifdef NDEBUG
#define QUARK_ASSERT(cond, msg) static_cast<void>(0)
#else
#include <cstdio>
/// Internal invariant check: on in Debug builds, off in Release builds.
#define QUARK_ASSERT(cond, msg)                                                                   \
  ((cond) ? static_cast<void>(0)                                                                  \
          : (std::fprintf(stderr, "%s:%d: quark assertion '%s' failed: %s\n", __FILE__, __LINE__, \
                          #cond, msg),                                                            \
             std::abort()))
#endif
#endif

#ifndef QUARK_THROW
#ifdef QUARK_NO_EXCEPTIONS
#define QUARK_THROW(exception) std::abort()
#else
#define QUARK_THROW(exception) throw exception
#endif
#endif

// Forced inlining of the hot kernels. A speed hint only: define QUARK_ALWAYS_INLINE as `inline`
// to build faster where speed does not matter (the dev and sanitizer presets do).
#ifndef QUARK_ALWAYS_INLINE
#if defined(__GNUC__) || defined(__clang__)
#define QUARK_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define QUARK_ALWAYS_INLINE inline
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define QUARK_RESTRICT __restrict__
#else
#define QUARK_RESTRICT
#endif
