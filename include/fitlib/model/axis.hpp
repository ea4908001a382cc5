// SPDX-License-Identifier: MIT
// One axis of a channel's histogram, as hist / boost-histogram describe it (rabbit's channel_info).
#pragma once

#include <string>
#include <vector>

#include "fitlib/core/types.hpp"

namespace fitlib {

/// One axis of a channel's histogram: what a plot needs to draw it and to give the channel's bins their shape. The
/// kinds are hist's (and boost-histogram's) axis classes; rabbit's TensorWriter records them in its `meta` pickle
/// (rabbit-likelihood-and-format.md §1.7), and io::read_rabbit reads them from there.
struct Axis {
  enum class Kind { regular, variable, integer, boolean, str_category, int_category };

  Kind kind = Kind::integer;
  std::string name;
  std::string label;  ///< as stored: empty when the writer gave none (hist then shows the name)
  /// The size()+1 bin edges, ascending (regular, variable, integer, boolean). A transformed regular axis has them
  /// in the variable itself, as hist's `edges` gives them: equal steps in the transformed variable, transformed back.
  std::vector<double> edges = {};
  /// The categories, one per bin (str_category, int_category: the integers in decimal).
  std::vector<std::string> categories = {};
  std::string transform = {};  ///< regular: "" (none), "log", "sqrt" or "pow(p)"
  bool underflow = false;      ///< a bin below the first edge (in the channel's bins only when the channel keeps flow)
  bool overflow = false;       ///< a bin above the last edge, or for the categories not listed
  bool circular = false;       ///< hist's circular trait (values wrap around)
  bool growth = false;         ///< hist's growth trait (the writer's axis could grow)

  /// The bins inside the axis's range.
  index_t size() const {
    return static_cast<index_t>(categories.empty() ? (edges.empty() ? 0 : edges.size() - 1) : categories.size());
  }
  /// The bins with the underflow and overflow bins.
  index_t extent() const { return size() + (underflow ? 1 : 0) + (overflow ? 1 : 0); }

  /// hist's class name: "Regular", "Variable", "Integer", "Boolean", "StrCategory" or "IntCategory".
  const char* kind_name() const {
    constexpr const char* names[] = {"Regular", "Variable", "Integer", "Boolean", "StrCategory", "IntCategory"};
    return names[static_cast<int>(kind)];
  }
};

/// The bins of a histogram with these axes: the product of their size()s, or extent()s with `flow`; past `cap`, cap + 1
/// (a product that cannot overflow, for checking untrusted axes against a known number of bins).
inline index_t axes_bins(const std::vector<Axis>& axes, bool flow, index_t cap) {
  index_t product = 1;
  for (const Axis& a : axes) {
    const index_t n = flow ? a.extent() : a.size();
    product = n > 0 && product <= cap / n ? product * n : (n == 0 ? 0 : cap + 1);
    if (product > cap || product == 0) return product;
  }
  return product;
}

}  // namespace fitlib
