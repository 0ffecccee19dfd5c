// Tests of dsv32/core/e4m3.hpp and dsv32/core/numeric.hpp: the one E4M3 implementation of both
// backends (the CUDA kernels call these very functions) — every code's value, exact integer and table
// entry against the closed form, the encoder against a brute-force nearest-code search on a dense
// sweep of floats and every midpoint (round half to even, saturation, NaN, subnormals) — and bf16
// round-to-nearest-even on hand-picked bit patterns.
#include "dsv32/core/e4m3.hpp"
#include "dsv32/core/numeric.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

using dsv32::decode_e4m3;
using dsv32::encode_e4m3;

// The E4M3FN closed form, written independently of the library's table: 1 sign bit, 4 exponent
// bits with bias 7, 3 mantissa bits; exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 is NaN.
double e4m3_closed_form(unsigned code) {
  const double sign = (code & 0x80u) ? -1.0 : 1.0;
  const int e = static_cast<int>((code >> 3) & 0xFu);
  const int m = static_cast<int>(code & 0x7u);
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m) / 8.0, -6);
  return sign * std::ldexp(1.0 + static_cast<double>(m) / 8.0, e - 7);
}

bool is_nan_code(unsigned c) { return (c & 0x7Fu) == 0x7Fu; }

// Brute force: the finite code nearest to x (|x| beyond 448 saturates), ties to the even code.
std::uint8_t nearest_code(float x) {
  static const std::vector<double> values = [] {  // the closed form of codes 0 .. 0x7E
    std::vector<double> v;
    for (unsigned c = 0; c <= 0x7E; ++c) v.push_back(e4m3_closed_form(c));
    return v;
  }();
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return static_cast<std::uint8_t>((std::signbit(x) ? 0x80u : 0u) | 0x7Eu);
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(values[c] - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<std::uint8_t>((std::signbit(x) ? 0x80u : 0u) | best);
}

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t b) { return std::bit_cast<float>(b); }

}  // namespace

TEST_CASE("e4m3: every one of the 256 codes decodes to the closed form, as a float and as an integer") {
  for (unsigned c = 0; c < 256; ++c) {
    CAPTURE(c);
    const double want = e4m3_closed_form(c);
    const float got = decode_e4m3(static_cast<std::uint8_t>(c));
    const std::int32_t times_512 = dsv32::e4m3_to_int(static_cast<std::uint8_t>(c));
    CHECK(bits_of(got) == bits_of(dsv32::kE4m3Decode[c]));
    CHECK(std::signbit(got) == ((c & 0x80u) != 0));  // 0x80 is -0; the NaNs keep the code's sign too
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      CHECK(is_nan_code(c));
      CHECK(times_512 == 0);
    } else {
      CHECK(static_cast<double>(got) == want);
      CHECK(static_cast<double>(times_512) == want * 512.0);  // exact: every value is a multiple of 2^-9
    }
  }
  // landmarks
  CHECK(decode_e4m3(0x7E) == 448.0f);
  CHECK(decode_e4m3(0xFE) == -448.0f);
  CHECK(decode_e4m3(0x01) == std::ldexp(1.0f, -9));   // smallest subnormal
  CHECK(decode_e4m3(0x07) == 7.0f * std::ldexp(1.0f, -9));
  CHECK(decode_e4m3(0x08) == std::ldexp(1.0f, -6));   // smallest normal
  CHECK(decode_e4m3(0x38) == 1.0f);
  CHECK(decode_e4m3(0x39) == 1.125f);
  CHECK(dsv32::kE4m3Max == 448.0f);
  CHECK(std::isnan(decode_e4m3(0x7F)));
  CHECK(std::isnan(decode_e4m3(0xFF)));
  CHECK(dsv32::e4m3_to_int(0x7E) == 229376);
  CHECK(dsv32::e4m3_to_int(0x81) == -1);
  // the table and the decoders are constant expressions
  static_assert(dsv32::kE4m3Decode[0x38] == 1.0f && dsv32::kE4m3Decode[0x7E] == 448.0f);
  static_assert(dsv32::decode_e4m3(0xB9) == -1.125f && dsv32::e4m3_to_int(0x38) == 512);
}

TEST_CASE("e4m3: encode(decode(c)) == c for every finite code, both zeros included") {
  int finite = 0;
  for (unsigned c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    CAPTURE(c);
    CHECK(encode_e4m3(decode_e4m3(static_cast<std::uint8_t>(c))) == c);
    ++finite;
  }
  CHECK(finite == 254);
  CHECK(encode_e4m3(0.0f) == 0x00);
  CHECK(encode_e4m3(-0.0f) == 0x80);
}

TEST_CASE("e4m3: midpoints round half to even, and just above / below them round away / towards") {
  for (unsigned c = 0; c < 0x7E; ++c) {  // consecutive finite codes c, c + 1 (0x7E = 448 is the last)
    for (float sign : {1.0f, -1.0f}) {
      CAPTURE(c);
      CAPTURE(sign);
      const double lo = e4m3_closed_form(c), hi = e4m3_closed_form(c + 1);
      const float mid = static_cast<float>((lo + hi) / 2);
      REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);  // midpoints of 4-bit values are exact in f32
      const unsigned even = (c % 2 == 0) ? c : c + 1;
      const unsigned s = sign < 0 ? 0x80u : 0u;
      CHECK(encode_e4m3(sign * mid) == (s | even));
      CHECK(encode_e4m3(sign * std::nextafter(mid, 1e9f)) == (s | (c + 1)));
      CHECK(encode_e4m3(sign * std::nextafter(mid, 0.0f)) == (s | c));
      // the codes themselves and values a little inside the interval
      CHECK(encode_e4m3(sign * static_cast<float>(lo + (hi - lo) / 4)) == (s | c));
      CHECK(encode_e4m3(sign * static_cast<float>(hi - (hi - lo) / 4)) == (s | (c + 1)));
    }
  }
}

TEST_CASE("e4m3: encoding agrees with a brute-force nearest-code search on random and boundary floats") {
  std::mt19937 gen(1234);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = unit(gen) * std::exp2(exponent(gen));  // spans subnormals to beyond 448
    CAPTURE(x);
    CHECK(encode_e4m3(x) == nearest_code(x));
    float y = float_of(any_bits(gen));  // arbitrary bit patterns (NaNs are checked elsewhere)
    if (std::isnan(y)) continue;
    CAPTURE(y);
    CHECK(encode_e4m3(y) == nearest_code(y));
  }
}

TEST_CASE("e4m3: encoding agrees with the brute-force search on a dense sweep of every float's neighbourhood") {
  // all 2^16 values of the top 16 bits (every sign, exponent and 7 leading mantissa bits), each with
  // low bits that sit on, just above, halfway between and just below neighbouring such floats
  int mismatches = 0, checked = 0;
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (const std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const float x = float_of(hi << 16 | lo);
      if (std::isnan(x)) continue;
      mismatches += encode_e4m3(x) != nearest_code(x);
      ++checked;
    }
  CHECK(checked > 390000);
  CHECK(mismatches == 0);
}

TEST_CASE("e4m3: saturation to +-448 and NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 448.0001f, 449.0f, 463.99f, 464.0f, 480.0f, 1000.0f, 1e30f, std::numeric_limits<float>::max(), inf}) {
    CAPTURE(x);
    CHECK(encode_e4m3(x) == 0x7E);
    CHECK(encode_e4m3(-x) == 0xFE);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(encode_e4m3(nan) == 0x7F);
  CHECK(encode_e4m3(-nan) == 0xFF);
  CHECK(encode_e4m3(float_of(0x7F800001u)) == 0x7F);  // signalling-NaN pattern
  CHECK(encode_e4m3(float_of(0xFFC00000u)) == 0xFF);
  CHECK(std::isnan(decode_e4m3(encode_e4m3(nan))));
  // the largest finite values below the saturation threshold
  CHECK(encode_e4m3(432.0f) == 0x7E);          // midpoint 416..448: ties to even (0x7E)
  CHECK(encode_e4m3(431.99f) == 0x7D);         // 416
  CHECK(decode_e4m3(0x7D) == 416.0f);
}

TEST_CASE("e4m3: subnormal boundaries") {
  const float tiny = std::ldexp(1.0f, -9);  // smallest subnormal, code 0x01
  CHECK(encode_e4m3(tiny) == 0x01);
  CHECK(encode_e4m3(tiny / 2) == 0x00);                              // half of it: tie to even (0)
  CHECK(encode_e4m3(std::nextafter(tiny / 2, 1.0f)) == 0x01);
  CHECK(encode_e4m3(-tiny / 2) == 0x80);                             // sign survives underflow
  CHECK(encode_e4m3(1.5f * tiny) == 0x02);                           // tie between 1 and 2: even
  CHECK(encode_e4m3(2.5f * tiny) == 0x02);                           // tie between 2 and 3: even
  CHECK(encode_e4m3(7.5f * tiny) == 0x08);                           // largest subnormal / smallest normal tie
  CHECK(encode_e4m3(std::nextafter(7.5f * tiny, 0.0f)) == 0x07);
  CHECK(encode_e4m3(std::ldexp(1.0f, -6)) == 0x08);                  // smallest normal
  CHECK(encode_e4m3(std::nextafter(std::ldexp(1.0f, -6), 0.0f)) == 0x08);
  CHECK(encode_e4m3(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(encode_e4m3(-std::numeric_limits<float>::denorm_min()) == 0x80);
  CHECK(encode_e4m3(std::numeric_limits<float>::min()) == 0x00);   // smallest normal float
}

TEST_CASE("bf16: round_bf16 rounds to nearest even on hand-picked bit patterns") {
  struct Case {
    std::uint32_t in, out;
  };
  // bf16 keeps the top 16 bits of a float; the low 16 bits decide the rounding.
  const Case cases[] = {
      {0x3F800000u, 0x3F800000u},  // 1.0 exact
      {0x3F808000u, 0x3F800000u},  // 1 + 2^-8: exact tie, 0x3F80 is even -> down
      {0x3F818000u, 0x3F820000u},  // tie between 0x3F81 and 0x3F82 -> up to even
      {0x3F808001u, 0x3F810000u},  // just above the tie -> up
      {0x3F807FFFu, 0x3F800000u},  // just below the tie -> down
      {0x3F81FFFFu, 0x3F820000u},
      {0xBF818000u, 0xBF820000u},  // negative tie -> even magnitude
      {0xBF808000u, 0xBF800000u},
      {0x80000000u, 0x80000000u},  // -0 stays -0
      {0x00000000u, 0x00000000u},
      {0x7F7FFFFFu, 0x7F800000u},  // FLT_MAX rounds up to +inf
      {0x7F7F7FFFu, 0x7F7F0000u},  // below the tie near the top -> largest finite bf16
      {0x7F800000u, 0x7F800000u},  // inf
      {0xFF800000u, 0xFF800000u},  // -inf
      {0x40490FDBu, 0x40490000u},  // pi -> 3.140625
      {0x3DCCCCCDu, 0x3DCD0000u},  // 0.1 -> 0.10009765625
  };
  for (const Case& c : cases) {
    CAPTURE(c.in);
    CHECK(bits_of(dsv32::round_bf16(float_of(c.in))) == c.out);
    CHECK(bits_of(static_cast<float>(dsv32::bf16(float_of(c.in)))) == c.out);
  }
  CHECK(std::isnan(dsv32::round_bf16(std::numeric_limits<float>::quiet_NaN())));
  // every bf16 value is a fixed point
  for (std::uint32_t hi = 0; hi < 0x10000u; hi += 7) {
    const float f = float_of(hi << 16);
    if (std::isnan(f)) continue;
    CAPTURE(hi);
    CHECK(bits_of(dsv32::round_bf16(f)) == (hi << 16));
  }
}
