/// \file
/// \brief MLA: Multi-head Latent Attention with the lightning indexer's sparse selection.
#pragma once

#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/indexer.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/rope.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Multi-head Latent Attention of one layer, heads split over ranks.
///
/// q = wq_b(q_norm(wq_a(x))) split into [nope, rope] per head (RoPE on interleaved pairs);
/// kv = wkv_a(x) split into the latent (kv_norm'd, cached) and the shared rotated key part (cached).
/// Prefill (a call of more than one token) expands the cached latents through wkv_b into per-head
/// keys and values; decode (one token) works in the latent space with wkv_b absorbed into the query
/// and the output. Either way each query attends only to the positions its indexer selected.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class MLA {
  static constexpr std::int64_t kNope = Config::qk_nope_head_dim, kRope = Config::qk_rope_head_dim;
  static constexpr std::int64_t kV = Config::v_head_dim, kC = Config::kv_lora_rank;
  static constexpr std::int64_t kQk = kNope + kRope;
  static constexpr DType kWeightDType = ConfigTraits<Config>::fp8 ? DType::F8_E4M3 : DType::BF16;

 public:
  /// \brief Per-call temporaries, shared by all layers.
  struct Scratch {
    Tensor<bf16, Backend> q_a;      ///< [T, q_lora_rank]: wq_a x, then qr = q_norm(wq_a x)
    Tensor<bf16, Backend> q;        ///< [T, H, nope + rope] queries, q_pe rotated
    Tensor<bf16, Backend> kv_a;     ///< [T, kv_lora_rank + rope]: normalized latent and rotated key
    Tensor<bf16, Backend> keys;     ///< prefill: [end_pos, H, nope + v] wkv_b applied to the cached latents
    Tensor<bf16, Backend> q_lat;    ///< decode: [T, H, kv_lora_rank] absorbed queries
    Tensor<bf16, Backend> o_lat;    ///< decode: [T, H, kv_lora_rank] latent attention output
    Tensor<bf16, Backend> o;        ///< [T, H, v] attention output before wo
    typename Indexer<Config, Backend>::Scratch indexer;  ///< the indexer's temporaries
    IndexerSelection<Backend> selection;                 ///< the indexer's picks for this call
  };

  /// \brief Declares the layer's parameters (nothing is allocated until loading).
  /// \param o   runtime options: the softmax scale's YaRN correction (mla_softmax_scale())
  /// \param par this rank's place; n_heads must divide evenly (else Error(invalid_argument))
  MLA(const RuntimeOptions& o, const Parallel& par)
      : n_local_heads_(par.split(Config::n_heads, "n_heads")),
        wq_a_(Config::dim, Config::q_lora_rank, kWeightDType, Config::scale_fmt),
        q_norm_(Config::q_lora_rank),
        wq_b_(Config::q_lora_rank, n_local_heads_ * kQk, kWeightDType, Config::scale_fmt),
        wkv_a_(Config::dim, kC + kRope, kWeightDType, Config::scale_fmt),
        kv_norm_(kC),
        wkv_b_(kC, n_local_heads_ * (kNope + kV), kWeightDType, Config::scale_fmt),
        wo_(n_local_heads_ * kV, Config::dim, kWeightDType, Config::scale_fmt, Reduce::sum),
        softmax_scale_(mla_softmax_scale(kQk, o)) {}

  /// \brief Cache bytes per (sequence, position): the bf16 latent and rotated key, and the indexer's keys.
  static constexpr std::size_t cache_bytes_per_token =
      (kC + kRope) * sizeof(bf16) + Indexer<Config, Backend>::cache_bytes_per_token;

  /// \brief Allocates the zero-filled caches for the runtime limits.
  void allocate_caches(const RuntimeOptions& o) {
    kv_cache_ = Tensor<bf16, Backend>(Shape{o.max_batch_size, o.max_seq_len, kC});
    pe_cache_ = Tensor<bf16, Backend>(Shape{o.max_batch_size, o.max_seq_len, kRope});
    indexer_.allocate_caches(o);
  }

  /// \brief Writes this call's latents and rotated keys into the caches, runs the indexer, and
  ///        attends: prefill path for calls of more than one token, absorbed decode path otherwise.
  /// \param ctx  the call; its positions must follow what each sequence has cached
  /// \param x    [batch * seq, dim] normalized block input
  /// \param rope the model's RoPE table
  /// \param s    scratch shared by all layers
  /// \param out  [batch * seq, dim], reduced over ranks
  void forward(const ForwardContext& ctx, MatrixView<const bf16> x, const RopeTable<Backend>& rope, Scratch& s,
               MatrixView<bf16> out) {
    using K = Kernels<Backend>;
    const std::int64_t T = ctx.tokens(), S = ctx.seq, H = n_local_heads_, max_seq = kv_cache_.dim(1);
    s.q_a.resize(Shape{T, Config::q_lora_rank});
    s.q.resize(Shape{T, H * kQk});  // [T, H, nope + rope]
    s.kv_a.resize(Shape{T, kC + kRope});
    wq_a_.forward(ctx, x, s.q_a.mat());
    q_norm_.forward(s.q_a.mat(), s.q_a.mat());  // q_a now holds qr, the normalized q latent
    wq_b_.forward(ctx, s.q_a.mat(), s.q.mat());
    K::rope(s.q.data() + kNope, T, H * kQk, H, kQk, kRope, S, ctx.start_pos, rope.cos(), rope.sin(), true);
    wkv_a_.forward(ctx, x, s.kv_a.mat());
    const MatrixView<bf16> kv_a = s.kv_a.mat();
    kv_norm_.forward(kv_a.middle_cols(0, kC), kv_a.middle_cols(0, kC));
    K::rope(s.kv_a.data() + kC, T, kC + kRope, 1, kRope, kRope, S, ctx.start_pos, rope.cos(), rope.sin(), true);
    for (std::int64_t b = 0; b < ctx.batch; ++b) {  // this call's latents and rotated keys into the caches
      const std::int64_t row = b * max_seq + ctx.start_pos;
      const bf16* src = kv_a.row(b * S);
      constexpr std::size_t pitch = (kC + kRope) * sizeof(bf16);
      Memory<Backend>::copy_rows(kv_cache_.data() + row * kC, kC * sizeof(bf16), src, pitch, S, kC * sizeof(bf16));
      Memory<Backend>::copy_rows(pe_cache_.data() + row * kRope, kRope * sizeof(bf16), src + kC, pitch, S,
                                 kRope * sizeof(bf16));
    }

    indexer_.forward(ctx, x, s.q_a.mat(), rope, s.indexer, s.selection);
    report_selection(ctx, s.selection);

    s.o.resize(Shape{T, H, kV});
    const std::int64_t kmax = Config::index_topk;
    if (ctx.prefill()) {
      const std::int64_t end = ctx.end_pos();
      s.keys.resize(Shape{end, H * (kNope + kV)});  // [end, H, nope + v]
      for (std::int64_t b = 0; b < ctx.batch; ++b) {
        const std::int64_t row = b * max_seq;
        wkv_b_.forward(ctx, {kv_cache_.data() + row * kC, end, kC, kC}, s.keys.mat());
        K::sparse_attention(s.q.data() + b * S * H * kQk, s.keys.data(), pe_cache_.data() + row * kRope, S, H, kNope,
                            kRope, kV, s.selection.positions.data() + b * S * kmax, s.selection.count.data() + b * S,
                            kmax, softmax_scale_, s.o.data() + b * S * H * kV);
      }
    } else {
      s.q_lat.resize(Shape{T, H, kC});
      s.o_lat.resize(Shape{T, H, kC});
      const WeightView w = wkv_b_.view();
      K::absorb_query(s.q.data(), T, H, kNope, kRope, kV, w, s.q_lat.data());
      std::vector<std::int64_t> count(static_cast<std::size_t>(T));
      Memory<Backend>::copy_to_host(count.data(), s.selection.count.data(), count.size() * sizeof(std::int64_t));
      for (std::int64_t b = 0; b < ctx.batch; ++b) {  // one token per sequence
        const std::int64_t row = b * max_seq;
        K::latent_attention(s.q_lat.data() + b * H * kC, s.q.data() + b * H * kQk + kNope, kQk,
                            kv_cache_.data() + row * kC, pe_cache_.data() + row * kRope, H, kC, kRope,
                            s.selection.positions.data() + b * kmax, count[b], softmax_scale_,
                            s.o_lat.data() + b * H * kC);
      }
      K::project_values(s.o_lat.data(), T, H, kNope, kV, w, s.o.data());
    }
    wo_.forward(ctx, {s.o.data(), T, H * kV, H * kV}, out);
  }

  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`wq_a.*`, `q_norm.weight`, `wq_b.*`, `wkv_a.*`, `kv_norm.weight`, `wkv_b.*`, `wo.*`, `indexer.*`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    wq_a_.visit(prefix + "wq_a.", f);
    q_norm_.visit(prefix + "q_norm.", f);
    wq_b_.visit(prefix + "wq_b.", f);
    wkv_a_.visit(prefix + "wkv_a.", f);
    kv_norm_.visit(prefix + "kv_norm.", f);
    wkv_b_.visit(prefix + "wkv_b.", f);
    wo_.visit(prefix + "wo.", f);
    indexer_.visit(prefix + "indexer.", f);
  }

  /// \brief The attention's softmax scale, mla_softmax_scale() of the runtime options.
  float softmax_scale() const noexcept { return softmax_scale_; }

 private:
  void report_selection(const ForwardContext& ctx, const IndexerSelection<Backend>& sel) const {
    if (!ctx.observer) return;
    const std::int64_t T = ctx.tokens(), k = Config::index_topk;
    std::vector<std::int32_t> pos(static_cast<std::size_t>(T * k));
    std::vector<std::int64_t> count(static_cast<std::size_t>(T));
    Memory<Backend>::copy_to_host(pos.data(), sel.positions.data(), pos.size() * sizeof(std::int32_t));
    Memory<Backend>::copy_to_host(count.data(), sel.count.data(), count.size() * sizeof(std::int64_t));
    for (std::int64_t t = 0; t < T; ++t)
      ctx.observer->on_indexer_topk(ctx.layer, t / ctx.seq, t % ctx.seq,
                                    std::span<const std::int32_t>(pos.data() + t * k, static_cast<std::size_t>(count[t])));
  }

  std::int64_t n_local_heads_ = Config::n_heads;
  Linear<Backend> wq_a_;
  RMSNorm<Backend> q_norm_;
  Linear<Backend> wq_b_, wkv_a_;
  RMSNorm<Backend> kv_norm_;
  Linear<Backend> wkv_b_, wo_;
  Indexer<Config, Backend> indexer_;
  float softmax_scale_ = 1.0f;
  Tensor<bf16, Backend> kv_cache_;  // [max_batch, max_seq, kv_lora_rank]
  Tensor<bf16, Backend> pe_cache_;  // [max_batch, max_seq, qk_rope_head_dim]
};

/// @}

}  // namespace dsv32
