// SPDX-License-Identifier: MIT
// Output files written whole or not at all: checked before any work starts, written to a temporary
// file beside the target, flushed to disk, and renamed over it only once complete.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "fitlib/core/error.hpp"
#include "fitlib/io/hdf5.hpp"  // file_error

namespace fitlib::io {

/// The outputs were renamed into place, but flushing their directory to disk failed afterwards: readers see the new
/// files now, and only a crash before the system writes the directory could undo the replacement. A `file_error`, so
/// that a caller not telling it apart treats it as any failed write; fitlib-fit warns and counts the results written.
class not_durable_error : public file_error {
 public:
  using file_error::file_error;
};

class ReplacingFile;
inline void commit_all(std::initializer_list<ReplacingFile*> files);

namespace detail {

/// For tests: while set, the steps that make an output durable and visible are appended here in the
/// order they happen ("fsync FILE", "rename FROM TO", "fsync-directory DIR").
inline thread_local std::vector<std::string>* output_steps = nullptr;
inline void note_output_step(std::string step) {
  if (output_steps != nullptr) output_steps->push_back(std::move(step));
}

/// For tests: while nonzero, a directory's fsync fails with this errno (no file system fails one on demand).
inline thread_local int directory_sync_failure = 0;

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

/// The first `n` bytes of `s` or fewer, never ending inside a UTF-8 sequence.
inline std::string utf8_prefix(const std::string& s, std::size_t n) {
  if (n >= s.size()) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // s[n], the first byte left out, continues a character
  return s.substr(0, n);
}

/// `s` for a message: whole up to 160 bytes, else its start and its length.
inline std::string shown(const std::string& s) {
  return s.size() <= 160 ? s : utf8_prefix(s, 100) + "… (" + std::to_string(s.size()) + " bytes)";
}

/// The most bytes a name in the directory `dir` may have (pathconf's NAME_MAX; 255 where it cannot say,
/// as for a directory that does not exist).
inline std::size_t name_max(const std::filesystem::path& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<std::size_t>(n) : std::size_t{NAME_MAX};
}

/// Throws `file_error` (ENAMETOOLONG, with the limit) when a name in `path` has more bytes than its file
/// system allows, or the whole path more than PATH_MAX − 1.
inline void check_name_lengths(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path so_far;
  for (const fs::path& part : fs::path(path)) {
    const std::string name = part.string();
    const fs::path in = so_far.empty() ? fs::path(".") : so_far;
    so_far /= part;
    if (name.empty() || name == "/") continue;
    if (const std::size_t limit = name_max(in); name.size() > limit)
      throw file_error("'" + shown(path) + "' has a name of " + std::to_string(name.size()) + " bytes ('" + shown(name) + "'), more than the " +
                       std::to_string(limit) + " a name may have in '" + shown(in.string()) + "' (ENAMETOOLONG: " + std::strerror(ENAMETOOLONG) +
                       "); choose a shorter name");
  }
  if (path.size() >= PATH_MAX)
    throw file_error("'" + shown(path) + "' is " + std::to_string(path.size()) + " bytes long, more than the " + std::to_string(PATH_MAX - 1) +
                     " a path may have (ENAMETOOLONG: " + std::strerror(ENAMETOOLONG) + "); choose a shorter path");
}

/// "a character device", "a FIFO", … for a file that is not regular.
inline std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

inline file_error not_regular(const std::string& path, const std::string& kind) {
  return file_error("'" + shown(path) + "' is " + kind +
                    ", not a regular file: an output is written as a new file renamed onto its path, which would replace it; give the "
                    "path of a regular file (a new one, or one to replace)");
}

/// What writing an output at `path` replaces or creates: `path` itself (a regular file, or nothing yet),
/// or for a symbolic link the file at the end of its links, also where that does not exist yet (a dangling
/// link is written through, creating its target, as a shell's `>` does). Throws `file_error` naming the
/// reason where that is not a regular file (a device such as /dev/null, a FIFO, a socket, a directory:
/// renaming a new file onto it would replace it), where the links go round, or where a name is too long.
inline std::string output_target(const std::string& path) {
  namespace fs = std::filesystem;
  check_name_lengths(path);
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) return path;  // a new file (or a missing directory, which the caller reports)
    throw file_error("cannot look at '" + shown(path) + "' (" + std::strerror(e) + "); check the path and its directories' permissions");
  }
  if (!S_ISLNK(st.st_mode)) {
    if (S_ISREG(st.st_mode)) return path;
    throw not_regular(path, kind_of(st.st_mode));
  }
  if (::stat(path.c_str(), &st) == 0) {  // a link to an existing file: that file, whatever links lead to it
    std::error_code ec;
    const fs::path target = fs::canonical(path, ec);
    if (!S_ISREG(st.st_mode)) throw not_regular(path, "a symbolic link to " + (ec ? std::string() : "'" + shown(target.string()) + "', ") + kind_of(st.st_mode));
    if (ec) throw file_error("cannot resolve the symbolic link '" + shown(path) + "' (" + ec.message() + "); give the path of its target");
    return target.string();
  }
  const int e = errno;
  if (e == ELOOP)
    throw file_error("'" + shown(path) + "' is a symbolic link whose links go round (" + std::strerror(e) + "); give the path of a regular file");
  if (e != ENOENT) throw file_error("cannot follow the symbolic link '" + shown(path) + "' (" + std::strerror(e) + "); give the path of its target");
  // A dangling link: follow it link by link to the name that does not exist yet.
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) throw file_error("cannot read the symbolic link '" + shown(p) + "' (" + ec.message() + "); give the path of its target");
    p = to.is_absolute() ? to.string() : (fs::path(p).parent_path() / to).string();
    check_name_lengths(p);
    if (::lstat(p.c_str(), &st) != 0) {
      const int e2 = errno;
      if (e2 == ENOENT) return p;  // the name to create (a missing directory the caller reports)
      throw file_error("cannot follow the symbolic link '" + shown(path) + "' to '" + shown(p) + "' (" + std::strerror(e2) + "); give the path of a regular file");
    }
    if (!S_ISLNK(st.st_mode)) {  // created meanwhile
      if (S_ISREG(st.st_mode)) return p;
      throw not_regular(path, "a symbolic link to '" + shown(p) + "', " + kind_of(st.st_mode));
    }
  }
  throw file_error("'" + shown(path) + "' is a symbolic link that leads through more than 40 links (" + std::strerror(ELOOP) +
                   "); give the path of a regular file");
}

/// Creates a new empty file beside `path`, `.<name>.XXXXXX.tmp` (mkstemps: a random name created with
/// O_EXCL, so no other process, on this machine or another sharing the directory, gets it); returns its
/// path. `<name>` is `path`'s name cut short where the whole would exceed the directory's name limit
/// (NAME_MAX, 255 bytes on most file systems) or PATH_MAX, so that any name the file system takes can be
/// written. Throws `file_error` naming the directory and the cause.
inline std::string create_temporary_beside(const std::string& path) {
  const std::filesystem::path dir = directory_of(path);
  constexpr std::size_t extra = 12;  // '.' before, ".XXXXXX.tmp" after
  const std::string prefix = std::filesystem::path(path).parent_path().empty() ? std::string() : (dir / "").string();
  const std::size_t limit = name_max(dir);
  std::size_t room = limit > extra ? limit - extra : 0;
  if (prefix.size() + extra + 1 < PATH_MAX) room = std::min(room, PATH_MAX - 1 - prefix.size() - extra);
  std::string name = prefix + "." + utf8_prefix(std::filesystem::path(path).filename().string(), room) + ".XXXXXX.tmp";
  const int fd = ::mkstemps(name.data(), 4);
  if (fd < 0) {
    const int e = errno;
    if (e == ENAMETOOLONG) {
      check_name_lengths(path);  // names the name that is too long
      throw file_error("cannot create a file in '" + shown(dir.string()) + "' (ENAMETOOLONG: " + std::strerror(e) + "); choose a shorter path");
    }
    throw file_error("cannot create a file in '" + shown(dir.string()) + "' (" + std::strerror(e) + "); choose a writable directory");
  }
  const mode_t mask = ::umask(0);  // mkstemps makes 0600; a results file gets the permissions any new file would
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  return name;
}

/// fsync of the file or directory `path`. Errors a file system gives where it cannot sync (EINVAL, EROFS)
/// are not failures; a directory that cannot be opened is skipped. Throws `file_error` saying `what`.
inline void sync_path(const std::string& path, bool directory, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) {
    const int e = errno;
    if (directory) return;  // e.g. a directory one may write but not read: nothing better can be done
    throw file_error("cannot reopen '" + path + "' to flush " + what + " to disk (" + std::strerror(e) + ")");
  }
  bool ok = ::fsync(fd) == 0;
  int e = errno;
  if (directory && directory_sync_failure != 0) {
    ok = false;
    e = directory_sync_failure;
  }
  ::close(fd);
  note_output_step((directory ? "fsync-directory " : "fsync ") + path);
  if (!ok && e != EINVAL && e != EROFS) throw file_error("cannot flush " + what + " '" + path + "' to disk (" + std::strerror(e) + "); the disk may be full or failing");
}

}  // namespace detail

/// Checks, before any work, that `path` can be written as an output: it is a regular file, a symbolic
/// link to one, or a new name (a device such as /dev/null, a FIFO, a socket or a directory is refused, as
/// writing would replace it; a dangling link is written through, at its target), no name in it is longer
/// than the file system allows, the directory it goes into exists and takes a new file (tried by creating
/// and removing one), and it is none of `inputs` (so an input is never overwritten). `what` names the
/// option in messages ("-o/--output"). Throws `usage_error`.
inline void check_output_path(const std::string& path, const std::string& what, const std::vector<std::string>& inputs = {}) {
  namespace fs = std::filesystem;
  if (path.empty()) throw usage_error(what + " is empty; give the path of the results file");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw usage_error(what + " '" + path + "' is a directory; give a file name, e.g. " + (fs::path(path) / "fitresults.hdf5").string());
  for (const auto& in : inputs)
    if (detail::resolved(in) == detail::resolved(path))
      throw usage_error(what + " '" + path + "' is the input '" + in + "', which writing the results would destroy; choose another output path");
  std::string target;
  try {
    target = detail::output_target(path);
  } catch (const file_error& e) {
    throw usage_error(what + " " + e.what());
  }
  const std::string named = what + " '" + detail::shown(path) + "'" + (target == path ? "" : " (a symbolic link to '" + detail::shown(target) + "')");
  const fs::path dir = detail::directory_of(target);
  if (!fs::is_directory(dir, ec))
    throw usage_error(named + ": the directory '" + dir.string() + "' does not exist; create it (mkdir -p) or choose another path");
  try {
    fs::remove(detail::create_temporary_beside(target), ec);
  } catch (const file_error& e) {
    throw usage_error(named + ": " + e.what());
  }
}

/// A file written under a temporary name beside `path` and renamed onto `path` by `commit()`, so readers
/// see either the old file or the complete new one, never a partial write: an interrupted run, a full disk
/// or a failed write leaves any existing `path` as it was, and concurrent writers each publish a whole
/// file (the last rename wins). Without `commit()` the temporary file is removed (a process killed by a
/// signal leaves it behind, as `.<name>.XXXXXX.tmp`, `<name>` cut short where the name limit needs it).
/// A `path` that is a symbolic link is replaced at its target, as writing through it would, also when the
/// target does not exist yet; a `path` that is not a regular file (a device, a FIFO) is refused
/// (`file_error`), since the rename would replace it. Several files that belong together are published
/// with `commit_all`, which flushes them all to disk before it renames the first.
class ReplacingFile {
 public:
  explicit ReplacingFile(const std::string& path) : path_(detail::output_target(path)), temporary_(detail::create_temporary_beside(path_)) {}
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
  /// The path the file will have (a symbolic link's target).
  const std::string& path() const { return path_; }

  /// Writes `bytes` to the temporary file (replacing what it held) and flushes it to disk (fsync); throws
  /// `file_error` naming `what`.
  void write(std::span<const std::byte> bytes, const std::string& what) {
    flushed_ = false;
    const int fd = ::open(temporary_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      throw file_error("cannot write " + what + " '" + path_ + "' (" + std::strerror(e) + "); check that its directory exists and is writable");
    }
    const auto failed = [&](int e, const std::string& doing) {  // doing: "writing X" or "flushing X to disk"
      ::close(fd);
      return file_error(doing + " failed (" + std::strerror(e) + "; disk full?); any earlier file at that path is untouched");
    };
    const char* p = reinterpret_cast<const char*>(bytes.data());
    for (std::size_t left = bytes.size(); left > 0;) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = n == 0 ? EIO : errno;
        throw failed(e, "writing " + what + " '" + path_ + "'");
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
      const int e = errno;
      if (e != EINVAL && e != EROFS) throw failed(e, "flushing " + what + " '" + path_ + "' to disk");
    }
    detail::note_output_step("fsync " + temporary_);
    if (::close(fd) != 0 && errno != EINTR) {  // where a network file system reports a full disk
      const int e = errno;
      throw file_error("writing " + what + " '" + path_ + "' failed (" + std::strerror(e) + "; disk full?); any earlier file at that path is untouched");
    }
    flushed_ = true;
  }
  void write(std::string_view text, const std::string& what) { write(std::as_bytes(std::span(text.data(), text.size())), what); }

  /// Flushes the temporary file to disk (fsync), for a caller that wrote it through `temporary()`;
  /// `write` does it itself, and `commit` does it where neither did.
  void flush() {
    detail::sync_path(temporary_, false, "the file");
    flushed_ = true;
  }

  /// Flushes the temporary file to disk (unless `write` or `flush` did), renames it onto `path` and
  /// flushes the directory, so the new name survives a crash; throws `file_error` on failure (the
  /// temporary file is then removed, and `path` is untouched), `not_durable_error` where only the
  /// directory's flush failed (`path` is then replaced).
  void commit() { commit_all({this}); }

 private:
  friend void commit_all(std::initializer_list<ReplacingFile*> files);

  std::string path_, temporary_;
  bool flushed_ = false, committed_ = false;
};

/// Publishes files that belong together (fitlib-fit's results and JSON summary): flushes every temporary
/// file to disk first (those `write` has not), then renames them into place one right after the other,
/// with nothing in between, then flushes their directories. A kill between two renames (a window of one
/// system call) still leaves the earlier files new and the later ones old: no file system renames two
/// files at once. Null entries are skipped. Throws `file_error` saying which files were already replaced
/// where a rename fails; `not_durable_error` where every rename was done and only a directory's flush failed
/// (every directory is still tried), as the files are then in place.
inline void commit_all(std::initializer_list<ReplacingFile*> files) {
  for (ReplacingFile* f : files)
    if (f != nullptr && !f->flushed_) f->flush();
  std::string replaced;
  std::vector<std::string> dirs;
  for (ReplacingFile* f : files) {
    if (f == nullptr) continue;
    if (std::rename(f->temporary_.c_str(), f->path_.c_str()) != 0) {
      const int e = errno;
      throw file_error("cannot rename '" + f->temporary_ + "' to '" + f->path_ + "' (" + std::strerror(e) + "); '" + f->path_ + "' is untouched" +
                       (replaced.empty() ? std::string() : ", but " + replaced + " already holds this run's output"));
    }
    f->committed_ = true;
    detail::note_output_step("rename " + f->temporary_ + " " + f->path_);
    replaced += (replaced.empty() ? "'" : " and '") + f->path_ + "'";
    const std::string dir = detail::directory_of(f->path_).string();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  }
  std::string unflushed;
  for (const std::string& dir : dirs) {
    try {
      detail::sync_path(dir, true, "the directory");
    } catch (const file_error& e) {
      if (unflushed.empty()) unflushed = e.what();
    }
  }
  if (!unflushed.empty())
    throw not_durable_error(replaced + " replaced, but " + unflushed + ": a crash before the system writes the directory could undo the replacement");
}

/// Writes `bytes` (or text) to `path` whole or not at all (`ReplacingFile`); throws `file_error` naming `what`.
template <class Bytes>
void write_file(const std::string& path, const Bytes& bytes, const std::string& what) {
  ReplacingFile out(path);
  out.write(bytes, what);
  out.commit();
}

}  // namespace fitlib::io
