// SPDX-License-Identifier: MIT
// fitlib's version; CMake reads the three numbers below, so the build and the headers never disagree.
#pragma once

#include <string_view>

#define FITLIB_VERSION_MAJOR 0
#define FITLIB_VERSION_MINOR 1
#define FITLIB_VERSION_PATCH 0

#define FITLIB_DETAIL_STRINGIFY_IMPL(x) #x
#define FITLIB_DETAIL_STRINGIFY(x) FITLIB_DETAIL_STRINGIFY_IMPL(x)

/// The version as one comparable integer: major * 10000 + minor * 100 + patch.
#define FITLIB_VERSION (FITLIB_VERSION_MAJOR * 10000 + FITLIB_VERSION_MINOR * 100 + FITLIB_VERSION_PATCH)

/// The version as a string literal, "major.minor.patch".
#define FITLIB_VERSION_STRING                                              \
  FITLIB_DETAIL_STRINGIFY(FITLIB_VERSION_MAJOR)                            \
  "." FITLIB_DETAIL_STRINGIFY(FITLIB_VERSION_MINOR) "." FITLIB_DETAIL_STRINGIFY(FITLIB_VERSION_PATCH)

namespace fitlib {

inline constexpr int version_major = FITLIB_VERSION_MAJOR;
inline constexpr int version_minor = FITLIB_VERSION_MINOR;
inline constexpr int version_patch = FITLIB_VERSION_PATCH;

/// The version of the headers in use, "major.minor.patch".
[[nodiscard]] constexpr std::string_view version_string() noexcept { return FITLIB_VERSION_STRING; }

}  // namespace fitlib
