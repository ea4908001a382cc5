// SPDX-License-Identifier: MIT
// On-disk integrity checks that stand in for bounds checks HDF5 1.10 lacks, so that a damaged or mis-written file
// is a `file_error` instead of a crash. HDF5 1.10 (fitlib is built, tested and fuzzed against Debian 12's 1.10.8)
// trusts the sizes and addresses it finds in a file: a corrupt number type, chunk dimension, chunk or storage size,
// global-heap address, object index or object size makes H5Dread read or copy out of bounds. The comments that came
// with these checks say the global-heap reads were fixed only in later HDF5 releases, without naming one; so before
// deleting this header, run the corrupted-file tests (tests/io/test_rabbit_reader.cpp, "read_rabbit survives
// truncated and corrupted files") and the fuzzer (make fuzz) against the oldest HDF5 that fitlib still supports.
//
// The readers (io/hdf5/read.hpp) call only these entry points of `detail::integrity`, before HDF5 reads:
//   check_number_type       a stored integer or floating-point type (numeric datasets, a ragged dataset's integers)
//   check_vlen_string_type  the characters of a variable-length string type
//   check_storage           a dataset's chunked, contiguous or compact storage against its dataspace
//   check_vlen_storage      a variable-length dataset's element descriptors and the global heap they point into
// So the defence goes in one commit: this header, its #include in read.hpp and the `integrity::` calls there (with
// read_ragged's `base_size`, which only check_vlen_storage uses).
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "fitlib/io/hdf5/file.hpp"
#include "fitlib/io/hdf5/types.hpp"

namespace fitlib::io::hdf5::detail::integrity {

/// The `file_error` for the dataset `what` whose stored structures are damaged (`why` says how).
inline file_error corrupt(const std::string& what, const std::string& why) {
  return file_error(what + " is corrupt: " + why + "; copy or regenerate the file");
}

/// Raw bytes of the file behind a `Location`: the disk file, or the in-memory image.
class RawFile {
 public:
  explicit RawFile(const FileInfo& info) : info_(info) {
    if (info.image) {
      size_ = info.image->size();
      return;
    }
    in_.open(info.name, std::ios::binary);
    std::error_code ec;
    const auto n = in_ ? std::filesystem::file_size(info.name, ec) : 0;
    size_ = ec ? 0 : static_cast<std::uint64_t>(n);
  }
  /// The file's length in bytes (0 if it cannot be read).
  std::uint64_t size() const { return size_; }
  /// Bytes [offset, offset + n) into `out`; false unless they all lie in the file.
  bool read(std::uint64_t offset, std::uint64_t n, std::vector<std::uint8_t>& out) {
    if (offset > size_ || n > size_ - offset) return false;
    out.resize(static_cast<std::size_t>(n));
    if (n == 0) return true;
    if (info_.image) {
      std::memcpy(out.data(), info_.image->data() + offset, static_cast<std::size_t>(n));
      return true;
    }
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
    return static_cast<std::uint64_t>(in_.gcount()) == n;
  }

 private:
  const FileInfo& info_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

/// A little-endian unsigned integer of `n` ≤ 8 bytes (HDF5's on-disk byte order for metadata).
inline std::uint64_t little_endian(const std::uint8_t* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

/// The stored size of one variable-length element: a descriptor of its sequence length (4 bytes), the address of
/// its global heap collection (`sizeof_addr` bytes) and its object index there (4 bytes).
inline std::size_t descriptor_size(std::size_t sizeof_addr) { return 4 + sizeof_addr + 4; }

// ------------------------------------------------------------------------------------------------
// Stored types.

/// Checks that a stored integer or floating-point type is one HDF5 can convert without reading out of bounds:
/// a size of 1–8 bytes (2–16 for floats) and bit fields inside it. HDF5 1.10 trusts these fields, so a corrupt
/// type (e.g. a 1032-byte double) makes H5Dread copy past its buffers.
inline void check_number_type(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type), precision = H5Tget_precision(type);
  const int offset = H5Tget_offset(type);
  const bool int_size = size == 1 || size == 2 || size == 4 || size == 8;
  const bool float_size = size == 2 || size == 4 || size == 8 || size == 16;
  bool ok = (cls == H5T_INTEGER ? int_size : float_size) && precision >= 1 && offset >= 0 &&
            static_cast<std::size_t>(offset) + precision <= 8 * size;
  if (ok && cls == H5T_FLOAT) {
    std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    ok = H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 && esize >= 1 && esize <= 32 && msize >= 1 && msize <= 128 &&
         spos < precision && epos + esize <= precision && mpos + msize <= precision && H5Tget_ebias(type) < (std::size_t{1} << 32);
  }
  if (!ok)
    throw file_error(what + " has a corrupt " + class_name(cls) + " type (" + std::to_string(size) + " bytes, precision " +
                     std::to_string(precision) + "); copy or regenerate the file");
}

/// Checks that the characters of a variable-length string type are stored as one byte each: HDF5 sizes its
/// conversion buffers by that size.
inline void check_vlen_string_type(hid_t type, const std::string& what) {
  Handle base(H5Tget_super(type), H5Tclose);
  if (!base || H5Tget_class(base.get()) != H5T_INTEGER || H5Tget_size(base.get()) != 1)
    throw file_error(what + " has a corrupt string type; copy or regenerate the file");
}

// ------------------------------------------------------------------------------------------------
// Storage.

/// The size of one element of a dataset as stored in the file (a variable-length element is a descriptor).
inline std::size_t stored_element_size(hid_t ds) {
  Handle type(H5Dget_type(ds), H5Tclose);
  if (!type) return 0;
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_VLEN || (cls == H5T_STRING && H5Tis_variable_str(type.get()) > 0)) {
    Handle file(H5Iget_file_id(ds), H5Fclose);
    Handle fcpl(file ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID, H5Pclose);
    std::size_t sizeof_addr = 8, sizeof_size = 8;
    if (fcpl) H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size);
    return descriptor_size(sizeof_addr);
  }
  return H5Tget_size(type.get());
}

/// The bytes of a whole chunk of dimensions `chunk` and elements of `elem_bytes`, after checking that no chunk
/// dimension exceeds the dataset's maximal one (`maxdims`) and that the chunk is within HDF5's 4 GiB limit.
inline std::uint64_t chunk_bytes(const std::vector<hsize_t>& chunk, const std::vector<hsize_t>& maxdims, std::size_t elem_bytes,
                                 const std::string& what) {
  std::uint64_t bytes = elem_bytes;
  for (std::size_t d = 0; d < chunk.size(); ++d) {
    if (chunk[d] == 0 || (maxdims[d] != H5S_UNLIMITED && chunk[d] > std::max<hsize_t>(maxdims[d], 1)))
      throw corrupt(what, "its chunk dimensions exceed its dimensions");
    if (chunk[d] > (std::uint64_t{1} << 32) / bytes) throw corrupt(what, "its chunks are larger than HDF5 allows");
    bytes *= chunk[d];
  }
  return bytes;
}

/// Checks that each allocated chunk that its filters left as it is holds a whole chunk's `bytes`. The chunks are
/// listed one by one only where that is cheap enough: unfiltered, or at most 4096 chunks.
inline void check_unfiltered_chunks(hid_t ds, hid_t space, int nfilters, std::uint64_t bytes, std::size_t rank, const std::string& what) {
  const unsigned all_skipped = nfilters == 0 ? 0u : static_cast<unsigned>((std::uint64_t{1} << nfilters) - 1);
  hsize_t nchunks = 0;
  if (H5Dget_num_chunks(ds, space, &nchunks) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  if (nfilters > 0 && nchunks > 4096) return;
  std::vector<hsize_t> offset(rank);
  for (hsize_t c = 0; c < nchunks; ++c) {
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info(ds, space, c, offset.data(), &mask, &addr, &size) < 0) throw corrupt(what, "its chunk index is unreadable");
    const bool unfiltered = nfilters == 0 || (mask & all_skipped) == all_skipped;
    if (addr != HADDR_UNDEF && unfiltered && size != bytes)
      throw corrupt(what, "an unfiltered chunk holds " + std::to_string(size) + " bytes instead of " + std::to_string(bytes));
  }
}

/// `check_storage` of a chunked dataset of `n` elements of `elem_bytes`: the chunk shape, then the chunks.
inline void check_chunks(hid_t ds, hid_t dcpl, hid_t space, std::size_t n, std::size_t elem_bytes, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank <= 0 || rank > H5S_MAX_RANK || H5Pget_chunk(dcpl, 0, nullptr) != rank) throw corrupt(what, "its chunk rank does not match its rank");
  std::vector<hsize_t> chunk(static_cast<std::size_t>(rank)), dims(chunk.size()), maxdims(chunk.size());
  H5Pget_chunk(dcpl, rank, chunk.data());
  H5Sget_simple_extent_dims(space, dims.data(), maxdims.data());
  if (n == 0) return;  // nothing is read (h5py gives empty datasets chunks larger than their extent)
  const std::uint64_t bytes = chunk_bytes(chunk, maxdims, elem_bytes, what);
  const int nfilters = H5Pget_nfilters(dcpl);
  if (nfilters < 0 || nfilters > 32) throw corrupt(what, "its filter pipeline is unreadable");
  check_unfiltered_chunks(ds, space, nfilters, bytes, chunk.size(), what);
}

/// Checks a dataset's storage description against its dataspace before HDF5 reads it: chunks no larger than
/// a fixed-size dataset, unfiltered chunks stored at their full size, contiguous or compact storage large
/// enough for its elements. HDF5 1.10 copies whole chunks (or the compact buffer) without comparing sizes,
/// so a corrupt chunk dimension, chunk size or filter pipeline would make H5Dread read out of bounds.
inline void check_storage(const Location& loc, const std::string& name, hid_t ds, std::size_t n) {
  const std::string what = loc.describe("dataset", name);
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  Handle space(H5Dget_space(ds), H5Sclose);
  const std::size_t elem_bytes = stored_element_size(ds);
  if (!dcpl || !space || elem_bytes == 0) throw file_error("cannot read the storage properties of " + what + ": " + stack_message());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_CHUNKED) {
    check_chunks(ds, dcpl.get(), space.get(), n, elem_bytes, what);
  } else if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    const bool allocated = layout == H5D_COMPACT || H5Dget_offset(ds) != HADDR_UNDEF;
    H5Eclear2(H5E_DEFAULT);
    if (allocated && n > 0 && H5Dget_storage_size(ds) < static_cast<std::uint64_t>(n) * elem_bytes)
      throw corrupt(what, "its stored data are smaller than its dimensions");
  } else {
    throw corrupt(what, "its storage layout is unknown");
  }
}

// ------------------------------------------------------------------------------------------------
// Variable-length data: the element descriptors as stored, and the global heap they point into.

/// How the file writes addresses: the widths of its address and length fields, and the user block before its
/// superblock (addresses count from the end of it).
struct Addressing {
  std::size_t sizeof_addr = 0, sizeof_size = 0;
  hsize_t base = 0;
};

/// The addressing of the file that holds `ds`, flushed first if it is open for writing (fitlib reads the bytes on
/// disk, which must then be those HDF5 sees).
inline Addressing addressing(const Location& loc, hid_t ds, const std::string& what) {
  Handle file(H5Iget_file_id(ds), H5Fclose);
  unsigned intent = 0;
  if (file && H5Fget_intent(file.get(), &intent) >= 0 && (intent & H5F_ACC_RDWR) != 0) H5Fflush(file.get(), H5F_SCOPE_LOCAL);
  Handle fcpl(file ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID, H5Pclose);
  Addressing a;
  if (!fcpl || H5Pget_sizes(fcpl.get(), &a.sizeof_addr, &a.sizeof_size) < 0 || H5Pget_userblock(fcpl.get(), &a.base) < 0)
    throw file_error("cannot read the file creation properties of '" + loc.file_name() + "': " + stack_message());
  if (a.sizeof_addr < 2 || a.sizeof_addr > 8 || a.sizeof_size < 2 || a.sizeof_size > 8)
    throw corrupt(what, "the superblock gives unusual address sizes");
  return a;
}

/// Decodes filtered chunks with HDF5 itself: each is written raw into an in-memory scratch dataset with the same
/// chunk shape and pipeline and an opaque element type of `desc` bytes, then read back.
class ChunkDecoder {
 public:
  ChunkDecoder(hid_t dcpl, int nfilters, const std::vector<hsize_t>& cdims, std::size_t desc, const std::string& what)
      : zero_(cdims.size(), 0), what_(what) {
    const int rank = static_cast<int>(cdims.size());
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_fapl_core(fapl.get(), 1 << 16, 0);
    file_ = Handle(H5Fcreate(image_name("fitlib-scratch").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    type_ = Handle(H5Tcreate(H5T_OPAQUE, desc), H5Tclose);
    Handle sspace(H5Screate_simple(rank, cdims.data(), nullptr), H5Sclose);
    Handle sdcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(sdcpl.get(), rank, cdims.data());
    for (int i = 0; i < nfilters; ++i) {
      unsigned flags = 0, config = 0, cd[32] = {};
      std::size_t ncd = 32;
      const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd, 0, nullptr, &config);
      if (id < 0 || H5Pset_filter(sdcpl.get(), id, flags, std::min<std::size_t>(ncd, 32), cd) < 0)
        throw corrupt(what, "its filter pipeline is invalid");
    }
    dataset_ = Handle(file_ && type_ && sspace ? H5Dcreate2(file_.get(), "chunk", type_.get(), sspace.get(), H5P_DEFAULT, sdcpl.get(), H5P_DEFAULT)
                                               : H5I_INVALID_HID,
                      H5Dclose);
    if (!dataset_) throw file_error("cannot check " + what + ": " + stack_message());
  }

  /// The chunk `stored` (as in the file, with filter mask `mask`) decoded into `plain`, which has the size of a whole chunk.
  void decode(unsigned mask, const std::vector<std::uint8_t>& stored, std::vector<std::uint8_t>& plain) const {
    if (H5Dwrite_chunk(dataset_.get(), H5P_DEFAULT, mask, zero_.data(), stored.size(), stored.data()) < 0 ||
        H5Dread(dataset_.get(), type_.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, plain.data()) < 0)
      throw file_error("cannot read " + what_ + " (" + stack_message() + "); the file is corrupt or truncated: copy or regenerate it");
  }

 private:
  Handle file_, type_, dataset_;
  std::vector<hsize_t> zero_;
  std::string what_;
};

/// Appends to `out` the descriptors (`desc` bytes each) of the elements of the chunk `plain` at `offset` (chunk
/// dimensions `cdims`) that lie inside the dataset's dimensions `dims`: edge chunks extend beyond them.
inline void append_inside_extent(const std::vector<std::uint8_t>& plain, const std::vector<hsize_t>& offset, const std::vector<hsize_t>& cdims,
                                 const std::vector<hsize_t>& dims, std::size_t desc, std::vector<std::uint8_t>& out) {
  std::vector<hsize_t> local(cdims.size(), 0);
  const std::size_t chunk_elems = plain.size() / desc;
  for (std::size_t k = 0; k < chunk_elems; ++k) {
    bool inside = true;
    for (std::size_t d = 0; d < local.size(); ++d) inside = inside && offset[d] + local[d] < dims[d];
    if (inside)
      out.insert(out.end(), plain.begin() + static_cast<std::ptrdiff_t>(k * desc), plain.begin() + static_cast<std::ptrdiff_t>((k + 1) * desc));
    for (std::size_t d = local.size(); d-- > 0;) {
      if (++local[d] < cdims[d]) break;
      local[d] = 0;
    }
  }
}

/// A chunked dataset's dataspace, dimensions and chunk dimensions, with the elements per chunk.
struct ChunkLayout {
  Handle space;
  std::vector<hsize_t> cdims, dims;
  std::size_t chunk_elems = 1;
};

/// The chunk layout of `ds`, checked: the chunk rank is the dataset's, and a chunk of descriptors of `desc` bytes
/// fits the read limit.
inline ChunkLayout chunk_layout(const Location& loc, hid_t ds, hid_t dcpl, std::size_t desc, const std::string& what) {
  const int rank = H5Pget_chunk(dcpl, 0, nullptr);
  ChunkLayout c{Handle(H5Dget_space(ds), H5Sclose), {}, {}};
  if (rank <= 0 || rank > H5S_MAX_RANK || !c.space || H5Sget_simple_extent_ndims(c.space.get()) != rank)
    throw corrupt(what, "its chunk layout is invalid");
  c.cdims.resize(static_cast<std::size_t>(rank));
  c.dims.resize(static_cast<std::size_t>(rank));
  H5Pget_chunk(dcpl, rank, c.cdims.data());
  H5Sget_simple_extent_dims(c.space.get(), c.dims.data(), nullptr);
  for (hsize_t d : c.cdims) {
    if (d == 0 || d > loc.max_read_bytes() || c.chunk_elems > loc.max_read_bytes() / d) throw corrupt(what, "its chunk dimensions are invalid");
    c.chunk_elems *= static_cast<std::size_t>(d);
  }
  require_fits(loc, what, c.chunk_elems, desc);
  return c;
}

/// The descriptors of a chunked dataset's `n` elements, chunk by chunk (decoded where a filter applies).
inline void chunked_descriptors(const Location& loc, hid_t ds, hid_t dcpl, std::size_t n, const Addressing& at, RawFile& raw, const std::string& what,
                                std::vector<std::uint8_t>& out) {
  const std::size_t desc = descriptor_size(at.sizeof_addr);
  const ChunkLayout c = chunk_layout(loc, ds, dcpl, desc, what);
  const int nfilters = H5Pget_nfilters(dcpl);
  std::optional<ChunkDecoder> decoder;
  if (nfilters > 0) decoder.emplace(dcpl, nfilters, c.cdims, desc, what);
  hsize_t nchunks = 0;
  if (H5Dget_num_chunks(ds, c.space.get(), &nchunks) < 0) throw corrupt(what, "its chunk index is unreadable");
  std::vector<hsize_t> offset(c.cdims.size());
  std::vector<std::uint8_t> stored, plain;
  for (hsize_t i = 0; i < nchunks; ++i) {
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info(ds, c.space.get(), i, offset.data(), &mask, &addr, &size) < 0) throw corrupt(what, "its chunk index is unreadable");
    if (addr == HADDR_UNDEF) continue;
    const bool filtered = nfilters > 0 && (mask & ((1u << nfilters) - 1)) != ((1u << nfilters) - 1);
    if (!filtered) {
      if (!raw.read(at.base + addr, static_cast<std::uint64_t>(c.chunk_elems) * desc, plain))
        throw corrupt(what, "a chunk extends beyond the end of the file");
    } else {
      if (!raw.read(at.base + addr, size, stored)) throw corrupt(what, "a chunk extends beyond the end of the file");
      plain.assign(c.chunk_elems * desc, 0);
      decoder->decode(mask, stored, plain);
    }
    append_inside_extent(plain, offset, c.cdims, c.dims, desc, out);
    if (out.size() > static_cast<std::size_t>(n) * desc) throw corrupt(what, "its chunks hold more elements than its extent");
  }
}

/// The descriptors of the dataset's `n` elements as stored, in row-major order; none for a contiguous dataset that
/// was never written (every element is then the empty fill value).
inline std::vector<std::uint8_t> stored_descriptors(const Location& loc, hid_t ds, std::size_t n, const Addressing& at, RawFile& raw,
                                                    const std::string& what) {
  std::vector<std::uint8_t> descriptors;
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  const H5D_layout_t layout = dcpl ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
  if (layout == H5D_COMPACT)  // its descriptors live in the object header, out of fitlib's reach
    throw file_error(what +
                     " stores variable-length data compactly, which fitlib does not read (it cannot check such data before "
                     "HDF5 reads it, and rabbit never writes it); rewrite the dataset with contiguous or chunked storage");
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(ds);
    if (addr == HADDR_UNDEF) return descriptors;
    if (!raw.read(at.base + addr, static_cast<std::uint64_t>(n) * descriptor_size(at.sizeof_addr), descriptors))
      throw corrupt(what, "its data extend beyond the end of the file");
  } else if (layout == H5D_CHUNKED) {
    chunked_descriptors(loc, ds, dcpl.get(), n, at, raw, what, descriptors);
  } else {
    throw corrupt(what, "its storage layout is unknown");
  }
  return descriptors;
}

/// The objects of one global heap collection: object index → size in bytes.
using HeapObjects = std::map<std::uint64_t, std::uint64_t>;

/// The global heap collection at `addr`, parsed as HDF5 parses it but with bounds checks: its "GCOL" header and
/// size, then its objects (index, size, data padded to 8 bytes) up to the free space.
inline HeapObjects heap_collection(RawFile& raw, const Addressing& at, std::uint64_t addr, const std::string& what) {
  const std::size_t header = 8 + at.sizeof_size, object_header = 8 + at.sizeof_size;
  const std::string where = "the global heap collection at address " + std::to_string(addr);
  std::vector<std::uint8_t> h;
  if (!raw.read(at.base + addr, header, h) || std::memcmp(h.data(), "GCOL", 4) != 0 || h[4] != 1)
    throw corrupt(what, where + " is missing or damaged");
  const std::uint64_t size = little_endian(h.data() + 8, at.sizeof_size);
  if (size < header || !raw.read(at.base + addr, size, h)) throw corrupt(what, where + " has an impossible size");
  HeapObjects objects;
  std::uint64_t pos = header;
  while (pos < size) {
    if (size - pos < object_header) break;  // trailing free space, too small for an object header
    const std::uint64_t idx = little_endian(h.data() + pos, 2), osize = little_endian(h.data() + pos + 8, at.sizeof_size);
    std::uint64_t need = osize;  // the free-space object (index 0) counts its own header
    if (idx > 0) {
      if (osize > size - pos - object_header) throw corrupt(what, where + " holds an object larger than the collection");
      need = object_header + ((osize + 7) & ~std::uint64_t{7});
      if (!objects.emplace(idx, osize).second) throw corrupt(what, where + " holds object " + std::to_string(idx) + " twice");
    }
    if (need == 0) throw corrupt(what, where + " holds an empty free-space record");
    // HDF5 1.10 steps over a free-space record by its size unchecked: one larger than the rest of the collection
    // takes its parser outside the collection, where it loops for good or reads wild memory.
    if (idx == 0 && need > size - pos) throw corrupt(what, where + " holds a free-space record larger than the collection");
    if (need > size - pos) break;
    pos += need;
  }
  return objects;
}

/// Checks each descriptor against the heap object it names: the object exists and holds its sequence's length
/// times `base_size` bytes (each collection is parsed once).
inline void check_descriptors(const std::vector<std::uint8_t>& descriptors, RawFile& raw, const Addressing& at, std::size_t base_size,
                              const std::string& what) {
  std::map<std::uint64_t, HeapObjects> heaps;  // by collection address
  const std::size_t desc = descriptor_size(at.sizeof_addr);
  const std::size_t count = descriptors.size() / desc;
  for (std::size_t k = 0; k < count; ++k) {
    const std::uint8_t* p = descriptors.data() + k * desc;
    const std::uint64_t length = little_endian(p, 4), addr = little_endian(p + 4, at.sizeof_addr), idx = little_endian(p + 4 + at.sizeof_addr, 4);
    if (addr == 0) {
      if (length != 0) throw corrupt(what, "element " + std::to_string(k) + " claims " + std::to_string(length) + " values but has no storage");
      continue;
    }
    auto heap = heaps.find(addr);
    if (heap == heaps.end()) heap = heaps.emplace(addr, heap_collection(raw, at, addr, what)).first;
    const HeapObjects& objects = heap->second;
    const auto it = objects.find(idx);
    if (it == objects.end()) throw corrupt(what, "element " + std::to_string(k) + " refers to a heap object that does not exist");
    if (it->second != length * base_size)
      throw corrupt(what, "element " + std::to_string(k) + " claims " + std::to_string(length) + " values but its heap object holds " +
                              std::to_string(it->second) + " bytes");
  }
}

/// Checks the stored form of a variable-length dataset (strings, ragged arrays) before HDF5 reads it.
/// HDF5 1.10 trusts the global-heap addresses, object indices and object sizes it finds in a file: one
/// corrupt byte there makes H5Dread copy out of bounds and crash the program (fixed only in later HDF5
/// releases). So fitlib walks the same structures first, with bounds checks: each element's descriptor
/// (sequence length, heap collection address, object index) and every global heap collection they refer
/// to, and throws `file_error` where HDF5 would read out of bounds or return uninitialised memory.
/// `base_size` is the stored size of one sequence element (1 for strings). Compact datasets (which
/// fitlib and rabbit never write) are rejected: their descriptors cannot be reached through HDF5's API.
inline void check_vlen_storage(const Location& loc, const std::string& name, hid_t ds, std::size_t n, std::size_t base_size) {
  const std::string what = loc.describe("dataset", name);
  const Addressing at = addressing(loc, ds, what);
  RawFile raw(loc.file_info());
  if (raw.size() == 0) throw file_error("cannot read the bytes of '" + loc.file_name() + "' to check " + what);
  require_fits(loc, what, n, descriptor_size(at.sizeof_addr));
  const std::vector<std::uint8_t> descriptors = stored_descriptors(loc, ds, n, at, raw, what);
  check_descriptors(descriptors, raw, at, base_size, what);
}

}  // namespace fitlib::io::hdf5::detail::integrity
