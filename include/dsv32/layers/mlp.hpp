/// \file
/// \brief MLP: the gated feed-forward network of dense layers, routed experts and shared experts.
#pragma once

#include <algorithm>
#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief An MLP's per-call temporaries (shared by the dense MLPs, the experts and the shared experts).
template <class Backend>
struct MlpScratch {
  Tensor<bf16, Backend> h1;  ///< [M, inter]: w1 x, then the gated activation
  Tensor<bf16, Backend> h3;  ///< [M, inter]: w3 x

  /// \brief Calls `r(tensor, elements)` with each buffer's largest size under `l`: M up to the tokens
  ///        of a pass, inter the widest local hidden size (dense, routed or shared experts).
  template <class R>
  void reserve(R&& r, const ModelArgs& a, const ForwardLimits& l) {
    const bool dense = a.n_dense_layers > 0, moe = a.n_layers > a.n_dense_layers;
    std::int64_t inter = 0;
    if (dense) inter = std::max(inter, a.inter_dim / l.world_size);
    if (moe) inter = std::max({inter, a.moe_inter_dim, a.n_shared_experts * a.moe_inter_dim / l.world_size});
    r(h1, elements(l.tokens(), inter));
    r(h3, elements(l.tokens(), inter));
  }
};

/// \brief out = w2(bf16(silu(f32(w1 x)) * f32(w3 x))).
///
/// Dense MLPs and shared experts split inter_dim over ranks (w1, w3 column-parallel, w2
/// row-parallel); routed experts are whole on the rank that owns them. Whether w2's outputs are
/// summed over ranks here is w2's table row (dense MLPs: yes; experts: the MoE sums instead).
/// \tparam Backend backend tag
template <class Backend>
class MLP {
 public:
  using space = space_of<Backend>;  ///< the memory space of activations and weights

  /// \brief Binds `<module>.w1`, `.w2`, `.w3` from the model's parameters.
  /// \param store the model's parameters \param module e.g. `layers.0.ffn` or `layers.1.ffn.experts.3`
  /// \param fmt   activation scale format for FP8 weights
  MLP(ParameterStore<Backend>& store, const std::string& module, ScaleFmt fmt)
      : w1_(store, module + ".w1", fmt), w2_(store, module + ".w2", fmt), w3_(store, module + ".w3", fmt) {}

  /// \param ctx the call \param x [M, dim] \param s scratch \param out [M, dim]
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MlpScratch<Backend>& s,
               MatrixView<bf16, space> out) const {
    const std::int64_t inter = w1_.out_features();
    s.h1.resize(Shape{x.rows, inter});
    s.h3.resize(Shape{x.rows, inter});
    w1_.forward(ctx, x, s.h1.mat());
    w3_.forward(ctx, x, s.h3.mat());
    Kernels<Backend>::silu_mul(*ctx.exec, s.h1.mat(), s.h3.mat(), s.h1.mat());
    w2_.forward(ctx, s.h1.mat(), out);
  }

  /// \brief The gate projection w1 [inter, dim] (a grouped expert table reads its weights).
  const Linear<Backend>& w1() const noexcept { return w1_; }
  /// \brief The down projection w2 [dim, inter].
  const Linear<Backend>& w2() const noexcept { return w2_; }
  /// \brief The up projection w3 [inter, dim].
  const Linear<Backend>& w3() const noexcept { return w3_; }

 private:
  Linear<Backend> w1_, w2_, w3_;
};

/// @}

}  // namespace dsv32
