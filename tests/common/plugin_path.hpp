// SPDX-License-Identifier: MIT
// A guard for HDF5's plugin search path, for the tests that point it at a plugin directory or at none.
#pragma once

#include <string>
#include <vector>

#include "fitlib/io/hdf5/filters.hpp"

namespace fitlib::test {

/// Puts HDF5's plugin search path back as it was when made, however the scope ends: the path belongs to the process,
/// so a test that threw with it changed would change what every later test can read. (A plugin HDF5 has loaded stays
/// loaded whatever the path.)
struct RestorePluginPath {
  std::vector<std::string> saved = io::hdf5::plugin_search_path();

  RestorePluginPath() = default;
  RestorePluginPath(const RestorePluginPath&) = delete;
  RestorePluginPath& operator=(const RestorePluginPath&) = delete;
  ~RestorePluginPath() {
    try {
      (void)io::hdf5::set_plugin_search_path(saved);
    } catch (...) {  // thrown while a test's exception unwinds, it would end the whole run
    }
  }
};

}  // namespace fitlib::test
