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

/// \brief The most a forward pass computes at once, which sizes every scratch buffer.
struct ForwardLimits {
  std::int64_t batch = 1;      ///< sequences per call (max_batch_size)
  std::int64_t seq = 1;        ///< tokens per sequence per pass (max_tokens_per_call)
  std::int64_t positions = 1;  ///< positions per sequence (max_seq_len)
  int world_size = 1;          ///< model-parallel ranks (local head and hidden counts)
  std::int64_t absorbed_from = 0;  ///< RuntimeOptions::absorbed_prefill_from

  /// \brief Rows of a pass's activations: batch * seq.
  constexpr std::int64_t tokens() const { return elements(batch, seq); }
  /// \brief The limits of a model with these options on `world` ranks.
  static ForwardLimits of(const RuntimeOptions& o, int world = 1) {
    return ForwardLimits{o.max_batch_size, o.tokens_per_call(), o.max_seq_len, world, o.absorbed_prefill_from};
  }
};

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
    r(selection.positions, elements(T, a.index_topk));
    r(selection.count, T);
  }
};

/// \brief Cache bytes per (sequence, position) of one layer's indexer: index_head_dim E4M3 codes and
///        index_head_dim / 128 f32 scales.
constexpr std::size_t indexer_cache_bytes_per_token(const ModelArgs& a) {
  return static_cast<std::size_t>(a.index_head_dim + a.index_head_dim / kBlockSize * 4);
}

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

  /// \brief Cache bytes per (sequence, position): D E4M3 codes and D / 128 f32 scales.
  static constexpr std::size_t cache_bytes_per_token = indexer_cache_bytes_per_token(ModelArgs::of<Config>());

  /// \brief Allocates the zero-filled FP8 key cache for the runtime limits.
  void allocate_caches(const RuntimeOptions& o) {
    k_cache_ = Tensor<std::uint8_t, Backend>(Shape{o.max_batch_size * o.max_seq_len, D});
    k_scale_cache_ = Tensor<float, Backend>(Shape{o.max_batch_size * o.max_seq_len, kBlocks});
    cache_rows_ = o.max_seq_len;
  }

  /// \brief Selects the positions every query of the call attends to, writing this call's keys into
  ///        the cache first.
  /// \param ctx  the call
  /// \param x    [batch * seq, dim] the block's normalized input
  /// \param qr   [batch * seq, q_lora_rank] MLA's normalized q latent
  /// \param rope the model's RoPE table
  /// \param s    scratch shared by all layers; s.selection receives the picks, [batch * seq, index_topk]
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<const bf16, space> qr,
               const RopeTable<Backend>& rope, IndexerScratch<Backend>& s) {
    using K = Kernels<Backend>;
    auto& exec = *ctx.exec;
    const std::int64_t T = ctx.tokens(), S = ctx.seq;
    s.q.resize(Shape{T, H * D});  // [T, H, D]
    s.k.resize(Shape{T, D});
    s.w.resize(Shape{T, H});
    wq_b_.forward(ctx, qr, s.q.mat());
    const MatrixView<bf16, space> q_heads(s.q.data(), T * H, D, D);  // [T * H, D]
    K::rope(exec, q_heads.middle_cols(0, R), H, S, ctx.start_pos, rope.cos(), rope.sin(),
            Config::indexer_rope_interleaved);
    K::hadamard(exec, q_heads);
    wk_.forward(ctx, x, s.k.mat());
    k_norm_.forward(ctx, s.k.mat(), s.k.mat());
    K::rope(exec, s.k.mat().middle_cols(0, R), 1, S, ctx.start_pos, rope.cos(), rope.sin(),
            Config::indexer_rope_interleaved);
    K::hadamard(exec, s.k.mat());

    s.q_codes.resize(Shape{T * H, D});
    s.q_scale.resize(Shape{T * H, kBlocks});
    K::act_quant(exec, q_heads, Config::scale_fmt, s.q_codes.mat(), s.q_scale.mat());
    for (std::int64_t b = 0; b < ctx.batch; ++b) {  // this call's keys into the FP8 cache
      const std::int64_t row = b * cache_rows_ + ctx.start_pos;
      K::act_quant(exec, s.k.mat().middle_rows(b * S, S), Config::scale_fmt, k_cache_.mat().middle_rows(row, S),
                   k_scale_cache_.mat().middle_rows(row, S));
    }

    weights_proj_.forward(ctx, x, s.w.mat());
    s.selection.positions.resize(Shape{T, Config::index_topk});
    s.selection.count.resize(Shape{T});
    K::indexer_topk(exec, s.q_codes.mat(), s.q_scale.mat(), s.w.mat(), kHeadScale, kDimScale, k_cache_.mat(),
                    k_scale_cache_.mat(), cache_rows_, ctx.batch, ctx.start_pos, s.selection.positions.mat(),
                    s.selection.count.vec());
  }

 private:
  static inline const float kHeadScale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  static inline const float kDimScale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));

  Linear<Backend> wq_b_, wk_;
  LayerNorm<Backend> k_norm_;
  Linear<Backend> weights_proj_;
  Tensor<std::uint8_t, Backend> k_cache_;  // [max_batch * max_seq, D] E4M3 codes
  Tensor<float, Backend> k_scale_cache_;   // [max_batch * max_seq, D / 128]
  std::int64_t cache_rows_ = 0;            // rows per sequence: max_seq_len
};

/// @}

}  // namespace dsv32
