/// \file
/// \brief The argument types of the Kernels contract that are not plain views: WeightView (a weight
///        matrix in its stored dtype with its FP8 block scales) and RoutingParams (the gate's fields).
#pragma once

#include <cstdint>
#include <type_traits>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/core/dtype.hpp"
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

/// @}

}  // namespace dsv32
