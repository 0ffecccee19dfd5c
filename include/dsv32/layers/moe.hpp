/// \file
/// \brief The MoE gate and the Mixture-of-Experts layer (routed experts partitioned over ranks, plus
///        shared experts).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/mlp.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief The MoE gate: f32 scores x W^T, sigmoid or softmax, optional selection bias, group-limited top-k.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class Gate {
 public:
  static constexpr std::int64_t kExperts = Config::n_routed_experts;  ///< routed experts scored (all, on every rank)
  static constexpr std::int64_t kTopK = Config::n_activated_experts;  ///< experts chosen per token

  Gate() : weight_(Config::dim, kExperts, DType::BF16) {
    if constexpr (ConfigTraits<Config>::has_gate_bias) bias_ = Parameter<Backend>(DType::F32, Shape{kExperts});
  }

  /// \param x       [T, dim]
  /// \param logits  [T, n_routed_experts] f32 scratch
  /// \param weights [T, n_activated_experts] f32
  /// \param experts [T, n_activated_experts]
  void forward(MatrixView<const bf16> x, Tensor<float, Backend>& logits, MatrixView<float> weights,
               MatrixView<std::int32_t> experts) const {
    logits.resize(Shape{x.rows, kExperts});
    weight_.forward_f32(x, logits.mat());
    typename Kernels<Backend>::RoutingParams p;
    p.score_func = Config::score_func;
    p.n_groups = Config::n_expert_groups;
    p.n_limited_groups = Config::n_limited_groups;
    p.top_k = kTopK;
    p.route_scale = static_cast<float>(Config::route_scale);
    Kernels<Backend>::route(logits.mat(), ConfigTraits<Config>::has_gate_bias ? bias_.template as<float>() : nullptr, p,
                            weights, experts);
  }

  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`weight`, and `bias` with gate_bias).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    weight_.visit(prefix, f);
    if constexpr (ConfigTraits<Config>::has_gate_bias) f(prefix + "bias", bias_);
  }

 private:
  Linear<Backend> weight_;
  Parameter<Backend> bias_;
};

/// \brief Mixture of Experts: the gate routes each token to n_activated_experts routed experts; their
///        outputs, weighted, plus the shared experts' are summed in f32 and rounded to bf16 once.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class MoE {
  static constexpr DType kWeightDType = ConfigTraits<Config>::fp8 ? DType::F8_E4M3 : DType::BF16;
  static constexpr std::int64_t kTopK = Config::n_activated_experts;

 public:
  /// \brief Per-call temporaries.
  struct Scratch {
    Tensor<float, Backend> logits;         ///< [T, n_routed_experts] f32 gate logits
    Tensor<float, Backend> weights;        ///< [T, n_activated_experts] f32 routing weights
    Tensor<float, Backend> sum;            ///< [T, dim] f32 sum of the expert outputs
    Tensor<std::int32_t, Backend> experts; ///< [T, n_activated_experts] chosen expert ids
    Tensor<std::int32_t, Backend> rows;    ///< [n] the token rows routed to the expert running
    Tensor<float, Backend> row_weights;    ///< [n] their routing weights
    Tensor<bf16, Backend> xe;              ///< [n, dim] those tokens' inputs
    Tensor<bf16, Backend> ye;              ///< [n, dim] the expert's outputs
    Tensor<bf16, Backend> shared;          ///< [T, dim] the shared experts' output
    typename MLP<Backend>::Scratch mlp;    ///< the experts' MLP temporaries
  };

  /// \brief This rank's slice: routed experts [rank * n / world, (rank + 1) * n / world) whole, and
  ///        1 / world of the shared experts' hidden width.
  /// \param par this rank's place; n_routed_experts and n_shared_experts * moe_inter_dim must divide
  ///            evenly by the world size (else Error(invalid_argument))
  explicit MoE(const Parallel& par)
      : n_local_(par.split(Config::n_routed_experts, "n_routed_experts")),
        first_(par.rank * n_local_),
        shared_(Config::dim, par.split(Config::n_shared_experts * Config::moe_inter_dim, "n_shared_experts * moe_inter_dim"),
                kWeightDType, Config::scale_fmt, Reduce::none) {
    experts_.reserve(static_cast<std::size_t>(n_local_));
    for (std::int64_t e = 0; e < n_local_; ++e)
      experts_.emplace_back(Config::dim, Config::moe_inter_dim, kWeightDType, Config::scale_fmt, Reduce::none);
  }

  /// \brief Routes, runs this rank's experts on their tokens and the shared experts on all, and
  ///        all-reduces the f32 sum before rounding it to bf16 once.
  /// \param ctx the call \param x [T, dim] \param s scratch \param out [T, dim]
  void forward(const ForwardContext& ctx, MatrixView<const bf16> x, Scratch& s, MatrixView<bf16> out) const {
    using K = Kernels<Backend>;
    const std::int64_t T = x.rows;
    s.weights.resize(Shape{T, kTopK});
    s.experts.resize(Shape{T, kTopK});
    gate_.forward(x, s.logits, s.weights.mat(), s.experts.mat());
    if (ctx.observer) ctx.observer->on_gate(ctx.layer, s.weights.mat(), s.experts.mat());

    // group the (token, slot) pairs by expert on the host: the routing is a few ints per token
    std::vector<std::int32_t> experts(static_cast<std::size_t>(T * kTopK));
    std::vector<float> weights(experts.size());
    Memory<Backend>::copy_to_host(experts.data(), s.experts.data(), experts.size() * sizeof(std::int32_t));
    Memory<Backend>::copy_to_host(weights.data(), s.weights.data(), weights.size() * sizeof(float));
    std::vector<std::vector<std::int32_t>> tokens_of(static_cast<std::size_t>(n_local_));
    std::vector<std::vector<float>> weights_of(static_cast<std::size_t>(n_local_));
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t k = 0; k < kTopK; ++k) {
        const std::int64_t e = experts[t * kTopK + k] - first_;
        if (e < 0 || e >= n_local_) continue;
        tokens_of[e].push_back(static_cast<std::int32_t>(t));
        weights_of[e].push_back(weights[t * kTopK + k]);
      }

    s.sum.resize(Shape{T, Config::dim});
    Memory<Backend>::zero(s.sum.data(), s.sum.bytes());
    for (std::int64_t e = 0; e < n_local_; ++e) {
      const std::int64_t n = static_cast<std::int64_t>(tokens_of[e].size());
      if (n == 0) continue;
      s.rows.resize(Shape{n});
      s.row_weights.resize(Shape{n});
      Memory<Backend>::copy_from_host(s.rows.data(), tokens_of[e].data(), n * sizeof(std::int32_t));
      Memory<Backend>::copy_from_host(s.row_weights.data(), weights_of[e].data(), n * sizeof(float));
      s.xe.resize(Shape{n, Config::dim});
      s.ye.resize(Shape{n, Config::dim});
      K::gather_rows(x, s.rows.data(), n, s.xe.mat());
      experts_[e].forward(ctx, s.xe.mat(), s.mlp, s.ye.mat());
      K::scatter_add(s.ye.mat(), s.rows.data(), s.row_weights.data(), s.sum.mat());
    }
    if constexpr (Config::n_shared_experts > 0) {
      s.shared.resize(Shape{T, Config::dim});
      shared_.forward(ctx, x, s.mlp, s.shared.mat());
      K::scatter_add(s.shared.mat(), nullptr, nullptr, s.sum.mat());
    }
    ctx.parallel.all_reduce_sum(s.sum.data(), static_cast<std::size_t>(s.sum.numel()));
    K::round_to_bf16(s.sum.mat(), out);
  }

  /// \brief Calls `f(prefix + name, parameter)` for each of this layer's parameters, under its
  ///        checkpoint name (`gate.*`, `experts.E.*` for this rank's E, `shared_experts.*`).
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(const std::string& prefix, F&& f) {
    gate_.visit(prefix + "gate.", f);
    for (std::int64_t e = 0; e < n_local_; ++e)
      experts_[e].visit(prefix + "experts." + std::to_string(first_ + e) + ".", f);
    if constexpr (Config::n_shared_experts > 0) shared_.visit(prefix + "shared_experts.", f);
  }

  /// \brief The routed experts this rank holds: [first, first + count).
  std::int64_t first_expert() const noexcept { return first_; }
  /// \brief How many routed experts this rank holds.
  std::int64_t local_experts() const noexcept { return n_local_; }

 private:
  std::int64_t n_local_ = Config::n_routed_experts;
  std::int64_t first_ = 0;
  Gate<Config, Backend> gate_;
  std::vector<MLP<Backend>> experts_;
  MLP<Backend> shared_;
};

/// @}

}  // namespace dsv32
