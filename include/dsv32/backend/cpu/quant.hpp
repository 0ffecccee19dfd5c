/// \file
/// \brief CPU: dtype conversions of activations and weights: FP8 activation quantization (act_quant(),
///        on the ISA kernels of the given CpuKernels) and its scales, weight dequantization, and rounding to bf16
///        and widening back to f32.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "dsv32/backend/cpu/kernel_plan.hpp"
#include "dsv32/backend/cpu/parallel_for.hpp"
#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
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

/// \brief Quantizes bf16 activations to E4M3 per 1x128 block (the reference's act_quant), on the
///        kernels of the given CpuKernels: the same codes and scales on every ISA.
/// \param x     [rows, cols] bf16, cols a multiple of 128
/// \param fmt   activation scale format
/// \param codes [rows, cols] E4M3 codes: e4m3(clamp(x / s, -448, 448))
/// \param scale [rows, cols / 128] f32 block scales: activation_scale(max |x| of the block, fmt)
/// \param kernels the kernels to run on
inline void act_quant(MatrixView<const bf16> x, ScaleFmt fmt, MatrixView<std::uint8_t> codes,
                      MatrixView<float> scale, const CpuKernels& kernels = default_kernels()) {
  const std::int64_t blocks = x.cols / kBlockSize;
  const simd::GemmOps& ops = kernels.ops();
  parallel_for(x.rows, x.cols, [&](std::int64_t r) {
    const auto* xr = reinterpret_cast<const std::uint16_t*>(x.row(r));
    for (std::int64_t b = 0; b < blocks; ++b) {
      const float s = activation_scale(ops.amax_bf16(xr + b * kBlockSize, kBlockSize), fmt);
      scale.row(r)[b] = s;
      ops.quantize_e4m3(xr + b * kBlockSize, kBlockSize, s, codes.row(r) + b * kBlockSize);
    }
  });
}

/// \brief out = bf16(x).
/// \param x   [rows, n] f32
/// \param out [rows, n] bf16
inline void round_to_bf16(MatrixView<const float> x, MatrixView<bf16> out) {
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) out.row(r)[c] = bf16(x.row(r)[c]);
}

/// \brief out = f32(x) (exact).
/// \param x   [rows, n] bf16
/// \param out [rows, n] f32
inline void widen_to_f32(MatrixView<const bf16> x, MatrixView<float> out) {
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) out.row(r)[c] = static_cast<float>(x.row(r)[c]);
}

}  // namespace dsv32::cpu
