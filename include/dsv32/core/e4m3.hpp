/// \file
/// \brief FP8 E4M3 (OCP "E4M3FN") encoding and decoding, written once for the host and the device:
///        the CPU backend (through core/numeric.hpp), the CUDA kernels and the tests all call these.
///
/// A code is one byte: 1 sign, 4 exponent (bias 7) and 3 mantissa bits; exponent 0 holds the
/// subnormals (multiples of 2^-9), there are no infinities, 0x7F and 0xFF are NaN and the largest
/// finite magnitude is 448. Every E4M3 value is exact in a float, and 512 times it is an exact
/// integer. This header includes no CUDA header and nothing of Eigen (core/host_device.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "dsv32/core/host_device.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief Largest finite E4M3 magnitude.
inline constexpr float kE4m3Max = 448.0f;

/// \brief Exact value of an E4M3 code; a constant expression wherever the code is one.
/// \param code an E4M3 bit pattern
/// \return (-1)^s (1 + m/8) 2^(e-7) for exponent e > 0, (-1)^s m 2^-9 for e = 0 (so 0x80 is -0),
///         a quiet NaN with the code's sign for 0x7F and 0xFF
DSV32_HOST_DEVICE constexpr float decode_e4m3(std::uint8_t code) noexcept {
  const std::uint32_t e = (code >> 3) & 0xFu, m = code & 0x7u;
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  if (e == 0xFu && m == 0x7u) return bits_float(sign | 0x7FC00000u);
  if (e == 0) return bits_float(sign | float_bits(static_cast<float>(m) * (1.0f / 512.0f)));
  // (1 + m/8) 2^(e-7): the float with exponent e - 7 and mantissa m in its top three bits
  return bits_float(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

/// \brief An E4M3 code's value times 512, an exact integer in [-229376, 229376] (every E4M3 value is
///        a multiple of 2^-9); 0 for the NaN codes. Products of two fit 36 bits, and sums of up to 2^27
///        products fit an int64, so integer dot products of E4M3 vectors are exact.
/// \param code an E4M3 bit pattern \return decode_e4m3(code) * 512, or 0 for NaN
DSV32_HOST_DEVICE constexpr std::int32_t e4m3_to_int(std::uint8_t code) noexcept {
  const std::int32_t e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return 0;
  const std::int32_t magnitude = e == 0 ? m : (8 + m) << (e - 1);
  return (code & 0x80u) ? -magnitude : magnitude;
}

/// \brief Encodes a float as E4M3: round to nearest, ties to even; magnitudes of 448 and more (and
///        infinities) saturate to +-448 (0x7E | sign); NaN maps to 0x7F with the input's sign bit.
/// \param x any float \return its E4M3 code
DSV32_HOST_DEVICE inline std::uint8_t encode_e4m3(float x) noexcept {
  const std::uint32_t bits = float_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);  // NaN
  const float a = bits_float(abs_bits);
  if (a >= kE4m3Max) return static_cast<std::uint8_t>(sign | 0x7Eu);
  if (a < 0.015625f) {
    // subnormal range: multiples of 2^-9; the product is exact, rint rounds half to even
#if defined(__CUDA_ARCH__)
    const auto m = static_cast<std::uint8_t>(rintf(a * 512.0f));
#else
    const auto m = static_cast<std::uint8_t>(std::nearbyint(a * 512.0f));
#endif
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

/// @}

}  // namespace dsv32
