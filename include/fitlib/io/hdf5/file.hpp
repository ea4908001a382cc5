// SPDX-License-Identifier: MIT
// HDF5 files and the objects in them: opening and creating files (on disk or in memory), the read limit that
// protects readers, and finding, opening and listing groups and datasets.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "fitlib/io/hdf5/handle.hpp"

namespace fitlib::io::hdf5 {

/// Limits that protect a reader from files that declare more data than they could hold, and how a
/// writer stores large arrays.
struct FileOptions {
  /// Largest array (in bytes, after conversion to double or int64) one read may allocate; 0 = the machine's
  /// physical memory. Datasets are chunked and unwritten chunks read as zeros, so a small corrupt file can
  /// declare terabytes; this turns such a declaration into a `file_error` instead of an allocation failure.
  std::size_t max_read_bytes = 0;
  /// Largest ratio of a dataset's declared size (its elements times their stored size) to the bytes it occupies in
  /// the file, beyond a free first `unstored_read_bytes`. Each read allocates by the declared size, and a dataspace
  /// is a few bytes of an object header that a damaged file can set to anything, while chunks that are not stored
  /// read back as fill values: a one-byte change to a 44 kB example tensor declared 1.8·10⁹ strings, and the reader
  /// went for them. The default is twice deflate's limit (about 1032:1), so a fully written gzip dataset always
  /// reads; where the dataset stores little or nothing legitimately (rabbit's writer leaves all-zero chunks
  /// unwritten, Blosc2 stores a constant chunk in a few hundred bytes) `unstored_file_multiple` times the file's
  /// size is allowed too. A dense tensor almost all zeros beyond both: write it sparse (rabbit's
  /// TensorWriter(sparse=True)) or raise this. The stored size counts at most the file's size. Checked by every
  /// dataset read (io/hdf5/read.hpp, detail::require_stored).
  double max_compression_ratio = 2048;
  /// Writes compress arrays of 64 KiB and more with gzip (worth it for templates, not for dense
  /// matrices of full-precision numbers such as a covariance).
  bool compress = true;

  /// Throws `std::invalid_argument` naming a field outside its range.
  void validate() const {
    if (!(max_compression_ratio >= 1))  // also NaN
      throw std::invalid_argument("FileOptions::max_compression_ratio is " + std::to_string(max_compression_ratio) +
                                  "; it must be at least 1 (at 1 no dataset may declare more than it stores, plus unstored_read_bytes)");
  }
};

/// What a dataset may declare beyond `FileOptions::max_compression_ratio` times its stored bytes, so that small
/// datasets that are unwritten (fill values only) stay readable.
inline constexpr std::size_t unstored_read_bytes = std::size_t{64} << 10;
/// What a numeric dataset may declare, as a multiple of the file's size, whatever it stores itself: rabbit's writer leaves
/// all-zero chunks unwritten (an all-zero `hdata_obs` of 10⁴ bins stores nothing) and Blosc2 stores a constant
/// 4 MiB chunk in a few hundred bytes, so a dataset's own stored bytes bound legitimate data too tightly there.
/// A damaged dataspace of a small file still cannot declare more than 64 times the file.
inline constexpr std::uint64_t unstored_file_multiple = 64;
/// The largest chunk (in stored bytes) a dataset may have beyond what its stored bytes allow: HDF5 decodes a chunk
/// whole, and writers give small resizable datasets chunks larger than themselves (rabbit's meta pickle: 1 MiB).
inline constexpr std::size_t unstored_chunk_bytes = std::size_t{16} << 20;

namespace detail {

/// What a `Location` knows about its file, shared by every object opened from it.
struct FileInfo {
  std::string name;  ///< the path (or the image's name), for messages
  std::size_t max_read_bytes = 0;
  double max_compression_ratio = 2048;
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

inline std::string join_path(const std::string& base, const std::string& name) {
  if (name.empty()) return base;
  if (name.front() == '/') return name;
  if (base.empty()) return name;
  return base.back() == '/' ? base + name : base + "/" + name;
}

/// A unique name for an in-memory file image (HDF5 identifies open files by name).
inline std::string image_name(const std::string& name) {
  static std::atomic<unsigned long long> counter{0};
  return name + "#image" + std::to_string(counter.fetch_add(1));
}

/// Throws the `file_error` that says why `path` cannot be opened as an HDF5 file, where a look from outside HDF5
/// can tell (missing, a directory, unreadable, empty, no HDF5 signature), each with its remedy: HDF5 would report
/// them all as one failure to open.
inline void check_openable(const std::string& path) {
  namespace fs = std::filesystem;
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
}

/// The `file_error` for a file that passed `check_openable` and that HDF5 still could not open, from HDF5's
/// error stack: truncated, else corrupt or locked.
inline file_error open_failure(const std::string& path) {
  const std::string why = stack_message();
  const bool truncated = why.find("truncated") != std::string::npos;
  return file_error("HDF5 cannot open '" + path + "' (" + why + "); " +
                    (truncated ? std::string("the file is truncated, probably by an interrupted write or copy: copy or regenerate it")
                               : std::string("the file is corrupt or truncated, or (when writing) locked by another program: "
                                             "copy or regenerate it")));
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
  /// FileOptions::max_compression_ratio of the file this object belongs to.
  double max_compression_ratio() const { return info_->max_compression_ratio; }
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
    opts.validate();
    const ErrorSilencer quiet;
    detail::check_openable(path);
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    Handle f(H5Fopen(path.c_str(), access == Access::read_write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl ? fapl.get() : H5P_DEFAULT),
             H5Fclose);
    if (!f) throw detail::open_failure(path);
    return File(std::move(f), path, opts);
  }

  /// Creates a file, truncating an existing one; throws `file_error` if it cannot be created.
  static File create(const std::string& path, FileOptions opts = {}) {
    opts.validate();
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
    opts.validate();
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
    opts.validate();
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
    info->max_compression_ratio = opts.max_compression_ratio;
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

/// Throws unless `count` elements of `elem` bytes fit the file's read limit.
inline void require_fits(const Location& loc, const std::string& what, std::size_t count, std::size_t elem) {
  if (count > loc.max_read_bytes() / elem)
    throw file_error(what + " declares " + std::to_string(count) + " elements (" + std::to_string(count) + " × " + std::to_string(elem) +
                     " bytes), more than the read limit of " + std::to_string(loc.max_read_bytes()) +
                     " bytes; the file is corrupt, or raise FileOptions::max_read_bytes");
}

}  // namespace detail

}  // namespace fitlib::io::hdf5
