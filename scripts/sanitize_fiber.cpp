// SPDX-License-Identifier: MIT
// fiber.hpp under AddressSanitizer (scripts/sanitize.sh): mode 0 switches, rethrows, cancels and nests fibers
// and must run without any ASan output; modes 1 and 2 overflow a buffer in a fiber frame before and after a
// suspend, 3 on the main stack, and each must be reported (2 was missed before the ASan fiber annotations).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include "fitlib/detail/fiber.hpp"
using fitlib::detail::Fiber;
__attribute__((noinline)) void poke(volatile char* p, int i) { p[i] = 1; }
__attribute__((noinline)) int deep(int n) {
  volatile char buf[64];
  buf[n % 64] = static_cast<char>(n);
  if (n == 0) return buf[0];
  if (n % 7 == 0) Fiber::suspend();
  return deep(n - 1) + buf[n % 64];
}
struct Guard { std::string* s; ~Guard() { *s += "unwound;"; } };
int main(int argc, char** argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
  if (mode != 0) {
    Fiber f([&] {
      volatile char buf[16];
      if (mode == 1) poke(buf, 16);
      Fiber::suspend();
      if (mode == 2) poke(buf, 16);
    });
    f.resume();
    f.resume();
    volatile char main_buf[16];
    if (mode == 3) poke(main_buf, 16);
    std::puts("main done");
    return 0;
  }
  // Many fibers interleaved with deep frames live across suspends (fake stacks in use).
  std::vector<std::unique_ptr<Fiber>> fs;
  std::vector<int> out(8, -1);
  for (int k = 0; k < 8; ++k) fs.push_back(std::make_unique<Fiber>([&, k] { out[k] = deep(50 + k); }));
  for (bool any = true; any;) {
    any = false;
    for (auto& f : fs) if (!f->done()) { f->resume(); any = true; }
  }
  for (int k = 0; k < 8; ++k) if (out[k] < 0) { std::puts("FAIL result"); return 1; }
  // Rethrow.
  Fiber t([] { Fiber::suspend(); throw std::runtime_error("boom"); });
  t.resume();
  try { t.resume(); std::puts("FAIL no throw"); return 1; } catch (const std::runtime_error&) {}
  // Cancel unwinds.
  std::string log;
  {
    Fiber c([&] { Guard g{&log}; deep(20); Fiber::suspend(); log += "not reached;"; });
    c.resume();
    c.cancel();
  }
  { Fiber d([&] { Guard g{&log}; Fiber::suspend(); }); d.resume(); }  // destructor cancels
  if (log != "unwound;unwound;") { std::printf("FAIL log %s\n", log.c_str()); return 1; }
  // Nested: a fiber resumes another.
  int inner_runs = 0;
  Fiber outer([&] {
    Fiber inner([&] { ++inner_runs; Fiber::suspend(); ++inner_runs; });
    inner.resume(); Fiber::suspend(); inner.resume(); deep(30);
  });
  while (!outer.done()) outer.resume();
  if (inner_runs != 2) { std::puts("FAIL nested"); return 1; }
  // Stack reuse: fibers created and destroyed repeatedly.
  for (int r = 0; r < 200; ++r) { Fiber e([] { deep(14); }); while (!e.done()) e.resume(); }
  std::puts("clean done");
}
