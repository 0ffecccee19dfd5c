/// \file
/// \brief The CUDA backend's row-wise and element-wise kernels — embedding, RMSNorm (with the fused
///        residual), LayerNorm, SiLU-gating, Hadamard, RoPE, the 1x128 activation quantization, row
///        gathers and the scatter-add, bf16 <-> f32 conversions — each with its host launcher on the
///        context's stream. Each rounds where the CPU kernel of the same name (backend/cpu/) rounds;
///        products and sums that the CPU does as separate IEEE operations use __fmul_rn/__fadd_rn so
///        that nvcc cannot contract them into FMAs.
#pragma once

#include "dsv32/backend/cuda/launch.cuh"
#include "dsv32/backend/cuda/memory.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

// ------------------------------------------------------------------------------------------------ kernels

/// [n] ids, [rows, dim] table -> [n, dim]: rows of ids in [first_id, first_id + rows), zeros otherwise.
template <int Threads>
__global__ void embedding_kernel(const std::int32_t* tokens, const bf16_bits* table, std::int64_t table_rows,
                                 std::int64_t table_stride, std::int64_t first_id, std::int64_t dim, bf16_bits* out,
                                 std::int64_t out_stride) {
  const std::int64_t i = blockIdx.x;
  const std::int64_t local = static_cast<std::int64_t>(tokens[i]) - first_id;
  const bool inside = local >= 0 && local < table_rows;
  for (std::int64_t c = threadIdx.x; c < dim; c += Threads)
    out[i * out_stride + c] = inside ? table[local * table_stride + c] : bf16_bits(0);
}

/// [rows, d] (+ residual) -> [rows, d]: one block per row, the row's f32 sum in shared memory.
/// s = x (+ residual, written back rounded); sum of squares in double; inv = 1 / sqrt(f32(sq / d) + eps);
/// y = bf16(w * (s * inv)).
template <int Threads>
__global__ void rms_norm_kernel(const bf16_bits* x, std::int64_t x_stride, bf16_bits* residual,
                                std::int64_t r_stride, const float* w, float eps, std::int64_t d, bf16_bits* y,
                                std::int64_t y_stride) {
  extern __shared__ float s[];
  __shared__ double partial[Threads / 32];
  const std::int64_t r = blockIdx.x;
  double sq = 0.0;
  for (std::int64_t c = threadIdx.x; c < d; c += Threads) {
    float v = load_bf16(x + r * x_stride + c);
    if (residual) v = __fadd_rn(v, load_bf16(residual + r * r_stride + c));
    s[c] = v;
    sq += static_cast<double>(v) * v;
  }
  sq = block_sum<Threads>(sq, partial);  // ends with a barrier: every read of x and residual is done
  const float var = static_cast<float>(sq / static_cast<double>(d));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
  for (std::int64_t c = threadIdx.x; c < d; c += Threads) {
    if (residual) store_bf16(residual + r * r_stride + c, s[c]);
    store_bf16(y + r * y_stride + c, __fmul_rn(w[c], __fmul_rn(s[c], inv)));
  }
}

/// [rows, d] -> [rows, d]: biased variance, sums in double, y = bf16(((s - mean) * inv) * w + b).
template <int Threads>
__global__ void layer_norm_kernel(const bf16_bits* x, std::int64_t x_stride, const float* w, const float* b, float eps,
                                  std::int64_t d, bf16_bits* y, std::int64_t y_stride) {
  extern __shared__ float s[];
  __shared__ double partial[Threads / 32];
  const std::int64_t r = blockIdx.x;
  double sum = 0.0;
  for (std::int64_t c = threadIdx.x; c < d; c += Threads) {
    s[c] = load_bf16(x + r * x_stride + c);
    sum += s[c];
  }
  sum = block_sum<Threads>(sum, partial);
  const float mean = static_cast<float>(sum / static_cast<double>(d));
  double sq = 0.0;
  for (std::int64_t c = threadIdx.x; c < d; c += Threads) {
    const double dv = __fsub_rn(s[c], mean);
    sq += dv * dv;
  }
  sq = block_sum<Threads>(sq, partial);
  const float var = static_cast<float>(sq / static_cast<double>(d));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
  for (std::int64_t c = threadIdx.x; c < d; c += Threads)
    store_bf16(y + r * y_stride + c, __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(s[c], mean), inv), w[c]), b[c]));
}

/// out = bf16(silu(f32(a)) * f32(b)), silu(g) = g / (1 + exp(-g)).
template <int Threads>
__global__ void silu_mul_kernel(const bf16_bits* a, std::int64_t a_stride, const bf16_bits* b, std::int64_t b_stride,
                                bf16_bits* out, std::int64_t o_stride, std::int64_t rows, std::int64_t n) {
  const std::int64_t total = rows * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * Threads) {
    const std::int64_t r = i / n, c = i % n;
    const float g = load_bf16(a + r * a_stride + c);
    const float silu = __fdiv_rn(g, __fadd_rn(1.0f, exp_rounded(-g)));
    store_bf16(out + r * o_stride + c, __fmul_rn(silu, load_bf16(b + r * b_stride + c)));
  }
}

/// In place [rows, n], n a power of two: the Sylvester-order Walsh-Hadamard butterflies in f32, then
/// times `scale` (n^-0.5), rounded once.
template <int Threads>
__global__ void hadamard_kernel(bf16_bits* x, std::int64_t stride, std::int64_t n, float scale) {
  extern __shared__ float v[];
  bf16_bits* row = x + static_cast<std::int64_t>(blockIdx.x) * stride;
  for (std::int64_t i = threadIdx.x; i < n; i += Threads) v[i] = load_bf16(row + i);
  __syncthreads();
  for (std::int64_t h = 1; h < n; h *= 2) {
    for (std::int64_t p = threadIdx.x; p < n / 2; p += Threads) {
      const std::int64_t i = (p / h) * 2 * h + p % h;
      const float a = v[i], b = v[i + h];
      v[i] = __fadd_rn(a, b);
      v[i + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  for (std::int64_t i = threadIdx.x; i < n; i += Threads) store_bf16(row + i, __fmul_rn(v[i], scale));
}

/// In place, rows (token, head) of [tokens * heads, rope]: row r sits at position positions[r / heads];
/// pairs (2i, 2i+1) or (i, i + d/2) rotated in f32, rounded once.
template <int Threads>
__global__ void rope_kernel(bf16_bits* x, std::int64_t stride, std::int64_t rows, std::int64_t dim, std::int64_t heads,
                            const std::int32_t* positions, const float* cos, const float* sin,
                            std::int64_t table_stride, bool interleaved) {
  const std::int64_t half = dim / 2, total = rows * half;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * Threads) {
    const std::int64_t r = e / half, i = e % half;
    const std::int64_t pos = positions[r / heads];
    const float c = cos[pos * table_stride + i], s = sin[pos * table_stride + i];
    bf16_bits* row = x + r * stride;
    bf16_bits* pa = interleaved ? row + 2 * i : row + i;
    bf16_bits* pb = interleaved ? row + 2 * i + 1 : row + i + half;
    const float a = load_bf16(pa), b = load_bf16(pb);
    store_bf16(pa, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    store_bf16(pb, __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
  }
}

/// One 1x128 block quantized by a warp (lane `lane` of 32): scale = activation_scale(amax), codes
/// e4m3(clamp(x / scale)); lane 0 writes the scale. Shared by act_quant_kernel and the grouped experts.
__device__ inline void quantize_block_warp(const bf16_bits* xb, bool ue8m0, int lane, std::uint8_t* q, float* scale) {
  float v[kBlockSize / 32];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kBlockSize / 32; ++j) {
    v[j] = load_bf16(xb + lane + 32 * j);
    amax = fmaxf(amax, fabsf(v[j]));
  }
  amax = warp_max(amax);
  const float s = activation_scale(amax, ue8m0);
#pragma unroll
  for (int j = 0; j < kBlockSize / 32; ++j) q[lane + 32 * j] = quantize_activation(v[j], s);
  if (lane == 0) *scale = s;
}

/// 1x128 activation quantization, one warp per block of 128 columns of one row: scale =
/// activation_scale(amax), codes e4m3(clamp(x / scale)). The scale of (row r, block kb) is written at
/// scale[r * s_row + kb * s_col] (the contract's [rows, blocks] layout, or cuBLASLt's [blocks][ld]).
/// Rows in [rows, padded_rows) get zero codes and scale 1 (the GEMM's padding rows).
template <int Threads>
__global__ void act_quant_kernel(const bf16_bits* x, std::int64_t x_stride, std::int64_t rows,
                                 std::int64_t padded_rows, std::int64_t cols, bool ue8m0, std::uint8_t* codes,
                                 std::int64_t c_stride, float* scale, std::int64_t s_row, std::int64_t s_col) {
  const std::int64_t blocks = cols / kBlockSize, total = padded_rows * blocks;
  const int lane = threadIdx.x % 32;
  for (std::int64_t wb = (blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x) / 32; wb < total;
       wb += static_cast<std::int64_t>(gridDim.x) * Threads / 32) {
    const std::int64_t r = wb / blocks, kb = wb % blocks;
    std::uint8_t* q = codes + r * c_stride + kb * kBlockSize;
    if (r >= rows) {
      for (int i = lane; i < kBlockSize; i += 32) q[i] = 0;
      if (lane == 0) scale[r * s_row + kb * s_col] = 1.0f;
      continue;
    }
    quantize_block_warp(x + r * x_stride + kb * kBlockSize, ue8m0, lane, q, scale + r * s_row + kb * s_col);
  }
}

/// out[i] = x[rows[i]] for [n, d].
template <int Threads>
__global__ void gather_rows_kernel(const bf16_bits* x, std::int64_t x_stride, const std::int32_t* rows, std::int64_t d,
                                   bf16_bits* out, std::int64_t o_stride) {
  const std::int64_t i = blockIdx.x, src = rows[i];
  for (std::int64_t c = threadIdx.x; c < d; c += Threads) out[i * o_stride + c] = x[src * x_stride + c];
}

/// dst[rows[i]] = src[i] for [n, d] rows of any trivially copyable T.
template <int Threads, class T>
__global__ void scatter_rows_kernel(const T* src, std::int64_t s_stride, const std::int32_t* rows, std::int64_t d,
                                    T* dst, std::int64_t d_stride) {
  const std::int64_t i = blockIdx.x, to = rows[i];
  for (std::int64_t c = threadIdx.x; c < d; c += Threads) dst[to * d_stride + c] = src[i * s_stride + c];
}

/// y[rows[i]] += f32(src[i]) * weight[i], in order of i: one thread per column walks the rows, so that
/// repeated destination rows add in the CPU's order.
template <int Threads>
__global__ void scatter_add_kernel(const bf16_bits* src, std::int64_t s_stride, std::int64_t n, std::int64_t d,
                                   const std::int32_t* rows, const float* weight, float* y, std::int64_t y_stride) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x;
  if (c >= d) return;
  for (std::int64_t i = 0; i < n; ++i) {
    float* dst = y + (rows ? static_cast<std::int64_t>(rows[i]) : i) * y_stride + c;
    const float v = load_bf16(src + i * s_stride + c);
    *dst = __fadd_rn(*dst, weight ? __fmul_rn(v, weight[i]) : v);
  }
}

/// [rows, n] f32 -> bf16 (or bf16 -> f32 when Widen).
template <int Threads, bool Widen>
__global__ void convert_kernel(const void* in, std::int64_t i_stride, void* out, std::int64_t o_stride,
                               std::int64_t rows, std::int64_t n) {
  const std::int64_t total = rows * n;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * Threads) {
    const std::int64_t r = e / n, c = e % n;
    if constexpr (Widen)
      static_cast<float*>(out)[r * o_stride + c] = load_bf16(static_cast<const bf16_bits*>(in) + r * i_stride + c);
    else
      store_bf16(static_cast<bf16_bits*>(out) + r * o_stride + c, static_cast<const float*>(in)[r * i_stride + c]);
  }
}

// ------------------------------------------------------------------------------------------------ launchers

/// \brief Launches embedding_kernel: tokens [n], table [rows, dim] -> out [n, dim].
inline void launch_embedding(ExecutionContext<Cuda>& ctx, const std::int32_t* tokens, std::int64_t n,
                             const bf16_bits* table, std::int64_t table_rows, std::int64_t table_stride,
                             std::int64_t first_id, std::int64_t dim, bf16_bits* out, std::int64_t out_stride) {
  if (n == 0) return;
  embedding_kernel<kRowThreads><<<static_cast<unsigned>(n), kRowThreads, 0, ctx.stream()>>>(
      tokens, table, table_rows, table_stride, first_id, dim, out, out_stride);
  DSV32_CUDA_CHECK_LAUNCH("embedding_kernel");
}

/// \brief Launches rms_norm_kernel (residual may be null): x, residual, y [rows, d], w [d].
inline void launch_rms_norm(ExecutionContext<Cuda>& ctx, const bf16_bits* x, std::int64_t x_stride,
                            bf16_bits* residual, std::int64_t r_stride, const float* w, float eps, std::int64_t rows,
                            std::int64_t d, bf16_bits* y, std::int64_t y_stride) {
  if (rows == 0) return;
  const std::size_t smem = static_cast<std::size_t>(d) * 4;
  prepare_smem(rms_norm_kernel<kRowThreads>, smem, ctx.smem_optin(), "rms_norm_kernel");
  rms_norm_kernel<kRowThreads><<<static_cast<unsigned>(rows), kRowThreads, smem, ctx.stream()>>>(
      x, x_stride, residual, r_stride, w, eps, d, y, y_stride);
  DSV32_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

/// \brief Launches layer_norm_kernel: x, y [rows, d], w, b [d].
inline void launch_layer_norm(ExecutionContext<Cuda>& ctx, const bf16_bits* x, std::int64_t x_stride, const float* w,
                              const float* b, float eps, std::int64_t rows, std::int64_t d, bf16_bits* y,
                              std::int64_t y_stride) {
  if (rows == 0) return;
  const std::size_t smem = static_cast<std::size_t>(d) * 4;
  prepare_smem(layer_norm_kernel<kRowThreads>, smem, ctx.smem_optin(), "layer_norm_kernel");
  layer_norm_kernel<kRowThreads><<<static_cast<unsigned>(rows), kRowThreads, smem, ctx.stream()>>>(
      x, x_stride, w, b, eps, d, y, y_stride);
  DSV32_CUDA_CHECK_LAUNCH("layer_norm_kernel");
}

/// \brief Launches silu_mul_kernel over [rows, n].
inline void launch_silu_mul(ExecutionContext<Cuda>& ctx, const bf16_bits* a, std::int64_t a_stride, const bf16_bits* b,
                            std::int64_t b_stride, bf16_bits* out, std::int64_t o_stride, std::int64_t rows,
                            std::int64_t n) {
  if (rows * n == 0) return;
  silu_mul_kernel<256><<<grid_for(rows * n), 256, 0, ctx.stream()>>>(a, a_stride, b, b_stride, out, o_stride, rows, n);
  DSV32_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

/// \brief Launches hadamard_kernel on [rows, n] in place.
inline void launch_hadamard(ExecutionContext<Cuda>& ctx, bf16_bits* x, std::int64_t stride, std::int64_t rows,
                            std::int64_t n) {
  DSV32_CHECK(n > 0 && (n & (n - 1)) == 0, invalid_argument, "CUDA hadamard: row length ", n, " is not a power of two");
  if (rows == 0) return;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  const std::size_t smem = static_cast<std::size_t>(n) * 4;
  prepare_smem(hadamard_kernel<kRowThreads>, smem, ctx.smem_optin(), "hadamard_kernel");
  hadamard_kernel<kRowThreads><<<static_cast<unsigned>(rows), kRowThreads, smem, ctx.stream()>>>(x, stride, n, scale);
  DSV32_CUDA_CHECK_LAUNCH("hadamard_kernel");
}

/// \brief Launches rope_kernel on [rows, dim] (rows `stride` apart) in place.
inline void launch_rope(ExecutionContext<Cuda>& ctx, bf16_bits* x, std::int64_t stride, std::int64_t rows,
                        std::int64_t dim, std::int64_t heads, const std::int32_t* positions, const float* cos,
                        const float* sin, std::int64_t table_stride, bool interleaved) {
  if (rows * dim == 0) return;
  rope_kernel<256><<<grid_for(rows * dim / 2), 256, 0, ctx.stream()>>>(x, stride, rows, dim, heads, positions, cos, sin,
                                                                        table_stride, interleaved);
  DSV32_CUDA_CHECK_LAUNCH("rope_kernel");
}

/// \brief Launches act_quant_kernel: [rows, cols] -> codes [padded_rows, cols] (row stride c_stride),
///        scales at scale[r * s_row + kb * s_col].
inline void launch_act_quant(ExecutionContext<Cuda>& ctx, const bf16_bits* x, std::int64_t x_stride, std::int64_t rows,
                             std::int64_t padded_rows, std::int64_t cols, bool ue8m0, std::uint8_t* codes,
                             std::int64_t c_stride, float* scale, std::int64_t s_row, std::int64_t s_col) {
  DSV32_CHECK(cols % kBlockSize == 0, invalid_argument, "CUDA act_quant: ", cols, " columns are not a multiple of 128");
  const std::int64_t warps = padded_rows * (cols / kBlockSize);
  if (warps == 0) return;
  act_quant_kernel<256><<<grid_for(warps * 32), 256, 0, ctx.stream()>>>(x, x_stride, rows, padded_rows, cols, ue8m0,
                                                                         codes, c_stride, scale, s_row, s_col);
  DSV32_CUDA_CHECK_LAUNCH("act_quant_kernel");
}

/// \brief Launches gather_rows_kernel: out[i] = x[rows[i]] for i < n.
inline void launch_gather_rows(ExecutionContext<Cuda>& ctx, const bf16_bits* x, std::int64_t x_stride,
                               const std::int32_t* rows, std::int64_t n, std::int64_t d, bf16_bits* out,
                               std::int64_t o_stride) {
  if (n == 0) return;
  gather_rows_kernel<kRowThreads><<<static_cast<unsigned>(n), kRowThreads, 0, ctx.stream()>>>(x, x_stride, rows, d, out,
                                                                                              o_stride);
  DSV32_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

/// \brief Launches scatter_rows_kernel: dst[rows[i]] = src[i] for i < n.
template <class T>
void launch_scatter_rows(ExecutionContext<Cuda>& ctx, const T* src, std::int64_t s_stride, const std::int32_t* rows,
                         std::int64_t n, std::int64_t d, T* dst, std::int64_t d_stride) {
  if (n * d == 0) return;
  scatter_rows_kernel<kRowThreads, T><<<static_cast<unsigned>(n), kRowThreads, 0, ctx.stream()>>>(src, s_stride, rows, d,
                                                                                                  dst, d_stride);
  DSV32_CUDA_CHECK_LAUNCH("scatter_rows_kernel");
}

/// \brief Launches scatter_add_kernel: y[rows[i]] += src[i] * weight[i] (rows, weight may be null).
inline void launch_scatter_add(ExecutionContext<Cuda>& ctx, const bf16_bits* src, std::int64_t s_stride, std::int64_t n,
                               std::int64_t d, const std::int32_t* rows, const float* weight, float* y,
                               std::int64_t y_stride) {
  if (n * d == 0) return;
  scatter_add_kernel<128><<<static_cast<unsigned>(ceil_div(d, 128)), 128, 0, ctx.stream()>>>(src, s_stride, n, d, rows,
                                                                                           weight, y, y_stride);
  DSV32_CUDA_CHECK_LAUNCH("scatter_add_kernel");
}

/// \brief Launches convert_kernel: f32 -> bf16, or bf16 -> f32 when `widen`.
inline void launch_convert(ExecutionContext<Cuda>& ctx, bool widen, const void* in, std::int64_t i_stride, void* out,
                           std::int64_t o_stride, std::int64_t rows, std::int64_t n) {
  if (rows * n == 0) return;
  if (widen)
    convert_kernel<256, true><<<grid_for(rows * n), 256, 0, ctx.stream()>>>(in, i_stride, out, o_stride, rows, n);
  else
    convert_kernel<256, false><<<grid_for(rows * n), 256, 0, ctx.stream()>>>(in, i_stride, out, o_stride, rows, n);
  DSV32_CUDA_CHECK_LAUNCH("convert_kernel");
}

/// @}

}  // namespace dsv32::cuda
