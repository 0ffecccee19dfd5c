/// \file
/// \brief CPU: loops the ISA tables share, written once: the split of a row count into micro-tile
///        heights (for_row_tiles) and the loops of the exact small-M FP8 product (GemmOps::e4m3_rows),
///        for which the AVX2 and AVX-512 tables differ only in their block kernel and in how many
///        weight rows it takes beside each group of x rows (the vector width: a 256-bit table holds 4
///        doubles a register, a 512-bit one 8).
#pragma once

#include <cstdint>
#include <type_traits>

#include "dsv32/backend/cpu/simd/gemm_ops.hpp"

namespace dsv32::cpu::simd {

namespace detail {
/// One tile of R rows from row i where R < kMax and that many rows are left (for_row_tiles).
template <int R, int kMax, class Tile>
inline void row_tile(int mr, int& i, Tile& tile) {
  if constexpr (R < kMax)
    if (mr - i >= R) tile(std::integral_constant<int, R>{}, i), i += R;
}
}  // namespace detail

/// \brief Covers rows [0, mr) with micro-tiles: tile(std::integral_constant<int, R>{}, i) for tiles of
///        kMax rows while they fit, then one each of 8, 4, 2, 1 rows below kMax as the rest needs (R
///        rows from row i). The micro-kernels' drivers (micro_f64, micro_any, ...) run on it with their
///        table's tile height (6 on AVX2, 12 on AVX-512). They give `tile`, a lambda, their own target
///        attribute (DSV32_TARGET_AVX2, ...): a lambda does not take its enclosing function's, and the
///        tile kernels inlined into it must be compiled as they are elsewhere (GCC's peel-loops).
template <int kMax, class Tile>
inline void for_row_tiles(int mr, Tile&& tile) {
  int i = 0;
  for (; i + kMax <= mr; i += kMax) tile(std::integral_constant<int, kMax>{}, i);
  detail::row_tile<8, kMax>(mr, i, tile);
  detail::row_tile<4, kMax>(mr, i, tile);
  detail::row_tile<2, kMax>(mr, i, tile);
  detail::row_tile<1, kMax>(mr, i, tile);
}

/// \brief GemmOps::e4m3_rows on an ISA's block kernel. `Isa` provides
///        `template <int MT, int R> static void blocks(kb0, kb1, xd, ldx, xs, ldxs, wr, ws, valid_rows,
///        out, ldo, ahead)` — blocks [kb0, kb1) of MT x rows against the R weight rows wr[0..R) —
///        and `static constexpr int weight_rows(int mt)`: R for groups of mt = 8, 4, 2, 1 x rows.
///        Groups of 8 weight rows are taken in turn, x rows in groups of 8, 4, 2, 1 against each;
///        the first x-row group of each asks for the next group's blocks where rows are short
///        (kPanelPrefetchMaxK).
template <class Isa>
struct E4m3RowsDriver {
  /// Blocks [kb0, kb1) of MT x rows against up to 8 weight rows from w (`valid` of them), R at a time.
  template <int MT, int R>
  static void group(std::int64_t kb0, std::int64_t kb1, const double* xd, std::int64_t ldx, const float* xs,
                    std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw, int valid, const float* ws, float* out,
                    std::int64_t ldo, std::int64_t ahead) {
    for (int q = 0; q < 8; q += R) {
      const int v = valid - q >= R ? R : valid - q;
      if (v <= 0) break;
      const std::uint8_t* wr[R];
      for (int r = 0; r < R; ++r) wr[r] = w + (q + (r < v ? r : 0)) * ldw;  // a stand-in row past the last
      Isa::template blocks<MT, R>(kb0, kb1, xd, ldx, xs, ldxs, wr, ws, v, out + q, ldo, ahead);
    }
  }

  /// GemmOps::e4m3_rows (gemm_ops.hpp documents the arguments).
  static void rows(int M, int rows, std::int64_t kb0, std::int64_t kb1, const double* xd, std::int64_t ldx,
                   const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw, const float* ws,
                   float* out, std::int64_t ldo, std::int64_t prefetch_max_k) {
    for (int r0 = 0; r0 < rows; r0 += 8) {
      const int valid = rows - r0 < 8 ? rows - r0 : 8;
      const std::uint8_t* wg = w + r0 * ldw;
      for (int m0 = 0; m0 < M;) {
        const int left = M - m0;
        const double* x = xd + m0 * ldx;
        const float* s = xs + m0 * ldxs;
        float* o = out + m0 * ldo + r0;
        const std::int64_t ahead = m0 == 0 && ldw <= prefetch_max_k ? 8 * ldw : 0;  // the first x rows' pass
        if (left >= 8) {
          group<8, Isa::weight_rows(8)>(kb0, kb1, x, ldx, s, ldxs, wg, ldw, valid, ws, o, ldo, ahead);
          m0 += 8;
        } else if (left >= 4) {
          group<4, Isa::weight_rows(4)>(kb0, kb1, x, ldx, s, ldxs, wg, ldw, valid, ws, o, ldo, ahead);
          m0 += 4;
        } else if (left >= 2) {
          group<2, Isa::weight_rows(2)>(kb0, kb1, x, ldx, s, ldxs, wg, ldw, valid, ws, o, ldo, ahead);
          m0 += 2;
        } else {
          group<1, Isa::weight_rows(1)>(kb0, kb1, x, ldx, s, ldxs, wg, ldw, valid, ws, o, ldo, ahead);
          m0 += 1;
        }
      }
    }
  }
};

}  // namespace dsv32::cpu::simd
