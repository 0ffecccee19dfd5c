/// \file
/// \brief The CUDA backend's matrix products: linear (bf16 result) and linear_f32 through cuBLASLt as
///        plan_linear() maps them (bf16 x bf16 with f32 accumulation; f32 x f32 for f32 weights; FP8
///        E4M3 with 1x128 activation and 128x128 weight scales), dsv32's reference GEMM kernel where
///        cuBLASLt offers no algorithm (or the context asks for it), and MLA's per-head products
///        absorb_query / project_values.
///
/// The reference kernel computes what the CPU backend computes: f32 products summed in f32 for bf16 and
/// f32 weights; for FP8 weights, each 128-block's dot product of E4M3 codes exactly (in integers), times
/// (activation scale * weight scale), summed over blocks in f32 — bit for bit the CPU's FP8 product.
#pragma once

#include "dsv32/backend/cuda/elementwise.cuh"
#include "dsv32/backend/cuda/launch.cuh"
#include "dsv32/backend/cuda/matmul.hpp"
#include "dsv32/backend/cuda/memory.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// Tile edge of the reference GEMM (a Tile x Tile block of outputs per thread block).
inline constexpr int kRefTile = 16;

/// Y[M, N] = X[M, K] W[N, K]^T for a BF16 or F32 weight, f32 accumulation: one thread per output,
/// K walked in tiles through shared memory. Out is float (f32 result) or bf16_bits (rounded once).
template <int Tile, class Out>
__global__ void reference_dense_kernel(const bf16_bits* x, std::int64_t x_stride, DeviceWeight w, Out* y,
                                       std::int64_t y_stride, std::int64_t M) {
  __shared__ float xs[Tile][Tile + 1];
  __shared__ float ws[Tile][Tile + 1];
  const std::int64_t m = blockIdx.y * static_cast<std::int64_t>(Tile) + threadIdx.y;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(Tile) + threadIdx.x;
  const std::int64_t wn = blockIdx.x * static_cast<std::int64_t>(Tile) + threadIdx.y;  // the W row this thread loads
  float acc = 0.0f;
  for (std::int64_t k0 = 0; k0 < w.in; k0 += Tile) {
    const std::int64_t k = k0 + threadIdx.x;
    xs[threadIdx.y][threadIdx.x] = m < M && k < w.in ? load_bf16(x + m * x_stride + k) : 0.0f;
    ws[threadIdx.y][threadIdx.x] = wn < w.out && k < w.in ? w.at(wn, k) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < Tile; ++i) acc = fmaf(xs[threadIdx.y][i], ws[threadIdx.x][i], acc);
    __syncthreads();
  }
  if (m < M && n < w.out) {
    if constexpr (sizeof(Out) == 4)
      y[m * y_stride + n] = acc;
    else
      store_bf16(reinterpret_cast<bf16_bits*>(y) + m * y_stride + n, acc);
  }
}

/// Y[M, N] = X W^T for an E4M3 weight and E4M3 activations (xq [M, K], xs [M, K/128]): per 128-block
/// the exact integer dot product, then acc += f32(dot) * (xs * ws) in block order, rounded to bf16 once.
template <int Tile>
__global__ void reference_fp8_kernel(const std::uint8_t* xq, const float* xs, const std::uint8_t* wq,
                                     const float* w_scale, std::int64_t N, std::int64_t K, bf16_bits* y,
                                     std::int64_t y_stride, std::int64_t M) {
  __shared__ std::int32_t xt[Tile][kBlockSize + 1];
  __shared__ std::int32_t wt[Tile][kBlockSize + 1];
  const std::int64_t m = blockIdx.y * static_cast<std::int64_t>(Tile) + threadIdx.y;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(Tile) + threadIdx.x;
  const std::int64_t blocks = K / kBlockSize, scale_cols = blocks;
  const int tid = threadIdx.y * Tile + threadIdx.x;
  float acc = 0.0f;
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    for (int e = tid; e < Tile * kBlockSize; e += Tile * Tile) {
      const int r = e / kBlockSize, c = e % kBlockSize;
      const std::int64_t xm = blockIdx.y * static_cast<std::int64_t>(Tile) + r;
      const std::int64_t wn = blockIdx.x * static_cast<std::int64_t>(Tile) + r;
      xt[r][c] = xm < M ? e4m3_to_int(xq[xm * K + kb * kBlockSize + c]) : 0;
      wt[r][c] = wn < N ? e4m3_to_int(wq[wn * K + kb * kBlockSize + c]) : 0;
    }
    __syncthreads();
    long long dot = 0;
    for (int c = 0; c < kBlockSize; ++c)
      dot += static_cast<long long>(xt[threadIdx.y][c]) * wt[threadIdx.x][c];
    if (m < M && n < N) {
      // the exact dot is dot * 2^-18: exact in double, rounded once to float, as the CPU's double sums are
      const float d = static_cast<float>(static_cast<double>(dot) * (1.0 / 262144.0));
      const float s = __fmul_rn(xs[m * blocks + kb], w_scale[(n / kBlockSize) * scale_cols + kb]);
      acc = __fadd_rn(acc, __fmul_rn(d, s));
    }
    __syncthreads();
  }
  if (m < M && n < N) store_bf16(y + m * y_stride + n, acc);
}

/// q_lat[t H + h, c] = bf16(sum_d q[t H + h, d] W[h (nope + v) + d, c]) (W dequantized as the reference).
template <int Threads>
__global__ void absorb_query_kernel(const bf16_bits* q, std::int64_t q_stride, DeviceWeight w, std::int64_t heads,
                                    std::int64_t nope, std::int64_t v, bf16_bits* q_lat, std::int64_t C) {
  extern __shared__ float qn[];
  const std::int64_t row = blockIdx.x, h = row % heads;
  for (std::int64_t d = threadIdx.x; d < nope; d += Threads) qn[d] = load_bf16(q + row * q_stride + d);
  __syncthreads();
  for (std::int64_t c = blockIdx.y * static_cast<std::int64_t>(Threads) + threadIdx.x; c < C;
       c += static_cast<std::int64_t>(gridDim.y) * Threads) {
    float acc = 0.0f;
    for (std::int64_t d = 0; d < nope; ++d) acc = fmaf(qn[d], w.at(h * (nope + v) + d, c), acc);
    store_bf16(q_lat + row * C + c, acc);
  }
}

/// out[t H + h, d] = bf16(sum_c o[t H + h, c] W[h (nope + v) + nope + d, c]): a warp per output.
template <int Threads>
__global__ void project_values_kernel(const bf16_bits* o_lat, std::int64_t C, DeviceWeight w, std::int64_t rows,
                                      std::int64_t heads, std::int64_t nope, std::int64_t v, bf16_bits* out,
                                      std::int64_t o_stride) {
  const int lane = threadIdx.x % 32;
  const std::int64_t total = rows * v;
  for (std::int64_t o = (blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x) / 32; o < total;
       o += static_cast<std::int64_t>(gridDim.x) * Threads / 32) {
    const std::int64_t row = o / v, d = o % v, h = row % heads;
    float acc = 0.0f;
    for (std::int64_t c = lane; c < C; c += 32)
      acc = fmaf(load_bf16(o_lat + row * C + c), w.at(h * (nope + v) + nope + d, c), acc);
    acc = warp_sum(acc);
    if (lane == 0) store_bf16(out + row * o_stride + d, acc);
  }
}

/// Repacks FP8 block scales [n_blocks, k_blocks] into cuBLASLt's [n_blocks][roundup(k_blocks, 4)] (zero padded).
template <int Threads>
__global__ void repack_scales_kernel(const float* src, std::int64_t n_blocks, std::int64_t k_blocks, std::int64_t ld,
                                     float* dst) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; e < n_blocks * ld;
       e += static_cast<std::int64_t>(gridDim.x) * Threads) {
    const std::int64_t nb = e / ld, kb = e % ld;
    dst[e] = kb < k_blocks ? src[nb * k_blocks + kb] : 0.0f;
  }
}

/// \brief The operands of one linear call as the launchers take them.
struct LinearArgs {
  const bf16_bits* x = nullptr;  ///< [M, K] bf16
  std::int64_t x_stride = 0;     ///< X's row stride
  std::int64_t rows = 0;         ///< M
  DType dtype = DType::BF16;     ///< the weight's dtype
  const void* w = nullptr;       ///< [N, K]
  const float* w_scale = nullptr;  ///< FP8: [ceil(N/128), ceil(K/128)]
  std::int64_t out = 0;          ///< N
  std::int64_t in = 0;           ///< K
  bool ue8m0 = false;            ///< FP8: activation scales rounded to powers of two
  void* y = nullptr;             ///< [M, N] bf16, or f32 when f32_result
  std::int64_t y_stride = 0;     ///< Y's row stride
  bool f32_result = false;       ///< linear_f32
};

/// \brief dsv32's reference product (no cuBLASLt) of `a` over rows [r0, r0 + count); FP8 activations are
///        quantized into the scratch first.
inline void reference_linear(ExecutionContext<Cuda>& ctx, const LinearArgs& a, std::int64_t r0, std::int64_t count) {
  if (count == 0) return;
  const dim3 block(kRefTile, kRefTile);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.out, kRefTile)), static_cast<unsigned>(ceil_div(count, kRefTile)));
  const std::size_t y_elem = a.f32_result ? 4 : 2;
  void* y = static_cast<char*>(a.y) + static_cast<std::size_t>(r0 * a.y_stride) * y_elem;
  const bf16_bits* x = a.x + r0 * a.x_stride;
  if (a.dtype == DType::F8_E4M3) {
    DSV32_CHECK(!a.f32_result, invalid_argument, "CUDA linear_f32: needs a BF16 or F32 weight, got F8_E4M3");
    const std::int64_t blocks = a.in / kBlockSize;
    const std::size_t codes_bytes = detail::align_scratch(static_cast<std::size_t>(count * a.in));
    DSV32_CHECK(codes_bytes + static_cast<std::size_t>(count * blocks) * 4 <= ctx.scratch_bytes(), unsupported,
                "CUDA reference FP8 linear: ", count, " rows of ", a.in, " features exceed the context's scratch (",
                ctx.scratch_bytes(), " bytes)");
    auto* codes = static_cast<std::uint8_t*>(ctx.scratch());
    auto* scales = reinterpret_cast<float*>(static_cast<char*>(ctx.scratch()) + codes_bytes);
    launch_act_quant(ctx, x, a.x_stride, count, count, a.in, a.ue8m0, codes, a.in, scales, blocks, 1);
    reference_fp8_kernel<kRefTile><<<grid, block, 0, ctx.stream()>>>(
        codes, scales, static_cast<const std::uint8_t*>(a.w), a.w_scale, a.out, a.in, static_cast<bf16_bits*>(y),
        a.y_stride, count);
    DSV32_CUDA_CHECK_LAUNCH("reference_fp8_kernel");
    return;
  }
  const DeviceWeight w = device_weight(a.dtype, a.w, a.w_scale, a.out, a.in, "linear");
  if (a.f32_result)
    reference_dense_kernel<kRefTile, float><<<grid, block, 0, ctx.stream()>>>(x, a.x_stride, w, static_cast<float*>(y),
                                                                              a.y_stride, count);
  else
    reference_dense_kernel<kRefTile, bf16_bits><<<grid, block, 0, ctx.stream()>>>(
        x, a.x_stride, w, static_cast<bf16_bits*>(y), a.y_stride, count);
  DSV32_CUDA_CHECK_LAUNCH("reference_dense_kernel");
}

/// \brief Y = X W^T through cuBLASLt as plan_linear() plans it, chunk by chunk through the scratch;
///        a chunk cuBLASLt has no algorithm for runs dsv32's reference kernel instead.
inline void run_linear(ExecutionContext<Cuda>& ctx, const LinearArgs& a) {
  DSV32_CHECK(a.dtype == DType::BF16 || a.dtype == DType::F32 || a.dtype == DType::F8_E4M3, unsupported,
              "CUDA linear: weight dtype ", dtype_name(a.dtype), " (BF16, F32 or F8_E4M3 expected)");
  if (a.rows == 0) return;
  if (!ctx.use_cublaslt()) {
    // the reference FP8 path stages its codes in the scratch: keep each call within it
    const std::int64_t per_row = a.in + (a.in / kBlockSize) * 4;
    const std::int64_t chunk = a.dtype == DType::F8_E4M3
                                   ? std::max<std::int64_t>(1, static_cast<std::int64_t>(ctx.scratch_bytes() / 2) / per_row)
                                   : a.rows;
    for (std::int64_t r0 = 0; r0 < a.rows; r0 += chunk) reference_linear(ctx, a, r0, std::min(chunk, a.rows - r0));
    return;
  }
  GemmRequest req;
  req.weight = a.dtype;
  req.f32_result = a.f32_result;
  req.rows = a.rows;
  req.out = a.out;
  req.in = a.in;
  req.x_stride = a.x_stride;
  req.y_stride = a.y_stride;
  const GemmPlan p = plan_linear(req, ctx.scratch_bytes());
  char* scratch = static_cast<char*>(ctx.scratch());
  const float* w_scale = a.w_scale;
  if (p.repack_w_scales) {
    const std::int64_t n_blocks = ceil_div(a.out, kBlockSize);
    auto* dst = reinterpret_cast<float*>(scratch + p.w_scale_offset);
    repack_scales_kernel<256><<<grid_for(n_blocks * p.w_scale_ld), 256, 0, ctx.stream()>>>(a.w_scale, n_blocks,
                                                                                           p.k_blocks, p.w_scale_ld, dst);
    DSV32_CUDA_CHECK_LAUNCH("repack_scales_kernel");
    w_scale = dst;
  }
  const std::size_t y_elem = a.f32_result ? 4 : 2;
  for (std::int64_t r0 = 0; r0 < a.rows; r0 += p.chunk_rows) {
    const std::int64_t count = std::min(p.chunk_rows, a.rows - r0);
    const std::int64_t gemm_rows = p.gemm_rows(count);
    void* y = static_cast<char*>(a.y) + static_cast<std::size_t>(r0 * a.y_stride) * y_elem;
    const bool staged = p.stages_chunk(count);
    void* d = staged ? static_cast<void*>(scratch + p.d_offset) : y;
    const void* b = a.x + r0 * a.x_stride;
    const float* b_scale = nullptr;
    if (p.input == GemmInput::quantized) {
      auto* codes = reinterpret_cast<std::uint8_t*>(scratch + p.x_offset);
      auto* scales = reinterpret_cast<float*>(scratch + p.x_scale_offset);
      // vector scales [k_blocks][gemm_rows]: row r of block kb at kb * gemm_rows + r
      launch_act_quant(ctx, a.x + r0 * a.x_stride, a.x_stride, count, gemm_rows, a.in, a.ue8m0, codes, a.in, scales, 1,
                       gemm_rows);
      b = codes;
      b_scale = scales;
    } else if (p.input == GemmInput::widened) {
      void* xf = scratch + p.x_offset;
      launch_convert(ctx, true, a.x + r0 * a.x_stride, a.x_stride, xf, a.in, count, a.in);
      b = xf;
    }
    const GemmKey key = gemm_key(p, count, reinterpret_cast<std::uintptr_t>(a.w), reinterpret_cast<std::uintptr_t>(b),
                                 reinterpret_cast<std::uintptr_t>(d));
    if (!run_matmul(ctx, key, a.w, b, d, w_scale, b_scale)) {
      ctx.note_gemm_fallback();
      reference_linear(ctx, a, r0, count);  // cuBLASLt has no algorithm for this shape and layout
      continue;
    }
    if (!staged) continue;
    if (p.round_output) {  // f32 product, bf16 result
      launch_convert(ctx, false, d, p.out, y, a.y_stride, count, a.out);
    } else {  // padded rows: copy the first `count` rows of the [gemm_rows, N] product
      const std::size_t row_bytes = static_cast<std::size_t>(a.out) * y_elem;
      DSV32_CUDA_CHECK(cudaMemcpy2DAsync(y, static_cast<std::size_t>(a.y_stride) * y_elem, d, row_bytes, row_bytes,
                                         static_cast<std::size_t>(count), cudaMemcpyDeviceToDevice, ctx.stream()));
    }
  }
}

/// \brief Launches absorb_query_kernel: [T H, nope + rope] (row stride q_stride) -> [T H, C].
inline void launch_absorb_query(ExecutionContext<Cuda>& ctx, const bf16_bits* q, std::int64_t q_stride, std::int64_t rows,
                                const DeviceWeight& w, std::int64_t heads, std::int64_t nope, std::int64_t v,
                                bf16_bits* q_lat) {
  if (rows == 0) return;
  const std::int64_t C = w.in;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(std::min<std::int64_t>(ceil_div(C, 128), 64)));
  const std::size_t smem = static_cast<std::size_t>(nope) * 4;
  prepare_smem(absorb_query_kernel<128>, smem, ctx.smem_optin(), "absorb_query_kernel");
  absorb_query_kernel<128><<<grid, 128, smem, ctx.stream()>>>(q, q_stride, w, heads, nope, v, q_lat, C);
  DSV32_CUDA_CHECK_LAUNCH("absorb_query_kernel");
}

/// \brief Launches project_values_kernel: [T H, C] -> [T H, v].
inline void launch_project_values(ExecutionContext<Cuda>& ctx, const bf16_bits* o_lat, std::int64_t rows,
                                  const DeviceWeight& w, std::int64_t heads, std::int64_t nope, std::int64_t v,
                                  bf16_bits* out, std::int64_t o_stride) {
  if (rows * v == 0) return;
  project_values_kernel<256><<<grid_for(rows * v * 32), 256, 0, ctx.stream()>>>(o_lat, w.in, w, rows, heads, nope, v,
                                                                                out, o_stride);
  DSV32_CUDA_CHECK_LAUNCH("project_values_kernel");
}

/// @}

}  // namespace dsv32::cuda
