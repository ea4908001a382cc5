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
    // No read limit below the machine's memory: what must turn a mutated extent into a file_error is the bound on what
    // a dataset may declare beyond what it stores, here at the example tensors' own compression (64, above their 43),
    // so that a read of an input of at most -max_len bytes allocates at most 64 × 8 times that (an int8 dataset read
    // as int64), below run_fuzzer.sh's -malloc_limit_mb: a larger allocation is reported as a failure.
    const auto file = fitlib::io::hdf5::File::open_image(std::as_bytes(std::span(data, size)), "fuzz input", {.max_compression_ratio = 64});
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
