# SPDX-License-Identifier: MIT
# Compile checks: the public headers one by one (each must be self-contained), and the programs a default build
# leaves out (benchmarks, examples that no test runs), which every change must keep compiling without `make test`
# paying for building them at -O3.
include_guard(GLOBAL)
include(FitlibWarnings)

# fitlib_compile_check(<target> <source>...): an object library in the default build over the given sources, with
# fitlib's warnings as errors. With GCC or Clang it runs the front end only (cmake/fitlib-syntax-only.sh): a
# source that no longer compiles fails the build, at about a third of the cost of building it. The caller links it to
# what the programs link to, and puts per-program definitions on the source files, so that both see them.
function(fitlib_compile_check target)
  add_library(${target} OBJECT ${ARGN})
  fitlib_target_warnings(${target})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set_target_properties(${target} PROPERTIES CXX_COMPILER_LAUNCHER "${PROJECT_SOURCE_DIR}/cmake/fitlib-syntax-only.sh")
  endif()
endfunction()
