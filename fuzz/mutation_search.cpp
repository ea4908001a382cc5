// SPDX-License-Identifier: MIT
// Mutation search for inputs that make read_rabbit use more memory or time than the file's size allows: seeded byte
// mutations of rabbit tensors (tests/common/bounded_run.hpp's mutate), each read in a forked child, measured and
// killed past a bound; an input over the bound or a non-fitlib exception is flagged, and kept with any crash.
//
// Build (no sanitizer: it would inflate the resident memory measured):
//   g++ -std=c++20 -O1 -Iinclude -Itests/common -isystem /usr/include/eigen3 -isystem /usr/include/hdf5/serial
//     fuzz/mutation_search.cpp -o mutation_search -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5
// Run:
//   mutation_search OUT_DIR FIRST_SEED COUNT JOBS RATIO FILE...
// reads COUNT mutations of each FILE (seeds FIRST_SEED..FIRST_SEED+COUNT-1, 1–4 bytes each) on JOBS processes, with
// FileOptions::max_compression_ratio = RATIO (0: the default), flags a read whose resident memory grows more than
// 48 MiB + RATIO × the file's size (the reader allocates at most RATIO times what a dataset stores) or that takes more
// than 2 s + 1 s/MB (both killed past 1 GiB or 30 s), and
// copies the flagged (and crashing) inputs to OUT_DIR/<file>_seed<seed>.hdf5. Exit status 1 if any was flagged (a
// crash alone does not count: the libFuzzer run classifies crashes as fitlib's or libhdf5's). With COUNT 0, reads
// each FILE as it is instead (e.g. the kept inputs of tests/data/rabbit/mutated/) and says how that went.
// run_fuzzer.sh runs it (FITLIB_FUZZ_MUTATIONS inputs per tensor) after the libFuzzer targets.
#include "bounded_run.hpp"
#include "file_bytes.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "fitlib/io/rabbit.hpp"

namespace {

// The ratio through FileOptions where it has one, so that the search also builds against a reader without the bound
// (to find what that reader does with an input).
template <class O>
void set_ratio(O& o, double r) {
  if constexpr (requires { o.max_compression_ratio; }) o.max_compression_ratio = r;
}
template <class O>
double ratio_of(const O& o) {
  if constexpr (requires { o.max_compression_ratio; })
    return o.max_compression_ratio;
  else
    return 2048;
}

/// One worker: the seeds s ≡ job (mod jobs). Returns the number flagged; prints one line per flagged input.
int work(const std::string& out_dir, std::uint64_t first, std::uint64_t count, int job, int jobs, double ratio, const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  int flagged = 0;
  std::size_t worst_growth = 0;
  double worst_seconds = 0;
  std::uint64_t reads = 0, refused = 0;
  const std::string scratch = (fs::path(out_dir) / ("scratch_" + std::to_string(job) + ".hdf5")).string();
  for (const std::string& file : files) {
    const std::vector<char> good = fitlib::test::file_bytes(file);
    const std::string stem = fs::path(file).stem().string();
    fitlib::io::hdf5::FileOptions fo;
    if (ratio > 0) set_ratio(fo, ratio);
    const std::size_t memory_bound = (std::size_t{48} << 20) + static_cast<std::size_t>(ratio_of(fo) * static_cast<double>(good.size()));
    const double time_bound = 2.0 + static_cast<double>(good.size()) / 1e6;
    for (std::uint64_t seed = first + static_cast<std::uint64_t>(job); seed < first + count; seed += static_cast<std::uint64_t>(jobs)) {
      const int nbytes = 1 + static_cast<int>(seed % 4);
      fitlib::test::write_bytes(scratch, fitlib::test::mutate(good, seed, nbytes));
      const fitlib::test::RunResult res = fitlib::test::run_bounded(
          [&] {
            const fitlib::io::hdf5::File f = fitlib::io::hdf5::File::open(scratch, fitlib::io::hdf5::Access::read_only, fo);
            (void)fitlib::io::read_rabbit(f).model;
          },
          std::size_t{1} << 30, 30.0);
      ++reads;
      if (res.outcome == fitlib::test::RunOutcome::fitlib_error) ++refused;
      worst_growth = std::max(worst_growth, res.peak_growth);
      worst_seconds = std::max(worst_seconds, res.seconds);
      // A crash is kept and reported, but is the libFuzzer run's to classify (libhdf5 1.10 has crashes of its own that
      // fitlib cannot reach, e.g. test_tensor_normal.hdf5 seed 955: a zero chunk dimension divides in H5Dopen).
      const bool crashed = res.outcome == fitlib::test::RunOutcome::crashed;
      const bool bad = res.outcome == fitlib::test::RunOutcome::other_error || res.outcome == fitlib::test::RunOutcome::killed_memory ||
                       res.outcome == fitlib::test::RunOutcome::killed_time || res.peak_growth > memory_bound || res.seconds > time_bound;
      if (!bad && !crashed) continue;
      if (bad) ++flagged;
      const std::string keep = (fs::path(out_dir) / (stem + "_seed" + std::to_string(seed) + ".hdf5")).string();
      fs::copy_file(scratch, keep, fs::copy_options::overwrite_existing);
      std::printf("%s %s seed %llu (%d bytes): %s after %.2f s, peak growth %zu MiB (bound %zu MiB), signal %d: %.300s\n",
                  bad ? "FLAGGED" : "CRASHED", stem.c_str(), static_cast<unsigned long long>(seed), nbytes, fitlib::test::outcome_name(res.outcome),
                  res.seconds, res.peak_growth >> 20, memory_bound >> 20, res.signal, res.message.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("job %d: %llu reads, %llu refused, worst peak growth %zu KiB, worst time %.3f s, %d flagged\n", job,
              static_cast<unsigned long long>(reads), static_cast<unsigned long long>(refused), worst_growth >> 10, worst_seconds, flagged);
  std::fflush(stdout);
  std::filesystem::remove(scratch);
  return flagged;
}

/// COUNT 0: reads each FILE as it is (a kept input, say) and prints what happened. Exit status 1 if any is over the
/// bound or ends otherwise than read or refused.
int read_as_they_are(double ratio, const std::vector<std::string>& files) {
  int status = 0;
  for (const std::string& file : files) {
    fitlib::io::hdf5::FileOptions fo;
    if (ratio > 0) set_ratio(fo, ratio);
    const auto size = static_cast<double>(std::filesystem::file_size(file));
    const std::size_t memory_bound = (std::size_t{48} << 20) + static_cast<std::size_t>(ratio_of(fo) * size);
    const fitlib::test::RunResult res = fitlib::test::run_bounded(
        [&] {
          const fitlib::io::hdf5::File f = fitlib::io::hdf5::File::open(file, fitlib::io::hdf5::Access::read_only, fo);
          (void)fitlib::io::read_rabbit(f).model;
        },
        std::size_t{1} << 30, 30.0);
    const bool bad = (res.outcome != fitlib::test::RunOutcome::returned && res.outcome != fitlib::test::RunOutcome::fitlib_error) ||
                     res.peak_growth > memory_bound || res.seconds > 2.0 + size / 1e6;
    if (bad) status = 1;
    std::printf("READ %s (%.0f bytes): %s after %.3f s, peak growth %zu KiB%s, signal %d: %.400s\n", file.c_str(), size,
                fitlib::test::outcome_name(res.outcome), res.seconds, res.peak_growth >> 10, bad ? " OVER THE BOUND" : "", res.signal,
                res.message.c_str());
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s OUT_DIR FIRST_SEED COUNT JOBS RATIO FILE...\n", argv[0]);
    return 2;
  }
  const std::string out_dir = argv[1];
  const std::uint64_t first = std::strtoull(argv[2], nullptr, 10), count = std::strtoull(argv[3], nullptr, 10);
  const int jobs = std::max(1, std::atoi(argv[4]));
  const double ratio = std::atof(argv[5]);
  const std::vector<std::string> files(argv + 6, argv + argc);
  std::filesystem::create_directories(out_dir);
  if (count == 0) return read_as_they_are(ratio, files);
  std::vector<pid_t> workers;
  for (int j = 0; j < jobs; ++j) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) _exit(work(out_dir, first, count, j, jobs, ratio, files) > 0 ? 1 : 0);
    workers.push_back(pid);
  }
  int status_all = 0;
  for (const pid_t pid : workers) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) status_all = 1;
  }
  return status_all;
}
