/// \file
/// \brief Code that the host compiler and nvcc's device pass both build: the DSV32_HOST_DEVICE
///        annotation, a float's bits and back (constant expressions on the host and the device), and
///        exp rounded once to float.
///
/// This header includes no CUDA header and nothing of Eigen: under nvcc, a function marked
/// DSV32_HOST_DEVICE is `__host__ __device__`, under a host compiler a plain function. The functions
/// written once for both backends (the E4M3 numerics of core/e4m3.hpp, the MoE routing of
/// backend/routing.hpp) are built from these.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
/// \brief Marks a function both the host and the device compile (`__host__ __device__` under nvcc,
///        nothing under a host compiler).
#define DSV32_HOST_DEVICE __host__ __device__
#else
#define DSV32_HOST_DEVICE
#endif

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief The bits of a float; a constant expression wherever the argument is one.
/// \param f any float, NaNs included \return its IEEE-754 binary32 pattern
DSV32_HOST_DEVICE constexpr std::uint32_t float_bits(float f) noexcept {
#if defined(__CUDA_ARCH__)
  return __builtin_bit_cast(std::uint32_t, f);  // std::bit_cast is a host function; the builtin is nvcc's too
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

/// \brief The float with bits `u`; a constant expression wherever the argument is one.
/// \param u an IEEE-754 binary32 pattern \return the float it encodes
DSV32_HOST_DEVICE constexpr float bits_float(std::uint32_t u) noexcept {
#if defined(__CUDA_ARCH__)
  return __builtin_bit_cast(float, u);
#else
  return std::bit_cast<float>(u);
#endif
}

/// \brief exp(x) rounded once to float: exp in double, then one rounding. That is a correctly rounded
///        expf unless exp(x) lies within a double's ulp of a float rounding boundary (about one input in
///        2^29), so host and device, whose expf differ, agree; the C library's std::exp(float) returns
///        the same but for rare inputs (one ulp apart there).
/// \param x the exponent \return f32(exp(f64(x)))
DSV32_HOST_DEVICE inline float exp_rounded(float x) noexcept {
#if defined(__CUDA_ARCH__)
  return static_cast<float>(::exp(static_cast<double>(x)));
#else
  return static_cast<float>(std::exp(static_cast<double>(x)));
#endif
}

/// @}

}  // namespace dsv32
