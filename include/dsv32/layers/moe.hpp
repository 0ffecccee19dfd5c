/// \file
/// \brief The MoE gate and the Mixture-of-Experts layer (routed experts partitioned over ranks, plus
///        shared experts).
#pragma once

#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/mlp.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief The MoE layer's per-call temporaries (shared by all MoE layers).
template <class Backend>
struct MoeScratch {
  Tensor<float, Backend> logits;           ///< [T, n_routed_experts] f32 gate logits
  Tensor<float, Backend> weights;          ///< [T, n_activated_experts] f32 routing weights
  Tensor<std::int32_t, Backend> experts;   ///< [T, n_activated_experts] chosen expert ids
  Tensor<std::int32_t, Backend> rows;      ///< [T * n_activated_experts] token rows grouped by local expert
  Tensor<float, Backend> row_weights;      ///< [T * n_activated_experts] their routing weights
  Tensor<std::int32_t, Backend> offsets;   ///< [local experts + 1] group boundaries in `rows`
  PinnedBuffer<std::int32_t, Backend> host_offsets;  ///< the offsets read back: one small read per layer
  Tensor<float, Backend> sum;              ///< [T, dim] f32 sum of the expert outputs
  Tensor<bf16, Backend> xe;                ///< [n, dim] the tokens of the expert running
  Tensor<bf16, Backend> ye;                ///< [n, dim] its outputs
  Tensor<bf16, Backend> shared;            ///< [T, dim] the shared experts' output
  MlpScratch<Backend> mlp;                 ///< the experts' MLP temporaries
  // grouped backends only (runs_grouped_experts<Backend>): every (token, slot) pair, R = T k rows
  Tensor<std::uint8_t, Backend> x_codes;   ///< FP8: [T, dim] the tokens' E4M3 codes
  Tensor<float, Backend> x_scales;         ///< FP8: [T, dim / 128]
  Tensor<bf16, Backend> hidden;            ///< [R, moe_inter] the experts' gated hidden rows
  Tensor<std::uint8_t, Backend> h_codes;   ///< FP8: [R, moe_inter]
  Tensor<float, Backend> h_scales;         ///< FP8: [R, moe_inter / 128]
  Tensor<bf16, Backend> expert_out;        ///< [R, dim] the experts' outputs per grouped row
  Tensor<std::int32_t, Backend> tiles;     ///< [local experts + 1] row-tile boundaries
  Tensor<std::int32_t, Backend> order;     ///< [R] each token's grouped rows in expert order

  /// \brief Calls `r(tensor, elements)` with each buffer's largest size under `l`, and sizes the
  ///        pinned offsets (backends that read them) or the grouped call's worst-case buffers.
  template <class R>
  void reserve(R&& r, const ModelArgs& a, const ForwardLimits& l) {
    const std::int64_t T = l.tokens(), k = a.n_activated_experts, local = a.n_routed_experts / l.world_size;
    r(logits, elements(T, a.n_routed_experts));
    r(weights, elements(T, k));
    r(experts, elements(T, k));
    r(rows, elements(T, k));
    r(row_weights, elements(T, k));
    r(offsets, local + 1);
    r(sum, elements(T, a.dim));
    r(shared, a.n_shared_experts > 0 ? elements(T, a.dim) : 0);
    mlp.reserve(r, a, l);
    if constexpr (runs_grouped_experts<Backend>) {
      const bool fp8 = a.dtype == WeightDType::fp8;
      const std::int64_t rows_all = elements(T, k);
      r(x_codes, fp8 ? elements(T, a.dim) : 0);
      r(x_scales, fp8 ? elements(T, a.dim / kBlockSize) : 0);
      r(hidden, elements(rows_all, a.moe_inter_dim));
      r(h_codes, fp8 ? elements(rows_all, a.moe_inter_dim) : 0);
      r(h_scales, fp8 ? elements(rows_all, a.moe_inter_dim / kBlockSize) : 0);
      r(expert_out, elements(rows_all, a.dim));
      r(tiles, local + 1);
      r(order, rows_all);
    } else {
      r(host_offsets, local + 1);
      r(xe, elements(T, a.dim));
      r(ye, elements(T, a.dim));
    }
  }
};

/// \brief The MoE gate: f32 scores x W^T, sigmoid or softmax, optional selection bias, group-limited top-k.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class Gate {
 public:
  using space = space_of<Backend>;  ///< the memory space of activations and weights
  static constexpr std::int64_t kExperts = Config::n_routed_experts;  ///< routed experts scored (all, on every rank)
  static constexpr std::int64_t kTopK = Config::n_activated_experts;  ///< experts chosen per token

  /// \brief Binds `<module>.weight` and, with gate_bias, `<module>.bias`.
  /// \param store the model's parameters \param module e.g. `layers.1.ffn.gate`
  Gate(ParameterStore<Backend>& store, const std::string& module)
      : weight_(store, module), bias_(ConfigTraits<Config>::has_gate_bias ? &store.use(module + ".bias") : nullptr) {}

  /// \param ctx     the call
  /// \param x       [T, dim]
  /// \param logits  [T, n_routed_experts] f32 scratch
  /// \param weights [T, n_activated_experts] f32
  /// \param experts [T, n_activated_experts]
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, Tensor<float, Backend>& logits,
               MatrixView<float, space> weights, MatrixView<std::int32_t, space> experts) const {
    logits.resize(Shape{x.rows, kExperts});
    weight_.forward_f32(ctx, x, logits.mat());
    RoutingParams p;
    p.score_func = Config::score_func;
    p.n_groups = Config::n_expert_groups;
    p.n_limited_groups = Config::n_limited_groups;
    p.top_k = kTopK;
    p.route_scale = static_cast<float>(Config::route_scale);
    Kernels<Backend>::route(*ctx.exec, logits.mat(), bias_ ? bias_->template vec<float>() : VectorView<const float, space>(),
                            p, weights, experts);
  }

 private:
  Linear<Backend> weight_;
  const Parameter<Backend>* bias_ = nullptr;
};

/// \brief Mixture of Experts: the gate routes each token to n_activated_experts routed experts; their
///        outputs, weighted, plus the shared experts' are summed in f32 and rounded to bf16 once.
///
/// The dispatch is planned on the backend (Kernels::moe_plan(): token rows grouped by expert). A
/// backend that runs grouped experts (runs_grouped_experts: the CUDA backend) then computes every
/// expert in one call that reads the plan in its own memory, sized for the worst case, and nothing
/// comes back to the host; the others (the CPU backend) read the group offsets back once per layer —
/// local experts + 1 integers — to run each expert that has tokens on exactly those rows.
/// \tparam Config  compile-time config
/// \tparam Backend backend tag
template <class Config, class Backend>
class MoE {
  static constexpr std::int64_t kTopK = Config::n_activated_experts;

 public:
  using space = space_of<Backend>;  ///< the memory space of activations and weights

  /// \brief Binds the gate, this rank's routed experts [rank * n / world, (rank + 1) * n / world) and
  ///        its part of the shared experts from the model's parameters.
  /// \param store the model's parameters \param module e.g. `layers.1.ffn` \param par this rank's place
  MoE(ParameterStore<Backend>& store, const std::string& module, const Parallel& par)
      : n_local_(Config::n_routed_experts / par.world_size),
        first_(par.rank * n_local_),
        gate_(store, module + ".gate") {
    experts_.reserve(static_cast<std::size_t>(n_local_));
    for (std::int64_t e = 0; e < n_local_; ++e)
      experts_.emplace_back(store, module + ".experts." + std::to_string(first_ + e), Config::scale_fmt);
    if constexpr (Config::n_shared_experts > 0) shared_.emplace_back(store, module + ".shared_experts", Config::scale_fmt);
  }

  /// \brief Writes the table of this rank's expert weights (ExpertPointers) into backend memory, for
  ///        backends that run grouped experts; nothing otherwise. Called once the weights are bound
  ///        (Block::allocate_caches(), after every load), so that forward() only reads it.
  /// \throws Error(unsupported) when the experts differ in dtype or shape
  void prepare_experts() {
    if constexpr (runs_grouped_experts<Backend>) {
      std::vector<ExpertPointers> host(static_cast<std::size_t>(n_local_));
      const WeightView<space> first = experts_.front().w1().view();
      for (std::int64_t e = 0; e < n_local_; ++e) {
        const MLP<Backend>& m = experts_[static_cast<std::size_t>(e)];
        const WeightView<space> w1 = m.w1().view(), w3 = m.w3().view(), w2 = m.w2().view();
        DSV32_CHECK(w1.dtype == first.dtype && w3.dtype == first.dtype && w2.dtype == first.dtype &&
                        w1.out == Config::moe_inter_dim && w1.in == Config::dim && w3.out == w1.out && w3.in == w1.in &&
                        w2.out == Config::dim && w2.in == Config::moe_inter_dim,
                    unsupported, "MoE: expert ", first_ + e, "'s weights differ in dtype or shape from expert ", first_,
                    "'s (a grouped expert call needs one dtype and [", Config::moe_inter_dim, ", ", Config::dim,
                    "] / [", Config::dim, ", ", Config::moe_inter_dim, "] shapes)");
        host[static_cast<std::size_t>(e)] = ExpertPointers{w1.data, w1.scale, w3.data, w3.scale, w2.data, w2.scale};
      }
      table_ = Tensor<ExpertPointers, Backend>(Shape{n_local_});
      Memory<Backend>::copy_from_host(table_.data(), host.data(), table_.bytes());
      group_ = ExpertGroupView<space>{table_.data(), n_local_, first.dtype, Config::dim, Config::moe_inter_dim,
                                      Config::scale_fmt};
    }
  }

  /// \brief Routes, runs this rank's experts on their tokens and the shared experts on all, and
  ///        all-reduces the f32 sum before rounding it to bf16 once.
  /// \param ctx the call \param x [T, dim] \param s scratch \param out [T, dim]
  void forward(const ForwardContext<Backend>& ctx, MatrixView<const bf16, space> x, MoeScratch<Backend>& s,
               MatrixView<bf16, space> out) const {
    using K = Kernels<Backend>;
    auto& exec = *ctx.exec;
    const std::int64_t T = x.rows;
    s.weights.resize(Shape{T, kTopK});
    s.experts.resize(Shape{T, kTopK});
    gate_.forward(ctx, x, s.logits, s.weights.mat(), s.experts.mat());
    if (ctx.observer)
      with_host_view(ctx, s.weights.mat(), [&](MatrixView<const float> w) {
        with_host_view(ctx, s.experts.mat(), [&](MatrixView<const std::int32_t> e) { ctx.observer->on_gate(ctx.layer, w, e); });
      });

    // tokens grouped by expert on the backend; only the group offsets come back to the host
    s.rows.resize(Shape{T * kTopK});
    s.row_weights.resize(Shape{T * kTopK});
    s.offsets.resize(Shape{n_local_ + 1});
    K::moe_plan(exec, s.experts.mat(), s.weights.mat(), first_, s.rows.vec(), s.row_weights.vec(), s.offsets.vec());
    if constexpr (runs_grouped_experts<Backend>) {
      routed_grouped(exec, x, s);
    } else {
      Memory<Backend>::copy_to_host_async(exec, s.host_offsets.data(), s.offsets.data(), s.offsets.bytes());
      s.sum.resize(Shape{T, Config::dim});
      Memory<Backend>::zero_async(exec, s.sum.data(), s.sum.bytes());
      Memory<Backend>::synchronize(exec);

      for (std::int64_t e = 0; e < n_local_; ++e) {
        const std::int64_t begin = s.host_offsets[static_cast<std::size_t>(e)];
        const std::int64_t n = s.host_offsets[static_cast<std::size_t>(e) + 1] - begin;
        if (n == 0) continue;
        s.xe.resize(Shape{n, Config::dim});
        s.ye.resize(Shape{n, Config::dim});
        const VectorView<const std::int32_t, space> rows = s.rows.vec().subview(begin, n);
        K::gather_rows(exec, x, rows, s.xe.mat());
        experts_[static_cast<std::size_t>(e)].forward(ctx, s.xe.mat(), s.mlp, s.ye.mat());
        K::scatter_add(exec, s.ye.mat(), rows, s.row_weights.vec().subview(begin, n), s.sum.mat());
      }
    }
    if constexpr (Config::n_shared_experts > 0) {
      s.shared.resize(Shape{T, Config::dim});
      shared_.front().forward(ctx, x, s.mlp, s.shared.mat());
      K::scatter_add(exec, s.shared.mat(), {}, {}, s.sum.mat());
    }
    ctx.all_reduce_sum(s.sum.vec());
    K::round_to_bf16(exec, s.sum.mat(), out);
  }

  /// \brief The routed experts this rank holds: [first, first + count).
  std::int64_t first_expert() const noexcept { return first_; }
  /// \brief How many routed experts this rank holds.
  std::int64_t local_experts() const noexcept { return n_local_; }

 private:
  // Every routed expert on its rows in one grouped call, for the worst case of T k rows: the plan
  // stays in backend memory, nothing is read on the host, no synchronization.
  void routed_grouped(ExecutionContext<Backend>& exec, MatrixView<const bf16, space> x, MoeScratch<Backend>& s) const {
    DSV32_CHECK(group_.table != nullptr, state, "MoE: the expert table was not prepared (prepare_experts() runs when "
                "the weights are complete)");
    const std::int64_t T = x.rows, R = T * kTopK, inter = Config::moe_inter_dim;
    const bool fp8 = group_.dtype == DType::F8_E4M3;
    s.sum.resize(Shape{T, Config::dim});
    Memory<Backend>::zero_async(exec, s.sum.data(), s.sum.bytes());
    s.hidden.resize(Shape{R, inter});
    s.expert_out.resize(Shape{R, Config::dim});
    s.tiles.resize(Shape{n_local_ + 1});
    s.order.resize(Shape{R});
    ExpertGroupScratch<space> g;
    g.hidden = s.hidden.mat();
    g.out = s.expert_out.mat();
    g.tiles = s.tiles.vec();
    g.order = s.order.vec();
    if (fp8) {
      s.x_codes.resize(Shape{T, Config::dim});
      s.x_scales.resize(Shape{T, Config::dim / kBlockSize});
      s.h_codes.resize(Shape{R, inter});
      s.h_scales.resize(Shape{R, inter / kBlockSize});
      g.x_codes = s.x_codes.mat();
      g.x_scales = s.x_scales.mat();
      g.h_codes = s.h_codes.mat();
      g.h_scales = s.h_scales.mat();
    }
    Kernels<Backend>::expert_mlp_grouped(exec, x, s.experts.mat(), first_, group_, s.rows.vec(), s.row_weights.vec(),
                                         s.offsets.vec(), g, s.sum.mat());
  }

  std::int64_t n_local_ = Config::n_routed_experts;
  std::int64_t first_ = 0;
  Gate<Config, Backend> gate_;
  std::vector<MLP<Backend>> experts_;
  std::vector<MLP<Backend>> shared_;  // one MLP, or none without shared experts
  Tensor<ExpertPointers, Backend> table_;  // [n_local] grouped backends: the experts' weights (prepare_experts())
  ExpertGroupView<space> group_;           // the table as kernels take it
};

/// @}

}  // namespace dsv32
