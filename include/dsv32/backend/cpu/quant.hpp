/// \file
/// \brief CPU: FP8 activation scales (act_quant() itself is in gemm.hpp, on the ISA kernels) and
///        weight dequantization.
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
  return fmt == ScaleFmt::none ? s : ceil_pow2(s);
}

/// \brief One dequantized weight: bf16(e4m3 value * its 128x128 block scale), as the reference's
///        weight_dequant produces it.
inline float dequant_weight(std::uint8_t code, float block_scale) noexcept {
  return round_bf16(decode_e4m3(code) * block_scale);
}

}  // namespace dsv32::cpu
