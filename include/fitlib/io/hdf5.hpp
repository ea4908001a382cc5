// SPDX-License-Identifier: MIT
// A small RAII layer over the HDF5 C API: typed reads with shape checks, filter diagnostics, N-D writes.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

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

/// Limits that protect a reader from files that declare more data than they could hold, and how a
/// writer stores large arrays.
struct FileOptions {
  /// Largest array (in bytes, after conversion to double or int64) one read may allocate; 0 = the machine's
  /// physical memory. Datasets are chunked and unwritten chunks read as zeros, so a small corrupt file can
  /// declare terabytes; this turns such a declaration into a `file_error` instead of an allocation failure.
  std::size_t max_read_bytes = 0;
  /// Writes compress arrays of 64 KiB and more with gzip (worth it for templates, not for dense
  /// matrices of full-precision numbers such as a covariance).
  bool compress = true;
};

/// A read array: its values in row-major order and its logical shape (empty shape = a scalar).
template <class T>
struct Array {
  std::vector<T> values;
  std::vector<std::size_t> shape;
  /// Number of values (the product of `shape`).
  std::size_t size() const { return values.size(); }
};

/// One filter of a dataset's filter pipeline (compression, shuffling, checksums).
struct FilterInfo {
  int id = 0;              ///< HDF5 filter id (1 = deflate, 32026 = Blosc2, ...)
  std::string name;        ///< the well-known name, or the name stored in the file
  bool available = false;  ///< whether this HDF5 can apply it (built in, registered, or found as a plugin)
};

namespace detail {

/// What a `Location` knows about its file, shared by every object opened from it.
struct FileInfo {
  std::string name;  ///< the path (or the image's name), for messages
  std::size_t max_read_bytes = 0;
  bool compress = true;
  std::shared_ptr<const std::vector<std::byte>> image;  ///< the bytes of an in-memory file, else null
};

inline std::size_t physical_memory() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
#endif
  return std::size_t{1} << 40;
}

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

inline std::string join_path(const std::string& base, const std::string& name) {
  if (name.empty()) return base;
  if (name.front() == '/') return name;
  if (base.empty()) return name;
  return base.back() == '/' ? base + name : base + "/" + name;
}

inline std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating point";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_ARRAY: return "array";
    default: return "unknown";
  }
}

/// The name of a well-known HDF5 filter id, or "" if it is not one fitlib knows.
inline const char* filter_name(H5Z_filter_t id) {
  switch (id) {
    case 1: return "deflate (gzip)";
    case 2: return "shuffle";
    case 3: return "Fletcher32 checksum";
    case 4: return "szip";
    case 5: return "N-bit";
    case 6: return "scale-offset";
    case 307: return "bzip2";
    case 32001: return "Blosc";
    case 32004: return "LZ4";
    case 32008: return "bitshuffle";
    case 32013: return "zfp";
    case 32015: return "Zstd";
    case 32017: return "SZ";
    case 32026: return "Blosc2";
    default: return "";
  }
}

/// Number of elements of a dataspace and its dimensions (scalar: no dims, 1 element; null: no elements).
inline std::pair<std::size_t, std::vector<std::size_t>> extent(hid_t space, const std::string& what) {
  const H5S_class_t cls = H5Sget_simple_extent_type(space);
  if (cls == H5S_SCALAR) return {1, {}};
  if (cls == H5S_NULL) return {0, {0}};
  const int rank = H5Sget_simple_extent_ndims(space);
  if (cls != H5S_SIMPLE || rank < 0 || rank > H5S_MAX_RANK) throw file_error(what + " has an unreadable dataspace: " + stack_message());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0)
    throw file_error(what + " has an unreadable dataspace: " + stack_message());
  std::vector<std::size_t> shape;
  std::size_t n = 1;
  for (hsize_t d : dims) {
    if (d > std::numeric_limits<std::size_t>::max() || (d != 0 && n > std::numeric_limits<std::size_t>::max() / d))
      throw file_error(what + " declares more elements than can be addressed; the file is corrupt");
    shape.push_back(static_cast<std::size_t>(d));
    n *= static_cast<std::size_t>(d);
  }
  return {n, shape};
}

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else
    return H5T_NATIVE_INT64;
}

/// A unique name for an in-memory file image (HDF5 identifies open files by name).
inline std::string image_name(const std::string& name) {
  static std::atomic<unsigned long long> counter{0};
  return name + "#image" + std::to_string(counter.fetch_add(1));
}

}  // namespace detail

/// An open file, group or dataset: something with attributes and, for files and groups, children. Carries
/// the file's name and its path inside the file, so every error can name both. Move-only.
class Location {
 public:
  Location() = default;
  /// The raw identifier, for HDF5 C calls.
  hid_t id() const noexcept { return handle_.get(); }
  /// Whether an object is open.
  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }
  /// The file's path (or the in-memory image's name).
  const std::string& file_name() const { return info_->name; }
  /// What fitlib knows about the file (its name, read limit, in-memory image); for fitlib's own use.
  const detail::FileInfo& file_info() const { return *info_; }
  /// This object's path inside the file ("/" for the root group).
  const std::string& path() const { return path_; }
  /// The path of a child, relative to the root, as used in messages ("hnorm_sparse/values").
  std::string child_path(const std::string& name) const {
    std::string p = detail::join_path(path_, name);
    return p.size() > 1 && p.front() == '/' ? p.substr(1) : p;
  }
  /// "dataset 'x' in file 'f'" for messages (`kind` = dataset, group, attribute...).
  std::string describe(const std::string& kind, const std::string& name) const {
    return kind + " '" + child_path(name) + "' in '" + file_name() + "'";
  }
  /// The read limits of the file this object belongs to.
  std::size_t max_read_bytes() const { return info_->max_read_bytes; }
  /// Whether writes below this object compress large arrays (FileOptions::compress).
  bool compress() const { return info_->compress; }

 /// Wraps `h`, an object opened below `parent` at `path` (a path inside the file), sharing the parent's file.
  Location(Handle h, const Location& parent, std::string path) : handle_(std::move(h)), info_(parent.info_), path_(std::move(path)) {}

 protected:
  Handle handle_;
  std::shared_ptr<const detail::FileInfo> info_ = std::make_shared<detail::FileInfo>();
  std::string path_ = "/";
};

/// How `File::open` opens a file.
enum class Access {
  read_only,   ///< reading (the default)
  read_write,  ///< modifying an existing file
};

/// An open HDF5 file; as a `Location` it is the root group.
class File : public Location {
 public:
  File() = default;

  /// Opens an existing file; throws `file_error` saying whether it is missing, unreadable, not HDF5 or truncated.
  static File open(const std::string& path, Access access = Access::read_only, FileOptions opts = {}) {
    namespace fs = std::filesystem;
    const ErrorSilencer quiet;
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (!fs::exists(status))
      throw file_error("'" + path + "' does not exist; check the path (relative paths are taken from the working directory '" +
                       fs::current_path(ec).string() + "')");
    if (fs::is_directory(status)) throw file_error("'" + path + "' is a directory, not an HDF5 file; give the path of the file itself");
    {
      std::ifstream probe(path, std::ios::binary);
      if (!probe) throw file_error("'" + path + "' cannot be opened for reading; check its permissions");
    }
    const auto size = fs::file_size(path, ec);
    if (!ec && size == 0) throw file_error("'" + path + "' is empty (0 bytes), not an HDF5 file; the write or copy that made it did not finish");
#if H5_VERSION_GE(1, 12, 0)
    const htri_t is_hdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
    const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
#endif
    if (is_hdf5 == 0)
      throw file_error("'" + path + "' is not an HDF5 file (no HDF5 signature found); check that the path names an HDF5 file, " +
                       "e.g. a tensor written by rabbit's TensorWriter");
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    Handle f(H5Fopen(path.c_str(), access == Access::read_write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl ? fapl.get() : H5P_DEFAULT),
             H5Fclose);
    if (!f) {
      const std::string why = detail::stack_message();
      const bool truncated = why.find("truncated") != std::string::npos;
      throw file_error("HDF5 cannot open '" + path + "' (" + why + "); " +
                       (truncated ? std::string("the file is truncated, probably by an interrupted write or copy: copy or regenerate it")
                                  : std::string("the file is corrupt or truncated, or (when writing) locked by another program: "
                                                "copy or regenerate it")));
    }
    return File(std::move(f), path, opts);
  }

  /// Creates a file, truncating an existing one; throws `file_error` if it cannot be created.
  static File create(const std::string& path, FileOptions opts = {}) {
    const ErrorSilencer quiet;
    Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!f)
      throw file_error("cannot create HDF5 file '" + path + "' (" + detail::stack_message() +
                       "); check that the directory exists and is writable, and that no other program has the file open");
    return File(std::move(f), path, opts);
  }

  /// Opens an HDF5 file held in memory (read-only, no disk access: HDF5's core driver with a copy of `image`).
  /// `name` is used in messages only.
  static File open_image(std::span<const std::byte> image, const std::string& name, FileOptions opts = {}) {
    const ErrorSilencer quiet;
    if (image.empty()) throw file_error("'" + name + "' is empty (0 bytes), not an HDF5 file");
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    if (!fapl || H5Pset_fapl_core(fapl.get(), 1 << 16, 0) < 0 || H5Pset_file_image(fapl.get(), const_cast<std::byte*>(image.data()), image.size()) < 0)
      throw file_error("cannot set up an in-memory HDF5 file for '" + name + "': " + detail::stack_message());
    Handle f(H5Fopen(detail::image_name(name).c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    if (!f)
      throw file_error("HDF5 cannot open '" + name + "' (" + detail::stack_message() +
                       "); it is not an HDF5 file, or it is corrupt or truncated");
    File file(std::move(f), name, opts);
    auto info = std::make_shared<detail::FileInfo>(*file.info_);
    info->image = std::make_shared<const std::vector<std::byte>>(image.begin(), image.end());
    file.info_ = std::move(info);
    return file;
  }

  /// Writes everything buffered to disk.
  void flush() const {
    const ErrorSilencer quiet;
    if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) throw file_error("cannot flush '" + file_name() + "': " + detail::stack_message());
  }

  /// Creates a file held in memory only (HDF5's core driver, no backing store); `name` is used in
  /// messages. `image()` then gives its bytes, for a writer that puts them on disk itself.
  static File create_in_memory(const std::string& name, FileOptions opts = {}) {
    const ErrorSilencer quiet;
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    if (!fapl || H5Pset_fapl_core(fapl.get(), 1 << 20, 0) < 0)
      throw file_error("cannot set up an in-memory HDF5 file for '" + name + "': " + detail::stack_message());
    Handle f(H5Fcreate(detail::image_name(name).c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!f) throw file_error("cannot create an in-memory HDF5 file for '" + name + "': " + detail::stack_message());
    return File(std::move(f), name, opts);
  }

  /// The bytes of the file as it would be on disk (everything written so far, flushed).
  std::vector<std::byte> image() const {
    flush();
    const ErrorSilencer quiet;
    const ssize_t size = H5Fget_file_image(id(), nullptr, 0);
    std::vector<std::byte> bytes(size > 0 ? static_cast<std::size_t>(size) : 0);
    if (size < 0 || H5Fget_file_image(id(), bytes.data(), bytes.size()) != size)
      throw file_error("cannot take the image of '" + file_name() + "': " + detail::stack_message());
    return bytes;
  }

 private:
  File(Handle h, const std::string& name, FileOptions opts) {
    auto info = std::make_shared<detail::FileInfo>();
    info->name = name;
    info->max_read_bytes = opts.max_read_bytes ? opts.max_read_bytes : detail::physical_memory();
    info->compress = opts.compress;
    handle_ = std::move(h);
    info_ = std::move(info);
    path_ = "/";
  }
};

/// Whether the link `name` (a path relative to `loc`, '/'-separated) exists and resolves to an object.
inline bool exists(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (name.empty() || name == "/") return true;
  std::string prefix = name.front() == '/' ? "/" : "";
  std::size_t pos = name.front() == '/' ? 1 : 0;
  while (pos <= name.size()) {
    const std::size_t next = std::min(name.find('/', pos), name.size());
    if (next > pos) {
      prefix += name.substr(pos, next - pos);
      if (H5Lexists(loc.id(), prefix.c_str(), H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
      if (next < name.size()) prefix += "/";
    }
    pos = next + 1;
  }
  const htri_t ok = H5Oexists_by_name(loc.id(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return ok > 0;
}

/// Whether `loc` (file, group or dataset) has the attribute `name`.
inline bool attribute_exists(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const htri_t ok = H5Aexists(loc.id(), name.c_str());
  H5Eclear2(H5E_DEFAULT);
  return ok > 0;
}

/// Opens the group or dataset `name` below `loc`; throws `file_error` if it does not exist.
inline Location open(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (!exists(loc, name))
    throw file_error("'" + loc.file_name() + "' has no object '" + loc.child_path(name) +
                     "'; check the name (h5ls -r lists a file's contents)");
  Handle h(H5Oopen(loc.id(), name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!h)
    throw file_error("cannot open " + loc.describe("object", name) + " (" + detail::stack_message() +
                     "); the file is corrupt: copy or regenerate it");
  return Location(std::move(h), loc, detail::join_path(loc.path(), name));
}

/// Names of the links directly below the group `loc`, in name order.
inline std::vector<std::string> children(const Location& loc) {
  const ErrorSilencer quiet;
  H5G_info_t info;
  if (H5Gget_info(loc.id(), &info) < 0)
    throw file_error("cannot list '" + loc.path() + "' in '" + loc.file_name() + "' (is it a group?): " + detail::stack_message());
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(loc.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) throw file_error("cannot list '" + loc.path() + "' in '" + loc.file_name() + "': " + detail::stack_message());
    std::string name(static_cast<std::size_t>(n) + 1, '\0');
    if (H5Lget_name_by_idx(loc.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT) < 0)
      throw file_error("cannot list '" + loc.path() + "' in '" + loc.file_name() + "': " + detail::stack_message());
    name.resize(static_cast<std::size_t>(n));
    names.push_back(std::move(name));
  }
  return names;
}

/// The directories HDF5 searches for filter plugins, in order (initialised from HDF5_PLUGIN_PATH or the
/// library's default when HDF5 starts).
inline std::vector<std::string> plugin_search_path() {
  const ErrorSilencer quiet;
  unsigned n = 0;
  std::vector<std::string> dirs;
  if (H5PLsize(&n) < 0) return dirs;
  for (unsigned i = 0; i < n; ++i) {
    const ssize_t len = H5PLget(i, nullptr, 0);
    if (len < 0) continue;
    std::string dir(static_cast<std::size_t>(len) + 1, '\0');
    if (H5PLget(i, dir.data(), dir.size()) < 0) continue;
    dir.resize(static_cast<std::size_t>(len));
    dirs.push_back(std::move(dir));
  }
  return dirs;
}

/// Replaces the directories HDF5 searches for filter plugins. Unlike setting HDF5_PLUGIN_PATH, this works
/// after HDF5 has started (it reads the variable once). A plugin already loaded stays loaded.
inline void set_plugin_search_path(const std::vector<std::string>& dirs) {
  const ErrorSilencer quiet;
  unsigned n = 0;
  if (H5PLsize(&n) < 0) throw file_error("cannot query HDF5's plugin search path: " + detail::stack_message());
  for (; n > 0; --n)
    if (H5PLremove(0) < 0) throw file_error("cannot change HDF5's plugin search path: " + detail::stack_message());
  for (const auto& d : dirs)
    if (H5PLappend(d.c_str()) < 0) throw file_error("cannot add '" + d + "' to HDF5's plugin search path: " + detail::stack_message());
}

/// Whether this HDF5 can apply filter `id` now (built in, registered, or loaded from the plugin search path).
inline bool filter_available(int id) {
  const ErrorSilencer quiet;
  const bool ok = H5Zfilter_avail(static_cast<H5Z_filter_t>(id)) > 0;
  H5Eclear2(H5E_DEFAULT);
  return ok;
}

namespace detail {

/// Opens the dataset `name` below `loc`, with messages for a missing link or a non-dataset object.
inline Handle open_dataset(const Location& loc, const std::string& name) {
  if (!exists(loc, name))
    throw file_error("'" + loc.file_name() + "' has no dataset '" + loc.child_path(name) +
                     "'; check the name (h5ls -r lists a file's contents)");
  Handle obj(H5Oopen(loc.id(), name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!obj) throw file_error("cannot open " + loc.describe("object", name) + " (" + stack_message() + "); the file is corrupt: copy or regenerate it");
  if (H5Iget_type(obj.get()) != H5I_DATASET)
    throw file_error(loc.describe("object", name) + " is a " + (H5Iget_type(obj.get()) == H5I_GROUP ? "group" : "named datatype") +
                     ", not a dataset; the file's layout is not the expected one");
  obj.reset();
  Handle ds(H5Dopen2(loc.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds) throw file_error("cannot open " + loc.describe("dataset", name) + " (" + stack_message() + "); the file is corrupt: copy or regenerate it");
  return ds;
}

/// The filter pipeline of an open dataset, each filter with whether this HDF5 can apply it now (asking HDF5
/// loads a plugin from the plugin search path if one provides the filter).
inline std::vector<FilterInfo> pipeline(hid_t ds) {
  std::vector<FilterInfo> out;
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl) return out;
  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t ncd = 16;
    unsigned cd[16] = {};
    char stored_name[257] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, sizeof stored_name - 1, stored_name, &config);
    if (id < 0) continue;
    FilterInfo f;
    f.id = static_cast<int>(id);
    f.name = filter_name(id);
    if (f.name.empty()) f.name = stored_name[0] != '\0' ? std::string(stored_name) : std::string("unknown filter");
    f.available = H5Zfilter_avail(id) > 0;
    H5Eclear2(H5E_DEFAULT);
    out.push_back(std::move(f));
  }
  return out;
}

/// The first filter of a dataset's pipeline that this HDF5 cannot apply, as a `file_error` message naming
/// the dataset, the filter and the remedy, or "" when every filter is available. (Optional filters count
/// too: a chunk that was filtered needs the filter to be read.)
inline std::string missing_filters(const Location& loc, const std::string& name, hid_t ds) {
  for (const FilterInfo& f : pipeline(ds)) {
    if (f.available) continue;
    std::string searched;
    for (const auto& d : plugin_search_path()) searched += (searched.empty() ? "" : ", ") + d;
    std::string msg = loc.describe("dataset", name) + " is compressed with HDF5 filter " + std::to_string(f.id) + " (" + f.name +
                      "), which this HDF5 library cannot decode: no plugin for it was found (searched: " +
                      (searched.empty() ? std::string("nothing") : searched) +
                      "). Install a filter plugin (`pip install hdf5plugin` has one) and give its directory to fitlib-fit "
                      "--hdf5PluginPath (or FITLIB_HDF5_PLUGIN_PATH; in a program, io::hdf5::set_plugin_search_path): "
                      "python3 -c 'import hdf5plugin; print(hdf5plugin.PLUGINS_PATH)' prints it";
    if (f.id == 32001) msg += "; on Debian, the package hdf5-filter-plugin-blosc-serial also provides the Blosc filter";
    return msg;
  }
  return "";
}

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

/// Selects the elements [lo, hi) (lo < hi) of a row-major dataspace `space` of dimensions `dims`, within the block
/// whose leading coordinates are `at[0..d)`: a partial first index of dimension d (recursively), whole indices,
/// and a partial last index (recursively), so at most 2·rank − 1 hyperslabs. `first`: the next hyperslab replaces
/// the selection instead of joining it. Returns a negative value where HDF5 fails.
inline herr_t select_flat(hid_t space, const std::vector<hsize_t>& dims, std::vector<hsize_t>& at, std::size_t d, hsize_t lo, hsize_t hi,
                          bool& first) {
  hsize_t inner = 1;  // elements per index of dimension d
  for (std::size_t e = d + 1; e < dims.size(); ++e) inner *= dims[e];
  hsize_t i = lo / inner;
  if (lo % inner != 0) {  // the partial first index
    const hsize_t end = std::min(hi, (i + 1) * inner);
    at[d] = i;
    if (select_flat(space, dims, at, d + 1, lo % inner, end - i * inner, first) < 0) return -1;
    lo = end;
    ++i;
  }
  if (const hsize_t whole = (hi - lo) / inner; lo < hi && whole > 0) {
    std::vector<hsize_t> start(dims.size(), 0), count(dims);
    for (std::size_t e = 0; e < d; ++e) {
      start[e] = at[e];
      count[e] = 1;
    }
    start[d] = i;
    count[d] = whole;
    if (H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr) < 0) return -1;
    first = false;
    lo += whole * inner;
    i += whole;
  }
  if (lo < hi) {  // the partial last index
    at[d] = i;
    return select_flat(space, dims, at, d + 1, 0, hi - lo, first);
  }
  return 0;
}

/// Selects the elements [lo, hi) (lo < hi), in row-major order, of the dataspace `space` of dimensions `dims`
/// (a scalar dataspace has none). One hyperslab for the usual cases: a flat dataset (rabbit's writeFlatInChunks,
/// §1.2), or whole rows of the stored shape.
inline herr_t select_flat(hid_t space, const std::vector<hsize_t>& dims, hsize_t lo, hsize_t hi) {
  if (dims.empty()) return H5Sselect_all(space);
  std::vector<hsize_t> at(dims.size(), 0);
  bool first = true;
  return select_flat(space, dims, at, 0, lo, hi, first);
}

/// Throws unless `count` elements of `elem` bytes fit the file's read limit.
inline void require_fits(const Location& loc, const std::string& what, std::size_t count, std::size_t elem) {
  if (count > loc.max_read_bytes() / elem)
    throw file_error(what + " declares " + std::to_string(count) + " elements (" + std::to_string(count) + " × " + std::to_string(elem) +
                     " bytes), more than the read limit of " + std::to_string(loc.max_read_bytes()) +
                     " bytes; the file is corrupt, or raise FileOptions::max_read_bytes");
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

/// The size of one element of a dataset as stored in the file (a variable-length element is a descriptor:
/// sequence length, heap address, object index).
inline std::size_t stored_element_size(hid_t ds) {
  Handle type(H5Dget_type(ds), H5Tclose);
  if (!type) return 0;
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_VLEN || (cls == H5T_STRING && H5Tis_variable_str(type.get()) > 0)) {
    Handle file(H5Iget_file_id(ds), H5Fclose);
    Handle fcpl(file ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID, H5Pclose);
    std::size_t sizeof_addr = 8, sizeof_size = 8;
    if (fcpl) H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size);
    return 4 + sizeof_addr + 4;
  }
  return H5Tget_size(type.get());
}

/// Checks a dataset's storage description against its dataspace before HDF5 reads it: chunks no larger than
/// a fixed-size dataset, unfiltered chunks stored at their full size, contiguous or compact storage large
/// enough for its elements. HDF5 1.10 copies whole chunks (or the compact buffer) without comparing sizes,
/// so a corrupt chunk dimension, chunk size or filter pipeline would make H5Dread read out of bounds.
/// Chunks are listed one by one only where that is cheap enough (unfiltered, or at most 4096 chunks).
inline void check_storage(const Location& loc, const std::string& name, hid_t ds, std::size_t n) {
  const std::string what = loc.describe("dataset", name);
  const auto corrupt = [&](const std::string& why) { return file_error(what + " is corrupt: " + why + "; copy or regenerate the file"); };
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  Handle space(H5Dget_space(ds), H5Sclose);
  const std::size_t elem_bytes = stored_element_size(ds);
  if (!dcpl || !space || elem_bytes == 0) throw file_error("cannot read the storage properties of " + what + ": " + stack_message());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_CHUNKED) {
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank <= 0 || rank > H5S_MAX_RANK || H5Pget_chunk(dcpl.get(), 0, nullptr) != rank) throw corrupt("its chunk rank does not match its rank");
    std::vector<hsize_t> chunk(static_cast<std::size_t>(rank)), dims(chunk.size()), maxdims(chunk.size());
    H5Pget_chunk(dcpl.get(), rank, chunk.data());
    H5Sget_simple_extent_dims(space.get(), dims.data(), maxdims.data());
    if (n == 0) return;  // nothing is read (h5py gives empty datasets chunks larger than their extent)
    std::uint64_t bytes = elem_bytes;
    for (std::size_t d = 0; d < chunk.size(); ++d) {
      if (chunk[d] == 0 || (maxdims[d] != H5S_UNLIMITED && chunk[d] > std::max<hsize_t>(maxdims[d], 1)))
        throw corrupt("its chunk dimensions exceed its dimensions");
      if (chunk[d] > (std::uint64_t{1} << 32) / bytes) throw corrupt("its chunks are larger than HDF5 allows");
      bytes *= chunk[d];
    }
    const int nfilters = H5Pget_nfilters(dcpl.get());
    if (nfilters < 0 || nfilters > 32) throw corrupt("its filter pipeline is unreadable");
    const unsigned all_skipped = nfilters == 0 ? 0u : static_cast<unsigned>((std::uint64_t{1} << nfilters) - 1);
    hsize_t nchunks = 0;
    if (n == 0 || H5Dget_num_chunks(ds, space.get(), &nchunks) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return;
    }
    if (nfilters > 0 && nchunks > 4096) return;
    std::vector<hsize_t> offset(chunk.size());
    for (hsize_t c = 0; c < nchunks; ++c) {
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(ds, space.get(), c, offset.data(), &mask, &addr, &size) < 0) throw corrupt("its chunk index is unreadable");
      const bool unfiltered = nfilters == 0 || (mask & all_skipped) == all_skipped;
      if (addr != HADDR_UNDEF && unfiltered && size != bytes)
        throw corrupt("an unfiltered chunk holds " + std::to_string(size) + " bytes instead of " + std::to_string(bytes));
    }
  } else if (layout == H5D_CONTIGUOUS || layout == H5D_COMPACT) {
    const bool allocated = layout == H5D_COMPACT || H5Dget_offset(ds) != HADDR_UNDEF;
    H5Eclear2(H5E_DEFAULT);
    if (allocated && n > 0 && H5Dget_storage_size(ds) < static_cast<std::uint64_t>(n) * elem_bytes)
      throw corrupt("its stored data are smaller than its dimensions");
  } else {
    throw corrupt("its storage layout is unknown");
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
inline void verify_vlen_storage(const Location& loc, const std::string& name, hid_t ds, std::size_t n, std::size_t base_size) {
  const std::string what = loc.describe("dataset", name);
  const auto corrupt = [&](const std::string& why) {
    return file_error(what + " is corrupt: " + why + "; copy or regenerate the file");
  };
  Handle file(H5Iget_file_id(ds), H5Fclose);
  unsigned intent = 0;
  if (file && H5Fget_intent(file.get(), &intent) >= 0 && (intent & H5F_ACC_RDWR) != 0) H5Fflush(file.get(), H5F_SCOPE_LOCAL);
  Handle fcpl(file ? H5Fget_create_plist(file.get()) : H5I_INVALID_HID, H5Pclose);
  std::size_t sizeof_addr = 0, sizeof_size = 0;
  hsize_t base = 0;
  if (!fcpl || H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 || H5Pget_userblock(fcpl.get(), &base) < 0)
    throw file_error("cannot read the file creation properties of '" + loc.file_name() + "': " + stack_message());
  if (sizeof_addr < 2 || sizeof_addr > 8 || sizeof_size < 2 || sizeof_size > 8) throw corrupt("the superblock gives unusual address sizes");
  RawFile raw(loc.file_info());
  if (raw.size() == 0) throw file_error("cannot read the bytes of '" + loc.file_name() + "' to check " + what);
  const std::size_t desc = 4 + sizeof_addr + 4;  // sequence length, heap collection address, object index
  require_fits(loc, what, n, desc);

  // 1. The descriptors of the dataset's elements, as stored.
  std::vector<std::uint8_t> descriptors;
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  const H5D_layout_t layout = dcpl ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
  if (layout == H5D_COMPACT)  // its descriptors live in the object header, out of fitlib's reach
    throw file_error(what + " stores variable-length data compactly, which fitlib does not read (it cannot check such data before "
                            "HDF5 reads it, and rabbit never writes it); rewrite the dataset with contiguous or chunked storage");
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(ds);
    if (addr == HADDR_UNDEF) return;  // never written: every element is the (empty) fill value
    if (!raw.read(base + addr, static_cast<std::uint64_t>(n) * desc, descriptors)) throw corrupt("its data extend beyond the end of the file");
  } else if (layout == H5D_CHUNKED) {
    const int rank = H5Pget_chunk(dcpl.get(), 0, nullptr);
    Handle space(H5Dget_space(ds), H5Sclose);
    if (rank <= 0 || rank > H5S_MAX_RANK || !space || H5Sget_simple_extent_ndims(space.get()) != rank) throw corrupt("its chunk layout is invalid");
    std::vector<hsize_t> cdims(static_cast<std::size_t>(rank)), dims(static_cast<std::size_t>(rank));
    H5Pget_chunk(dcpl.get(), rank, cdims.data());
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    std::size_t chunk_elems = 1;
    for (hsize_t d : cdims) {
      if (d == 0 || d > loc.max_read_bytes() || chunk_elems > loc.max_read_bytes() / d) throw corrupt("its chunk dimensions are invalid");
      chunk_elems *= static_cast<std::size_t>(d);
    }
    require_fits(loc, what, chunk_elems, desc);
    const int nfilters = H5Pget_nfilters(dcpl.get());
    // Filtered chunks are decoded by HDF5 itself: written raw into an in-memory scratch dataset with the same
    // pipeline and an opaque element type, then read back.
    Handle scratch_file, scratch_type, scratch;
    if (nfilters > 0) {
      Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
      H5Pset_fapl_core(fapl.get(), 1 << 16, 0);
      scratch_file = Handle(H5Fcreate(image_name("fitlib-scratch").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
      scratch_type = Handle(H5Tcreate(H5T_OPAQUE, desc), H5Tclose);
      Handle sspace(H5Screate_simple(rank, cdims.data(), nullptr), H5Sclose);
      Handle sdcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_chunk(sdcpl.get(), rank, cdims.data());
      for (int i = 0; i < nfilters; ++i) {
        unsigned flags = 0, config = 0, cd[32] = {};
        std::size_t ncd = 32;
        const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, 0, nullptr, &config);
        if (id < 0 || H5Pset_filter(sdcpl.get(), id, flags, std::min<std::size_t>(ncd, 32), cd) < 0) throw corrupt("its filter pipeline is invalid");
      }
      scratch = Handle(scratch_file && scratch_type && sspace
                           ? H5Dcreate2(scratch_file.get(), "chunk", scratch_type.get(), sspace.get(), H5P_DEFAULT, sdcpl.get(), H5P_DEFAULT)
                           : H5I_INVALID_HID,
                       H5Dclose);
      if (!scratch) throw file_error("cannot check " + what + ": " + stack_message());
    }
    hsize_t nchunks = 0;
    if (H5Dget_num_chunks(ds, space.get(), &nchunks) < 0) throw corrupt("its chunk index is unreadable");
    std::vector<hsize_t> offset(static_cast<std::size_t>(rank)), local(static_cast<std::size_t>(rank));
    const std::vector<hsize_t> zero(static_cast<std::size_t>(rank), 0);
    std::vector<std::uint8_t> stored, plain;
    for (hsize_t c = 0; c < nchunks; ++c) {
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info(ds, space.get(), c, offset.data(), &mask, &addr, &size) < 0) throw corrupt("its chunk index is unreadable");
      if (addr == HADDR_UNDEF) continue;
      const bool filtered = nfilters > 0 && (mask & ((1u << nfilters) - 1)) != ((1u << nfilters) - 1);
      if (!filtered) {
        if (!raw.read(base + addr, static_cast<std::uint64_t>(chunk_elems) * desc, plain)) throw corrupt("a chunk extends beyond the end of the file");
      } else {
        if (!raw.read(base + addr, size, stored)) throw corrupt("a chunk extends beyond the end of the file");
        plain.assign(chunk_elems * desc, 0);
        if (H5Dwrite_chunk(scratch.get(), H5P_DEFAULT, mask, zero.data(), stored.size(), stored.data()) < 0 ||
            H5Dread(scratch.get(), scratch_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, plain.data()) < 0)
          throw file_error("cannot read " + what + " (" + stack_message() + "); the file is corrupt or truncated: copy or regenerate it");
      }
      // Keep the descriptors of the elements inside the dataset's extent (edge chunks extend beyond it).
      std::fill(local.begin(), local.end(), 0);
      for (std::size_t k = 0; k < chunk_elems; ++k) {
        bool inside = true;
        for (std::size_t d = 0; d < local.size(); ++d) inside = inside && offset[d] + local[d] < dims[d];
        if (inside) descriptors.insert(descriptors.end(), plain.begin() + static_cast<std::ptrdiff_t>(k * desc), plain.begin() + static_cast<std::ptrdiff_t>((k + 1) * desc));
        for (std::size_t d = local.size(); d-- > 0;) {
          if (++local[d] < cdims[d]) break;
          local[d] = 0;
        }
      }
      if (descriptors.size() > static_cast<std::size_t>(n) * desc) throw corrupt("its chunks hold more elements than its extent");
    }
  } else {
    throw corrupt("its storage layout is unknown");
  }

  // 2. Every referenced global heap collection, parsed as HDF5 parses it, and the objects the descriptors name.
  std::map<std::uint64_t, std::map<std::uint64_t, std::uint64_t>> heaps;  // collection address → object index → size
  const std::size_t header = 8 + sizeof_size, object_header = 8 + sizeof_size;
  const auto collection = [&](std::uint64_t addr) -> const std::map<std::uint64_t, std::uint64_t>& {
    if (const auto it = heaps.find(addr); it != heaps.end()) return it->second;
    const std::string where = "the global heap collection at address " + std::to_string(addr);
    std::vector<std::uint8_t> h;
    if (!raw.read(base + addr, header, h) || std::memcmp(h.data(), "GCOL", 4) != 0 || h[4] != 1) throw corrupt(where + " is missing or damaged");
    const std::uint64_t size = little_endian(h.data() + 8, sizeof_size);
    if (size < header || !raw.read(base + addr, size, h)) throw corrupt(where + " has an impossible size");
    std::map<std::uint64_t, std::uint64_t> objects;
    std::uint64_t pos = header;
    while (pos < size) {
      if (size - pos < object_header) break;  // trailing free space, too small for an object header
      const std::uint64_t idx = little_endian(h.data() + pos, 2), osize = little_endian(h.data() + pos + 8, sizeof_size);
      std::uint64_t need = osize;  // the free-space object (index 0) counts its own header
      if (idx > 0) {
        if (osize > size - pos - object_header) throw corrupt(where + " holds an object larger than the collection");
        need = object_header + ((osize + 7) & ~std::uint64_t{7});
        if (!objects.emplace(idx, osize).second) throw corrupt(where + " holds object " + std::to_string(idx) + " twice");
      }
      if (need == 0) throw corrupt(where + " holds an empty free-space record");
      if (need > size - pos) break;
      pos += need;
    }
    return heaps.emplace(addr, std::move(objects)).first->second;
  };
  const std::size_t count = descriptors.size() / desc;
  for (std::size_t k = 0; k < count; ++k) {
    const std::uint8_t* p = descriptors.data() + k * desc;
    const std::uint64_t length = little_endian(p, 4), addr = little_endian(p + 4, sizeof_addr), idx = little_endian(p + 4 + sizeof_addr, 4);
    if (addr == 0) {
      if (length != 0) throw corrupt("element " + std::to_string(k) + " claims " + std::to_string(length) + " values but has no storage");
      continue;
    }
    const auto& objects = collection(addr);
    const auto it = objects.find(idx);
    if (it == objects.end()) throw corrupt("element " + std::to_string(k) + " refers to a heap object that does not exist");
    if (it->second != length * base_size)
      throw corrupt("element " + std::to_string(k) + " claims " + std::to_string(length) + " values but its heap object holds " +
                    std::to_string(it->second) + " bytes");
  }
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
  check_number_type(type.get(), what);
  check_storage(loc, name, ds.get(), n);
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

/// Chunk dimensions of about `target` elements, filling the trailing dimensions first.
inline std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, std::size_t target) {
  std::vector<hsize_t> chunk(dims.size(), 1);
  std::size_t remaining = std::max<std::size_t>(target, 1);
  for (std::size_t i = dims.size(); i-- > 0;) {
    chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(dims[i], remaining));
    remaining = std::max<std::size_t>(1, remaining / static_cast<std::size_t>(chunk[i]));
  }
  return chunk;
}

/// A dataset creation property list: contiguous for small data, chunked with gzip level 4 above 64 KiB.
inline Handle creation_plist(const std::vector<hsize_t>& dims, std::size_t elem_bytes, bool compress) {
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  std::size_t n = 1;
  for (hsize_t d : dims) n *= static_cast<std::size_t>(d);
  if (compress && !dims.empty() && n > 0 && n * elem_bytes >= (std::size_t{64} << 10)) {
    const auto chunk = chunk_dims(dims, (std::size_t{1} << 20) / elem_bytes);
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) H5Pset_deflate(dcpl.get(), 4);
  }
  return dcpl;
}

/// Replaces or creates a dataset `name` below `loc` with the given type and dims, writing `buf`.
inline Location create_and_write(const Location& loc, const std::string& name, hid_t file_type, hid_t mem_type,
                                 const std::vector<hsize_t>& dims, std::size_t elem_bytes, const void* buf);

/// Creates (replacing) the attribute `name` of `loc` with the given type and dims, writing `buf`.
inline void put_attribute(const Location& loc, const std::string& name, hid_t type, const std::vector<hsize_t>& dims, const void* buf) {
  const ErrorSilencer quiet;
  const std::string what = "attribute '" + name + "' of '" + loc.path() + "' in '" + loc.file_name() + "'";
  if (H5Aexists(loc.id(), name.c_str()) > 0 && H5Adelete(loc.id(), name.c_str()) < 0)
    throw file_error("cannot replace " + what + ": " + stack_message());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle a(space ? H5Acreate2(loc.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID, H5Aclose);
  if (!a) throw file_error("cannot create " + what + " (" + stack_message() + "); is the file open for writing?");
  bool empty = false;
  for (hsize_t d : dims) empty = empty || d == 0;
  if (!empty && H5Awrite(a.get(), type, buf) < 0) throw file_error("cannot write " + what + ": " + stack_message());
}

inline Handle utf8_string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------
// Reading.

/// The filter pipeline of the dataset `name` below `loc` (empty for an unfiltered dataset).
inline std::vector<FilterInfo> filters(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const Handle ds = detail::open_dataset(loc, name);
  return detail::pipeline(ds.get());
}

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

/// A numeric dataset opened for reading ranges of rows, the indices of its logical leading dimension, without
/// reading the rest: e.g. one MPI rank's bins of rabbit's `hlogk` (rabbit-likelihood-and-format.md §1.2–1.3).
/// Opening checks what `read_doubles` / `read_int64s` check except the size of the whole (type class, stored type,
/// storage, filters, `original_shape`); each `read` is one HDF5 hyperslab read, and checks its own size against the
/// read limit. Rows of the logical shape are a contiguous run of the row-major elements, so a dataset stored flat
/// with its shape in `original_shape` (rabbit's writeFlatInChunks) is read as a 1-D hyperslab. The reader refers to
/// `loc`, which must outlive it. Move-only; errors are `file_error`s naming the dataset and the rows.
template <class T>
class RowReader {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>, "RowReader reads double or int64 arrays");

 public:
  /// Opens the dataset `name` below `loc`. As `read_doubles`, integers convert to double only if `accept_integers`
  /// (ignored for int64, which takes any integer type and rejects floating point).
  RowReader(const Location& loc, std::string name, bool accept_integers = false) : loc_(&loc), name_(std::move(name)) {
    const ErrorSilencer quiet;
    d_ = detail::open_numeric<T>(loc, name_, accept_integers, false);
    if (d_.shape.empty()) throw file_error(d_.what + " holds a single value (a scalar), not rows; the file's layout is not the expected one");
    row_size_ = 1;
    for (std::size_t e = 1; e < d_.shape.size(); ++e) row_size_ *= d_.shape[e];
  }

  /// The logical shape (`original_shape` if present, else the dataspace's), known without reading.
  const std::vector<std::size_t>& shape() const { return d_.shape; }
  /// Extent of the leading dimension.
  std::size_t rows() const { return d_.shape[0]; }
  /// Elements per row (the product of the other extents).
  std::size_t row_size() const { return row_size_; }

  /// Rows [row0, row0 + nrows), shaped `[nrows, rest of the shape...]`.
  Array<T> read(std::size_t row0, std::size_t nrows) const {
    const ErrorSilencer quiet;
    if (row0 > rows() || nrows > rows() - row0)
      throw file_error("cannot read rows [" + std::to_string(row0) + ", " + std::to_string(row0 + nrows) + ") of " +
                       d_.what + ": its logical shape " + detail::shape_string(d_.shape) + " has " + std::to_string(rows()) +
                       " rows; the file does not match the sizes its other datasets give");
    const std::string part = "rows [" + std::to_string(row0) + ", " + std::to_string(row0 + nrows) + ") of ";
    Array<T> out;
    out.shape = d_.shape;
    out.shape[0] = nrows;
    const std::size_t count = nrows * row_size_;  // at most the stored element count
    if (count == 0) return out;
    detail::require_fits(*loc_, part + d_.what, count, sizeof(T));
    Handle file_space(H5Dget_space(d_.ds.get()), H5Sclose);
    const std::vector<hsize_t> dims(d_.dims.begin(), d_.dims.end());
    const auto lo = static_cast<hsize_t>(row0 * row_size_);
    if (!file_space || detail::select_flat(file_space.get(), dims, lo, lo + static_cast<hsize_t>(count)) < 0)
      throw file_error("cannot select " + part + d_.what + ": " + detail::stack_message());
    const auto mem_dim = static_cast<hsize_t>(count);
    Handle mem_space(H5Screate_simple(1, &mem_dim, nullptr), H5Sclose);
    if (!mem_space) throw file_error("cannot read " + part + d_.what + ": " + detail::stack_message());
    out.values = detail::allocate<T>(count, part + d_.what);
    detail::read_selection(*loc_, name_, d_.ds.get(), detail::native_type<T>(), mem_space.get(), file_space.get(), out.values.data(), part);
    return out;
  }

  /// Column `col` of rows [row0, row0 + nrows) of a dataset whose logical shape is 2-D, e.g. the cell positions of
  /// rabbit's `[nnz × 2]` hlogk_sparse/indices (§1.3). Reads those rows whole.
  std::vector<T> column(std::size_t col, std::size_t row0, std::size_t nrows) const {
    if (d_.shape.size() != 2 || col >= d_.shape[1])
      throw file_error(d_.what + " has logical shape " + detail::shape_string(d_.shape) + ", which has no column " + std::to_string(col) +
                       " (a 2-D shape was expected); the file's layout is not the expected one");
    const Array<T> rows_read = read(row0, nrows);
    std::vector<T> out(nrows);
    for (std::size_t r = 0; r < nrows; ++r) out[r] = rows_read.values[r * row_size_ + col];
    return out;
  }

 private:
  const Location* loc_;
  std::string name_;
  detail::NumericDataset d_;
  std::size_t row_size_ = 1;
};

/// A string dataset (variable-length or fixed-length, ASCII or UTF-8, any rank) as strings, row-major.
inline std::vector<std::string> read_strings(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  const auto [ds, type, what, cls] = detail::open_typed(loc, name);
  if (cls != H5T_STRING)
    throw file_error(what + " holds " + detail::class_name(cls) +
                     " values, expected strings; the file was not written by the expected program or was modified: regenerate it");
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  if (!space) throw file_error("cannot read the dataspace of " + what + ": " + detail::stack_message());
  const auto [n, dims] = detail::extent(space.get(), what);
  std::vector<std::string> out;
  if (n == 0) return out;
  if (const std::string missing = detail::missing_filters(loc, name, ds.get()); !missing.empty()) throw file_error(missing);
  const std::size_t stored_size = H5Tget_size(type.get());
  if (stored_size == 0 || stored_size > (std::size_t{1} << 20)) throw file_error(what + " has a corrupt string type; copy or regenerate the file");
  detail::check_storage(loc, name, ds.get(), n);
  const H5T_cset_t cset = H5Tget_cset(type.get());
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), cset == H5T_CSET_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
  const htri_t variable = H5Tis_variable_str(type.get());
  if (variable < 0) throw file_error("cannot read the type of " + what + ": " + detail::stack_message());
  detail::require_fits(loc, what, n, sizeof(char*));
  if (variable > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    // The characters' stored type must be one byte: HDF5 sizes its conversion buffers by it.
    Handle base(H5Tget_super(type.get()), H5Tclose);
    if (!base || H5Tget_class(base.get()) != H5T_INTEGER || H5Tget_size(base.get()) != 1)
      throw file_error(what + " has a corrupt string type; copy or regenerate the file");
    detail::verify_vlen_storage(loc, name, ds.get(), n, 1);
    auto ptrs = detail::allocate<char*>(n, what);  // value-initialised: null pointers until HDF5 fills them
    const detail::VlenGuard guard(mem.get(), space.get(), ptrs.data());
    detail::read_all(loc, name, ds.get(), mem.get(), ptrs.data());
    out.reserve(n);
    for (const char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    return out;
  }
  const std::size_t size = H5Tget_size(type.get());
  if (size == 0) throw file_error(what + " has a zero-length string type; the file is corrupt");
  detail::require_fits(loc, what, n, size);
  H5Tset_size(mem.get(), size);
  H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
  auto bytes = detail::allocate<char>(n * size, what);
  detail::read_all(loc, name, ds.get(), mem.get(), bytes.data());
  const bool space_padded = H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const char* p = bytes.data() + i * size;
    std::size_t len = 0;
    while (len < size && p[len] != '\0') ++len;
    if (space_padded)
      while (len > 0 && p[len - 1] == ' ') --len;
    out.emplace_back(p, len);
  }
  return out;
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
  detail::require_fits(loc, what, n, sizeof(hvl_t));
  detail::check_number_type(base.get(), what);
  const std::size_t base_size = H5Tget_size(base.get());
  detail::check_storage(loc, name, ds.get(), n);
  detail::verify_vlen_storage(loc, name, ds.get(), n, base_size);
  Handle mem(H5Tvlen_create(H5T_NATIVE_INT64), H5Tclose);
  auto rows = detail::allocate<hvl_t>(n, what);  // value-initialised: empty sequences until HDF5 fills them
  const detail::VlenGuard guard(mem.get(), space.get(), rows.data());
  detail::read_all(loc, name, ds.get(), mem.get(), rows.data());
  out.reserve(n);
  for (const hvl_t& r : rows) {
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
  s.resize(std::strlen(s.c_str()));
  if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD)
    while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// ------------------------------------------------------------------------------------------------
// Writing.

/// Creates the group `name` below `loc` (intermediate groups too); throws `file_error` if it exists.
inline Location create_group(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (exists(loc, name)) throw file_error(loc.describe("object", name) + " already exists; write each group once");
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle g(H5Gcreate2(loc.id(), name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g) throw file_error("cannot create " + loc.describe("group", name) + " (" + detail::stack_message() + "); is the file open for writing?");
  return Location(std::move(g), loc, detail::join_path(loc.path(), name));
}

/// Removes the link `name` below `loc` (a dataset or group; the space is not reclaimed).
inline void remove(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (H5Ldelete(loc.id(), name.c_str(), H5P_DEFAULT) < 0)
    throw file_error("cannot remove " + loc.describe("object", name) + ": " + detail::stack_message());
}

/// Removes the attribute `name` of `loc`.
inline void remove_attribute(const Location& loc, const std::string& name) {
  const ErrorSilencer quiet;
  if (H5Adelete(loc.id(), name.c_str()) < 0)
    throw file_error("cannot remove attribute '" + name + "' of '" + loc.path() + "' in '" + loc.file_name() + "': " + detail::stack_message());
}

/// Writes a double or int64 array as the dataset `name` (replacing one that exists) with its real N-D `shape`
/// (row-major; `{}` = a scalar; zero extents allowed); chunked and gzip-compressed (level 4) above 64 KiB.
/// Returns the dataset, e.g. to attach attributes.
template <class T>
Location write(const Location& loc, const std::string& name, std::span<const T> values, std::vector<std::size_t> shape) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>, "write stores double or int64 arrays");
  std::size_t n = 1;
  std::vector<hsize_t> dims;
  for (std::size_t d : shape) {
    n *= d;
    dims.push_back(static_cast<hsize_t>(d));
  }
  if (n != values.size())
    throw usage_error("hdf5::write of '" + loc.child_path(name) + "': shape " + detail::shape_string(shape) + " has " + std::to_string(n) +
                      " elements but " + std::to_string(values.size()) + " values were given");
  return detail::create_and_write(loc, name, detail::native_type<T>(), detail::native_type<T>(), dims, sizeof(T), values.data());
}

/// Writes a 1-D double array (`write` with shape `{values.size()}`).
inline Location write(const Location& loc, const std::string& name, std::span<const double> values) {
  return write<double>(loc, name, values, {values.size()});
}
/// Writes a double array with the given N-D shape.
inline Location write(const Location& loc, const std::string& name, std::span<const double> values, std::vector<std::size_t> shape) {
  return write<double>(loc, name, values, std::move(shape));
}
/// Writes a 1-D int64 array.
inline Location write(const Location& loc, const std::string& name, std::span<const std::int64_t> values) {
  return write<std::int64_t>(loc, name, values, {values.size()});
}
/// Writes an int64 array with the given N-D shape.
inline Location write(const Location& loc, const std::string& name, std::span<const std::int64_t> values, std::vector<std::size_t> shape) {
  return write<std::int64_t>(loc, name, values, std::move(shape));
}

/// Writes strings as a 1-D variable-length UTF-8 string dataset (replacing one that exists).
inline Location write_strings(const Location& loc, const std::string& name, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& s : values) ptrs.push_back(s.c_str());
  const Handle type = detail::utf8_string_type();
  return detail::create_and_write(loc, name, type.get(), type.get(), {static_cast<hsize_t>(values.size())}, sizeof(char*), ptrs.data());
}

/// Writes ragged int64 rows as a 1-D dataset of variable-length sequences (rabbit's hsystgroupidxs layout).
inline Location write_ragged(const Location& loc, const std::string& name, const std::vector<std::vector<std::int64_t>>& rows) {
  std::vector<hvl_t> vl(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    vl[i].len = rows[i].size();
    vl[i].p = const_cast<std::int64_t*>(rows[i].data());
  }
  const ErrorSilencer quiet;
  Handle type(H5Tvlen_create(H5T_NATIVE_INT64), H5Tclose);
  return detail::create_and_write(loc, name, type.get(), type.get(), {static_cast<hsize_t>(rows.size())}, sizeof(hvl_t), vl.data());
}

/// Writes (replacing) a scalar double attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, double value) {
  detail::put_attribute(loc, name, H5T_NATIVE_DOUBLE, {}, &value);
}
/// Writes (replacing) a scalar int64 attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, std::int64_t value) {
  detail::put_attribute(loc, name, H5T_NATIVE_INT64, {}, &value);
}
/// Writes (replacing) a scalar int64 attribute of `loc` from any other integer type.
template <std::integral I>
  requires(!std::same_as<I, bool> && !std::same_as<I, std::int64_t>)
void write_attribute(const Location& loc, const std::string& name, I value) {
  write_attribute(loc, name, static_cast<std::int64_t>(value));
}
/// Writes (replacing) a variable-length UTF-8 string attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, const std::string& value) {
  const ErrorSilencer quiet;
  const Handle type = detail::utf8_string_type();
  const char* p = value.c_str();
  detail::put_attribute(loc, name, type.get(), {}, &p);
}
/// Writes (replacing) a string attribute of `loc` from a C string.
inline void write_attribute(const Location& loc, const std::string& name, const char* value) {
  write_attribute(loc, name, std::string(value));
}
/// Writes (replacing) a 1-D int64 array attribute of `loc` (e.g. rabbit's original_shape, dense_shape).
inline void write_attribute(const Location& loc, const std::string& name, std::span<const std::int64_t> values) {
  detail::put_attribute(loc, name, H5T_NATIVE_INT64, {static_cast<hsize_t>(values.size())}, values.data());
}
/// Writes (replacing) a 1-D double array attribute of `loc`.
inline void write_attribute(const Location& loc, const std::string& name, std::span<const double> values) {
  detail::put_attribute(loc, name, H5T_NATIVE_DOUBLE, {static_cast<hsize_t>(values.size())}, values.data());
}

namespace detail {

inline Location create_and_write(const Location& loc, const std::string& name, hid_t file_type, hid_t mem_type,
                                 const std::vector<hsize_t>& dims, std::size_t elem_bytes, const void* buf) {
  const ErrorSilencer quiet;
  const std::string what = loc.describe("dataset", name);
  if (exists(loc, name) && H5Ldelete(loc.id(), name.c_str(), H5P_DEFAULT) < 0)
    throw file_error("cannot replace " + what + ": " + stack_message());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (!space) throw file_error("cannot create the dataspace of " + what + ": " + stack_message());
  const Handle dcpl = creation_plist(dims, elem_bytes, loc.compress());
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle ds(H5Dcreate2(loc.id(), name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!ds) throw file_error("cannot create " + what + " (" + stack_message() + "); is the file open for writing?");
  std::size_t n = 1;
  for (hsize_t d : dims) n *= static_cast<std::size_t>(d);
  if (n > 0 && H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    throw file_error("cannot write " + what + ": " + stack_message());
  return Location(std::move(ds), loc, join_path(loc.path(), name));
}

}  // namespace detail

}  // namespace hdf5
}  // namespace fitlib::io
