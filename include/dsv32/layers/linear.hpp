/// \file
/// \brief Linear: y = x W^T with bf16, f32 or FP8 (E4M3 + 128x128 block scales) weights.
#pragma once

#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/weight_view.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/parameter.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief How a linear's output combines across model-parallel ranks.
enum class Reduce {
  none,     ///< local result is final (column-parallel or replicated)
  sum,      ///< row-parallel: the partial outputs are summed in f32, then rounded to bf16
};

/// \brief A linear layer without bias, like the reference's Linear / ColumnParallelLinear /
///        RowParallelLinear (the caller passes local feature counts).
/// \tparam Backend backend tag
template <class Backend>
class Linear {
 public:
  Linear() = default;
  /// \param in, out local feature counts
  /// \param dtype   weight dtype: BF16, F32, or F8_E4M3 (then with an F32 scale [ceil(out/128), ceil(in/128)])
  /// \param fmt     activation scale format for FP8 weights
  /// \param reduce  Reduce::sum for a row-parallel layer: forward() all-reduces its output
  Linear(std::int64_t in, std::int64_t out, DType dtype, ScaleFmt fmt = ScaleFmt::none, Reduce reduce = Reduce::none)
      : weight_(dtype, Shape{out, in}), fmt_(fmt), reduce_(reduce) {
    if (dtype == DType::F8_E4M3)
      scale_ = Parameter<Backend>(DType::F32, Shape{(out + kBlockSize - 1) / kBlockSize, (in + kBlockSize - 1) / kBlockSize});
  }

  /// \brief Local input features (columns of the weight).
  std::int64_t in_features() const noexcept { return weight_.shape()[1]; }
  /// \brief Local output features (rows of the weight).
  std::int64_t out_features() const noexcept { return weight_.shape()[0]; }
  /// \brief Whether the weight is F8_E4M3 (and a `scale` parameter exists).
  bool fp8() const noexcept { return weight_.dtype() == DType::F8_E4M3; }

  /// \brief The weight as kernels take it.
  WeightView view() const {
    return WeightView{weight_.dtype(), weight_.data(), out_features(), in_features(),
                      fp8() ? scale_.template as<float>() : nullptr};
  }

  /// \brief y = bf16(x W^T), then the cross-rank reduction of a row-parallel layer.
  /// \param ctx the call (its Parallel carries the reduction)
  /// \param x [M, in] bf16
  /// \param y [M, out] bf16
  void forward(const ForwardContext& ctx, MatrixView<const bf16> x, MatrixView<bf16> y) const {
    Kernels<Backend>::linear(x, view(), fmt_, y);
    if (reduce_ == Reduce::sum && ctx.parallel.world_size > 1) {
      Tensor<float, Backend> wide(Shape{y.rows, y.cols});
      Kernels<Backend>::widen_to_f32(y, wide.mat());
      ctx.parallel.all_reduce_sum(wide.data(), static_cast<std::size_t>(wide.numel()));
      Kernels<Backend>::round_to_bf16(wide.mat(), y);
    }
  }

  /// \brief y = f32(x) f32(W)^T (no rounding to bf16).
  /// \param x [M, in] bf16
  /// \param y [M, out] f32
  void forward_f32(MatrixView<const bf16> x, MatrixView<float> y) const { Kernels<Backend>::linear_f32(x, view(), y); }

  /// \brief Visits `prefix + "weight"` (and `prefix + "scale"` for FP8).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    f(prefix + "weight", weight_);
    if (fp8()) f(prefix + "scale", scale_);
  }

 private:
  Parameter<Backend> weight_;
  Parameter<Backend> scale_;
  ScaleFmt fmt_ = ScaleFmt::none;
  Reduce reduce_ = Reduce::none;
};

/// \brief RMSNorm (eps 1e-6) with an f32 weight; the fused-residual form is the reference's
///        `norm(x, residual)`.
/// \tparam Backend backend tag
template <class Backend>
class RMSNorm {
 public:
  RMSNorm() = default;
  /// \param dim normalized width \param eps added to the mean square
  explicit RMSNorm(std::int64_t dim, float eps = 1e-6f) : weight_(DType::F32, Shape{dim}), eps_(eps) {}

  /// \param x [rows, dim] \param y [rows, dim] (may alias x)
  void forward(MatrixView<const bf16> x, MatrixView<bf16> y) const {
    Kernels<Backend>::rms_norm(x, weight_.template as<float>(), eps_, y);
  }
  /// \param x [rows, dim] \param residual [rows, dim] updated to bf16(x + residual) \param y [rows, dim]
  void forward(MatrixView<const bf16> x, MatrixView<bf16> residual, MatrixView<bf16> y) const {
    Kernels<Backend>::rms_norm_residual(x, residual, weight_.template as<float>(), eps_, y);
  }
  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`weight`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) { f(prefix + "weight", weight_); }

 private:
  Parameter<Backend> weight_;
  float eps_ = 1e-6f;
};

/// \brief LayerNorm (eps 1e-6) with f32 weight and bias (the indexer's k_norm).
/// \tparam Backend backend tag
template <class Backend>
class LayerNorm {
 public:
  LayerNorm() = default;
  /// \param dim normalized width \param eps added to the variance
  explicit LayerNorm(std::int64_t dim, float eps = 1e-6f)
      : weight_(DType::F32, Shape{dim}), bias_(DType::F32, Shape{dim}), eps_(eps) {}

  /// \param x [rows, dim] \param y [rows, dim] (may alias x)
  void forward(MatrixView<const bf16> x, MatrixView<bf16> y) const {
    Kernels<Backend>::layer_norm(x, weight_.template as<float>(), bias_.template as<float>(), eps_, y);
  }
  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`weight`, `bias`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    f(prefix + "weight", weight_);
    f(prefix + "bias", bias_);
  }

 private:
  Parameter<Backend> weight_, bias_;
  float eps_ = 1e-6f;
};

/// \brief Token embedding, split over ranks by vocabulary like the reference's ParallelEmbedding.
/// \tparam Backend backend tag
template <class Backend>
class Embedding {
 public:
  Embedding() = default;
  /// \param vocab vocab_size; this rank holds rows [rank * vocab / world, (rank + 1) * vocab / world)
  /// \param dim   embedding width
  /// \param par   this rank's place; vocab must divide evenly (else Error(invalid_argument))
  Embedding(std::int64_t vocab, std::int64_t dim, const Parallel& par)
      : weight_(DType::BF16, Shape{par.split(vocab, "vocab_size"), dim}),
        first_id_(par.rank * par.split(vocab, "vocab_size")) {}

  /// \brief Looks the tokens up; with several ranks each fills its rows and the all-reduce sums them.
  /// \param ctx the call (its Parallel carries the reduction)
  /// \param tokens [n] ids (validated by the caller), in the backend's memory
  /// \param n      tokens
  /// \param out    [n, dim]
  void forward(const ForwardContext& ctx, const std::int32_t* tokens, std::int64_t n, MatrixView<bf16> out) const {
    const Shape& s = weight_.shape();
    Kernels<Backend>::embedding(tokens, n, {weight_.template as<bf16>(), s[0], s[1], s[1]}, first_id_, out);
    if (ctx.parallel.world_size > 1) {  // exactly one rank holds each row: the sum is exact
      Tensor<float, Backend> wide(Shape{out.rows, out.cols});
      Kernels<Backend>::widen_to_f32(out, wide.mat());
      ctx.parallel.all_reduce_sum(wide.data(), static_cast<std::size_t>(wide.numel()));
      Kernels<Backend>::round_to_bf16(wide.mat(), out);
    }
  }
  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`weight`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) { f(prefix + "weight", weight_); }

 private:
  Parameter<Backend> weight_;
  std::int64_t first_id_ = 0;
};

/// @}

}  // namespace dsv32
