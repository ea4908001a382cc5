// SPDX-License-Identifier: MIT
// Reads rabbit's HDF5 input tensors (rabbit-likelihood-and-format.md §1) into a validated fitlib::Model.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/types.hpp"
#include "fitlib/io/hdf5.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/model/model.hpp"

namespace fitlib::io {

/// How `read_rabbit` interprets a tensor, for what the file itself does not record in plain HDF5.
struct RabbitReadOptions {
  /// Accept negative nominal yields (files written with rabbit's allow_negative_expectation); otherwise a
  /// negative entry of hnorm / hnorm_sparse/values is an error naming the entry and this option.
  bool allow_negative_yields = false;
  /// How the systematic tensor acts on the yields. Unset: as the tensor's `meta` pickle says (rabbit's TensorWriter
  /// records its systematic_type there), log-normal for a file without `meta` (older writers). Set: a `meta` that
  /// says otherwise is a `usage_error`, and a `meta` that cannot be decoded (e.g. its Blosc filter plugin is missing)
  /// is skipped (`RabbitTensor::meta_skipped` says why) instead of being a `file_error`.
  std::optional<SystematicType> systematic_type = std::nullopt;
  /// Read the systematic tensor (hlogk, or hlogk_sparse) of these bins only, as one rank of an MPI fit does
  /// (rabbit_partition gives each rank its range): the model holds just their rows (the templates' `held` = bins),
  /// read with HDF5 hyperslab reads, so no rank reads or holds the whole tensor. Bins are numbered as in the
  /// model: all Bf bins, masked ones included. Everything else (nominal yields, data, variances...) is read whole.
  /// Empty: the whole tensor. A range that is empty or not inside [0, Bf) is a `usage_error`.
  std::optional<BinRange> bins = std::nullopt;
  /// The largest `meta` pickle read (meta/pickle_data, in bytes; 64 MiB by default). rabbit's meta is kilobytes to a
  /// few megabytes (channels, axes, the writer's arguments); a larger one is refused before it is read, a
  /// `file_error` naming its size and this option (skipped as undecodable when `systematic_type` is set), so that a
  /// corrupt or hostile file cannot cost many times its size in memory. Raise it for a trusted file (fitlib-fit
  /// --maxMetaMiB). The decoded pickle is further bounded by pickle::Limits' defaults.
  std::size_t max_meta_bytes = std::size_t{64} << 20;
};

/// What rabbit's `meta` group says about a tensor: a Python pickle of a dict (rabbit-likelihood-and-format.md §1.7).
struct RabbitMeta {
  std::optional<SystematicType> systematic_type;  ///< its "systematic_type" ("log_normal" / "normal"), if it has one
  std::optional<bool> symmetric_tensor;           ///< its "symmetric_tensor", if it has one (checked against hlogk's layout)
  pickle::Value pickle;                           ///< the whole decoded dict (channel_info, meta_info...), nothing executed
};

/// A rabbit input tensor: the model, ready to fit, and what else the file holds for the fit.
struct RabbitTensor {
  Model model;                           ///< validated
  std::vector<std::string> pseudodata_names;  ///< hpseudodatanames, `[npseudodata]`
  std::vector<double> pseudodata;        ///< hpseudodata, `[nbins × npseudodata]` row-major, possibly empty
  std::vector<double> beta_variations;   ///< hbetavariations, `[nbins_full × nbins × nprocs]`, usually empty
  std::string path;                      ///< the file read (or the in-memory image's name)
  std::string sha256;                    ///< SHA-256 of the file's bytes (hex); empty when read from an open file
  std::optional<RabbitMeta> meta;        ///< the `meta` group, decoded; absent if the file has none or it was skipped
  std::string meta_skipped;              ///< why an undecodable `meta` was skipped (RabbitReadOptions::systematic_type set); else empty
  /// Why the channels are not the ones the `meta` pickle's channel_info describes (no `meta`, no channel_info, an
  /// axis class fitlib cannot read, channels that do not add up to the tensor's bins): then the bins form one
  /// channel "ch0" and the masked ones "ch1_masked", each with one Integer axis ("obs", "masked"), as in rabbit
  /// without `meta`. Empty when they are the meta's.
  std::string channels_skipped;
};

/// Reads a rabbit input tensor from an open file (`sha256` stays empty). Throws `file_error` (or `model_error`)
/// naming the dataset and the remedy for anything missing, mis-shaped, mis-typed, non-finite or out of range.
/// With `opts.bins`, reads the systematic tensor of those bins only (RabbitReadOptions::bins).
RabbitTensor read_rabbit(const hdf5::File& file, const RabbitReadOptions& opts = {});

/// The bin ranges of `count` parts of the rabbit tensor in `file`, one per MPI rank in rank order, for each rank
/// to read its own with RabbitReadOptions::bins: exactly partition_bins(model, count) of the model read_rabbit(file)
/// makes (contiguous ranges covering all Bf bins, about equal work in their unmasked bins, the masked bins joining
/// the last), found without holding the systematic tensor. A dense tensor's work needs only its shapes; a sparse
/// one's counts each cell's non-zero hlogk_sparse entries, streaming the indices and values in bounded reads.
/// Checks what it reads (read_rabbit checks the rest); throws `usage_error` unless 1 ≤ count ≤ the unmasked bins.
std::vector<BinRange> rabbit_partition(const hdf5::File& file, index_t count);

/// rabbit_partition of the tensor at `path`.
std::vector<BinRange> rabbit_partition(const std::string& path, index_t count);

/// Reads a rabbit input tensor (rabbit-likelihood-and-format.md §1) into a validated model: dense (hnorm/hlogk) or
/// sparse (hnorm_sparse/hlogk_sparse), symmetric or asymmetric, with data, template variances, constraint weights,
/// groups, NOIs and external terms; the systematic type and tensor symmetry from rabbit's `meta` pickle (decoded,
/// nothing executed; RabbitReadOptions::systematic_type), and the channels from its channel_info: names, masked
/// flags and hist axes (RabbitTensor::channels_skipped says why when they cannot be). Records the file's SHA-256, which streams
/// every byte of the file even when `opts.bins` reads part of the tensor (read from an open file to skip it).
/// `file_opts` bound what the reading may allocate (hdf5::FileOptions: the read limit, the compression ratio).
RabbitTensor read_rabbit(const std::string& path, const RabbitReadOptions& opts = {}, const hdf5::FileOptions& file_opts = {});

}  // namespace fitlib::io

// The reader itself: inline here, or in fitlib::prebuilt (config.hpp's FITLIB_DEFINITIONS).
#if FITLIB_DEFINITIONS
#include "fitlib/io/rabbit_reader.hpp"
#endif
