/// \file
/// \brief Linear: y = x W^T with bf16, f32 or FP8 (E4M3 + 128x128 block scales) weights; RMSNorm,
///        LayerNorm and the vocabulary-split Embedding.
///
/// Each layer binds its parameters by name from the model's ParameterStore (the tensor table says
/// their dtypes, shapes and how their outputs combine over ranks).
#pragma once

#include <string>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/weights/parameter.hpp"

namespace dsv32 {

/// \defgroup layers Layers
/// \brief The model's modules, templated on the compile-time config and the backend.
/// @{

/// \brief A linear layer without bias, like the reference's Linear / ColumnParallelLinear /
///        RowParallelLinear: its weight's local shape is this rank's part, and Reduce::sum in the
///        weight's table row makes forward() sum the outputs over ranks.
/// \tparam Backend backend tag
template <class Backend>
class Linear {
 public:
  using space = space_of<Backend>;  ///< the memory space of inputs, outputs and weights

  Linear() = default;
  /// \brief Binds `<module>.weight` (and `<module>.scale` for FP8) from the model's parameters.
  /// \param store  the model's parameters
  /// \param module the layer's name in the tensor table, e.g. `layers.0.attn.wq_a`
  /// \param fmt    activation scale format for FP8 weights
  Linear(ParameterStore<Backend>& store, const std::string& module, ScaleFmt fmt = ScaleFmt::none)
      : weight_(&store.use(module + ".weight")),
        scale_(weight_->dtype() == DType::F8_E4M3 ? &store.use(module + ".scale") : nullptr),
        fmt_(fmt) {}

  /// \brief Local input features (columns of the weight).
  std::int64_t in_features() const noexcept { return weight_->shape()[1]; }
  /// \brief Local output features (rows of the weight).
  std::int64_t out_features() const noexcept { return weight_->shape()[0]; }
  /// \brief Whether the weight is F8_E4M3 (and a `scale` parameter exists).
  bool fp8() const noexcept { return scale_ != nullptr; }
  /// \brief How the outputs combine over ranks (the weight's table row).
  Reduce reduce() const noexcept { return weight_->spec().reduce; }

  /// \brief The weight as kernels take it.
  WeightView<space> view() const {
    return WeightView<space>{weight_->dtype(), weight_->data(), out_features(), in_features(),
                             fp8() ? scale_->template as<float>() : nullptr};
  }

  /// \brief y = bf16(x W^T), then the cross-rank sum of a row-parallel layer (in f32, rounded once).
  /// \param ctx the call (its communicator and f32 scratch carry the reduction)
  /// \param x [M, in] bf16
  /// \param y [M, out] bf16
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<bf16, space> y) const {
    Kernels<Backend>::linear(*ctx.exec, x, view(), fmt_, y);
    if (reduce() == Reduce::sum && ctx.parallel.world_size > 1) {
      ctx.reduce->resize(Shape{y.rows, y.cols});
      Kernels<Backend>::widen_to_f32(*ctx.exec, y, ctx.reduce->mat());
      ctx.all_reduce_sum(ctx.reduce->vec());
      Kernels<Backend>::round_to_bf16(*ctx.exec, ctx.reduce->mat(), y);
    }
  }

  /// \brief y = f32(x) f32(W)^T (no rounding to bf16, no reduction).
  /// \param ctx the call
  /// \param x [M, in] bf16
  /// \param y [M, out] f32
  void forward_f32(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<float, space> y) const {
    Kernels<Backend>::linear_f32(*ctx.exec, x, view(), y);
  }

 private:
  const Parameter<Backend>* weight_ = nullptr;
  const Parameter<Backend>* scale_ = nullptr;
  ScaleFmt fmt_ = ScaleFmt::none;
};

/// \brief RMSNorm (eps 1e-6) with an f32 weight; the fused-residual form is the reference's
///        `norm(x, residual)`.
/// \tparam Backend backend tag
template <class Backend>
class RMSNorm {
 public:
  using space = space_of<Backend>;  ///< the memory space of inputs, outputs and weights

  RMSNorm() = default;
  /// \brief Binds `<module>.weight`. \param store the model's parameters \param module e.g. `layers.0.attn_norm`
  /// \param eps added to the mean square
  RMSNorm(ParameterStore<Backend>& store, const std::string& module, float eps = 1e-6f)
      : weight_(&store.use(module + ".weight")), eps_(eps) {}

  /// \param ctx the call \param x [rows, dim] \param y [rows, dim] (may alias x)
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<bf16, space> y) const {
    Kernels<Backend>::rms_norm(*ctx.exec, x, weight_->template vec<float>(), eps_, y);
  }
  /// \param ctx the call \param x [rows, dim] \param residual [rows, dim] updated to bf16(x + residual)
  /// \param y [rows, dim]
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<bf16, space> residual,
               MatrixView<bf16, space> y) const {
    Kernels<Backend>::rms_norm_residual(*ctx.exec, x, residual, weight_->template vec<float>(), eps_, y);
  }

 private:
  const Parameter<Backend>* weight_ = nullptr;
  float eps_ = 1e-6f;
};

/// \brief LayerNorm (eps 1e-6) with f32 weight and bias (the indexer's k_norm).
/// \tparam Backend backend tag
template <class Backend>
class LayerNorm {
 public:
  using space = space_of<Backend>;  ///< the memory space of inputs, outputs and weights

  LayerNorm() = default;
  /// \brief Binds `<module>.weight` and `<module>.bias`. \param store the model's parameters
  /// \param module e.g. `layers.0.attn.indexer.k_norm` \param eps added to the variance
  LayerNorm(ParameterStore<Backend>& store, const std::string& module, float eps = 1e-6f)
      : weight_(&store.use(module + ".weight")), bias_(&store.use(module + ".bias")), eps_(eps) {}

  /// \param ctx the call \param x [rows, dim] \param y [rows, dim] (may alias x)
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MatrixView<bf16, space> y) const {
    Kernels<Backend>::layer_norm(*ctx.exec, x, weight_->template vec<float>(), bias_->template vec<float>(), eps_, y);
  }

 private:
  const Parameter<Backend>* weight_ = nullptr;
  const Parameter<Backend>* bias_ = nullptr;
  float eps_ = 1e-6f;
};

/// \brief Token embedding, split over ranks by vocabulary like the reference's ParallelEmbedding.
/// \tparam Backend backend tag
template <class Backend>
class Embedding {
 public:
  using space = space_of<Backend>;  ///< the memory space of the ids, the table and the output

  Embedding() = default;
  /// \brief Binds `<module>.weight` ([vocab / world, dim] on this rank).
  /// \param store the model's parameters \param module `embed` \param rank this rank: it holds ids
  ///        [rank * rows, (rank + 1) * rows)
  Embedding(ParameterStore<Backend>& store, const std::string& module, int rank)
      : weight_(&store.use(module + ".weight")), first_id_(rank * weight_->shape()[0]) {}

  /// \brief Looks the tokens up; with several ranks each fills its rows and the all-reduce sums them
  ///        (in bf16: exactly one rank holds each row, so the sum is exact).
  /// \param ctx    the call
  /// \param tokens [n] ids (validated by the caller), in the backend's memory
  /// \param out    [n, dim]
  void forward(const ForwardContext<Backend>& ctx, VectorView<const std::int32_t, space> tokens,
               MatrixView<bf16, space> out) const {
    Kernels<Backend>::embedding(*ctx.exec, tokens, weight_->template mat<bf16>(), first_id_, out);
    ctx.all_reduce_sum(VectorView<bf16, space>(out.data, out.rows * out.cols));
  }

 private:
  const Parameter<Backend>* weight_ = nullptr;
  std::int64_t first_id_ = 0;
};

/// @}

}  // namespace dsv32
