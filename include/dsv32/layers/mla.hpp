/// \file
/// \brief MLA: Multi-head Latent Attention with the lightning indexer's sparse selection.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/indexer.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/rope.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Queries of one sequence an absorbed prefill takes at a time (bounds its scratch to this many
///        tokens' latent queries and outputs, whatever the pass length).
inline constexpr std::int64_t kAbsorbedPrefillRows = 256;

/// \brief MLA's per-call temporaries (shared by all layers).
template <class Backend>
struct MlaScratch {
  Tensor<bf16, Backend> q_a;      ///< [T, q_lora_rank]: wq_a x, then qr = q_norm(wq_a x)
  Tensor<bf16, Backend> q;        ///< [T, H, nope + rope] queries, q_pe rotated
  Tensor<bf16, Backend> kv_a;     ///< [T, kv_lora_rank + rope]: normalized latent and rotated key
  Tensor<bf16, Backend> keys;     ///< expanded prefill: [end_pos, H, nope + v] wkv_b applied to the cached latents
  Tensor<bf16, Backend> q_lat;    ///< decode and absorbed prefill: [T, H, kv_lora_rank] absorbed queries
  Tensor<bf16, Backend> o_lat;    ///< decode and absorbed prefill: [T, H, kv_lora_rank] latent attention output
  Tensor<bf16, Backend> o;        ///< [T, H, v] attention output before wo
  IndexerScratch<Backend> indexer;  ///< the indexer's temporaries and picks

  /// \brief Calls `r(tensor, elements)` with each buffer's largest size under `l` (H: local heads).
  template <class R>
  void reserve(R&& r, const ModelArgs& a, const ForwardLimits& l) {
    const std::int64_t T = l.tokens(), H = a.n_heads / l.world_size, C = a.kv_lora_rank;
    const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    r(q_a, elements(T, a.q_lora_rank));
    r(q, elements(T, H, qk));
    r(kv_a, elements(T, C + a.qk_rope_head_dim));
    // expanded prefill: passes ending at or before absorbed_from; absorbed: every pass's tokens
    const std::int64_t expanded_end = std::min(l.positions, l.absorbed_from);
    const bool absorbed_prefill = l.seq > 1 && l.positions > l.absorbed_from;
    const std::int64_t latent_rows = absorbed_prefill ? std::max(l.batch, std::min(l.seq, kAbsorbedPrefillRows)) : l.batch;
    r(keys, l.seq > 1 ? elements(expanded_end, H, a.qk_nope_head_dim + a.v_head_dim) : 0);
    r(q_lat, elements(latent_rows, H, C));
    r(o_lat, elements(latent_rows, H, C));
    r(o, elements(T, H, a.v_head_dim));
    indexer.reserve(r, a, l);
  }
};

/// \brief Cache bytes per (sequence, position) of one layer: the bf16 latent and rotated key, and the
///        indexer's FP8 keys with their scales.
constexpr std::size_t mla_cache_bytes_per_token(const ModelArgs& a) {
  return static_cast<std::size_t>(a.kv_lora_rank + a.qk_rope_head_dim) * sizeof(bf16) +
         indexer_cache_bytes_per_token(a);
}

/// \brief Multi-head Latent Attention of one layer, heads split over ranks.
///
/// q = wq_b(q_norm(wq_a(x))) split into [nope, rope] per head (RoPE on interleaved pairs);
/// kv = wkv_a(x) split into the latent (kv_norm'd, cached) and the shared rotated key part (cached).
/// Prefill (a call of more than one token) expands the cached latents through wkv_b into per-head
/// keys and values; decode (one token) works in the latent space with wkv_b absorbed into the query
/// and the output, and so do prefill passes ending past RuntimeOptions::absorbed_prefill_from (long
/// contexts). Either way each query attends only to the positions its indexer selected.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class MLA {
  static constexpr std::int64_t kNope = Config::qk_nope_head_dim, kRope = Config::qk_rope_head_dim;
  static constexpr std::int64_t kV = Config::v_head_dim, kC = Config::kv_lora_rank;
  static constexpr std::int64_t kQk = kNope + kRope;

 public:
  using space = space_of<Backend>;  ///< the memory space of activations and caches

  /// \brief Binds `<module>.wq_a`, `.q_norm`, `.wq_b`, `.wkv_a`, `.kv_norm`, `.wkv_b`, `.wo` and the
  ///        indexer's tensors from the model's parameters.
  /// \param store the model's parameters (this rank's part: n_heads / world heads)
  /// \param module e.g. `layers.0.attn`
  /// \param o     runtime options: the softmax scale's YaRN correction (mla_softmax_scale())
  MLA(ParameterStore<Backend>& store, const std::string& module, const RuntimeOptions& o)
      : wq_a_(store, module + ".wq_a", Config::scale_fmt),
        q_norm_(store, module + ".q_norm"),
        wq_b_(store, module + ".wq_b", Config::scale_fmt),
        wkv_a_(store, module + ".wkv_a", Config::scale_fmt),
        kv_norm_(store, module + ".kv_norm"),
        wkv_b_(store, module + ".wkv_b", Config::scale_fmt),
        wo_(store, module + ".wo", Config::scale_fmt),
        indexer_(store, module + ".indexer"),
        n_local_heads_(wq_b_.out_features() / kQk),
        softmax_scale_(mla_softmax_scale(kQk, o)),
        absorbed_from_(o.absorbed_prefill_from) {}

  /// \brief Cache bytes per (sequence, position): the bf16 latent and rotated key, and the indexer's keys.
  static constexpr std::size_t cache_bytes_per_token = mla_cache_bytes_per_token(ModelArgs::of<Config>());

  /// \brief Allocates the zero-filled caches for the runtime limits.
  void allocate_caches(const RuntimeOptions& o) {
    kv_cache_ = Tensor<bf16, Backend>(Shape{o.max_batch_size * o.max_seq_len, kC});
    pe_cache_ = Tensor<bf16, Backend>(Shape{o.max_batch_size * o.max_seq_len, kRope});
    cache_rows_ = o.max_seq_len;
    indexer_.allocate_caches(o);
  }

  /// \brief Writes this call's latents and rotated keys into the caches, runs the indexer, and
  ///        attends: prefill path for calls of more than one token, absorbed decode path otherwise.
  /// \param ctx  the call; its positions must follow what each sequence has cached
  /// \param x    [batch * seq, dim] normalized block input
  /// \param rope the model's RoPE table
  /// \param s    scratch shared by all layers
  /// \param out  [batch * seq, dim], reduced over ranks
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, const RopeTable<Backend>& rope,
               MlaScratch<Backend>& s, MatrixView<bf16, space> out) {
    using K = Kernels<Backend>;
    auto& exec = *ctx.exec;
    const std::int64_t T = ctx.tokens(), S = ctx.seq, H = n_local_heads_;
    s.q_a.resize(Shape{T, Config::q_lora_rank});
    s.q.resize(Shape{T, H * kQk});  // [T, H, nope + rope]
    s.kv_a.resize(Shape{T, kC + kRope});
    wq_a_.forward(ctx, x, s.q_a.mat());
    q_norm_.forward(ctx, s.q_a.mat(), s.q_a.mat());  // q_a now holds qr, the normalized q latent
    wq_b_.forward(ctx, s.q_a.mat(), s.q.mat());
    const MatrixView<bf16, space> q_heads(s.q.data(), T * H, kQk, kQk);  // [T * H, nope + rope]
    K::rope(exec, q_heads.middle_cols(kNope, kRope), H, S, ctx.start_pos, rope.cos(), rope.sin(), true);
    wkv_a_.forward(ctx, x, s.kv_a.mat());
    const MatrixView<bf16, space> kv_a = s.kv_a.mat();
    kv_norm_.forward(ctx, kv_a.middle_cols(0, kC), kv_a.middle_cols(0, kC));
    K::rope(exec, kv_a.middle_cols(kC, kRope), 1, S, ctx.start_pos, rope.cos(), rope.sin(), true);
    for (std::int64_t b = 0; b < ctx.batch; ++b) {  // this call's latents and rotated keys into the caches
      const std::int64_t row = b * cache_rows_ + ctx.start_pos;
      const bf16* src = kv_a.row(b * S);
      constexpr std::size_t pitch = (kC + kRope) * sizeof(bf16);
      Memory<Backend>::copy_rows_async(exec, kv_cache_.mat().row(row), kC * sizeof(bf16), src, pitch, S,
                                       kC * sizeof(bf16));
      Memory<Backend>::copy_rows_async(exec, pe_cache_.mat().row(row), kRope * sizeof(bf16), src + kC, pitch, S,
                                       kRope * sizeof(bf16));
    }

    indexer_.forward(ctx, x, s.q_a.mat(), rope, s.indexer);
    const IndexerSelection<Backend>& sel = s.indexer.selection;
    if (ctx.observer) report_selection(ctx, sel);

    s.o.resize(Shape{T, H * kV});
    const MatrixView<const bf16, space> kv_cache = kv_cache_.mat(), pe_cache = pe_cache_.mat();
    if (ctx.prefill() && ctx.end_pos() > absorbed_from_) {
      // absorbed prefill: each sequence's queries, kAbsorbedPrefillRows at a time, attend as decode
      // queries do, all to that sequence's cache rows (cache_rows 0: every query reads the same rows)
      const auto w = wkv_b_.view();
      const std::int64_t end = ctx.end_pos();
      for (std::int64_t b = 0; b < ctx.batch; ++b)
        for (std::int64_t t0 = 0; t0 < S; t0 += kAbsorbedPrefillRows) {
          const std::int64_t n = std::min(kAbsorbedPrefillRows, S - t0), first = b * S + t0;
          s.q_lat.resize(Shape{n * H, kC});
          s.o_lat.resize(Shape{n * H, kC});
          const MatrixView<bf16, space> q_rows = q_heads.middle_rows(first * H, n * H);
          K::absorb_query(exec, q_rows, w, H, kNope, kV, s.q_lat.mat());
          K::latent_attention(exec, s.q_lat.mat(), q_rows.middle_cols(kNope, kRope),
                              kv_cache.middle_rows(b * cache_rows_, end), pe_cache.middle_rows(b * cache_rows_, end), 0, H,
                              sel.positions.mat().middle_rows(first, n), sel.count.vec().subview(first, n),
                              softmax_scale_, s.o_lat.mat());
          K::project_values(exec, s.o_lat.mat(), w, H, kNope,
                            MatrixView<bf16, space>(s.o.data() + first * H * kV, n * H, kV, kV));
        }
    } else if (ctx.prefill()) {
      const std::int64_t end = ctx.end_pos();
      s.keys.resize(Shape{end, H * (kNope + kV)});  // [end, H, nope + v]
      for (std::int64_t b = 0; b < ctx.batch; ++b) {
        const std::int64_t row = b * cache_rows_;
        wkv_b_.forward(ctx, kv_cache.middle_rows(row, end), s.keys.mat());
        K::sparse_attention(exec, s.q.mat().middle_rows(b * S, S), s.keys.mat(), pe_cache.middle_rows(row, end), H,
                            kNope, kV, sel.positions.mat().middle_rows(b * S, S), sel.count.vec().subview(b * S, S),
                            softmax_scale_, s.o.mat().middle_rows(b * S, S));
      }
    } else {  // one token per sequence: T == batch
      s.q_lat.resize(Shape{T * H, kC});
      s.o_lat.resize(Shape{T * H, kC});
      const auto w = wkv_b_.view();
      K::absorb_query(exec, q_heads, w, H, kNope, kV, s.q_lat.mat());
      K::latent_attention(exec, s.q_lat.mat(), q_heads.middle_cols(kNope, kRope), kv_cache, pe_cache, cache_rows_, H,
                          sel.positions.mat(), sel.count.vec(), softmax_scale_, s.o_lat.mat());
      K::project_values(exec, s.o_lat.mat(), w, H, kNope, MatrixView<bf16, space>(s.o.data(), T * H, kV, kV));
    }
    wo_.forward(ctx, s.o.mat(), out);
  }

  /// \brief The attention's softmax scale, mla_softmax_scale() of the runtime options.
  float softmax_scale() const noexcept { return softmax_scale_; }

 private:
  // Host copies of the picks for the observer (only called when one is attached).
  void report_selection(const ForwardContext<Backend>& ctx, const IndexerSelection<Backend>& sel) const {
    with_host_view(ctx, sel.positions.mat(), [&](MatrixView<const std::int32_t> pos) {
      with_host_view(ctx, sel.count.mat(), [&](MatrixView<const std::int32_t> count) {
        for (std::int64_t t = 0; t < pos.rows; ++t)
          ctx.observer->on_indexer_topk(ctx.layer, t / ctx.seq, t % ctx.seq,
                                        std::span<const std::int32_t>(pos.row(t), static_cast<std::size_t>(count.data[t])));
      });
    });
  }

  Linear<Backend> wq_a_;
  RMSNorm<Backend> q_norm_;
  Linear<Backend> wq_b_, wkv_a_;
  RMSNorm<Backend> kv_norm_;
  Linear<Backend> wkv_b_, wo_;
  Indexer<Config, Backend> indexer_;
  std::int64_t n_local_heads_ = Config::n_heads;
  float softmax_scale_ = 1.0f;
  std::int64_t absorbed_from_ = 0;  // RuntimeOptions::absorbed_prefill_from
  Tensor<bf16, Backend> kv_cache_;  // [max_batch * max_seq, kv_lora_rank]
  Tensor<bf16, Backend> pe_cache_;  // [max_batch * max_seq, qk_rope_head_dim]
  std::int64_t cache_rows_ = 0;     // rows per sequence: max_seq_len
};

/// @}

}  // namespace dsv32
