/// \file
/// \brief The lightning indexer: picks, for every query, the index_topk cached positions MLA attends to.
#pragma once

#include <cmath>
#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/runtime_options.hpp"
#include <vector>
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
  Tensor<std::int64_t, Backend> count;      ///< [batch * seq] positions used by each query
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
  static constexpr DType kWeightDType = ConfigTraits<Config>::fp8 ? DType::F8_E4M3 : DType::BF16;

 public:
  /// \brief Per-call temporaries, shared by all layers.
  struct Scratch {
    Tensor<bf16, Backend> q;              ///< [T, H, D] queries, rotated and Hadamard-transformed
    Tensor<bf16, Backend> k;              ///< [T, D] this call's keys, normalized, rotated, transformed
    Tensor<bf16, Backend> w;              ///< [T, H] weights_proj(x)
    Tensor<std::uint8_t, Backend> q_codes;  ///< [T * H, D] E4M3 codes of q
    Tensor<float, Backend> q_scale;       ///< [T * H, D / 128] f32 scales of q
    Tensor<float, Backend> q_weight;      ///< [T, H] f32 head weights the score kernel takes
  };

  Indexer()
      : wq_b_(Config::q_lora_rank, H * D, kWeightDType, Config::scale_fmt),
        wk_(Config::dim, D, kWeightDType, Config::scale_fmt),
        k_norm_(D),
        weights_proj_(Config::dim, H, DType::BF16) {}

  /// \brief Cache bytes per (sequence, position): D E4M3 codes and D / 128 f32 scales.
  static constexpr std::size_t cache_bytes_per_token = D + kBlocks * sizeof(float);

  /// \brief Allocates the zero-filled FP8 key cache for the runtime limits.
  void allocate_caches(const RuntimeOptions& o) {
    k_cache_ = Tensor<std::uint8_t, Backend>(Shape{o.max_batch_size, o.max_seq_len, D});
    k_scale_cache_ = Tensor<float, Backend>(Shape{o.max_batch_size, o.max_seq_len, kBlocks});
  }

  /// \brief Selects the positions every query of the call attends to, writing this call's keys into
  ///        the cache first.
  /// \param ctx  the call
  /// \param x    [batch * seq, dim] the block's normalized input
  /// \param qr   [batch * seq, q_lora_rank] MLA's normalized q latent
  /// \param rope the model's RoPE table
  /// \param s    scratch shared by all layers
  /// \param out  selection, [batch * seq, index_topk]
  void forward(const ForwardContext& ctx, MatrixView<const bf16> x, MatrixView<const bf16> qr, const RopeTable<Backend>& rope,
               Scratch& s, IndexerSelection<Backend>& out) {
    using K = Kernels<Backend>;
    const std::int64_t T = ctx.tokens(), S = ctx.seq, max_seq = k_cache_.dim(1);
    s.q.resize(Shape{T, H * D});  // [T, H, D]
    s.k.resize(Shape{T, D});
    s.w.resize(Shape{T, H});
    wq_b_.forward(ctx, qr, s.q.mat());
    K::rope(s.q.data(), T, H * D, H, D, R, S, ctx.start_pos, rope.cos(), rope.sin(), Config::indexer_rope_interleaved);
    K::hadamard({s.q.data(), T * H, D, D});
    wk_.forward(ctx, x, s.k.mat());
    k_norm_.forward(s.k.mat(), s.k.mat());
    K::rope(s.k.data(), T, D, 1, D, R, S, ctx.start_pos, rope.cos(), rope.sin(), Config::indexer_rope_interleaved);
    K::hadamard(s.k.mat());

    s.q_codes.resize(Shape{T * H, D});
    s.q_scale.resize(Shape{T * H, kBlocks});
    K::act_quant({s.q.data(), T * H, D, D}, Config::scale_fmt, s.q_codes.mat(), s.q_scale.mat());
    for (std::int64_t b = 0; b < ctx.batch; ++b) {  // this call's keys into the FP8 cache
      const std::int64_t row = b * max_seq + ctx.start_pos;
      K::act_quant({s.k.data() + b * S * D, S, D, D}, Config::scale_fmt,
                   {k_cache_.data() + row * D, S, D, D}, {k_scale_cache_.data() + row * kBlocks, S, kBlocks, kBlocks});
    }

    // head weights: bf16(weights_proj(x) * H^-0.5), then (w * q_scale) * D^-0.5 in f32
    weights_proj_.forward(ctx, x, s.w.mat());
    s.q_weight.resize(Shape{T, H});
    head_weights(s, T);

    out.positions.resize(Shape{T, Config::index_topk});
    out.count.resize(Shape{T});
    for (std::int64_t b = 0; b < ctx.batch; ++b) {
      const std::int64_t row = b * max_seq;
      K::indexer_topk(s.q_codes.data() + b * S * H * D, s.q_weight.data() + b * S * H,
                      s.q_scale.data() + b * S * H * kBlocks, S, H, D, k_cache_.data() + row * D,
                      k_scale_cache_.data() + row * kBlocks, ctx.start_pos, Config::index_topk,
                      out.positions.data() + b * S * Config::index_topk, out.count.data() + b * S);
    }
  }

  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`wq_b.*`, `wk.*`, `k_norm.weight`, `k_norm.bias`, `weights_proj.weight`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    wq_b_.visit(prefix + "wq_b.", f);
    wk_.visit(prefix + "wk.", f);
    k_norm_.visit(prefix + "k_norm.", f);
    weights_proj_.visit(prefix + "weights_proj.", f);
  }

 private:
  void head_weights(Scratch& s, std::int64_t T) const {
    // Backend-neutral arithmetic on host copies (H floats per token; negligible next to the scores).
    std::vector<bf16> w(static_cast<std::size_t>(T * H));
    std::vector<float> qs(static_cast<std::size_t>(T * H * kBlocks)), out(static_cast<std::size_t>(T * H));
    Memory<Backend>::copy_to_host(w.data(), s.w.data(), w.size() * sizeof(bf16));
    Memory<Backend>::copy_to_host(qs.data(), s.q_scale.data(), qs.size() * sizeof(float));
    const float head_scale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    const float dim_scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
    for (std::int64_t i = 0; i < T * H; ++i) {
      const float wh = round_bf16(static_cast<float>(w[i]) * head_scale);
      out[i] = kBlocks == 1 ? wh * qs[i] * dim_scale : wh * dim_scale;
    }
    Memory<Backend>::copy_from_host(s.q_weight.data(), out.data(), out.size() * sizeof(float));
  }

  Linear<Backend> wq_b_, wk_;
  LayerNorm<Backend> k_norm_;
  Linear<Backend> weights_proj_;
  Tensor<std::uint8_t, Backend> k_cache_;  // [max_batch, max_seq, D] E4M3 codes
 Tensor<float, Backend> k_scale_cache_;   // [max_batch, max_seq, D / 128]
};

/// @}

}  // namespace dsv32
