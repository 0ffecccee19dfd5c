/// \file
/// \brief The MoE gate's routing of one token (route_token()), written once for both backends:
///        cpu::route() runs it for each token of a call, the CUDA backend's routing kernel in one thread
///        per token.
///
/// Routing is small (a few hundred experts per token) and decides discrete things (which experts, in
/// which order), so it is plain sequential code in the reference's order of operations. This header
/// includes no CUDA header and nothing of Eigen: under nvcc route_token() is `__host__ __device__`
/// (core/host_device.hpp). Its exponential is exp_rounded() (exp in double, rounded once), so that
/// the host and the device compute the same scores, bit for bit.
#pragma once

#include <cstdint>

#include "dsv32/core/host_device.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief The gate's fields as route_token() takes them: RoutingParams without the enum type and in
///        32-bit integers, one plain struct that host and device code share (route_fields() converts).
struct RouteFields {
  bool softmax = false;                 ///< score function: softmax (else sigmoid)
  std::int32_t n_groups = 1;            ///< expert groups (divides the experts)
  std::int32_t n_limited_groups = 1;    ///< groups kept per token
  std::int32_t top_k = 1;               ///< experts chosen per token
  float route_scale = 1.0f;             ///< applied to the final weights
};

/// \brief The f32 scratch route_token() needs for one token: the unbiased scores and the selection
///        scores of the E experts, and the scores of the groups.
/// \param E routed experts \param f the routing fields \return 2 E + n_groups
DSV32_HOST_DEVICE constexpr std::int64_t route_scratch_floats(std::int64_t E, const RouteFields& f) noexcept {
  return 2 * E + f.n_groups;
}

/// \brief Routes one token, as the reference's Gate does: scores (sigmoid, or softmax with the sum taken
///        in order), the bias added for selection only, groups ranked by their top-2 biased sum (with a
///        bias) or their max (without) and the best n_limited_groups kept, the top_k experts among them
///        (ties to the lower index), weights the unbiased scores normalized for sigmoid, times
///        route_scale. The order is a strict one (score, then the lower index), so the choice and its
///        order are those of std::partial_sort with that comparator.
/// \param logits  [E] f32 gate logits of the token
/// \param bias    [E] f32 selection bias, or nullptr
/// \param E       routed experts (a multiple of f.n_groups, at least f.top_k)
/// \param f       the routing fields
/// \param scratch [route_scratch_floats(E, f)] f32 scratch
/// \param weights [top_k] f32 output
/// \param experts [top_k] expert ids, in decreasing selection score
DSV32_HOST_DEVICE inline void route_token(const float* logits, const float* bias, std::int32_t E, const RouteFields& f,
                                          float* scratch, float* weights, std::int32_t* experts) {
  float* score = scratch;                // [E] the unbiased scores
  float* select = scratch + E;           // [E] the biased, group-masked selection scores
  float* group_score = scratch + 2 * E;  // [n_groups]
  if (f.softmax) {
    float mx = logits[0];
    for (std::int32_t e = 1; e < E; ++e) mx = logits[e] > mx ? logits[e] : mx;  // std::max_element: first max
    float sum = 0.0f;
    for (std::int32_t e = 0; e < E; ++e) sum += (score[e] = exp_rounded(logits[e] - mx));
    for (std::int32_t e = 0; e < E; ++e) score[e] /= sum;
  } else {
    for (std::int32_t e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + exp_rounded(-logits[e]));
  }
  for (std::int32_t e = 0; e < E; ++e) select[e] = bias ? score[e] + bias[e] : score[e];
  const float kMinusInf = -bits_float(0x7F800000u);
  if (f.n_groups > 1) {
    const std::int32_t per_group = E / f.n_groups;
    for (std::int32_t g = 0; g < f.n_groups; ++g) {
      const float* gs = select + g * per_group;
      if (bias) {
        float a = kMinusInf, b = kMinusInf;  // top two
        for (std::int32_t i = 0; i < per_group; ++i) {
          if (gs[i] > a) {
            b = a;
            a = gs[i];
          } else if (gs[i] > b) {
            b = gs[i];
          }
        }
        group_score[g] = a + b;
      } else {
        float m = gs[0];
        for (std::int32_t i = 1; i < per_group; ++i) m = gs[i] > m ? gs[i] : m;  // std::max_element
        group_score[g] = m;
      }
    }
    // The groups ranked (score descending, ties to the lower group) by repeated selection, each pick
    // the best group ranked below the previous pick; the kept groups are those ranked at or above the
    // last pick.
    std::int32_t last = -1;
    auto below_last = [&](std::int32_t g) {
      return group_score[g] < group_score[last] || (group_score[g] == group_score[last] && g > last);
    };
    for (std::int32_t pick = 0; pick < f.n_limited_groups; ++pick) {
      std::int32_t best = -1;
      for (std::int32_t g = 0; g < f.n_groups; ++g) {
        if (last >= 0 && !below_last(g)) continue;
        if (best < 0 || group_score[g] > group_score[best]) best = g;
      }
      last = best;
    }
    for (std::int32_t g = 0; g < f.n_groups; ++g)
      if (below_last(g))
        for (std::int32_t e = g * per_group; e < (g + 1) * per_group; ++e) select[e] = kMinusInf;
  }
  // The top_k experts in the order (selection score descending, ties to the lower expert), the order
  // std::partial_sort with that comparator produces: one pass over the experts, each one better than
  // the current k-th inserted into experts[0, n) (kept in that order; a later expert goes behind an
  // equal score, whose expert is lower).
  std::int32_t n = 0;
  for (std::int32_t e = 0; e < E; ++e) {
    const float v = select[e];
    if (n == f.top_k && !(v > select[experts[n - 1]])) continue;
    std::int32_t j = n < f.top_k ? n++ : n - 1;  // the k-th drops out when full
    for (; j > 0 && v > select[experts[j - 1]]; --j) experts[j] = experts[j - 1];
    experts[j] = e;
  }
  float sum = 0.0f;
  for (std::int32_t i = 0; i < f.top_k; ++i) {
    weights[i] = score[experts[i]];
    sum += weights[i];
  }
  for (std::int32_t i = 0; i < f.top_k; ++i) {
    if (!f.softmax) weights[i] /= sum;
    weights[i] *= f.route_scale;
  }
}

/// @}

}  // namespace dsv32
