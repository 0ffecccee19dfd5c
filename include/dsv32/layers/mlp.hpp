/// \file
/// \brief MLP: the gated feed-forward network of dense layers, routed experts and shared experts.
#pragma once

#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief out = w2(bf16(silu(f32(w1 x)) * f32(w3 x))).
///
/// Dense MLPs and shared experts split inter_dim over ranks (w1, w3 column-parallel, w2
/// row-parallel); routed experts are whole on the rank that owns them.
/// \tparam Backend backend tag
template <class Backend>
class MLP {
 public:
  /// \brief Per-call temporaries.
  struct Scratch {
    Tensor<bf16, Backend> h1;  ///< [M, inter]: w1 x, then the gated activation
    Tensor<bf16, Backend> h3;  ///< [M, inter]: w3 x
  };

  MLP() = default;
  /// \param dim        model dimension
  /// \param inter      local hidden dimension
  /// \param dtype      weight dtype (BF16 or F8_E4M3)
  /// \param fmt        activation scale format for FP8 weights
  /// \param reduce     whether w2's partial outputs are summed over ranks here
  MLP(std::int64_t dim, std::int64_t inter, DType dtype, ScaleFmt fmt, Reduce reduce)
      : w1_(dim, inter, dtype, fmt), w2_(inter, dim, dtype, fmt, reduce), w3_(dim, inter, dtype, fmt) {}

  /// \param ctx the call \param x [M, dim] \param s scratch \param out [M, dim]
  void forward(const ForwardContext& ctx, MatrixView<const bf16> x, Scratch& s, MatrixView<bf16> out) const {
    const std::int64_t inter = w1_.out_features();
    s.h1.resize(Shape{x.rows, inter});
    s.h3.resize(Shape{x.rows, inter});
    w1_.forward(ctx, x, s.h1.mat());
    w3_.forward(ctx, x, s.h3.mat());
    Kernels<Backend>::silu_mul(s.h1.mat(), s.h3.mat(), s.h1.mat());
    w2_.forward(ctx, s.h1.mat(), out);
  }

  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`w1.weight`, `w2.weight`, `w3.weight`, and their `.scale` for FP8).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    w1_.visit(prefix + "w1.", f);
    w2_.visit(prefix + "w2.", f);
    w3_.visit(prefix + "w3.", f);
  }

 private:
  Linear<Backend> w1_, w2_, w3_;
};

/// @}

}  // namespace dsv32
