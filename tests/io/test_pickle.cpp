// SPDX-License-Identifier: MIT
// The restricted pickle decoder on byte streams of protocols 0–5 (every opcode family, opaque objects, malformed
// input), and read_rabbit's use of rabbit's `meta` pickle (systematic_type, symmetric_tensor).
#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "fitlib/fit.hpp"
#include "fitlib/io/pickle.hpp"
#include "fitlib/io/rabbit.hpp"

using namespace std::string_literals;
using fitlib::io::file_error;
using namespace fitlib::io::pickle;
using Catch::Matchers::Contains;

namespace {

Value dec(const std::string& s, const Limits& limits = {}) {
  return decode(std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()), limits);
}

const Value& at(const Value& dict, const char* key) {
  const Value* v = dict.find(key);
  if (v == nullptr) FAIL("no key " << key);
  return *v;
}

void check_int(const Value& v, std::int64_t want) {
  CHECK(v.kind == Kind::integer);
  CHECK(v.big_integer.empty());
  CHECK(v.integer == want);
}

// What Python 3.11's pickle.dumps(obj, protocol=N) writes (class Point with __init__ setting x, y; class KW whose
// __getnewargs_ex__ returns ((), {"k": 3})):
// p0: {"a": [1, 2.5, None, True, "h\u00e9llo\n", -3], "b": (1,), "c": 2**70}
// p2: {"ints": [0, 255, 256, 65535, 65536, -1, -2**31, 2**31, 2**63-1, -2**63, 2**64, -2**70], "t": (1, 2, 3),
//      "t4": (1, 2, 3, 4), "f": False, "s": {3}, "e": ()}
// p4: {"shared": [shared, shared] with shared = [7], "obj": Point(1, "y"), "fs": frozenset([5]), "set": {6},
//      "u": "\u20ac", "b": b"\x00\xff"}
// p5: {"systematic_type": "normal", "symmetric_tensor": False, "ba": bytearray(b"ab"), "kw": KW(k=3),
//      "od": collections.OrderedDict([("k", 1)])}
const std::string p0 = "\x28\x64\x70\x30\x0a\x56\x61\x0a\x70\x31\x0a\x28\x6c\x70\x32\x0a\x49\x31\x0a\x61\x46\x32\x2e\x35\x0a\x61\x4e\x61\x49\x30\x31\x0a\x61\x56\x68\xe9\x6c\x6c\x6f\x5c\x75\x30\x30\x30\x61\x0a\x70\x33\x0a\x61\x49\x2d\x33\x0a\x61\x73\x56\x62\x0a\x70\x34\x0a\x28\x49\x31\x0a\x74\x70\x35\x0a\x73\x56\x63\x0a\x70\x36\x0a\x4c\x31\x31\x38\x30\x35\x39\x31\x36\x32\x30\x37\x31\x37\x34\x31\x31\x33\x30\x33\x34\x32\x34\x4c\x0a\x73\x2e"s;
const std::string p2 = "\x80\x02\x7d\x71\x00\x28\x58\x04\x00\x00\x00\x69\x6e\x74\x73\x71\x01\x5d\x71\x02\x28\x4b\x00\x4b\xff\x4d\x00\x01\x4d\xff\xff\x4a\x00\x00\x01\x00\x4a\xff\xff\xff\xff\x4a\x00\x00\x00\x80\x8a\x05\x00\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x65\x58\x01\x00\x00\x00\x74\x71\x03\x4b\x01\x4b\x02\x4b\x03\x87\x71\x04\x58\x02\x00\x00\x00\x74\x34\x71\x05\x28\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x74\x71\x06\x58\x01\x00\x00\x00\x66\x71\x07\x89\x58\x01\x00\x00\x00\x73\x71\x08\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74\x0a\x71\x09\x5d\x71\x0a\x4b\x03\x61\x85\x71\x0b\x52\x71\x0c\x58\x01\x00\x00\x00\x65\x71\x0d\x29\x75\x2e"s;
const std::string p4 = "\x80\x04\x95\x71\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x06\x73\x68\x61\x72\x65\x64\x94\x5d\x94\x28\x5d\x94\x4b\x07\x61\x68\x03\x65\x8c\x03\x6f\x62\x6a\x94\x8c\x08\x5f\x5f\x6d\x61\x69\x6e\x5f\x5f\x94\x8c\x05\x50\x6f\x69\x6e\x74\x94\x93\x94\x29\x81\x94\x7d\x94\x28\x8c\x01\x78\x94\x4b\x01\x8c\x01\x79\x94\x68\x0b\x75\x62\x8c\x02\x66\x73\x94\x28\x4b\x05\x91\x94\x8c\x03\x73\x65\x74\x94\x8f\x94\x28\x4b\x06\x90\x8c\x01\x75\x94\x8c\x03\xe2\x82\xac\x94\x8c\x01\x62\x94\x43\x02\x00\xff\x94\x75\x2e"s;
const std::string p5 = "\x80\x05\x95\x93\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x0f\x73\x79\x73\x74\x65\x6d\x61\x74\x69\x63\x5f\x74\x79\x70\x65\x94\x8c\x06\x6e\x6f\x72\x6d\x61\x6c\x94\x8c\x10\x73\x79\x6d\x6d\x65\x74\x72\x69\x63\x5f\x74\x65\x6e\x73\x6f\x72\x94\x89\x8c\x02\x62\x61\x94\x96\x02\x00\x00\x00\x00\x00\x00\x00\x61\x62\x94\x8c\x02\x6b\x77\x94\x8c\x08\x5f\x5f\x6d\x61\x69\x6e\x5f\x5f\x94\x8c\x02\x4b\x57\x94\x93\x94\x29\x7d\x94\x8c\x01\x6b\x94\x4b\x03\x73\x92\x94\x8c\x02\x6f\x64\x94\x8c\x0b\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x94\x8c\x0b\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x94\x93\x94\x29\x52\x94\x68\x0b\x4b\x01\x73\x75\x2e"s;

}  // namespace

TEST_CASE("pickle: protocol 0 (text opcodes)", "[io][pickle]") {
  const Value v = dec(p0);
  REQUIRE(v.kind == Kind::dict);
  REQUIRE(v.entries.size() == 3);
  const Value& a = at(v, "a");
  REQUIRE(a.kind == Kind::list);
  REQUIRE(a.items.size() == 6);
  check_int(a.items[0], 1);
  CHECK(a.items[1].kind == Kind::floating);
  CHECK(a.items[1].floating == 2.5);
  CHECK(a.items[2].kind == Kind::none);
  CHECK(a.items[3].kind == Kind::boolean);
  CHECK(a.items[3].boolean);
  CHECK(a.items[4].kind == Kind::string);
  CHECK(a.items[4].text == "h\xc3\xa9llo\n");
  check_int(a.items[5], -3);
  const Value& b = at(v, "b");
  REQUIRE(b.kind == Kind::tuple);
  REQUIRE(b.items.size() == 1);
  check_int(b.items[0], 1);
  CHECK(at(v, "c").kind == Kind::integer);
  CHECK(at(v, "c").big_integer == "1180591620717411303424");
}

TEST_CASE("pickle: protocol 2 (binary ints, tuples, a set by REDUCE)", "[io][pickle]") {
  const Value v = dec(p2);
  const Value& ints = at(v, "ints");
  REQUIRE(ints.items.size() == 12);
  const std::int64_t want[] = {0, 255, 256, 65535, 65536, -1, -2147483648LL, 2147483648LL, INT64_MAX, INT64_MIN};
  for (int i = 0; i < 10; ++i) check_int(ints.items[static_cast<std::size_t>(i)], want[i]);
  CHECK(ints.items[10].big_integer == "18446744073709551616");
  CHECK(ints.items[11].big_integer == "-1180591620717411303424");
  CHECK(at(v, "t").kind == Kind::tuple);
  CHECK(at(v, "t").items.size() == 3);
  CHECK(at(v, "t4").items.size() == 4);
  check_int(at(v, "t4").items[3], 4);
  CHECK(at(v, "f").kind == Kind::boolean);
  CHECK_FALSE(at(v, "f").boolean);
  CHECK(at(v, "e").kind == Kind::tuple);
  CHECK(at(v, "e").items.empty());
  const Value& s = at(v, "s");  // REDUCE(__builtin__.set, ([3],)), recorded, not called
  REQUIRE(s.kind == Kind::object);
  CHECK(s.text == "__builtin__.set");
  CHECK(s.instance);
  REQUIRE(s.items.size() == 1);
  REQUIRE(s.items[0].kind == Kind::list);
  check_int(s.items[0].items.at(0), 3);
}

TEST_CASE("pickle: protocol 4 (frames, memo, NEWOBJ + BUILD, sets)", "[io][pickle]") {
  const Value v = dec(p4);
  const Value& shared = at(v, "shared");
  REQUIRE(shared.items.size() == 2);
  for (const Value& s : shared.items) {  // one memoised list, filled after it was stored
    REQUIRE(s.kind == Kind::list);
    REQUIRE(s.items.size() == 1);
    check_int(s.items[0], 7);
  }
  const Value& obj = at(v, "obj");
  REQUIRE(obj.kind == Kind::object);
  CHECK(obj.text == "__main__.Point");
  CHECK(obj.instance);
  CHECK(obj.items.empty());
  REQUIRE(obj.state.size() == 1);
  check_int(at(obj.state[0], "x"), 1);
  CHECK(at(obj.state[0], "y").text == "y");
  const Value& fs = at(v, "fs");
  CHECK(fs.text == "builtins.frozenset");
  REQUIRE(fs.appended.size() == 1);
  check_int(fs.appended[0], 5);
  const Value& set = at(v, "set");
  CHECK(set.text == "builtins.set");
  REQUIRE(set.appended.size() == 1);
  check_int(set.appended[0], 6);
  CHECK(at(v, "u").text == "\xe2\x82\xac");
  CHECK(at(v, "b").kind == Kind::bytes);
  CHECK(at(v, "b").text == "\x00\xff"s);
}

TEST_CASE("pickle: protocol 5 (bytearray, NEWOBJ_EX, REDUCE + SETITEMS onto an object)", "[io][pickle]") {
  const Value v = dec(p5);
  CHECK(at(v, "systematic_type").text == "normal");
  CHECK(at(v, "symmetric_tensor").kind == Kind::boolean);
  CHECK_FALSE(at(v, "symmetric_tensor").boolean);
  CHECK(at(v, "ba").kind == Kind::bytes);
  CHECK(at(v, "ba").text == "ab");
  const Value& kw = at(v, "kw");
  CHECK(kw.text == "__main__.KW");
  REQUIRE(kw.kwargs.size() == 1);
  CHECK(kw.kwargs[0].first.text == "k");
  check_int(kw.kwargs[0].second, 3);
  const Value& od = at(v, "od");
  CHECK(od.text == "collections.OrderedDict");
  REQUIRE(od.entries.size() == 1);
  CHECK(od.entries[0].first.text == "k");
  CHECK(v.find("missing") == nullptr);
  CHECK(od.find("k") == nullptr);  // not a dict
}

TEST_CASE("pickle: the remaining opcodes, hand-made", "[io][pickle]") {
  SECTION("strings and bytes of every width") {
    CHECK(dec("S'a\\n\\x41\\'b\\101'\n."s).text == "a\nA'bA");
    CHECK(dec("T\x02\x00\x00\x00hi."s).text == "hi");
    CHECK(dec("U\x02hi."s).kind == Kind::bytes);
    CHECK(dec("B\x02\x00\x00\x00hi."s).text == "hi");
    CHECK(dec("C\x02hi\x98."s).text == "hi");  // + READONLY_BUFFER
    CHECK(dec("\x8e\x02\x00\x00\x00\x00\x00\x00\x00hi."s).kind == Kind::bytes);
    CHECK(dec("\x8d\x02\x00\x00\x00\x00\x00\x00\x00hi."s).kind == Kind::string);
    CHECK(dec("X\x02\x00\x00\x00hi."s).text == "hi");
    CHECK(dec("V\\u20ac\\U0001f600x\xe9\n."s).text == "\xe2\x82\xac\xf0\x9f\x98\x80x\xc3\xa9");
  }
  SECTION("numbers") {
    CHECK(dec("G\x3f\xf8\x00\x00\x00\x00\x00\x00."s).floating == 1.5);
    CHECK(dec("F-0.25\n."s).floating == -0.25);
    CHECK(dec("\x88."s).boolean);
    CHECK_FALSE(dec("I00\n."s).boolean);
    check_int(dec("I-7\n."s), -7);
    check_int(dec("\x8b\x02\x00\x00\x00\xff\x7f."s), 32767);
    check_int(dec("\x8a\x01\xff."s), -1);
    check_int(dec("\x8a\x00."s), 0);
    CHECK(dec("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."s).big_integer == "18446744073709551616");
    CHECK(dec("L123456789012345678901234567890L\n."s).big_integer == "123456789012345678901234567890");
    check_int(dec("J\xfe\xff\xff\xff."s), -2);
    check_int(dec("M\x01\x02."s), 0x201);
  }
  SECTION("stack and memo") {
    check_int(dec("K\x01K\x02" "0."s), 1);                   // POP
    check_int(dec("K\x01(K\x02K\x03" "1."s), 1);              // POP_MARK
    CHECK(dec("K\x05" "2\x86."s).items.size() == 2);          // DUP, TUPLE2
    check_int(dec("K\x09p3\n0g3\n."s), 9);                    // PUT, GET
    check_int(dec("K\x09r\x01\x00\x00\x00" "0j\x01\x00\x00\x00."s), 9);  // LONG_BINPUT, LONG_BINGET
    const Value t = dec("]q\x00h\x00K\x01" "a\x86."s);         // the same list twice, appended to after both uses
    REQUIRE(t.items.size() == 2);
    CHECK(t.items[0].items.size() == 1);
    CHECK(t.items[1].items.size() == 1);
    CHECK(dec("(K\x01K\x02l."s).items.size() == 2);           // LIST
    CHECK(dec("(K\x01K\x02" "d."s).entries.size() == 1);      // DICT
    CHECK(dec("}K\x01K\x02s."s).entries.size() == 1);         // SETITEM
    CHECK(dec("](K\x01K\x02" "e."s).items.size() == 2);       // APPENDS
  }
  SECTION("objects: recorded, never called") {
    const Value inst = dec("(K\x01i__main__\nC\n."s);
    CHECK(inst.text == "__main__.C");
    CHECK(inst.instance);
    check_int(inst.items.at(0), 1);
    const Value obj = dec("(c__main__\nC\nK\x02o}K\x01K\x02sb."s);  // OBJ, BUILD
    CHECK(obj.text == "__main__.C");
    check_int(obj.items.at(0), 2);
    CHECK(obj.state.at(0).entries.size() == 1);
    const Value g = dec("cos\nsystem\n."s);  // a bare GLOBAL is a name, not a call
    CHECK(g.text == "os.system");
    CHECK_FALSE(g.instance);
    const Value r = dec("cos\nsystem\n(S'rm -rf /'\ntR."s);
    CHECK(r.text == "os.system");
    CHECK(r.instance);
    CHECK(r.items.at(0).text == "rm -rf /");
    CHECK(dec("\x82\x07."s).text == "<extension>.7");
    CHECK(dec("\x83\x07\x01."s).text == "<extension>.263");
    CHECK(dec("\x84\x01\x00\x00\x00."s).text == "<extension>.1");
    const Value p = dec("Pabc\n."s);
    CHECK(p.text == "<persistent>.id");
    CHECK(p.items.at(0).text == "abc");
    CHECK(dec("\x8c\x01xQ."s).items.at(0).text == "x");
    CHECK(dec("\x80\x05\x8f(K\x01\x90."s).appended.size() == 1);  // EMPTY_SET, ADDITEMS
  }
  SECTION("bytes after STOP are ignored") { CHECK(dec("N.garbage"s).kind == Kind::none); }
}

TEST_CASE("pickle: malformed streams throw file_error with the offset", "[io][pickle]") {
  const auto fails = [](const std::string& s, const std::string& what, const std::string& where, const Limits& limits = {}) {
    INFO("stream of " << s.size() << " bytes, expecting '" << what << "' " << where);
    try {
      dec(s, limits);
      FAIL("decoded");
    } catch (const file_error& e) {
      CHECK_THAT(e.what(), Contains(what) && Contains(where));
    }
  };
  SECTION("every truncation of real streams") {
    for (const std::string* s : {&p0, &p2, &p4, &p5})
      for (std::size_t n = 0; n < s->size(); ++n) CHECK_THROWS_AS(dec(s->substr(0, n)), file_error);
    fails(""s, "before its STOP", "at byte 0");
    fails("\x80\x04\x8c\x05"s "ab"s, "only 2 remain", "at byte 2");
    fails("I12"s, "newline", "at byte 0");
  }
  SECTION("unknown opcodes and protocols") {
    fails("\xff."s, "unknown opcode", "at byte 0");
    fails("\x80\x05\x8c\x01x\xfe."s, "unknown opcode (opcode 0xfe)", "at byte 5");
    fails("\x80\x06N."s, "protocol 6", "at byte 0");
    fails("N\x97."s, "out-of-band buffer", "at byte 1");
  }
  SECTION("stack underflow") {
    fails("."s, "stack underflow", "at byte 0");
    fails("K\x01(a."s, "stack underflow", "at byte 3");  // APPEND may not reach below a MARK
    fails("K\x01" "1."s, "no MARK", "at byte 2");
    fails("\x93."s, "stack underflow", "at byte 0");
    fails("t."s, "no MARK", "at byte 0");
  }
  SECTION("lengths beyond the stream") {
    fails("\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."s, "only 1 remain", "at byte 0");
    fails("X\xff\xff\xff\xff" "ab."s, "a length of 4294967295 bytes", "at byte 0");
    fails("\x80\x04\x95\x00\x00\x00\x01\x00\x00\x00\x00N."s, "FRAME of 16777216 bytes", "at byte 2");
    fails("T\xff\xff\xff\xff."s, "negative length", "at byte 0");
    fails("\x8b\x00\x04\x00\x00"s + std::string(1024, '\x01') + ".", "an integer of 1024 bytes, too long", "at byte 0");
  }
  SECTION("wrong operands") {
    fails("K\x01)R."s, "REDUCE's callable is a int", "at byte 3");
    fails("K\x01N" "b."s, "BUILD onto a int", "at byte 3");
    fails("h\x05."s, "memo entry 5", "at byte 0");
    fails("K\x01K\x02\x93."s, "STACK_GLOBAL's module is a int", "at byte 4");
    fails("K\x01(K\x02K\x03u."s, "SETITEM(S) onto a int", "at byte 7");
    fails("}(K\x02u."s, "odd number", "at byte 4");
    fails("F1.5x\n."s, "not a number", "at byte 0");
    fails("S'abc\n."s, "not quoted", "at byte 0");
  }
  SECTION("nesting and expansion") {
    fails(std::string(200, ']') + std::string(199, 'a') + ".", "nested deeper than 128 levels", "at byte");
    fails("]q\x00h\x00" "a."s, "a container holding itself", "at byte 0");
    std::string laughs = "K\x01"s;  // each level a pair of the level below: 2^40 values from 240 bytes
    for (int i = 0; i < 40; ++i) laughs += "q\x00" "0(h\x00h\x00t"s;
    fails(laughs + ".", "expand beyond 1048576 bytes", "at byte");  // the byte budget (1 MiB for a short stream) comes first
    fails(laughs + ".", "more than 1048576 values", "at byte", Limits{.max_bytes = std::size_t{1} << 26});
    fails("(K\x01K\x02K\x03l."s, "more than 2 values", "at byte 3", Limits{.max_depth = 128, .max_values = 2});
    fails("]]]aa."s, "nested deeper than 1 levels", "at byte 2", Limits{.max_depth = 1});
  }
}

TEST_CASE("pickle: memo references cannot blow up memory or time", "[io][pickle]") {
  const auto expands = [](const std::string& s, const Limits& limits = {}) {
    INFO("stream of " << s.size() << " bytes");
    try {
      dec(s, limits);
      FAIL("decoded");
    } catch (const file_error& e) {
      CHECK_THAT(e.what(), Contains("malformed pickle: the decoded values expand beyond") && Contains(" bytes") && Contains("at byte"));
    }
  };
  const auto le4 = [](std::size_t n) {
    std::string b;
    for (int k = 0; k < 4; ++k) b += static_cast<char>((n >> (8 * k)) & 0xff);
    return b;
  };
  SECTION("one string referenced over and over: each use is charged its bytes") {
    // a 256 KiB str, memoised, then a list of 50000 references to it: 12.8 GB as a tree, from 356 KB
    const std::string bomb = "\x80\x04X"s + le4(std::size_t{1} << 18) + std::string(std::size_t{1} << 18, 'x') + "\x94](" +
                             [] { std::string g; for (int k = 0; k < 50000; ++k) g += "h\x00"s; return g; }() + "e.";
    expands(bomb);
    // the default budget: 64 × the stream's size, at least 1 MiB, at most 1 GiB
    CHECK(Limits::default_max_bytes(0) == std::size_t{1} << 20);
    CHECK(Limits::default_max_bytes(bomb.size()) == 64 * bomb.size());
    CHECK(Limits::default_max_bytes(std::size_t{1} << 40) == std::size_t{1} << 30);
    try {
      dec(bomb);
    } catch (const file_error& e) {
      CHECK_THAT(e.what(), Contains("beyond " + std::to_string(64 * bomb.size()) + " bytes"));
    }
    // an explicit limit; a short list of references fits the default
    const std::string few = "X\x03\x00\x00\x00" "abcq\x00](h\x00h\x00h\x00" "e."s;
    CHECK(dec(few).items.size() == 3);
    expands(few, Limits{.max_bytes = 100});
    CHECK(dec(few, Limits{.max_bytes = 4 * (Limits::value_cost + 3)}).items.at(2).text == "abc");
  }
  SECTION("one argument tuple reused by many REDUCEs") {
    // a tuple of 20000 Nones, memoised, passed to a memoised global 100000 times: 2·10⁹ arguments from 320 KB
    std::string s = "\x80\x02" "c__main__\nC\nq\x00("s + std::string(20000, 'N') + "tq\x01](";
    for (int k = 0; k < 100000; ++k) s += "h\x00h\x01R"s;
    s += "e.";
    expands(s, Limits{.max_bytes = std::size_t{1} << 22});  // 4 MiB: fails within 131072 values (so does the default, 20 MB here, later)
    // the same calls, discarded (POP): the arguments are shared, not copied, so nothing grows
    std::string popped = "\x80\x02" "c__main__\nC\nq\x00("s + std::string(20000, 'N') + "tq\x01";
    for (int k = 0; k < 100000; ++k) popped += "h\x00h\x01R0"s;
    popped += "N.";
    CHECK(dec(popped).kind == Kind::none);
    // a shared argument tuple still reads as each call's arguments; NEWOBJ_EX's keywords as the dict was then
    const Value two = dec("\x80\x04\x8c\x01m\x8c\x01" "C\x93\x94K\x07\x85\x94}\x94h\x00h\x01h\x02\x92h\x02K\x01K\x02s0h\x00h\x01h\x02\x92\x86."s);
    REQUIRE(two.items.size() == 2);
    for (const Value& o : two.items) {
      CHECK(o.text == "m.C");
      check_int(o.items.at(0), 7);
    }
    CHECK(two.items[0].kwargs.empty());
    REQUIRE(two.items[1].kwargs.size() == 1);
    check_int(two.items[1].kwargs[0].first, 1);
  }
  SECTION("a long global name, memoised and called or looked up over and over") {
    std::string call = "\x80\x04X"s + le4(std::size_t{1} << 16) + std::string(std::size_t{1} << 16, 'm') + "\x94\x8c\x01" "C\x94\x93\x94";
    std::string lookup = call;
    for (int k = 0; k < 20000; ++k) call += "h\x02)R0"s;
    for (int k = 0; k < 20000; ++k) lookup += "h\x00h\x01\x93" "0"s;
    expands(call + "N.");
    expands(lookup + "N.");
  }
}

TEST_CASE("pickle: a dict key set twice keeps its last value, as Python does", "[io][pickle]") {
  // {"k": 1, "j": 2, "k": 3}: Python's pickle.loads gives {"k": 3, "j": 2}
  const Value v = dec("}(\x8c\x01kK\x01\x8c\x01jK\x02\x8c\x01kK\x03u."s);
  REQUIRE(v.kind == Kind::dict);
  check_int(at(v, "k"), 3);
  check_int(at(v, "j"), 2);
  const Value s = dec("}\x8c\x01kK\x01s\x8c\x01kK\x02s."s);  // SETITEM twice
  check_int(at(s, "k"), 2);
  const Value d = dec("(\x8c\x01kK\x01\x8c\x01kK\x05" "d."s);  // DICT from a MARK
  check_int(at(d, "k"), 5);
}

namespace {

/// Structural equality of two decoded trees.
bool same(const Value& a, const Value& b) {
  const auto seq = [](const std::vector<Value>& x, const std::vector<Value>& y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!same(x[i], y[i])) return false;
    return true;
  };
  const auto pairs = [](const std::vector<std::pair<Value, Value>>& x, const std::vector<std::pair<Value, Value>>& y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!same(x[i].first, y[i].first) || !same(x[i].second, y[i].second)) return false;
    return true;
  };
  const bool float_same = a.floating == b.floating || (std::isnan(a.floating) && std::isnan(b.floating));
  return a.kind == b.kind && a.boolean == b.boolean && a.integer == b.integer && a.big_integer == b.big_integer && float_same &&
         a.text == b.text && a.instance == b.instance && seq(a.items, b.items) && pairs(a.entries, b.entries) && pairs(a.kwargs, b.kwargs) &&
         seq(a.state, b.state) && seq(a.appended, b.appended);
}

}  // namespace

TEST_CASE("pickle: encode writes what decode reads back", "[io][pickle]") {
  std::vector<Value> ints;
  for (const std::int64_t i : {std::int64_t{0}, std::int64_t{255}, std::int64_t{256}, std::int64_t{65535}, std::int64_t{65536}, std::int64_t{-1},
                               std::int64_t{-129}, std::int64_t{2147483647}, std::int64_t{-2147483648LL}, std::int64_t{2147483648LL},
                               std::int64_t{-2147483649LL}, std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max(),
                               std::numeric_limits<std::int64_t>::min()})
    ints.push_back(integer(i));
  Value bytes_value;
  bytes_value.kind = Kind::bytes;
  bytes_value.text = "\x00\xff"s;
  Value kw = instance("collections.OrderedDict", {tuple({})});
  kw.kwargs.emplace_back(string("k"), integer(1));
  Value global;
  global.kind = Kind::object;
  global.text = "builtins.len";
  const Value v = dict({
      {"none", none()},
      {"flags", list({boolean(true), boolean(false)})},
      {"ints", list(ints)},
      {"floats", tuple({floating(0.5), floating(-1e300), floating(std::numeric_limits<double>::infinity()), floating(std::nan(""))})},
      {"short", string("normal")},
      {"long", string(std::string(300, 'x') + "\xc3\xa9")},
      {"bytes", bytes_value},
      {"tuples", list({tuple({}), tuple({integer(1)}), tuple({integer(1), integer(2)}), tuple({integer(1), integer(2), integer(3)}),
                       tuple({integer(1), integer(2), integer(3), integer(4)})})},
      {"empty", list({list({}), dict({})})},
      {"axis", instance("hist.axis.Integer", {}, dict({{"_ax", instance("boost_histogram._core.axis.integer_none", {},
                                                                        tuple({integer(0), integer(6), dict({}), integer(0)}))}}))},
      {"kwargs", kw},
      {"global", global},
  });
  const std::vector<std::uint8_t> b = encode(v);
  REQUIRE(b.size() > 11);
  CHECK(b[0] == 0x80);
  CHECK(b[1] == 4);
  CHECK(b[2] == 0x95);
  CHECK(b.back() == '.');
  CHECK(same(decode(b), v));
  // A protocol-4 frame: PROTO 4, FRAME <length of the rest>, EMPTY_DICT, STOP.
  CHECK(encode(dict({})) == std::vector<std::uint8_t>{0x80, 4, 0x95, 2, 0, 0, 0, 0, 0, 0, 0, '}', '.'});
  CHECK(encode(integer(-1)) == std::vector<std::uint8_t>{0x80, 4, 0x95, 6, 0, 0, 0, 0, 0, 0, 0, 'J', 0xff, 0xff, 0xff, 0xff, '.'});
  CHECK(encode(integer(std::int64_t{1} << 31)) == std::vector<std::uint8_t>{0x80, 4, 0x95, 8, 0, 0, 0, 0, 0, 0, 0, 0x8a, 5, 0, 0, 0, 0x80, 0, '.'});

  Value big = integer(0);
  big.big_integer = "123456789012345678901234567890";
  CHECK_THROWS_AS(encode(big), fitlib::usage_error);
  Value nested = list({});
  for (int k = 0; k < 200; ++k) nested = list({nested});
  CHECK_THROWS_AS(encode(nested), fitlib::usage_error);
}

namespace {

std::string data(const std::string& name) { return std::string(FITLIB_TEST_DATA_DIR) + "/" + name; }
const std::string normal_file = data("rabbit/test_tensor_normal.hdf5");

/// A copy of `from` in `dir` with meta/pickle_data replaced by `pickle` (stored as integers, which read alike).
std::string with_meta(const fitlib::test::TempDir& dir, const std::string& from, const std::string& pickle) {
  const std::string path = dir / "meta.hdf5";
  std::filesystem::copy_file(from, path, std::filesystem::copy_options::overwrite_existing);
  const auto f = fitlib::io::hdf5::File::open(path, fitlib::io::hdf5::Access::read_write);
  fitlib::io::hdf5::remove(f, "meta/pickle_data");
  std::vector<std::int64_t> bytes;
  for (char c : pickle) bytes.push_back(static_cast<std::uint8_t>(c));
  fitlib::io::hdf5::write(fitlib::io::hdf5::open(f, "meta"), "pickle_data", std::span<const std::int64_t>(bytes));
  return path;
}

}  // namespace

TEST_CASE("rabbit meta: the example tensors' meta, as rabbit's TensorWriter wrote it", "[io][rabbit][pickle]") {
  using fitlib::SystematicType;
  for (const char* name : {"rabbit/test_tensor.hdf5", "rabbit/test_tensor_sparse.hdf5", "rabbit/test_tensor_symmetric.hdf5",
                           "rabbit_fixture/test_tensor_gzip.hdf5", "rabbit_fixture/test_tensor_sparse_gzip.hdf5"}) {
    INFO(name);
    const fitlib::io::RabbitTensor t = fitlib::io::read_rabbit(data(name));
    REQUIRE(t.meta.has_value());
    CHECK(t.meta_skipped.empty());
    CHECK(t.meta->systematic_type == SystematicType::log_normal);
    CHECK(t.model.systematic_type == SystematicType::log_normal);
    CHECK(t.meta->symmetric_tensor == t.model.symmetric);  // false, false, true, false, false
    const Value* channels = t.meta->pickle.find("channel_info");
    REQUIRE(channels != nullptr);
    REQUIRE(channels->entries.size() == 3);  // ch0, ch1 and ch0_masked, in file order
    const Value* masked = channels->find("ch0_masked");
    REQUIRE(masked != nullptr);
    CHECK(at(*masked, "masked").boolean);
    const Value& axes = at(at(*channels, "ch0"), "axes");
    REQUIRE(axes.kind == Kind::list);
    REQUIRE(axes.items.size() == 1);
    CHECK(axes.items[0].kind == Kind::object);  // a hist axis (stand-in classes in tests/data/rabbit), never constructed
    CHECK(axes.items[0].text.rfind("hist.axis.", 0) == 0);
    CHECK(t.meta->pickle.find("meta_info") != nullptr);
  }
  CHECK(fitlib::io::read_rabbit(data("rabbit/test_tensor_symmetric.hdf5")).meta->symmetric_tensor == true);
}

TEST_CASE("rabbit meta: a tensor TensorWriter wrote with systematic_type=\"normal\"", "[io][rabbit][pickle]") {
  using namespace fitlib;
  const io::RabbitTensor t = io::read_rabbit(normal_file);
  REQUIRE(t.meta.has_value());
  CHECK(t.meta->systematic_type == SystematicType::normal);
  CHECK(t.meta->symmetric_tensor == false);
  CHECK(t.model.systematic_type == SystematicType::normal);
  CHECK_FALSE(t.model.symmetric);
  CHECK(io::read_rabbit(normal_file, {.systematic_type = SystematicType::normal}).model.systematic_type == SystematicType::normal);
  try {
    (void)io::read_rabbit(normal_file, {.systematic_type = SystematicType::log_normal});
    FAIL("read a normal tensor as log-normal");
  } catch (const usage_error& e) {
    CHECK_THAT(e.what(), Contains("test_tensor_normal.hdf5") && Contains("meta says systematic_type='normal'") &&
                             Contains("written by rabbit's TensorWriter") && Contains("RabbitReadOptions::systematic_type") &&
                             Contains("drop --systematicType or pass normal"));
  }

  // rabbit's normal model: ν = N + θ·logk, so lumi (uncertainty 1.05) at θ = 1 scales every yield by exactly 1.05.
  // Parameters: sqrt(r) of the POI sig, then hsysts = bkg_shape, lumi, sig_asym.
  SerialLikelihood normal(t.model);
  REQUIRE(normal.parameter_names() == std::vector<std::string>{"sig", "bkg_shape", "lumi", "sig_asym"});
  const std::vector<double> x{1, 0, 1, 0};
  const std::vector<double> nu = normal.yields(x);
  REQUIRE(nu.size() == t.model.dense()->nominal.size());
  for (std::size_t k = 0; k < nu.size(); ++k) CHECK(std::abs(nu[k] - 1.05 * t.model.dense()->nominal[k]) < 1e-12 * nu[k]);

  // The same file read as log-normal (its meta removed, as an older fitlib read it) fits differently.
  test::TempDir dir;
  const std::string stripped = dir / "no_meta.hdf5";
  std::filesystem::copy_file(normal_file, stripped);
  io::hdf5::remove(io::hdf5::File::open(stripped, io::hdf5::Access::read_write), "meta");
  const io::RabbitTensor ln = io::read_rabbit(stripped);
  CHECK_FALSE(ln.meta.has_value());
  CHECK(ln.model.systematic_type == SystematicType::log_normal);
  CHECK(io::read_rabbit(stripped, {.systematic_type = SystematicType::normal}).model.systematic_type == SystematicType::normal);
  SerialLikelihood lognormal(ln.model);
  const FitResult a = fit(normal, TrustRegion<Gltr>()), b = fit(lognormal, TrustRegion<Gltr>());
  REQUIRE(a.converged());
  INFO("normal: sig " << a.x[0] << " nll " << a.nll << "; log-normal: sig " << b.x[0] << " nll " << b.nll);
  CHECK(std::abs(a.x[0] - b.x[0]) > 1e-3);
  CHECK(std::abs(a.nll - b.nll) > 1e-3);
}

TEST_CASE("rabbit meta: an undecodable or inconsistent meta", "[io][rabbit][pickle]") {
  using namespace fitlib;
  test::TempDir dir;
  SECTION("a corrupt pickle names the dataset and the option that settles it") {
    const std::string path = with_meta(dir, normal_file, "\x80\x05\x95\xff\xff\x00\x00\x00\x00\x00\x00}."s);
    try {
      (void)io::read_rabbit(path);
      FAIL("read a tensor whose meta is corrupt");
    } catch (const io::file_error& e) {
      CHECK_THAT(e.what(), Contains("meta/pickle_data") && Contains("malformed pickle") && Contains("at byte 2") &&
                               Contains("--systematicType log_normal|normal") && Contains("RabbitReadOptions::systematic_type"));
    }
    const io::RabbitTensor t = io::read_rabbit(path, {.systematic_type = SystematicType::normal});
    CHECK_FALSE(t.meta.has_value());
    CHECK_THAT(t.meta_skipped, Contains("malformed pickle") && Contains("normal"));
    CHECK(t.model.systematic_type == SystematicType::normal);
  }
  SECTION("not a dict") {
    CHECK_THROWS_WITH(io::read_rabbit(with_meta(dir, normal_file, "N."s)), Contains("pickled None, not the dict"));
  }
  SECTION("symmetric_tensor contradicting hlogk's shape") {
    // {"symmetric_tensor": True}, protocol 2; the tensor is asymmetric
    const std::string path = with_meta(dir, normal_file, "\x80\x02}q\x00X\x10\x00\x00\x00symmetric_tensorq\x01\x88s."s);
    CHECK_THROWS_AS(io::read_rabbit(path, {.systematic_type = SystematicType::normal}), io::file_error);
    CHECK_THROWS_WITH(io::read_rabbit(path), Contains("symmetric_tensor=True") && Contains("asymmetric") && Contains("meta/pickle_data"));
  }
  SECTION("an unknown systematic_type") {
    const std::string path = with_meta(dir, normal_file, "}\x8c\x0fsystematic_type\x8c\x05gauss\x73."s);
    CHECK_THROWS_WITH(io::read_rabbit(path), Contains("systematic_type that is 'gauss'"));
  }
  SECTION("a meta without systematic_type keeps the option's, or log-normal") {
    const std::string path = with_meta(dir, normal_file, "}."s);
    CHECK(io::read_rabbit(path).model.systematic_type == SystematicType::log_normal);
    CHECK(io::read_rabbit(path, {.systematic_type = SystematicType::normal}).model.systematic_type == SystematicType::normal);
  }
}
