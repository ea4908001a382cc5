// SPDX-License-Identifier: MIT
// Scalar and index types, and the column-major block views that cross every interface.
#pragma once

#include <cassert>
#include <cstddef>
#include <type_traits>

namespace fitlib {

/// Signed index type for sizes and positions (matches Eigen's default index).
using index_t = std::ptrdiff_t;

/// A size chosen at run time rather than compile time (as Eigen's `Dynamic`), e.g. `ReplicaBatch<dynamic>`.
inline constexpr index_t dynamic = -1;

/// A non-owning view of a column-major matrix block: `rows × cols`, column `j` starts at
/// `data + j·ld`. Parameter blocks `X[nparams × N]` and all partials travel as these, so the
/// shard interface never exposes Eigen (or device) types.
template <class T>
struct BlockView {
  T* data = nullptr;
  index_t rows = 0;
  index_t cols = 0;
  index_t ld = 0;  ///< leading dimension (distance between columns), ≥ rows

  constexpr BlockView() = default;
  constexpr BlockView(T* d, index_t r, index_t c) : data(d), rows(r), cols(c), ld(r) {}
  constexpr BlockView(T* d, index_t r, index_t c, index_t l) : data(d), rows(r), cols(c), ld(l) {}
  /// A mutable view converts to a const one.
  template <class U>
    requires(std::is_same_v<std::add_const_t<U>, T> && !std::is_same_v<U, T>)
  constexpr BlockView(const BlockView<U>& o) : data(o.data), rows(o.rows), cols(o.cols), ld(o.ld) {}

  constexpr T& operator()(index_t i, index_t j) const {
    assert(i >= 0 && i < rows && j >= 0 && j < cols);
    return data[i + j * ld];
  }
  constexpr T* col(index_t j) const { return data + j * ld; }
  /// Columns `[j0, j0 + n)` as a view.
  constexpr BlockView block_cols(index_t j0, index_t n) const { return {data + j0 * ld, rows, n, ld}; }
  constexpr bool empty() const { return rows == 0 || cols == 0; }
};

template <class T>
using ConstBlockView = BlockView<const T>;

/// Bins `[begin, end)` in the model's global bin order.
struct BinRange {
  index_t begin = 0;
  index_t end = 0;
  index_t size() const { return end - begin; }
  friend bool operator==(const BinRange&, const BinRange&) = default;
};

}  // namespace fitlib
