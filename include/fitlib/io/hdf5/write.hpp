// SPDX-License-Identifier: MIT
// Writing: groups, double and int64 datasets of any shape (chunked and gzip-compressed when large), strings, ragged
// integer arrays and attributes; an existing dataset or attribute of the same name is replaced.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fitlib/io/hdf5/file.hpp"
#include "fitlib/io/hdf5/types.hpp"

namespace fitlib::io::hdf5 {

namespace detail {

/// Chunk dimensions of about `target` elements, filling the trailing dimensions first.
inline std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t target) {
  std::vector<hsize_t> chunk(dims.size(), 1);
  std::size_t remaining = std::max<std::size_t>(target, 1);
  for (std::size_t i = dims.size(); i-- > 0;) {
    chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(dims[i], remaining));
    remaining = std::max<std::size_t>(1, remaining / static_cast<std::size_t>(chunk[i]));
  }
  return chunk;
}

/// A dataset creation property list: contiguous for small data, chunked with gzip level 4 above 64 KiB.
inline Handle creation_plist(const std::vector<hsize_t>& dims, std::size_t elem_bytes, bool compress) {
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  std::size_t n = 1;
  for (hsize_t d : dims) n *= static_cast<std::size_t>(d);
  if (compress && !dims.empty() && n > 0 && n * elem_bytes >= (std::size_t{64} << 10)) {
    const auto chunk = chunk_dims(dims, (std::size_t{1} << 20) / elem_bytes);
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) H5Pset_deflate(dcpl.get(), 4);
  }
  return dcpl;
}

/// Replaces or creates a dataset `name` below `loc` with the given type and dims, writing `buf`.
inline Location create_and_write(const Location& loc, const std::string& name, hid_t file_type, hid_t mem_type,
                                 const std::vector<hsize_t>& dims, std::size_t elem_bytes, const void* buf) {
  const ErrorSilencer quiet;
  const std::string what = loc.describe("dataset", name);
  if (exists(loc, name) && H5Ldelete(loc.id(), name.c_str(), H5P_DEFAULT) < 0)
    throw file_error("cannot replace " + what + ": " + stack_message());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!space) throw file_error("cannot create the dataspace of " + what + ": " + stack_message());
  const Handle dcpl = creation_plist(dims, elem_bytes, loc.compress());
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle ds(H5Dcreate2(loc.id(), name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!ds) throw file_error("cannot create " + what + " (" + stack_message() + "); is the file open for writing?");
  std::size_t n = 1;
  for (hsize_t d : dims) n *= static_cast<std::size_t>(d);
  if (n > 0 && H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    throw file_error("cannot write " + what + ": " + stack_message());
  return Location(std::move(ds), loc, join_path(loc.path(), name));
}

/// Creates (replacing) the attribute `name` of `loc` with the given type and dims, writing `buf`.
inline void put_attribute(const Location& loc, const std::string& name, hid_t type, const std::vector<hsize_t>& dims, const void* buf) {
  const ErrorSilencer quiet;
  const std::string what = "attribute '" + name + "' of '" + loc.path() + "' in '" + loc.file_name() + "'";
  if (H5Aexists(loc.id(), name.c_str()) > 0 && H5Adelete(loc.id(), name.c_str()) < 0)
    throw file_error("cannot replace " + what + ": " + stack_message());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle a(space ? H5Acreate2(loc.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID, H5Aclose);
  if (!a) throw file_error("cannot create " + what + " (" + stack_message() + "); is the file open for writing?");
  bool empty = false;
  for (hsize_t d : dims) empty = empty || d == 0;
  if (!empty && H5Awrite(a.get(), type, buf) < 0) throw file_error("cannot write " + what + ": " + stack_message());
}

inline Handle utf8_string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace detail

/// Creates the group `name` below `loc` (intermediate groups too); throws `file_error` if it exists.
inline Location create_group(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (exists(loc, name)) throw file_error(loc.describe("object", name) + " already exists; write each group once");
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle g(H5Gcreate2(loc.id(), name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g) throw file_error("cannot create " + loc.describe("group", name) + " (" + detail::stack_message() + "); is the file open for writing?");
  return Location(std::move(g), loc, detail::join_path(loc.path(), name));
}

/// Removes the link `name` below `loc` (a dataset or group; the space is not reclaimed).
inline void remove(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (H5Ldelete(loc.id(), name.c_str(), H5P_DEFAULT) < 0)
    throw file_error("cannot remove " + loc.describe("object", name) + ": " + detail::stack_message());
}

/// Removes the attribute `name` of `loc`.
inline void remove_attribute(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (H5Adelete(loc.id(), name.c_str()) < 0)
    throw file_error("cannot remove attribute '" + name + "' of '" + loc.path() + "' in '" + loc.file_name() + "': " + detail::stack_message());
}

/// Writes a double or int64 array as the dataset `name` (replacing one that exists) with its real N-D `shape`
/// (row-major; `{}` = a scalar; zero extents allowed); chunked and gzip-compressed (level 4) above 64 KiB.
/// Returns the dataset, e.g. to attach attributes.
template <class T>
Location write(const Location& loc, const std::string& name, std::span<const T> values, std::vector<std::size_t> shape) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>, "write stores double or int64 arrays");
  std::size_t n = 1;
  std::vector<hsize_t> dims;
  for (std::size_t d : shape) {
    n *= d;
    dims.push_back(static_cast<hsize_t>(d));
  }
  if (n != values.size())
    throw usage_error("hdf5::write of '" + loc.child_path(name) + "': shape " + detail::shape_string(shape) + " has " + std::to_string(n) +
                      " elements but " + std::to_string(values.size()) + " values were given");
  return detail::create_and_write(loc, name, detail::native_type<T>(), detail::native_type<T>(), dims, sizeof(T), values.data());
}

/// Writes a 1-D double array (`write` with shape `{values.size()}`).
inline Location write(const Location& loc, const std::string& name, std::span<const double> values) {
  return write<double>(loc, name, values, {values.size()});
}
/// Writes a double array with the given N-D shape.
inline Location write(const Location& loc, const std::string& name, std::span<const double> values, std::vector<std::size_t> shape) {
  return write<double>(loc, name, values, std::move(shape));
}
/// Writes a 1-D int64 array.
inline Location write(const Location& loc, const std::string& name, std::span<const std::int64_t> values) {
  return write<std::int64_t>(loc, name, values, {values.size()});
}
/// Writes an int64 array with the given N-D shape.
inline Location write(const Location& loc, const std::string& name, std::span<const std::int64_t> values, std::vector<std::size_t> shape) {
  return write<std::int64_t>(loc, name, values, std::move(shape));
}

/// Writes strings as a 1-D variable-length UTF-8 string dataset (replacing one that exists).
inline Location write_strings(const Location& loc, const std::string& name, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& s : values) ptrs.push_back(s.c_str());
  const Handle type = detail::utf8_string_type();
  return detail::create_and_write(loc, name, type.get(), type.get(), {static_cast<hsize_t>(values.size())}, sizeof(char*), ptrs.data());
}

/// Writes ragged int64 rows as a 1-D dataset of variable-length sequences (rabbit's hsystgroupidxs layout).
inline Location write_ragged(const Location& loc, const std::string& name, const std::vector<std::vector<std::int64_t>>& rows) {
  std::vector<detail::VlenSequence> vl(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    vl[i].len = rows[i].size();
    vl[i].p = const_cast<std::int64_t*>(rows[i].data());
  }
  const ErrorSilencer quiet;
  Handle type(H5Tvlen_create(H5T_NATIVE_INT64), H5Tclose);
  return detail::create_and_write(loc, name, type.get(), type.get(), {static_cast<hsize_t>(rows.size())}, sizeof(detail::VlenSequence), vl.data());
}

/// Writes (replacing) a scalar double attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, double value) {
  detail::put_attribute(loc, name, H5T_NATIVE_DOUBLE, {}, &value);
}
/// Writes (replacing) a scalar int64 attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, std::int64_t value) {
  detail::put_attribute(loc, name, H5T_NATIVE_INT64, {}, &value);
}
/// Writes (replacing) a scalar int64 attribute of `loc` from any other integer type.
template <std::integral I>
  requires(!std::same_as<I, bool> && !std::same_as<I, std::int64_t>)
void write_attribute(const Location& loc, const std::string& name, I value) {
  write_attribute(loc, name, static_cast<std::int64_t>(value));
}
/// Writes (replacing) a variable-length UTF-8 string attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, const std::string& value) {
  const ErrorSilencer quiet;
  const Handle type = detail::utf8_string_type();
  const char* p = value.c_str();
  detail::put_attribute(loc, name, type.get(), {}, &p);
}
/// Writes (replacing) a string attribute of `loc` from a C string.
inline void write_attribute(const Location& loc, const std::string& name, const char* value) {
  write_attribute(loc, name, std::string(value));
}
/// Writes (replacing) a 1-D int64 array attribute of `loc` (e.g. rabbit's original_shape, dense_shape).
inline void write_attribute(const Location& loc, const std::string& name, std::span<const std::int64_t> values) {
  detail::put_attribute(loc, name, H5T_NATIVE_INT64, {static_cast<hsize_t>(values.size())}, values.data());
}
/// Writes (replacing) a 1-D double array attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, std::span<const double> values) {
  detail::put_attribute(loc, name, H5T_NATIVE_DOUBLE, {static_cast<hsize_t>(values.size())}, values.data());
}

}  // namespace fitlib::io::hdf5
