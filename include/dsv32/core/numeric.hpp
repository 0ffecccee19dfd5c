/// \file
/// \brief The number formats of the model: bf16 (Eigen's) and FP8 E4M3 (OCP "E4M3FN").
///
/// bf16 is Eigen::bfloat16: float -> bf16 rounds to nearest even, bf16 -> float is exact.
/// E4M3 has no type in Eigen or the standard library, so it is defined here as a one-byte code
/// with an exact decode table and a round-to-nearest-even, saturating encoder.
#pragma once

#include <Eigen/Core>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief Brain float 16, Eigen's implementation (round-to-nearest-even from float).
using bf16 = Eigen::bfloat16;

/// \brief Rounds a float to the nearest bf16 and back: the value a bf16 tensor would hold.
inline float round_bf16(float x) noexcept { return static_cast<float>(bf16(x)); }

/// \brief Widens n bf16 values to float (exact), written so compilers vectorize it.
inline void widen_bf16(const bf16* src, float* dst, std::size_t n) noexcept {
  // bf16 is a standard-layout wrapper of one unsigned short: a pointer to it is a pointer to its bits
  const auto* bits = reinterpret_cast<const unsigned short*>(src);
  for (std::size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits[i]) << 16);
}

/// \brief One FP8 E4M3FN value stored as its bit pattern: 1 sign, 4 exponent (bias 7), 3 mantissa
///        bits; no infinities; 0x7F/0xFF are NaN; the largest finite magnitude is 448.
struct e4m3 {
  std::uint8_t bits = 0;  ///< the raw code; 0 is +0
};
static_assert(sizeof(e4m3) == 1, "e4m3 must be one byte");

/// \brief Largest finite E4M3 magnitude.
inline constexpr float kE4m3Max = 448.0f;

namespace detail {
constexpr float e4m3_value(unsigned code) {
  const float sign = (code & 0x80u) ? -1.0f : 1.0f;
  const unsigned e = (code >> 3) & 0xFu;
  const unsigned m = code & 0x7u;
  if (e == 0xFu && m == 0x7u) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * static_cast<float>(m) * (1.0f / 8.0f) * (1.0f / 64.0f);
  float scale = 1.0f;
  for (int i = 7; i < static_cast<int>(e); ++i) scale *= 2.0f;
  for (int i = static_cast<int>(e); i < 7; ++i) scale *= 0.5f;
  return sign * (1.0f + static_cast<float>(m) / 8.0f) * scale;
}
constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = e4m3_value(c);
  return t;
}
}  // namespace detail

/// \brief Decode table: code -> exact float value (NaN for 0x7F and 0xFF).
inline constexpr std::array<float, 256> kE4m3Decode = detail::make_e4m3_table();

/// \brief Exact value of an E4M3 code.
inline float decode_e4m3(std::uint8_t code) noexcept { return kE4m3Decode[code]; }

/// \brief Encodes a float as E4M3: round to nearest, ties to even; magnitudes above 448
///        (and infinities) saturate to +-448; NaN maps to 0x7F with the input's sign bit.
inline std::uint8_t encode_e4m3(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);  // NaN
  const float a = std::bit_cast<float>(abs_bits);
  if (a >= kE4m3Max) return static_cast<std::uint8_t>(sign | 0x7Eu);
  if (a < 0.015625f) {
    // subnormal range: multiples of 2^-9; the product is exact, nearbyint rounds half to even
    const auto m = static_cast<std::uint8_t>(std::nearbyint(a * 512.0f));
    return static_cast<std::uint8_t>(sign | m);  // m == 8 is code 0x08 = 2^-6, the smallest normal
  }
  // keep 3 mantissa bits, rounding half to even on the float's bit pattern
  std::uint32_t r = abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1u);
  r &= 0xFFF00000u;
  const int exponent = static_cast<int>(r >> 23) - 127;
  const unsigned mantissa = (r >> 20) & 7u;
  if (exponent > 8 || (exponent == 8 && mantissa > 6)) return static_cast<std::uint8_t>(sign | 0x7Eu);
  return static_cast<std::uint8_t>(sign | static_cast<unsigned>((exponent + 7) << 3) | mantissa);
}

/// \brief A positive normal float rounded up to a power of two, on its bits (a ue8m0 scale: the
///        reference's kernel rounds activation scales so, and the released V3.1 / V3.2 weight
///        scales are such powers).
inline float ceil_pow2(float s) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(s);
  return std::bit_cast<float>(((bits >> 23) + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u)) << 23);
}

/// @}

}  // namespace dsv32
