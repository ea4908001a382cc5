// SPDX-License-Identifier: MIT
// libFuzzer target: read_rabbit on arbitrary bytes (an in-memory HDF5 file) must succeed or throw fitlib::error.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>

#include "fitlib/io/rabbit.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // No filter plugins: a mutated filter id must not pull third-party code (e.g. Debian's Blosc plugin) into the run.
  H5PLset_loading_state(0);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    // A read limit well below libFuzzer's RSS limit: a mutated extent must become a file_error, not an allocation.
    const auto file = fitlib::io::hdf5::File::open_image(std::as_bytes(std::span(data, size)), "fuzz input", {.max_read_bytes = 64 << 20});
    const fitlib::io::RabbitTensor t = fitlib::io::read_rabbit(file);
    t.model.validate();
  } catch (const fitlib::error&) {
    // the expected way to reject a bad file
  } catch (const std::exception& e) {
    std::fprintf(stderr, "read_rabbit threw a non-fitlib exception: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "read_rabbit threw a non-standard exception\n");
    std::abort();
  }
  return 0;
}
