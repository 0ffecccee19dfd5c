/// \file
/// \brief The CUDA backend's MoE kernels: the gate's routing (one thread per token running
///        route_token(), backend/routing.hpp, which cpu::route() runs too) and the expert plan (counts,
///        offsets and each expert's rows, one thread per local expert, in one block). Both stay on the
///        device.
#pragma once

#include "dsv32/backend/cuda/launch.cuh"
#include "dsv32/backend/cuda/memory.hpp"
#include "dsv32/backend/cuda/routing.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// Routes tokens [0, T): logits [T, E] -> weights [T, k], experts [T, k]; scratch
/// [T, route_scratch_floats(E, f)] f32.
template <int Threads>
__global__ void route_kernel(const float* logits, std::int64_t l_stride, const float* bias, std::int64_t T,
                             std::int32_t E, RouteFields f, float* scratch, float* weights, std::int64_t w_stride,
                             std::int32_t* experts, std::int64_t e_stride) {
  const std::int64_t per_token = route_scratch_floats(E, f);
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; t < T;
       t += static_cast<std::int64_t>(gridDim.x) * Threads)
    route_token(logits + t * l_stride, bias, E, f, scratch + t * per_token, weights + t * w_stride,
                experts + t * e_stride);
}

/// The plan of local experts [0, n_local) in one block: counts, the offsets' prefix sum, then each
/// expert's rows in increasing token order (expert_rows()).
template <int Threads>
__global__ void moe_plan_kernel(const std::int32_t* experts, const float* weights, std::int64_t T, std::int64_t k,
                                std::int64_t first_expert, std::int64_t n_local, std::int32_t* rows,
                                float* row_weights, std::int32_t* offsets) {
  // experts and weights are contiguous [T, k] (the launcher checks)
  for (std::int64_t e = threadIdx.x; e < n_local; e += Threads)
    offsets[e + 1] = expert_count(experts, T * k, first_expert, e);
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[0] = 0;
    for (std::int64_t e = 0; e < n_local; ++e) offsets[e + 1] += offsets[e];
  }
  __syncthreads();
  for (std::int64_t e = threadIdx.x; e < n_local; e += Threads)
    expert_rows(experts, weights, T, k, first_expert, e, offsets[e], rows, row_weights);
}

/// \brief Launches route_kernel; needs T route_scratch_floats(E, f) floats of scratch.
inline void launch_route(ExecutionContext<Cuda>& ctx, const float* logits, std::int64_t l_stride, const float* bias,
                         std::int64_t T, std::int64_t E, const RouteFields& f, float* weights, std::int64_t w_stride,
                         std::int32_t* experts, std::int64_t e_stride) {
  if (T == 0) return;
  DSV32_CHECK(f.n_groups >= 1 && E % f.n_groups == 0, unsupported, "CUDA route: ", f.n_groups,
              " expert groups (a divisor of ", E, " experts expected)");
  DSV32_CHECK(static_cast<std::size_t>(T * route_scratch_floats(E, f)) * sizeof(float) <= ctx.scratch_bytes(),
              unsupported, "CUDA route: ", T, " tokens of ", E, " experts exceed the context's scratch (",
              ctx.scratch_bytes(), " bytes)");
  route_kernel<128><<<grid_for(T, 128), 128, 0, ctx.stream()>>>(logits, l_stride, bias, T, static_cast<std::int32_t>(E),
                                                                f, static_cast<float*>(ctx.scratch()), weights, w_stride,
                                                                experts, e_stride);
  DSV32_CUDA_CHECK_LAUNCH("route_kernel");
}

/// \brief Launches moe_plan_kernel for `n_local` experts.
inline void launch_moe_plan(ExecutionContext<Cuda>& ctx, const std::int32_t* experts, const float* weights,
                            std::int64_t T, std::int64_t k, std::int64_t first_expert, std::int64_t n_local,
                            std::int32_t* rows, float* row_weights, std::int32_t* offsets) {
  moe_plan_kernel<256><<<1, 256, 0, ctx.stream()>>>(experts, weights, T, k, first_expert, n_local, rows, row_weights,
                                                     offsets);
  DSV32_CUDA_CHECK_LAUNCH("moe_plan_kernel");
}

/// @}

}  // namespace dsv32::cuda
