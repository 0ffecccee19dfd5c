/// \file
/// \brief The number formats of the model: bf16 (Eigen's) and FP8 E4M3 (OCP "E4M3FN").
///
/// bf16 is Eigen::bfloat16: float -> bf16 rounds to nearest even, bf16 -> float is exact.
/// E4M3 has no type in Eigen or the standard library: it is a one-byte code, whose decoder and
/// round-to-nearest-even, saturating encoder (decode_e4m3(), encode_e4m3(), kE4m3Max) live in
/// core/e4m3.hpp, written once for the host and the CUDA device; this header adds the decode table.
#pragma once

#include <Eigen/Core>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "dsv32/core/e4m3.hpp"

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

/// \brief Decode table: code -> exact float value (decode_e4m3(), NaN for 0x7F and 0xFF), a constant
///        expression, for the CPU kernels' table lookups.
inline constexpr std::array<float, 256> kE4m3Decode = [] {
  std::array<float, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = decode_e4m3(static_cast<std::uint8_t>(c));
  return t;
}();

/// \brief A positive normal float rounded up to a power of two, on its bits (a ue8m0 scale: the
///        reference's kernel rounds activation scales so, and the released V3.1 / V3.2 weight
///        scales are such powers).
inline float ceil_pow2(float s) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(s);
  return std::bit_cast<float>(((bits >> 23) + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u)) << 23);
}

/// @}

}  // namespace dsv32
