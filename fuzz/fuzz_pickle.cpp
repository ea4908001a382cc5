// SPDX-License-Identifier: MIT
// libFuzzer target: pickle::decode on arbitrary bytes must return a value or throw fitlib::io::file_error, nothing
// else; a decoded value that pickle::encode accepts must decode back to the same tree; hist::axis on every object
// in it returns an axis or throws hist::unreadable_axis, nothing else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <vector>

#include "fitlib/io/hist_axes.hpp"
#include "fitlib/io/pickle.hpp"

namespace {

using fitlib::io::pickle::Value;

bool same(const Value& a, const Value& b);
bool same(const std::vector<Value>& x, const std::vector<Value>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!same(x[i], y[i])) return false;
  return true;
}
bool same(const std::vector<std::pair<Value, Value>>& x, const std::vector<std::pair<Value, Value>>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!same(x[i].first, y[i].first) || !same(x[i].second, y[i].second)) return false;
  return true;
}
bool same(const Value& a, const Value& b) {
  const bool float_same = a.floating == b.floating || (std::isnan(a.floating) && std::isnan(b.floating));
  return a.kind == b.kind && a.boolean == b.boolean && a.integer == b.integer && a.big_integer == b.big_integer && float_same &&
         a.text == b.text && a.instance == b.instance && same(a.items, b.items) && same(a.entries, b.entries) && same(a.kwargs, b.kwargs) &&
         same(a.state, b.state) && same(a.appended, b.appended);
}

/// hist::axis on `v` and everything inside it: an axis (its bins within the bound) or unreadable_axis.
void read_axes(const Value& v) {
  if (v.kind == fitlib::io::pickle::Kind::object) {
    try {
      const fitlib::Axis a = fitlib::io::hist::axis(v, 1000);
      if (a.size() < 1 || a.size() > 1000) {
        std::fprintf(stderr, "hist::axis returned an axis of %td bins\n", a.size());
        std::abort();
      }
    } catch (const fitlib::io::hist::unreadable_axis&) {
    }
  }
  for (const Value& x : v.items) read_axes(x);
  for (const auto& [k, x] : v.entries) read_axes(x);
  for (const Value& x : v.state) read_axes(x);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Value v;
  try {
    v = fitlib::io::pickle::decode(std::span(data, size));
  } catch (const fitlib::io::file_error&) {
    return 0;  // the expected way to reject a bad stream
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pickle::decode threw something other than file_error: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "pickle::decode threw a non-standard exception\n");
    std::abort();
  }
  read_axes(v);
  std::vector<std::uint8_t> again;
  try {
    again = fitlib::io::pickle::encode(v);
  } catch (const fitlib::usage_error&) {
    return 0;  // big integers, sets and other objects with APPENDS/SETITEMS: not encodable
  }
  try {
    if (!same(fitlib::io::pickle::decode(again), v)) {
      std::fprintf(stderr, "decode(encode(v)) differs from v\n");
      std::abort();
    }
  } catch (const fitlib::io::file_error& e) {
    std::fprintf(stderr, "decode(encode(v)) failed: %s\n", e.what());
    std::abort();
  }
  return 0;
}
