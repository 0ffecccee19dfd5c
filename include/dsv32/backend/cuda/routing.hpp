/// \file
/// \brief The MoE gate's routing of one token, the expert plan of one expert and the grouped expert
///        compute's indexing (row tiles, a row's expert, the combine order), as sequential code that one
///        CUDA thread runs (one thread per token, one per local expert, one per grouped row) and the host
///        runs in tests.
///
/// Both are small (a few hundred experts) and decide discrete things (which experts, in which order),
/// so they are written once, in the CPU backend's order of operations, for the host and the device:
/// the CPU unit tests check these very functions against cpu::route() and cpu::moe_plan(). No CUDA
/// header is included.
#pragma once

#include <cstdint>

#include "dsv32/backend/cuda/numeric.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// \brief The gate's fields as the routing kernel takes them (RoutingParams without the enum types,
///        so that host and device code share one plain struct).
struct RouteFields {
  bool softmax = false;                 ///< score function: softmax (else sigmoid)
  std::int32_t n_groups = 1;            ///< expert groups (divides the experts)
  std::int32_t n_limited_groups = 1;    ///< groups kept per token
  std::int32_t top_k = 1;               ///< experts chosen per token
  float route_scale = 1.0f;             ///< applied to the final weights
};

/// \brief Routes one token, as cpu::route() does: scores (sigmoid, or softmax with the sum taken in
///        order), the bias added for selection only, groups ranked by their top-2 biased sum (with a
///        bias) or their max (without) and the best n_limited_groups kept, the top_k experts among them
///        (ties to the lower index), weights the unbiased scores normalized for sigmoid, times
///        route_scale.
/// \param logits  [E] f32 gate logits of the token
/// \param bias    [E] f32 selection bias, or nullptr
/// \param E       routed experts
/// \param f       the routing fields
/// \param score   [E] f32 scratch (the unbiased scores)
/// \param select  [E] f32 scratch (the biased, group-masked selection scores)
/// \param weights [top_k] f32 output
/// \param experts [top_k] expert ids, in decreasing selection score
DSV32_HOST_DEVICE inline void route_token(const float* logits, const float* bias, std::int32_t E, const RouteFields& f,
                                          float* score, float* select, float* weights, std::int32_t* experts) {
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
    // Groups are kept best first (ties to the lower group) by repeated selection: the groups' scores
    // are recomputed for each pick rather than stored, so no scratch of n_groups entries is needed.
    auto group_score = [&](std::int32_t g) {
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
        return a + b;
      }
      float m = gs[0];
      for (std::int32_t i = 1; i < per_group; ++i) m = gs[i] > m ? gs[i] : m;
      return m;
    };
    // keep[g] as a bit set (n_groups <= 64 is checked by the caller)
    std::uint64_t keep = 0;
    for (std::int32_t pick = 0; pick < f.n_limited_groups; ++pick) {
      std::int32_t best = -1;
      float best_score = 0.0f;
      for (std::int32_t g = 0; g < f.n_groups; ++g) {
        if ((keep >> g) & 1u) continue;
        const float s = group_score(g);
        if (best < 0 || s > best_score) {
          best = g;
          best_score = s;
        }
      }
      keep |= std::uint64_t{1} << best;
    }
    for (std::int32_t e = 0; e < E; ++e)
      if (!((keep >> (e / per_group)) & 1u)) select[e] = kMinusInf;
  }
  // top_k by repeated selection: the highest remaining selection score, ties to the lower expert —
  // the order std::partial_sort with the CPU's comparator produces
  float sum = 0.0f;
  for (std::int32_t i = 0; i < f.top_k; ++i) {
    std::int32_t best = -1;
    for (std::int32_t e = 0; e < E; ++e) {
      bool taken = false;
      for (std::int32_t j = 0; j < i; ++j) taken = taken || experts[j] == e;
      if (taken) continue;
      if (best < 0 || select[e] > select[best]) best = e;
    }
    experts[i] = best;
    weights[i] = score[best];
    sum += score[best];
  }
  for (std::int32_t i = 0; i < f.top_k; ++i) {
    if (!f.softmax) weights[i] /= sum;
    weights[i] *= f.route_scale;
  }
}

/// \brief How many of the call's (token, slot) pairs chose local expert `e` (global id first_expert + e).
/// \param experts [pairs] chosen ids, row-major [T, k] \param pairs T * k
/// \param first_expert this rank's first expert \param e the local expert
DSV32_HOST_DEVICE inline std::int32_t expert_count(const std::int32_t* experts, std::int64_t pairs,
                                                   std::int64_t first_expert, std::int64_t e) {
  std::int32_t n = 0;
  for (std::int64_t i = 0; i < pairs; ++i) n += experts[i] - first_expert == e ? 1 : 0;
  return n;
}

/// \brief Writes local expert `e`'s tokens (in increasing order) and their weights at `begin`, as
///        cpu::moe_plan() lays them out.
/// \param experts [T, k] chosen ids \param weights [T, k] f32 routing weights
/// \param T tokens \param k slots per token \param first_expert this rank's first expert
/// \param e the local expert \param begin offsets[e]
/// \param rows [T * k] token rows grouped by expert \param row_weights [T * k] their weights
DSV32_HOST_DEVICE inline void expert_rows(const std::int32_t* experts, const float* weights, std::int64_t T,
                                          std::int64_t k, std::int64_t first_expert, std::int64_t e,
                                          std::int32_t begin, std::int32_t* rows, float* row_weights) {
  std::int32_t at = begin;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < k; ++j)
      if (experts[t * k + j] - first_expert == e) {
        rows[at] = static_cast<std::int32_t>(t);
        row_weights[at] = weights[t * k + j];
        ++at;
      }
}

/// \brief The group holding `v` among `n` groups with boundaries `bounds` ([n + 1], non-decreasing,
///        empty groups allowed): the largest g < n with bounds[g] <= v. For bounds[0] <= v < bounds[n]
///        that group is non-empty and bounds[g] <= v < bounds[g + 1]. A binary search: what a grouped
///        kernel's block runs to find its expert from the plan's offsets (or the row tiles' boundaries)
///        in device memory.
DSV32_HOST_DEVICE inline std::int64_t group_of(const std::int32_t* bounds, std::int64_t n, std::int64_t v) {
  std::int64_t lo = 0, hi = n;  // bounds[lo] <= v holds for lo = 0 by the precondition; hi is past the answer
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (bounds[mid] <= v) lo = mid;
    else hi = mid;
  }
  return lo;
}

/// \brief The row tiles of the grouped expert GEMMs: tiles[0] = 0, tiles[e + 1] = tiles[e] +
///        ceil(rows of expert e / tile). A block of a grouped GEMM takes global row tile j; its expert is
///        group_of(tiles, n_local, j) and its rows start at offsets[e] + (j - tiles[e]) * tile.
/// \param offsets [n_local + 1] the plan's group boundaries \param n_local local experts
/// \param tile rows per tile \param tiles [n_local + 1] written
DSV32_HOST_DEVICE inline void expert_row_tiles(const std::int32_t* offsets, std::int64_t n_local, std::int32_t tile,
                                               std::int32_t* tiles) {
  tiles[0] = 0;
  for (std::int64_t e = 0; e < n_local; ++e)
    tiles[e + 1] = tiles[e] + (offsets[e + 1] - offsets[e] + tile - 1) / tile;
}

/// \brief The rank of local expert `e` among token `t`'s chosen local experts in increasing id order:
///        how many of its k slots hold a local expert below e. The CPU backend's MoE adds each token's
///        expert outputs in increasing expert order, so the grouped combine adds the output of rank r
///        r-th. \param experts [T, k] chosen ids \param k slots per token \param t the token
/// \param first_expert this rank's first expert \param e the local expert
DSV32_HOST_DEVICE inline std::int32_t expert_rank(const std::int32_t* experts, std::int64_t k, std::int64_t t,
                                                  std::int64_t first_expert, std::int64_t e) {
  std::int32_t r = 0;
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t local = experts[t * k + j] - first_expert;
    r += local >= 0 && local < e ? 1 : 0;
  }
  return r;
}

/// \brief The combine order of grouped row `i` (of the plan `rows`, `offsets`): writes i at
///        order[t k + rank] for its token t and the rank of its expert (expert_rank()), so that
///        order[t k + 0 ..] lists t's grouped rows in increasing expert order; slots past the token's
///        last local expert keep what they held (-1 after the launcher's fill).
DSV32_HOST_DEVICE inline void expert_order_of_row(const std::int32_t* experts, std::int64_t k, std::int64_t first_expert,
                                                  const std::int32_t* rows, const std::int32_t* offsets,
                                                  std::int64_t n_local, std::int64_t i, std::int32_t* order) {
  const std::int64_t t = rows[i], e = group_of(offsets, n_local, i);
  order[t * k + expert_rank(experts, k, t, first_expert, e)] = static_cast<std::int32_t>(i);
}

/// @}

}  // namespace dsv32::cuda
