// SPDX-License-Identifier: MIT
// The exception hierarchy for bad input; non-convergence is never an exception.
#pragma once

#include <stdexcept>
#include <string>

namespace fitlib {

/// Base of every exception fitlib throws for bad input. Messages name the offending item
/// (channel, process, systematic, bin, parameter, dataset) and say what to do about it.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A model (templates, data, systematics) that is inconsistent or numerically invalid.
class model_error : public error {
 public:
  using error::error;
};

/// A call whose arguments do not fit the object it is made on (shapes, unknown names).
class usage_error : public error {
 public:
  using error::error;
};

}  // namespace fitlib
