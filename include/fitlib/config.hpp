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
