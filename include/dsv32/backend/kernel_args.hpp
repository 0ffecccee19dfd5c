/// \file
/// \brief The argument types of the Kernels contract that are not plain views: WeightView (a weight
///        matrix in its stored dtype with its FP8 block scales), RoutingParams (the gate's fields;
///        route_fields() gives them to route_token()) and the grouped expert call's table and
///        temporaries (ExpertGroupView, ExpertGroupScratch).
#pragma once

#include <cstdint>
#include <type_traits>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/routing.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief A weight matrix in its stored dtype: [out, in] row-major in one memory space.
/// \tparam Space the memory space of `data` and `scale` (Host for the CPU backend)
template <class Space = Host>
struct WeightView {
  using space = Space;  ///< the memory space of the weight and its scales

  DType dtype = DType::BF16;     ///< BF16, F32 or F8_E4M3
  const void* data = nullptr;    ///< [out, in]
  std::int64_t out = 0;          ///< rows: output features
  std::int64_t in = 0;           ///< columns: input features
  const float* scale = nullptr;  ///< F8_E4M3 only: [ceil(out / 128), ceil(in / 128)] block scales

  /// \brief Columns of the scale matrix.
  constexpr std::int64_t scale_cols() const noexcept { return (in + kBlockSize - 1) / kBlockSize; }
  /// \brief Weights of another memory space do not convert (a compile-time error says so).
  template <class S2>
    requires(!std::is_same_v<S2, Space>)
  operator WeightView<S2>() const {  // NOLINT(google-explicit-constructor): exists to fail with a message
    detail::refuse_space_conversion<Space, S2>();
    return {};
  }
};

/// \brief The gate's routing fields, as Kernels<Backend>::route() takes them (from the config).
struct RoutingParams {
  ScoreFunc score_func = ScoreFunc::sigmoid;  ///< score_func
  std::int64_t n_groups = 1;                  ///< n_expert_groups; must divide the number of experts
  std::int64_t n_limited_groups = 1;          ///< n_limited_groups: groups kept per token
  std::int64_t top_k = 1;                     ///< n_activated_experts
  float route_scale = 1.0f;                   ///< route_scale, applied to the final weights
};

/// \brief The fields route_token() takes, from the config's routing fields.
/// \param p the gate's routing fields \return the same fields as RouteFields
inline RouteFields route_fields(const RoutingParams& p) noexcept {
  RouteFields f;
  f.softmax = p.score_func == ScoreFunc::softmax;
  f.n_groups = static_cast<std::int32_t>(p.n_groups);
  f.n_limited_groups = static_cast<std::int32_t>(p.n_limited_groups);
  f.top_k = static_cast<std::int32_t>(p.top_k);
  f.route_scale = p.route_scale;
  return f;
}

/// \brief One routed expert's weights as a grouped expert call reads them: the data and (FP8) block
///        scales of w1, w3 ([inter, dim]) and w2 ([dim, inter]), all in the backend's memory. A layer
///        keeps a table of these in backend memory, so that kernels pick an expert's weights from the
///        plan's offsets without the host.
struct ExpertPointers {
  const void* w1 = nullptr;         ///< [inter, dim]
  const float* w1_scale = nullptr;  ///< FP8: [ceil(inter / 128), dim / 128]
  const void* w3 = nullptr;         ///< [inter, dim]
  const float* w3_scale = nullptr;  ///< FP8: [ceil(inter / 128), dim / 128]
  const void* w2 = nullptr;         ///< [dim, inter]
  const float* w2_scale = nullptr;  ///< FP8: [ceil(dim / 128), inter / 128]
};

/// \brief A rank's routed experts as one grouped call takes them (all of one dtype and shape).
/// \tparam Space the memory space of the table and the weights
template <class Space = Host>
struct ExpertGroupView {
  const ExpertPointers* table = nullptr;  ///< [count] in Space's memory
  std::int64_t count = 0;                 ///< local experts
  DType dtype = DType::BF16;              ///< the weights' dtype: BF16, F32 or F8_E4M3
  std::int64_t dim = 0;                   ///< model dimension (w1's columns)
  std::int64_t inter = 0;                 ///< hidden size (w1's rows)
  ScaleFmt fmt = ScaleFmt::none;          ///< FP8: activation scale format
};

/// \brief The temporaries of one grouped expert call, sized for the worst case (every (token, slot)
///        pair of the call on this rank: T k grouped rows), so that no routing count is needed on the host.
/// \tparam Space the memory space of every buffer
template <class Space = Host>
struct ExpertGroupScratch {
  MatrixView<std::uint8_t, Space> x_codes;   ///< FP8: [T, dim] the tokens' E4M3 codes (one quantization per token)
  MatrixView<float, Space> x_scales;         ///< FP8: [T, dim / 128]
  MatrixView<bf16, Space> hidden;            ///< [T k, inter] bf16(silu(w1 x) * w3 x) per grouped row
  MatrixView<std::uint8_t, Space> h_codes;   ///< FP8: [T k, inter]
  MatrixView<float, Space> h_scales;         ///< FP8: [T k, inter / 128]
  MatrixView<bf16, Space> out;               ///< [T k, dim] w2's output per grouped row
  VectorView<std::int32_t, Space> tiles;     ///< [local experts + 1] row-tile boundaries
  VectorView<std::int32_t, Space> order;     ///< [T k] each token's grouped rows in increasing expert order, -1 after
};

/// \brief Where the tokens of a ragged pass find their cached positions: a paged cache's block table
///        and, per token (query) of the pass, its sequence and position.
///
/// The caches are pools of pages of `page_size` consecutive positions; sequence b's position p lives
/// in cache row `block_table[b][p / page_size] * page_size + p % page_size` (FlashMLA's and vLLM's
/// block table). A query of sequence b at position q sees its sequence's positions [0, q]. The
/// rectangular caches of Transformer::forward(tokens, batch, start_pos) are the case of one page of
/// max_seq_len positions per sequence.
/// \tparam Space the memory space of the arrays (the backend's)
template <class Space = Host>
struct CachePages {
  MatrixView<const std::int32_t, Space> block_table;  ///< [sequences, pages per sequence] page ids
  VectorView<const std::int32_t, Space> sequence;     ///< [T] the block-table row of each query
  VectorView<const std::int32_t, Space> position;     ///< [T] each query's position
  std::int64_t page_size = 0;                         ///< positions per page
  std::int64_t max_visible = 0;  ///< host-side bound: the most positions any query sees (max position + 1)

  /// \brief The queries [first, first + count) with the same table.
  constexpr CachePages rows(std::int64_t first, std::int64_t count) const noexcept {
    return {block_table, sequence.subview(first, count), position.subview(first, count), page_size, max_visible};
  }
};

namespace detail {
// A backend's Kernels<Backend>::grouped_experts (false when it declares none). The CPU backend is
// answered without naming Kernels<Cpu>: the layers' scratch is sized for Cpu (plan_memory<Cpu>()) where its
// kernels' header need not be included, and naming an incomplete Kernels<Cpu> would hit the primary
// template's static_assert.
template <class Backend>
struct GroupedExperts : std::bool_constant<requires { requires Kernels<Backend>::grouped_experts; }> {};
template <>
struct GroupedExperts<Cpu> : std::false_type {};
}  // namespace detail

/// \brief Whether Backend's MoE runs its experts as one grouped call (Kernels<Backend>::grouped_experts,
///        a static constexpr bool, true: the CUDA backend): then the MoE layer reads no routing data on
///        the host and calls Kernels<Backend>::expert_mlp_grouped(); otherwise (the CPU backend, and
///        testing::HostInvisible, which runs the CPU's code) it reads the plan's offsets once per layer
///        and runs each expert on its rows.
template <class Backend>
inline constexpr bool runs_grouped_experts = detail::GroupedExperts<Backend>::value;

/// @}

}  // namespace dsv32
