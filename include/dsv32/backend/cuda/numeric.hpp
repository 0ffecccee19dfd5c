/// \file
/// \brief The CUDA backend's scalar numerics, written once for the host and the device: bf16 rounding,
///        E4M3 encoding and decoding (to floats and to exact integers), the 1x128 activation scale, the
///        exponential the kernels use, and the order key of the indexer's top-k.
///
/// This header includes no CUDA header: under nvcc its functions are `__host__ __device__`, under a
/// host compiler plain inline functions. The kernels call exactly these functions, so the CPU unit
/// tests (tests/backend/test_cuda_plan.cpp) check them against the CPU backend's numerics — every bf16
/// pattern, every E4M3 code — on machines without a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
/// \brief Marks a function both the host and the device compile (`__host__ __device__` under nvcc).
#define DSV32_HOST_DEVICE __host__ __device__
#else
#define DSV32_HOST_DEVICE
#endif

namespace dsv32::cuda {

/// \defgroup cuda CUDA backend
/// \brief Kernels<Cuda>, Memory<Cuda> and ExecutionContext<Cuda>: cuBLASLt and dsv32's kernels on NVIDIA
///        GPUs (Hopper, sm_90a), with the CPU backend's rounding points.
/// @{

/// \brief The bits of a float.
DSV32_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

/// \brief The float with bits `u`.
DSV32_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

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

/// \brief Largest finite E4M3 magnitude.
inline constexpr float kE4m3Max = 448.0f;

/// \brief Exact value of an E4M3 (OCP E4M3FN) code: NaN for 0x7F and 0xFF.
DSV32_HOST_DEVICE inline float e4m3_to_float(std::uint8_t code) {
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
DSV32_HOST_DEVICE inline std::int32_t e4m3_to_int(std::uint8_t code) {
  const std::int32_t e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return 0;
  const std::int32_t magnitude = e == 0 ? m : (8 + m) << (e - 1);
  return (code & 0x80u) ? -magnitude : magnitude;
}

/// \brief Encodes a float as E4M3: round to nearest, ties to even; magnitudes of 448 and more (and
///        infinities) saturate to +-448; NaN maps to 0x7F with the input's sign. The same function as
///        dsv32::encode_e4m3, bit for bit.
DSV32_HOST_DEVICE inline std::uint8_t float_to_e4m3(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);
  const float a = bits_float(abs_bits);
  if (a >= kE4m3Max) return static_cast<std::uint8_t>(sign | 0x7Eu);
  if (a < 0.015625f) {  // subnormal range: multiples of 2^-9; the product is exact, rint rounds half to even
#if defined(__CUDA_ARCH__)
    const auto m = static_cast<std::uint8_t>(rintf(a * 512.0f));
#else
    const auto m = static_cast<std::uint8_t>(std::nearbyint(a * 512.0f));
#endif
    return static_cast<std::uint8_t>(sign | m);
  }
  std::uint32_t r = abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1u);
  r &= 0xFFF00000u;
  const int exponent = static_cast<int>(r >> 23) - 127;
  const unsigned mantissa = (r >> 20) & 7u;
  if (exponent > 8 || (exponent == 8 && mantissa > 6)) return static_cast<std::uint8_t>(sign | 0x7Eu);
  return static_cast<std::uint8_t>(sign | static_cast<unsigned>((exponent + 7) << 3) | mantissa);
}

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
  return float_to_e4m3(v);
}

/// \brief exp(x) rounded once to float: exp in double, then one rounding. It equals a correctly
///        rounded expf, which is what the CPU backend's std::exp(float) returns for all but rare inputs,
///        so that softmax, sigmoid and SiLU round where the CPU backend rounds.
DSV32_HOST_DEVICE inline float exp_rounded(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<float>(::exp(static_cast<double>(x)));
#else
  return static_cast<float>(std::exp(static_cast<double>(x)));
#endif
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
