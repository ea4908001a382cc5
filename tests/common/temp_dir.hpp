// SPDX-License-Identifier: MIT
// A scratch directory for tests that write files.
#pragma once

#include <filesystem>
#include <random>
#include <string>

namespace fitlib::test {

/// A fresh directory under the system's temporary directory, removed with its contents at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "fitlib_test_") {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace fitlib::test
