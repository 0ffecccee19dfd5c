/// \file
/// \brief The Kernels contract as one C++20 concept: every operation a backend's Kernels<Backend>
///        must provide to the layers, with the argument types the layers pass. Each backend checks
///        itself against it (`static_assert(KernelsContract<Cpu>)` after its specialization), so a
///        missing or mistyped operation fails where the backend is defined, naming the concept —
///        not deep inside a layer template.
///
/// The numerics of each operation (shapes, dtypes, where it rounds) are documented once, on the CPU
/// backend's members (backend/cpu/kernels.hpp), which every other backend must reproduce.
#pragma once

#include <cstdint>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief Whether Kernels<Backend> provides every operation of the contract, callable with the
///        views of Backend's memory space the layers pass (and, for a backend that runs grouped
///        experts, expert_mlp_grouped()).
/// \tparam Backend a backend tag whose Kernels, Memory and ExecutionContext are specialized
template <class Backend>
concept KernelsContract = requires(
    ExecutionContext<Backend>& c, MatrixView<const bf16, space_of<Backend>> xc, MatrixView<bf16, space_of<Backend>> x,
    MatrixView<const float, space_of<Backend>> fc, MatrixView<float, space_of<Backend>> f,
    MatrixView<const std::uint8_t, space_of<Backend>> u8c, MatrixView<std::uint8_t, space_of<Backend>> u8,
    MatrixView<const std::int32_t, space_of<Backend>> ic, MatrixView<std::int32_t, space_of<Backend>> i,
    VectorView<const std::int32_t, space_of<Backend>> ivc, VectorView<std::int32_t, space_of<Backend>> iv,
    VectorView<const float, space_of<Backend>> fvc, VectorView<float, space_of<Backend>> fv,
    const WeightView<space_of<Backend>>& w, const CachePages<space_of<Backend>>& pages, const RoutingParams& route,
    ScaleFmt fmt, std::int64_t n, float s, bool flag) {
  // elementwise and norms
  Kernels<Backend>::embedding(c, ivc, xc, n, x);
  Kernels<Backend>::rms_norm(c, xc, fvc, s, x);
  Kernels<Backend>::rms_norm_residual(c, xc, x, fvc, s, x);
  Kernels<Backend>::layer_norm(c, xc, fvc, fvc, s, x);
  Kernels<Backend>::rope(c, x, n, ivc, fc, fc, flag);
  Kernels<Backend>::hadamard(c, x);
  Kernels<Backend>::silu_mul(c, xc, xc, x);
  Kernels<Backend>::round_to_bf16(c, fc, x);
  Kernels<Backend>::widen_to_f32(c, xc, f);
  // matrix products and quantization
  Kernels<Backend>::linear(c, xc, w, fmt, x);
  Kernels<Backend>::linear_f32(c, xc, w, f);
  Kernels<Backend>::act_quant(c, xc, fmt, u8, f);
  // attention and the indexer, over paged caches
  Kernels<Backend>::indexer_topk(c, u8c, fc, xc, s, s, u8c, fc, pages, i, iv);
  Kernels<Backend>::sparse_attention(c, xc, xc, xc, n, n, n, ic, ivc, s, x);
  Kernels<Backend>::latent_attention(c, xc, xc, xc, xc, pages, n, ic, ivc, s, x);
  Kernels<Backend>::absorb_query(c, xc, w, n, n, n, x);
  Kernels<Backend>::project_values(c, xc, w, n, n, x);
  // rows in and out of caches and expert groups
  Kernels<Backend>::gather_rows(c, xc, ivc, x);
  Kernels<Backend>::scatter_rows(c, xc, ivc, x);
  Kernels<Backend>::scatter_rows(c, u8c, ivc, u8);
  Kernels<Backend>::scatter_rows(c, fc, ivc, f);
  Kernels<Backend>::scatter_add(c, xc, ivc, fvc, f);
  // the MoE's routing and plan
  Kernels<Backend>::route(c, fc, fvc, route, f, i);
  Kernels<Backend>::moe_plan(c, ic, fc, n, iv, fv, iv);
} && (!runs_grouped_experts<Backend> ||
      requires(ExecutionContext<Backend>& c, MatrixView<const bf16, space_of<Backend>> xc,
               MatrixView<const std::int32_t, space_of<Backend>> ic, VectorView<const std::int32_t, space_of<Backend>> ivc,
               VectorView<const float, space_of<Backend>> fvc, const ExpertGroupView<space_of<Backend>>& g,
               const ExpertGroupScratch<space_of<Backend>>& gs, MatrixView<float, space_of<Backend>> f, std::int64_t n) {
        Kernels<Backend>::expert_mlp_grouped(c, xc, ic, n, g, ivc, fvc, ivc, gs, f);
      });

/// @}

}  // namespace dsv32
