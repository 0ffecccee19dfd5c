/// \file
/// \brief CPU: MoE routing (the gate's group-limited top-k) and the expert gather / weighted scatter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/backend/routing.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32::cpu {

/// \brief Routes each token to its experts, as the reference's Gate does: route_token() (the one
///        routing of both backends, backend/routing.hpp) for each row of `logits`.
///
/// Scores are sigmoid or softmax of the logits; the bias (when present) is added for selection only;
/// groups are ranked by the sum of their top-2 biased scores (with bias) or their max (without) and
/// the best n_limited_groups kept; the top_k experts among them are chosen (ties: lower index).
/// Weights are the unbiased scores of the chosen experts, normalized to sum 1 for sigmoid, times
/// route_scale.
/// \param logits  [T, E] f32 gate logits (x W^T)
/// \param bias    [E] f32, or nullptr
/// \param p       the config's routing fields
/// \param weights [T, top_k] f32 output
/// \param experts [T, top_k] expert ids, in decreasing biased score
inline void route(MatrixView<const float> logits, const float* bias, const RoutingParams& p, MatrixView<float> weights,
                  MatrixView<std::int32_t> experts) {
  const std::int64_t E = logits.cols;
  const RouteFields f = route_fields(p);
  std::vector<float> scratch(static_cast<std::size_t>(route_scratch_floats(E, f)));
  for (std::int64_t t = 0; t < logits.rows; ++t)
    route_token(logits.row(t), bias, static_cast<std::int32_t>(E), f, scratch.data(), weights.row(t), experts.row(t));
}

/// \brief Groups the (token, slot) pairs of a call by the local expert they chose.
///
/// For local expert e (global id first_expert + e, e in [0, n_local)), rows[offsets[e], offsets[e+1])
/// are the tokens that chose it, in increasing token order, and row_weights their routing weights.
/// Pairs that chose another rank's experts are left out (offsets[n_local] counts the rest).
/// \param experts      [T, k] chosen expert ids
/// \param weights      [T, k] f32 routing weights
/// \param first_expert this rank's first expert
/// \param rows         [T * k] token rows, grouped by expert
/// \param row_weights  [T * k] their weights
/// \param offsets      [n_local + 1] group boundaries
/// \param n_local      experts this rank holds
inline void moe_plan(MatrixView<const std::int32_t> experts, MatrixView<const float> weights, std::int64_t first_expert,
                     std::int32_t* rows, float* row_weights, std::int32_t* offsets, std::int64_t n_local) {
  std::fill(offsets, offsets + n_local + 1, 0);
  for (std::int64_t t = 0; t < experts.rows; ++t)  // counts, shifted by one
    for (std::int64_t j = 0; j < experts.cols; ++j) {
      const std::int64_t e = experts.row(t)[j] - first_expert;
      if (e >= 0 && e < n_local) ++offsets[e + 1];
    }
  for (std::int64_t e = 0; e < n_local; ++e) offsets[e + 1] += offsets[e];
  std::vector<std::int32_t> next(offsets, offsets + n_local);
  for (std::int64_t t = 0; t < experts.rows; ++t)
    for (std::int64_t j = 0; j < experts.cols; ++j) {
      const std::int64_t e = experts.row(t)[j] - first_expert;
      if (e < 0 || e >= n_local) continue;
      const std::int32_t at = next[static_cast<std::size_t>(e)]++;
      rows[at] = static_cast<std::int32_t>(t);
      row_weights[at] = weights.row(t)[j];
    }
}

/// \brief out[i] = x[rows[i]].
/// \param x    [T, dim] bf16
/// \param rows [n] row indices into x
/// \param n    rows to gather
/// \param out  [n, dim] bf16
inline void gather_rows(MatrixView<const bf16> x, const std::int32_t* rows, std::int64_t n, MatrixView<bf16> out) {
  for (std::int64_t i = 0; i < n; ++i) std::copy(x.row(rows[i]), x.row(rows[i]) + x.cols, out.row(i));
}

/// \brief dst[rows[i]] = src[i] for every row i of src (the inverse of gather_rows()).
/// \tparam T element type \param src [n, d] \param rows [n] distinct row indices into dst \param dst [R, d]
template <class T>
void scatter_rows(MatrixView<const T> src, const std::int32_t* rows, MatrixView<T> dst) {
  for (std::int64_t i = 0; i < src.rows; ++i) std::copy(src.row(i), src.row(i) + src.cols, dst.row(rows[i]));
}

/// \brief y[rows[i]] += f32(src[i]) * weight[i] (weight may be nullptr: 1).
/// \param src    [n, dim] bf16
/// \param rows   [n] destination rows, or nullptr for row i
/// \param weight [n] f32, or nullptr
/// \param y      [T, dim] f32
inline void scatter_add(MatrixView<const bf16> src, const std::int32_t* rows, const float* weight,
                        MatrixView<float> y) {
  for (std::int64_t i = 0; i < src.rows; ++i) {
    float* dst = y.row(rows ? rows[i] : i);
    const bf16* s = src.row(i);
    if (weight) {
      for (std::int64_t c = 0; c < src.cols; ++c) dst[c] += static_cast<float>(s[c]) * weight[i];
    } else {
      for (std::int64_t c = 0; c < src.cols; ++c) dst[c] += static_cast<float>(s[c]);
    }
  }
}

}  // namespace dsv32::cpu
