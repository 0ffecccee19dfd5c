/// \file
/// \brief The lightning indexer: picks, for every query, the index_topk cached positions MLA attends to.
#pragma once

#include <cmath>
#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/rope.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief The indexer's selection of one forward call: per query, positions highest score first.
template <class Backend>
struct IndexerSelection {
  Tensor<std::int32_t, Backend> positions;  ///< [batch * seq, index_topk]
  Tensor<std::int32_t, Backend> count;      ///< [batch * seq] positions used by each query
};

/// \brief The indexer's per-call temporaries (shared by all layers), and its selection.
template <class Backend>
struct IndexerScratch {
  Tensor<bf16, Backend> q;                ///< [T, H * D] queries, rotated and Hadamard-transformed
  Tensor<bf16, Backend> k;                ///< [T, D] this call's keys, normalized, rotated, transformed
  Tensor<bf16, Backend> w;                ///< [T, H] weights_proj(x)
  Tensor<std::uint8_t, Backend> q_codes;  ///< [T * H, D] E4M3 codes of q
  Tensor<float, Backend> q_scale;         ///< [T * H, D / 128] f32 scales of q
  Tensor<std::uint8_t, Backend> k_codes;  ///< [T, D] E4M3 codes of this pass's keys, before they go to the cache
  Tensor<float, Backend> k_scale;         ///< [T, D / 128] their f32 scales
  IndexerSelection<Backend> selection;    ///< the picks of the layer running

  /// \brief Calls `r(tensor, elements)` with each buffer's largest size under `l`.
  template <class R>
  void reserve(R&& r, const ModelArgs& a, const ForwardLimits& l) {
    const std::int64_t T = l.tokens(), H = a.index_n_heads, D = a.index_head_dim;
    r(q, elements(T, H, D));
    r(k, elements(T, D));
    r(w, elements(T, H));
    r(q_codes, elements(T, H, D));
    r(q_scale, elements(T, H, D / kBlockSize));
    r(k_codes, elements(T, D));
    r(k_scale, elements(T, D / kBlockSize));
    r(selection.positions, elements(T, a.index_topk));
    r(selection.count, T);
  }
};

/// \brief The lightning indexer of one layer (replicated on every rank, as in the reference).
///
/// q = wq_b(q latent), k = LayerNorm(wk(x)); RoPE on the first qk_rope_head_dim dims of each
/// (rope first, then nope); Hadamard transform; FP8 quantization per 128 (k goes to the FP8 k cache
/// with its scales); score[t] = sum_h relu(q_h . k_t) * w_h * q_scale_h * d^-0.5 * k_scale_t with
/// w = bf16(weights_proj(x) * n_heads^-0.5); top min(index_topk, visible) positions.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class Indexer {
  static constexpr std::int64_t H = Config::index_n_heads, D = Config::index_head_dim, R = Config::qk_rope_head_dim;
  static constexpr std::int64_t kBlocks = D / kBlockSize;

 public:
  using space = space_of<Backend>;  ///< the memory space of activations and caches

  /// \brief Binds `<module>.wq_b`, `.wk`, `.k_norm`, `.weights_proj` from the model's parameters.
  /// \param store the model's parameters \param module e.g. `layers.0.attn.indexer`
  Indexer(ParameterStore<Backend>& store, const std::string& module)
      : wq_b_(store, module + ".wq_b", Config::scale_fmt),
        wk_(store, module + ".wk", Config::scale_fmt),
        k_norm_(store, module + ".k_norm"),
        weights_proj_(store, module + ".weights_proj") {}

  /// \brief Selects the positions every query of the pass attends to, writing the pass's keys into
  ///        the layer's cache first (ctx.layer_cache(), at ctx.slots).
  /// \param ctx  the pass
  /// \param x    [T, dim] the block's normalized input
  /// \param qr   [T, q_lora_rank] MLA's normalized q latent
  /// \param rope the model's RoPE table
  /// \param s    scratch shared by all layers; s.selection receives the picks, [T, index_topk]
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<const bf16, space> qr,
               const RopeTable<Backend>& rope, IndexerScratch<Backend>& s) {
    using K = Kernels<Backend>;
    auto& exec = *ctx.exec;
    const std::int64_t T = ctx.tokens();
    const VectorView<const std::int32_t, space> positions = ctx.pages.position;
    s.q.resize(Shape{T, H * D});  // [T, H, D]
    s.k.resize(Shape{T, D});
    s.w.resize(Shape{T, H});
    wq_b_.forward(ctx, qr, s.q.mat());
    const MatrixView<bf16, space> q_heads(s.q.data(), T * H, D, D);  // [T * H, D]
    K::rope(exec, q_heads.middle_cols(0, R), H, positions, rope.cos(), rope.sin(), Config::indexer_rope_interleaved);
    K::hadamard(exec, q_heads);
    wk_.forward(ctx, x, s.k.mat());
    k_norm_.forward(ctx, s.k.mat(), s.k.mat());
    K::rope(exec, s.k.mat().middle_cols(0, R), 1, positions, rope.cos(), rope.sin(), Config::indexer_rope_interleaved);
    K::hadamard(exec, s.k.mat());

    s.q_codes.resize(Shape{T * H, D});
    s.q_scale.resize(Shape{T * H, kBlocks});
    K::act_quant(exec, q_heads, Config::scale_fmt, s.q_codes.mat(), s.q_scale.mat());
    s.k_codes.resize(Shape{T, D});  // this pass's keys into the FP8 cache
    s.k_scale.resize(Shape{T, kBlocks});
    K::act_quant(exec, s.k.mat(), Config::scale_fmt, s.k_codes.mat(), s.k_scale.mat());
    LayerCache<Backend>& cache = ctx.layer_cache();
    K::scatter_rows(exec, MatrixView<const std::uint8_t, space>(s.k_codes.mat()), ctx.slots, cache.index_keys.mat());
    K::scatter_rows(exec, MatrixView<const float, space>(s.k_scale.mat()), ctx.slots, cache.index_scales.mat());

    weights_proj_.forward(ctx, x, s.w.mat());
    s.selection.positions.resize(Shape{T, Config::index_topk});
    s.selection.count.resize(Shape{T});
    K::indexer_topk(exec, s.q_codes.mat(), s.q_scale.mat(), s.w.mat(), kHeadScale, kDimScale, cache.index_keys.mat(),
                    cache.index_scales.mat(), ctx.pages, s.selection.positions.mat(), s.selection.count.vec());
  }

 private:
  static inline const float kHeadScale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  static inline const float kDimScale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));

  Linear<Backend> wq_b_, wk_;
  LayerNorm<Backend> k_norm_;
  Linear<Backend> weights_proj_;
};

/// @}

}  // namespace dsv32
