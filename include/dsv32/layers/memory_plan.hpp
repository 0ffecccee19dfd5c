/// \file
/// \brief The memory plan: what a model holds on one rank (weights by dtype, caches, RoPE tables,
///        forward scratch), read off the tensor table and the scratch reservations without allocating
///        any of it (plan_memory(), MemoryPlan), and the forward scratch itself (ForwardScratch).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/config/tensor_table.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/tensor.hpp"
#include "dsv32/layers/block.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/kv_cache.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Memory a model needs on this rank, computed without allocating it.
struct MemoryPlan {
  std::map<DType, std::size_t> weight_bytes;  ///< by in-memory dtype
  std::size_t weights = 0;                    ///< all parameters (FP8 scales included)
  std::int64_t parameters = 0;                ///< parameter elements on this rank (scales excluded)
  std::int64_t tensors = 0;                   ///< parameter tensors on this rank (scales included)
  std::size_t cache_bytes_per_token = 0;      ///< all layers, one sequence, one position
  std::size_t caches = 0;                     ///< max_batch_size x max_seq_len x the above
  std::size_t rope_tables = 0;                ///< the cos/sin tables
  std::size_t scratch = 0;                    ///< forward temporaries, reserved once for the runtime limits
  /// The serving engine's page pool for a cache budget (plan_memory()'s `cache_budget`; empty without
  /// one). Not part of total(): an engine frees `caches` and allocates this instead.
  PagePoolPlan pool;

  /// \brief weights + caches + rope_tables + scratch: the backend memory of a loaded model.
  std::size_t total() const noexcept { return weights + caches + rope_tables + scratch; }
};

/// \brief Everything one forward pass writes besides the caches, reserved once when the weights are
///        loaded (so that a decode step allocates nothing) and counted by the memory plan.
template <class Backend>
struct ForwardScratch {
  Tensor<bf16, Backend> h;                  ///< [T, dim] the hidden state
  Tensor<bf16, Backend> residual;           ///< [T, dim] the residual stream
  Tensor<std::int32_t, Backend> meta;      ///< the pass's integers: tokens, positions, sequences, slots, rows, block table
  PinnedBuffer<std::int32_t, Backend> host_meta;  ///< their host staging (one upload per pass)
  Tensor<bf16, Backend> head_in;            ///< [rows, dim] the final hidden rows the head reads, gathered
  Tensor<float, Backend> logits;            ///< [rows, vocab / world] this rank's logits
  Tensor<float, Backend> gathered;          ///< [world, rows, vocab / world] every rank's logits (world > 1)
  Tensor<float, Backend> reduce;            ///< [T, dim] f32 row-parallel reductions (world > 1)
  BlockScratch<Backend> blocks;             ///< the blocks' temporaries

  /// \brief Calls `r(buffer, elements)` with each buffer's largest size under `l`. Logits are reserved
  ///        for one position per sequence: a call asking for every position's logits grows them.
  template <class R>
  void reserve(R&& r, const ModelArgs& a, const ForwardLimits& l) {
    const std::int64_t T = l.tokens(), local_vocab = a.vocab_size / l.world_size;
    r(h, elements(T, a.dim));
    r(residual, elements(T, a.dim));
    r(meta, meta_elements(l));
    r(host_meta, meta_elements(l));
    r(head_in, elements(std::min(T, l.batch), a.dim));
    r(logits, elements(l.batch, local_vocab));
    r(gathered, l.world_size > 1 ? elements(l.batch, a.vocab_size) : 0);
    r(reduce, l.world_size > 1 ? elements(T, a.dim) : 0);
    blocks.reserve(r, a, l);
  }

  /// \brief Integers of a pass's metadata at the limits `l`: tokens, positions, sequences and cache
  ///        slots per row, logit rows, the expanded sequences' gathered cache rows, the block table.
  static std::int64_t meta_elements(const ForwardLimits& l) {
    const std::int64_t T = l.tokens(), expanded = l.seq > 1 ? std::min(l.positions, l.absorbed_from) : 0;
    return elements(4, T) + l.batch + elements(l.batch, expanded) + elements(l.batch, l.pages_per_sequence());
  }
};

/// \brief The memory plan of rank `rank` of a `world`-rank model with fields `a` and runtime limits
///        `o`, read off the tensor table and the scratch reservations: what a loaded Transformer holds,
///        computed without allocating any of it; with a `cache_budget`, also the serving engine's page
///        pool of that many bytes (pages of `page_size` positions).
/// \tparam Backend whose forward scratch is counted (default Cpu; a backend that runs grouped experts,
///                 runs_grouped_experts, reserves their worst-case buffers instead of the per-expert ones)
/// \throws Error(invalid_argument) when `world` does not divide a split dimension (named)
template <class Backend = Cpu>
MemoryPlan plan_memory(const ModelArgs& a, const RuntimeOptions& o, int world = 1, int rank = 0,
                       std::size_t cache_budget = 0, std::int64_t page_size = kDefaultPageSize) {
  MemoryPlan m;
  if (cache_budget > 0) m.pool = plan_page_pool(a, cache_budget, page_size);
  for_each_tensor(a, [&](const TensorSpec& t) {
    const std::size_t bytes = static_cast<std::size_t>(elements(t.local_numel(), dtype_size(t.dtype), t.count));
    m.weight_bytes[t.dtype] += bytes;
    m.weights += bytes;
    m.tensors += t.count;
    if (t.counts_as_parameter()) m.parameters += t.local_numel() * t.count;
  }, TableMode::patterns, world, rank);
  m.cache_bytes_per_token = static_cast<std::size_t>(a.n_layers) * mla_cache_bytes_per_token(a);
  m.caches = static_cast<std::size_t>(elements(m.cache_bytes_per_token, o.max_batch_size, o.max_seq_len));
  m.rope_tables = static_cast<std::size_t>(elements(o.max_seq_len, a.qk_rope_head_dim, sizeof(float)));
  ForwardScratch<Backend> scratch;  // nothing is allocated: the reservation is only counted
  scratch.reserve([&]<class Buffer>(Buffer&, std::int64_t n) {
    if constexpr (requires(Buffer& b) { b.mat(); })  // backend tensors, not pinned host buffers
      m.scratch += static_cast<std::size_t>(elements(n, sizeof(*std::declval<Buffer&>().data())));
  }, a, ForwardLimits::of(o, world));
  return m;
}

/// @}

}  // namespace dsv32
