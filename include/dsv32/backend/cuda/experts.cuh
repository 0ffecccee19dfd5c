/// \file
/// \brief The CUDA backend's grouped expert compute: every local expert's SwiGLU MLP on its rows of the
///        plan in a fixed number of launches that read the plan (offsets, rows, weights) in device
///        memory only, so that the MoE layer neither copies routing data to the host nor synchronizes.
///
/// The launches, all sized for the worst case (T k grouped rows, GroupedExpertPlan):
///  1. expert_tiles_kernel: the row tiles' boundaries from the offsets (expert_row_tiles());
///  2. FP8: the tokens quantized per 1x128 block once ([T, dim]; every expert reads its rows' codes);
///  3. the gated GEMM: per (column tile, row tile) block, h = bf16(silu(f32(bf16(x w1^T))) * f32(bf16(x w3^T)))
///     for the tile's rows of one expert (the block finds its expert by a binary search of the tiles);
///  4. FP8: h quantized per 1x128 block (rows below offsets[n_local], read on the device);
///  5. the down GEMM: y = bf16(h w2^T) per grouped row;
///  6. the combine: each token's rows in increasing expert order (expert_order_of_row()), sum +=
///     f32(y) * weight, in that order.
///
/// Numerics are the reference GEMM's (gemm.cuh) and therefore the CPU backend's rounding points: FP8
/// products as exact per-block integer dots times (activation scale * weight scale) summed over blocks
/// in f32 in block order (bit for bit the CPU's), bf16 / f32 weights as f32 products accumulated in
/// K order (the CPU sums in another order), each product rounded to bf16 once; SwiGLU as silu_mul_kernel;
/// the combine adds each token's expert outputs in the CPU MoE's order (increasing expert id) with the
/// scatter-add's separate multiply and add.
#pragma once

#include "dsv32/backend/cuda/elementwise.cuh"
#include "dsv32/backend/cuda/launch.cuh"
#include "dsv32/backend/cuda/memory.hpp"
#include "dsv32/backend/cuda/plan.hpp"
#include "dsv32/backend/cuda/routing.hpp"
#include "dsv32/backend/kernel_args.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// tiles [n_local + 1] from offsets [n_local + 1] (one thread: a few hundred experts).
template <int Threads>
__global__ void expert_tiles_kernel(const std::int32_t* offsets, std::int64_t n_local, std::int32_t* tiles) {
  if (blockIdx.x == 0 && threadIdx.x == 0) expert_row_tiles(offsets, n_local, kGroupedTile, tiles);
}

/// The rows of one global row tile: expert `expert`'s grouped rows [row0, min(row0 + tile, row_end)).
struct GroupedTile {
  std::int64_t expert = 0;   ///< local expert
  std::int64_t row0 = 0;     ///< first grouped row
  std::int64_t row_end = 0;  ///< the expert's end: offsets[expert + 1]
};

/// The expert and rows of global row tile `tile` (< tiles[n_local]).
__device__ inline GroupedTile grouped_tile(const std::int32_t* offsets, const std::int32_t* tiles, std::int64_t n_local,
                                           std::int64_t tile) {
  const std::int64_t e = group_of(tiles, n_local, tile);
  return {e, offsets[e] + (tile - tiles[e]) * kGroupedTile, offsets[e + 1]};
}

/// bf16(silu(f32(bf16(a))) * f32(bf16(b))): silu_mul_kernel on the two products rounded as the
/// CPU stores them.
__device__ inline float swiglu_of_products(float a, float b) {
  const float g = round_to_bf16(a), u = round_to_bf16(b);
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, exp_rounded(-g)));
  return __fmul_rn(silu, u);
}

/// Grouped FP8 product, Tile x Tile outputs per block, as reference_fp8_kernel per expert. Gated: y =
/// swiglu(x w1^T, x w3^T) ([rows, N = inter], x rows through row_map: token rows); else y = x w2^T
/// ([rows, N = dim], x rows are the grouped rows). xq [*, K] codes, xs [*, K / 128] scales.
template <int Tile, bool Gated>
__global__ void grouped_fp8_kernel(const std::uint8_t* xq, const float* xs, const std::int32_t* row_map,
                                   const ExpertPointers* table, std::int64_t N, std::int64_t K,
                                   const std::int32_t* offsets, const std::int32_t* tiles, std::int64_t n_local,
                                   bf16_bits* y, std::int64_t y_stride) {
  __shared__ std::int32_t xt[Tile][kBlockSize + 1];
  __shared__ std::int32_t at[Tile][kBlockSize + 1];
  __shared__ std::int32_t bt[Gated ? Tile : 1][kBlockSize + 1];
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(Tile) + threadIdx.x;
  const std::int64_t blocks = K / kBlockSize;
  const int tid = threadIdx.y * Tile + threadIdx.x;
  const std::int64_t total = tiles[n_local];
  for (std::int64_t tile = blockIdx.y; tile < total; tile += gridDim.y) {  // uniform over the block
    const GroupedTile g = grouped_tile(offsets, tiles, n_local, tile);
    const ExpertPointers p = table[g.expert];
    const auto* wa = static_cast<const std::uint8_t*>(Gated ? p.w1 : p.w2);
    const float* sa = Gated ? p.w1_scale : p.w2_scale;
    [[maybe_unused]] const auto* wb = static_cast<const std::uint8_t*>(p.w3);
    const std::int64_t m = g.row0 + threadIdx.y;
    const bool live = m < g.row_end && n < N;
    const std::int64_t src = live ? (row_map ? static_cast<std::int64_t>(row_map[m]) : m) : 0;
    float acc_a = 0.0f, acc_b = 0.0f;
    for (std::int64_t kb = 0; kb < blocks; ++kb) {
      for (int e = tid; e < Tile * kBlockSize; e += Tile * Tile) {
        const int r = e / kBlockSize, c = e % kBlockSize;
        const std::int64_t xm = g.row0 + r, wn = blockIdx.x * static_cast<std::int64_t>(Tile) + r;
        std::int32_t xv = 0;
        if (xm < g.row_end) {
          const std::int64_t xr = row_map ? static_cast<std::int64_t>(row_map[xm]) : xm;
          xv = e4m3_to_int(xq[xr * K + kb * kBlockSize + c]);
        }
        xt[r][c] = xv;
        at[r][c] = wn < N ? e4m3_to_int(wa[wn * K + kb * kBlockSize + c]) : 0;
        if constexpr (Gated) bt[r][c] = wn < N ? e4m3_to_int(wb[wn * K + kb * kBlockSize + c]) : 0;
      }
      __syncthreads();
      long long da = 0, db = 0;
      for (int c = 0; c < kBlockSize; ++c) {
        da += static_cast<long long>(xt[threadIdx.y][c]) * at[threadIdx.x][c];
        if constexpr (Gated) db += static_cast<long long>(xt[threadIdx.y][c]) * bt[threadIdx.x][c];
      }
      if (live) {
        // as reference_fp8_kernel: the exact dot rounded once to float, times (xs * ws), added in block order
        const float x_scale = xs[src * blocks + kb];
        const float d = static_cast<float>(static_cast<double>(da) * (1.0 / 262144.0));
        acc_a = __fadd_rn(acc_a, __fmul_rn(d, __fmul_rn(x_scale, sa[(n / kBlockSize) * blocks + kb])));
        if constexpr (Gated) {
          const float d3 = static_cast<float>(static_cast<double>(db) * (1.0 / 262144.0));
          acc_b = __fadd_rn(acc_b, __fmul_rn(d3, __fmul_rn(x_scale, p.w3_scale[(n / kBlockSize) * blocks + kb])));
        }
      }
      __syncthreads();
    }
    if (live) store_bf16(y + m * y_stride + n, Gated ? swiglu_of_products(acc_a, acc_b) : acc_a);
  }
}

/// Grouped BF16 / F32 product (dtype 0 / 1 of DeviceWeight), as reference_dense_kernel per expert:
/// f32 products accumulated in K order. Gated and row_map as grouped_fp8_kernel; x is bf16 [*, K].
template <int Tile, bool Gated>
__global__ void grouped_dense_kernel(const bf16_bits* x, std::int64_t x_stride, const std::int32_t* row_map,
                                     const ExpertPointers* table, int dtype, std::int64_t N, std::int64_t K,
                                     const std::int32_t* offsets, const std::int32_t* tiles, std::int64_t n_local,
                                     bf16_bits* y, std::int64_t y_stride) {
  __shared__ float xs[Tile][Tile + 1];
  __shared__ float as[Tile][Tile + 1];
  __shared__ float bs[Gated ? Tile : 1][Tile + 1];
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(Tile) + threadIdx.x;
  const std::int64_t wn = blockIdx.x * static_cast<std::int64_t>(Tile) + threadIdx.y;  // the W row this thread loads
  const std::int64_t total = tiles[n_local];
  for (std::int64_t tile = blockIdx.y; tile < total; tile += gridDim.y) {  // uniform over the block
    const GroupedTile g = grouped_tile(offsets, tiles, n_local, tile);
    const ExpertPointers p = table[g.expert];
    const DeviceWeight wa{Gated ? p.w1 : p.w2, nullptr, N, K, dtype};
    [[maybe_unused]] const DeviceWeight wb{p.w3, nullptr, N, K, dtype};
    const std::int64_t m = g.row0 + threadIdx.y;
    const bool row_live = m < g.row_end;
    const std::int64_t src = row_live ? (row_map ? static_cast<std::int64_t>(row_map[m]) : m) : 0;
    float acc_a = 0.0f, acc_b = 0.0f;
    for (std::int64_t k0 = 0; k0 < K; k0 += Tile) {
      const std::int64_t k = k0 + threadIdx.x;
      xs[threadIdx.y][threadIdx.x] = row_live && k < K ? load_bf16(x + src * x_stride + k) : 0.0f;
      as[threadIdx.y][threadIdx.x] = wn < N && k < K ? wa.at(wn, k) : 0.0f;
      if constexpr (Gated) bs[threadIdx.y][threadIdx.x] = wn < N && k < K ? wb.at(wn, k) : 0.0f;
      __syncthreads();
#pragma unroll
      for (int i = 0; i < Tile; ++i) {
        acc_a = fmaf(xs[threadIdx.y][i], as[threadIdx.x][i], acc_a);
        if constexpr (Gated) acc_b = fmaf(xs[threadIdx.y][i], bs[threadIdx.x][i], acc_b);
      }
      __syncthreads();
    }
    if (row_live && n < N) store_bf16(y + m * y_stride + n, Gated ? swiglu_of_products(acc_a, acc_b) : acc_a);
  }
}

/// 1x128 quantization of the grouped rows [0, offsets[n_local]) of h [*, cols]: a warp per block.
template <int Threads>
__global__ void grouped_act_quant_kernel(const bf16_bits* h, std::int64_t h_stride, const std::int32_t* offsets,
                                         std::int64_t n_local, std::int64_t cols, bool ue8m0, std::uint8_t* codes,
                                         std::int64_t c_stride, float* scales, std::int64_t s_stride) {
  const std::int64_t blocks = cols / kBlockSize, total = static_cast<std::int64_t>(offsets[n_local]) * blocks;
  const int lane = threadIdx.x % 32;
  for (std::int64_t wb = (blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x) / 32; wb < total;
       wb += static_cast<std::int64_t>(gridDim.x) * Threads / 32) {
    const std::int64_t r = wb / blocks, kb = wb % blocks;
    quantize_block_warp(h + r * h_stride + kb * kBlockSize, ue8m0, lane, codes + r * c_stride + kb * kBlockSize,
                        scales + r * s_stride + kb);
  }
}

/// order[t k + rank] = i for every grouped row i < offsets[n_local] (expert_order_of_row()).
template <int Threads>
__global__ void expert_order_kernel(const std::int32_t* experts, std::int64_t k, std::int64_t first_expert,
                                    const std::int32_t* rows, const std::int32_t* offsets, std::int64_t n_local,
                                    std::int32_t* order) {
  const std::int64_t count = offsets[n_local];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * Threads)
    expert_order_of_row(experts, k, first_expert, rows, offsets, n_local, i, order);
}

/// sum[t, c] += f32(y[i, c]) * row_weights[i] for each of token t's grouped rows i in increasing
/// expert order (order[t k ..], -1 ends): the CPU MoE's per-expert scatter-adds, one thread per element.
template <int Threads>
__global__ void expert_combine_kernel(const bf16_bits* y, std::int64_t y_stride, const float* row_weights,
                                      const std::int32_t* order, std::int64_t T, std::int64_t k, std::int64_t d,
                                      float* sum, std::int64_t s_stride) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; e < T * d;
       e += static_cast<std::int64_t>(gridDim.x) * Threads) {
    const std::int64_t t = e / d, c = e % d;
    float acc = sum[t * s_stride + c];
    for (std::int64_t r = 0; r < k; ++r) {
      const std::int32_t i = order[t * k + r];
      if (i < 0) break;
      acc = __fadd_rn(acc, __fmul_rn(load_bf16(y + static_cast<std::int64_t>(i) * y_stride + c), row_weights[i]));
    }
    sum[t * s_stride + c] = acc;
  }
}

/// \brief The operands of one grouped expert call as run_grouped_experts() takes them. Scratch buffers
///        are contiguous with the row lengths of ExpertGroupScratch and at least GroupedExpertPlan's rows.
struct GroupedExpertArgs {
  const bf16_bits* x = nullptr;           ///< [T, dim] the MoE input
  std::int64_t x_stride = 0;              ///< its row stride
  std::int64_t tokens = 0;                ///< T
  const std::int32_t* experts = nullptr;  ///< [T, k] contiguous chosen expert ids
  std::int64_t k = 0;                     ///< experts per token
  std::int64_t first_expert = 0;          ///< this rank's first expert
  const ExpertPointers* table = nullptr;  ///< [n_local] device table of the experts' weights
  std::int64_t n_local = 0;               ///< local experts
  DType dtype = DType::BF16;              ///< the experts' dtype
  std::int64_t dim = 0;                   ///< model dimension
  std::int64_t inter = 0;                 ///< expert hidden size
  bool ue8m0 = false;                     ///< FP8: activation scales rounded to powers of two
  const std::int32_t* rows = nullptr;     ///< [T k] the plan's token rows grouped by expert
  const float* row_weights = nullptr;     ///< [T k] their routing weights
  const std::int32_t* offsets = nullptr;  ///< [n_local + 1] the plan's group boundaries (device memory)
  std::uint8_t* x_codes = nullptr;        ///< FP8: [T, dim]
  float* x_scales = nullptr;              ///< FP8: [T, dim / 128]
  bf16_bits* hidden = nullptr;            ///< [T k, inter]
  std::uint8_t* h_codes = nullptr;        ///< FP8: [T k, inter]
  float* h_scales = nullptr;              ///< FP8: [T k, inter / 128]
  bf16_bits* out = nullptr;               ///< [T k, dim]
  std::int32_t* tiles = nullptr;          ///< [n_local + 1]
  std::int32_t* order = nullptr;          ///< [T k]
  float* sum = nullptr;                   ///< [T, dim] f32, added to
  std::int64_t sum_stride = 0;            ///< its row stride
};

/// \brief Runs every local expert on its rows of the plan and adds the weighted outputs to `sum`,
///        reading no routing data on the host (see the file's comment for the launches).
inline void run_grouped_experts(ExecutionContext<Cuda>& ctx, const GroupedExpertArgs& a) {
  const bool fp8 = a.dtype == DType::F8_E4M3;
  DSV32_CHECK(fp8 || a.dtype == DType::BF16 || a.dtype == DType::F32, unsupported, "CUDA grouped experts: weight dtype ",
              dtype_name(a.dtype), " (BF16, F32 or F8_E4M3 expected)");
  const GroupedExpertPlan p = plan_grouped_experts(a.tokens, a.k, a.n_local, a.dim, a.inter, fp8);
  if (a.tokens == 0) return;
  constexpr int Tile = kGroupedTile;
  const dim3 block(Tile, Tile);
  const auto rb = static_cast<unsigned>(p.row_blocks);
  expert_tiles_kernel<32><<<1, 32, 0, ctx.stream()>>>(a.offsets, a.n_local, a.tiles);
  DSV32_CUDA_CHECK_LAUNCH("expert_tiles_kernel");
  if (fp8) {
    const std::int64_t xb = a.dim / kBlockSize, hb = a.inter / kBlockSize;
    // the tokens once, in the contract's [rows, blocks] scale layout (reference_linear's)
    launch_act_quant(ctx, a.x, a.x_stride, a.tokens, a.tokens, a.dim, a.ue8m0, a.x_codes, a.dim, a.x_scales, xb, 1);
    grouped_fp8_kernel<Tile, true><<<dim3(static_cast<unsigned>(p.gate_col_tiles), rb), block, 0, ctx.stream()>>>(
        a.x_codes, a.x_scales, a.rows, a.table, a.inter, a.dim, a.offsets, a.tiles, a.n_local, a.hidden, a.inter);
    DSV32_CUDA_CHECK_LAUNCH("grouped_fp8_kernel<gated>");
    grouped_act_quant_kernel<256><<<grid_for(p.max_rows * hb * 32), 256, 0, ctx.stream()>>>(
        a.hidden, a.inter, a.offsets, a.n_local, a.inter, a.ue8m0, a.h_codes, a.inter, a.h_scales, hb);
    DSV32_CUDA_CHECK_LAUNCH("grouped_act_quant_kernel");
    grouped_fp8_kernel<Tile, false><<<dim3(static_cast<unsigned>(p.down_col_tiles), rb), block, 0, ctx.stream()>>>(
        a.h_codes, a.h_scales, nullptr, a.table, a.dim, a.inter, a.offsets, a.tiles, a.n_local, a.out, a.dim);
    DSV32_CUDA_CHECK_LAUNCH("grouped_fp8_kernel<down>");
  } else {
    const int dtype = a.dtype == DType::BF16 ? 0 : 1;
    grouped_dense_kernel<Tile, true><<<dim3(static_cast<unsigned>(p.gate_col_tiles), rb), block, 0, ctx.stream()>>>(
        a.x, a.x_stride, a.rows, a.table, dtype, a.inter, a.dim, a.offsets, a.tiles, a.n_local, a.hidden, a.inter);
    DSV32_CUDA_CHECK_LAUNCH("grouped_dense_kernel<gated>");
    grouped_dense_kernel<Tile, false><<<dim3(static_cast<unsigned>(p.down_col_tiles), rb), block, 0, ctx.stream()>>>(
        a.hidden, a.inter, nullptr, a.table, dtype, a.dim, a.inter, a.offsets, a.tiles, a.n_local, a.out, a.dim);
    DSV32_CUDA_CHECK_LAUNCH("grouped_dense_kernel<down>");
  }
  // -1 everywhere, then each grouped row's slot: a token's list ends at its first -1
  DSV32_CUDA_CHECK(cudaMemsetAsync(a.order, 0xFF, static_cast<std::size_t>(p.max_rows) * sizeof(std::int32_t), ctx.stream()));
  expert_order_kernel<256><<<grid_for(p.max_rows), 256, 0, ctx.stream()>>>(a.experts, a.k, a.first_expert, a.rows,
                                                                           a.offsets, a.n_local, a.order);
  DSV32_CUDA_CHECK_LAUNCH("expert_order_kernel");
  expert_combine_kernel<256><<<grid_for(a.tokens * a.dim), 256, 0, ctx.stream()>>>(
      a.out, a.dim, a.row_weights, a.order, a.tokens, a.k, a.dim, a.sum, a.sum_stride);
  DSV32_CUDA_CHECK_LAUNCH("expert_combine_kernel");
}

/// @}

}  // namespace dsv32::cuda
