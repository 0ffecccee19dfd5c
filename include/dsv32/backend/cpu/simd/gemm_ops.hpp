/// \file
/// \brief CPU: the building blocks of the matrix products, one table of them per instruction set.
///
/// The drivers in gemm.hpp decide the loops and the threads; a GemmOps table supplies what differs
/// between ISAs: packing weight panels (widened, transposed so that vector lanes run over output
/// features), register-blocked micro-kernels, the FP8 block epilogues and the small-M FP8 kernel.
///
/// What every table computes, exactly (so that every ISA gives the same bits):
/// - dense (bf16 / f32 weights): each output is the f32 sum of its products in increasing k, one
///   rounding per addition; a bf16 x bf16 product is exact in f32 (so an FMA equals a multiply and an
///   add), an f32-weight product is rounded to f32 before it is added (never fused). The one
///   exception: a bf16 x bf16 product below f32's normal range (|product| < 2^-126) can be inexact;
///   the AVX2 and AVX-512 tables add it unrounded (FMA), the portable one rounds it first (the
///   model's activations and weights are nowhere near: tests/backend/test_gemm.cpp pins both down);
/// - FP8 block dots: exact (double holds every partial sum of 128 E4M3 products) in the exact mode,
///   or in the fast mode an f32 sum in the order of the AVX512_BF16 instruction VDPBF16PS: from +0,
///   for each pair of columns (2p, 2p + 1) in increasing p, first the product of column 2p + 1 then
///   that of column 2p added, each addition rounded to f32 (every product of two E4M3 values is exact
///   in f32); then `c += f32(dot) * (x_scale * w_scale)` with each operation rounded separately,
///   blocks in increasing k. That is the *panel order*, used by the products with more than
///   kFp8RowOrderMaxRows (4) rows of x: packed panels from 9 rows on, and from 5 to 8 rows
///   e4m3_panel_rows (or e4m3_panel_rows_f32), which streams the weight rows with its vector lanes
///   running over them, where the table has it (else the packed panels, with the same bits).
///   Products with at most 4 rows (decode at batch 1 to 4) use the *row order* instead, which
///   streams each weight row once with its vector lanes running along k: a block's 64 column pairs
///   are dealt to 16 lanes (slot s = 0..63 of the block holds pair row_order_pair(s), lane s % 16);
///   each lane sums its 4 slots in increasing s, each pair as VDPBF16PS does (odd column, then
///   even), from +0; the 16 lane sums l[0..15] are then added as h8[i] = l[i] + l[i + 8],
///   h4[i] = h8[i] + h8[i + 4], h2[i] = h4[i] + h4[i + 2], dot = h2[0] + h2[1]; the epilogue is the
///   panel order's. (At one row, lanes along k read each weight row as one stream; from 5 rows on,
///   the row order's per-block reduction of 16 accumulators costs more than the panel order's
///   transposes.)
/// E4M3 weight codes 0x7F / 0xFF (NaN in E4M3FN; published checkpoints have none) read as +-480.
#pragma once

#include <bit>
#include <cstdint>

#include "dsv32/backend/cpu/simd/isa.hpp"

namespace dsv32::cpu::simd {

/// \brief The ISA-specific pieces of the CPU matrix products (see the file comment for the
///        arithmetic every entry performs). Packed weight panels are [kc][nr]: element (k, j) is
///        weight row j, column k; x tiles are row-major, element (i, k) at a[i * lda + k].
struct GemmOps {
  Isa isa = Isa::portable;  ///< the instruction set of these entries
  int nr = 16;              ///< f32 micro-panel width: weight rows per panel
  int mr = 4;               ///< f32 micro-tile height: the most x rows one micro-kernel call takes
  int nr64 = 8;             ///< f64 micro-panel width (the exact FP8 product)
  int mr64 = 4;             ///< f64 micro-tile height

  /// Packs n <= nr rows (row stride ldw) x kc columns of bf16 bits into [kc][nr] f32; rows n.. are 0.
  void (*pack_bf16)(const std::uint16_t* w, std::int64_t ldw, int n, int kc, float* out) = nullptr;
  /// The same for f32 weights.
  void (*pack_f32)(const float* w, std::int64_t ldw, int n, int kc, float* out) = nullptr;
  /// The same for E4M3 codes, as their exact f32 values.
  void (*pack_e4m3)(const std::uint8_t* w, std::int64_t ldw, int n, int kc, float* out) = nullptr;
  /// E4M3 codes into [kc][nr64] doubles (exact values).
  void (*pack_e4m3_f64)(const std::uint8_t* w, std::int64_t ldw, int n, int kc, double* out) = nullptr;

  /// c[i][j] = (accumulate ? c[i][j] : 0) + sum_k a[i][k] b[k][j] for i < mr, j < nr, in increasing
  /// k with one rounding per step (the products are exact: FMA where the ISA has it); b[k][j] is at
  /// b[k * ldb + j] (a packed panel: ldb = nr).
  void (*micro_exact_products)(int mr, int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                               float* c, std::int64_t ldc, bool accumulate) = nullptr;
  /// The same with each product rounded to f32 before the addition (f32 weights).
  void (*micro_rounded_products)(int mr, int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                 float* c, std::int64_t ldc, bool accumulate) = nullptr;
  /// c[i][j] = sum_k a[i][k] b[k][j] in double (i < mr, j < nr64): exact for E4M3 values.
  void (*micro_f64)(int mr, int kc, const double* a, std::int64_t lda, const double* b, double* c,
                    std::int64_t ldc) = nullptr;
  /// micro_f64 over one 128-column block followed by epilogue_f64 in one call, the sums kept in
  /// registers: c[i][j] += f32(dot_ij) * scale[i] for i < mr, j < n (n <= nr64), multiply and add
  /// rounded separately (optional: null where the table has none; the same bits as the two calls).
  void (*micro_f64_scaled)(int mr, int n, const double* a, std::int64_t lda, const double* b, const float* scale,
                           float* c, std::int64_t ldc) = nullptr;

  /// out[i] = f32(x[i]) for n bf16 bit patterns (exact).
  void (*widen_bf16)(const std::uint16_t* x, std::int64_t n, float* out) = nullptr;
  /// out[i] = the exact value of E4M3 activation code x[i] (NaN codes give NaN).
  void (*widen_e4m3)(const std::uint8_t* x, std::int64_t n, float* out) = nullptr;
  /// The same in double.
  void (*widen_e4m3_f64)(const std::uint8_t* x, std::int64_t n, double* out) = nullptr;
  /// The largest |x[i]| of n bf16 bit patterns as f32, NaNs ignored (0 if there is no other value).
  float (*amax_bf16)(const std::uint16_t* x, std::int64_t n) = nullptr;
  /// out[i] = encode_e4m3(clamp(f32(x[i]) / s, -448, 448)) for n bf16 bit patterns: act_quant's
  /// codes (IEEE division, round half to even, NaN to 0x7F with its sign).
  void (*quantize_e4m3)(const std::uint16_t* x, std::int64_t n, float s, std::uint8_t* out) = nullptr;
  /// out[i] = bf16(value(w[i]) * block_scale[i / 128]) as f32, the reference's dequantized weight
  /// (w starts at a 128-aligned column).
  void (*dequant_e4m3)(const std::uint8_t* w, std::int64_t n, const float* block_scale, float* out) = nullptr;

  /// c[i][j] += f32(dot[i][j]) * scale[i] for i < mr, j < n: the FP8 block epilogue (exact mode).
  void (*epilogue_f64)(int mr, int n, const double* dot, std::int64_t ldd, const float* scale, float* c,
                       std::int64_t ldc) = nullptr;
  /// The same for f32 block dots (fast mode).
  void (*epilogue_f32)(int mr, int n, const float* dot, std::int64_t ldd, const float* scale, float* c,
                       std::int64_t ldc) = nullptr;

  /// The fast FP8 block dots in the panel order (file comment): dot[i][j] for i < mr, j < nr over
  /// one 128-column block, from +0, for each column pair p in increasing order column 2p + 1's
  /// product, then column 2p's. a and b hold the exact f32 values of the E4M3 codes: a's rows
  /// (widen_e4m3) lda apart, b a packed panel [128][nr] (pack_e4m3). FMAs (an exact product fused
  /// with its addition rounds as the addition) or plain C++; every table has it.
  void (*fp8_value_dots)(int mr, const float* a, std::int64_t lda, const float* b, float* dot,
                         std::int64_t ldd) = nullptr;

  /// fp8_value_dots followed by epilogue_f32 in one call, the sums kept in registers: c[i][j] +=
  /// f32(dot_ij) * scale[i] for i < mr, j < n (n <= nr), multiply and add rounded separately
  /// (optional: null where the table has none; the same bits as the two calls).
  void (*fp8_value_dots_scaled)(int mr, int n, const float* a, std::int64_t lda, const float* b, const float* scale,
                                float* c, std::int64_t ldc) = nullptr;

  /// fp8_value_dots on VDPBF16PS (optional: null where the CPU has no AVX512_BF16, or where its
  /// FMAs outrun that instruction: cpu_prefers_fma_dots()), preferred to fp8_value_dots when set.
  /// a and b hold the values as pairs of bf16 (dword p of a row: bf16(v[2p]) in the low half,
  /// bf16(v[2p + 1]) in the high half; exact): a's rows have 64 pairs, lda dwords apart; b is a
  /// packed panel [64][nr].
  void (*fp8_pair_dots)(int mr, const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b, float* dot,
                        std::int64_t ldd) = nullptr;

  /// The small-M bf16 product, weight rows streamed once (optional: null where the table has none):
  /// out[m][r] = the f32 sum over k < K of x[m][k] w[r][k] in increasing k (exact products, one
  /// rounding per addition) for m < M (<= 8), r < n (<= 16). x is f32, [M][ldx], zero from column K
  /// up to K rounded up to 32; w rows are ldw bf16 apart.
  void (*bf16_rows)(int M, int n, std::int64_t K, const float* x, std::int64_t ldx, const std::uint16_t* w,
                    std::int64_t ldw, float* out, std::int64_t ldo) = nullptr;

  /// bf16_rows on VDPBF16PS (optional: null where the CPU has no AVX512_BF16 or its FMAs outrun the
  /// instruction, cpu_prefers_fma_dots()), the same sums bit for bit: x also given as bf16 pairs
  /// with their halves swapped (xp[m][p]: bf16 of column 2p + 1 in the low half, of column 2p in the
  /// high half; ldxp dwords apart; zero past K). The instruction treats
  /// subnormal inputs and results as zero; none occurs when every nonzero product of bf16 values is
  /// a multiple of 2^-126 (then so is every partial sum), that is when e(w) + e(x) >= -112 for the
  /// unbiased exponents of every nonzero weight and x value, with no subnormal x. The caller
  /// derives from x the least biased exponent B the weights need and passes limit = 128 B - 1:
  /// a 16-row group holding a weight with 0 < (bits & 0x7FFF) <= limit is computed by bf16_rows.
  void (*bf16_pair_rows)(int M, int n, std::int64_t K, const float* x, std::int64_t ldx, const std::uint32_t* xp,
                         std::int64_t ldxp, std::uint16_t limit, const std::uint16_t* w, std::int64_t ldw,
                         float* out, std::int64_t ldo) = nullptr;

  /// The small-M exact FP8 product, weight rows streamed once: for m < M (<= 8), r < rows and
  /// blocks kb in [kb0, kb1): out[m][r] += f32(dot_kb(x[m], w[r])) * (xs[m][kb] * ws[kb]).
  /// x is given as exact values times 2^512 in double (xd, [M][ldx]); w rows have stride ldw; all
  /// rows share the weight scales ws[kb] (one 128-row block).
  void (*e4m3_rows)(int M, int rows, std::int64_t kb0, std::int64_t kb1, const double* xd, std::int64_t ldx,
                    const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw, const float* ws,
                    float* out, std::int64_t ldo) = nullptr;

  /// e4m3_rows with x given as exact E4M3 values in double (not scaled), the M rows of each column
  /// side by side (xv[k M + m] holds x[m][k], k from 0), for a kernel whose vector lanes run over the
  /// weight rows (optional: null where the table has none). The same bits as e4m3_rows: each block's
  /// dot is exact in either kernel.
  void (*e4m3_panel_rows_f64)(int M, int rows, std::int64_t kb0, std::int64_t kb1, const double* xv,
                              const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                              const float* ws, float* out, std::int64_t ldo) = nullptr;

  /// e4m3_rows on AMX-INT8 tiles (optional: null where the table has none, or the CPU or the OS
  /// lacks them: cpu_has_amx_int8()), x given as plane tiles (e4m3_plane_tiles, from x's column 0;
  /// the kernel starts at block kb0 of them). Each block's dot is exact here too (integer sums of
  /// the plane digits' products, see E4m3Plane), so the bits are e4m3_rows'.
  void (*e4m3_tiles_rows)(int M, int rows, std::int64_t kb0, std::int64_t kb1, const std::int8_t* xt,
                          const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                          const float* ws, float* out, std::int64_t ldo) = nullptr;
  /// x's M rows of K E4M3 codes (K a multiple of 128) as the AMX kernels' plane tiles:
  /// e4m3_plane_tile_bytes(M, K) bytes (present where e4m3_tiles_rows is).
  void (*e4m3_plane_tiles)(const std::uint8_t* xq, int M, std::int64_t K, std::int8_t* out) = nullptr;
  /// The exact FP8 product of many x rows on AMX-INT8 tiles (optional: present where
  /// e4m3_tiles_rows is): for i < rows (<= kE4m3TilesGemmRows), j < cols (<= kE4m3TilesGemmCols)
  /// and blocks kb < `blocks` in increasing order, c[i][j] += f32(dot_kb(x[i], w[j])) * (xs[i][kb] *
  /// ws[j / 128][kb]), the multiply and the add rounded apart: the bits of micro_f64_scaled over the
  /// same blocks. x is given as plane tiles (e4m3_plane_tiles) from the tile group of x's row 0 on,
  /// made for rows of groups_ld groups of 4 (the chunk stride); w's rows are ldw bytes apart from
  /// column 0; ws[j * ldws + kb] is the scale of w's j-th 128-row block; c's rows ldc apart.
  void (*e4m3_tiles_gemm)(int rows, int cols, std::int64_t blocks, const std::int8_t* xt, std::int64_t groups_ld,
                          const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw, const float* ws,
                          std::int64_t ldws, float* c, std::int64_t ldc) = nullptr;

  /// The small-M fast FP8 product (the row order of the file comment), weight rows streamed once:
  /// for m < M (<= 8), r < rows and blocks kb in [kb0, kb1): out[m][r] += f32(dot_kb(x[m], w[r])) *
  /// (xs[m][kb] * ws[kb]). x's E4M3 values are given as bf16 pairs in slot order (xp[m][64 kb + s]
  /// holds column pair row_order_pair(s) of block kb: bf16 of the even column in the low half), rows
  /// ldx dwords apart; the rest as e4m3_rows.
  void (*e4m3_pair_rows)(int M, int rows, std::int64_t kb0, std::int64_t kb1, const std::uint32_t* xp,
                         std::int64_t ldx, const float* xs, std::int64_t ldxs, const std::uint8_t* w,
                         std::int64_t ldw, const float* ws, float* out, std::int64_t ldo) = nullptr;

  /// The small-M fast FP8 product in the panel order (optional: null where the table has none), weight
  /// rows streamed once: for m < M (<= 8), r < rows and blocks kb in [kb0, kb1): out[m][r] +=
  /// f32(dot_kb(x[m], w[r])) * (xs[m][kb] * ws[kb]), each block's dot summed from +0 over the column
  /// pairs in increasing order. x is given as bf16 pairs in column order (xp[m][p]: bf16 of column
  /// 2p in the low half, of column 2p + 1 in the high half), rows ldx dwords apart; the rest as
  /// e4m3_rows.
  void (*e4m3_panel_rows)(int M, int rows, std::int64_t kb0, std::int64_t kb1, const std::uint32_t* xp,
                          std::int64_t ldx, const float* xs, std::int64_t ldxs, const std::uint8_t* w,
                          std::int64_t ldw, const float* ws, float* out, std::int64_t ldo) = nullptr;

  /// e4m3_panel_rows with x given as f32 values, the M rows of each column side by side (xf[k M + m]
  /// holds x[m][k], k from 0 as in xp): the layout of a kernel on FMAs that broadcasts
  /// each x value from memory, all of them a small offset from one pointer (optional: null where the
  /// table has none; the caller takes e4m3_panel_rows where a table has both). The same sums.
  void (*e4m3_panel_rows_f32)(int M, int rows, std::int64_t kb0, std::int64_t kb1, const float* xf,
                              const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                              const float* ws, float* out, std::int64_t ldo) = nullptr;

  /// The absorbed decode's products (cpu::absorb_query) on the rows of an FP8 weight that share one
  /// 128-row scale block, its codes read as they are stored (optional: null where the table has none;
  /// the caller then dequantizes the rows and takes micro_exact_products, the same sums). Each weight
  /// is value(code) * scale[j / 128] — with every scale exact (e4m3_scale_exact), the reference's
  /// dequantized weight, exact in bf16, so every product with a bf16 x value is exact in f32:
  /// out[m][j] = sum over d < D of x[d M + m] w[d][j], in increasing d from +0, one rounding per
  /// addition, for m < M (1..8) and j < N; x holds the M rows of each d side by side, w's rows are
  /// ldw bytes apart, out's rows ldo apart. `next` (or null): rows of the same shape the caller
  /// reads next, asked for from memory meanwhile (a head's few KB are too short for the hardware
  /// prefetcher to get going).
  void (*e4m3_scaled_cols)(int M, std::int64_t D, std::int64_t N, const float* x, const std::uint8_t* w,
                           std::int64_t ldw, const float* scale, float* out, std::int64_t ldo,
                           const std::uint8_t* next) = nullptr;

  /// The same weights with the sums along the rows (cpu::project_values): out[m][r] = sum over
  /// k < K of x[k M + m] value(w[r][k]) scale[k / 128], in increasing k from +0, for m < M (1..8),
  /// r < n (1..16); K a multiple of 128; `next` as above, 16 rows (optional: null where the table
  /// has none).
  void (*e4m3_scaled_rows)(int M, int n, std::int64_t K, const float* x, const std::uint8_t* w, std::int64_t ldw,
                           const float* scale, float* out, std::int64_t ldo, const std::uint8_t* next) = nullptr;
};

/// \brief Whether every E4M3 weight value times `scale` is a normal f32 exact in bf16, so that
///        dequantizing with it needs no rounding: a power of two (ue8m0 scales are) from 2^-117
///        (the least subnormal code, 2^-9, stays normal) to 2^119 (480 times it stays finite).
inline bool e4m3_scale_exact(float scale) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(scale), exponent = (bits >> 23) & 0xFF;
  return (bits & 0x7FFFFF) == 0 && exponent >= 10 && exponent <= 246;
}

/// \brief An E4M3 code's magnitude split for integer arithmetic: |value| * 2^9 = digit * 16^plane,
///        digit 0..120 (an int8), plane 0..3. Codes of exponent field e >= 1 are (8 + mantissa)
///        2^(e - 10): plane (e - 1) / 4, digit (8 + mantissa) 2^((e - 1) % 4); subnormal codes
///        (mantissa 2^-9) plane 0, digit the mantissa; 0x7F reads as 480 (15 * 2^5). Bit 7 (the sign)
///        is ignored. The product of two codes' values is then digit_x digit_w 16^(p + q) 2^-18, and
///        a block's dot is a sum over the 16 plane pairs (p, q) of integer dots of int8 digits —
///        |each| <= 128 * 120^2 < 2^21 — which AMX-INT8 (TDPBSSD) computes exactly
///        (GemmOps::e4m3_tiles_rows).
struct E4m3Plane {
  int plane = 0;  ///< 0..3
  int digit = 0;  ///< 0..120
};
/// \brief The E4m3Plane of a code.
constexpr E4m3Plane e4m3_plane(std::uint8_t code) noexcept {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 0) return {0, m};
  return {(e - 1) / 4, (8 + m) << ((e - 1) % 4)};
}

/// \brief The most x rows of one GemmOps::e4m3_tiles_gemm call: a 64-row task's x tiles for one
///        block (32 KB) stay in L1 while each 8 weight rows pass.
inline constexpr int kE4m3TilesGemmRows = 64;
/// \brief The most weight rows of one GemmOps::e4m3_tiles_gemm call (its outputs are kept in a 64 KB
///        stack array: 64 x 256 floats).
inline constexpr int kE4m3TilesGemmCols = 256;

/// \brief Bytes of GemmOps::e4m3_plane_tiles' output for M rows of K columns: per 64-column
///        chunk c and group g of 4 rows (rows 4g .. 4g + 3, past M zero), one 16 x 64-byte AMX B
///        tile at byte (c G + g) 1024, G = ceil(M / 4): byte [i][4 (4 p + t) + j] is the signed
///        digit of x[4g + t][64 c + 4 i + j] in plane p (E4m3Plane), 0 where its plane is another.
constexpr std::int64_t e4m3_plane_tile_bytes(int M, std::int64_t K) noexcept { return K / 64 * ((M + 3) / 4) * 1024; }

/// \brief The most rows of x whose fast FP8 product takes the row order (more: the panel order).
inline constexpr int kFp8RowOrderMaxRows = 4;

/// \brief The fewest rows of x whose exact FP8 product takes GemmOps::e4m3_panel_rows_f64 where the
///        table has it (fewer: e4m3_rows). Two cores of a Granite Rapids host, 18432 x 7168 weights
///        streamed, GMAC/s of e4m3_rows -> e4m3_panel_rows_f64: 1 row 14.3 -> 7.8, 2 rows 21.4 -> 17.6,
///        3 rows 16-25 -> 26-27, 4 rows 31 -> 31-33, 8 rows 28 -> 43-45; with 1 code in 1000 subnormal
///        (e4m3_rows' operands then include subnormal doubles: a microcode assist per FMA) 4 rows 19 ->
///        31, 8 rows 17 -> 45.
inline constexpr int kE4m3PanelF64MinRows = 3;

/// \brief 2^512: the factor the small-M FP8 kernel's x values carry (see GemmOps::e4m3_rows).
inline constexpr double kE4m3RowsXScale = 0x1p512;

/// \brief The column pair that slot s (0..63) of a 128-column block holds in the fast mode's row
///        order (file comment): slots come in 4 groups of 16 (one per lane), and within the 32
///        pairs of a 64-column half, group g takes pairs 8 (d / 4) + d % 4 + 4 (g % 2) for lane d —
///        the order in which byte unpacking leaves 64 widened codes.
constexpr int row_order_pair(int s) noexcept {
  const int d = s & 15;
  return 32 * (s >> 5) + 8 * (d >> 2) + (d & 3) + 4 * ((s >> 4) & 1);
}

}  // namespace dsv32::cpu::simd
