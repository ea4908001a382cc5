// SPDX-License-Identifier: MIT
// A restricted Python-pickle decoder (protocols 0–5) that builds a tree of plain values and executes nothing, and a
// small encoder (protocol 4) for the values it decodes.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fitlib/config.hpp"
#include "fitlib/core/error.hpp"  // usage_error
#include "fitlib/io/hdf5/handle.hpp"  // file_error

namespace fitlib::io::pickle {

/// What a decoded value is. Sets, class instances and references to globals are all `object`s.
enum class Kind { none, boolean, integer, floating, string, bytes, list, tuple, dict, object };

inline const char* kind_name(Kind k) {
  constexpr const char* names[] = {"None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "object"};
  return names[static_cast<int>(k)];
}

/// One decoded value. Nothing is ever called: a class instance (GLOBAL/STACK_GLOBAL followed by REDUCE, NEWOBJ,
/// NEWOBJ_EX, INST or OBJ) is an opaque `object` recording the callable's "module.qualname" and what it was given;
/// a GLOBAL on its own is an `object` with `instance` false. A set is an object "builtins.set" (or frozenset) whose
/// elements are in `appended` (protocol ≥ 4) or in its one argument, a list (protocol 2, as Python writes it).
struct Value {
  Kind kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;         ///< int, when it fits 64 bits
  std::string big_integer;          ///< int, in decimal, when it does not fit 64 bits (then `integer` is 0)
  double floating = 0;
  std::string text;                 ///< str (UTF-8), bytes (and bytearray), object: "module.qualname"
  std::vector<Value> items;         ///< list and tuple elements; object: the positional arguments
  /// dict items in stream order, one per SETITEM(S) (a key set twice appears twice; `find` returns the last, the
  /// value Python keeps); object: SETITEM(S) onto it
  std::vector<std::pair<Value, Value>> entries;
  // object only:
  bool instance = false;            ///< created by calling the global (else a reference to the global itself)
  std::vector<std::pair<Value, Value>> kwargs;  ///< NEWOBJ_EX's keyword arguments
  std::vector<Value> state;         ///< BUILD's state: empty, or one value
  std::vector<Value> appended;      ///< APPEND(S) / ADDITEMS onto it (list or set subclasses, sets)

  bool is(Kind k) const { return kind == k; }
  /// The value of the dict entry whose key is the string `key`, or nullptr (also when this is not a dict). A key
  /// set more than once gives its last value, as in Python.
  const Value* find(std::string_view key) const;

  // Declared here, defaulted below: Value holds std::pair<Value, Value>s, and clang (with libstdc++) would otherwise
  // instantiate that pair while Value is still incomplete.
  Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();
};

inline Value::Value() = default;
inline Value::Value(const Value&) = default;
inline Value::Value(Value&&) noexcept = default;
inline Value& Value::operator=(const Value&) = default;
inline Value& Value::operator=(Value&&) noexcept = default;
inline Value::~Value() = default;

inline const Value* Value::find(std::string_view key) const {
  if (kind != Kind::dict) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)  // from the back: the last assignment wins
    if (it->first.kind == Kind::string && it->first.text == key) return &it->second;
  return nullptr;
}

/// Bounds on the decoded tree: memo references can share one value many times over (each use is a copy here), so
/// a small stream could otherwise ask for an enormous tree.
struct Limits {
  std::size_t max_depth = 128;          ///< nesting of containers and objects
  std::size_t max_values = std::size_t{1} << 20;  ///< values in the whole tree, shared ones counted at each use
  /// Bytes the decoded tree may take: the text of every str, bytes, big int and global name plus `value_cost` per
  /// value, shared ones counted at each use (and so are the names the decoder copies while it runs). 0 (the
  /// default): 64 times the stream's size, at least 1 MiB and at most 1 GiB (`default_max_bytes`).
  std::size_t max_bytes = 0;
  /// The decoder's working memory, whatever the stream's size: the values the stream has created so far (every
  /// pushed value is kept until STOP, popped ones too, about 200 bytes each besides its text) plus the entries on its
  /// stack and marks. A stream of one-byte opcodes would otherwise cost some 200 times its size.
  std::size_t max_nodes = std::size_t{1} << 21;

  static constexpr std::size_t value_cost = 32;  ///< the nominal bytes charged per value (max_values bounds their count)
  /// `max_bytes`'s default for a stream of `size` bytes: max(64 × size, 1 MiB), at most 1 GiB.
  static constexpr std::size_t default_max_bytes(std::size_t size) {
    constexpr std::size_t floor = std::size_t{1} << 20, cap = std::size_t{1} << 30;
    return size >= cap / 64 ? cap : std::max(64 * size, floor);
  }
};

/// Decodes one pickle (protocols 0–5) without executing anything. Throws `file_error` naming what was wrong and
/// the byte offset: a truncated stream, an unknown opcode, a stack underflow, a length beyond the stream, nesting
/// deeper than `limits.max_depth`, more than `limits.max_values` values, a tree beyond `limits.max_bytes` (by
/// default 64 times the stream's size, within [1 MiB, 1 GiB]), or more than `limits.max_nodes` values created and
/// stack entries while decoding. Bytes after STOP are ignored.
Value decode(std::span<const std::uint8_t> bytes, const Limits& limits = {});

/// Encodes `v` as a protocol-4 pickle (one FRAME) that Python's pickle.loads and `decode` read back: None, bool,
/// int (64-bit), float, str, bytes, list, tuple, dict, and class instances as `decode` records them (`text`
/// "module.name" split at its last dot, STACK_GLOBAL; `items` the arguments of NEWOBJ, i.e. cls.__new__(cls,
/// *items), or NEWOBJ_EX with `kwargs`; `state` one BUILD) or a bare global (`instance` false). Nothing is
/// memoised, so a shared value is written at each use. Throws `usage_error` for what it cannot write (big
/// integers, objects with SETITEMS/APPENDS, nesting deeper than `max_depth`).
std::vector<std::uint8_t> encode(const Value& v, std::size_t max_depth = Limits{}.max_depth);

// The decoder and the encoder: inline here, or in fitlib::prebuilt (config.hpp's FITLIB_DEFINITIONS).
#if FITLIB_DEFINITIONS
namespace detail {

/// The unpickling machine: nodes live in an arena (so the memo can share a container that is still being filled,
/// as Python's does) and become a Value tree at STOP.
class Machine {
 public:
  Machine(std::span<const std::uint8_t> in, const Limits& limits)
      : in_(in), limits_(limits), max_bytes_(limits.max_bytes != 0 ? limits.max_bytes : Limits::default_max_bytes(in.size())) {}

  Value run() {
    while (true) {
      if (pos_ >= in_.size()) fail("the stream ends before its STOP opcode (truncated)", in_.size());
      at_ = pos_;
      if (nodes_.size() + stack_.size() + marks_.size() > limits_.max_nodes)
        fail("more than " + std::to_string(limits_.max_nodes) + " values and stack entries at once (Limits::max_nodes)", at_);
      const std::uint8_t op = in_[pos_++];
      if (op == '.') {
        const std::size_t top = pop();
        std::size_t budget = limits_.max_values;
        return tree(top, 0, budget);
      }
      step(op);
    }
  }

 private:
  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

  struct Node {
    Kind kind = Kind::none;
    bool boolean = false, instance = false;
    std::int64_t integer = 0;
    double floating = 0;
    std::string text, big_integer;
    std::vector<std::size_t> items, appended;
    std::vector<std::pair<std::size_t, std::size_t>> entries;
    // object only: the argument tuple (tuples never change once made, so it is shared, not copied; npos: `items`),
    // and NEWOBJ_EX's keyword dict with how many of its entries it had then (entries are only ever appended)
    std::size_t args = npos, kwargs = npos, kwargs_count = 0;
    std::size_t state = npos;
    std::size_t offset = 0;  // the opcode that made it, for messages
  };

  std::span<const std::uint8_t> in_;
  Limits limits_;
  std::size_t max_bytes_, spent_ = 0;  // the byte budget (Limits::max_bytes) and what the tree and copies took of it
  std::size_t pos_ = 0, at_ = 0;
  std::vector<Node> nodes_;
  std::vector<std::size_t> stack_, marks_;
  std::unordered_map<std::uint64_t, std::size_t> memo_;

  [[noreturn]] static void fail(const std::string& what, std::size_t offset) {
    throw file_error("malformed pickle: " + what + " at byte " + std::to_string(offset));
  }
  [[noreturn]] void fail(const std::string& what) const { fail(what + " (opcode 0x" + hex(in_[at_]) + ")", at_); }
  static std::string hex(std::uint8_t b) {
    const char* d = "0123456789abcdef";
    return {d[b >> 4], d[b & 15]};
  }

  /// Takes `n` bytes from the budget, or fails at `offset` when they are not left.
  void charge(std::size_t n, std::size_t offset) {
    if (n > max_bytes_ - spent_)
      fail("the decoded values expand beyond " + std::to_string(max_bytes_) + " bytes (memo references repeat shared ones)", offset);
    spent_ += n;
  }

  // ---- reading the stream
  const std::uint8_t* take(std::uint64_t n) {
    if (n > in_.size() - pos_)
      fail("a length of " + std::to_string(n) + " bytes, but only " + std::to_string(in_.size() - pos_) + " remain (truncated or corrupt)");
    const std::uint8_t* p = in_.data() + pos_;
    pos_ += static_cast<std::size_t>(n);
    return p;
  }
  std::uint64_t unsigned_le(std::size_t n) {
    const std::uint8_t* p = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
  }
  std::string_view bytes(std::uint64_t n) { return {reinterpret_cast<const char*>(take(n)), static_cast<std::size_t>(n)}; }
  std::string_view line() {  // protocol 0: up to '\n', which is consumed
    const std::size_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] != '\n') ++pos_;
    if (pos_ == in_.size()) fail("a text argument without its terminating newline (truncated)");
    return {reinterpret_cast<const char*>(in_.data() + start), pos_++ - start};
  }

  // ---- the stack
  std::size_t add(Node n) {  // a node not (yet) on the stack
    n.offset = at_;
    nodes_.push_back(std::move(n));
    return nodes_.size() - 1;
  }
  std::size_t push(Node n) {
    stack_.push_back(add(std::move(n)));
    return stack_.back();
  }
  std::size_t pop() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail("stack underflow");
    const std::size_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::size_t top() {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail("stack underflow");
    return stack_.back();
  }
  std::vector<std::size_t> pop_mark() {  // the items above the topmost MARK, which goes
    if (marks_.empty()) fail("no MARK to pop to");
    std::vector<std::size_t> v(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return v;
  }
  Node& node(std::size_t i) { return nodes_[i]; }
  Node& expect(std::size_t i, Kind k, const char* role) {
    if (nodes_[i].kind != k) fail(std::string(role) + " is a " + kind_name(nodes_[i].kind) + ", expected a " + kind_name(k));
    return nodes_[i];
  }

  // ---- value makers
  static Node scalar(Kind k) { Node n; n.kind = k; return n; }
  static Node integer(std::int64_t v) { Node n = scalar(Kind::integer); n.integer = v; return n; }
  static Node boolean(bool v) { Node n = scalar(Kind::boolean); n.boolean = v; return n; }
  static Node text(Kind k, std::string_view s) { Node n = scalar(k); n.text = s; return n; }
  static Node global(std::string module, std::string_view name) { Node n = scalar(Kind::object); n.text = module.append(".").append(name); return n; }
  static Node sequence(Kind k, std::vector<std::size_t> items) { Node n = scalar(k); n.items = std::move(items); return n; }

  /// Little-endian two's-complement bytes (LONG1, LONG4) as an int.
  Node long_bytes(std::string_view b) {
    if (b.size() <= 8) {
      std::uint64_t u = 0;
      for (std::size_t i = b.size(); i-- > 0;) u = (u << 8) | static_cast<std::uint8_t>(b[i]);
      if (!b.empty() && b.size() < 8 && (static_cast<std::uint8_t>(b.back()) & 0x80)) u -= std::uint64_t{1} << (8 * b.size());
      return integer(static_cast<std::int64_t>(u));
    }
    if (b.size() > 256) fail("an integer of " + std::to_string(b.size()) + " bytes, too long for this reader");
    std::vector<std::uint8_t> mag(b.rbegin(), b.rend());  // big-endian magnitude
    const bool negative = mag.front() & 0x80;
    if (negative) {  // two's complement: invert, add one
      for (auto& x : mag) x = static_cast<std::uint8_t>(~x);
      for (std::size_t i = mag.size(); i-- > 0 && ++mag[i] == 0;) {}
    }
    std::string digits;
    while (true) {  // long division by 10
      unsigned rest = 0;
      bool zero = true;
      for (auto& x : mag) {
        const unsigned cur = rest * 256 + x;
        x = static_cast<std::uint8_t>(cur / 10);
        rest = cur % 10;
        zero = zero && x == 0;
      }
      digits.insert(digits.begin(), static_cast<char>('0' + rest));
      if (zero) break;
    }
    return big(negative ? "-" + digits : digits);
  }
  static Node big(std::string digits) { Node n = scalar(Kind::integer); n.big_integer = std::move(digits); return n; }

  /// Protocol 0's INT and LONG: decimal text ("01"/"00" are True/False for INT).
  Node decimal(std::string_view s, bool is_int) {
    if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
    if (is_int && (s == "00" || s == "01")) return boolean(s == "01");
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return integer(v);
    const std::size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    if (s.size() == sign || s.find_first_not_of("0123456789", sign) != std::string_view::npos) fail("the integer text '" + std::string(s) + "' is not a number");
    return big(std::string(s[0] == '+' ? s.substr(1) : s));
  }

  /// Protocol 0's STRING argument: a quoted Python bytes literal with backslash escapes.
  std::string quoted(std::string_view s) {
    if (s.size() < 2 || (s.front() != '\'' && s.front() != '"') || s.back() != s.front()) fail("a STRING argument that is not quoted");
    s = s.substr(1, s.size() - 2);
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\') { out += s[i]; continue; }
      if (++i == s.size()) fail("a STRING argument ending in a backslash");
      const char c = s[i];
      const std::string_view simple = "\\'\"abfnrtv", value = "\\'\"\a\b\f\n\r\t\v";
      if (const auto k = simple.find(c); k != std::string_view::npos) {
        out += value[k];
      } else if (c == 'x' && i + 2 < s.size() && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
        out += static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
        i += 2;
      } else if (c >= '0' && c <= '7') {
        int v = 0;
        for (int d = 0; d < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++d, ++i) v = v * 8 + (s[i] - '0');
        --i;
        out += static_cast<char>(v & 0xff);
      } else if (c == '\n') {
      } else {
        out += '\\';
        out += c;
      }
    }
    return out;
  }
  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static void utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  /// Protocol 0's UNICODE argument: raw-unicode-escape (Latin-1 bytes, \uXXXX and \UXXXXXXXX) to UTF-8.
  std::string raw_unicode(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::size_t n = s[i] == '\\' && i + 1 < s.size() ? (s[i + 1] == 'u' ? 4 : s[i + 1] == 'U' ? 8 : 0) : 0;
      if (n == 0) { utf8(out, static_cast<std::uint8_t>(s[i])); continue; }
      if (i + 2 + n > s.size()) fail("a truncated \\u escape in a UNICODE argument");
      std::uint32_t cp = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const int h = hexval(s[i + 2 + k]);
        if (h < 0) fail("a malformed \\u escape in a UNICODE argument");
        cp = cp * 16 + static_cast<std::uint32_t>(h);
      }
      if (cp > 0x10ffff) fail("a \\U escape beyond U+10FFFF in a UNICODE argument");
      utf8(out, cp);
      i += 1 + n;
    }
    return out;
  }

  std::uint64_t memo_key(std::string_view s) {
    std::uint64_t k = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), k);
    if (ec != std::errc() || p != s.data() + s.size()) fail("the memo key '" + std::string(s) + "' is not a number");
    return k;
  }
  void put(std::uint64_t key) { memo_[key] = top(); }
  void get(std::uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("a reference to memo entry " + std::to_string(key) + ", which was never stored");
    stack_.push_back(it->second);
  }

  /// An instance of the global `callable` made with the arguments in the tuple `args`.
  void call(std::size_t callable, std::size_t args, const char* how) {
    const Node& c = node(callable);
    if (c.kind != Kind::object || c.instance) fail(std::string(how) + "'s callable is a " + (c.instance ? "class instance" : kind_name(c.kind)) + ", not a global");
    expect(args, Kind::tuple, (std::string(how) + "'s argument").c_str());
    charge(c.text.size(), at_);  // a memoised global may be called many times over
    Node n = scalar(Kind::object);
    n.text = c.text;
    n.instance = true;
    n.args = args;
    push(std::move(n));
  }
  void set_items(std::size_t target, const std::vector<std::size_t>& kv) {
    if (kv.size() % 2) fail("an odd number of items for SETITEMS");
    Node& d = node(target);
    if (d.kind != Kind::dict && !(d.kind == Kind::object && d.instance)) fail(std::string("SETITEM(S) onto a ") + kind_name(d.kind));
    for (std::size_t i = 0; i < kv.size(); i += 2) d.entries.emplace_back(kv[i], kv[i + 1]);
  }
  void append(std::size_t target, const std::vector<std::size_t>& v) {
    Node& l = node(target);
    if (l.kind == Kind::list)
      l.items.insert(l.items.end(), v.begin(), v.end());
    else if (l.kind == Kind::object && l.instance)
      l.appended.insert(l.appended.end(), v.begin(), v.end());
    else
      fail(std::string("APPEND(S)/ADDITEMS onto a ") + kind_name(l.kind));
  }

  void step(std::uint8_t op) {
    switch (op) {
      // framing and protocol
      case 0x80: if (const auto p = unsigned_le(1); p > 5) fail("pickle protocol " + std::to_string(p) + ", newer than 5"); break;
      case 0x95: if (const auto n = unsigned_le(8); n > in_.size() - pos_) fail("a FRAME of " + std::to_string(n) + " bytes, but only " + std::to_string(in_.size() - pos_) + " remain"); break;
      // stack manipulation
      case '(': marks_.push_back(stack_.size()); break;
      case '0': pop(); break;
      case '1': pop_mark(); break;
      case '2': stack_.push_back(top()); break;
      // memo
      case 'p': put(memo_key(line())); break;
      case 'q': put(unsigned_le(1)); break;
      case 'r': put(unsigned_le(4)); break;
      case 0x94: put(memo_.size()); break;
      case 'g': get(memo_key(line())); break;
      case 'h': get(unsigned_le(1)); break;
      case 'j': get(unsigned_le(4)); break;
      // scalars
      case 'N': push(scalar(Kind::none)); break;
      case 0x88: push(boolean(true)); break;
      case 0x89: push(boolean(false)); break;
      case 'I': push(decimal(line(), true)); break;
      case 'L': push(decimal(line(), false)); break;
      case 'J': push(integer(static_cast<std::int32_t>(static_cast<std::uint32_t>(unsigned_le(4))))); break;
      case 'K': push(integer(static_cast<std::int64_t>(unsigned_le(1)))); break;
      case 'M': push(integer(static_cast<std::int64_t>(unsigned_le(2)))); break;
      case 0x8a: push(long_bytes(bytes(unsigned_le(1)))); break;
      case 0x8b: push(long_bytes(bytes(signed_length(4)))); break;
      case 'F': {
        const std::string_view s = line();
        Node n = scalar(Kind::floating);
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n.floating);
        if (ec != std::errc() || p != s.data() + s.size()) fail("the float text '" + std::string(s) + "' is not a number");
        push(std::move(n));
        break;
      }
      case 'G': {
        std::uint64_t u = 0;
        for (const std::uint8_t* p = take(8); p != in_.data() + pos_; ++p) u = (u << 8) | *p;  // big-endian
        Node n = scalar(Kind::floating);
        std::memcpy(&n.floating, &u, sizeof u);
        push(std::move(n));
        break;
      }
      // strings and bytes
      case 'S': push(text(Kind::bytes, quoted(line()))); break;
      case 'T': push(text(Kind::bytes, bytes(signed_length(4)))); break;
      case 'U': push(text(Kind::bytes, bytes(unsigned_le(1)))); break;
      case 'B': push(text(Kind::bytes, bytes(unsigned_le(4)))); break;
      case 'C': push(text(Kind::bytes, bytes(unsigned_le(1)))); break;
      case 0x8e: case 0x96: push(text(Kind::bytes, bytes(unsigned_le(8)))); break;
      case 'V': push(text(Kind::string, raw_unicode(line()))); break;
      case 'X': push(text(Kind::string, bytes(unsigned_le(4)))); break;
      case 0x8c: push(text(Kind::string, bytes(unsigned_le(1)))); break;
      case 0x8d: push(text(Kind::string, bytes(unsigned_le(8)))); break;
      case 0x97: fail("an out-of-band buffer (NEXT_BUFFER), which this reader is not given");
      case 0x98: top(); break;  // READONLY_BUFFER: a no-op here
      // containers
      case ']': push(sequence(Kind::list, {})); break;
      case 'l': push(sequence(Kind::list, pop_mark())); break;
      case ')': push(sequence(Kind::tuple, {})); break;
      case 't': push(sequence(Kind::tuple, pop_mark())); break;
      case 0x85: case 0x86: case 0x87: {
        std::vector<std::size_t> v(op - 0x84);
        for (std::size_t i = v.size(); i-- > 0;) v[i] = pop();
        push(sequence(Kind::tuple, std::move(v)));
        break;
      }
      case '}': push(scalar(Kind::dict)); break;
      case 'd': { const auto kv = pop_mark(); set_items(push(scalar(Kind::dict)), kv); break; }
      case 'a': { const std::size_t v = pop(); append(top(), {v}); break; }
      case 'e': { const auto v = pop_mark(); append(top(), v); break; }
      case 's': { const std::size_t v = pop(), k = pop(); set_items(top(), {k, v}); break; }
      case 'u': { const auto kv = pop_mark(); set_items(top(), kv); break; }
      case 0x8f: { Node n = global("builtins", "set"); n.instance = true; push(std::move(n)); break; }
      case 0x91: { const auto v = pop_mark(); Node n = global("builtins", "frozenset"); n.instance = true; n.appended = v; push(std::move(n)); break; }
      case 0x90: { const auto v = pop_mark(); append(top(), v); break; }
      // globals and objects: recorded, never called
      case 'c': { std::string module(line()); push(global(std::move(module), line())); break; }
      case 0x93: {
        const std::size_t name = pop(), module = pop();
        const std::size_t m = expect(module, Kind::string, "STACK_GLOBAL's module").text.size();
        charge(m + expect(name, Kind::string, "STACK_GLOBAL's name").text.size(), at_);  // memoised strings, used many times over
        push(global(node(module).text, node(name).text));
        break;
      }
      case 0x82: case 0x83: case 0x84: {
        const auto code = unsigned_le(op == 0x82 ? 1 : op == 0x83 ? 2 : 4);
        push(global("<extension>", std::to_string(code)));
        break;
      }
      case 'R': { const std::size_t args = pop(), callable = pop(); call(callable, args, "REDUCE"); break; }
      case 0x81: { const std::size_t args = pop(), cls = pop(); call(cls, args, "NEWOBJ"); break; }
      case 0x92: {
        const std::size_t kwargs = pop(), args = pop(), cls = pop();
        const std::size_t count = expect(kwargs, Kind::dict, "NEWOBJ_EX's keyword arguments").entries.size();
        call(cls, args, "NEWOBJ_EX");
        node(top()).kwargs = kwargs;  // its entries as they are now: later SETITEMs onto the dict come after them
        node(top()).kwargs_count = count;
        break;
      }
      case 'i': {
        std::string module(line());
        const std::size_t cls = add(global(std::move(module), line()));
        call(cls, add(sequence(Kind::tuple, pop_mark())), "INST");
        break;
      }
      case 'o': {
        auto v = pop_mark();
        if (v.empty()) fail("OBJ without a class");
        const std::size_t cls = v.front();
        call(cls, add(sequence(Kind::tuple, std::vector<std::size_t>(v.begin() + 1, v.end()))), "OBJ");
        break;
      }
      case 'b': {
        const std::size_t state = pop();
        Node& o = node(top());
        if (o.kind != Kind::object || !o.instance) fail(std::string("BUILD onto a ") + kind_name(o.kind) + ", not a class instance");
        o.state = state;
        break;
      }
      case 'P': { Node n = global("<persistent>", "id"); n.instance = true; n.items = {add(text(Kind::string, line()))}; push(std::move(n)); break; }
      case 'Q': { const std::size_t pid = pop(); Node n = global("<persistent>", "id"); n.instance = true; n.items = {pid}; push(std::move(n)); break; }
      default: fail("an unknown opcode");
    }
  }
  std::uint64_t signed_length(std::size_t n) {
    const auto u = unsigned_le(n);
    if (u & (std::uint64_t{1} << (8 * n - 1))) fail("a negative length");
    return u;
  }

  /// The node as a Value tree; `budget` counts the values still allowed, `spent_` the bytes taken.
  Value tree(std::size_t i, std::size_t depth, std::size_t& budget) {
    const Node& n = nodes_[i];  // nodes_ no longer grows: the reference stays valid
    if (depth > limits_.max_depth)
      fail("values nested deeper than " + std::to_string(limits_.max_depth) + " levels (or a container holding itself)", n.offset);
    if (budget-- == 0) fail("more than " + std::to_string(limits_.max_values) + " values (memo references repeat shared ones)", n.offset);
    charge(Limits::value_cost + n.text.size() + n.big_integer.size(), n.offset);
    Value v;
    v.kind = n.kind;
    v.boolean = n.boolean;
    v.instance = n.instance;
    v.integer = n.integer;
    v.floating = n.floating;
    v.text = n.text;
    v.big_integer = n.big_integer;
    const auto list = [&](const std::vector<std::size_t>& from, std::vector<Value>& to) {
      for (std::size_t k : from) to.push_back(tree(k, depth + 1, budget));
    };
    const auto pairs = [&](const std::vector<std::pair<std::size_t, std::size_t>>& from, std::size_t count,
                           std::vector<std::pair<Value, Value>>& to) {
      for (std::size_t k = 0; k < count; ++k) {
        Value a = tree(from[k].first, depth + 1, budget);
        to.emplace_back(std::move(a), tree(from[k].second, depth + 1, budget));
      }
    };
    list(n.args != npos ? nodes_[n.args].items : n.items, v.items);
    list(n.appended, v.appended);
    pairs(n.entries, n.entries.size(), v.entries);
    if (n.kwargs != npos) pairs(nodes_[n.kwargs].entries, n.kwargs_count, v.kwargs);
    if (n.state != npos) v.state.push_back(tree(n.state, depth + 1, budget));
    return v;
  }
};

}  // namespace detail

FITLIB_PREBUILT_INLINE Value decode(std::span<const std::uint8_t> bytes, const Limits& limits) {
  return detail::Machine(bytes, limits).run();
}

namespace detail {

/// The pickler behind `encode`: one opcode per value, no memo (Python's unpickler needs none).
class Writer {
 public:
  explicit Writer(std::size_t max_depth) : max_depth_(max_depth) {}
  std::vector<std::uint8_t> out;

  void value(const Value& v, std::size_t depth) {
    if (depth > max_depth_) throw usage_error("pickle::encode: values nested deeper than " + std::to_string(max_depth_) + " levels");
    switch (v.kind) {
      case Kind::none: op('N'); break;
      case Kind::boolean: op(v.boolean ? 0x88 : 0x89); break;
      case Kind::integer: integer(v); break;
      case Kind::floating: {
        std::uint64_t u = 0;
        std::memcpy(&u, &v.floating, sizeof u);
        op('G');
        for (int k = 7; k >= 0; --k) out.push_back(static_cast<std::uint8_t>(u >> (8 * k)));  // big-endian
        break;
      }
      case Kind::string: sized(v.text, 0x8c, 'X', 0x8d); break;
      case Kind::bytes: sized(v.text, 'C', 'B', 0x8e); break;
      case Kind::list:
        op(']');
        if (!v.items.empty()) {
          op('(');
          for (const auto& x : v.items) value(x, depth + 1);
          op('e');
        }
        break;
      case Kind::tuple: tuple(v.items, depth); break;
      case Kind::dict: dict(v.entries, depth); break;
      case Kind::object: object(v, depth); break;
    }
  }

 private:
  std::size_t max_depth_;
  void op(int c) { out.push_back(static_cast<std::uint8_t>(c)); }
  void le(std::uint64_t u, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) out.push_back(static_cast<std::uint8_t>(u >> (8 * k)));
  }
  void sized(const std::string& s, int op1, int op4, int op8) {
    if (s.size() < 256) { op(op1); le(s.size(), 1); }
    else if (s.size() <= 0xffffffffu) { op(op4); le(s.size(), 4); }
    else { op(op8); le(s.size(), 8); }
    out.insert(out.end(), s.begin(), s.end());
  }
  void integer(const Value& v) {
    if (!v.big_integer.empty()) throw usage_error("pickle::encode: integers beyond 64 bits are not supported");
    const std::int64_t i = v.integer;
    if (i >= 0 && i < 256) { op('K'); le(static_cast<std::uint64_t>(i), 1); return; }
    if (i >= 0 && i < 65536) { op('M'); le(static_cast<std::uint64_t>(i), 2); return; }
    if (i >= std::numeric_limits<std::int32_t>::min() && i <= std::numeric_limits<std::int32_t>::max()) {
      op('J');
      le(static_cast<std::uint32_t>(static_cast<std::int32_t>(i)), 4);
      return;
    }
    // LONG1: the shortest little-endian two's complement
    const auto u = static_cast<std::uint64_t>(i);
    std::size_t n = 8;
    while (n > 1) {
      const auto top = static_cast<std::int8_t>(u >> (8 * (n - 2)));  // the byte that would become the last
      const auto last = static_cast<std::uint8_t>(u >> (8 * (n - 1)));
      if ((last == 0 && top >= 0) || (last == 0xff && top < 0)) --n;
      else break;
    }
    op(0x8a);
    le(n, 1);
    le(u, n);
  }
  void tuple(const std::vector<Value>& items, std::size_t depth) {
    if (items.empty()) { op(')'); return; }
    if (items.size() > 3) op('(');
    for (const auto& x : items) value(x, depth + 1);
    op(items.size() > 3 ? 't' : 0x84 + static_cast<int>(items.size()));
  }
  void dict(const std::vector<std::pair<Value, Value>>& entries, std::size_t depth) {
    op('}');
    if (entries.empty()) return;
    op('(');
    for (const auto& [k, x] : entries) {
      value(k, depth + 1);
      value(x, depth + 1);
    }
    op('u');
  }
  void object(const Value& v, std::size_t depth) {
    const std::size_t dot = v.text.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == v.text.size())
      throw usage_error("pickle::encode: the object's global '" + v.text + "' is not \"module.name\"");
    if (!v.entries.empty() || !v.appended.empty()) throw usage_error("pickle::encode: objects with SETITEMS/APPENDS are not supported");
    sized(v.text.substr(0, dot), 0x8c, 'X', 0x8d);
    sized(v.text.substr(dot + 1), 0x8c, 'X', 0x8d);
    op(0x93);  // STACK_GLOBAL
    if (!v.instance) {
      if (!v.items.empty() || !v.kwargs.empty() || !v.state.empty()) throw usage_error("pickle::encode: a global reference (instance false) has no arguments or state");
      return;
    }
    tuple(v.items, depth);
    if (v.kwargs.empty()) {
      op(0x81);  // NEWOBJ: cls.__new__(cls, *args)
    } else {
      dict(v.kwargs, depth);
      op(0x92);  // NEWOBJ_EX
    }
    if (v.state.size() > 1) throw usage_error("pickle::encode: an object has at most one BUILD state");
    if (!v.state.empty()) {
      value(v.state.front(), depth + 1);
      op('b');
    }
  }
};

}  // namespace detail

FITLIB_PREBUILT_INLINE std::vector<std::uint8_t> encode(const Value& v, std::size_t max_depth) {
  detail::Writer w(max_depth);
  w.value(v, 0);
  w.out.push_back('.');
  std::vector<std::uint8_t> bytes = {0x80, 4, 0x95};
  for (std::size_t k = 0; k < 8; ++k) bytes.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(w.out.size()) >> (8 * k)));
  bytes.insert(bytes.end(), w.out.begin(), w.out.end());
  return bytes;
}
#endif

/// Value builders for `encode`.
inline Value none() { return {}; }
inline Value boolean(bool b) { Value v; v.kind = Kind::boolean; v.boolean = b; return v; }
inline Value integer(std::int64_t i) { Value v; v.kind = Kind::integer; v.integer = i; return v; }
inline Value floating(double x) { Value v; v.kind = Kind::floating; v.floating = x; return v; }
inline Value string(std::string s) { Value v; v.kind = Kind::string; v.text = std::move(s); return v; }
inline Value list(std::vector<Value> items) { Value v; v.kind = Kind::list; v.items = std::move(items); return v; }
inline Value tuple(std::vector<Value> items) { Value v; v.kind = Kind::tuple; v.items = std::move(items); return v; }
/// A dict with string keys, in the given order.
inline Value dict(std::vector<std::pair<std::string, Value>> entries) {
  Value v;
  v.kind = Kind::dict;
  for (auto& [k, x] : entries) v.entries.emplace_back(string(k), std::move(x));
  return v;
}
/// An instance of the global "module.name" made by NEWOBJ from `args`, with an optional BUILD `state`.
inline Value instance(std::string global, std::vector<Value> args, std::optional<Value> state = std::nullopt) {
  Value v;
  v.kind = Kind::object;
  v.instance = true;
  v.text = std::move(global);
  v.items = std::move(args);
  if (state) v.state.push_back(std::move(*state));
  return v;
}

}  // namespace fitlib::io::pickle
