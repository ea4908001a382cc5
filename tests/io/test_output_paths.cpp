// SPDX-License-Identifier: MIT
// Output paths (include/fitlib/io/output_file.hpp): what -o may be (a device, a FIFO or a socket is
// refused and left as it was; a dangling link is written through at its target), the order in which
// outputs reach the disk (both files flushed before the first rename; a failed flush after the renames
// told apart), and names up to the file system's limit (the temporary's name is cut short, never the user's).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "file_bytes.hpp"
#include "fitlib/io/output_file.hpp"
#include "temp_dir.hpp"

using namespace fitlib;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

/// Files in `dir` whose names start with '.' (the temporary files of ReplacingFile).
std::size_t hidden_files(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().front() == '.';
  return n;
}

/// The file type bits of `path` itself (not of a link's target); 0 where it does not exist.
mode_t type_of(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

void write(const std::string& path, std::string_view text) { io::write_file(path, text, "the results file"); }

/// Records the steps of output_file.hpp that make files durable and visible while it lives.
struct StepRecorder {
  std::vector<std::string> steps;
  StepRecorder() { io::detail::output_steps = &steps; }
  ~StepRecorder() { io::detail::output_steps = nullptr; }
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;
};

/// While it lives, every directory flush fails with `error` (io::detail::directory_sync_failure), and only then.
struct FailingDirectorySync {
  explicit FailingDirectorySync(int error) { io::detail::directory_sync_failure = error; }
  ~FailingDirectorySync() { io::detail::directory_sync_failure = 0; }
  FailingDirectorySync(const FailingDirectorySync&) = delete;
  FailingDirectorySync& operator=(const FailingDirectorySync&) = delete;
};

std::size_t name_max(const fs::path& dir) { return static_cast<std::size_t>(::pathconf(dir.c_str(), _PC_NAME_MAX)); }

}  // namespace

TEST_CASE("output paths: a FIFO, a socket or a device at the output is refused before any work, and left as it was", "[io][output]") {
  test::TempDir dir;

  const std::string fifo = dir / "fit.hdf5";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(io::check_output_path(fifo, "-o"), Contains("FIFO") && Contains("not a regular file") && Contains("-o '"));
  CHECK_THROWS_AS(write(fifo, "results"), io::file_error);
  CHECK(type_of(fifo) == S_IFIFO);

  // A link to the FIFO: the link and the FIFO both stay.
  const std::string link = dir / "link.hdf5";
  fs::create_symlink("fit.hdf5", link);
  CHECK_THROWS_WITH(io::check_output_path(link, "-o"), Contains("symbolic link to") && Contains("FIFO"));
  CHECK_THROWS_AS(write(link, "results"), io::file_error);
  CHECK(type_of(link) == S_IFLNK);
  CHECK(type_of(fifo) == S_IFIFO);

  // A Unix-domain socket (where the scratch directory's path fits a socket address).
  const std::string sock = dir / "s.hdf5";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (sock.size() < sizeof addr.sun_path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
    const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    REQUIRE(bound);
    CHECK_THROWS_WITH(io::check_output_path(sock, "-o"), Contains("socket") && Contains("not a regular file"));
    CHECK_THROWS_AS(write(sock, "results"), io::file_error);
    CHECK(type_of(sock) == S_IFSOCK);
  }

  // /dev/null: only checked (a regression must not replace the machine's /dev/null when run as root).
  CHECK_THROWS_WITH(io::check_output_path("/dev/null", "-o"), Contains("character device") && Contains("not a regular file"));
  CHECK_THROWS_WITH(io::ReplacingFile("/dev/null"), Contains("character device"));
  CHECK(type_of("/dev/null") == S_IFCHR);

  // A device node of our own, which only root can make (and not in every container).
  const std::string dev = dir / "null.hdf5";
  const bool root = ::geteuid() == 0;
  if (root && ::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    CHECK_THROWS_WITH(io::check_output_path(dev, "-o"), Contains("character device"));
    CHECK_THROWS_AS(write(dev, "results"), io::file_error);
    CHECK(type_of(dev) == S_IFCHR);
  } else {
    WARN((root ? "mknod refused (" + std::string(std::strerror(errno)) + ")" : std::string("not root")) << ": a device node at -o is not tried");
  }
  CHECK(hidden_files(dir.path) == 0);
}

TEST_CASE("output paths: a dangling symbolic link is written through, at its target", "[io][output]") {
  test::TempDir dir;
  fs::create_directory(dir.path / "real");

  // Relative link, target missing in an existing directory.
  const std::string link = dir / "fit.hdf5";
  fs::create_symlink("real/fit.hdf5", link);
  CHECK_NOTHROW(io::check_output_path(link, "-o"));
  CHECK(!fs::exists(dir / "real/fit.hdf5"));
  write(link, "first");
  CHECK(type_of(link) == S_IFLNK);
  CHECK(test::file_text(dir / "real/fit.hdf5") == "first");
  // Now a link to a regular file: replaced at its target as before.
  write(link, "second");
  CHECK(type_of(link) == S_IFLNK);
  CHECK(test::file_text(dir / "real/fit.hdf5") == "second");

  // A chain of links, the last absolute and dangling.
  const std::string a = dir / "a.hdf5", b = dir / "b.hdf5";
  fs::create_symlink("b.hdf5", a);
  fs::create_symlink(dir.path / "real" / "chain.hdf5", b);
  CHECK_NOTHROW(io::check_output_path(a, "-o"));
  write(a, "chained");
  CHECK(type_of(a) == S_IFLNK);
  CHECK(type_of(b) == S_IFLNK);
  CHECK(test::file_text(dir / "real/chain.hdf5") == "chained");
  CHECK(hidden_files(dir.path) == 0);
  CHECK(hidden_files(dir.path / "real") == 0);

  // A dangling link into a directory that does not exist: refused, naming the link's target.
  const std::string lost = dir / "lost.hdf5";
  fs::create_symlink("nowhere/fit.hdf5", lost);
  CHECK_THROWS_WITH(io::check_output_path(lost, "-o"), Contains("symbolic link to") && Contains("nowhere") && Contains("does not exist"));
  CHECK_THROWS_AS(write(lost, "results"), io::file_error);
  CHECK(type_of(lost) == S_IFLNK);

  // Links that go round: refused with the reason.
  const std::string loop1 = dir / "loop1.hdf5", loop2 = dir / "loop2.hdf5";
  fs::create_symlink("loop2.hdf5", loop1);
  fs::create_symlink("loop1.hdf5", loop2);
  CHECK_THROWS_WITH(io::check_output_path(loop1, "-o"), Contains("symbolic link") && Contains("go round"));
  CHECK_THROWS_AS(write(loop1, "results"), io::file_error);
  CHECK(type_of(loop1) == S_IFLNK);
  CHECK(hidden_files(dir.path) == 0);
}

TEST_CASE("output paths: files published together are all flushed to disk before the first rename, the directory after the last", "[io][output]") {
  test::TempDir dir;
  {
    StepRecorder rec;
    io::ReplacingFile results(dir / "fit.hdf5");
    results.write(std::string_view("results"), "the results file");
    std::optional<io::ReplacingFile> summary;
    summary.emplace(dir / "fit.json").write(std::string_view("{}"), "the JSON summary");
    io::commit_all({&results, summary ? &*summary : nullptr});
    REQUIRE(rec.steps.size() == 5);
    CHECK(rec.steps[0] == "fsync " + results.temporary());
    CHECK(rec.steps[1] == "fsync " + summary->temporary());
    CHECK(rec.steps[2] == "rename " + results.temporary() + " " + results.path());
    CHECK(rec.steps[3] == "rename " + summary->temporary() + " " + summary->path());
    CHECK(rec.steps[4] == "fsync-directory " + dir.path.string());
  }
  CHECK(test::file_text(dir / "fit.hdf5") == "results");
  CHECK(test::file_text(dir / "fit.json") == "{}");
  CHECK(hidden_files(dir.path) == 0);

  {  // A file written through temporary() (as HDF5 writes a tensor) is flushed by commit, before its rename.
    StepRecorder rec;
    io::ReplacingFile out(dir / "tensor.hdf5");
    std::ofstream(out.temporary(), std::ios::binary) << "tensor";
    out.commit();
    REQUIRE(rec.steps.size() == 3);
    CHECK(rec.steps[0] == "fsync " + out.temporary());
    CHECK(rec.steps[1] == "rename " + out.temporary() + " " + out.path());
    CHECK(rec.steps[2] == "fsync-directory " + dir.path.string());
  }
  CHECK(test::file_text(dir / "tensor.hdf5") == "tensor");

  {  // The second rename fails: the message says that the first file was already replaced.
    io::ReplacingFile results(dir / "fit.hdf5");
    results.write(std::string_view("new results"), "the results file");
    io::ReplacingFile summary(dir / "fit.json");
    summary.write(std::string_view("{\"new\": 1}"), "the JSON summary");
    fs::remove(dir / "fit.json");
    fs::create_directories(dir.path / "fit.json" / "in the way");  // renaming a file onto a non-empty directory fails
    CHECK_THROWS_WITH(io::commit_all({&results, &summary}), Contains("fit.json") && Contains("fit.hdf5' already holds this run's output"));
  }
  CHECK(test::file_text(dir / "fit.hdf5") == "new results");
  CHECK(hidden_files(dir.path) == 0);

  {  // Only the directory's flush fails, after both renames: a not_durable_error, told apart from a failed write.
    fs::remove_all(dir.path / "fit.json");
    io::ReplacingFile results(dir / "fit.hdf5");
    results.write(std::string_view("durable?"), "the results file");
    io::ReplacingFile summary(dir / "fit.json");
    summary.write(std::string_view("{}"), "the JSON summary");
    const FailingDirectorySync failing(EIO);
    try {
      io::commit_all({&results, &summary});
      FAIL("a failed directory flush was not reported");
    } catch (const io::not_durable_error& e) {
      CHECK_THAT(std::string(e.what()), Contains("fit.hdf5' and '") && Contains("fit.json' replaced") && Contains("could undo the replacement"));
    }
  }
  CHECK(test::file_text(dir / "fit.hdf5") == "durable?");
  CHECK(test::file_text(dir / "fit.json") == "{}");
  CHECK(hidden_files(dir.path) == 0);
}

TEST_CASE("output paths: a name up to the file system's limit is written, a longer one refused as too long", "[io][output]") {
  test::TempDir dir;
  const std::size_t limit = name_max(dir.path);
  REQUIRE(limit > 40);

  // Names that leave the temporary's 12 extra bytes no room (244–255 bytes on ext4), and some that do.
  for (std::size_t len = limit - 14; len <= limit; ++len) {
    const std::string name = std::string(len - 5, 'a') + ".hdf5";
    const std::string path = dir / name;
    INFO("a name of " << len << " bytes");
    CHECK_NOTHROW(io::check_output_path(path, "-o"));
    {
      io::ReplacingFile out(path);
      const std::string tmp = fs::path(out.temporary()).filename().string();
      CHECK(tmp.size() <= limit);
      CHECK(tmp.front() == '.');
      CHECK(tmp.substr(tmp.size() - 4) == ".tmp");
    }
    REQUIRE_NOTHROW(write(path, name));
    CHECK(test::file_text(path) == name);
    fs::remove(path);
  }
  CHECK(hidden_files(dir.path) == 0);

  // The temporary's name is cut between characters, never inside one: "é" is 2 bytes in UTF-8.
  std::string accented;
  while (accented.size() + 2 + 5 <= limit) accented += "\xc3\xa9";
  accented += ".hdf5";
  {
    io::ReplacingFile out(dir / accented);
    const std::string tmp = fs::path(out.temporary()).filename().string();
    CHECK(tmp.size() <= limit);
    CHECK(std::count(tmp.begin(), tmp.end(), '\xc3') == std::count(tmp.begin(), tmp.end(), '\xa9'));
    out.write(std::string_view("é"), "the results file");
    out.commit();
  }
  CHECK(test::file_text(dir / accented) == "é");

  // One byte more than the limit: refused with the real cause and the limit, not as an unwritable directory.
  const std::string too_long = dir / (std::string(limit - 4, 'b') + ".hdf5");
  CHECK_THROWS_WITH(io::check_output_path(too_long, "-o"),
                    Contains("ENAMETOOLONG") && Contains(std::to_string(limit + 1) + " bytes") && Contains("the " + std::to_string(limit)) &&
                        !Contains("writable directory"));
  CHECK_THROWS_WITH(write(too_long, "x"), Contains("ENAMETOOLONG") && Contains(std::to_string(limit)));
  // A directory's name that is too long is that cause too, not a missing directory.
  CHECK_THROWS_WITH(io::check_output_path(dir / (std::string(limit + 1, 'c') + "/fit.hdf5"), "-o"),
                    Contains("ENAMETOOLONG") && !Contains("does not exist"));
  // So is a whole path longer than PATH_MAX, each name short.
  std::string deep = dir.path.string();
  while (deep.size() <= PATH_MAX) deep += "/" + std::string(200, 'd');
  CHECK_THROWS_WITH(io::check_output_path(deep + "/fit.hdf5", "-o"), Contains("ENAMETOOLONG") && Contains(std::to_string(PATH_MAX - 1)));
  CHECK(hidden_files(dir.path) == 0);
}
