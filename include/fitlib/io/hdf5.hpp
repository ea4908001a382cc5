// SPDX-License-Identifier: MIT
// A small RAII layer over the HDF5 C API: typed reads with shape checks, filter diagnostics, N-D writes. This umbrella
// includes its parts, in io/hdf5/:
//   handle.hpp      `file_error`, handles that close themselves, HDF5's error stack silenced and read
//   file.hpp        files on disk or in memory, the read limit, finding, opening and listing objects
//   filters.hpp     a dataset's filter pipeline, filter plugins and the error for a missing filter
//   read.hpp        datasets and attributes read as numbers, strings and ragged arrays, each read checked
//   row_reader.hpp  ranges of rows of a numeric dataset, one hyperslab each
//   write.hpp       groups, N-D datasets, strings, ragged arrays and attributes
// and, below the readers and writers, types.hpp (what they share) and integrity.hpp (the checks that stand in for
// HDF5 1.10's missing bounds checks, kept apart so that they can be removed in one commit).
#pragma once

#include "fitlib/io/hdf5/handle.hpp"
#include "fitlib/io/hdf5/file.hpp"
#include "fitlib/io/hdf5/filters.hpp"
#include "fitlib/io/hdf5/read.hpp"
#include "fitlib/io/hdf5/row_reader.hpp"
#include "fitlib/io/hdf5/write.hpp"
