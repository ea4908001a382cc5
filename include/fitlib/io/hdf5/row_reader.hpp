// SPDX-License-Identifier: MIT
// `RowReader`: ranges of rows of a numeric dataset, each one hyperslab read, without reading the rest.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fitlib/io/hdf5/read.hpp"

namespace fitlib::io::hdf5 {

namespace detail {

/// Selects the elements [lo, hi) (lo < hi) of a row-major dataspace `space` of dimensions `dims`, within the block
/// whose leading coordinates are `at[0..d)`: a partial first index of dimension d (recursively), whole indices,
/// and a partial last index (recursively), so at most 2·rank − 1 hyperslabs. `first`: the next hyperslab replaces
/// the selection instead of joining it. Returns a negative value where HDF5 fails.
inline herr_t select_flat(hid_t space, const std::vector<hsize_t>& dims, std::vector<hsize_t>& at, std::size_t d, hsize_t lo, hsize_t hi,
                          bool& first) {
  hsize_t inner = 1;  // elements per index of dimension d
  for (std::size_t e = d + 1; e < dims.size(); ++e) inner *= dims[e];
  hsize_t i = lo / inner;
  if (lo % inner != 0) {  // the partial first index
    const hsize_t end = std::min(hi, (i + 1) * inner);
    at[d] = i;
    if (select_flat(space, dims, at, d + 1, lo % inner, end - i * inner, first) < 0) return -1;
    lo = end;
    ++i;
  }
  if (const hsize_t whole = (hi - lo) / inner; lo < hi && whole > 0) {
    std::vector<hsize_t> start(dims.size(), 0), count(dims);
    for (std::size_t e = 0; e < d; ++e) {
      start[e] = at[e];
      count[e] = 1;
    }
    start[d] = i;
    count[d] = whole;
    if (H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr) < 0) return -1;
    first = false;
    lo += whole * inner;
    i += whole;
  }
  if (lo < hi) {  // the partial last index
    at[d] = i;
    return select_flat(space, dims, at, d + 1, 0, hi - lo, first);
  }
  return 0;
}

/// Selects the elements [lo, hi) (lo < hi), in row-major order, of the dataspace `space` of dimensions `dims`
/// (a scalar dataspace has none). One hyperslab for the usual cases: a flat dataset (rabbit's writeFlatInChunks,
/// §1.2), or whole rows of the stored shape.
inline herr_t select_flat(hid_t space, const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi) {
  if (dims.empty()) return H5Sselect_all(space);
  std::vector<hsize_t> at(dims.size(), 0);
  bool first = true;
  return select_flat(space, dims, at, 0, lo, hi, first);
}

}  // namespace detail

/// A numeric dataset opened for reading ranges of rows, the indices of its logical leading dimension, without
/// reading the rest: e.g. one MPI rank's bins of rabbit's `hlogk` (rabbit-likelihood-and-format.md §1.2–1.3).
/// Opening checks what `read_doubles` / `read_int64s` check except the size of the whole (type class, stored type,
/// storage, filters, `original_shape`); each `read` is one HDF5 hyperslab read, and checks its own size against the
/// read limit. Rows of the logical shape are a contiguous run of the row-major elements, so a dataset stored flat
/// with its shape in `original_shape` (rabbit's writeFlatInChunks) is read as a 1-D hyperslab. The reader refers to
/// `loc`, which must outlive it. Move-only; errors are `file_error`s naming the dataset and the rows.
template <class T>
class RowReader {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>, "RowReader reads double or int64 arrays");

 public:
  /// Opens the dataset `name` below `loc`. As `read_doubles`, integers convert to double only if `accept_integers`
  /// (ignored for int64, which takes any integer type and rejects floating point).
  RowReader(const Location& loc, std::string name, bool accept_integers = false) : loc_(&loc), name_(std::move(name)) {
    const ErrorSilencer quiet;
    d_ = detail::open_numeric<T>(loc, name_, accept_integers, false);
    if (d_.shape.empty()) throw file_error(d_.what + " holds a single value (a scalar), not rows; the file's layout is not the expected one");
    row_size_ = 1;
    for (std::size_t e = 1; e < d_.shape.size(); ++e) row_size_ *= d_.shape[e];
  }

  /// The logical shape (`original_shape` if present, else the dataspace's), known without reading.
  const std::vector<std::size_t>& shape() const { return d_.shape; }
  /// Extent of the leading dimension.
  std::size_t rows() const { return d_.shape[0]; }
  /// Elements per row (the product of the other extents).
  std::size_t row_size() const { return row_size_; }

  /// Rows [row0, row0 + nrows), shaped `[nrows, rest of the shape...]`.
  Array<T> read(std::size_t row0, std::size_t nrows) const {
    const ErrorSilencer quiet;
    if (row0 > rows() || nrows > rows() - row0)
      throw file_error("cannot read rows [" + std::to_string(row0) + ", " + std::to_string(row0 + nrows) + ") of " +
                       d_.what + ": its logical shape " + detail::shape_string(d_.shape) + " has " + std::to_string(rows()) +
                       " rows; the file does not match the sizes its other datasets give");
    const std::string part = "rows [" + std::to_string(row0) + ", " + std::to_string(row0 + nrows) + ") of ";
    Array<T> out;
    out.shape = d_.shape;
    out.shape[0] = nrows;
    const std::size_t count = nrows * row_size_;  // at most the stored element count
    if (count == 0) return out;
    detail::require_fits(*loc_, part + d_.what, count, sizeof(T));
    Handle file_space(H5Dget_space(d_.ds.get()), H5Sclose);
    const std::vector<hsize_t> dims(d_.dims.begin(), d_.dims.end());
    const auto lo = static_cast<hsize_t>(row0 * row_size_);
    if (!file_space || detail::select_flat(file_space.get(), dims, lo, lo + static_cast<hsize_t>(count)) < 0)
      throw file_error("cannot select " + part + d_.what + ": " + detail::stack_message());
    const auto mem_dim = static_cast<hsize_t>(count);
    Handle mem_space(H5Screate_simple(1, &mem_dim, nullptr), H5Sclose);
    if (!mem_space) throw file_error("cannot read " + part + d_.what + ": " + detail::stack_message());
    out.values = detail::allocate<T>(count, part + d_.what);
    detail::read_selection(*loc_, name_, d_.ds.get(), detail::native_type<T>(), mem_space.get(), file_space.get(), out.values.data(), part);
    return out;
  }

  /// Column `col` of rows [row0, row0 + nrows) of a dataset whose logical shape is 2-D, e.g. the cell positions of
  /// rabbit's `[nnz × 2]` hlogk_sparse/indices (§1.3). Reads those rows whole.
  std::vector<T> column(std::size_t col, std::size_t row0, std::size_t nrows) const {
    if (d_.shape.size() != 2 || col >= d_.shape[1])
      throw file_error(d_.what + " has logical shape " + detail::shape_string(d_.shape) + ", which has no column " + std::to_string(col) +
                       " (a 2-D shape was expected); the file's layout is not the expected one");
    const Array<T> rows_read = read(row0, nrows);
    std::vector<T> out(nrows);
    for (std::size_t r = 0; r < nrows; ++r) out[r] = rows_read.values[r * row_size_ + col];
    return out;
  }

 private:
  const Location* loc_;
  std::string name_;
  detail::NumericDataset d_;
  std::size_t row_size_ = 1;
};

}  // namespace fitlib::io::hdf5
