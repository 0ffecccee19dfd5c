/// \file
/// \brief What every CUDA kernel header of dsv32 shares: the nvcc gate, launch checking with dynamic
///        shared memory above 48 KB, block reductions, and the bf16 and weight loads of device code.
///
/// Kernels are templates (or take a template parameter for their block size): a header may then be
/// included by any number of the user's .cu translation units without duplicate symbols, and only
/// what a program calls is compiled.
#pragma once

#if !defined(__CUDACC__)
#error "dsv32: the CUDA backend's kernel headers (*.cuh, <dsv32/cuda.hpp>) must be compiled by nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dsv32/backend/cuda/check.hpp"
#include "dsv32/backend/cuda/numeric.hpp"
#include "dsv32/backend/cuda/plan.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// \brief Threads of the row-wise kernels (a block per row).
inline constexpr int kRowThreads = 256;

/// \brief Raises `kernel`'s dynamic shared memory limit when a launch needs more than the default 48 KB,
///        after checking it against the device's opt-in limit.
/// \param kernel the __global__ function \param smem bytes the launch needs \param limit the device's opt-in limit
/// \param name the kernel's name in the error
template <class Kernel>
void prepare_smem(Kernel kernel, std::size_t smem, std::size_t limit, const char* name) {
  DSV32_CHECK(smem <= limit, unsupported, "CUDA kernel ", name, ": needs ", smem,
              " bytes of shared memory per block, the device allows ", limit);
  if (smem > (48u << 10))
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
}

/// \brief Grid size of a grid-stride loop over `n` elements with `threads` per block.
inline unsigned grid_for(std::int64_t n, int threads = 256) {
  return static_cast<unsigned>(elementwise_launch(n, threads).blocks);
}

/// \brief bf16 storage as the kernels see it (the bits of Eigen::bfloat16).
using bf16_bits = std::uint16_t;

/// \brief Loads a bf16 as float.
__device__ inline float load_bf16(const bf16_bits* p) { return bf16_to_float(*p); }
/// \brief Stores a float rounded to bf16 (nearest even).
__device__ inline void store_bf16(bf16_bits* p, float v) { *p = float_to_bf16(v); }

/// \brief Sum over a warp (all lanes get it).
template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

/// \brief Max over a warp (all lanes get it); NaN-free inputs.
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

/// \brief Sum over a block of `Threads` threads (a multiple of 32); every thread gets the result.
///        `shared` holds Threads / 32 values. Ends with a barrier, so it may be called again.
template <int Threads, class T>
__device__ inline T block_sum(T v, T* shared) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "block_sum: Threads must be a multiple of 32, at most 1024");
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = T(0);
  for (int w = 0; w < Threads / 32; ++w) total += shared[w];  // the same order in every thread
  __syncthreads();
  return total;
}

/// \brief Max over a block of `Threads` threads; every thread gets it. `shared` holds Threads / 32 floats.
template <int Threads>
__device__ inline float block_max(float v, float* shared) {
  v = warp_max(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < Threads / 32; ++w) m = fmaxf(m, shared[w]);
  __syncthreads();
  return m;
}

/// \brief A weight matrix as device code reads it: [out, in] of BF16, F32 or E4M3 with FP8 block scales.
struct DeviceWeight {
  const void* data = nullptr;     ///< [out, in]
  const float* scale = nullptr;   ///< F8_E4M3: [ceil(out / 128), ceil(in / 128)]
  std::int64_t out = 0;           ///< rows
  std::int64_t in = 0;            ///< columns
  int dtype = 0;                  ///< 0 BF16, 1 F32, 2 F8_E4M3

  /// \brief Element (r, c) as float; FP8 dequantized as the reference does: bf16(e4m3 * block scale).
  __device__ float at(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * in + c;
    if (dtype == 0) return bf16_to_float(static_cast<const bf16_bits*>(data)[i]);
    if (dtype == 1) return static_cast<const float*>(data)[i];
    const float s = scale[(r / kBlockSize) * ((in + kBlockSize - 1) / kBlockSize) + c / kBlockSize];
    return round_to_bf16(__fmul_rn(decode_e4m3(static_cast<const std::uint8_t*>(data)[i]), s));
  }
};

/// \brief A DeviceWeight of a weight's dtype, data and scales.
/// \throws Error(unsupported) for a dtype other than BF16, F32 and F8_E4M3
inline DeviceWeight device_weight(DType dtype, const void* data, const float* scale, std::int64_t out, std::int64_t in,
                                  const char* op) {
  DSV32_CHECK(dtype == DType::BF16 || dtype == DType::F32 || dtype == DType::F8_E4M3, unsupported, "CUDA ", op,
              ": weight dtype ", dtype_name(dtype), " (BF16, F32 or F8_E4M3 expected)");
  return {data, scale, out, in, dtype == DType::BF16 ? 0 : (dtype == DType::F32 ? 1 : 2)};
}

/// @}

}  // namespace dsv32::cuda
