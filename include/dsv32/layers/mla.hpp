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

/// \brief Tokens the latent (absorbed) path takes at a time, whatever their sequences (bounds its
///        scratch to this many tokens' latent queries and outputs, whatever the pass length).
inline constexpr std::int64_t kLatentRows = 256;

/// \brief MLA's per-call temporaries (shared by all layers).
template <class Backend>
struct MlaScratch {
  Tensor<bf16, Backend> q_a;      ///< [T, q_lora_rank]: wq_a x, then qr = q_norm(wq_a x)
  Tensor<bf16, Backend> q;        ///< [T, H, nope + rope] queries, q_pe rotated
  Tensor<bf16, Backend> kv_a;     ///< [T, kv_lora_rank + rope]: normalized latent and rotated key
  Tensor<bf16, Backend> keys;     ///< expanded prefill: [end_pos, H, nope + v] wkv_b applied to the cached latents
  Tensor<bf16, Backend> latents;  ///< expanded prefill of a sequence whose pages are not consecutive: [end_pos, C] its cached latents
  Tensor<bf16, Backend> key_pe;   ///< ... and [end_pos, rope] its cached rotated keys
  Tensor<bf16, Backend> q_lat;    ///< latent path: [rows, H, kv_lora_rank] absorbed queries (kLatentRows at a time)
  Tensor<bf16, Backend> o_lat;    ///< latent path: [rows, H, kv_lora_rank] latent attention output
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
    // expanded prefill: passes of more than one token ending at or before absorbed_from; the latent
    // path: every other token, kLatentRows at a time
    const std::int64_t expanded_end = l.seq > 1 ? std::min(l.positions, l.absorbed_from) : 0;
    const std::int64_t latent_rows = std::min(T, kLatentRows);
    r(keys, elements(expanded_end, H, a.qk_nope_head_dim + a.v_head_dim));
    r(latents, elements(expanded_end, C));
    r(key_pe, elements(expanded_end, a.qk_rope_head_dim));
    r(q_lat, elements(latent_rows, H, C));
    r(o_lat, elements(latent_rows, H, C));
    r(o, elements(T, H, a.v_head_dim));
    indexer.reserve(r, a, l);
  }
};

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
        softmax_scale_(mla_softmax_scale(kQk, o)) {}

  /// \brief Writes the pass's latents and rotated keys into the layer's cache (ctx.layer_cache(), at
  ///        ctx.slots), runs the indexer, and attends: each sequence's first `expanded` rows through keys
  ///        and values expanded by wkv_b (the reference's prefill), every other row in the latent space
  ///        (the reference's decode: wkv_b absorbed into the query and the output).
  /// \param ctx  the pass; each sequence's positions must follow what its cache holds
  /// \param x    [T, dim] normalized block input
  /// \param rope the model's RoPE table
  /// \param s    scratch shared by all layers
  /// \param out  [T, dim], reduced over ranks
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, const RopeTable<Backend>& rope,
               MlaScratch<Backend>& s, MatrixView<bf16, space> out) {
    using K = Kernels<Backend>;
    auto& exec = *ctx.exec;
    const std::int64_t T = ctx.tokens(), H = n_local_heads_;
    const VectorView<const std::int32_t, space> positions = ctx.pages.position;
    s.q_a.resize(Shape{T, Config::q_lora_rank});
    s.q.resize(Shape{T, H * kQk});  // [T, H, nope + rope]
    s.kv_a.resize(Shape{T, kC + kRope});
    wq_a_.forward(ctx, x, s.q_a.mat());
    q_norm_.forward(ctx, s.q_a.mat(), s.q_a.mat());  // q_a now holds qr, the normalized q latent
    wq_b_.forward(ctx, s.q_a.mat(), s.q.mat());
    const MatrixView<bf16, space> q_heads(s.q.data(), T * H, kQk, kQk);  // [T * H, nope + rope]
    K::rope(exec, q_heads.middle_cols(kNope, kRope), H, positions, rope.cos(), rope.sin(), true);
    wkv_a_.forward(ctx, x, s.kv_a.mat());
    const MatrixView<bf16, space> kv_a = s.kv_a.mat();
    kv_norm_.forward(ctx, kv_a.middle_cols(0, kC), kv_a.middle_cols(0, kC));
    K::rope(exec, kv_a.middle_cols(kC, kRope), 1, positions, rope.cos(), rope.sin(), true);
    LayerCache<Backend>& cache = ctx.layer_cache();  // this pass's latents and rotated keys into the caches
    K::scatter_rows(exec, MatrixView<const bf16, space>(kv_a.middle_cols(0, kC)), ctx.slots, cache.latent.mat());
    K::scatter_rows(exec, MatrixView<const bf16, space>(kv_a.middle_cols(kC, kRope)), ctx.slots, cache.rope.mat());

    indexer_.forward(ctx, x, s.q_a.mat(), rope, s.indexer);
    const IndexerSelection<Backend>& sel = s.indexer.selection;
    if (ctx.observer) report_selection(ctx, sel);

    s.o.resize(Shape{T, H * kV});
    const MatrixView<const bf16, space> latent = cache.latent.mat(), key_pe = cache.rope.mat();
    const auto w = wkv_b_.view();
    const std::int64_t P = ctx.cache->page_size();
    // the latent path on runs of consecutive rows of sequences that are not expanded, kLatentRows at a time
    auto attend_latent = [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t first = r0; first < r1; first += kLatentRows) {
        const std::int64_t n = std::min(kLatentRows, r1 - first);
        s.q_lat.resize(Shape{n * H, kC});
        s.o_lat.resize(Shape{n * H, kC});
        const MatrixView<bf16, space> q_rows = q_heads.middle_rows(first * H, n * H);
        K::absorb_query(exec, q_rows, w, H, kNope, kV, s.q_lat.mat());
        K::latent_attention(exec, s.q_lat.mat(), q_rows.middle_cols(kNope, kRope), latent, key_pe,
                            ctx.pages.rows(first, n), H, sel.positions.mat().middle_rows(first, n),
                            sel.count.vec().subview(first, n), softmax_scale_, s.o_lat.mat());
        K::project_values(exec, s.o_lat.mat(), w, H, kNope,
                          MatrixView<bf16, space>(s.o.data() + first * H * kV, n * H, kV, kV));
      }
    };
    std::int64_t run = 0;  // first row of the current run of latent rows
    for (const PassSequence& q : ctx.sequences) {
      if (q.expanded == 0) continue;
      attend_latent(run, q.row);
      run = q.row + q.expanded;  // its later rows (if any) attend in the latent space
      // the expanded path: wkv_b over every cached latent the expanded rows see, then attention on the keys
      const std::int64_t end = q.expanded_end_pos();
      MatrixView<const bf16, space> lat, pe;
      if (q.first_page >= 0) {
        lat = latent.middle_rows(q.first_page * P, end);
        pe = key_pe.middle_rows(q.first_page * P, end);
      } else {
        s.latents.resize(Shape{end, kC});
        s.key_pe.resize(Shape{end, kRope});
        K::gather_rows(exec, latent, ctx.gather.subview(q.gather, end), s.latents.mat());
        K::gather_rows(exec, key_pe, ctx.gather.subview(q.gather, end), s.key_pe.mat());
        lat = s.latents.mat();
        pe = s.key_pe.mat();
      }
      s.keys.resize(Shape{end, H * (kNope + kV)});  // [end, H, nope + v]
      wkv_b_.forward(ctx, lat, s.keys.mat());
      K::sparse_attention(exec, s.q.mat().middle_rows(q.row, q.expanded), s.keys.mat(), pe, H, kNope, kV,
                          sel.positions.mat().middle_rows(q.row, q.expanded),
                          sel.count.vec().subview(q.row, q.expanded), softmax_scale_,
                          s.o.mat().middle_rows(q.row, q.expanded));
    }
    attend_latent(run, T);
    wo_.forward(ctx, s.o.mat(), out);
  }

  /// \brief The attention's softmax scale, mla_softmax_scale() of the runtime options.
  float softmax_scale() const noexcept { return softmax_scale_; }

 private:
  // Host copies of the picks for the observer (only called when one is attached).
  void report_selection(const ForwardContext<Backend>& ctx, const IndexerSelection<Backend>& sel) const {
    with_host_view(ctx, sel.positions.mat(), [&](MatrixView<const std::int32_t> pos) {
      with_host_view(ctx, sel.count.mat(), [&](MatrixView<const std::int32_t> count) {
        for (std::int64_t b = 0; b < ctx.batch(); ++b) {
          const PassSequence& q = ctx.sequences[static_cast<std::size_t>(b)];
          for (std::int64_t t = 0; t < q.tokens; ++t)
            ctx.observer->on_indexer_topk(
                ctx.layer, b, t,
                std::span<const std::int32_t>(pos.row(q.row + t), static_cast<std::size_t>(count.data[q.row + t])));
        }
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
};

/// @}

}  // namespace dsv32
