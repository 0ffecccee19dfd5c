/// \file
/// \brief The CUDA backend's attention kernels: the lightning indexer (E4M3 scoring with exact dot
///        products, then a per-query top-k by radix select and a bitonic sort, ties to the lower
///        position), MLA prefill attention over the selected positions, and the absorbed decode on the
///        latent cache. Counts and selections stay on the device: nothing is read back to the host.
#pragma once

#include "dsv32/backend/cuda/launch.cuh"
#include "dsv32/backend/cuda/memory.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// Keys scored by one block of the indexer (one per thread).
inline constexpr int kIndexerKeys = 128;

/// The cache row of position `p` of the sequence whose block-table row is `table` (CachePages).
__device__ inline std::int64_t paged_row(const std::int32_t* table, std::int64_t page_size, std::int64_t p) {
  return static_cast<std::int64_t>(table[p / page_size]) * page_size + p % page_size;
}

/// The head weights of the indexer: weight[t H + h] = (bf16(hw * head_scale) * q_scale[t H + h][0]) * dim_scale
/// with one 128-block, bf16(hw * head_scale) * dim_scale with several (the CPU backend's expression).
template <int Threads>
__global__ void indexer_weights_kernel(const bf16_bits* hw, std::int64_t hw_stride, std::int64_t T, std::int64_t H,
                                       float head_scale, float dim_scale, const float* q_scale, std::int64_t qs_stride,
                                       std::int64_t blocks, float* weight) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; e < T * H;
       e += static_cast<std::int64_t>(gridDim.x) * Threads) {
    const std::int64_t t = e / H, h = e % H;
    const float w = round_to_bf16(__fmul_rn(load_bf16(hw + t * hw_stride + h), head_scale));
    weight[e] = blocks == 1 ? __fmul_rn(__fmul_rn(w, q_scale[e * qs_stride]), dim_scale) : __fmul_rn(w, dim_scale);
  }
}

/// Scores of query rows [row0, row0 + rows) against their visible keys (positions [0, position[row]] of
/// the row's sequence, read through its block table), one thread per key:
/// score[t] = sum_h relu(q_h . k_t) * weight_h * k_scale_t (one block: the dot products exact), or with
/// several blocks sum_h relu(sum_b (q_hb . k_tb) * qs_hb * ks_tb) * weight_h. Invisible keys are skipped.
/// scores: [rows, T] f32.
template <int Keys>
__global__ void indexer_score_kernel(const std::uint8_t* q_codes, std::int64_t q_stride, const float* q_scale,
                                     std::int64_t qs_stride, const float* weight, const std::uint8_t* k_codes,
                                     std::int64_t k_stride, const float* k_scale, std::int64_t ks_stride,
                                     std::int64_t H, std::int64_t D, const std::int32_t* block_table,
                                     std::int64_t bt_stride, const std::int32_t* sequence, const std::int32_t* position,
                                     std::int64_t page_size, std::int64_t row0, float* scores, std::int64_t T) {
  extern __shared__ unsigned char smem[];
  float* table = reinterpret_cast<float*>(smem);                      // [256]
  std::uint8_t* q = smem + 256 * 4;                                   // [H][D]
  std::uint8_t* k = q + ((H * D + 15) / 16) * 16;                     // [Keys][D + 4]
  const std::int64_t row = row0 + blockIdx.y;                         // the query row of the call
  const std::int32_t* pages = block_table + static_cast<std::int64_t>(sequence[row]) * bt_stride;
  const std::int64_t visible = static_cast<std::int64_t>(position[row]) + 1;
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * Keys;
  if (t0 >= visible) return;
  const std::int64_t blocks = D / kBlockSize, kpitch = D + 4;
  for (int i = threadIdx.x; i < 256; i += Keys) table[i] = decode_e4m3(static_cast<std::uint8_t>(i));
  for (std::int64_t i = threadIdx.x; i < H * D; i += Keys) q[i] = q_codes[(row * H + i / D) * q_stride + i % D];
  for (std::int64_t i = threadIdx.x; i < Keys * D; i += Keys) {
    const std::int64_t kt = t0 + i / D;
    k[(i / D) * kpitch + i % D] = kt < visible ? k_codes[paged_row(pages, page_size, kt) * k_stride + i % D] : 0;
  }
  __syncthreads();
  const std::int64_t t = t0 + threadIdx.x;
  if (t >= visible) return;
  const std::uint8_t* kr = k + threadIdx.x * kpitch;
  const float* ks = k_scale + paged_row(pages, page_size, t) * ks_stride;
  float acc = 0.0f;
  for (std::int64_t h = 0; h < H; ++h) {
    const std::uint8_t* qh = q + h * D;
    float logit = 0.0f;
    for (std::int64_t bl = 0; bl < blocks; ++bl) {
      double dot = 0.0;  // products of E4M3 values are exact in float, their sums exact in double
      for (std::int64_t d = bl * kBlockSize; d < (bl + 1) * kBlockSize; ++d)
        dot += static_cast<double>(table[qh[d]] * table[kr[d]]);
      if (blocks == 1)
        logit = static_cast<float>(dot);
      else
        logit = __fadd_rn(logit, __fmul_rn(__fmul_rn(static_cast<float>(dot), q_scale[(row * H + h) * qs_stride + bl]),
                                           ks[bl]));
    }
    acc = __fadd_rn(acc, __fmul_rn(fmaxf(logit, 0.0f), weight[row * H + h]));
  }
  scores[static_cast<std::int64_t>(blockIdx.y) * T + t] = blocks == 1 ? __fmul_rn(acc, ks[0]) : acc;
}

/// Top min(k, visible) of each query row's scores, highest first, ties to the lower position: a radix
/// select of the k-th largest (score, position) key over 8 passes of 8 bits, then the keys at or above
/// it sorted (bitonic, descending) in shared memory. One block per query row.
template <int Threads>
__global__ void topk_kernel(const float* scores, std::int64_t T, const std::int32_t* position, std::int64_t row0,
                            std::int64_t k, std::int64_t capacity, std::int32_t* selected, std::int64_t sel_stride,
                            std::int32_t* count) {
  extern __shared__ unsigned long long keys[];  // [capacity]
  __shared__ unsigned int hist[256];
  __shared__ unsigned long long prefix_shared;
  __shared__ unsigned int filled;
  const std::int64_t row = row0 + blockIdx.x, visible = static_cast<std::int64_t>(position[row]) + 1;
  const std::int64_t m = k < visible ? k : visible;
  const float* sc = scores + static_cast<std::int64_t>(blockIdx.x) * T;
  unsigned long long prefix = 0, mask = 0;
  if (m < visible) {
    std::int64_t remaining = m;
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += Threads) hist[i] = 0;
      __syncthreads();
      for (std::int64_t i = threadIdx.x; i < visible; i += Threads) {
        const unsigned long long key = topk_key(sc[i], static_cast<std::int32_t>(i));
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        std::int64_t above = 0;
        int bucket = 255;
        for (; bucket > 0; --bucket) {
          if (above + hist[bucket] >= remaining) break;
          above += hist[bucket];
        }
        prefix_shared = prefix | (static_cast<unsigned long long>(bucket) << shift);
        hist[0] = static_cast<unsigned int>(above);  // broadcast: keys above the chosen bucket
      }
      __syncthreads();
      remaining -= hist[0];
      prefix = prefix_shared;
      mask |= 0xFFull << shift;
      __syncthreads();
    }
  }
  // prefix is now the m-th largest key (or 0: every visible key)
  if (threadIdx.x == 0) filled = 0;
  for (std::int64_t i = threadIdx.x; i < capacity; i += Threads) keys[i] = 0;
  __syncthreads();
  for (std::int64_t i = threadIdx.x; i < visible; i += Threads) {
    const unsigned long long key = topk_key(sc[i], static_cast<std::int32_t>(i));
    if (key >= prefix) {
      const unsigned int at = atomicAdd(&filled, 1u);
      if (at < capacity) keys[at] = key;
    }
  }
  __syncthreads();
  for (std::int64_t size = 2; size <= capacity; size *= 2)
    for (std::int64_t stride = size / 2; stride > 0; stride /= 2) {
      for (std::int64_t i = threadIdx.x; i < capacity; i += Threads) {
        const std::int64_t j = i ^ stride;
        if (j > i) {
          const bool descending = (i & size) == 0;
          const unsigned long long a = keys[i], c = keys[j];
          if (descending ? a < c : a > c) {
            keys[i] = c;
            keys[j] = a;
          }
        }
      }
      __syncthreads();
    }
  for (std::int64_t i = threadIdx.x; i < m; i += Threads) selected[row * sel_stride + i] = topk_position(keys[i]);
  if (threadIdx.x == 0) count[row] = static_cast<std::int32_t>(m);
}

/// Softmax of `n` scores in shared memory, probabilities rounded to bf16 (the CPU's softmax_to_bf16):
/// max, exp(x - max), f32 sum, p = bf16(p * (1 / sum)). `red` holds Threads / 32 floats.
template <int Threads>
__device__ inline void softmax_to_bf16(float* p, std::int64_t n, float* red) {
  float mx = -bits_float(0x7F800000u);
  for (std::int64_t j = threadIdx.x; j < n; j += Threads) mx = fmaxf(mx, p[j]);
  mx = block_max<Threads>(mx, red);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += Threads) {
    p[j] = exp_rounded(__fsub_rn(p[j], mx));
    sum += p[j];
  }
  sum = block_sum<Threads>(sum, red);
  const float inv = __fdiv_rn(1.0f, sum);
  for (std::int64_t j = threadIdx.x; j < n; j += Threads) p[j] = round_to_bf16(__fmul_rn(p[j], inv));
  __syncthreads();
}

/// MLA prefill of one sequence, one block per (query s, head h): scores over the selected positions
/// ((q_nope . k_nope + q_pe . k_pe) * scale, a warp per position), softmax to bf16, then
/// out = bf16(sum_j p_j v_j) accumulated in the order of j as the CPU does.
template <int Threads>
__global__ void sparse_attention_kernel(const bf16_bits* q, std::int64_t q_stride, const bf16_bits* kv,
                                        std::int64_t kv_stride, const bf16_bits* k_pe, std::int64_t pe_stride,
                                        std::int64_t H, std::int64_t nope, std::int64_t rope, std::int64_t v,
                                        const std::int32_t* selected, std::int64_t sel_stride,
                                        const std::int32_t* count, float scale, bf16_bits* out,
                                        std::int64_t out_stride) {
  extern __shared__ float sm[];
  __shared__ float red[Threads / 32];
  const std::int64_t s = blockIdx.x / H, h = blockIdx.x % H, dq = nope + rope, dkv = nope + v;
  float* qf = sm;             // [dq]
  float* p = sm + dq;         // [k]
  const std::int64_t n = count[s];
  const std::int32_t* sel = selected + s * sel_stride;
  for (std::int64_t d = threadIdx.x; d < dq; d += Threads) qf[d] = load_bf16(q + s * q_stride + h * dq + d);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (std::int64_t j = warp; j < n; j += Threads / 32) {
    const bf16_bits* kr = kv + static_cast<std::int64_t>(sel[j]) * kv_stride + h * dkv;
    const bf16_bits* pr = k_pe + static_cast<std::int64_t>(sel[j]) * pe_stride;
    float a = 0.0f, b = 0.0f;
    for (std::int64_t d = lane; d < nope; d += 32) a = fmaf(qf[d], load_bf16(kr + d), a);
    for (std::int64_t d = lane; d < rope; d += 32) b = fmaf(qf[nope + d], load_bf16(pr + d), b);
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) p[j] = __fmul_rn(__fadd_rn(a, b), scale);
  }
  __syncthreads();
  softmax_to_bf16<Threads>(p, n, red);
  for (std::int64_t d = threadIdx.x; d < v; d += Threads) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j < n; ++j)
      acc = __fadd_rn(acc, __fmul_rn(load_bf16(kv + static_cast<std::int64_t>(sel[j]) * kv_stride + h * dkv + nope + d), p[j]));
    store_bf16(out + s * out_stride + h * v + d, acc);
  }
}

/// Absorbed MLA attention, one block per query b and group of G heads (the selected latents are read
/// once for the G heads): scores (q_lat . kv_j + q_pe . pe_j) * scale over the selected positions of the
/// query's sequence (count read on the device; cache rows through its block table), softmax to bf16, then
/// out = bf16(sum_j p_j kv_j) in the latent space, each head's sums in the order of j.
template <int Threads, int G>
__global__ void latent_attention_kernel(const bf16_bits* q_lat, std::int64_t ql_stride, const bf16_bits* q_pe,
                                        std::int64_t qp_stride, const bf16_bits* kv_cache, std::int64_t kv_stride,
                                        const bf16_bits* pe_cache, std::int64_t pe_stride,
                                        const std::int32_t* block_table, std::int64_t bt_stride,
                                        const std::int32_t* sequence, std::int64_t page_size,
                                        std::int64_t H, std::int64_t C, std::int64_t rope, std::int64_t k,
                                        const std::int32_t* selected, std::int64_t sel_stride,
                                        const std::int32_t* count, float scale, bf16_bits* out,
                                        std::int64_t out_stride) {
  extern __shared__ float sm[];
  __shared__ float red[Threads / 32];
  const std::int64_t groups = H / G, b = blockIdx.x / groups, row0 = b * H + (blockIdx.x % groups) * G;
  float* ql = sm;                // [G][C]
  float* qp = sm + G * C;        // [G][rope]
  float* p = qp + G * rope;      // [G][k]
  const std::int64_t n = count[b];
  const std::int32_t* sel = selected + b * sel_stride;
  const std::int32_t* table = block_table + static_cast<std::int64_t>(sequence[b]) * bt_stride;
  for (std::int64_t i = threadIdx.x; i < G * C; i += Threads) ql[i] = load_bf16(q_lat + (row0 + i / C) * ql_stride + i % C);
  for (std::int64_t i = threadIdx.x; i < G * rope; i += Threads)
    qp[i] = load_bf16(q_pe + (row0 + i / rope) * qp_stride + i % rope);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (std::int64_t j = warp; j < n; j += Threads / 32) {
    const std::int64_t cache_row = paged_row(table, page_size, sel[j]);
    const bf16_bits* kr = kv_cache + cache_row * kv_stride;
    const bf16_bits* pr = pe_cache + cache_row * pe_stride;
    float a[G], c2[G];
#pragma unroll
    for (int g = 0; g < G; ++g) a[g] = c2[g] = 0.0f;
    for (std::int64_t c = lane; c < C; c += 32) {
      const float kvv = load_bf16(kr + c);
#pragma unroll
      for (int g = 0; g < G; ++g) a[g] = fmaf(ql[g * C + c], kvv, a[g]);
    }
    for (std::int64_t r = lane; r < rope; r += 32) {
      const float pv = load_bf16(pr + r);
#pragma unroll
      for (int g = 0; g < G; ++g) c2[g] = fmaf(qp[g * rope + r], pv, c2[g]);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float sa = warp_sum(a[g]), sb = warp_sum(c2[g]);
      if (lane == 0) p[g * k + j] = __fmul_rn(__fadd_rn(sa, sb), scale);
    }
  }
  __syncthreads();
  for (int g = 0; g < G; ++g) softmax_to_bf16<Threads>(p + g * k, n, red);
  for (std::int64_t c = threadIdx.x; c < C; c += Threads) {
    float acc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) {
      const float kvv = load_bf16(kv_cache + paged_row(table, page_size, sel[j]) * kv_stride + c);
#pragma unroll
      for (int g = 0; g < G; ++g) acc[g] = fmaf(p[g * k + j], kvv, acc[g]);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) store_bf16(out + (row0 + g) * out_stride + c, acc[g]);
  }
}

/// \brief The indexer's device operands (views of the Kernels contract as pointers and strides).
struct IndexerArgs {
  const std::uint8_t* q_codes = nullptr;  ///< [T H, D]
  std::int64_t q_stride = 0;              ///< its row stride
  const float* q_scale = nullptr;         ///< [T H, D / 128]
  std::int64_t qs_stride = 0;             ///< its row stride
  const bf16_bits* head_weights = nullptr;  ///< [T, H]
  std::int64_t hw_stride = 0;             ///< its row stride
  float head_scale = 1.0f;                ///< n_heads^-0.5
  float dim_scale = 1.0f;                 ///< index_head_dim^-0.5
  const std::uint8_t* k_codes = nullptr;  ///< [pool rows, D]
  std::int64_t k_stride = 0;              ///< its row stride
  const float* k_scale = nullptr;         ///< [pool rows, D / 128]
  std::int64_t ks_stride = 0;             ///< its row stride
  std::int64_t T = 0;                     ///< query rows
  std::int64_t H = 0;                     ///< heads
  std::int64_t D = 0;                     ///< head dim
  const std::int32_t* block_table = nullptr;  ///< [sequences, bt_stride] page ids
  std::int64_t bt_stride = 0;             ///< its row stride
  const std::int32_t* sequence = nullptr; ///< [T] each query's block-table row
  const std::int32_t* position = nullptr; ///< [T] each query's position
  std::int64_t page_size = 0;             ///< positions per page
  std::int64_t max_visible = 0;           ///< the most positions a query sees (host-side bound)
  std::int32_t* selected = nullptr;       ///< [T, k]
  std::int64_t sel_stride = 0;            ///< its row stride
  std::int64_t k = 0;                     ///< its columns
  std::int32_t* count = nullptr;          ///< [T]
};

/// \brief Runs the indexer: head weights, scores (in passes of as many query rows as the scratch
///        holds) and top-k, all on the context's stream.
inline void run_indexer(ExecutionContext<Cuda>& ctx, const IndexerArgs& a) {
  if (a.T == 0) return;
  DSV32_CHECK(a.D % kBlockSize == 0, invalid_argument, "CUDA indexer: head dim ", a.D, " is not a multiple of 128");
  const std::int64_t keys = a.max_visible;
  char* scratch = static_cast<char*>(ctx.scratch());
  float* weight = reinterpret_cast<float*>(scratch);
  const std::size_t weight_bytes = detail::align_scratch(static_cast<std::size_t>(a.T * a.H) * 4);
  DSV32_CHECK(weight_bytes < ctx.scratch_bytes(), unsupported, "CUDA indexer: ", a.T * a.H,
              " head weights exceed the context's scratch (", ctx.scratch_bytes(), " bytes)");
  const IndexerPlan plan = plan_indexer(a.H, a.D, a.k, a.T, keys, ctx.scratch_bytes() - weight_bytes, ctx.smem_optin());
  float* scores = reinterpret_cast<float*>(scratch + weight_bytes);
  indexer_weights_kernel<256><<<grid_for(a.T * a.H), 256, 0, ctx.stream()>>>(
      a.head_weights, a.hw_stride, a.T, a.H, a.head_scale, a.dim_scale, a.q_scale, a.qs_stride, a.D / kBlockSize, weight);
  DSV32_CUDA_CHECK_LAUNCH("indexer_weights_kernel");
  const std::size_t score_smem = 256 * 4 + static_cast<std::size_t>((a.H * a.D + 15) / 16 * 16) +
                                 static_cast<std::size_t>(kIndexerKeys * (a.D + 4));
  prepare_smem(indexer_score_kernel<kIndexerKeys>, score_smem, ctx.smem_optin(), "indexer_score_kernel");
  prepare_smem(topk_kernel<1024>, plan.topk_smem, ctx.smem_optin(), "topk_kernel");
  const std::int64_t per_pass = std::min<std::int64_t>(plan.rows_per_pass, 65535);  // the grid's y limit
  for (std::int64_t row0 = 0; row0 < a.T; row0 += per_pass) {
    const std::int64_t rows = std::min(per_pass, a.T - row0);
    const dim3 grid(static_cast<unsigned>(ceil_div(keys, kIndexerKeys)), static_cast<unsigned>(rows));
    indexer_score_kernel<kIndexerKeys><<<grid, kIndexerKeys, score_smem, ctx.stream()>>>(
        a.q_codes, a.q_stride, a.q_scale, a.qs_stride, weight, a.k_codes, a.k_stride, a.k_scale, a.ks_stride, a.H, a.D,
        a.block_table, a.bt_stride, a.sequence, a.position, a.page_size, row0, scores, keys);
    DSV32_CUDA_CHECK_LAUNCH("indexer_score_kernel");
    topk_kernel<1024><<<static_cast<unsigned>(rows), 1024, plan.topk_smem, ctx.stream()>>>(
        scores, keys, a.position, row0, a.k, plan.sort_capacity, a.selected, a.sel_stride, a.count);
    DSV32_CUDA_CHECK_LAUNCH("topk_kernel");
  }
}

/// \brief Launches sparse_attention_kernel for one sequence of S queries.
inline void launch_sparse_attention(ExecutionContext<Cuda>& ctx, const bf16_bits* q, std::int64_t q_stride,
                                    std::int64_t S, const bf16_bits* kv, std::int64_t kv_stride, const bf16_bits* k_pe,
                                    std::int64_t pe_stride, std::int64_t H, std::int64_t nope, std::int64_t rope,
                                    std::int64_t v, const std::int32_t* selected, std::int64_t sel_stride,
                                    std::int64_t k, const std::int32_t* count, float scale, bf16_bits* out,
                                    std::int64_t out_stride) {
  if (S * H == 0) return;
  const AttentionPlan plan = plan_sparse_attention(nope, rope, k, ctx.smem_optin());
  prepare_smem(sparse_attention_kernel<128>, plan.smem, ctx.smem_optin(), "sparse_attention_kernel");
  sparse_attention_kernel<128><<<static_cast<unsigned>(S * H), 128, plan.smem, ctx.stream()>>>(
      q, q_stride, kv, kv_stride, k_pe, pe_stride, H, nope, rope, v, selected, sel_stride, count, scale, out, out_stride);
  DSV32_CUDA_CHECK_LAUNCH("sparse_attention_kernel");
}

/// \brief A ragged pass's paged-cache arrays as the attention kernels take them (CachePages).
struct PagedArgs {
  const std::int32_t* block_table = nullptr;  ///< [sequences, bt_stride] page ids
  std::int64_t bt_stride = 0;                 ///< its row stride
  const std::int32_t* sequence = nullptr;     ///< [queries] each query's block-table row
  std::int64_t page_size = 0;                 ///< positions per page
};

namespace detail {
template <int G>
void launch_latent_group(ExecutionContext<Cuda>& ctx, std::size_t smem, unsigned blocks, const bf16_bits* q_lat,
                         std::int64_t ql_stride, const bf16_bits* q_pe, std::int64_t qp_stride,
                         const bf16_bits* kv_cache, std::int64_t kv_stride, const bf16_bits* pe_cache,
                         std::int64_t pe_stride, const PagedArgs& pg, std::int64_t H, std::int64_t C,
                         std::int64_t rope, std::int64_t k, const std::int32_t* selected, std::int64_t sel_stride,
                         const std::int32_t* count, float scale, bf16_bits* out, std::int64_t out_stride) {
  prepare_smem(latent_attention_kernel<256, G>, smem, ctx.smem_optin(), "latent_attention_kernel");
  latent_attention_kernel<256, G><<<blocks, 256, smem, ctx.stream()>>>(
      q_lat, ql_stride, q_pe, qp_stride, kv_cache, kv_stride, pe_cache, pe_stride, pg.block_table, pg.bt_stride,
      pg.sequence, pg.page_size, H, C, rope, k, selected, sel_stride, count, scale, out, out_stride);
  DSV32_CUDA_CHECK_LAUNCH("latent_attention_kernel");
}
}  // namespace detail

/// \brief Launches latent_attention_kernel for `batch` queries (each of its own sequence, cache rows
///        through `pg`), with as many heads per block as plan_latent_attention() fits (8, 4, 2 or 1).
inline void launch_latent_attention(ExecutionContext<Cuda>& ctx, const bf16_bits* q_lat, std::int64_t ql_stride,
                                    const bf16_bits* q_pe, std::int64_t qp_stride, const bf16_bits* kv_cache,
                                    std::int64_t kv_stride, const bf16_bits* pe_cache, std::int64_t pe_stride,
                                    const PagedArgs& pg, std::int64_t batch, std::int64_t H, std::int64_t C,
                                    std::int64_t rope, const std::int32_t* selected, std::int64_t sel_stride,
                                    std::int64_t k, const std::int32_t* count, float scale, bf16_bits* out,
                                    std::int64_t out_stride) {
  if (batch * H == 0) return;
  const AttentionPlan plan = plan_latent_attention(H, C, rope, k, ctx.smem_optin());
  const unsigned blocks = static_cast<unsigned>(batch * (H / plan.heads_per_block));
  switch (plan.heads_per_block) {
    case 8:
      detail::launch_latent_group<8>(ctx, plan.smem, blocks, q_lat, ql_stride, q_pe, qp_stride, kv_cache, kv_stride,
                                     pe_cache, pe_stride, pg, H, C, rope, k, selected, sel_stride, count, scale,
                                     out, out_stride);
      break;
    case 4:
      detail::launch_latent_group<4>(ctx, plan.smem, blocks, q_lat, ql_stride, q_pe, qp_stride, kv_cache, kv_stride,
                                     pe_cache, pe_stride, pg, H, C, rope, k, selected, sel_stride, count, scale,
                                     out, out_stride);
      break;
    case 2:
      detail::launch_latent_group<2>(ctx, plan.smem, blocks, q_lat, ql_stride, q_pe, qp_stride, kv_cache, kv_stride,
                                     pe_cache, pe_stride, pg, H, C, rope, k, selected, sel_stride, count, scale,
                                     out, out_stride);
      break;
    default:
      detail::launch_latent_group<1>(ctx, plan.smem, blocks, q_lat, ql_stride, q_pe, qp_stride, kv_cache, kv_stride,
                                     pe_cache, pe_stride, pg, H, C, rope, k, selected, sel_stride, count, scale,
                                     out, out_stride);
  }
}

/// @}

}  // namespace dsv32::cuda
