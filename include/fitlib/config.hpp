// SPDX-License-Identifier: MIT
// Portability macros, so the same headers compile under g++, clang++ and nvcc.
#pragma once

/// Marks a function callable from host and device code when compiled by nvcc; empty otherwise.
#if defined(__CUDACC__)
#define FITLIB_HOST_DEVICE __host__ __device__
#else
#define FITLIB_HOST_DEVICE
#endif

/// Promises the compiler that a pointer is the only way to reach its data in its scope.
#if defined(_MSC_VER) && !defined(__clang__)
#define FITLIB_RESTRICT __restrict
#else
#define FITLIB_RESTRICT __restrict__
#endif

/// Forces inlining of small hot functions; includes `inline`, so use it in place of that keyword.
#if defined(__CUDACC__)
#define FITLIB_ALWAYS_INLINE __forceinline__
#elif defined(_MSC_VER) && !defined(__clang__)
#define FITLIB_ALWAYS_INLINE __forceinline
#else
#define FITLIB_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

/// fitlib::prebuilt (prebuilt.hpp) compiles some non-template functions once: their definitions sit in
/// `#if FITLIB_DEFINITIONS` sections, marked FITLIB_PREBUILT_INLINE. In the one source of the library that defines
/// FITLIB_PREBUILT_SOURCE they are defined out of line; in every other translation unit that defines
/// FITLIB_PREBUILT (the library's consumers, and its other sources) they are left out; header-only, they are inline.
#if defined(FITLIB_PREBUILT_SOURCE)
#define FITLIB_DEFINITIONS 1
#define FITLIB_PREBUILT_INLINE
#elif defined(FITLIB_PREBUILT)
#define FITLIB_DEFINITIONS 0
#else
#define FITLIB_DEFINITIONS 1
#define FITLIB_PREBUILT_INLINE inline
#endif
