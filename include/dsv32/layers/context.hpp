/// \file
/// \brief What one forward call passes down the layers, and the observer that can watch it.
#pragma once

#include <cstdint>
#include <span>

#include "dsv32/core/numeric.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Watches a forward call's intermediates (host memory, valid only during the callback).
///
/// Every hook has an empty default; the golden replay (<dsv32/testing/golden.hpp>) uses them to
/// compare layer by layer. With no observer set nothing is copied.
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
struct ForwardContext {
  std::int64_t batch = 1;      ///< sequences in the call
  std::int64_t seq = 1;        ///< tokens per sequence in the call
  std::int64_t start_pos = 0;  ///< position of the call's first token
  int layer = 0;               ///< index of the block running
  Parallel parallel;           ///< the model's rank and communicator, for the layers' reductions
  ForwardObserver* observer = nullptr;  ///< not owned; null when nobody watches

  /// \brief Rows of the call's activations: batch * seq.
  std::int64_t tokens() const noexcept { return batch * seq; }
  /// \brief One past the last position of the call: start_pos + seq.
  std::int64_t end_pos() const noexcept { return start_pos + seq; }
  /// The reference takes its prefill path (keys and values from wkv_b) for calls of more than one token.
  bool prefill() const noexcept { return seq > 1; }
};

/// @}

}  // namespace dsv32
