/// \file
/// \brief What one forward call passes down the layers, and the observer that can watch it.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/core/tensor.hpp"

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

/// \brief The state of one forward call shared by all layers.
/// \tparam Backend backend tag
template <class Backend>
struct ForwardContext {
  using space = space_of<Backend>;  ///< the memory space of the call's activations

  std::int64_t batch = 1;      ///< sequences in the call
  std::int64_t seq = 1;        ///< tokens per sequence in the call
  std::int64_t start_pos = 0;  ///< position of the call's first token
  int layer = 0;               ///< index of the block running
  Parallel parallel;           ///< the model's rank
  Communicator<Backend>* comm = nullptr;    ///< the model's communicator (null with one rank)
  ForwardObserver* observer = nullptr;      ///< not owned; null when nobody watches
  ExecutionContext<Backend>* exec = nullptr;  ///< the model's execution context, for every kernel call
  Tensor<float, Backend>* reduce = nullptr;   ///< f32 scratch of row-parallel reductions ([tokens, dim] reserved)

  /// \brief Rows of the call's activations: batch * seq.
  std::int64_t tokens() const noexcept { return batch * seq; }
  /// \brief One past the last position of the call: start_pos + seq.
  std::int64_t end_pos() const noexcept { return start_pos + seq; }
  /// The reference takes its prefill path (keys and values from wkv_b) for calls of more than one token.
  bool prefill() const noexcept { return seq > 1; }

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
