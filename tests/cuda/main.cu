// SPDX-License-Identifier: MIT
// The CUDA tests' runner: Catch2's session where a CUDA device is present; exit code 77 (CTest's "skipped")
// where none is, so that `make test` on a machine without a GPU compiles them and says they did not run.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <string_view>

#include "fitlib/cuda/runtime.cuh"

int main(int argc, char** argv) {
  bool listing = false;  // --list-tests and the like need no device
  for (int i = 1; i < argc; ++i) listing = listing || std::string_view(argv[i]).starts_with("--list");
  if (!listing && fitlib::cuda::device_count() == 0) {
    std::puts("no CUDA device (or no NVIDIA driver) in this process: the CUDA tests did not run (scripts/gpu-check.sh runs them on a GPU)");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
