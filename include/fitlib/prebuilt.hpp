// SPDX-License-Identifier: MIT
// fitlib::prebuilt: the common instantiations compiled once, so that an analysis compiles in seconds.
#pragma once

// fitlib is header-only, and a translation unit that fits a likelihood instantiates and optimises the whole fit.
// fitlib::prebuilt is a library holding what most analyses use (docs/benchmarks.md, "Compile time"):
// - the fits and postfit helpers listed below, over the four CPU likelihoods, and
// - the non-template functions in `#if FITLIB_DEFINITIONS` sections (config.hpp): the rabbit reader, the pickle
//   codec, the dense algebra of the host policies, the minimizers and the postfit.
// Linking it defines FITLIB_PREBUILT for the consumer: the headers then declare these instantiations
// `extern template` and leave those definitions out. Anything else (other objectives, callbacks, option types,
// the replica batches) is instantiated in the consumer as without it.
//
// The same bits either way. The library is compiled for the compiler's default instruction set (never
// FITLIB_NATIVE) and with -ffp-contract=off, which it passes on to its consumers: a consumer compiled with those
// flags runs the same code whether it instantiates a fit itself or calls the library's. Eigen's vector width
// must agree as well, since Eigen objects allocated on one side are freed on the other and Eigen aligns its
// allocations to EIGEN_MAX_ALIGN_BYTES: a consumer compiled for wider vectors (-march=native, -mavx) fails to link,
// on an undefined `fitlib_prebuilt_built_with_EIGEN_MAX_ALIGN_BYTES_<its value>`, instead of freeing memory the
// wrong way. Such a consumer links fitlib::io (header-only) instead. tests/prebuilt checks the bits.
//
// The library's sources (src/prebuilt/) write the same lists as explicit instantiation definitions, one
// likelihood per source; src/prebuilt/definitions.cpp compiles the non-template functions.

#include "fitlib/likelihood/likelihood.hpp"
#include "fitlib/minimize/exact.hpp"
#include "fitlib/minimize/fit.hpp"
#include "fitlib/minimize/gltr.hpp"
#include "fitlib/minimize/steihaug_cg.hpp"
#include "fitlib/postfit/impacts.hpp"
#include "fitlib/postfit/scan.hpp"

/// The instantiations fitlib::prebuilt holds for the likelihood type LIK and the subproblem SUB: `KW` is
/// `extern template` (a consumer) or `template` (src/prebuilt).
#define FITLIB_PREBUILT_FIT(KW, LIK, SUB)                                                                   \
  KW FitResult fit<LIK, SUB>(LIK&, const TrustRegion<SUB>&, const FitOptions&);                          \
  KW Scan profile_scan<LIK, SUB>(LIK&, const TrustRegion<SUB>&, const FitResult&, const std::string&, ScanOptions);

/// ... and for the likelihood type LIK alone, with each subproblem.
#define FITLIB_PREBUILT_LIKELIHOOD(KW, LIK)                                                                   \
  KW LIK::Likelihood(std::shared_ptr<const Model>, std::vector<BinRange>, LIK::TemplateSource, LIK::policy_type, \
                     LikelihoodOptions);                                                                      \
  KW Impacts traditional_impacts<LIK>(LIK&, const FitResult&);                                               \
  KW Impacts global_impacts<LIK>(LIK&, const FitResult&);                                                    \
  FITLIB_PREBUILT_FIT(KW, LIK, Gltr)                                                                          \
  FITLIB_PREBUILT_FIT(KW, LIK, Exact)                                                                         \
  FITLIB_PREBUILT_FIT(KW, LIK, SteihaugCG)

#ifdef FITLIB_PREBUILT
namespace fitlib {
FITLIB_PREBUILT_LIKELIHOOD(extern template, SerialLikelihood)
FITLIB_PREBUILT_LIKELIHOOD(extern template, SparseSerialLikelihood)
FITLIB_PREBUILT_LIKELIHOOD(extern template, ThreadedLikelihood)
FITLIB_PREBUILT_LIKELIHOOD(extern template, SparseThreadedLikelihood)
}  // namespace fitlib

// Eigen's alignment, checked at link time (above): the library defines the tag of its own, each consumer refers
// to the tag of its.
#define FITLIB_PREBUILT_ALIGN_TAG_(bytes) fitlib_prebuilt_built_with_EIGEN_MAX_ALIGN_BYTES_##bytes
#define FITLIB_PREBUILT_ALIGN_TAG(bytes) FITLIB_PREBUILT_ALIGN_TAG_(bytes)
extern "C" const int FITLIB_PREBUILT_ALIGN_TAG(EIGEN_MAX_ALIGN_BYTES);
#if defined(FITLIB_PREBUILT_SOURCE)
extern "C" const int FITLIB_PREBUILT_ALIGN_TAG(EIGEN_MAX_ALIGN_BYTES) = EIGEN_MAX_ALIGN_BYTES;
#elif defined(__GNUC__)
[[gnu::used]] static const int* const fitlib_prebuilt_align_check = &FITLIB_PREBUILT_ALIGN_TAG(EIGEN_MAX_ALIGN_BYTES);
#endif
#endif
