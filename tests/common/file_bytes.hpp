// SPDX-License-Identifier: MIT
// A file's bytes read or written whole, for the tests (and fuzz/mutation_search.cpp) that cut, flip or compare files.
#pragma once

#include <cstddef>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace fitlib::test {

/// The bytes of the file at `path`, as a std::vector<char> or (for comparisons with text) a std::string. Throws naming
/// the path where it cannot be opened, so that a missing file fails where it is read, not as a mismatch later.
template <class Bytes = std::vector<char>>
Bytes file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("file_bytes: cannot open '" + path + "' for reading; check the path (a file under tests/data, or one the test wrote)");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The file at `path` as text.
inline std::string file_text(const std::string& path) { return file_bytes<std::string>(path); }

/// Replaces the file at `path` by `bytes`. Throws naming the path where that fails, so that a test never goes on to
/// read a file it did not write.
inline void write_bytes(const std::string& path, std::span<const char> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    throw std::runtime_error("write_bytes: cannot write " + std::to_string(bytes.size()) + " bytes to '" + path + "'; does its directory exist?");
}

/// A string literal would be written with its terminating NUL: pass {literal, length} instead.
template <std::size_t N>
void write_bytes(const std::string&, const char (&)[N]) = delete;

}  // namespace fitlib::test
