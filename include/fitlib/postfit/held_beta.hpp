// SPDX-License-Identifier: MIT
// β held at given values for a scope (Likelihood::fix_bin_by_bin), profiled again at its end.
#pragma once

#include <span>

namespace fitlib::detail {

/// Holds a likelihood's bin-by-bin β at `beta` (Likelihood::fix_bin_by_bin) while it lives and profiles β again when
/// it ends: `release()` ends it where a failure to restore should reach the caller; the destructor, which may run
/// while another exception unwinds, restores what `release()` did not and swallows a failure. Afterwards β is
/// profiled, whatever it was before.
template <class Lik>
class HeldBeta {
 public:
  HeldBeta(Lik& lik, std::span<const double> beta) : lik_(&lik) { lik.fix_bin_by_bin(beta); }
  HeldBeta(const HeldBeta&) = delete;
  HeldBeta& operator=(const HeldBeta&) = delete;
  ~HeldBeta() {
    try {
      release();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; release() reports the failure
    }
  }
  void release() {
    if (lik_ == nullptr) return;
    Lik* l = lik_;
    lik_ = nullptr;
    l->fix_bin_by_bin({});
  }

 private:
  Lik* lik_;
};

}  // namespace fitlib::detail
