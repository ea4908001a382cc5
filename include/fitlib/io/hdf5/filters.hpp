// SPDX-License-Identifier: MIT
// HDF5 filters (compression, shuffling, checksums): a dataset's pipeline, whether this HDF5 can apply each filter,
// where it looks for filter plugins, and the error that names a missing filter and its remedy.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "fitlib/io/hdf5/file.hpp"

namespace fitlib::io::hdf5 {

/// One filter of a dataset's filter pipeline (compression, shuffling, checksums).
struct FilterInfo {
  int id = 0;              ///< HDF5 filter id (1 = deflate, 32026 = Blosc2, ...)
  std::string name;        ///< the well-known name, or the name stored in the file
  bool available = false;  ///< whether this HDF5 can apply it (built in, registered, or found as a plugin)
};

namespace detail {

/// The name of a well-known HDF5 filter id, or "" if it is not one fitlib knows.
inline const char* filter_name(H5Z_filter_t id) {
  switch (id) {
    case 1: return "deflate (gzip)";
    case 2: return "shuffle";
    case 3: return "Fletcher32 checksum";
    case 4: return "szip";
    case 5: return "N-bit";
    case 6: return "scale-offset";
    case 307: return "bzip2";
    case 32001: return "Blosc";
    case 32004: return "LZ4";
    case 32008: return "bitshuffle";
    case 32013: return "zfp";
    case 32015: return "Zstd";
    case 32017: return "SZ";
    case 32026: return "Blosc2";
    default: return "";
  }
}

}  // namespace detail

/// The directories HDF5 searches for filter plugins, in order (initialised from HDF5_PLUGIN_PATH or the
/// library's default when HDF5 starts).
inline std::vector<std::string> plugin_search_path() {
  const ErrorSilencer quiet;
  unsigned n = 0;
  std::vector<std::string> dirs;
  if (H5PLsize(&n) < 0) return dirs;
  for (unsigned i = 0; i < n; ++i) {
    const ssize_t len = H5PLget(i, nullptr, 0);
    if (len < 0) continue;
    std::string dir(static_cast<std::size_t>(len) + 1, '\0');
    if (H5PLget(i, dir.data(), dir.size()) < 0) continue;
    dir.resize(static_cast<std::size_t>(len));
    dirs.push_back(std::move(dir));
  }
  return dirs;
}

namespace detail {

/// Whether `dir` is a directory HDF5 can search (false for a missing path or a file, without throwing).
inline bool is_plugin_directory(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec);
}

}  // namespace detail

/// Replaces the directories HDF5 searches for filter plugins. Unlike setting HDF5_PLUGIN_PATH, this works
/// after HDF5 has started (it reads the variable once). A plugin already loaded stays loaded. Entries that are
/// not directories are left out and returned, for the caller to report: HDF5 ends its whole search at the first
/// directory it cannot open, so one missing entry would hide the plugins of every directory after it.
inline std::vector<std::string> set_plugin_search_path(const std::vector<std::string>& dirs) {
  const ErrorSilencer quiet;
  unsigned n = 0;
  if (H5PLsize(&n) < 0) throw file_error("cannot query HDF5's plugin search path: " + detail::stack_message());
  for (; n > 0; --n)
    if (H5PLremove(0) < 0) throw file_error("cannot change HDF5's plugin search path: " + detail::stack_message());
  std::vector<std::string> skipped;
  for (const auto& d : dirs) {
    if (!detail::is_plugin_directory(d)) {
      skipped.push_back(d);
      continue;
    }
    if (H5PLappend(d.c_str()) < 0) throw file_error("cannot add '" + d + "' to HDF5's plugin search path: " + detail::stack_message());
  }
  return skipped;
}

/// The directories of the ':'-separated list `list` (empty entries dropped), in order, for set_plugin_search_path.
/// An entry that is not a directory is left out with a warning on `warn` that names it and `source` (the option or
/// environment variable that gave the list, e.g. "--hdf5PluginPath"); the other entries are kept.
inline std::vector<std::string> plugin_directories(std::string_view list, std::string_view source, std::ostream& warn) {
  std::vector<std::string> dirs;
  for (std::size_t b = 0; b <= list.size();) {
    const std::size_t e = std::min(list.find(':', b), list.size());
    if (e > b) {
      std::string d(list.substr(b, e - b));
      if (detail::is_plugin_directory(d))
        dirs.push_back(std::move(d));
      else
        warn << "warning: HDF5 plugin directory '" << d << "' (from " << source
             << ") does not exist or is not a directory; skipped, the other plugin directories are still searched\n";
    }
    b = e + 1;
  }
  return dirs;
}

/// Whether this HDF5 can apply filter `id` now (built in, registered, or loaded from the plugin search path).
inline bool filter_available(int id) {
  const ErrorSilencer quiet;
  const bool ok = H5Zfilter_avail(static_cast<H5Z_filter_t>(id)) > 0;
  H5Eclear2(H5E_DEFAULT);
  return ok;
}

namespace detail {

/// The filter pipeline of an open dataset, each filter with whether this HDF5 can apply it now (asking HDF5
/// loads a plugin from the plugin search path if one provides the filter).
inline std::vector<FilterInfo> pipeline(hid_t ds) {
  std::vector<FilterInfo> out;
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl) return out;
  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t ncd = 16;
    unsigned cd[16] = {};
    char stored_name[257] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, sizeof stored_name - 1, stored_name, &config);
    if (id < 0) continue;
    FilterInfo f;
    f.id = static_cast<int>(id);
    f.name = filter_name(id);
    if (f.name.empty()) f.name = stored_name[0] != '\0' ? std::string(stored_name) : std::string("unknown filter");
    f.available = H5Zfilter_avail(id) > 0;
    H5Eclear2(H5E_DEFAULT);
    out.push_back(std::move(f));
  }
  return out;
}

/// The first filter of a dataset's pipeline that this HDF5 cannot apply, as a `file_error` message naming
/// the dataset, the filter and the remedy, or "" when every filter is available. (Optional filters count
/// too: a chunk that was filtered needs the filter to be read.)
inline std::string missing_filters(const Location& loc, const std::string& name, hid_t ds) {
  for (const FilterInfo& f : pipeline(ds)) {
    if (f.available) continue;
    // HDF5 ends its search at the first directory it cannot open (set_plugin_search_path leaves such entries out,
    // but HDF5_PLUGIN_PATH or H5PLappend can put them in): say so, rather than list the rest as searched.
    std::string searched;
    bool stopped = false;
    for (const auto& d : plugin_search_path()) {
      searched += (searched.empty() ? "" : ", ") + d;
      if (stopped) {
        searched += " (not searched)";
      } else if (!is_plugin_directory(d)) {
        searched += " (not a directory: HDF5 ends its search there, so the directories after it were not searched; remove it from the path)";
        stopped = true;
      }
    }
    std::string msg = loc.describe("dataset", name) + " is compressed with HDF5 filter " + std::to_string(f.id) + " (" + f.name +
                      "), which this HDF5 library cannot decode: no plugin for it was found (searched: " +
                      (searched.empty() ? std::string("nothing") : searched) +
                      "). Install a filter plugin (`pip install hdf5plugin` has one) and give its directory to fitlib-fit "
                      "--hdf5PluginPath (or FITLIB_HDF5_PLUGIN_PATH; in a program, io::hdf5::set_plugin_search_path): "
                      "python3 -c 'import hdf5plugin; print(hdf5plugin.PLUGINS_PATH)' prints it";
    if (f.id == 32001) msg += "; on Debian, the package hdf5-filter-plugin-blosc-serial also provides the Blosc filter";
    return msg;
  }
  return "";
}

}  // namespace detail

/// The filter pipeline of the dataset `name` below `loc` (empty for an unfiltered dataset).
inline std::vector<FilterInfo> filters(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const Handle ds = detail::open_dataset(loc, name);
  return detail::pipeline(ds.get());
}

}  // namespace fitlib::io::hdf5
