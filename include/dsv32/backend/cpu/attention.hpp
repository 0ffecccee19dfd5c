/// \file
/// \brief CPU: the lightning indexer's scores and top-k, and MLA attention over the selected positions.
///
/// Attention never builds an L x L matrix: each query gathers the (at most index_topk) positions its
/// indexer selected and attends to those only — the reference's result (its mask gives every other
/// position zero weight) at O(L k) cost.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "dsv32/backend/cpu/gemm.hpp"
#include "dsv32/backend/cpu/kernel_helpers.hpp"
#include "dsv32/backend/cpu/parallel_for.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/core/numeric.hpp"

namespace dsv32::cpu {

namespace detail {
struct AttentionScratchTag;
/// Per-thread f32 scratch of the attention kernels (thread_scratch): slots 0-3 inside parallel
/// tasks, 4-9 for a kernel's own arrays on the calling thread.
inline float* attention_scratch(int slot, std::size_t n) { return thread_scratch<float, AttentionScratchTag>(slot, n); }
}  // namespace detail

/// \brief Index scores of one sequence's queries against its cached keys.
///
/// score[s, t] = sum_h relu(q[s,h] . k[t]) * weight[s,h] * k_scale[t] with E4M3 values (exact
/// products, f32 sums), for t < visible[s]. With index_head_dim > 128 the dot product is taken per
/// 128 block with both block scales (weight then holds w_h * D^-0.5 only).
/// \param q_codes   [S, H, D] E4M3 codes
/// \param q_weight  [S, H] f32: w_h * q_scale[s,h] * D^-0.5 (D == 128), or w_h * D^-0.5 (D > 128)
/// \param q_scale   [S, H, D / 128] f32 (read only when D > 128)
/// \param S         queries
/// \param H         indexer heads
/// \param D         indexer head dim, a multiple of 128
/// \param k_codes   [T, D] E4M3 codes of the cache
/// \param k_scale   [T, D / 128] f32
/// \param T         cached keys; also the row stride of `scores`
/// \param visible   [S] keys each query may see (causal prefix length), each <= T
/// \param scores    [S, T] f32 output; entries at t >= visible[s] are left unspecified
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void index_scores(const std::uint8_t* q_codes, const float* q_weight, const float* q_scale, std::int64_t S,
                         std::int64_t H, std::int64_t D, const std::uint8_t* k_codes, const float* k_scale,
                         std::int64_t T, const std::int64_t* visible, float* scores,
                         const CpuKernels& kernels = default_kernels()) {
  const std::int64_t blocks = D / kBlockSize;
  // tasks: (query, 256 positions); the logits are f32 sums over d in increasing order of exact
  // products of E4M3 values, then summed over heads in increasing order
  constexpr std::int64_t kChunk = 256;
  std::vector<std::int64_t> first(static_cast<std::size_t>(S + 1), 0);
  for (std::int64_t s = 0; s < S; ++s) first[s + 1] = first[s] + (std::max<std::int64_t>(visible[s], 0) + kChunk - 1) / kChunk;
  const simd::GemmOps& ops = kernels.ops();
  parallel_for(first[S], H * D * kChunk, [&](std::int64_t task) {
    const std::int64_t s = std::upper_bound(first.begin(), first.end(), task) - first.begin() - 1;
    const std::int64_t t0 = (task - first[s]) * kChunk, n = std::min(kChunk, visible[s] - t0);
    float* qf = detail::attention_scratch(0, static_cast<std::size_t>(H * D));
    float* kf = detail::attention_scratch(1, static_cast<std::size_t>(n * D));
    float* logits = detail::attention_scratch(2, static_cast<std::size_t>(H * n));
    ops.widen_e4m3(q_codes + s * H * D, H * D, qf);
    ops.widen_e4m3(k_codes + t0 * D, n * D, kf);
    float* out = scores + s * T + t0;
    if (blocks == 1) {
      matmul_exact(H, n, D, qf, D, kf, D, true, logits, n, kernels);
      for (std::int64_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (std::int64_t h = 0; h < H; ++h) acc += std::max(logits[h * n + t], 0.0f) * q_weight[s * H + h];
        out[t] = acc * k_scale[t0 + t];
      }
    } else {
      std::fill(logits, logits + H * n, 0.0f);
      float* part = detail::attention_scratch(3, static_cast<std::size_t>(H * n));
      for (std::int64_t b = 0; b < blocks; ++b) {
        matmul_exact(H, n, kBlockSize, qf + b * kBlockSize, D, kf + b * kBlockSize, D, true, part, n, kernels);
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t t = 0; t < n; ++t)
            logits[h * n + t] += part[h * n + t] * q_scale[(s * H + h) * blocks + b] * k_scale[(t0 + t) * blocks + b];
      }
      for (std::int64_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (std::int64_t h = 0; h < H; ++h) acc += std::max(logits[h * n + t], 0.0f) * q_weight[s * H + h];
        out[t] = acc;
      }
    }
  });
}

/// \brief The positions of the `k` largest scores among scores[0, n), highest first (ties: lower
///        position first).
/// \param scores [n] f32
/// \param n      candidates
/// \param k      positions wanted
/// \param out    [min(k, n)] positions
/// \return how many positions were written: min(k, n)
inline std::int64_t top_k(const float* scores, std::int64_t n, std::int64_t k, std::int32_t* out) {
  const std::int64_t m = std::min(k, n);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](std::int32_t a, std::int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), better);
  std::copy(idx.begin(), idx.begin() + m, out);
  return m;
}

namespace detail {
/// In-place f32 softmax over p[0, n); then each probability rounded to bf16, as the reference casts
/// the probabilities to the value dtype before the weighted sum. Like PyTorch's softmax kernel it
/// multiplies by the reciprocal of the sum (the golden vectors come from PyTorch).
inline void softmax_to_bf16(float* p, std::int64_t n) {
  float mx = -INFINITY;
  for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, p[j]);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < n; ++j) p[j] = round_bf16(p[j] * inv);
}
}  // namespace detail

namespace detail {
/// Queries of one sparse_attention() block: queries [s0, s1) attend within the union of their
/// selected positions, `union_positions[u0, u0 + un)` in increasing order.
struct QueryBlock {
  std::int64_t s0 = 0, s1 = 0, u0 = 0, un = 0;
};

/// The most queries one sparse_attention() block takes (a multiple of every micro-tile height).
inline constexpr std::int64_t kAttentionQueryBlock = 48;

/// How many selected positions ahead sparse_attention() prefetches the key and value rows it gathers.
inline constexpr std::int64_t kAttentionPrefetch = 32;

/// Splits S queries into blocks of consecutive queries (at most kAttentionQueryBlock) whose union of
/// selected positions stays within twice the largest selection among them, so that the dense
/// products over the union cost at most ~2x the selected ones; `column[s, j]` is the column of
/// selected[s, j] in its block's union.
inline std::vector<QueryBlock> plan_query_blocks(const std::int32_t* selected, const std::int32_t* count, std::int64_t S,
                                                 std::int64_t k_max, std::vector<std::int32_t>& union_positions,
                                                 std::vector<std::int32_t>& column) {
  std::int64_t T = 0;
  for (std::int64_t s = 0; s < S; ++s)
    for (std::int64_t j = 0; j < count[s]; ++j) T = std::max<std::int64_t>(T, selected[s * k_max + j] + 1);
  std::vector<std::int32_t> owner(static_cast<std::size_t>(T), -1);  // the block that holds a position
  std::vector<QueryBlock> blocks;
  union_positions.clear();
  column.assign(static_cast<std::size_t>(S * k_max), 0);
  for (std::int64_t s0 = 0; s0 < S;) {
    const auto b = static_cast<std::int32_t>(blocks.size());
    QueryBlock block{s0, s0, static_cast<std::int64_t>(union_positions.size()), 0};
    std::int64_t widest = 0;
    while (block.s1 < S && block.s1 - s0 < kAttentionQueryBlock) {
      const std::int32_t* sel = selected + block.s1 * k_max;
      const std::int64_t n = count[block.s1];
      std::int64_t fresh = 0;
      for (std::int64_t j = 0; j < n; ++j) fresh += owner[sel[j]] != b;
      if (block.s1 > s0 && block.un + fresh > 2 * std::max(widest, n)) break;
      for (std::int64_t j = 0; j < n; ++j)
        if (owner[sel[j]] != b) owner[sel[j]] = b, union_positions.push_back(sel[j]);
      block.un = static_cast<std::int64_t>(union_positions.size()) - block.u0;
      widest = std::max(widest, n);
      ++block.s1;
    }
    const auto first = union_positions.begin() + block.u0;
    std::sort(first, union_positions.end());
    for (std::int64_t c = 0; c < block.un; ++c) owner[first[c]] = static_cast<std::int32_t>(c);  // now: column
    for (std::int64_t s = s0; s < block.s1; ++s)
      for (std::int64_t j = 0; j < count[s]; ++j) column[s * k_max + j] = owner[selected[s * k_max + j]];
    for (std::int64_t c = 0; c < block.un; ++c) owner[first[c]] = -2;  // held by no block id
    blocks.push_back(block);
    s0 = block.s1;
  }
  return blocks;
}
}  // namespace detail

/// \brief MLA prefill attention of one sequence over the selected positions, keys and values from wkv_b.
///
/// For query s and head h: p = softmax_t(scale * (q[s,h] . [k_nope[t,h], k_pe[t]])) over the selected t,
/// rounded to bf16; out = bf16(sum_t p_t v[t,h]). Every sum is f32 over exact products (bf16 x bf16)
/// in one chain: the score over the nope dimensions then the rope ones, the softmax's max and sum and
/// the output over the selected positions in increasing position order (the reference's dense masked
/// form, whose unselected positions add zeros). Computed per head on blocks of consecutive queries:
/// one product of the queries with the union of their selected keys, then one with the values.
/// \param q        [S, H, nope + rope] bf16 (q_pe already rotated)
/// \param kv       [T, H, nope + v] bf16: wkv_b applied to the cached latents
/// \param k_pe     [T, rope] bf16 rotated key positional parts (the pe cache)
/// \param S        queries
/// \param H        attention heads (this rank's)
/// \param nope     qk_nope_head_dim
/// \param rope     qk_rope_head_dim
/// \param v        v_head_dim
/// \param selected [S, k_max] positions (each < T, distinct per query, in any order); count[s] of them valid
/// \param count    [S] selected positions per query, each in [1, k_max]
/// \param k_max    row stride of `selected` (index_topk)
/// \param scale    softmax scale (mla_softmax_scale())
/// \param out      [S, H, v] bf16
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void sparse_attention(const bf16* q, const bf16* kv, const bf16* k_pe, std::int64_t S, std::int64_t H,
                             std::int64_t nope, std::int64_t rope, std::int64_t v, const std::int32_t* selected,
                             const std::int32_t* count, std::int64_t k_max, float scale, bf16* out,
                             const CpuKernels& kernels = default_kernels()) {
  const std::int64_t dq = nope + rope, dkv = nope + v;
  std::vector<std::int32_t> union_positions, column;
  const std::vector<detail::QueryBlock> blocks =
      detail::plan_query_blocks(selected, count, S, k_max, union_positions, column);
  const auto nblocks = static_cast<std::int64_t>(blocks.size());
  const std::int64_t mean_union = static_cast<std::int64_t>(union_positions.size()) / std::max<std::int64_t>(nblocks, 1);
  const simd::GemmOps& ops = kernels.ops();
  parallel_for(nblocks * H, detail::kAttentionQueryBlock * (mean_union + 1) * (dq + v), [&](std::int64_t task) {
    const detail::QueryBlock& blk = blocks[task / H];
    const std::int64_t h = task % H, m = blk.s1 - blk.s0, U = blk.un;
    const std::int32_t* pos = union_positions.data() + blk.u0;
    auto widen = [&](const bf16* src, std::int64_t n, float* dst) {
      ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(src), n, dst);
    };
    float* qo = detail::attention_scratch(0, static_cast<std::size_t>(m * std::max(dq, v)));  // queries, then outputs
    float* keys = detail::attention_scratch(1, static_cast<std::size_t>(U * dq));
    float* values = detail::attention_scratch(2, static_cast<std::size_t>(U * v));
    float* sp = detail::attention_scratch(3, static_cast<std::size_t>((m + 1) * U));  // scores, then bf16 p
    float* x = sp + m * U;
    for (std::int64_t i = 0; i < m; ++i) widen(q + ((blk.s0 + i) * H + h) * dq, dq, qo + i * dq);
    // The rows of a sparse selection lie scattered in memory (one 2 (nope + v)-byte piece per
    // position and head); fetching them kAttentionPrefetch positions ahead keeps enough reads in
    // flight (at 16K positions on the 671B dims the whole call ran 2.5-3x faster than waiting for each).
    for (std::int64_t c = 0; c < U; ++c) {
      if (c + detail::kAttentionPrefetch < U) {
        const std::int64_t t = pos[c + detail::kAttentionPrefetch];
        detail::prefetch_bytes(kv + (t * H + h) * dkv, dkv * 2);
        detail::prefetch_bytes(k_pe + t * rope, rope * 2);
      }
      const bf16* row = kv + (static_cast<std::int64_t>(pos[c]) * H + h) * dkv;
      widen(row, nope, keys + c * dq);
      widen(k_pe + static_cast<std::int64_t>(pos[c]) * rope, rope, keys + c * dq + nope);
      widen(row + nope, v, values + c * v);
    }
    matmul_exact(m, U, dq, qo, dq, keys, dq, true, sp, U, kernels);
    for (std::int64_t i = 0; i < m; ++i) {
      const std::int64_t s = blk.s0 + i;
      const std::int32_t* col = column.data() + s * k_max;
      float* p = sp + i * U;
      std::fill(x, x + U, -INFINITY);
      float mx = -INFINITY;
      for (std::int64_t j = 0; j < count[s]; ++j) mx = std::max(mx, x[col[j]] = p[col[j]] * scale);
      float sum = 0.0f;
      for (std::int64_t c = 0; c < U; ++c) sum += (x[c] = x[c] == -INFINITY ? 0.0f : std::exp(x[c] - mx));
      const float inv = 1.0f / sum;
      for (std::int64_t c = 0; c < U; ++c) p[c] = round_bf16(x[c] * inv);
    }
    matmul_exact(m, v, U, sp, U, values, v, false, qo, v, kernels);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t d = 0; d < v; ++d) out[((blk.s0 + i) * H + h) * v + d] = bf16(qo[i * v + d]);
  });
}

/// \brief MLA decode attention of one query token in the absorbed (latent) form.
///
/// For head h: p = softmax_t(scale * (q_lat[h] . kv[t] + q_pe[h] . pe[t])) over the selected t,
/// rounded to bf16; out[h] = bf16(sum_t p_t kv[t]).
/// \param q_lat    [H, C] bf16: q_nope projected through wkv_b's key rows
/// \param q_pe     [H, rope] bf16, heads `q_pe_stride` elements apart
/// \param q_pe_stride elements between consecutive heads of `q_pe` (its rows may be wider than rope)
/// \param kv_cache [T, C] bf16 latent cache of this sequence
/// \param pe_cache [T, rope] bf16
/// \param H        attention heads (this rank's)
/// \param C        kv_lora_rank
/// \param rope     qk_rope_head_dim
/// \param selected [n] positions
/// \param n        selected positions, >= 1
/// \param scale    softmax scale (mla_softmax_scale())
/// \param out      [H, C] bf16 latent attention output
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void latent_attention(const bf16* q_lat, const bf16* q_pe, std::int64_t q_pe_stride, const bf16* kv_cache,
                             const bf16* pe_cache, std::int64_t H, std::int64_t C, std::int64_t rope,
                             const std::int32_t* selected,
                             std::int64_t n, float scale, bf16* out, const CpuKernels& kernels = default_kernels()) {
  // Heads split over the threads; every sum is f32 in increasing order of exact products (bf16 x bf16).
  const simd::GemmOps& ops = kernels.ops();
  float* kv = detail::attention_scratch(4, static_cast<std::size_t>(n * C));
  float* pe = detail::attention_scratch(5, static_cast<std::size_t>(n * rope));
  float* ql = detail::attention_scratch(6, static_cast<std::size_t>(H * (C + rope)));
  float* qp = ql + H * C;
  float* scores = detail::attention_scratch(7, static_cast<std::size_t>(H * n));
  parallel_for(n, C + rope, [&](std::int64_t j) {
    ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(kv_cache + static_cast<std::int64_t>(selected[j]) * C), C,
                   kv + j * C);
    ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(pe_cache + static_cast<std::int64_t>(selected[j]) * rope),
                   rope, pe + j * rope);
  });
  ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(q_lat), H * C, ql);
  for (std::int64_t h = 0; h < H; ++h)
    ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(q_pe + h * q_pe_stride), rope, qp + h * rope);
  // The selected keys packed once into the micro-kernels' panels, shared by every head group
  float* kv_panels = detail::attention_scratch(8, static_cast<std::size_t>(packed_rows_floats(n, C, kernels)));
  float* pe_panels = detail::attention_scratch(9, static_cast<std::size_t>(packed_rows_floats(n, rope, kernels)));
  const PackedRows kv_rows = pack_rows(kv, n, C, kv_panels, kernels);
  const PackedRows pe_rows = pack_rows(pe, n, rope, pe_panels, kernels);
  const std::int64_t group = std::max<std::int64_t>(1, H / (4 * num_threads()));
  parallel_for((H + group - 1) / group, group * n * (2 * C + rope), [&](std::int64_t g) {
    const std::int64_t h0 = g * group, hn = std::min(group, H - h0);
    float* sc = scores + h0 * n;
    float* pe_part = detail::attention_scratch(0, static_cast<std::size_t>(hn * n));
    float* o = detail::attention_scratch(1, static_cast<std::size_t>(hn * C));
    float* tile = detail::attention_scratch(2, static_cast<std::size_t>(hn * kv_rows.nr));
    matmul_exact_packed(hn, ql + h0 * C, C, kv_rows, sc, n, tile, kernels);
    matmul_exact_packed(hn, qp + h0 * rope, rope, pe_rows, pe_part, n, tile, kernels);
    for (std::int64_t h = 0; h < hn; ++h) {
      float* p = sc + h * n;
      for (std::int64_t j = 0; j < n; ++j) {
        p[j] += pe_part[h * n + j];
        p[j] *= scale;
      }
      detail::softmax_to_bf16(p, n);
    }
    matmul_exact(hn, C, n, sc, n, kv, C, false, o, C, kernels);
    for (std::int64_t i = 0; i < hn * C; ++i) out[h0 * C + i] = bf16(o[i]);
  });
}

}  // namespace dsv32::cpu

namespace dsv32::cpu {

/// \brief The lightning indexer's selection for one sequence: index scores of its S queries against
///        its cached keys, then the top min(k, visible) positions of each query.
///
/// Query s sits at position start_pos + s and sees the keys [0, start_pos + s] (causal).
/// \param q_codes  [S, H, D] E4M3 codes of the queries
/// \param q_weight [S, H] f32 head weights (see index_scores())
/// \param q_scale  [S, H, D / 128] f32 query scales
/// \param S        queries of this call
/// \param H        indexer heads
/// \param D        indexer head dim, a multiple of 128
/// \param k_codes  [start_pos + S, D] E4M3 key cache of this sequence, this call's keys included
/// \param k_scale  [start_pos + S, D / 128] f32 key scales
/// \param start_pos position of the first query
/// \param k        positions per query (index_topk); the row stride of `selected`
/// \param selected [S, k] positions, highest score first; count[s] of them valid
/// \param count    [S] how many positions each query selected: min(k, start_pos + s + 1)
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void indexer_topk(const std::uint8_t* q_codes, const float* q_weight, const float* q_scale, std::int64_t S,
                         std::int64_t H, std::int64_t D, const std::uint8_t* k_codes, const float* k_scale,
                         std::int64_t start_pos, std::int64_t k, std::int32_t* selected, std::int32_t* count,
                         const CpuKernels& kernels = default_kernels()) {
  const std::int64_t T = start_pos + S;
  std::vector<std::int64_t> visible(static_cast<std::size_t>(S));
  for (std::int64_t s = 0; s < S; ++s) visible[s] = start_pos + s + 1;
  std::vector<float> scores(static_cast<std::size_t>(S * T));
  index_scores(q_codes, q_weight, q_scale, S, H, D, k_codes, k_scale, T, visible.data(), scores.data(), kernels);
  for (std::int64_t s = 0; s < S; ++s)
    count[s] = static_cast<std::int32_t>(top_k(scores.data() + s * T, visible[s], k, selected + s * k));
}

namespace detail {
/// The cache row of position `p` of a sequence whose block-table row is `table`.
inline std::int64_t paged_row(const std::int32_t* table, std::int64_t page_size, std::int64_t p) noexcept {
  return static_cast<std::int64_t>(table[p / page_size]) * page_size + p % page_size;
}
/// Whether positions [0, n) of a sequence lie in consecutive pages (table[i] = table[0] + i), so that its
/// cache rows are rows [table[0] page_size, table[0] page_size + n) of the pool: read in place.
inline bool pages_consecutive(const std::int32_t* table, std::int64_t page_size, std::int64_t n) noexcept {
  for (std::int64_t i = 1; i < (n + page_size - 1) / page_size; ++i)
    if (table[i] != table[0] + i) return false;
  return true;
}
}  // namespace detail

/// \brief indexer_topk() for the queries of a ragged pass over a paged key cache.
///
/// Consecutive queries of one sequence at consecutive positions are scored together (one
/// indexer_topk() call each); a query's picks do not depend on the other queries of the pass. A
/// sequence whose pages are consecutive is read in place; otherwise its keys [0, end) are gathered first.
/// \param q_codes  [T, H, D] E4M3 codes \param q_weight [T, H] f32 head weights (see index_scores())
/// \param q_scale  [T, H, D / 128] f32 \param T queries \param H indexer heads \param D head dim
/// \param k_codes  [pool rows, D] E4M3 key cache \param k_scale [pool rows, D / 128] f32
/// \param pages    each query's sequence, position and block table
/// \param k        positions per query (index_topk): the row stride of `selected`
/// \param selected [T, k] positions, highest score first \param count [T] min(k, position + 1)
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void indexer_topk(const std::uint8_t* q_codes, const float* q_weight, const float* q_scale, std::int64_t T,
                         std::int64_t H, std::int64_t D, const std::uint8_t* k_codes, const float* k_scale,
                         const CachePages<Host>& pages, std::int64_t k, std::int32_t* selected, std::int32_t* count,
                         const CpuKernels& kernels = default_kernels()) {
  const std::int64_t blocks = D / kBlockSize, P = pages.page_size;
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  for (std::int64_t r0 = 0, r1 = 0; r0 < T; r0 = r1) {
    const std::int32_t b = pages.sequence.data[r0];
    const std::int64_t start = pages.position.data[r0];
    for (r1 = r0 + 1; r1 < T && pages.sequence.data[r1] == b && pages.position.data[r1] == start + (r1 - r0); ++r1) {}
    const std::int64_t S = r1 - r0, end = start + S;
    const std::int32_t* table = pages.block_table.row(b);
    const std::uint8_t* kc = k_codes + static_cast<std::int64_t>(table[0]) * P * D;
    const float* ks = k_scale + static_cast<std::int64_t>(table[0]) * P * blocks;
    if (!detail::pages_consecutive(table, P, end)) {
      codes.resize(static_cast<std::size_t>(end * D));
      scales.resize(static_cast<std::size_t>(end * blocks));
      for (std::int64_t p = 0; p < end; ++p) {
        const std::int64_t row = detail::paged_row(table, P, p);
        std::copy_n(k_codes + row * D, D, codes.data() + p * D);
        std::copy_n(k_scale + row * blocks, blocks, scales.data() + p * blocks);
      }
      kc = codes.data(), ks = scales.data();
    }
    indexer_topk(q_codes + r0 * H * D, q_weight + r0 * H, q_scale + r0 * H * blocks, S, H, D, kc, ks, start, k,
                 selected + r0 * k, count + r0, kernels);
  }
}

/// \brief latent_attention() for every query of a ragged pass over the paged latent caches: query i
///        attends to the selected positions of its own sequence (pages.sequence[i]).
/// \param q_lat    [T, H, C] bf16 \param q_pe [T H rows, rope] bf16, rows q_pe_stride apart
/// \param q_pe_stride elements between q_pe's rows
/// \param kv_cache [pool rows, C] bf16 \param pe_cache [pool rows, rope] bf16
/// \param pages    each query's sequence and the block table \param H heads \param C kv_lora_rank
/// \param rope     qk_rope_head_dim \param selected [T, sel_stride] positions
/// \param sel_stride elements between selected's rows \param count [T]
/// \param scale    softmax scale \param out [T, H, C] bf16
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void latent_attention(const bf16* q_lat, const bf16* q_pe, std::int64_t q_pe_stride, const bf16* kv_cache,
                             const bf16* pe_cache, const CachePages<Host>& pages, std::int64_t H, std::int64_t C,
                             std::int64_t rope, const std::int32_t* selected, std::int64_t sel_stride,
                             const std::int32_t* count, float scale, bf16* out,
                             const CpuKernels& kernels = default_kernels()) {
  std::vector<std::int32_t> rows;
  for (std::int64_t i = 0; i < pages.sequence.size; ++i) {
    const std::int32_t* table = pages.block_table.row(pages.sequence.data[i]);
    const std::int64_t n = count[i];
    rows.resize(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j)
      rows[j] = static_cast<std::int32_t>(detail::paged_row(table, pages.page_size, selected[i * sel_stride + j]));
    latent_attention(q_lat + i * H * C, q_pe + i * H * q_pe_stride, q_pe_stride, kv_cache, pe_cache, H, C, rope,
                     rows.data(), n, scale, out + i * H * C, kernels);
  }
}

namespace detail {

/// The block scales of an FP8 weight's rows [r0, r0 + n) when the absorbed decode may read those
/// rows' codes as stored (GemmOps::e4m3_scaled_cols, e4m3_scaled_rows): the rows lie in one 128-row
/// block whose every scale is exact (simd::e4m3_scale_exact: a power of two, as ue8m0 scales are),
/// so that value(code) * scale is the reference's dequantized weight, exact in bf16. Else null.
inline const float* exact_row_scales(const WeightView<>& w, std::int64_t r0, std::int64_t n) {
  if (w.dtype != DType::F8_E4M3 || n < 1 || r0 / kBlockSize != (r0 + n - 1) / kBlockSize) return nullptr;
  const std::int64_t sc = w.scale_cols();
  const float* s = w.scale + (r0 / kBlockSize) * sc;
  for (std::int64_t j = 0; j < sc; ++j)
    if (!simd::e4m3_scale_exact(s[j])) return nullptr;
  return s;
}

}  // namespace detail

/// \brief Projects q_nope into the latent space through wkv_b's key rows (the absorbed decode form):
///        q_lat[t, h] = bf16(sum_d q_nope[t, h, d] * W[h (nope + v) + d, :]), f32 sums in increasing d.
/// \param q      [T, H, nope + rope] bf16 (q_nope is the first `nope` of each head)
/// \param T      tokens
/// \param H      attention heads (this rank's)
/// \param nope   qk_nope_head_dim
/// \param rope   qk_rope_head_dim (only to step over q_pe)
/// \param v      v_head_dim (only to step over wkv_b's value rows)
/// \param wkv_b  [H (nope + v), C] (FP8 weights dequantized as the reference does, once per use; at up
///               to 8 tokens (4 on AVX2: plan_latent()), where a head's rows share exact block
///               scales, their codes are read as stored instead: the same products,
///               GemmOps::e4m3_scaled_cols)
/// \param q_lat  [T, H, C] bf16
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void absorb_query(const bf16* q, std::int64_t T, std::int64_t H, std::int64_t nope, std::int64_t rope,
                         std::int64_t v, const WeightView<>& wkv_b, bf16* q_lat,
                         const CpuKernels& kernels = default_kernels()) {
  detail::check_weight_dtype(wkv_b, "absorb_query");
  const std::int64_t C = wkv_b.in, runs = std::min<std::int64_t>(H, num_threads());
  const auto* codes = static_cast<const std::uint8_t*>(wkv_b.data);
  const bool direct = plan_latent(kernels.features, false, T, C) == LatentPath::scaled_codes;
  // a contiguous run of heads per thread, so that each head's kernel can ask for the next one's rows
  const simd::GemmOps& ops = kernels.ops();
  parallel_for(runs, (T + 1) * nope * C * ((H + runs - 1) / runs), [&](std::int64_t run) {
    float* qn = detail::attention_scratch(1, static_cast<std::size_t>(T * nope));
    float* o = detail::attention_scratch(2, static_cast<std::size_t>(T * C));
    const std::int64_t h1 = (run + 1) * H / runs;
    for (std::int64_t h = run * H / runs; h < h1; ++h) {
      const std::int64_t r0 = h * (nope + v);
      const float* ws = direct ? detail::exact_row_scales(wkv_b, r0, nope) : nullptr;
      if (ws) {
        detail::side_by_side(
            T, nope,
            [&](std::int64_t t, std::int64_t d) { return static_cast<float>(q[(t * H + h) * (nope + rope) + d]); }, qn);
        ops.e4m3_scaled_cols(static_cast<int>(T), nope, C, qn, codes + r0 * C, C, ws, o, C,
                             h + 1 < h1 ? codes + (r0 + nope + v) * C : nullptr);
      } else {
        float* w = detail::attention_scratch(0, static_cast<std::size_t>(nope * C));
        weight_rows_f32(wkv_b, r0, nope, w, kernels);
        for (std::int64_t t = 0; t < T; ++t)
          ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(q + (t * H + h) * (nope + rope)), nope, qn + t * nope);
        matmul_exact(T, C, nope, qn, nope, w, C, false, o, C, kernels);
      }
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t c = 0; c < C; ++c) q_lat[(t * H + h) * C + c] = bf16(o[t * C + c]);
    }
  });
}

/// \brief Maps latent attention outputs to values through wkv_b's value rows:
///        out[t, h] = bf16(sum_c o_lat[t, h, c] * W[h (nope + v) + nope + d, c]), f32 sums in increasing c.
/// \param o_lat [T, H, C] bf16
/// \param T     tokens
/// \param H     attention heads (this rank's)
/// \param nope  qk_nope_head_dim (only to step over wkv_b's key rows)
/// \param v     v_head_dim
/// \param wkv_b [H (nope + v), C] (FP8 weights dequantized as the reference does, once per use; at up
///              to 8 tokens, where a head's rows share exact block scales and C is a multiple of 128,
///              their codes are read as stored instead: the same products, GemmOps::e4m3_scaled_rows)
/// \param out   [T, H, v] bf16
/// \param kernels  the kernels to run on (Kernels<Cpu> passes the model context's)
inline void project_values(const bf16* o_lat, std::int64_t T, std::int64_t H, std::int64_t nope, std::int64_t v,
                           const WeightView<>& wkv_b, bf16* out, const CpuKernels& kernels = default_kernels()) {
  detail::check_weight_dtype(wkv_b, "project_values");
  const std::int64_t C = wkv_b.in, runs = std::min<std::int64_t>(H, num_threads());
  const auto* codes = static_cast<const std::uint8_t*>(wkv_b.data);
  const bool direct = plan_latent(kernels.features, true, T, C) == LatentPath::scaled_codes;
  // a contiguous run of heads per thread, so that each group of rows can ask for the next one
  const simd::GemmOps& ops = kernels.ops();
  parallel_for(runs, (T + 1) * v * C * ((H + runs - 1) / runs), [&](std::int64_t run) {
    float* o = detail::attention_scratch(1, static_cast<std::size_t>(T * C));
    float* y = detail::attention_scratch(2, static_cast<std::size_t>(T * v));
    const std::int64_t h1 = (run + 1) * H / runs;
    for (std::int64_t h = run * H / runs; h < h1; ++h) {
      const std::int64_t r0 = h * (nope + v) + nope;
      const float* ws = direct ? detail::exact_row_scales(wkv_b, r0, v) : nullptr;
      if (ws) {
        detail::side_by_side(
            T, C, [&](std::int64_t t, std::int64_t c) { return static_cast<float>(o_lat[(t * H + h) * C + c]); }, o);
        for (std::int64_t r = 0; r < v; r += 16) {
          const std::uint8_t* next = r + 16 < v ? codes + (r0 + r + 16) * C
                                     : h + 1 < h1 ? codes + (r0 + nope + v) * C
                                                  : nullptr;
          ops.e4m3_scaled_rows(static_cast<int>(T), static_cast<int>(std::min<std::int64_t>(16, v - r)), C, o,
                               codes + (r0 + r) * C, C, ws, y + r, v, next);
        }
      } else {
        float* w = detail::attention_scratch(0, static_cast<std::size_t>(v * C));
        weight_rows_f32(wkv_b, r0, v, w, kernels);
        for (std::int64_t t = 0; t < T; ++t)
          ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(o_lat + (t * H + h) * C), C, o + t * C);
        matmul_exact(T, v, C, o, C, w, C, true, y, v, kernels);
      }
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t d = 0; d < v; ++d) out[(t * H + h) * v + d] = bf16(y[t * v + d]);
    }
  });
}

}  // namespace dsv32::cpu
