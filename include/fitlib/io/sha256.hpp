// SPDX-License-Identifier: MIT
// SHA-256 (FIPS 180-4) of byte strings and files, to record which input file a result came from.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define FITLIB_SHA256_X86 1
#endif

#include "fitlib/io/hdf5.hpp"

namespace fitlib::io {

/// Streaming SHA-256 (FIPS 180-4 §6.2): `update` with any number of byte ranges, then `digest` once.
/// The compression function runs on the CPU's SHA extensions where it has them (x86-64's SHA-NI, about
/// 8× the portable code: a tensor's digest was 7 % of a fit's CPU time without); both give the same
/// digest.
class Sha256 {
 public:
  /// `cpu_extensions = false` keeps to the portable code (tests compare the two).
  explicit Sha256(bool cpu_extensions = true) : accelerated_(cpu_extensions && has_sha_extensions()) {}

  /// Feeds `n` more bytes of the message.
  void update(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    length_ += n;
    if (fill_ > 0) {
      const std::size_t take = std::min(n, block_.size() - fill_);
      std::copy(p, p + take, block_.begin() + static_cast<std::ptrdiff_t>(fill_));
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ < block_.size()) return;
      compress(block_.data(), 1);
      fill_ = 0;
    }
    compress(p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    std::copy(p, p + n, block_.begin());
    fill_ = n;
  }
  /// Feeds the bytes of a string.
  void update(std::string_view s) { update(s.data(), s.size()); }

  /// Pads the message (FIPS 180-4 §5.1.1) and returns the 32-byte digest; the object is spent afterwards.
  std::array<std::uint8_t, 32> digest() {
    const std::uint64_t bits = static_cast<std::uint64_t>(length_) * 8;
    const std::uint8_t one = 0x80, zero = 0;
    update(&one, 1);
    while (fill_ != 56) update(&zero, 1);
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    update(len, 8);
    std::array<std::uint8_t, 32> out{};
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * j));
    return out;
  }

  /// The digest as 64 lower-case hexadecimal characters.
  std::string hex_digest() {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    for (std::uint8_t b : digest()) {
      s += digits[b >> 4];
      s += digits[b & 15];
    }
    return s;
  }

 private:
  static std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  /// The compression function (§6.2.2) applied to `blocks` consecutive 64-byte blocks.
  void compress(const std::uint8_t* p, std::size_t blocks) {
#ifdef FITLIB_SHA256_X86
    if (accelerated_) {
      compress_sha_ni(p, blocks);
      return;
    }
#endif
    for (; blocks > 0; --blocks, p += 64) compress_portable(p);
  }

  static constexpr std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
      0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
      0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
      0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
      0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
      0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

  /// One block, in plain C++.
  void compress_portable(const std::uint8_t* block) {
    std::uint32_t w[64];
    for (int t = 0; t < 16; ++t)
      w[t] = static_cast<std::uint32_t>(block[4 * t]) << 24 | static_cast<std::uint32_t>(block[4 * t + 1]) << 16 |
             static_cast<std::uint32_t>(block[4 * t + 2]) << 8 | static_cast<std::uint32_t>(block[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
      const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int t = 0; t < 64; ++t) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[t] + w[t];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

#ifdef FITLIB_SHA256_X86
  /// Whether the CPU has the SHA extensions and the SSSE3 / SSE4.1 shuffles used around them (CPUID).
  static bool has_sha_extensions() {
    static const bool has = [] {
      unsigned a = 0, b = 0, c = 0, d = 0;
      if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
      const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
      if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
      return ssse3 && sse41 && (b & (1u << 29)) != 0;
    }();
    return has;
  }

  /// The blocks with SHA256RNDS2 (two rounds), SHA256MSG1 and SHA256MSG2 (the message schedule). The
  /// instructions keep the working variables as {A, B, E, F} and {C, D, G, H} (A in the highest lane),
  /// so h_ is rearranged into that order once, before the blocks, and back after them.
  __attribute__((target("sha,sse4.1,ssse3"))) void compress_sha_ni(const std::uint8_t* p, std::size_t blocks) {
    const __m128i big_endian = _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
    const __m128i badc = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h_.data())), 0xB1);
    const __m128i hgfe = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h_.data() + 4)), 0x1B);
    __m128i abef = _mm_alignr_epi8(badc, hgfe, 8), cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);
    for (; blocks > 0; --blocks, p += 64) {
      const __m128i abef0 = abef, cdgh0 = cdgh;
      __m128i w[4];  // the schedule's last 16 words, 4 per vector, oldest first
      for (int i = 0; i < 4; ++i) w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), big_endian);
      for (int t = 0; t < 64; t += 4) {
        __m128i m = w[t / 4 % 4];
        if (t >= 16) {  // W_t = σ1(W_{t−2}) + W_{t−7} + σ0(W_{t−15}) + W_{t−16}, four at a time
          m = _mm_add_epi32(_mm_sha256msg1_epu32(w[0], w[1]), _mm_alignr_epi8(w[3], w[2], 4));
          m = _mm_sha256msg2_epu32(m, w[3]);
          w[0] = w[1];
          w[1] = w[2];
          w[2] = w[3];
          w[3] = m;
        }
        __m128i wk = _mm_add_epi32(m, _mm_loadu_si128(reinterpret_cast<const __m128i*>(k + t)));
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // rounds t, t+1: cdgh holds the new {A, B, E, F}
        wk = _mm_shuffle_epi32(wk, 0x0E);
        abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);  // rounds t+2, t+3: back in place
      }
      abef = _mm_add_epi32(abef, abef0);
      cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    const __m128i feba = _mm_shuffle_epi32(abef, 0x1B), ghcd = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h_.data()), _mm_blend_epi16(feba, ghcd, 0xF0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h_.data() + 4), _mm_alignr_epi8(ghcd, feba, 8));
  }
#else
  static bool has_sha_extensions() { return false; }
#endif

  bool accelerated_;
  std::array<std::uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<std::uint8_t, 64> block_{};
  std::size_t fill_ = 0;
  std::uint64_t length_ = 0;
};

/// SHA-256 of a byte string, as 64 hexadecimal characters.
inline std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex_digest();
}

/// SHA-256 of a file's bytes, as 64 hexadecimal characters; throws `file_error` if it cannot be read.
inline std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw file_error("cannot open '" + path + "' to compute its SHA-256; check the path and its permissions");
  Sha256 h;
  std::vector<char> buf(std::size_t{1} << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw file_error("reading '" + path + "' failed while computing its SHA-256 (an I/O error)");
  return h.hex_digest();
}

}  // namespace fitlib::io
