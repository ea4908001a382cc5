# SPDX-License-Identifier: MIT
# Warning and tuning flags for fitlib's own targets (tests, benchmarks, examples), never for consumers.
include_guard(GLOBAL)

# Warnings are errors in fitlib's code; dependencies (Eigen, Catch2, benchmark) arrive as
# imported targets, so their headers are -isystem and do not count. PORTABLE: never -march=native
# (fitlib::prebuilt and its bits test: include/fitlib/prebuilt.hpp says why).
function(fitlib_target_warnings target)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "PORTABLE" "" "")
  if(MSVC)
    target_compile_options(${target} PRIVATE /W4 /WX /permissive-)
  else()
    # C++ sources only: a target with CUDA sources too (fitlib-fit) gets nvcc's below.
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Werror>")
    # GCC < 13 reports its own AVX-512 intrinsics (_mm512_undefined_pd's self-initialisation,
    # GCC bug 105593) as (maybe-)uninitialized wherever Eigen inlines them: a false positive.
    # clang builds keep both warnings.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized;-Wno-uninitialized>")
      # GCC 12 also flags `"literal" + std::string` at -O3 as an overlapping memcpy (GCC bug 105329).
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>")
    endif()
  endif()
  if(FITLIB_NATIVE AND NOT _arg_PORTABLE AND NOT MSVC)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-march=native>")
  endif()
endfunction()

# nvcc: the EDG front end's warnings and the host compiler's both become errors.
# --expt-relaxed-constexpr lets Eigen's constexpr host functions be called from device code.
function(fitlib_target_cuda_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
endfunction()
