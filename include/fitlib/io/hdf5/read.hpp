// SPDX-License-Identifier: MIT
// Reading datasets and attributes: numbers converted to double or int64 with their logical shape, strings, ragged
// integer arrays; each read checks type class, shape, filters and the read limit, and reports a `file_error`.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fitlib/io/hdf5/file.hpp"
#include "fitlib/io/hdf5/filters.hpp"
#include "fitlib/io/hdf5/integrity.hpp"
#include "fitlib/io/hdf5/types.hpp"

namespace fitlib::io::hdf5 {

/// A read array: its values in row-major order and its logical shape (empty shape = a scalar).
template <class T>
struct Array {
  std::vector<T> values;
  std::vector<std::size_t> shape;
  /// Number of values (the product of `shape`).
  std::size_t size() const { return values.size(); }
};

namespace detail {

/// Reads the selection `file_space` of the dataset into `buf`, laid out as `mem_space`, with memory type `mem`
/// (H5S_ALL for both: the whole dataset); on failure names the dataset, preceded by `part` (e.g. "rows [2, 5) of "),
/// with the filter diagnosis when a compression filter is what failed.
inline void read_selection(const Location& loc, const std::string& name, hid_t ds, hid_t mem, hid_t mem_space, hid_t file_space, void* buf,
                           const std::string& part) {
  if (H5Dread(ds, mem, mem_space, file_space, H5P_DEFAULT, buf) >= 0) return;
  const std::string why = stack_message();
  // HDF5 loads plugins only when a filter is first needed; look again now that the read has tried.
  if (const std::string missing = missing_filters(loc, name, ds); !missing.empty()) throw file_error(missing);
  throw file_error("cannot read " + part + loc.describe("dataset", name) + " (" + why +
                   "); the file is corrupt or truncated: copy or regenerate it");
}

/// Reads the whole dataset into `buf` with memory type `mem` (read_selection of everything).
inline void read_all(const Location& loc, const std::string& name, hid_t ds, hid_t mem, void* buf) {
  read_selection(loc, name, ds, mem, H5S_ALL, H5S_ALL, buf, "");
}

/// Allocates `n` values, turning an allocation failure into a `file_error` naming `what`.
template <class T>
std::vector<T> allocate(std::size_t n, const std::string& what) {
  try {
    return std::vector<T>(n);
  } catch (const std::bad_alloc&) {
    throw file_error("not enough memory to read " + what + " (" + std::to_string(n) + " elements)");
  } catch (const std::length_error&) {
    throw file_error("not enough memory to read " + what + " (" + std::to_string(n) + " elements)");
  }
}

/// The size in bytes of the file that holds the object `obj` (0 if HDF5 cannot tell).
inline std::uint64_t file_size_of(hid_t obj) {
  Handle file(H5Iget_file_id(obj), H5Fclose);
  hsize_t size = 0;
  if (!file || H5Fget_filesize(file.get(), &size) < 0) size = 0;
  H5Eclear2(H5E_DEFAULT);
  return size;
}

/// The bytes the dataset `ds` occupies in its file (chunks as stored, so compressed; nothing for unwritten storage),
/// at most the file's size: a damaged chunk index can claim more than the file holds.
inline std::uint64_t stored_bytes(hid_t ds) {
  std::uint64_t stored = H5Dget_storage_size(ds);
  if (const std::uint64_t file = file_size_of(ds); file > 0) stored = std::min(stored, file);
  H5Eclear2(H5E_DEFAULT);
  return stored;
}

/// Throws unless the dataset `ds` (`what`, dataspace dimensions `dims`, `n` elements) declares no more than
/// FileOptions::max_compression_ratio times the bytes it occupies in the file or (numbers only) `unstored_file_multiple`
/// times the file's size, whichever is more, plus `unstored_read_bytes`, and has
/// chunks no larger than that or `unstored_chunk_bytes`. Every reader calls this before it allocates by `n`: the
/// dataspace is a few bytes that a damaged file can set to anything, and unstored chunks read back as fill values,
/// so the declared size alone would let a small file ask for any amount of memory. Checked after check_storage.
inline void require_stored(const Location& loc, const std::string& what, hid_t ds, std::size_t n, const std::vector<std::size_t>& dims) {
  if (n == 0) return;
  const std::size_t elem = integrity::stored_element_size(ds);
  const std::uint64_t stored = stored_bytes(ds);
  const std::uint64_t file = file_size_of(ds);
  const double ratio = loc.max_compression_ratio();
  // Numbers only: strings and ragged arrays are written whole (no writer skips their chunks), and each element
  // costs a string or vector beyond its stored descriptor.
  Handle type(H5Dget_type(ds), H5Tclose);
  const bool numeric = type && (H5Tget_class(type.get()) == H5T_FLOAT || H5Tget_class(type.get()) == H5T_INTEGER);
  const long double by_file = numeric ? static_cast<long double>(unstored_file_multiple) * file : 0;
  const long double allowed = std::max(static_cast<long double>(ratio) * stored, by_file) + unstored_read_bytes;
  const long double declared = static_cast<long double>(n) * elem;
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  long double chunk_bytes = 0;
  if (dcpl && H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    const int rank = H5Pget_chunk(dcpl.get(), 0, nullptr);
    if (rank > 0 && rank <= H5S_MAX_RANK) {  // else check_storage has refused the layout
      std::vector<hsize_t> chunk(static_cast<std::size_t>(rank));
      H5Pget_chunk(dcpl.get(), rank, chunk.data());
      chunk_bytes = elem;
      for (hsize_t c : chunk) chunk_bytes *= static_cast<long double>(c);
    }
  }
  const bool chunk_too_large = chunk_bytes > std::max<long double>(allowed, unstored_chunk_bytes);
  if (declared <= allowed && !chunk_too_large) return;
  // Refused: the message (only now, so that a read that passes pays for no formatting).
  const auto bytes = [](long double b) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0Lf bytes", b);
    return std::string(buf);
  };
  char limit[256];
  if (numeric)
    std::snprintf(limit, sizeof limit, "FileOptions::max_compression_ratio (%g) times what it stores, or %llu times the file's size, plus %zu KiB",
                  ratio, static_cast<unsigned long long>(unstored_file_multiple), unstored_read_bytes >> 10);
  else
    std::snprintf(limit, sizeof limit, "FileOptions::max_compression_ratio (%g) times what it stores, plus %zu KiB", ratio, unstored_read_bytes >> 10);
  const std::string remedy =
      "; the file is corrupt (a damaged dataspace or chunk index: what is not stored would read back as fill values), or, if "
      "the dataset really is this compressible, open the file with a larger FileOptions::max_compression_ratio";
  const std::string occupies = "occupies " + bytes(stored) + " of the file's " + std::to_string(file);
  if (declared > allowed)
    throw file_error(what + " declares " + std::to_string(n) + " elements " + shape_string(dims) + " of " + std::to_string(elem) + " bytes, " +
                     bytes(declared) + " in all, but " + occupies + "; a dataset may declare at most " + limit + remedy);
  throw file_error(what + " has chunks of " + bytes(chunk_bytes) + ", which HDF5 decodes whole, but " + occupies + "; a chunk may hold at most " +
                   std::to_string(unstored_chunk_bytes >> 20) + " MiB or " + limit + remedy);
}

/// Reads an integer attribute array of an open object (`owner` names it in messages).
inline std::vector<std::int64_t> read_int64_attribute(hid_t obj, const std::string& attr, const std::string& owner, std::size_t limit) {
  Handle a(H5Aopen(obj, attr.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) throw file_error(owner + " has no attribute '" + attr + "': " + stack_message());
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = type ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  if (cls != H5T_INTEGER)
    throw file_error("attribute '" + attr + "' of " + owner + " holds " + class_name(cls) +
                     " values, expected integers; the file is corrupt or was not written by the expected program");
  Handle space(H5Aget_space(a.get()), H5Sclose);
  if (!space) throw file_error("attribute '" + attr + "' of " + owner + " has no readable dataspace: " + stack_message());
  const auto [n, dims] = extent(space.get(), "attribute '" + attr + "' of " + owner);
  if (n > limit / sizeof(std::int64_t))
    throw file_error("attribute '" + attr + "' of " + owner + " declares " + std::to_string(n) + " elements; the file is corrupt");
  // An attribute's values are stored in the file uncompressed, so they cannot outnumber the file's bytes.
  if (const std::uint64_t file = file_size_of(obj); file > 0 && n > file / std::max<std::size_t>(1, H5Tget_size(type.get())))
    throw file_error("attribute '" + attr + "' of " + owner + " declares " + std::to_string(n) + " elements of " +
                     std::to_string(H5Tget_size(type.get())) + " bytes, more than the file's " + std::to_string(file) +
                     " bytes can hold; the file is corrupt");
  std::vector<std::int64_t> v(n);
  if (n > 0 && H5Aread(a.get(), H5T_NATIVE_INT64, v.data()) < 0)
    throw file_error("cannot read attribute '" + attr + "' of " + owner + ": " + stack_message());
  return v;
}

/// The logical shape of a dataset: its `original_shape` attribute (rabbit stores arrays flattened) checked
/// against the stored element count, else the dataspace's dimensions.
inline std::vector<std::size_t> logical_shape(const Location& loc, const std::string& name, hid_t ds, std::size_t n,
                                              std::vector<std::size_t> dims) {
  const htri_t has = H5Aexists(ds, "original_shape");
  if (has <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return dims;
  }
  const std::string owner = loc.describe("dataset", name);
  const auto shape = read_int64_attribute(ds, "original_shape", owner, 1 << 16);
  std::vector<std::size_t> out;
  std::size_t product = 1;
  bool overflow = false;
  for (std::int64_t d : shape) {
    if (d < 0)
      throw file_error("attribute original_shape of " + owner + " has a negative extent " + std::to_string(d) +
                       "; the file is corrupt: regenerate it");
    const auto u = static_cast<std::size_t>(d);
    if (u != 0 && product > std::numeric_limits<std::size_t>::max() / u) overflow = true;
    product *= u;
    out.push_back(u);
  }
  if (overflow || product != n)
    throw file_error("attribute original_shape " + shape_string(out) + " of " + owner + " describes " +
                     (overflow ? std::string("more") : std::to_string(product)) + " elements but the dataset stores " + std::to_string(n) +
                     "; the file is corrupt or was modified: regenerate it");
  return out;
}

/// A dataset opened for reading, with its stored type and type class, and its name for messages.
struct TypedDataset {
  Handle ds, type;
  std::string what;
  H5T_class_t cls;
};

inline TypedDataset open_typed(const Location& loc, const std::string& name) {
  TypedDataset t{open_dataset(loc, name), {}, loc.describe("dataset", name), H5T_NO_CLASS};
  t.type = Handle(H5Dget_type(t.ds.get()), H5Tclose);
  if (!t.type) throw file_error("cannot read the type of " + t.what + ": " + stack_message());
  t.cls = H5Tget_class(t.type.get());
  return t;
}

/// A numeric dataset opened for reading as T, every check done that does not depend on how much of it is read.
struct NumericDataset {
  Handle ds;
  std::string what;                ///< "dataset 'x' in 'f'", for messages
  std::size_t n = 0;               ///< stored elements
  std::vector<std::size_t> dims;   ///< the dataspace's dimensions (empty for a scalar)
  std::vector<std::size_t> shape;  ///< the logical shape (`original_shape`, else `dims`)
};

/// Opens a numeric dataset to read as T (double or int64) and checks its type class (integers convert to double
/// only if `accept_integers`; floating point never converts to int64), stored type, storage, `original_shape` and
/// (unless empty) filters. `whole`: also that all of it fits the read limit; a reader of part of it checks the part.
template <class T>
NumericDataset open_numeric(const Location& loc, const std::string& name, bool accept_integers, bool whole) {
  auto [ds, type, what, cls] = open_typed(loc, name);
  const bool ok = std::is_same_v<T, double> ? (cls == H5T_FLOAT || (accept_integers && cls == H5T_INTEGER)) : cls == H5T_INTEGER;
  if (!ok) {
    const char* expected = std::is_same_v<T, double> ? (accept_integers ? "numbers" : "floating-point numbers") : "integers";
    throw file_error(what + " holds " + class_name(cls) + " values, expected " + expected +
                     "; the file was not written by the expected program or was modified: regenerate it");
  }
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  if (!space) throw file_error("cannot read the dataspace of " + what + ": " + stack_message());
  auto [n, dims] = extent(space.get(), what);
  if (whole) require_fits(loc, what, n, sizeof(T));
  integrity::check_number_type(type.get(), what);
  integrity::check_storage(loc, name, ds.get(), n);
  require_stored(loc, what, ds.get(), n, dims);  // also for a reader of part: the part's rows are as unstored as the rest
  NumericDataset d{std::move(ds), std::move(what), n, dims, {}};
  d.shape = logical_shape(loc, name, d.ds.get(), n, std::move(dims));
  if (n > 0)
    if (const std::string missing = missing_filters(loc, name, d.ds.get()); !missing.empty()) throw file_error(missing);
  return d;
}

/// Reads a numeric dataset converted to T (double or int64), as checked by open_numeric.
template <class T>
Array<T> read_numeric(const Location& loc, const std::string& name, bool accept_integers) {
  const ErrorSilencer quiet;
  const NumericDataset d = open_numeric<T>(loc, name, accept_integers, true);
  Array<T> out;
  out.shape = d.shape;
  if (d.n == 0) return out;
  out.values = allocate<T>(d.n, d.what);
  read_all(loc, name, d.ds.get(), native_type<T>(), out.values.data());
  return out;
}

/// Frees the memory HDF5 allocated for variable-length data when it goes out of scope.
class VlenGuard {
 public:
  VlenGuard(hid_t type, hid_t space, void* buf) : type_(type), space_(space), buf_(buf) {}
  ~VlenGuard() {
#if H5_VERSION_GE(1, 12, 0)
    H5Treclaim(type_, space_, H5P_DEFAULT, buf_);
#else
    H5Dvlen_reclaim(type_, space_, H5P_DEFAULT, buf_);
#endif
  }
  VlenGuard(const VlenGuard&) = delete;
  VlenGuard& operator=(const VlenGuard&) = delete;

 private:
  hid_t type_, space_;
  void* buf_;
};

/// A fixed-length string as stored in the `size` bytes at `p`: up to the first null byte, and without trailing
/// spaces where the string type is space-padded.
inline std::string fixed_string(const char* p, std::size_t size, bool space_padded) {
  std::size_t len = 0;
  while (len < size && p[len] != '\0') ++len;
  if (space_padded)
    while (len > 0 && p[len - 1] == ' ') --len;
  return std::string(p, len);
}

/// The `n` strings of the variable-length string dataset `t` (`name` below `loc`, dataspace `space`), read with the
/// memory string type `mem`.
inline std::vector<std::string> read_vlen_strings(const Location& loc, const std::string& name, const TypedDataset& t, hid_t mem, hid_t space,
                                                  std::size_t n) {
  H5Tset_size(mem, H5T_VARIABLE);
  integrity::check_vlen_string_type(t.type.get(), t.what);
  integrity::check_vlen_storage(loc, name, t.ds.get(), n, 1);
  auto ptrs = allocate<char*>(n, t.what);  // value-initialised: null pointers until HDF5 fills them
  const VlenGuard guard(mem, space, ptrs.data());
  read_all(loc, name, t.ds.get(), mem, ptrs.data());
  std::vector<std::string> out;
  out.reserve(n);
  for (const char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
  return out;
}

/// The `n` strings of the fixed-length string dataset `t` (`name` below `loc`), read with the memory string type `mem`.
inline std::vector<std::string> read_fixed_strings(const Location& loc, const std::string& name, const TypedDataset& t, hid_t mem, std::size_t n) {
  const std::size_t size = H5Tget_size(t.type.get());
  if (size == 0) throw file_error(t.what + " has a zero-length string type; the file is corrupt");
  require_fits(loc, t.what, n, size);
  H5Tset_size(mem, size);
  H5Tset_strpad(mem, H5T_STR_NULLPAD);
  auto bytes = allocate<char>(n * size, t.what);
  read_all(loc, name, t.ds.get(), mem, bytes.data());
  const bool space_padded = H5Tget_strpad(t.type.get()) == H5T_STR_SPACEPAD;
  std::vector<std::string> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(fixed_string(bytes.data() + i * size, size, space_padded));
  return out;
}
}  // namespace detail

/// A numeric dataset as doubles with its logical shape (`original_shape` if present, else the dataspace's).
/// Floating-point data of any width convert; integer data only if `accept_integers`. Throws `file_error`
/// naming the dataset for a missing dataset, another type class, a mis-sized `original_shape` or a filter
/// that is not available.
inline Array<double> read_doubles(const Location& loc, const std::string& name, bool accept_integers = false) {
  return detail::read_numeric<double>(loc, name, accept_integers);
}

/// An integer dataset (any width or signedness) as int64 with its logical shape; floating-point data are
/// rejected. Errors as `read_doubles`.
inline Array<std::int64_t> read_int64s(const Location& loc, const std::string& name) {
  return detail::read_numeric<std::int64_t>(loc, name, true);
}

/// A string dataset (variable-length or fixed-length, ASCII or UTF-8, any rank) as strings, row-major.
inline std::vector<std::string> read_strings(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const detail::TypedDataset t = detail::open_typed(loc, name);
  const std::string& what = t.what;
  if (t.cls != H5T_STRING)
    throw file_error(what + " holds " + detail::class_name(t.cls) +
                     " values, expected strings; the file was not written by the expected program or was modified: regenerate it");
  Handle space(H5Dget_space(t.ds.get()), H5Sclose);
  if (!space) throw file_error("cannot read the dataspace of " + what + ": " + detail::stack_message());
  const auto [n, dims] = detail::extent(space.get(), what);
  if (n == 0) return {};
  if (const std::string missing = detail::missing_filters(loc, name, t.ds.get()); !missing.empty()) throw file_error(missing);
  const std::size_t stored_size = H5Tget_size(t.type.get());
  if (stored_size == 0 || stored_size > (std::size_t{1} << 20)) throw file_error(what + " has a corrupt string type; copy or regenerate the file");
  detail::integrity::check_storage(loc, name, t.ds.get(), n);
  detail::require_stored(loc, what, t.ds.get(), n, dims);
  const H5T_cset_t cset = H5Tget_cset(t.type.get());
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), cset == H5T_CSET_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
  const htri_t variable = H5Tis_variable_str(t.type.get());
  if (variable < 0) throw file_error("cannot read the type of " + what + ": " + detail::stack_message());
  detail::require_fits(loc, what, n, sizeof(char*));
  if (variable > 0) return detail::read_vlen_strings(loc, name, t, mem.get(), space.get(), n);
  return detail::read_fixed_strings(loc, name, t, mem.get(), n);
}

/// A dataset of variable-length integer sequences (e.g. rabbit's hsystgroupidxs) as ragged int64 rows.
inline std::vector<std::vector<std::int64_t>> read_ragged(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const auto [ds, type, what, cls] = detail::open_typed(loc, name);
  Handle base(cls == H5T_VLEN ? H5Tget_super(type.get()) : H5I_INVALID_HID, H5Tclose);
  const H5T_class_t base_cls = base ? H5Tget_class(base.get()) : H5T_NO_CLASS;
  if (cls != H5T_VLEN || base_cls != H5T_INTEGER)
    throw file_error(what + " holds " + (cls == H5T_VLEN ? std::string("sequences of ") + detail::class_name(base_cls) : detail::class_name(cls)) +
                     " values, expected variable-length sequences of integers; the file was not written by the expected program or "
                     "was modified: regenerate it");
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  if (!space) throw file_error("cannot read the dataspace of " + what + ": " + detail::stack_message());
  const auto [n, dims] = detail::extent(space.get(), what);
  std::vector<std::vector<std::int64_t>> out;
  if (n == 0) return out;
  if (const std::string missing = detail::missing_filters(loc, name, ds.get()); !missing.empty()) throw file_error(missing);
  detail::require_fits(loc, what, n, sizeof(detail::VlenSequence));
  detail::integrity::check_number_type(base.get(), what);
  const std::size_t base_size = H5Tget_size(base.get());
  detail::integrity::check_storage(loc, name, ds.get(), n);
  detail::require_stored(loc, what, ds.get(), n, dims);
  detail::integrity::check_vlen_storage(loc, name, ds.get(), n, base_size);
  Handle mem(H5Tvlen_create(H5T_NATIVE_INT64), H5Tclose);
  auto rows = detail::allocate<detail::VlenSequence>(n, what);  // value-initialised: empty sequences until HDF5 fills them
  const detail::VlenGuard guard(mem.get(), space.get(), rows.data());
  detail::read_all(loc, name, ds.get(), mem.get(), rows.data());
  out.reserve(n);
  for (const detail::VlenSequence& r : rows) {
    const auto* p = static_cast<const std::int64_t*>(r.p);
    out.emplace_back(p, p + (p != nullptr ? r.len : 0));
  }
  return out;
}

/// An integer attribute of `loc` (scalar or array) as int64 values, e.g. rabbit's dense_shape.
inline std::vector<std::int64_t> read_int64_attribute(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  return detail::read_int64_attribute(loc.id(), name, "'" + loc.path() + "' in '" + loc.file_name() + "'", loc.max_read_bytes());
}

/// A numeric scalar attribute of `loc` (integer or floating point, one element) as a double.
inline double read_double_attribute(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const std::string what = "attribute '" + name + "' of '" + loc.path() + "' in '" + loc.file_name() + "'";
  Handle a(H5Aopen(loc.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) throw file_error("cannot open " + what + " (" + detail::stack_message() + "); check the name");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = type ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) throw file_error(what + " holds " + detail::class_name(cls) + " values, expected a number");
  Handle space(H5Aget_space(a.get()), H5Sclose);
  if (!space) throw file_error("cannot read the dataspace of " + what + ": " + detail::stack_message());
  if (detail::extent(space.get(), what).first != 1) throw file_error(what + " is not a single number");
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) throw file_error("cannot read " + what + ": " + detail::stack_message());
  return v;
}

/// A string scalar attribute of `loc` (variable- or fixed-length).
inline std::string read_string_attribute(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const std::string what = "attribute '" + name + "' of '" + loc.path() + "' in '" + loc.file_name() + "'";
  Handle a(H5Aopen(loc.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a) throw file_error("cannot open " + what + " (" + detail::stack_message() + "); check the name");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = type ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  if (cls != H5T_STRING) throw file_error(what + " holds " + detail::class_name(cls) + " values, expected a string");
  Handle space(H5Aget_space(a.get()), H5Sclose);
  if (!space) throw file_error("cannot read the dataspace of " + what + ": " + detail::stack_message());
  if (detail::extent(space.get(), what).first != 1) throw file_error(what + " is not a single string");
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()) == H5T_CSET_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* p = nullptr;
    const detail::VlenGuard guard(mem.get(), space.get(), &p);
    if (H5Aread(a.get(), mem.get(), &p) < 0) throw file_error("cannot read " + what + ": " + detail::stack_message());
    return p != nullptr ? std::string(p) : std::string();
  }
  const std::size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (std::size_t{1} << 24)) throw file_error(what + " has an invalid string length; the file is corrupt");
  H5Tset_size(mem.get(), size);
  H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
  std::string s(size, '\0');
  if (H5Aread(a.get(), mem.get(), s.data()) < 0) throw file_error("cannot read " + what + ": " + detail::stack_message());
  return detail::fixed_string(s.data(), size, H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD);
}

}  // namespace fitlib::io::hdf5
