/// \file
/// \brief Block: attention and feed-forward with pre-norms on a fused residual stream.
#pragma once

#include <optional>
#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/mla.hpp"
#include "dsv32/layers/mlp.hpp"
#include "dsv32/layers/moe.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief The blocks' per-call temporaries (shared by all blocks).
template <class Backend>
struct BlockScratch {
  Tensor<bf16, Backend> x;       ///< [T, dim] normalized input of the attention, then of the FFN
  Tensor<bf16, Backend> attn;    ///< [T, dim] attention output
  MlaScratch<Backend> mla;       ///< the attention's temporaries
  MlpScratch<Backend> mlp;       ///< the dense MLP's temporaries
  MoeScratch<Backend> moe;       ///< the MoE's temporaries

  /// \brief Calls `r(tensor, elements)` with each buffer's largest size under `l`.
  template <class R>
  void reserve(R&& r, const ModelArgs& a, const ForwardLimits& l) {
    r(x, elements(l.tokens(), a.dim));
    r(attn, elements(l.tokens(), a.dim));
    mla.reserve(r, a, l);
    if (a.n_dense_layers > 0) mlp.reserve(r, a, l);
    if (a.n_layers > a.n_dense_layers) moe.reserve(r, a, l);
  }
};

/// \brief One transformer block: x = attn_norm(h, residual); a = MLA(x); x = ffn_norm(a, residual);
///        h = FFN(x), where FFN is a dense MLP for the first n_dense_layers blocks and MoE after.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class Block {
 public:
  using space = space_of<Backend>;  ///< the memory space of activations

  /// \brief Binds the block's parameters (`layers.<layer_id>.*`) from the model's parameters.
  /// \param store    the model's parameters
  /// \param layer_id block index; blocks below n_dense_layers get a dense MLP, the others an MoE
  /// \param o        runtime options (the attention's softmax scale depends on YaRN)
  /// \param par      this rank's place (which routed experts it holds)
  Block(ParameterStore<Backend>& store, int layer_id, const RuntimeOptions& o, const Parallel& par)
      : layer_id_(layer_id),
        attn_norm_(store, prefix() + "attn_norm"),
        attn_(store, prefix() + "attn", o),
        ffn_norm_(store, prefix() + "ffn_norm") {
    if (layer_id < Config::n_dense_layers)
      dense_.emplace(store, prefix() + "ffn", Config::scale_fmt);
    else
      moe_.emplace(store, prefix() + "ffn", par);
  }

  /// \brief Runs the block; sets `ctx.layer` to this block's index for the layers below.
  /// \param ctx      the call
  /// \param h        [T, dim] block input, replaced by the block's FFN output
  /// \param residual [T, dim] residual stream (set from h by the first block)
  /// \param first    whether this is the first block (no residual yet)
  /// \param rope     the model's RoPE table
  /// \param s        scratch shared by all blocks
  /// \param ffn_rows when not empty, the feed-forward runs only on these rows of h (increasing; the
  ///        other rows of h are left as they were): what the last block needs when only the last
  ///        position of each sequence reaches the logits. The attention (and its caches) still runs
  ///        on every row; the rows computed are bit for bit those of the full FFN (each row's FFN
  ///        depends on that row only).
  void forward(ForwardContext<Backend>& ctx, MatrixView<bf16, space> h, MatrixView<bf16, space> residual, bool first,
               const RopeTable<Backend>& rope, BlockScratch<Backend>& s,
               VectorView<const std::int32_t, space> ffn_rows = {}) {
    ctx.layer = layer_id_;
    s.x.resize(Shape{h.rows, Config::dim});
    s.attn.resize(Shape{h.rows, Config::dim});
    if (first) {
      attn_norm_.forward(ctx, h, s.x.mat());
      Memory<Backend>::copy_async(*ctx.exec, residual.data, h.data, static_cast<std::size_t>(h.rows * h.cols) * sizeof(bf16));
    } else {
      attn_norm_.forward(ctx, h, residual, s.x.mat());
    }
    attn_.forward(ctx, s.x.mat(), rope, s.mla, s.attn.mat());
    if (ctx.observer)
      with_host_view(ctx, MatrixView<const bf16, space>(s.attn.mat()),
                     [&](MatrixView<const bf16> a) { ctx.observer->on_attention(layer_id_, a); });
    ffn_norm_.forward(ctx, s.attn.mat(), residual, s.x.mat());
    if (!ffn_rows.empty() && ffn_rows.size < h.rows) {
      // the rows gathered into attn (free once ffn_norm has read it), the FFN on those into x (free
      // once gathered), its outputs written back to their rows of h
      using K = Kernels<Backend>;
      const std::int64_t n = ffn_rows.size;
      K::gather_rows(*ctx.exec, s.x.mat(), ffn_rows, s.attn.mat().middle_rows(0, n));
      ffn(ctx, s.attn.mat().middle_rows(0, n), s, s.x.mat().middle_rows(0, n));
      K::scatter_rows(*ctx.exec, MatrixView<const bf16, space>(s.x.mat().middle_rows(0, n)), ffn_rows, h);
    } else {
      ffn(ctx, s.x.mat(), s, h);
    }
    if (ctx.observer)
      with_host_view(ctx, MatrixView<const bf16, space>(h), [&](MatrixView<const bf16> x) {
        with_host_view(ctx, MatrixView<const bf16, space>(residual),
                       [&](MatrixView<const bf16> r) { ctx.observer->on_block(layer_id_, x, r); });
      });
  }

  /// \brief Whether the FFN is an MoE (layer_id >= n_dense_layers).
  bool is_moe() const noexcept { return moe_.has_value(); }
  /// \brief On a backend that runs grouped experts, writes the MoE's expert table (the weights are
  ///        bound by then); nothing otherwise.
  void prepare() {
    if (moe_) moe_->prepare_experts();
  }

 private:
  void ffn(ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, BlockScratch<Backend>& s,
           MatrixView<bf16, space> out) {
    if (dense_)
      dense_->forward(ctx, x, s.mlp, out);
    else
      moe_->forward(ctx, x, s.moe, out);
  }

  std::string prefix() const { return "layers." + std::to_string(layer_id_) + "."; }

  int layer_id_ = 0;
  RMSNorm<Backend> attn_norm_;
  MLA<Config, Backend> attn_;
  RMSNorm<Backend> ffn_norm_;
  std::optional<MLP<Backend>> dense_;
  std::optional<MoE<Config, Backend>> moe_;
};

/// @}

}  // namespace dsv32
