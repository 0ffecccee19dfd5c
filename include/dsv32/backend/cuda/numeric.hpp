/// \file
/// \brief The CUDA backend's scalar numerics, written once for the host and the device: bf16 rounding,
///        the 1x128 activation scale and quantization, and the order key of the indexer's top-k. The
///        E4M3 codes (decode_e4m3(), e4m3_to_int(), encode_e4m3()) and exp_rounded() are the core's,
///        shared with the CPU backend (core/e4m3.hpp, core/host_device.hpp).
///
/// This header includes no CUDA header: under nvcc its functions are `__host__ __device__`, under a
/// host compiler plain inline functions. The kernels call exactly these functions, so the CPU unit
/// tests (tests/backend/test_cuda_plan.cpp) check them against the CPU backend's numerics — every bf16
/// pattern, the activation scales and codes — on machines without a GPU.
#pragma once

#include <cstdint>

#include "dsv32/core/e4m3.hpp"
#include "dsv32/core/host_device.hpp"

namespace dsv32::cuda {

/// \defgroup cuda CUDA backend
/// \brief Kernels<Cuda>, Memory<Cuda> and ExecutionContext<Cuda>: cuBLASLt and dsv32's kernels on NVIDIA
///        GPUs (Hopper, sm_90a), with the CPU backend's rounding points.
/// @{

/// \brief bf16 bits -> float (exact).
DSV32_HOST_DEVICE inline float bf16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }

/// \brief float -> bf16 bits, rounding to nearest even; NaN becomes the quiet NaN 0x7FC0 with the input's
///        sign (as Eigen::bfloat16 does, so that host and device agree on every input).
DSV32_HOST_DEVICE inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7FC0u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// \brief The float a bf16 tensor would hold for `f`: bf16_to_float(float_to_bf16(f)).
DSV32_HOST_DEVICE inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

/// \brief The scale of one 1x128 activation block with absolute maximum `amax` (the reference's
///        act_quant): max(amax, 1e-4) * f32(1/448), rounded up to a power of two on the float's bits
///        when `ue8m0` (ScaleFmt::ue8m0).
DSV32_HOST_DEVICE inline float activation_scale(float amax, bool ue8m0) {
  amax = amax < 1e-4f ? 1e-4f : amax;  // std::max(amax, 1e-4f), NaN included
  const float s = amax * (1.0f / kE4m3Max);
  if (!ue8m0) return s;
  const std::uint32_t b = float_bits(s);
  const int exponent = static_cast<int>((b >> 23) & 0xFFu) - 127 + ((b & 0x7FFFFFu) != 0 ? 1 : 0);
  return bits_float(static_cast<std::uint32_t>(exponent + 127) << 23);
}

/// \brief One quantized activation: e4m3(clamp(x / s, -448, 448)), the division rounded once (IEEE).
DSV32_HOST_DEVICE inline std::uint8_t quantize_activation(float x, float s) {
  float v = x / s;
  v = v < -kE4m3Max ? -kE4m3Max : (v > kE4m3Max ? kE4m3Max : v);
  return encode_e4m3(v);
}

/// \brief An unsigned key that orders like the float: larger float, larger key (-0 and +0 equal).
///        NaN sorts above +infinity (a NaN score is a bug upstream; the order stays total).
DSV32_HOST_DEVICE inline std::uint32_t order_key(float f) {
  std::uint32_t u = float_bits(f);
  if (u == 0x80000000u) u = 0;  // -0 ties with +0, as the CPU's comparisons do
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// \brief The top-k key of a (score, position) pair: larger key = selected first. Scores decide,
///        ties go to the lower position, every key is distinct (the CPU backend's order).
DSV32_HOST_DEVICE inline std::uint64_t topk_key(float score, std::int32_t position) {
  return (static_cast<std::uint64_t>(order_key(score)) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(position));
}

/// \brief The position of a top-k key.
DSV32_HOST_DEVICE inline std::int32_t topk_position(std::uint64_t key) {
  return static_cast<std::int32_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(key & 0xFFFFFFFFu));
}

/// @}

}  // namespace dsv32::cuda
