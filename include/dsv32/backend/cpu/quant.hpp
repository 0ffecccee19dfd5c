/// \file
/// \brief CPU: FP8 activation quantization (the reference's act_quant) and weight dequantization.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "dsv32/backend/cpu/parallel_for.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32::cpu {

/// \brief The activation scale of one 1x128 block with absolute maximum `amax`.
///
/// amax is clamped to 1e-4; the scale is amax * f32(1/448), or with ue8m0 that value rounded up to
/// a power of two (computed on the float's bits exactly as the reference's kernel does).
inline float activation_scale(float amax, ScaleFmt fmt) noexcept {
  amax = std::max(amax, 1e-4f);
  const float s = amax * (1.0f / kE4m3Max);
  if (fmt == ScaleFmt::none) return s;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(s);
  const int exponent = static_cast<int>((bits >> 23) & 0xFFu) - 127 + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
  return std::bit_cast<float>(static_cast<std::uint32_t>(exponent + 127) << 23);
}

/// \brief Quantizes bf16 activations to E4M3 per 1x128 block.
/// \param x     [rows, cols] bf16, cols a multiple of 128
/// \param fmt   activation scale format
/// \param codes [rows, cols] E4M3 codes: e4m3(clamp(x / s, -448, 448))
/// \param scale [rows, cols / 128] f32 block scales
inline void act_quant(MatrixView<const bf16> x, ScaleFmt fmt, MatrixView<std::uint8_t> codes,
                      MatrixView<float> scale) {
  const std::int64_t blocks = x.cols / kBlockSize;
  parallel_for(x.rows, x.cols, [&](std::int64_t r) {
    const bf16* xr = x.row(r);
    std::uint8_t* qr = codes.row(r);
    float* sr = scale.row(r);
    for (std::int64_t b = 0; b < blocks; ++b) {
      float amax = 0.0f;
      for (std::int64_t i = 0; i < kBlockSize; ++i)
        amax = std::max(amax, std::fabs(static_cast<float>(xr[b * kBlockSize + i])));
      const float s = activation_scale(amax, fmt);
      sr[b] = s;
      for (std::int64_t i = 0; i < kBlockSize; ++i) {
        const float v = std::clamp(static_cast<float>(xr[b * kBlockSize + i]) / s, -kE4m3Max, kE4m3Max);
        qr[b * kBlockSize + i] = encode_e4m3(v);
      }
    }
  });
}

/// \brief One dequantized weight: bf16(e4m3 value * its 128x128 block scale), as the reference's
///        weight_dequant produces it.
inline float dequant_weight(std::uint8_t code, float block_scale) noexcept {
  return round_bf16(decode_e4m3(code) * block_scale);
}

}  // namespace dsv32::cpu
