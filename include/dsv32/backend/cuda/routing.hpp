/// \file
/// \brief The expert plan of one expert and the grouped expert compute's indexing (row tiles, a row's
///        expert, the combine order), as sequential code that one CUDA thread runs (one per local
///        expert, one per grouped row) and the host runs in tests; the routing of one token,
///        route_token(), is both backends' (backend/routing.hpp).
///
/// These are small (a few hundred experts) and decide discrete things (which rows, in which order),
/// so they are written once, in the CPU backend's order of operations, for the host and the device:
/// the CPU unit tests check these very functions against cpu::moe_plan() and the CPU MoE's loop. No
/// CUDA header is included.
#pragma once

#include <cstdint>

#include "dsv32/backend/routing.hpp"
#include "dsv32/core/host_device.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

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
