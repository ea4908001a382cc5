// SPDX-License-Identifier: MIT
// cpu::Threads: shards on threads give bitwise the cpu::Serial result with as many shards, run after run.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fitlib/fit.hpp"
#include "random_model.hpp"
#include "shard_checks.hpp"

using namespace fitlib;
using test::same_bits;

using test::everything;
using test::sharded_model;

TEST_CASE("threads: the fork-join pool runs every task once and rethrows the first failure", "[threads]") {
  detail::ForkJoinPool pool(3);
  std::vector<std::atomic<int>> hits(4);
  for (int round = 0; round < 50; ++round) pool.run(4, [&](index_t k) { ++hits[static_cast<std::size_t>(k)]; });
  for (auto& h : hits) CHECK(h.load() == 50);
  CHECK_THROWS_WITH(pool.run(4, [](index_t k) { if (k == 2) throw std::runtime_error("task 2 failed"); }), "task 2 failed");
  pool.run(2, [&](index_t k) { ++hits[static_cast<std::size_t>(k)]; });  // still usable
  CHECK(hits[1].load() == 51);
  CHECK_THROWS_WITH(pool.run(5, [](index_t) {}), Catch::Contains("5 tasks on 4 threads"));
}

// Serial against threads for values, derivatives, fits and batches: tests/likelihood/test_policies.cpp.
TEST_CASE("threads: copies of a threaded likelihood fitted at once on two threads equal its fit", "[threads]") {
  const Model m = sharded_model();
  LikelihoodOptions lo;
  lo.shards = 3;
  ThreadedLikelihood threaded(m, cpu::Threads{3}, lo);
  SerialLikelihood serial(m, {}, lo);
  const TrustRegion<Gltr> minimizer;
  const FitResult a = fit(threaded, minimizer), b = fit(serial, minimizer);
  CHECK(same_bits(a.x, b.x));
  // Copies have threads of their own: two copies fitted at once on two threads agree with the original.
  ThreadedLikelihood c1 = threaded, c2 = threaded;
  FitResult r1, r2;
  std::thread t1([&] { r1 = fit(c1, minimizer); }), t2([&] { r2 = fit(c2, minimizer); });
  t1.join();
  t2.join();
  CHECK(same_bits(r1.x, a.x));
  CHECK(same_bits(r2.x, a.x));
}

TEST_CASE("threads: each shard reads its own templates on its own thread, and equals the serial shards bitwise", "[threads]") {
  const Model m = sharded_model();
  const std::vector<BinRange> ranges = partition_bins(m, 3);
  std::mutex mutex;  // a reader that is not thread-safe (HDF5's serial build) is serialised like this
  std::map<index_t, std::thread::id> reader;  // the thread that read each shard's templates
  const auto part = [&](BinRange b) {
    const std::lock_guard lock(mutex);
    reader[b.begin] = std::this_thread::get_id();
    return std::make_shared<const Model>(test::slice_of(m, b));
  };
  const auto meta = std::make_shared<const Model>(test::slice_of(m, {0, 1}));  // names, data, constraints: no tensor to speak of
  ThreadedLikelihood threaded(meta, ranges, part, cpu::Threads{3});
  REQUIRE(reader.size() == 3);
  CHECK(reader.at(ranges[0].begin) == std::this_thread::get_id());  // shard 0 runs on the calling thread
  CHECK(reader.at(ranges[1].begin) != reader.at(ranges[0].begin));
  CHECK(reader.at(ranges[2].begin) != reader.at(ranges[1].begin));
  LikelihoodOptions three;
  three.shards = 3;
  SerialLikelihood serial(m, {}, three);
  CHECK(same_bits(everything(threaded), everything(serial)));
  const TrustRegion<Gltr> minimizer;
  CHECK(same_bits(fit(threaded, minimizer).x, fit(serial, minimizer).x));

  // Bad input names the shard and the remedy.
  CHECK_THROWS_WITH(ThreadedLikelihood(meta, {ranges[0], ranges[2]}, part, cpu::Threads{2}), Catch::Contains("must follow one another"));
  CHECK_THROWS_WITH(ThreadedLikelihood(meta, {ranges[0], ranges[1]}, part, cpu::Threads{2}), Catch::Contains("must cover all"));
  CHECK_THROWS_WITH(ThreadedLikelihood(meta, ranges, nullptr, cpu::Threads{3}), Catch::Contains("without a template source"));
  CHECK_THROWS_WITH(ThreadedLikelihood(meta, {}, part, cpu::Threads{3}), Catch::Contains("needs the shard ranges"));
  const auto wrong = [&](BinRange) { return std::make_shared<const Model>(test::pull_model()); };
  CHECK_THROWS_WITH(ThreadedLikelihood(meta, ranges, wrong, cpu::Threads{3}), Catch::Contains("another shape"));
  const auto short_part = [&](BinRange b) { return std::make_shared<const Model>(test::slice_of(m, {b.begin, b.begin + 1})); };
  CHECK_THROWS_WITH(ThreadedLikelihood(meta, ranges, short_part, cpu::Threads{3}), Catch::Contains("needs their templates"));
}
