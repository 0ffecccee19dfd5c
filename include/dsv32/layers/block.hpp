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

/// \brief One transformer block: x = attn_norm(h, residual); a = MLA(x); x = ffn_norm(a, residual);
///        h = FFN(x), where FFN is a dense MLP for the first n_dense_layers blocks and MoE after.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class Block {
  static constexpr DType kWeightDType = ConfigTraits<Config>::fp8 ? DType::F8_E4M3 : DType::BF16;

 public:
  /// \brief Per-call temporaries shared by all blocks.
  struct Scratch {
    Tensor<bf16, Backend> x;                      ///< [T, dim] normalized input of the attention, then of the FFN
    Tensor<bf16, Backend> attn;                   ///< [T, dim] attention output
    typename MLA<Config, Backend>::Scratch mla;   ///< the attention's temporaries
    typename MLP<Backend>::Scratch mlp;           ///< the dense MLP's temporaries
    typename MoE<Config, Backend>::Scratch moe;   ///< the MoE's temporaries
  };

  /// \brief Declares the block's parameters (nothing is allocated until loading).
  /// \param layer_id block index; blocks below n_dense_layers get a dense MLP, the others an MoE
  /// \param o        runtime options (the attention's softmax scale depends on YaRN)
  /// \param par      this rank's place: heads, inter_dim and experts are split over the ranks
  Block(int layer_id, const RuntimeOptions& o, const Parallel& par)
      : layer_id_(layer_id), attn_norm_(Config::dim), attn_(o, par), ffn_norm_(Config::dim) {
    if (layer_id < Config::n_dense_layers)
      dense_.emplace(Config::dim, par.split(Config::inter_dim, "inter_dim"), kWeightDType, Config::scale_fmt, Reduce::sum);
    else
      moe_.emplace(par);
  }

  /// \brief Runs the block; sets `ctx.layer` to this block's index for the layers below.
  /// \param ctx      the call
  /// \param h        [T, dim] block input, replaced by the block's FFN output
  /// \param residual [T, dim] residual stream (set from h by the first block)
  /// \param first    whether this is the first block (no residual yet)
  /// \param rope     the model's RoPE table
  /// \param s        scratch shared by all blocks
  void forward(ForwardContext& ctx, MatrixView<bf16> h, MatrixView<bf16> residual, bool first,
               const RopeTable<Backend>& rope, Scratch& s) {
    ctx.layer = layer_id_;
    s.x.resize(Shape{h.rows, Config::dim});
    s.attn.resize(Shape{h.rows, Config::dim});
    if (first) {
      attn_norm_.forward(h, s.x.mat());
      Memory<Backend>::copy(residual.data, h.data, static_cast<std::size_t>(h.rows * h.cols) * sizeof(bf16));
    } else {
      attn_norm_.forward(h, residual, s.x.mat());
    }
    attn_.forward(ctx, s.x.mat(), rope, s.mla, s.attn.mat());
    if (ctx.observer) ctx.observer->on_attention(layer_id_, s.attn.mat());
    ffn_norm_.forward(s.attn.mat(), residual, s.x.mat());
    if (dense_)
      dense_->forward(ctx, s.x.mat(), s.mlp, h);
    else
      moe_->forward(ctx, s.x.mat(), s.moe, h);
    if (ctx.observer) ctx.observer->on_block(layer_id_, h, residual);
  }

  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`attn.*`, `ffn.*`, `attn_norm.weight`, `ffn_norm.weight`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    attn_.visit(prefix + "attn.", f);
    if (dense_) dense_->visit(prefix + "ffn.", f);
    if (moe_) moe_->visit(prefix + "ffn.", f);
    attn_norm_.visit(prefix + "attn_norm.", f);
    ffn_norm_.visit(prefix + "ffn_norm.", f);
  }

  /// \brief Whether the FFN is an MoE (layer_id >= n_dense_layers).
  bool is_moe() const noexcept { return moe_.has_value(); }
  /// \brief Allocates the attention's zero-filled caches for the runtime limits.
  void allocate_caches(const RuntimeOptions& o) { attn_.allocate_caches(o); }

 private:
  int layer_id_ = 0;
  RMSNorm<Backend> attn_norm_;
  MLA<Config, Backend> attn_;
  RMSNorm<Backend> ffn_norm_;
  std::optional<MLP<Backend>> dense_;
  std::optional<MoE<Config, Backend>> moe_;
};

/// @}

}  // namespace dsv32
