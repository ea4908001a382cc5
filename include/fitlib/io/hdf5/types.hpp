// SPDX-License-Identifier: MIT
// What the HDF5 readers and writers share: the memory type of double and int64, names of type classes and shapes
// for messages, and a dataspace's extent.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fitlib/io/hdf5/handle.hpp"

namespace fitlib::io::hdf5::detail {

/// One variable-length sequence as HDF5 reads and writes it, hvl_t's layout under a name of its own: nvcc's front
/// end (CUDA 13) fails on std::vector of hvl_t, a typedef of an unnamed struct, so that no CUDA translation unit
/// could include these headers (fitlib-fit's --device cuda).
struct VlenSequence {
  std::size_t len = 0;
  void* p = nullptr;
};
static_assert(sizeof(VlenSequence) == sizeof(hvl_t) && offsetof(VlenSequence, len) == offsetof(hvl_t, len) &&
              offsetof(VlenSequence, p) == offsetof(hvl_t, p));

inline std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating point";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ARRAY: return "array";
    default: return "unknown";
  }
}

/// Number of elements of a dataspace and its dimensions (scalar: no dims, 1 element; null: no elements).
inline std::pair<std::size_t, std::vector<std::size_t>> extent(hid_t space, const std::string& what) {
  const H5S_class_t cls = H5Sget_simple_extent_type(space);
  if (cls == H5S_SCALAR) return {1, {}};
  if (cls == H5S_NULL) return {0, {0}};
  const int rank = H5Sget_simple_extent_ndims(space);
  if (cls != H5S_SIMPLE || rank < 0 || rank > H5S_MAX_RANK) throw file_error(what + " has an unreadable dataspace: " + stack_message());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0)
    throw file_error(what + " has an unreadable dataspace: " + stack_message());
  std::vector<std::size_t> shape;
  std::size_t n = 1;
  for (hsize_t d : dims) {
    if (d > std::numeric_limits<std::size_t>::max() || (d != 0 && n > std::numeric_limits<std::size_t>::max() / d))
      throw file_error(what + " declares more elements than can be addressed; the file is corrupt");
    shape.push_back(static_cast<std::size_t>(d));
    n *= static_cast<std::size_t>(d);
  }
  return {n, shape};
}

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else
    return H5T_NATIVE_INT64;
}

}  // namespace fitlib::io::hdf5::detail
