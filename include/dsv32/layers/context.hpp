/// \file
/// \brief What one forward call passes down the layers, and the observer that can watch it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/core/tensor.hpp"
#include "dsv32/layers/kv_cache.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Watches a forward call's intermediates, as host copies valid only during the callback.
///
/// Every hook has an empty default; the golden replay (<dsv32/testing/golden.hpp>) uses them to
/// compare layer by layer. The views are host views on every backend: where the backend's memory is
/// not host memory, the model copies each intermediate to the host for the hook — only when an
/// observer is attached, so a forward call without one reads nothing back but its result.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  /// \brief Embedding output. \param h [batch * seq, dim]
  virtual void on_embedding(MatrixView<const bf16> h) { (void)h; }
  /// \brief The indexer's picks for query `s` of sequence `b` in layer `layer`, highest score first
  ///        (only causally visible positions).
  virtual void on_indexer_topk(int layer, std::int64_t b, std::int64_t s, std::span<const std::int32_t> positions) {
    (void)layer, (void)b, (void)s, (void)positions;
  }
  /// \brief Attention output of a layer (after wo and its reduction).
  /// \param layer block index \param out [batch * seq, dim]
  virtual void on_attention(int layer, MatrixView<const bf16> out) { (void)layer, (void)out; }
  /// \brief The MoE gate's routing (MoE layers only).
  /// \param layer block index \param weights [batch * seq, k] f32 \param experts [batch * seq, k] ids
  virtual void on_gate(int layer, MatrixView<const float> weights, MatrixView<const std::int32_t> experts) {
    (void)layer, (void)weights, (void)experts;
  }
  /// \brief A block's outputs: the FFN output and the residual stream.
  /// \param layer block index \param x, residual [batch * seq, dim]
  virtual void on_block(int layer, MatrixView<const bf16> x, MatrixView<const bf16> residual) {
    (void)layer, (void)x, (void)residual;
  }
};

/// \brief The most a forward pass computes at once, which sizes every scratch buffer.
struct ForwardLimits {
  std::int64_t batch = 1;      ///< sequences per pass (max_batch_size; the engine's running requests)
  std::int64_t seq = 1;        ///< tokens per sequence per pass (max_tokens_per_call)
  std::int64_t positions = 1;  ///< positions per sequence (max_seq_len)
  int world_size = 1;          ///< model-parallel ranks (local head and hidden counts)
  std::int64_t absorbed_from = 0;  ///< RuntimeOptions::absorbed_prefill_from
  std::int64_t max_tokens = 0;     ///< tokens per pass, all sequences together (0: batch * seq)
  std::int64_t page_size = 0;      ///< cache positions per page (0: positions, one page per sequence)

  /// \brief Rows of a pass's activations: max_tokens, or batch * seq.
  constexpr std::int64_t tokens() const {
    const std::int64_t all = elements(batch, seq);
    return max_tokens > 0 && max_tokens < all ? max_tokens : all;
  }
  /// \brief Block-table columns: pages of one sequence.
  constexpr std::int64_t pages_per_sequence() const {
    const std::int64_t p = page_size > 0 ? page_size : positions;
    return (positions + p - 1) / p;
  }
  /// \brief The limits of a model with these options on `world` ranks.
  static ForwardLimits of(const RuntimeOptions& o, int world = 1) {
    return ForwardLimits{o.max_batch_size, o.tokens_per_call(), o.max_seq_len, world, o.absorbed_prefill_from, 0, 0};
  }
  /// \brief The largest of two limits, field by field (scratch that serves both).
  static ForwardLimits max(const ForwardLimits& a, const ForwardLimits& b) {
    ForwardLimits m = a;
    m.batch = std::max(a.batch, b.batch);
    m.seq = std::max(a.seq, b.seq);
    m.positions = std::max(a.positions, b.positions);
    m.max_tokens = std::max(a.tokens(), b.tokens());
    m.page_size = std::min(a.page_size > 0 ? a.page_size : a.positions, b.page_size > 0 ? b.page_size : b.positions);
    return m;
  }
};

/// \brief One sequence's part of a pass, as the layers see it (host side).
struct PassSequence {
  std::int64_t row = 0;        ///< its first row in the pass's activations
  std::int64_t tokens = 0;     ///< its rows: tokens at positions [start_pos, start_pos + tokens)
  std::int64_t start_pos = 0;  ///< position of its first token
  /// Its first rows that attend through keys and values expanded by wkv_b (the reference's prefill
  /// arithmetic: positions below SequenceSlice::expanded_end); the others attend in the latent space
  /// (its decode arithmetic).
  std::int64_t expanded = 0;
  /// Its first page when its pages [0, end) are consecutive in the pool (its cache rows are then
  /// rows [first_page * page_size, ...) of the pool, read in place), else -1.
  std::int64_t first_page = -1;
  std::int64_t gather = 0;     ///< expanded and not consecutive: its cache rows at gather rows [gather, gather + expanded_end_pos())

  /// \brief One past its last position.
  std::int64_t end_pos() const noexcept { return start_pos + tokens; }
  /// \brief One past its last expanded position (the keys the expanded rows see).
  std::int64_t expanded_end_pos() const noexcept { return start_pos + expanded; }
};

/// \brief The state of one forward pass shared by all layers: the ragged layout of its sequences,
///        where their caches are, and the model's rank, communicator and context.
/// \tparam Backend backend tag
template <class Backend>
struct ForwardContext {
  using space = space_of<Backend>;  ///< the memory space of the call's activations

  std::span<const PassSequence> sequences;  ///< the pass's sequences, rows in order, packed without padding
  std::int64_t rows = 0;                    ///< activations rows: every sequence's tokens
  KvCache<Backend>* cache = nullptr;        ///< the caches the pass reads and writes
  CachePages<space> pages;                  ///< every row's sequence and position, the block table
  VectorView<const std::int32_t, space> slots;   ///< [rows] the cache row each token is written to
  VectorView<const std::int32_t, space> gather;  ///< cache rows of the expanded sequences that are not consecutive
  int layer = 0;               ///< index of the block running
  Parallel parallel;           ///< the model's rank
  Communicator<Backend>* comm = nullptr;    ///< the model's communicator (null with one rank)
  ForwardObserver* observer = nullptr;      ///< not owned; null when nobody watches
  ExecutionContext<Backend>* exec = nullptr;  ///< the model's execution context, for every kernel call
  Tensor<float, Backend>* reduce = nullptr;   ///< f32 scratch of row-parallel reductions ([tokens, dim] reserved)

  /// \brief Rows of the pass's activations.
  std::int64_t tokens() const noexcept { return rows; }
  /// \brief Sequences in the pass.
  std::int64_t batch() const noexcept { return static_cast<std::int64_t>(sequences.size()); }
  /// \brief Layer `layer`'s caches.
  LayerCache<Backend>& layer_cache() const noexcept { return cache->layer(layer); }

  /// \brief Sum over ranks in place; free with one rank.
  template <class T>
  void all_reduce_sum(VectorView<T, space> data) const {
    if (parallel.world_size > 1) comm->all_reduce_sum(*exec, data);
  }
};

/// \brief Calls `f(host_view)` with a host view of backend matrix `m`: the matrix itself on a
///        host-visible backend, otherwise a host copy (made here, synchronizing `ctx`'s stream).
///        For observers only: forward() calls it only when an observer is attached.
/// \tparam Backend backend tag
template <class Backend, class T, class F>
void with_host_view(const ForwardContext<Backend>& ctx, MatrixView<T, space_of<Backend>> m, F&& f) {
  using E = std::remove_const_t<T>;
  if constexpr (Memory<Backend>::host_visible) {
    f(MatrixView<const E>(m.data, m.rows, m.cols, m.stride));
  } else {
    std::vector<E> host(static_cast<std::size_t>(m.rows * m.cols));
    Memory<Backend>::copy_rows_to_host_async(*ctx.exec, host.data(), static_cast<std::size_t>(m.cols) * sizeof(E),
                                             m.data, static_cast<std::size_t>(m.stride) * sizeof(E),
                                             static_cast<std::size_t>(m.rows), static_cast<std::size_t>(m.cols) * sizeof(E));
    Memory<Backend>::synchronize(*ctx.exec);
    f(MatrixView<const E>(host.data(), m.rows, m.cols, m.cols));
  }
}

/// @}

}  // namespace dsv32
