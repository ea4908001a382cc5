# SPDX-License-Identifier: MIT
# Compile checks of the programs a default build leaves out (benchmarks, examples that no test runs): every change
# must keep them compiling, but building them at -O3 would double what `make test` spends compiling.
include_guard(GLOBAL)
include(FitlibWarnings)

# fitlib_compile_check(<target> <source>...): an object library in the default build over the given sources, with
# fitlib's warnings as errors. With GCC or Clang it runs the front end only (cmake/fitlib-syntax-only.sh): a
# program that no longer compiles fails the build, at a third of the cost of building it. The caller links it to
# what the programs link to, and puts per-program definitions on the source files, so that both see them.
function(fitlib_compile_check target)
  add_library(${target} OBJECT ${ARGN})
  fitlib_target_warnings(${target})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set_target_properties(${target} PROPERTIES CXX_COMPILER_LAUNCHER "${PROJECT_SOURCE_DIR}/cmake/fitlib-syntax-only.sh")
  endif()
endfunction()
