// SPDX-License-Identifier: MIT
// The base of the HDF5 layer: `file_error`, handles that close themselves, HDF5's error stack silenced and read.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"

namespace fitlib::io {

/// A file that cannot be read or written as expected: missing, not HDF5, truncated, a dataset that is
/// absent, mis-typed, mis-shaped or compressed with a filter this HDF5 cannot decode. The message names
/// the file and the dataset or attribute and says what to do.
class file_error : public error {
 public:
  using error::error;
};

/// The HDF5 layer: handles that close themselves, reads that check types and shapes, writes of N-D arrays.
/// Every entry point silences HDF5's own error printing while it runs and turns failures into `file_error`.
namespace hdf5 {

/// Turns off HDF5's automatic error printing for the lifetime of the object (restoring what was set before),
/// so that a failed call is reported once, as a `file_error`, instead of as a stack dump on stderr.
class ErrorSilencer {
 public:
  ErrorSilencer() noexcept {
    if (H5Eget_auto2(H5E_DEFAULT, &func_, &data_) >= 0) saved_ = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  }
  ~ErrorSilencer() {
    if (saved_) H5Eset_auto2(H5E_DEFAULT, func_, data_);
  }
  ErrorSilencer(const ErrorSilencer&) = delete;
  ErrorSilencer& operator=(const ErrorSilencer&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
  bool saved_ = false;
};

/// An owned HDF5 identifier (file, group, dataset, attribute, dataspace, datatype, property list), closed
/// by the matching H5*close in the destructor. Move-only.
class Handle {
 public:
  using closer = herr_t (*)(hid_t);
  Handle() noexcept = default;
  /// Takes ownership of `id` (may be negative = no object), to be released with `close`.
  Handle(hid_t id, closer close) noexcept : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  /// Closes the object now (if any).
  void reset() noexcept {
    if (id_ >= 0 && close_ != nullptr) {
      const ErrorSilencer quiet;
      close_(id_);
    }
    id_ = H5I_INVALID_HID;
  }
  /// The raw identifier, for HDF5 C calls.
  hid_t get() const noexcept { return id_; }
  /// Whether an object is held.
  explicit operator bool() const noexcept { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  closer close_ = nullptr;
};

namespace detail {

/// The innermost (most specific) messages on HDF5's error stack, then clears it.
inline std::string stack_message() {
  std::vector<std::string> lines;
  const auto walk = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    if (e != nullptr && e->desc != nullptr && e->desc[0] != '\0') static_cast<std::vector<std::string>*>(out)->emplace_back(e->desc);
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &lines);
  H5Eclear2(H5E_DEFAULT);
  std::string msg;
  for (std::size_t i = 0; i < lines.size() && i < 2; ++i) msg += (i ? "; " : "") + lines[i];
  return msg.empty() ? std::string("no further detail from HDF5") : msg;
}

}  // namespace detail

}  // namespace hdf5
}  // namespace fitlib::io
