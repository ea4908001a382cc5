// SPDX-License-Identifier: MIT
// Output files written whole or not at all: checked before any work starts, written to a temporary
// file beside the target and renamed over it only once complete.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/io/hdf5.hpp"  // file_error

namespace fitlib::io {

namespace detail {

/// `path` resolved as far as it exists (symbolic links followed), for comparing two paths.
inline std::filesystem::path resolved(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? std::filesystem::path(path).lexically_normal() : p;
}

/// The directory a file `path` goes into ("." for a bare name).
inline std::filesystem::path directory_of(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

/// Creates a new empty file beside `path`, `.<name>.XXXXXX.tmp` (mkstemps: a random name created with
/// O_EXCL, so no other process, on this machine or another sharing the directory, gets it); returns its
/// path. Throws `file_error` naming the directory and the cause.
inline std::string create_temporary_beside(const std::string& path) {
  const auto p = std::filesystem::path(path);
  std::string name = (directory_of(path) / ("." + p.filename().string() + ".XXXXXX.tmp")).string();
  const int fd = ::mkstemps(name.data(), 4);
  if (fd < 0) {
    const int e = errno;
    throw file_error("cannot create a file in '" + directory_of(path).string() + "' (" + std::strerror(e) + "); choose a writable directory");
  }
  const mode_t mask = ::umask(0);  // mkstemps makes 0600; a results file gets the permissions any new file would
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  return name;
}

}  // namespace detail

/// Checks, before any work, that `path` can be written as an output: its directory exists and takes a new
/// file (tried by creating and removing one), `path` is not a directory, and it is none of `inputs` (so an
/// input is never overwritten). `what` names the option in messages ("-o/--output"). Throws `usage_error`.
inline void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs = {}) {
  namespace fs = std::filesystem;
  if (path.empty()) throw usage_error(what + " is empty; give the path of the results file");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw usage_error(what + " '" + path + "' is a directory; give a file name, e.g. " + (fs::path(path) / "fitresults.hdf5").string());
  for (const auto& in : inputs)
    if (detail::resolved(in) == detail::resolved(path))
      throw usage_error(what + " '" + path + "' is the input '" + in + "', which writing the results would destroy; choose another output path");
  const fs::path dir = detail::directory_of(path);
  if (!fs::is_directory(dir, ec))
    throw usage_error(what + " '" + path + "': the directory '" + dir.string() + "' does not exist; create it (mkdir -p) or choose another path");
  try {
    fs::remove(detail::create_temporary_beside(path), ec);
  } catch (const file_error& e) {
    throw usage_error(what + " '" + path + "': " + e.what());
  }
}

/// A file written under a temporary name beside `path` and renamed onto `path` by `commit()`, so readers
/// see either the old file or the complete new one, never a partial write: an interrupted run, a full disk
/// or a failed write leaves any existing `path` as it was, and concurrent writers each publish a whole
/// file (the last rename wins). Without `commit()` the temporary file is removed (a process killed by a
/// signal leaves it behind, as `.<name>.XXXXXX.tmp`). A `path` that is a symbolic link is replaced at its
/// target, as writing through it would.
class ReplacingFile {
 public:
  explicit ReplacingFile(const std::string& path) : path_(target_of(path)), temporary_(detail::create_temporary_beside(path_)) {}
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;
  ~ReplacingFile() {
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove(temporary_, ec);
    }
  }

  /// The path to write to now.
  const std::string& temporary() const { return temporary_; }
  /// The path the file will have.
  const std::string& path() const { return path_; }

  /// Writes `bytes` to the temporary file (replacing what it held); throws `file_error` naming `what`.
  void write(std::span<const std::byte> bytes, const std::string& what) const {
    std::ofstream f(temporary_, std::ios::binary | std::ios::trunc);
    if (!f) throw file_error("cannot write " + what + " '" + path_ + "'; check that its directory exists and is writable");
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.close();  // where a network file system reports a full disk
    if (!f) throw file_error("writing " + what + " '" + path_ + "' failed (disk full?); any earlier file at that path is untouched");
  }
  void write(std::string_view text, const std::string& what) const { write(std::as_bytes(std::span(text.data(), text.size())), what); }

  /// Makes the written temporary file durable and renames it onto `path`; throws `file_error` on failure
  /// (the temporary file is then removed, and `path` is untouched).
  void commit() {
    sync(temporary_);
    if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      throw file_error("cannot rename '" + temporary_ + "' to '" + path_ + "' (" + std::strerror(e) + ")");
    }
    committed_ = true;
  }

 private:
  /// fsync of a finished file, so that a crash after the rename cannot leave a file that has a name but no data.
  static void sync(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      const int e = errno;
      throw file_error("cannot reopen '" + path + "' to flush it to disk (" + std::strerror(e) + ")");
    }
    const bool ok = ::fsync(::fileno(f)) == 0;
    const int e = errno;
    std::fclose(f);
    if (!ok && e != EINVAL && e != EROFS) throw file_error("cannot flush '" + path + "' to disk (" + std::strerror(e) + "); the disk may be full");
  }

  static std::string target_of(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(path, ec)) return path;
    const auto target = std::filesystem::canonical(path, ec);
    return ec ? path : target.string();
  }

  std::string path_, temporary_;
  bool committed_ = false;
};

/// Writes `bytes` (or text) to `path` whole or not at all (`ReplacingFile`); throws `file_error` naming `what`.
template <class Bytes>
void write_file(const std::string& path, const Bytes& bytes, const std::string& what) {
  ReplacingFile out(path);
  out.write(bytes, what);
  out.commit();
}

}  // namespace fitlib::io
