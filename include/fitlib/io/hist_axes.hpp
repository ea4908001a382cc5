// SPDX-License-Identifier: MIT
// hist / boost-histogram axes as Python pickles them, read into fitlib::Axis: rabbit's channel_info
// (rabbit-likelihood-and-format.md §1.7). Included by the rabbit reader.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fitlib/core/types.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/model/axis.hpp"

namespace fitlib::io::hist {

/// Why a pickled value is not an axis `hist::axis` can read: a class it does not know, or a layout it does not
/// expect (a boost-histogram that pickles differently). The message says what was found.
struct unreadable_axis : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The axis that a pickled hist.axis.* (or boost_histogram.axis.*) object describes, from the state boost-histogram
/// pickles (the Boost.Serialization fields of its C++ axis as a tuple: checked against boost-histogram 1.8): kind,
/// name and label, edges (a regular axis's as hist computes them, transforms included) or categories, flow and
/// traits. Every axis class of boost_histogram._core.axis is read except a regular axis transformed by a function
/// other than hist's log, sqrt and Pow. An axis of more than `max_size` bins, or anything else, throws
/// `unreadable_axis`; nothing in the pickle is executed (pickle::decode records, it never calls).
Axis axis(const pickle::Value& v, index_t max_size);

namespace detail {

using pickle::Kind;
using pickle::Value;

[[noreturn]] inline void unreadable(const std::string& why) { throw unreadable_axis(why); }

inline const Value& state_of(const Value& o, const std::string& what) {
  if (o.state.size() != 1) unreadable(what + " has " + std::to_string(o.state.size()) + " pickled states, not one");
  return o.state[0];
}

inline std::int64_t integer(const Value& v, const std::string& what) {
  if (v.kind != Kind::integer || !v.big_integer.empty()) unreadable(what + " is a " + pickle::kind_name(v.kind) + ", not a 64-bit int");
  return v.integer;
}

inline double number(const Value& v, const std::string& what) {
  if (v.kind == Kind::floating) return v.floating;
  return static_cast<double>(integer(v, what));
}

inline const std::string& text(const Value& v, const std::string& what) {
  if (v.kind != Kind::string) unreadable(what + " is a " + std::string(pickle::kind_name(v.kind)) + ", not a str");
  return v.text;
}

/// A pickled 1-D numpy array of a little-endian (or one-byte) int or float dtype: its dtype code ("f8", "i4"...)
/// and each element's bytes, zero-extended. numpy ≥ 1.16 pickles as numpy.core.numeric._frombuffer(buffer, dtype,
/// shape, order) with protocol 5 and as numpy.core.multiarray._reconstruct with a BUILD state (version, shape,
/// dtype, is_fortran, bytes) before it (numpy 2 names the module numpy._core).
struct NumpyArray {
  std::string code;
  std::vector<std::uint64_t> bits;

  bool integral() const { return code[0] == 'i' || code[0] == 'u'; }
  /// Element k as an integer (an integral dtype).
  std::int64_t integer(std::size_t k) const {
    const unsigned shift = static_cast<unsigned>(64 - 8 * (code[1] - '0'));  // sign-extend
    return code[0] == 'u' ? static_cast<std::int64_t>(bits[k]) : static_cast<std::int64_t>(bits[k] << shift) >> shift;
  }
  /// Element k as a double.
  double value(std::size_t k) const {
    if (code == "f8") return std::bit_cast<double>(bits[k]);
    if (code == "f4") return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits[k])));
    return code[0] == 'u' ? static_cast<double>(bits[k]) : static_cast<double>(integer(k));
  }
};

inline NumpyArray numpy_array(const Value& v, const std::string& what, std::size_t max_size) {
  const auto is = [&](std::string_view a, std::string_view b) { return v.text == a || v.text == b; };
  if (v.kind != Kind::object || !v.instance) unreadable(what + " is a " + std::string(pickle::kind_name(v.kind)) + ", not a numpy array");
  const Value *buffer = nullptr, *dtype = nullptr, *shape = nullptr;
  if (is("numpy._core.numeric._frombuffer", "numpy.core.numeric._frombuffer") && v.items.size() == 4) {
    buffer = &v.items[0], dtype = &v.items[1], shape = &v.items[2];
  } else if (is("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct")) {
    const Value& s = state_of(v, what);
    if (s.kind != Kind::tuple || s.items.size() != 5) unreadable(what + "'s numpy state is not (version, shape, dtype, is_fortran, data)");
    shape = &s.items[1], dtype = &s.items[2], buffer = &s.items[4];
  } else {
    unreadable(what + " is a " + v.text + " object, not a numpy array");
  }
  if (buffer->kind != Kind::bytes) unreadable(what + "'s numpy data is a " + std::string(pickle::kind_name(buffer->kind)) + ", not bytes");
  if (shape->kind != Kind::tuple || shape->items.size() != 1) unreadable(what + " is not a 1-D numpy array");
  if (dtype->kind != Kind::object || dtype->text != "numpy.dtype" || dtype->items.empty()) unreadable(what + "'s numpy dtype is not a numpy.dtype");
  const std::string& code = text(dtype->items[0], what + "'s dtype");
  const Value& ds = state_of(*dtype, what + "'s dtype");
  const std::string order = ds.kind == Kind::tuple && ds.items.size() > 1 && ds.items[1].kind == Kind::string ? ds.items[1].text : "?";
  const bool floating = code == "f8" || code == "f4";
  const bool integral = code.size() == 2 && (code[0] == 'i' || code[0] == 'u') && (code[1] == '1' || code[1] == '2' || code[1] == '4' || code[1] == '8');
  if (!floating && !integral) unreadable(what + " has numpy dtype '" + code + "', not an int or float");
  const std::size_t width = static_cast<std::size_t>(code[1] - '0');
  if (order != "<" && order != "|" && !(order == "=" && std::endian::native == std::endian::little))
    unreadable(what + " has byte order '" + order + "', not little-endian");
  const std::int64_t n = integer(shape->items[0], what + "'s length");
  const std::size_t bytes = buffer->text.size();
  if (n < 0 || bytes % width != 0 || static_cast<std::uint64_t>(n) != bytes / width)
    unreadable(what + " holds " + std::to_string(bytes) + " bytes for " + std::to_string(n) + " values of " + code);
  if (static_cast<std::uint64_t>(n) > max_size) unreadable(what + " has " + std::to_string(n) + " values, more than the tensor's bins allow");
  NumpyArray out{code, std::vector<std::uint64_t>(static_cast<std::size_t>(n), 0)};
  for (std::size_t k = 0; k < out.bits.size(); ++k)
    for (std::size_t b = 0; b < width; ++b) out.bits[k] |= std::uint64_t{static_cast<unsigned char>(buffer->text[k * width + b])} << (8 * b);
  return out;
}

/// What a boost_histogram._core.axis class is: its kind and its flow bins and traits.
struct CoreClass {
  std::string_view name;
  Axis::Kind kind;
  bool underflow, overflow, circular, growth;
};

inline constexpr CoreClass core_classes[] = {
    {"regular_uoflow", Axis::Kind::regular, true, true, false, false},
    {"regular_uflow", Axis::Kind::regular, true, false, false, false},
    {"regular_oflow", Axis::Kind::regular, false, true, false, false},
    {"regular_none", Axis::Kind::regular, false, false, false, false},
    {"regular_uoflow_growth", Axis::Kind::regular, true, true, false, true},
    {"regular_circular", Axis::Kind::regular, false, true, true, false},
    {"regular_pow", Axis::Kind::regular, true, true, false, false},
    {"regular_trans", Axis::Kind::regular, true, true, false, false},
    {"variable_uoflow", Axis::Kind::variable, true, true, false, false},
    {"variable_uflow", Axis::Kind::variable, true, false, false, false},
    {"variable_oflow", Axis::Kind::variable, false, true, false, false},
    {"variable_none", Axis::Kind::variable, false, false, false, false},
    {"variable_uoflow_growth", Axis::Kind::variable, true, true, false, true},
    {"variable_circular", Axis::Kind::variable, false, true, true, false},
    {"integer_uoflow", Axis::Kind::integer, true, true, false, false},
    {"integer_uflow", Axis::Kind::integer, true, false, false, false},
    {"integer_oflow", Axis::Kind::integer, false, true, false, false},
    {"integer_none", Axis::Kind::integer, false, false, false, false},
    {"integer_growth", Axis::Kind::integer, false, false, false, true},
    {"integer_circular", Axis::Kind::integer, false, false, true, false},
    {"boolean", Axis::Kind::boolean, false, false, false, false},
    {"category_str", Axis::Kind::str_category, false, true, false, false},
    {"category_str_growth", Axis::Kind::str_category, false, false, false, true},
    {"category_str_none", Axis::Kind::str_category, false, false, false, false},
    {"category_int", Axis::Kind::int_category, false, true, false, false},
    {"category_int_growth", Axis::Kind::int_category, false, false, false, true},
    {"category_int_none", Axis::Kind::int_category, false, false, false, false},
};

/// A regular axis's edges as boost-histogram computes them: equal steps z = i/n between min and min + delta in
/// the transformed variable, (1 − z)·min + z·(min + delta), transformed back.
inline std::vector<double> regular_edges(std::int64_t n, double min, double delta, const std::string& transform, double power) {
  std::vector<double> e;
  for (std::int64_t i = 0; i <= n; ++i) {
    const double z = static_cast<double>(i) / static_cast<double>(n);
    const double t = (1.0 - z) * min + z * (min + delta);
    e.push_back(transform == "log" ? std::exp(t) : transform == "sqrt" ? t * t : transform.empty() ? t : std::pow(t, 1.0 / power));
  }
  return e;
}

}  // namespace detail

inline Axis axis(const pickle::Value& v, index_t max_size) {
  using namespace detail;
  constexpr std::string_view prefixes[] = {"hist.axis.", "boost_histogram.axis."};
  bool python_axis = false;
  for (const std::string_view p : prefixes) python_axis = python_axis || v.text.starts_with(p);
  if (v.kind != Kind::object || !v.instance || !python_axis)
    unreadable(std::string("a ") + (v.kind == Kind::object ? v.text + (v.instance ? " object" : " (a class)") : pickle::kind_name(v.kind)) +
               ", not a hist axis");
  const Value& outer = state_of(v, v.text);
  const Value* core = outer.find("_ax");
  if (core == nullptr) unreadable("a " + v.text + " without boost-histogram's pickled axis (its state has no '_ax')");
  constexpr std::string_view module = "boost_histogram._core.axis.";
  if (core->kind != Kind::object || !core->instance || !core->text.starts_with(module))
    unreadable("a " + v.text + " whose '_ax' is not a boost_histogram._core.axis object");
  const std::string_view cls = std::string_view(core->text).substr(module.size());
  const CoreClass* c = nullptr;
  for (const CoreClass& k : core_classes)
    if (k.name == cls) c = &k;
  const std::string what = "a " + v.text + " (" + core->text + ")";
  if (c == nullptr) unreadable(what + ", an axis class fitlib does not know");
  const Value& t = state_of(*core, what);
  if (t.kind != Kind::tuple || t.items.size() < 3) unreadable(what + " whose state is not boost-histogram's tuple");
  const std::vector<Value>& f = t.items;
  const std::size_t n = f.size();

  Axis a;
  a.kind = c->kind;
  a.underflow = c->underflow, a.overflow = c->overflow, a.circular = c->circular, a.growth = c->growth;
  // the axis's metadata: hist keeps its name and label in a dict there
  const Value* meta = nullptr;
  for (const Value& x : f)
    if (x.kind == Kind::dict) meta = &x;
  if (meta == nullptr) unreadable(what + " without its metadata dict");
  if (const Value* name = meta->find("name")) a.name = text(*name, what + "'s name");
  if (const Value* label = meta->find("label")) a.label = text(*label, what + "'s label");
  const auto size_of = [&](const Value& x) {
    const std::int64_t s = integer(x, what + "'s size");
    if (s < 1 || s > max_size)
      unreadable(what + " has " + std::to_string(s) + " bins, " + (s < 1 ? "none" : "more than the tensor's " + std::to_string(max_size)));
    return s;
  };
  const auto expect_fields = [&](std::size_t want, const char* layout) {
    if (n != want) unreadable(what + " has " + std::to_string(n) + " fields in its state, not the " + std::to_string(want) + " of " + layout);
  };
  switch (c->kind) {
    case Axis::Kind::regular: {
      // (version, transform version, transform's fields..., size, metadata, min, delta)
      if (n < 6 || &f[n - 3] != meta) unreadable(what + " whose state is not (..., size, metadata, min, delta)");
      double power = 1;
      if (cls == "regular_pow") {
        expect_fields(7, "(version, version, power, size, metadata, min, delta)");
        power = number(f[2], what + "'s power");
        if (!(power != 0) || !std::isfinite(power)) unreadable(what + " has power " + std::to_string(power));
        std::ostringstream os;
        os << "pow(" << power << ")";
        a.transform = os.str();
      } else if (cls == "regular_trans") {
        expect_fields(10, "(version, version, forward, inverse, conversion, name, size, metadata, min, delta)");
        a.transform = text(f[5], what + "'s transform name");
        if (a.transform != "log" && a.transform != "sqrt") unreadable(what + " transformed by '" + a.transform + "', not hist's log or sqrt");
      } else {
        expect_fields(6, "(version, version, size, metadata, min, delta)");
      }
      // delta < 0 where the transform reverses the order (Pow with p < 0); the edges are checked below
      const double min = number(f[n - 2], what + "'s minimum"), delta = number(f[n - 1], what + "'s width");
      if (!std::isfinite(min) || !std::isfinite(delta) || delta == 0)
        unreadable(what + " spans [" + std::to_string(min) + ", " + std::to_string(min) + " + " + std::to_string(delta) + "]");
      a.edges = regular_edges(size_of(f[n - 4]), min, delta, a.transform, power);
      break;
    }
    case Axis::Kind::variable: {
      expect_fields(3, "(version, edges, metadata)");
      const NumpyArray e = numpy_array(f[1], what + "'s edges", static_cast<std::size_t>(max_size) + 1);
      for (std::size_t k = 0; k < e.bits.size(); ++k) a.edges.push_back(e.value(k));
      if (a.edges.size() < 2) unreadable(what + " has " + std::to_string(a.edges.size()) + " edges");
      break;
    }
    case Axis::Kind::integer:
    case Axis::Kind::boolean: {
      // (version, size, metadata, min)
      expect_fields(4, "(version, size, metadata, min)");
      const std::int64_t s = size_of(f[1]), lo = integer(f[3], what + "'s minimum");
      constexpr std::int64_t exact = std::int64_t{1} << 53;  // every edge an integer a double holds exactly
      if (lo < -exact || lo > exact - s) unreadable(what + " starts at " + std::to_string(lo) + ", beyond ±2⁵³");
      for (std::int64_t i = 0; i <= s; ++i) a.edges.push_back(static_cast<double>(lo + i));
      break;
    }
    case Axis::Kind::str_category: {
      // (version, count, the strings..., metadata)
      if (n < 3) unreadable(what + " whose state is not (version, count, categories..., metadata)");
      const std::int64_t s = size_of(f[1]);
      expect_fields(static_cast<std::size_t>(s) + 3, "(version, count, categories..., metadata)");
      for (std::size_t k = 2; k < n - 1; ++k) a.categories.push_back(text(f[k], what + "'s category"));
      break;
    }
    case Axis::Kind::int_category: {
      expect_fields(3, "(version, categories, metadata)");
      const NumpyArray cats = numpy_array(f[1], what + "'s categories", static_cast<std::size_t>(max_size));
      if (!cats.integral()) unreadable(what + " has categories of numpy dtype '" + cats.code + "', not integers");
      for (std::size_t k = 0; k < cats.bits.size(); ++k) a.categories.push_back(std::to_string(cats.integer(k)));
      if (a.categories.empty() || static_cast<index_t>(a.categories.size()) > max_size)
        unreadable(what + " has " + std::to_string(a.categories.size()) + " categories");
      break;
    }
  }
  // Every axis with edges: finite and increasing (a transform can overflow or reverse them).
  for (std::size_t k = 0; k < a.edges.size(); ++k)
    if (!std::isfinite(a.edges[k]) || (k > 0 && !(a.edges[k] > a.edges[k - 1])))
      unreadable(what + " has edges that are not finite and increasing (at edge " + std::to_string(k) + ")");
  return a;
}

}  // namespace fitlib::io::hist
