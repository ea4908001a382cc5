// SPDX-License-Identifier: MIT
// Writes the demo analysis (demo_analysis.hpp) as a rabbit input tensor: examples/data/demo_analysis.hdf5,
// the file `make demo` fits with fitlib-fit. Usage: write_demo_tensor OUTPUT.hdf5
#include <cstdio>

#include "demo_analysis.hpp"
#include "fitlib/io/rabbit_writer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.hdf5\n", argv[0]);
    return 2;
  }
  fitlib::io::write_rabbit(argv[1], fitlib::examples::demo_analysis());
  std::printf("wrote %s\n", argv[1]);
  return 0;
}
