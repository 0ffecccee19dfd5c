/// \file
/// \brief CPU: the AVX-512 GemmOps (F, BW, DQ, VL), compiled with target attributes so that a build
///        without -march flags still carries them; used when the CPU reports AVX-512.
///
/// Micro-tiles: 12 x rows by 32 weight rows in f32 (24 zmm accumulators), 12 by 16 in f64.
/// Packing widens 16 weight rows by 16 columns at a time and transposes them in registers.
/// The small-M FP8 kernel reads each weight byte once: 8 E4M3 codes become 8 doubles by shifting
/// their bits into place (an E4M3 value times 2^-1016, subnormal codes included), which against
/// x * 2^512 gives products at 2^-504 scale, far from double's underflow.
/// Its fast-mode sibling (e4m3_pair_rows, AVX512_VBMI) looks 64 codes up at once as the two bytes of
/// their bf16 values (VPERMI2B over 128-entry tables), unpacks them into column pairs and feeds
/// VDPBF16PS with lanes running along k, one accumulator per (x row, weight row). From 5 x rows on
/// (e4m3_panel_rows, the panel order) the same lookups run on 16 weight rows transposed into column
/// pairs, lanes running over the weight rows: no reduction across lanes; on FMAs (e4m3_panel_rows_f32)
/// x comes as f32 values, its rows side by side, broadcast from memory. On CPUs with AMX-INT8 the
/// exact products from 3 rows on run on tiles (e4m3_tiles_rows, e4m3_tiles_gemm): E4M3 values split
/// into int8 digits of four power-of-16 planes (E4m3Plane), whose integer dots are exact.
#pragma once

#include "dsv32/backend/cpu/simd/isa.hpp"

#if defined(DSV32_CPU_X86)

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dsv32/backend/cpu/simd/gemm_avx2.hpp"
#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/rows_driver.hpp"

// GCC 12 reports the "undefined" pass-through operand of its own AVX-512 intrinsics as
// uninitialized once they are inlined here (GCC bug 105593); the operand is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dsv32::cpu::simd::avx512 {

/// Micro-tiles: kMr x rows by kNr weight rows in f32 (24 zmm accumulators), kMr by kNr64 in f64.
inline constexpr int kMr = 12, kNr = 32, kMr64 = 12, kNr64 = 16;

/// Hides a value from the optimizer so that a multiply is never fused into the following add.
DSV32_TARGET_AVX512 inline __m512 opaque(__m512 v) {
  __asm__("" : "+v"(v));
  return v;
}
DSV32_TARGET_AVX512 inline __m256 opaque(__m256 v) {
  __asm__("" : "+v"(v));
  return v;
}

/// acc + VDPBF16PS(w, the dword at x in every lane): the pair of bf16 values at x taken as an
/// embedded broadcast memory operand ({1to16}). GCC 12 emits the intrinsic form with a separate
/// VPBROADCASTD (Clang 14 folds it), which on Zen 4 costs the decode kernels ~15% at eight x rows
/// (bf16_pair_rows16<8> over 1024 x 7168 bf16 weights on one thread: 1.00 -> 0.82-0.85 ms). The
/// products of a pair commute, so which operand carries x does not change the sums.
DSV32_TARGET_AVX512_BF16 __attribute__((always_inline)) inline __m512 dpbf16_bcast(__m512 acc, __m512i w,
                                                                                 const std::uint32_t* x) {
  __asm__("vdpbf16ps {%1%{1to16%}, %2, %0|%0, %2, %1%{1to16%}}" : "+v"(acc) : "m"(*x), "v"(w));
  return acc;
}

/// In-register transpose of 16 rows of 16 floats. Always inlined: as a call, its 16 vectors go
/// through memory both ways (GCC kept it out of line in bf16_rows16, where that cost the batch-8
/// output head ~20% of its time).
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  // r[4i + j] now holds, in each 128-bit lane L, column 4L + j of rows 4i..4i+3
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xDD);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
  }
  // r[c] now holds column c of the 16 rows
}

/// 16 columns of one weight row as f32, columns >= cnt zero.
DSV32_TARGET_AVX512 inline __m512 load_row_bf16(const std::uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
DSV32_TARGET_AVX512 inline __m512 load_row_f32(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
/// 16 E4M3 codes (mask m) as f32 values times `times` (one rounding of the exact product; exact for
/// the default, and wherever 256 times is a finite float, the same as value * times rounded).
DSV32_TARGET_AVX512 inline __m512 load_row_e4m3(const std::uint8_t* p, __mmask16 m, float times = 1.0f) {
  // E4M3 -> f16 bits (sign, then exponent and mantissa shifted into place: the value times 2^-8,
  // subnormals included), widened exactly to f32, times 256 times
  const __m256i s = _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(m, p));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f * times));
}

template <int Kind>  // 0 bf16, 1 f32, 2 e4m3
DSV32_TARGET_AVX512 inline __m512 load_row(const void* w, std::int64_t ldw, int row, int k0, __mmask16 m) {
  if constexpr (Kind == 0) return load_row_bf16(static_cast<const std::uint16_t*>(w) + row * ldw + k0, m);
  else if constexpr (Kind == 1) return load_row_f32(static_cast<const float*>(w) + row * ldw + k0, m);
  else return load_row_e4m3(static_cast<const std::uint8_t*>(w) + row * ldw + k0, m);
}

/// Packs n <= 32 rows x kc columns into [kc][32] f32.
template <int Kind>
DSV32_TARGET_AVX512 void pack_panel(const void* w, std::int64_t ldw, int n, int kc, float* out) {
  for (int k0 = 0; k0 < kc; k0 += 16) {
    const int cnt = kc - k0 < 16 ? kc - k0 : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1u);
    for (int half = 0; half < 2; ++half) {
      __m512 r[16];
      for (int j = 0; j < 16; ++j) {
        const int row = half * 16 + j;
        r[j] = row < n ? load_row<Kind>(w, ldw, row, k0, m) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int c = 0; c < cnt; ++c) _mm512_storeu_ps(out + (k0 + c) * 32 + half * 16, r[c]);
    }
  }
}


/// Packs n <= 16 rows of E4M3 codes x kc columns into [kc][16] doubles.
DSV32_TARGET_AVX512 inline void pack_e4m3_f64(const std::uint8_t* w, std::int64_t ldw, int n, int kc, double* out) {
  for (int k0 = 0; k0 < kc; k0 += 16) {
    const int cnt = kc - k0 < 16 ? kc - k0 : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1u);
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < n ? load_row<2>(w, ldw, j, k0, m) : _mm512_setzero_ps();
    transpose16(r);
    for (int c = 0; c < cnt; ++c) {
      _mm512_storeu_pd(out + (k0 + c) * 16, _mm512_cvtps_pd(_mm512_castps512_ps256(r[c])));
      _mm512_storeu_pd(out + (k0 + c) * 16 + 8,
                       _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r[c]), 1))));
    }
  }
}

/// c[i][0..32) (+)= sum_k a[i * lda + k] b[k][0..32) for i < MR, in increasing k or, kPairSwap, in
/// the FP8 panel order (k = 1, 0, 3, 2, ...: each column pair's odd column first; kc even). kLda /
/// kLdb: the strides as compile-time constants (0: lda / ldb), so that every operand is an
/// immediate offset from two pointers; the pair-swapped loop then steps a column pair at a time
/// (fast FP8 prefill dots on one Granite Rapids core, a 12 x 128 tile against 32-row panels in L1:
/// 148 -> 165 GFLOP/s against the register-only peak's 214).
/// kScaled: instead of storing the sums, c[i][j] += sum_ij * scale[i] for j < n (the f32 epilogue
/// of the FP8 block dots, each operation rounded; `accumulate` false), saving the sums' round trip
/// through memory (fast FP8 prefill dots with their epilogue, one Granite Rapids core: 155 -> 164
/// GFLOP/s; the slice's fast prefill 151 -> 155 tokens/s).
/// Where the loop might not run (kc < 1) or the accumulators' start was a run-time choice, GCC kept
/// them in a zeroed stack array (two `rep stos` of 768 bytes per call) and moved them through it
/// around the loop: so kc < 1 is handled apart, first, and micro32_tile starts from zero or from c
/// as compiled (one Granite Rapids core, the FP8 block dots' 12 x 128 tile against 32-row panels
/// with the epilogue: 160 -> 168 GFLOP/s from L2, 170 -> 175 in L1; the slice's 512-token prefill,
/// two alternating runs: fast 153.5 / 154.0 -> 157.2 / 157.7 tokens/s, exact (micro_f64_tile) 77.9 / 77.5
/// -> 83.1 / 83.4).
template <int MR, bool kRounded, bool kPairSwap, int kLda, int kLdb, bool kScaled, bool kAccumulate>
DSV32_TARGET_AVX512 void micro32_tile(int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                      float* c, std::int64_t ldc, const float* scale, int n) {
  const std::int64_t la = kLda ? kLda : lda, lb = kLdb ? kLdb : ldb;
  if (kc < 1) {  // empty sums
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 32; ++j) {
        if constexpr (kScaled) {
          if (j < n) c[i * ldc + j] += 0.0f * scale[i];  // exact: fused or not
        } else if (!kAccumulate) {
          c[i * ldc + j] = 0.0f;
        }
      }
    return;
  }
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    c0[i] = kAccumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    c1[i] = kAccumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  constexpr int kStep = kPairSwap ? 2 : 1;
  for (int kk = 0; kk < kc; kk += kStep, a += kStep, b += kStep * lb) {
    for (int q = kStep - 1; q >= 0; --q) {  // the pair's odd column first
      const __m512 b0 = _mm512_loadu_ps(b + q * lb), b1 = _mm512_loadu_ps(b + q * lb + 16);
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i * la + q]);
        if constexpr (kRounded) {
          c0[i] = _mm512_add_ps(c0[i], opaque(_mm512_mul_ps(ai, b0)));
          c1[i] = _mm512_add_ps(c1[i], opaque(_mm512_mul_ps(ai, b1)));
        } else {
          c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
          c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
      }
    }
  }
  if constexpr (kScaled) {
    const __mmask16 lo = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
    const __mmask16 hi = static_cast<__mmask16>(n >= 32 ? 0xFFFF : n > 16 ? (1u << (n - 16)) - 1u : 0u);
    for (int i = 0; i < MR; ++i) {
      const __m512 si = _mm512_set1_ps(scale[i]);
      float* ci = c + i * ldc;
      _mm512_mask_storeu_ps(ci, lo, _mm512_add_ps(_mm512_maskz_loadu_ps(lo, ci), opaque(_mm512_mul_ps(c0[i], si))));
      _mm512_mask_storeu_ps(ci + 16, hi,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(hi, ci + 16), opaque(_mm512_mul_ps(c1[i], si))));
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      _mm512_storeu_ps(c + i * ldc, c0[i]);
      _mm512_storeu_ps(c + i * ldc + 16, c1[i]);
    }
  }
}

template <int MR, bool kRounded, bool kPairSwap = false, int kLda = 0, int kLdb = 0, bool kScaled = false>
DSV32_TARGET_AVX512 void micro32(int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                                 std::int64_t ldc, bool accumulate, const float* scale = nullptr, int n = 32) {
  if constexpr (!kScaled)
    if (accumulate) return micro32_tile<MR, kRounded, kPairSwap, kLda, kLdb, false, true>(kc, a, lda, b, ldb, c, ldc, scale, n);
  micro32_tile<MR, kRounded, kPairSwap, kLda, kLdb, kScaled, false>(kc, a, lda, b, ldb, c, ldc, scale, n);
}

/// The f32 micro-kernel over mr rows: tiles of kMr rows, then 8, 4, 2, 1.
template <bool kRounded, bool kPairSwap = false, int kLda = 0, int kLdb = 0, bool kScaled = false>
DSV32_TARGET_AVX512 void micro_any(int mr, int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                   float* c, std::int64_t ldc, bool accumulate, const float* scale = nullptr,
                                   int n = 32) {
  const std::int64_t la = kLda ? kLda : lda;
  for_row_tiles<kMr>(mr, [&](auto rows, int i) DSV32_TARGET_AVX512 {
    micro32<decltype(rows)::value, kRounded, kPairSwap, kLda, kLdb, kScaled>(
        kc, a + i * la, lda, b, ldb, c + i * ldc, ldc, accumulate, scale ? scale + i : nullptr, n);
  });
}

/// GemmOps::fp8_value_dots_scaled: fp8_value_dots with epilogue_f32 in registers.
DSV32_TARGET_AVX512 inline void fp8_value_dots_scaled(int mr, int n, const float* a, std::int64_t lda, const float* b,
                                                      const float* scale, float* c, std::int64_t ldc) {
  if (lda == 128) micro_any<false, true, 128, kNr, true>(mr, 128, a, lda, b, kNr, c, ldc, false, scale, n);
  else micro_any<false, true, 0, 0, true>(mr, 128, a, lda, b, kNr, c, ldc, false, scale, n);
}

/// fp8_pair_dots for MR rows x 32 weight rows on VDPBF16PS.
template <int MR>
DSV32_TARGET_AVX512_BF16 void pair_dots32(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b, float* dot,
                                          std::int64_t ldd) {
  __m512 d0[MR], d1[MR];
  for (int i = 0; i < MR; ++i) d0[i] = d1[i] = _mm512_setzero_ps();
  for (int p = 0; p < 64; ++p) {
    const __m512i b0 = _mm512_loadu_si512(b + p * 32), b1 = _mm512_loadu_si512(b + p * 32 + 16);
    for (int i = 0; i < MR; ++i) {  // not dpbf16_bcast: here GCC then keeps d0 / d1 in memory
      const __m512i ap = _mm512_set1_epi32(static_cast<int>(a[i * lda + p]));
      d0[i] = _mm512_dpbf16_ps(d0[i], (__m512bh)ap, (__m512bh)b0);
      d1[i] = _mm512_dpbf16_ps(d1[i], (__m512bh)ap, (__m512bh)b1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(dot + i * ldd, d0[i]);
    _mm512_storeu_ps(dot + i * ldd + 16, d1[i]);
  }
}

DSV32_TARGET_AVX512_BF16 inline void fp8_pair_dots_bf16(int mr, const std::uint32_t* a, std::int64_t lda,
                                                        const std::uint32_t* b, float* dot, std::int64_t ldd) {
  for_row_tiles<kMr>(mr, [&](auto rows, int i) DSV32_TARGET_AVX512_BF16 {
    pair_dots32<decltype(rows)::value>(a + i * lda, lda, b, dot + i * ldd, ldd);
  });
}

/// c[i][0..16) = sum_k a[i * lda + k] b[k][0..16) in double, i < MR; with kScaled, instead
/// f[i][j] += f32(that sum) * scale[i] for j < n (epilogue_f64 in registers: the same bits).
template <int MR, bool kScaled = false>
DSV32_TARGET_AVX512 void micro_f64_tile(int kc, const double* a, std::int64_t lda, const double* b, double* c, std::int64_t ldc,
                                  int n = 16, const float* scale = nullptr, float* f = nullptr, std::int64_t ldf = 0) {
  if (kc < 1) {  // (apart, so that GCC knows the loop below runs: see micro32_tile)
    if constexpr (!kScaled)
      for (int i = 0; i < MR; ++i) std::fill(c + i * ldc, c + i * ldc + 16, 0.0);
    return;
  }
  __m512d c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_pd();
  for (int k = 0; k < kc; ++k) {
    const __m512d b0 = _mm512_loadu_pd(b + k * 16), b1 = _mm512_loadu_pd(b + k * 16 + 8);
    for (int i = 0; i < MR; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i * lda + k]);
      c0[i] = _mm512_fmadd_pd(ai, b0, c0[i]);
      c1[i] = _mm512_fmadd_pd(ai, b1, c1[i]);
    }
  }
  if constexpr (kScaled) {
    const __mmask16 m = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
    for (int i = 0; i < MR; ++i) {
      const __m512 d = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(c0[i])), _mm512_cvtpd_ps(c1[i]), 1);
      const __m512 p = opaque(_mm512_mul_ps(d, _mm512_set1_ps(scale[i])));
      _mm512_mask_storeu_ps(f + i * ldf, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, f + i * ldf), p));
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      _mm512_storeu_pd(c + i * ldc, c0[i]);
      _mm512_storeu_pd(c + i * ldc + 8, c1[i]);
    }
  }
}

/// GemmOps::micro_f64_scaled: micro_f64 over one 128-column block with epilogue_f64 in registers.
DSV32_TARGET_AVX512 inline void micro_f64_scaled(int mr, int n, const double* a, std::int64_t lda, const double* b,
                                                 const float* scale, float* c, std::int64_t ldc) {
  for_row_tiles<kMr64>(mr, [&](auto rows, int i) DSV32_TARGET_AVX512 {
    micro_f64_tile<decltype(rows)::value, true>(128, a + i * lda, lda, b, nullptr, 0, n, scale + i, c + i * ldc, ldc);
  });
}

DSV32_TARGET_AVX512 inline void widen_bf16(const std::uint16_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, m, load_row_bf16(x + i, m));
  }
}
/// max |x| over n bf16 values; MAXPS(v, acc) keeps acc where v is NaN, as std::max(acc, v) does.
DSV32_TARGET_AVX512 inline float amax_bf16(const std::uint16_t* x, std::int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    acc = _mm512_max_ps(_mm512_abs_ps(load_row_bf16(x + i, m)), acc);  // masked-off lanes read 0
  }
  return _mm512_reduce_max_ps(acc);  // exact in any order
}
/// encode_e4m3(clamp(f32(x) / s, -448, 448)), 16 at a time, branch-free: the same bits.
DSV32_TARGET_AVX512 inline void quantize_e4m3(const std::uint16_t* x, std::int64_t n, float s, std::uint8_t* out) {
  const __m512 vs = _mm512_set1_ps(s), hi = _mm512_set1_ps(kE4m3Max), lo = _mm512_set1_ps(-kE4m3Max);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    // std::clamp: lo if v < lo, else hi if hi < v, else v (NaN stays NaN): MINPS / MAXPS return
    // their second operand unless the first compares smaller / greater
    const __m512 v = _mm512_max_ps(lo, _mm512_min_ps(hi, _mm512_div_ps(load_row_bf16(x + i, m), vs)));
    const __m512i bits = _mm512_castps_si512(v), abs = _mm512_and_si512(bits, abs_mask);
    const __m512 a = _mm512_castsi512_ps(abs);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
    // normal: 3 mantissa bits, half to even on the bit pattern; (e + 7) << 3 | m == (r >> 20) - 960
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(abs, _mm512_set1_epi32(0x7FFFF)),
                                       _mm512_and_si512(_mm512_srli_epi32(abs, 20), _mm512_set1_epi32(1)));
    __m512i code = _mm512_sub_epi32(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(960));
    // subnormal: multiples of 2^-9, rounded in the current mode (nearbyint's)
    const __mmask16 sub = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.015625f), _CMP_LT_OQ);
    code = _mm512_mask_mov_epi32(code, sub, _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(512.0f))));
    code = _mm512_mask_mov_epi32(code, _mm512_cmp_ps_mask(a, hi, _CMP_GE_OQ), _mm512_set1_epi32(0x7E));
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7F800000)),
                                 _mm512_set1_epi32(0x7F));
    _mm_mask_storeu_epi8(out + i, m, _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign)));
  }
}
/// 16 E4M3 activation codes as exact f32 values, the NaN codes as NaN.
DSV32_TARGET_AVX512 inline __m512 load_x_e4m3(const std::uint8_t* p, __mmask16 m) {
  const __m128i c = _mm_maskz_loadu_epi8(m, p);
  const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_and_si128(c, _mm_set1_epi8(0x7F)), _mm_set1_epi8(0x7F));
  return _mm512_mask_mov_ps(load_row_e4m3(p, m), nan, _mm512_set1_ps(__builtin_nanf("")));
}
DSV32_TARGET_AVX512 inline void widen_e4m3(const std::uint8_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, m, load_x_e4m3(x + i, m));
  }
}
DSV32_TARGET_AVX512 inline void widen_e4m3_f64(const std::uint8_t* x, std::int64_t n, double* out) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const int cnt = n - i >= 16 ? 16 : static_cast<int>(n - i);
    const __mmask16 m = static_cast<__mmask16>((1u << cnt) - 1u);
    const __m512 v = load_x_e4m3(x + i, m);
    _mm512_mask_storeu_pd(out + i, static_cast<__mmask8>(m & 0xFF), _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    _mm512_mask_storeu_pd(out + i + 8, static_cast<__mmask8>(m >> 8),
                          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
}

DSV32_TARGET_AVX512 inline void dequant_e4m3(const std::uint8_t* w, std::int64_t n, const float* block_scale,
                                             float* out) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1u);
    const float s = block_scale[i / 128];
    if (e4m3_scale_exact(s)) {  // value * s in one rounding, which is exact in bf16
      _mm512_mask_storeu_ps(out + i, m, load_row_e4m3(w + i, m, s));
      continue;
    }
    const __m512 v = _mm512_mul_ps(load_row_e4m3(w + i, m), _mm512_set1_ps(s));
    // to the nearest bf16, ties to even, as a float (the bits of bf16 rounding, finite values)
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF)), lsb);
    _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)))));
  }
}

DSV32_TARGET_AVX512 inline void epilogue_f64(int mr, int n, const double* dot, std::int64_t ldd, const float* scale,
                                             float* c, std::int64_t ldc) {
  for (int i = 0; i < mr; ++i) {
    const __m256 s = _mm256_set1_ps(scale[i]);
    for (int j = 0; j < n; j += 8) {
      const __mmask8 m = static_cast<__mmask8>(n - j >= 8 ? 0xFF : (1u << (n - j)) - 1u);
      const __m256 d = _mm512_cvtpd_ps(_mm512_maskz_loadu_pd(m, dot + i * ldd + j));
      const __m256 p = opaque(_mm256_mul_ps(d, s));
      _mm256_mask_storeu_ps(c + i * ldc + j, m, _mm256_add_ps(_mm256_maskz_loadu_ps(m, c + i * ldc + j), p));
    }
  }
}

DSV32_TARGET_AVX512 inline void epilogue_f32(int mr, int n, const float* dot, std::int64_t ldd, const float* scale,
                                             float* c, std::int64_t ldc) {
  for (int i = 0; i < mr; ++i) {
    const __m512 s = _mm512_set1_ps(scale[i]);
    for (int j = 0; j < n; j += 16) {
      const __mmask16 m = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
      const __m512 p = opaque(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, dot + i * ldd + j), s));
      _mm512_mask_storeu_ps(c + i * ldc + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, c + i * ldc + j), p));
    }
  }
}

/// 32 columns (16 pairs) of 16 bf16 weight rows from column k0 on, as r[c] = pair c of every row
/// (dword lane j: row j's bf16 bits of columns k0 + 2c, low half, and k0 + 2c + 1, high half); rows
/// >= n and columns past `left` read as zero. A full tile is gathered by 128-bit broadcast loads
/// (each 128-bit lane L of a vector from row 4L + q) and finished by a 4 x 4 dword transpose inside
/// the 128-bit lanes: half the shuffles of the 16 x 16 transpose that the partial tiles take.
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline void load_pairs16(const std::uint16_t* w, std::int64_t ldw,
                                                                           int n, std::int64_t k0, std::int64_t left,
                                                                           __m512i r[16]) {
  if (n == 16 && left >= 32) {
    __m512i v[4][4];  // v[q][g]: lane L holds dwords 4g..4g+3 of row 4L + q
    for (int q = 0; q < 4; ++q)
      for (int g = 0; g < 4; ++g) {
        const std::uint16_t* p = w + q * ldw + k0 + 8 * g;
        __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        t = _mm512_mask_broadcast_i32x4(t, 0x00F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * ldw)));
        t = _mm512_mask_broadcast_i32x4(t, 0x0F00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * ldw)));
        v[q][g] = _mm512_mask_broadcast_i32x4(t, 0xF000,
                                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12 * ldw)));
      }
    for (int g = 0; g < 4; ++g) {
      const __m512i t0 = _mm512_unpacklo_epi32(v[0][g], v[1][g]), t1 = _mm512_unpackhi_epi32(v[0][g], v[1][g]);
      const __m512i t2 = _mm512_unpacklo_epi32(v[2][g], v[3][g]), t3 = _mm512_unpackhi_epi32(v[2][g], v[3][g]);
      r[4 * g + 0] = _mm512_unpacklo_epi64(t0, t2);
      r[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
      r[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
      r[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
    return;
  }
  const __mmask32 mask = left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1u);
  __m512 f[16];
  for (int j = 0; j < 16; ++j)
    f[j] = j < n ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, w + j * ldw + k0)) : _mm512_setzero_ps();
  transpose16(f);
  for (int j = 0; j < 16; ++j) r[j] = _mm512_castps_si512(f[j]);
}

/// Prefetches column k of n bf16 rows (nothing at or past K).
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline void prefetch_rows(const std::uint16_t* w, std::int64_t ldw,
                                                                             int n, std::int64_t k, std::int64_t K) {
  if (k < K)
    for (int j = 0; j < n; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + j * ldw + k), _MM_HINT_T0);
}

/// bf16_rows for MT x rows and 16 weight rows: 32 columns of the 16 rows at a time as 16 vectors of
/// column pairs (load_pairs16), each pair's even then odd column multiplied into the accumulators —
/// no packed panel is written.
template <int MT>
DSV32_TARGET_AVX512 void bf16_rows16(std::int64_t K, const float* x, std::int64_t ldx, const std::uint16_t* w,
                                     std::int64_t ldw, int n, float* out, std::int64_t ldo) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __mmask16 rows = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
  if (K < 1) {  // (apart, so that GCC knows the loop below runs: see micro32_tile)
    for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(out + m * ldo, rows, _mm512_setzero_ps());
    return;
  }
  __m512 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
  for (std::int64_t k0 = 0; k0 < K; k0 += 32) {
    __m512i r[16];
    load_pairs16(w, ldw, n, k0, K - k0, r);
    prefetch_rows(w, ldw, n, k0 + 256, K);
#if !defined(__CUDACC__)  // nvcc's front end does not know the pragma (gcc compiles this code anyway)
#pragma GCC unroll 16
#endif
    for (int c = 0; c < 16; ++c) {
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(r[c], 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(r[c], hi));
      for (int m = 0; m < MT; ++m) acc[m] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[m * ldx + k0 + 2 * c]), acc[m]);
      for (int m = 0; m < MT; ++m) acc[m] = _mm512_fmadd_ps(odd, _mm512_set1_ps(x[m * ldx + k0 + 2 * c + 1]), acc[m]);
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(out + m * ldo, rows, acc[m]);
}

/// Calls Kernel<MT> over x's rows in groups of 8, 4, 2 and 1.
template <template <int> class Kernel, class... Args>
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline void by_row_groups(int M, Args... args) {
  for (int m0 = 0; m0 < M;) {
    const int left = M - m0;
    if (left >= 8) Kernel<8>::run(m0, args...), m0 += 8;
    else if (left >= 4) Kernel<4>::run(m0, args...), m0 += 4;
    else if (left >= 2) Kernel<2>::run(m0, args...), m0 += 2;
    else Kernel<1>::run(m0, args...), m0 += 1;
  }
}

template <int MT>
struct Bf16Rows {
  DSV32_TARGET_AVX512 static void run(int m0, int n, std::int64_t K, const float* x, std::int64_t ldx,
                                      const std::uint16_t* w, std::int64_t ldw, float* out, std::int64_t ldo) {
    bf16_rows16<MT>(K, x + m0 * ldx, ldx, w, ldw, n, out + m0 * ldo, ldo);
  }
};

DSV32_TARGET_AVX512 inline void bf16_rows(int M, int n, std::int64_t K, const float* x, std::int64_t ldx,
                                          const std::uint16_t* w, std::int64_t ldw, float* out, std::int64_t ldo) {
  by_row_groups<Bf16Rows>(M, n, K, x, ldx, w, ldw, out, ldo);
}

/// bf16_rows16 on VDPBF16PS: each pair's halves swapped in the register (VDPBF16PS adds the high
/// halves' product first, so the even column's product comes first, as in bf16_rows16), x given as
/// bf16 pairs swapped the same way. The instruction flushes subnormal inputs and results to zero,
/// which no operand of the call reaches when every weight's biased exponent is at least the
/// caller's bound (GemmOps::bf16_pair_rows); returns false, with out unwritten, when a weight of
/// the 16 rows is below it (nonzero |bits| - 1 < limit, as unsigned 16-bit: zeros pass).
template <int MT>
DSV32_TARGET_AVX512_BF16 bool bf16_pair_rows16(std::int64_t K, const std::uint32_t* xp, std::int64_t ldx,
                                               std::uint16_t limit, const std::uint16_t* w, std::int64_t ldw, int n,
                                               float* out, std::int64_t ldo) {
  const __m512i magnitude = _mm512_set1_epi16(0x7FFF), one = _mm512_set1_epi16(1);
  __m512i low = _mm512_set1_epi16(-1);  // the least |bits| - 1 seen, as unsigned 16-bit
  if (K < 1) return false;  // (bf16_rows16 then; apart, so that GCC knows the loop below runs)
  __m512 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
  for (std::int64_t k0 = 0; k0 < K; k0 += 32) {
    __m512i r[16];
    load_pairs16(w, ldw, n, k0, K - k0, r);
    prefetch_rows(w, ldw, n, k0 + 256, K);
#if !defined(__CUDACC__)
#pragma GCC unroll 16
#endif
    for (int c = 0; c < 16; ++c) {
      low = _mm512_min_epu16(low, _mm512_sub_epi16(_mm512_and_si512(r[c], magnitude), one));
      const __m512i d = _mm512_rol_epi32(r[c], 16);
      for (int m = 0; m < MT; ++m)
        acc[m] = dpbf16_bcast(acc[m], d, xp + m * ldx + k0 / 2 + c);
    }
  }
  if (_mm512_cmplt_epu16_mask(low, _mm512_set1_epi16(static_cast<short>(limit))) != 0) return false;
  const __mmask16 rows = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
  for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(out + m * ldo, rows, acc[m]);
  return true;
}

template <int MT>
struct Bf16PairRows {
  DSV32_TARGET_AVX512_BF16 static void run(int m0, int n, std::int64_t K, const float* x, std::int64_t ldx,
                                           const std::uint32_t* xp, std::int64_t ldxp, std::uint16_t limit,
                                           const std::uint16_t* w, std::int64_t ldw, float* out, std::int64_t ldo) {
    if (!bf16_pair_rows16<MT>(K, xp + m0 * ldxp, ldxp, limit, w, ldw, n, out + m0 * ldo, ldo))
      bf16_rows16<MT>(K, x + m0 * ldx, ldx, w, ldw, n, out + m0 * ldo, ldo);
  }
};

DSV32_TARGET_AVX512_BF16 inline void bf16_pair_rows(int M, int n, std::int64_t K, const float* x, std::int64_t ldx,
                                                    const std::uint32_t* xp, std::int64_t ldxp, std::uint16_t limit,
                                                    const std::uint16_t* w, std::int64_t ldw, float* out,
                                                    std::int64_t ldo) {
  by_row_groups<Bf16PairRows>(M, n, K, x, ldx, xp, ldxp, limit, w, ldw, out, ldo);
}

/// The sums of eight vectors of doubles, as the eight lanes of one vector.
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline __m512d reduce8(const __m512d a[8]) {
  const __m512d b0 = _mm512_add_pd(_mm512_unpacklo_pd(a[0], a[1]), _mm512_unpackhi_pd(a[0], a[1]));
  const __m512d b1 = _mm512_add_pd(_mm512_unpacklo_pd(a[2], a[3]), _mm512_unpackhi_pd(a[2], a[3]));
  const __m512d b2 = _mm512_add_pd(_mm512_unpacklo_pd(a[4], a[5]), _mm512_unpackhi_pd(a[4], a[5]));
  const __m512d b3 = _mm512_add_pd(_mm512_unpacklo_pd(a[6], a[7]), _mm512_unpackhi_pd(a[6], a[7]));
  // b_i: 128-bit lane L = (part L of sum a[2i], part L of sum a[2i+1])
  const __m512d c0 = _mm512_add_pd(_mm512_shuffle_f64x2(b0, b1, 0x44), _mm512_shuffle_f64x2(b0, b1, 0xEE));
  const __m512d c1 = _mm512_add_pd(_mm512_shuffle_f64x2(b2, b3, 0x44), _mm512_shuffle_f64x2(b2, b3, 0xEE));
  // c0 lanes: (b0 L0+L2, b0 L1+L3, b1 L0+L2, b1 L1+L3)
  return _mm512_add_pd(_mm512_shuffle_f64x2(c0, c1, 0x88), _mm512_shuffle_f64x2(c0, c1, 0xDD));
}

// the small-M kernels' hints one row group ahead (gemm_avx2.hpp)
using avx2::kPanelPrefetchMaxK;
using avx2::prefetch_block;

/// Blocks [kb0, kb1) of e4m3_rows for MT x rows and R weight rows (MT * R <= 16): xd at column 0
/// (rows ldx apart), xs the x scales (rows ldxs apart), wr[r] weight row r's first code; adds each
/// block's product to out[m][r] for r < valid_rows, kept in registers from block to block (the same
/// additions, in the same order, as adding to out in memory per block).
template <int MT, int R>
DSV32_TARGET_AVX512 void e4m3_blocks(std::int64_t kb0, std::int64_t kb1, const double* xd, std::int64_t ldx,
                                     const float* xs, std::int64_t ldxs, const std::uint8_t* const* wr,
                                     const float* ws, int valid_rows, float* out, std::int64_t ldo,
                                     std::int64_t ahead) {
  constexpr int A = MT * R, V = A > 8 ? 2 : 1;
  // Each weight code becomes the double whose top 16 bits are sign << 15 | (code & 0x7F) << 1 and
  // whose other bits are 0: the code's value times 2^-1016 (E4M3 subnormals land on double
  // subnormals with the same factor). With 1 or 2 x rows the kernel is bound by the conversion, so
  // the words of 64 codes are made at once. One VPERMW per 64 codes (`deal`) first deals their code
  // pairs to the 128-bit lanes so that lane L holds, for j = 0..7, codes 8j + 2L and 8j + 2L + 1;
  // two unpacks interleave the bytes c + c and c & 0x80 (word 2j + u of lane L in `lo`: code
  // 8j + 2L + u for j < 4; in `hi` the same for j + 4); then one in-lane byte shuffle (VPSHUFB) per
  // 8 codes moves word 2j + u of each lane to the top of lane 2L + u's double and zeroes the rest:
  // codes 8j .. 8j + 7 in order. A VPSHUFB is one operation where the VPERMW per 8 codes it
  // replaces was two (Granite Rapids: a VPERMW with an FMA, 1.5 cycles per pair in a stand-alone
  // loop; a byte shuffle with an FMA, 1.1). On Zen 4 about half the vector operations per code of
  // the sign extension, shift and mask per 8 codes that 4 and 8 x rows keep: those are bound by
  // their FMAs, and their registers are taken by accumulators and x.
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) std::uint16_t deal_words[32];
  for (int w = 0; w < 32; ++w) deal_words[w] = static_cast<std::uint16_t>(4 * (w % 8) + w / 8);
  const __m512i deal = _mm512_load_si512(deal_words);
  __m512i place[4];  // qword u of each lane: bytes 6, 7 from word 2j + u (bytes 4j + 2u, + 1); the rest 0
  for (int j = 0; j < 4; ++j) {
    const long long q0 = static_cast<long long>(0x0000808080808080ull | (4ull * j) << 48 | (4ull * j + 1) << 56);
    place[j] = _mm512_set_epi64(q0 + (0x0202ll << 48), q0, q0 + (0x0202ll << 48), q0, q0 + (0x0202ll << 48), q0,
                                q0 + (0x0202ll << 48), q0);
  }
  const __m512i mask = _mm512_set1_epi64(static_cast<long long>(0x80FE000000000000ull));
  alignas(32) float c[8 * V];
  for (int i = 0; i < 8 * V; ++i) c[i] = i < A && i % R < valid_rows ? out[(i / R) * ldo + i % R] : 0.0f;
  __m256 cv[V];
  for (int v = 0; v < V; ++v) cv[v] = _mm256_load_ps(c + 8 * v);
  for (std::int64_t kb = kb0; kb < kb1; ++kb) {
    if (ahead)
      for (int r = 0; r < R; ++r) prefetch_block(wr[r], ahead + kb * 128);
    const double* xb = xd + kb * 128;
    __m512d acc[8 * V];
    for (int i = 0; i < 8 * V; ++i) acc[i] = _mm512_setzero_pd();
    if constexpr (MT <= 2) {
      for (int half = 0; half < 128; half += 64) {
        __m512i lo[R], hi[R];
        for (int r = 0; r < R; ++r) {
          const __m512i codes = _mm512_permutexvar_epi16(deal, _mm512_loadu_si512(wr[r] + kb * 128 + half));
          const __m512i t = _mm512_add_epi8(codes, codes), sg = _mm512_and_si512(codes, sign);
          lo[r] = _mm512_unpacklo_epi8(t, sg);
          hi[r] = _mm512_unpackhi_epi8(t, sg);
        }
#if !defined(__CUDACC__)  // unrolled at -O2 too: place[j % 4] and the lo / hi choice stay in registers
#pragma GCC unroll 8
#endif
        for (int j = 0; j < 8; ++j) {
          const int k = half + 8 * j;
          __m512d xv[MT];
          for (int m = 0; m < MT; ++m) xv[m] = _mm512_loadu_pd(xb + m * ldx + k);
          for (int r = 0; r < R; ++r) {
            const __m512i words = j < 4 ? lo[r] : hi[r];
            const __m512d wv = _mm512_castsi512_pd(_mm512_shuffle_epi8(words, place[j % 4]));
            for (int m = 0; m < MT; ++m) acc[m * R + r] = _mm512_fmadd_pd(wv, xv[m], acc[m * R + r]);
          }
        }
      }
    } else {
      for (int k = 0; k < 128; k += 8) {
        __m512d xv[MT];
        for (int m = 0; m < MT; ++m) xv[m] = _mm512_loadu_pd(xb + m * ldx + k);
        for (int r = 0; r < R; ++r) {
          // 8 codes -> sign to bit 63, exponent and mantissa to bits 55..49
          const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr[r] + kb * 128 + k));
          const __m512d wv =
              _mm512_castsi512_pd(_mm512_and_si512(_mm512_slli_epi64(_mm512_cvtepi8_epi64(codes), 49), mask));
          for (int m = 0; m < MT; ++m) acc[m * R + r] = _mm512_fmadd_pd(wv, xv[m], acc[m * R + r]);
        }
      }
    }
    for (int v = 0; v < V; ++v) {
      // exact dots times 2^-504 -> exact dots -> f32, then times the scale product, then added
      const __m512d d = _mm512_mul_pd(reduce8(acc + 8 * v), _mm512_set1_pd(0x1p504));
      alignas(32) float scale[8];
      for (int i = 0; i < 8; ++i) {
        const int m = (8 * v + i) / R;
        scale[i] = m < MT ? xs[m * ldxs + kb] * ws[kb] : 0.0f;
      }
      cv[v] = _mm256_add_ps(cv[v], opaque(_mm256_mul_ps(_mm512_cvtpd_ps(d), _mm256_load_ps(scale))));
    }
  }
  for (int v = 0; v < V; ++v) _mm256_store_ps(c + 8 * v, cv[v]);
  for (int i = 0; i < A; ++i)
    if (i % R < valid_rows) out[(i / R) * ldo + i % R] = c[i];
}

/// Weight rows per group of mt x rows in e4m3_rows (MT x R <= 16 accumulators of 8 doubles).
constexpr int e4m3_weight_rows(int mt) { return mt == 8 ? 2 : mt == 4 ? 4 : 8; }

/// The high and low bytes of bf16(|value|) of E4M3 codes 0..127 (0x7F reading as 480): the fast
/// small-M kernel's lookup tables (VPERMI2B indexes 128 bytes with a code's low 7 bits).
struct E4m3Bf16Bytes {
  alignas(64) std::uint8_t lo[128];
  alignas(64) std::uint8_t hi[128];
};
inline const E4m3Bf16Bytes& e4m3_bf16_bytes() {
  static const E4m3Bf16Bytes t = [] {
    E4m3Bf16Bytes b{};
    for (int c = 0; c < 128; ++c) {
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(kE4m3Weight[c]);  // exact in bf16
      b.lo[c] = static_cast<std::uint8_t>(bits >> 16);
      b.hi[c] = static_cast<std::uint8_t>(bits >> 24);
    }
    return b;
  }();
  return t;
}

/// a += the 64 products of one x row's half block (bf16 pairs x0, x1) and one weight row's (w0, w1):
/// x0 . w0, then x1 . w1, each pair odd column first — VDPBF16PS (kDot) or the same two FMAs per pair.
template <bool kDot>
DSV32_TARGET_AVX512_BF16_VBMI __attribute__((always_inline)) inline void pair_products(__m512& a, __m512i x0, __m512i x1,
                                                                                      __m512i w0, __m512i w1) {
  if constexpr (kDot) {
    a = _mm512_dpbf16_ps(a, (__m512bh)x0, (__m512bh)w0);
    a = _mm512_dpbf16_ps(a, (__m512bh)x1, (__m512bh)w1);
  } else {
    const __m512i hi_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int q = 0; q < 2; ++q) {
      const __m512i xv = q ? x1 : x0, wv = q ? w1 : w0;
      a = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(xv, hi_half)),
                          _mm512_castsi512_ps(_mm512_and_si512(wv, hi_half)), a);
      a = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(xv, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16)),
                          a);
    }
  }
}

/// e4m3_pair_rows (the row order, gemm_ops.hpp) for MT x rows and R weight rows, MT * R = 16: per
/// 64 codes of a row, two byte lookups and an unpack give the bf16 pairs in slot order (lane d of
/// the low unpack: pair 8 (d / 4) + d % 4; of the high one: 4 more), multiplied into one 16-lane
/// accumulator per (x row, weight row) — VDPBF16PS (kDot) or the same two FMAs per pair; per block
/// the 16 accumulators are reduced together, the lanes added in the row order's tree, and scaled by
/// the block's 16 scales (scales + 16 (kb - kb0): x row's scale times the weights', lane order m R + r).
template <int MT, int R, bool kDot>
DSV32_TARGET_AVX512_BF16_VBMI void e4m3_pair_group(std::int64_t kb0, std::int64_t kb1, const std::uint32_t* xp,
                                                   std::int64_t ldx, const float* scales,
                                                   const std::uint8_t* const* wr, int valid, float* out,
                                                   std::int64_t ldo, std::int64_t ahead) {
  static_assert(MT * R == 16);
  const E4m3Bf16Bytes& lut = e4m3_bf16_bytes();
  const __m512i tl0 = _mm512_load_si512(lut.lo), tl1 = _mm512_load_si512(lut.lo + 64);
  const __m512i th0 = _mm512_load_si512(lut.hi), th1 = _mm512_load_si512(lut.hi + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  // after the reduction lane 4q + e holds accumulator 4e + q
  const __m512i unscramble = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  alignas(64) float c[16];
  for (int i = 0; i < 16; ++i) c[i] = i % R < valid ? out[(i / R) * ldo + i % R] : 0.0f;
  __m512 cv = _mm512_load_ps(c);
  for (std::int64_t kb = kb0; kb < kb1; ++kb) {
    if (ahead)
      for (int r = 0; r < R; ++r) prefetch_block(wr[r], ahead + kb * 128);
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (int half = 0; half < 2; ++half) {
      __m512i wv[R][2];
      for (int r = 0; r < R; ++r) {
        const __m512i code = _mm512_loadu_si512(wr[r] + kb * 128 + 64 * half);
        const __m512i lo = _mm512_permutex2var_epi8(tl0, code, tl1);
        // hi | (code & 0x80): the sign bit joins the looked-up high byte
        const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(th0, code, th1), code, sign, 0xF8);
        wv[r][0] = _mm512_unpacklo_epi8(lo, hi);
        wv[r][1] = _mm512_unpackhi_epi8(lo, hi);
        if constexpr (R > 4) {  // one x row: its two vectors stay in registers across r
          for (int m = 0; m < MT; ++m) {
            const std::uint32_t* x = xp + m * ldx + kb * 64 + 32 * half;
            pair_products<kDot>(acc[m * R + r], _mm512_loadu_si512(x), _mm512_loadu_si512(x + 16), wv[r][0], wv[r][1]);
          }
        }
      }
      if constexpr (R <= 4) {  // several x rows: each row's vectors loaded once for the R weight rows
        for (int m = 0; m < MT; ++m) {
          const std::uint32_t* x = xp + m * ldx + kb * 64 + 32 * half;
          const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 16);
          for (int r = 0; r < R; ++r) pair_products<kDot>(acc[m * R + r], x0, x1, wv[r][0], wv[r][1]);
        }
      }
    }
    // l[i] + l[i + 8], then + 4 lanes, + 2, + 1, 16 accumulators at once. Where a level keeps half
    // of each pair's operands in place, a blend takes them and one shuffle brings the other half
    // (b's high lanes plus its low ones: the same sums, commuted).
    __m512 t[8], u[4], v[2];
    for (int j = 0; j < 8; ++j)  // (a low, b high) + (a high, b low)
      t[j] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, acc[2 * j], acc[2 * j + 1]),
                           _mm512_shuffle_f32x4(acc[2 * j], acc[2 * j + 1], 0x4E));
    for (int j = 0; j < 4; ++j)
      u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xDD));
    for (int j = 0; j < 2; ++j)  // per 128-bit lane: (u0 0 1, u1 2 3) + (u0 2 3, u1 0 1)
      v[j] = _mm512_add_ps(_mm512_mask_blend_ps(0xCCCC, u[2 * j], u[2 * j + 1]),
                           _mm512_shuffle_ps(u[2 * j], u[2 * j + 1], 0x4E));
    const __m512 dots = _mm512_permutexvar_ps(
        unscramble, _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD)));
    cv = _mm512_add_ps(cv, opaque(_mm512_mul_ps(dots, _mm512_load_ps(scales + 16 * (kb - kb0)))));
  }
  _mm512_store_ps(c, cv);
  for (int i = 0; i < 16; ++i)
    if (i % R < valid) out[(i / R) * ldo + i % R] = c[i];
}

template <bool kDot>
DSV32_TARGET_AVX512_BF16_VBMI void e4m3_pair_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                                  const std::uint32_t* xp, std::int64_t ldx, const float* xs,
                                                  std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                                  const float* ws, float* out, std::int64_t ldo) {
  // x rows in groups of 8, 4, 2, 1 (at most 4 groups for M <= 8, more for larger M). Blocks per
  // pass: the groups' scale vectors share 8 KB of stack, 128 / groups blocks each. With one group
  // (1, 2, 4 or 8 x rows) a pass covers up to 16384 columns, so each weight row is streamed in one
  // piece: passes of 32 blocks restarted every row's stream at each pass, and the one-row products
  // read 18.3-19.2 GB/s from DRAM on two Granite Rapids cores, 20.6-21.4 with 128 (7168- to
  // 18432-column rows).
  alignas(64) float scales[128 * 16];
  for (int m00 = 0; m00 < M; m00 += 15) {
    const int M1 = M - m00 < 15 ? M - m00 : 15;
    int group_m0[4], group_mt[4], groups = 0;
    for (int m0 = m00; m0 < m00 + M1; m0 += group_mt[groups++]) {
      const int left = m00 + M1 - m0;
      group_m0[groups] = m0;
      group_mt[groups] = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    }
    const std::int64_t chunk = 128 / groups;
    for (std::int64_t c0 = kb0; c0 < kb1; c0 += chunk) {
      const std::int64_t c1 = kb1 - c0 < chunk ? kb1 : c0 + chunk;
      // per block, the 16 outputs' scales (x row's times the weights'), in the groups' lane order
      for (int g = 0; g < groups; ++g) {
        const int R = 16 / group_mt[g];
        for (std::int64_t kb = c0; kb < c1; ++kb)
          for (int i = 0; i < 16; ++i)
            scales[g * chunk * 16 + 16 * (kb - c0) + i] = xs[(group_m0[g] + i / R) * ldxs + kb] * ws[kb];
      }
      // 16 weight rows at a time (in cache for every x-row group after the first)
      for (int g0 = 0; g0 < rows; g0 += 16) {
        for (int g = 0; g < groups; ++g) {
          const int m0 = group_m0[g], mt = group_mt[g], R = 16 / mt;
          const std::uint32_t* x = xp + m0 * ldx;
          // the first x-row group asks for the next 16 rows' blocks where rows are short
          const std::int64_t ahead = g == 0 && ldw <= kPanelPrefetchMaxK ? 16 * ldw : 0;
          for (int r0 = g0; r0 < g0 + 16 && r0 < rows; r0 += R) {
            const int valid = rows - r0 < R ? rows - r0 : R;
            const std::uint8_t* wr[16];
            for (int r = 0; r < R; ++r) wr[r] = w + (r0 + (r < valid ? r : 0)) * ldw;  // a stand-in row past the last
            float* o = out + m0 * ldo + r0;
            const float* gs = scales + g * chunk * 16;
            if (mt == 8) e4m3_pair_group<8, 2, kDot>(c0, c1, x, ldx, gs, wr, valid, o, ldo, ahead);
            else if (mt == 4) e4m3_pair_group<4, 4, kDot>(c0, c1, x, ldx, gs, wr, valid, o, ldo, ahead);
            else if (mt == 2) e4m3_pair_group<2, 8, kDot>(c0, c1, x, ldx, gs, wr, valid, o, ldo, ahead);
            else e4m3_pair_group<1, 16, kDot>(c0, c1, x, ldx, gs, wr, valid, o, ldo, ahead);
          }
        }
      }
    }
  }
}

/// Columns 16 h .. 16 h + 15 of 16 weight rows (p: row 0's column 16 h, rows ldw apart) as code
/// pairs: 16-byte pieces of the rows gathered by 128-bit broadcast loads (lane L of vector q from
/// row 4L + q) and transposed inside the 128-bit lanes (two 16-bit and two 32-bit unpack levels);
/// per 128-bit lane, c[j] holds pairs 2j and 2j + 1 of the 8, each as the 4 rows' code pairs in row
/// order.
DSV32_TARGET_AVX512_VBMI __attribute__((always_inline)) inline void panel_codes16(const std::uint8_t* p,
                                                                                std::int64_t ldw, __m512i c[4]) {
  __m512i v[4];
  for (int q = 0; q < 4; ++q) {
    const std::uint8_t* r = p + q * ldw;
    __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r)));
    t = _mm512_mask_broadcast_i32x4(t, 0x00F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 4 * ldw)));
    t = _mm512_mask_broadcast_i32x4(t, 0x0F00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 8 * ldw)));
    v[q] = _mm512_mask_broadcast_i32x4(t, 0xF000, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 12 * ldw)));
  }
  const __m512i a0 = _mm512_unpacklo_epi16(v[0], v[1]), a1 = _mm512_unpackhi_epi16(v[0], v[1]);
  const __m512i b0 = _mm512_unpacklo_epi16(v[2], v[3]), b1 = _mm512_unpackhi_epi16(v[2], v[3]);
  c[0] = _mm512_unpacklo_epi32(a0, b0);
  c[1] = _mm512_unpackhi_epi32(a0, b0);
  c[2] = _mm512_unpacklo_epi32(a1, b1);
  c[3] = _mm512_unpackhi_epi32(a1, b1);
}

/// The lookup tables of e4m3_bf16_bytes in registers, and the sign mask.
struct PanelLut {
  __m512i tl0, tl1, th0, th1, sign;
  DSV32_TARGET_AVX512_VBMI __attribute__((always_inline)) static PanelLut load() {
    const E4m3Bf16Bytes& lut = e4m3_bf16_bytes();
    return {_mm512_load_si512(lut.lo), _mm512_load_si512(lut.lo + 64), _mm512_load_si512(lut.hi),
            _mm512_load_si512(lut.hi + 64), _mm512_set1_epi8(static_cast<char>(0x80))};
  }
};

/// One vector of panel_codes16 looked up as bf16 bytes (as in e4m3_pair_group) and byte-unpacked:
/// dword lane j of pair[e] is row j's column pair 4 j' + 2 e + (0, 1) of the vector's two pairs
/// (the even column in the low half).
DSV32_TARGET_AVX512_VBMI __attribute__((always_inline)) inline void panel_pairs16(const PanelLut& t, __m512i c,
                                                                                __m512i pair[2]) {
  const __m512i lo = _mm512_permutex2var_epi8(t.tl0, c, t.tl1);
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.th0, c, t.th1), c, t.sign, 0xF8);
  pair[0] = _mm512_unpacklo_epi8(lo, hi);
  pair[1] = _mm512_unpackhi_epi8(lo, hi);
}

/// The panel kernels' per-block bookkeeping for `valid` weight rows: the hints one group ahead
/// (not on the zero-padded tile) and the epilogue, out[m] += f32(acc[m]) * (x scale * weight
/// scale), the multiply and the add rounded apart.
struct PanelBlocks {
  __mmask16 lanes;
  bool ahead;
  DSV32_TARGET_AVX512 PanelBlocks(int valid, std::int64_t ldw)
      : lanes(static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1u)),
        ahead(valid == 16 && ldw <= kPanelPrefetchMaxK) {}
  DSV32_TARGET_AVX512 __attribute__((always_inline)) void prefetch(const std::uint8_t* w, std::int64_t ldw,
                                                                   std::int64_t kb) const {
    if (ahead)
      for (int r = 0; r < 16; ++r) prefetch_block(w + r * ldw, 16 * ldw + kb * 128);
  }
  template <int MT>
  DSV32_TARGET_AVX512 __attribute__((always_inline)) void finish(const __m512* acc, const float* xs,
                                                                 std::int64_t ldxs, const float* ws, std::int64_t kb,
                                                                 float* out, std::int64_t ldo) const {
    for (int m = 0; m < MT; ++m) {
      const __m512 scaled = opaque(_mm512_mul_ps(acc[m], _mm512_set1_ps(xs[m * ldxs + kb] * ws[kb])));
      _mm512_mask_storeu_ps(out + m * ldo, lanes, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, out + m * ldo), scaled));
    }
  }
};

/// e4m3_panel_rows (the panel order, gemm_ops.hpp) on VDPBF16PS for MT x rows against 16 weight
/// rows, lanes running over the weight rows: per 16 columns panel_codes16 and panel_pairs16 leave
/// vectors whose dword lane j is row j's column pair, each multiplied into MT accumulators (one per
/// x row, the x pair broadcast from memory) in increasing pair order. No reduction across lanes: per
/// block each accumulator is scaled and added to out. Arguments start at the first block (xp, xs,
/// w, ws); `blocks` blocks; out's rows masked to the `valid` weight rows.
template <int MT>
DSV32_TARGET_AVX512_BF16_VBMI void e4m3_panel16(std::int64_t blocks, const std::uint32_t* xp, std::int64_t ldx,
                                                const float* xs, std::int64_t ldxs, const std::uint8_t* w,
                                                std::int64_t ldw, const float* ws, int valid, float* out,
                                                std::int64_t ldo) {
  const PanelLut lut = PanelLut::load();
  const PanelBlocks pb(valid, ldw);
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    pb.prefetch(w, ldw, kb);
    __m512 acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
    for (int h = 0; h < 8; ++h) {  // columns 16 h .. 16 h + 15 of the block
      __m512i c[4];
      panel_codes16(w + kb * 128 + 16 * h, ldw, c);
      for (int j = 0; j < 4; ++j) {
        __m512i pair[2];
        panel_pairs16(lut, c[j], pair);
        for (int e = 0; e < 2; ++e) {
          const std::uint32_t* x = xp + kb * 64 + 8 * h + 2 * j + e;
          for (int m = 0; m < MT; ++m) acc[m] = dpbf16_bcast(acc[m], pair[e], x + m * ldx);
        }
      }
    }
    pb.finish<MT>(acc, xs, ldxs, ws, kb, out, ldo);
  }
}

/// e4m3_panel16 on FMAs: each column pair's odd column, then its even one, multiplied into the MT
/// accumulators (VDPBF16PS's order; every product exact in f32), x broadcast from xf as f32 values
/// with its MT rows side by side (GemmOps::e4m3_panel_rows_f32): one pointer for all rows, where x
/// as bf16 pairs cost two integer operations per pair and row and a register per row's pointer
/// (on a Granite Rapids core the 8-row kernel went from 5.2 to 7.2 GB/s of weights in cache).
template <int MT>
DSV32_TARGET_AVX512_VBMI void e4m3_panel16_fma(std::int64_t blocks, const float* xf, const float* xs,
                                               std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                               const float* ws, int valid, float* out, std::int64_t ldo) {
  const PanelLut lut = PanelLut::load();
  const __m512i hi_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const PanelBlocks pb(valid, ldw);
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    pb.prefetch(w, ldw, kb);
    __m512 acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
    for (int h = 0; h < 8; ++h) {
      __m512i c[4];
      panel_codes16(w + kb * 128 + 16 * h, ldw, c);
#if !defined(__CUDACC__)
#pragma GCC unroll 4
#endif
      for (int j = 0; j < 4; ++j) {
        __m512i pair[2];
        panel_pairs16(lut, c[j], pair);
        for (int e = 0; e < 2; ++e) {
          const float* x = xf + (kb * 128 + 16 * h + 4 * j + 2 * e) * MT;  // the even column's MT values, then the odd's
          const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(pair[e], hi_half));
          const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(pair[e], 16));
          for (int m = 0; m < MT; ++m) acc[m] = _mm512_fmadd_ps(odd, _mm512_set1_ps(x[MT + m]), acc[m]);
          for (int m = 0; m < MT; ++m) acc[m] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[m]), acc[m]);
        }
      }
    }
    pb.finish<MT>(acc, xs, ldxs, ws, kb, out, ldo);
  }
}

/// The panel kernels' driver: 16 weight rows at a time against all M x rows at once (one kernel per
/// M, so that each weight byte is read once), a last partial group copied per block into a
/// zero-padded 16 x 128 tile. `x` and `x_block` (x's elements per block) as the kernel takes them.
template <class X, class Kernel>
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline void panel_groups16(int rows, std::int64_t kb0,
                                                                            std::int64_t kb1, const X* x,
                                                                            std::int64_t x_block, const float* xs,
                                                                            const std::uint8_t* w, std::int64_t ldw,
                                                                            const float* ws, float* out,
                                                                            Kernel&& kernel) {
  x += kb0 * x_block;
  xs += kb0;
  ws += kb0;
  const std::int64_t blocks = kb1 - kb0;
  for (int g0 = 0; g0 < rows; g0 += 16) {
    const int valid = rows - g0 < 16 ? rows - g0 : 16;
    const std::uint8_t* wg = w + g0 * ldw + kb0 * 128;
    if (valid == 16) {
      kernel(blocks, x, xs, wg, ldw, ws, valid, out + g0);
      continue;
    }
    alignas(64) std::uint8_t tile[16 * 128] = {};
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (int r = 0; r < valid; ++r) std::memcpy(tile + 128 * r, wg + r * ldw + 128 * b, 128);
      kernel(1, x + x_block * b, xs + b, tile, 128, ws + b, valid, out + g0);
    }
  }
}

/// GemmOps::e4m3_panel_rows on VDPBF16PS.
DSV32_TARGET_AVX512_BF16_VBMI inline void e4m3_panel_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                                          const std::uint32_t* xp, std::int64_t ldx, const float* xs,
                                                          std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                                          const float* ws, float* out, std::int64_t ldo) {
  using Kernel = void (*)(std::int64_t, const std::uint32_t*, std::int64_t, const float*, std::int64_t,
                          const std::uint8_t*, std::int64_t, const float*, int, float*, std::int64_t);
  static constexpr Kernel kernels[8] = {e4m3_panel16<1>, e4m3_panel16<2>, e4m3_panel16<3>, e4m3_panel16<4>,
                                        e4m3_panel16<5>, e4m3_panel16<6>, e4m3_panel16<7>, e4m3_panel16<8>};
  const Kernel kernel = kernels[M - 1];
  panel_groups16(rows, kb0, kb1, xp, 64, xs, w, ldw, ws, out,
                 [&](std::int64_t blocks, const std::uint32_t* x, const float* s, const std::uint8_t* wg,
                     std::int64_t ld, const float* wsg, int valid, float* o) {
                   kernel(blocks, x, ldx, s, ldxs, wg, ld, wsg, valid, o, ldo);
                 });
}

/// GemmOps::e4m3_panel_rows_f32: e4m3_panel16_fma's driver.
DSV32_TARGET_AVX512_VBMI inline void e4m3_panel_rows_f32(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                                         const float* xf, const float* xs, std::int64_t ldxs,
                                                         const std::uint8_t* w, std::int64_t ldw, const float* ws,
                                                         float* out, std::int64_t ldo) {
  using Kernel = void (*)(std::int64_t, const float*, const float*, std::int64_t, const std::uint8_t*, std::int64_t,
                          const float*, int, float*, std::int64_t);
  static constexpr Kernel kernels[8] = {e4m3_panel16_fma<1>, e4m3_panel16_fma<2>, e4m3_panel16_fma<3>,
                                        e4m3_panel16_fma<4>, e4m3_panel16_fma<5>, e4m3_panel16_fma<6>,
                                        e4m3_panel16_fma<7>, e4m3_panel16_fma<8>};
  const Kernel kernel = kernels[M - 1];
  panel_groups16(rows, kb0, kb1, xf, 128 * M, xs, w, ldw, ws, out,
                 [&](std::int64_t blocks, const float* x, const float* s, const std::uint8_t* wg, std::int64_t ld,
                     const float* wsg, int valid, float* o) { kernel(blocks, x, s, ldxs, wg, ld, wsg, valid, o, ldo); });
}

/// GemmOps::e4m3_scaled_cols for MT x rows: NV vectors of 16 columns at a time (64 columns up to
/// 4 rows, 32 from 5 on: 16 accumulators), each row's codes widened with their column block's
/// scale by load_row_e4m3 (exact: the scales are e4m3_scale_exact) and multiplied into the MT
/// accumulators with x broadcast from memory; one FMA per product (exact, so it rounds as the
/// addition alone). Each step asks for one line of `next` (the caller's next rows, D ldw bytes).
template <int MT>
DSV32_TARGET_AVX512 void e4m3_scaled_cols_mt(std::int64_t D, std::int64_t N, const float* x, const std::uint8_t* w,
                                             std::int64_t ldw, const float* scale, float* out, std::int64_t ldo,
                                             const std::uint8_t* next) {
  constexpr int NV = MT > 4 ? 2 : 4;
  std::int64_t ahead = 0;
  const std::int64_t ahead_end = next ? D * ldw : 0;
  for (std::int64_t j0 = 0; j0 < N; j0 += 16 * NV) {
    __mmask16 lanes[NV];
    float s[NV];
    for (int v = 0; v < NV; ++v) {
      const std::int64_t j = j0 + 16 * v, left = N - j;
      lanes[v] = static_cast<__mmask16>(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0u);
      s[v] = left > 0 ? scale[j / 128] : 0.0f;
    }
    __m512 acc[MT][NV];
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
    const std::uint8_t* wr = w + j0;
    for (std::int64_t d = 0; d < D; ++d, wr += ldw) {
      if (ahead < ahead_end) _mm_prefetch(reinterpret_cast<const char*>(next + ahead), _MM_HINT_T0), ahead += 64;
      __m512 wv[NV];
      for (int v = 0; v < NV; ++v) wv[v] = load_row_e4m3(wr + 16 * v, lanes[v], s[v]);
      for (int m = 0; m < MT; ++m) {
        const __m512 xm = _mm512_set1_ps(x[d * MT + m]);
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(wv[v], xm, acc[m][v]);
      }
    }
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(out + m * ldo + j0 + 16 * v, lanes[v], acc[m][v]);
  }
}

/// GemmOps::e4m3_scaled_rows for MT x rows and 16 weight rows (lanes over the rows): per 16 columns
/// the codes are transposed and looked up as bf16 pairs (panel_codes16, panel_pairs16, as in
/// e4m3_panel16_fma), each column's vector times its block's scale (exact), then multiplied into the
/// MT accumulators in increasing column order (even, then odd), x broadcast from memory. Each step
/// asks for four lines of `next` (16 rows ldw bytes apart, as w).
template <int MT>
DSV32_TARGET_AVX512_VBMI void e4m3_scaled_rows16(std::int64_t blocks, const float* xf, const std::uint8_t* w,
                                                 std::int64_t ldw, const float* scale, __mmask16 lanes, float* out,
                                                 std::int64_t ldo, const std::uint8_t* next) {
  const PanelLut lut = PanelLut::load();
  const __m512i hi_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    const __m512 s = _mm512_set1_ps(scale[kb]);
    for (int h = 0; h < 8; ++h) {
      if (next)  // the next rows' block kb: one line of four of their rows per step
        for (int r = 0; r < 4; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(next + (4 * (h / 2) + r) * ldw + kb * 128 + 64 * (h % 2)),
                       _MM_HINT_T0);
      __m512i c[4];
      panel_codes16(w + kb * 128 + 16 * h, ldw, c);
#if !defined(__CUDACC__)
#pragma GCC unroll 4
#endif
      for (int j = 0; j < 4; ++j) {
        __m512i pair[2];
        panel_pairs16(lut, c[j], pair);
        for (int e = 0; e < 2; ++e) {
          const float* x = xf + (kb * 128 + 16 * h + 4 * j + 2 * e) * MT;  // the even column's MT values, then the odd's
          const __m512 even = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(pair[e], 16)), s);
          const __m512 odd = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(pair[e], hi_half)), s);
          for (int m = 0; m < MT; ++m) acc[m] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[m]), acc[m]);
          for (int m = 0; m < MT; ++m) acc[m] = _mm512_fmadd_ps(odd, _mm512_set1_ps(x[MT + m]), acc[m]);
        }
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(out + m * ldo, lanes, acc[m]);
}

/// GemmOps::e4m3_scaled_rows: e4m3_scaled_rows16 for M rows; fewer than 16 weight rows are copied
/// into a zero-padded tile first.
DSV32_TARGET_AVX512_VBMI inline void e4m3_scaled_rows(int M, int n, std::int64_t K, const float* x,
                                                      const std::uint8_t* w, std::int64_t ldw, const float* scale,
                                                      float* out, std::int64_t ldo, const std::uint8_t* next) {
  using Kernel = void (*)(std::int64_t, const float*, const std::uint8_t*, std::int64_t, const float*, __mmask16,
                          float*, std::int64_t, const std::uint8_t*);
  static constexpr Kernel kernels[8] = {e4m3_scaled_rows16<1>, e4m3_scaled_rows16<2>, e4m3_scaled_rows16<3>,
                                        e4m3_scaled_rows16<4>, e4m3_scaled_rows16<5>, e4m3_scaled_rows16<6>,
                                        e4m3_scaled_rows16<7>, e4m3_scaled_rows16<8>};
  const __mmask16 lanes = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1u);
  if (n >= 16) return kernels[M - 1](K / 128, x, w, ldw, scale, lanes, out, ldo, next);
  thread_local std::vector<std::uint8_t> tile;
  tile.assign(static_cast<std::size_t>(16 * K), 0);
  for (int r = 0; r < n; ++r) std::memcpy(tile.data() + r * K, w + r * ldw, static_cast<std::size_t>(K));
  kernels[M - 1](K / 128, x, tile.data(), K, scale, lanes, out, ldo, nullptr);
}

/// The top two bytes of double(|value|) of E4M3 codes 0..127 (0x7F reading as 480; the other 48
/// bits of each such double are zero): e4m3_panel8_f64's lookup tables. Every E4M3 value, the
/// subnormal ones included, is a normal double.
struct E4m3F64Bytes {
  alignas(64) std::uint8_t lo[128];  ///< bits 48..55
  alignas(64) std::uint8_t hi[128];  ///< bits 56..63
};
inline const E4m3F64Bytes& e4m3_f64_bytes() {
  static const E4m3F64Bytes t = [] {
    E4m3F64Bytes b{};
    for (int c = 0; c < 128; ++c) {
      const auto bits = std::bit_cast<std::uint64_t>(static_cast<double>(kE4m3Weight[c]));
      b.lo[c] = static_cast<std::uint8_t>(bits >> 48);
      b.hi[c] = static_cast<std::uint8_t>(bits >> 56);
    }
    return b;
  }();
  return t;
}

/// 8 x 8 qword transpose in registers: r[i] holds row i's qwords 0..7; afterwards lane i of r[j]
/// holds row i's qword j.
DSV32_TARGET_AVX512 __attribute__((always_inline)) inline void transpose8q(__m512i r[8]) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {  // t[2i]: (r2i, r2i+1) qwords 0, 2, 4, 6 pairwise; t[2i+1]: 1, 3, 5, 7
    t[2 * i] = _mm512_unpacklo_epi64(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi64(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 2; ++o) {  // 128-bit lanes 0 and 2, then 1 and 3, of two row pairs
      u[4 * i + o] = _mm512_shuffle_i64x2(t[4 * i + o], t[4 * i + 2 + o], 0x88);
      u[4 * i + 2 + o] = _mm512_shuffle_i64x2(t[4 * i + o], t[4 * i + 2 + o], 0xDD);
    }
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 2; ++o) {
      r[o + 2 * i] = _mm512_shuffle_i64x2(u[2 * i + o], u[4 + 2 * i + o], 0x88);
      r[o + 2 * i + 4] = _mm512_shuffle_i64x2(u[2 * i + o], u[4 + 2 * i + o], 0xDD);
    }
}

/// The exact small-M FP8 product (GemmOps::e4m3_panel_rows_f64) for MT x rows against 8 weight rows,
/// lanes running over the weight rows: per 64 columns the 8 rows' codes are loaded and transposed in
/// registers (transpose8q: qword lane r of vector j holds row r's columns 8 j .. 8 j + 7); per 8
/// columns two byte lookups give the top two bytes of each code's value as a double (exact and
/// normal: no subnormal operand ever reaches an FMA — e4m3_blocks' bit placement makes E4M3's
/// subnormal codes subnormal doubles, which cost a microcode assist per FMA on Intel cores); byte
/// and qword unpacks pair each 128-bit lane's two rows' (lo, hi) words four columns at a time, and
/// per column one in-lane byte shuffle (VPSHUFB) places them in the 8 lanes; MT FMAs per column, x
/// broadcast from memory (xv: the MT rows of each column side by side), up to 4 rows into separate
/// sums for even and odd columns. (A VPERMT2B per column from lo and hi, the earlier placement, is
/// two operations on Granite Rapids to VPSHUFB's one: one core in L2, 7168-column rows, 3.4 -> 3.7 G
/// codes/s at 8 x rows; with the split sums 4 rows 5.3 -> 6.4, 3 rows 6.0 -> 7.5.) A block's sums
/// are exact in any order (double holds every partial sum of 128 E4M3 products), so they equal
/// e4m3_rows' bit for bit; per block out[m]
/// += f32(dot) * (x scale * weight scale), the multiply and the add rounded apart. Arguments start
/// at the first block (xv, xs, w, ws); rows past `valid` are read from row 0 and not written.
/// `ahead`: hint the block at that offset from each row (the next row group where rows are short),
/// 0 for none. (A gather of the 8 rows' qwords per 8 columns instead of the loads and transposes
/// measured the same within a Granite Rapids host's noise, but gathers are slow where Downfall's
/// microcode mitigation runs (Ice Lake) and on AMD cores.)
template <int MT>
DSV32_TARGET_AVX512_VBMI void e4m3_panel8_f64(std::int64_t blocks, const double* xv, const float* xs,
                                              std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                              const float* ws, int valid, float* out, std::int64_t ldo,
                                              std::int64_t ahead) {
  const E4m3F64Bytes& lut = e4m3_f64_bytes();
  const __m512i tl0 = _mm512_load_si512(lut.lo), tl1 = _mm512_load_si512(lut.lo + 64);
  const __m512i th0 = _mm512_load_si512(lut.hi), th1 = _mm512_load_si512(lut.hi + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __mmask8 lanes = static_cast<__mmask8>(valid >= 8 ? 0xFF : (1u << valid) - 1u);
  // VPSHUFB controls for column i < 4 of q: bytes 6, 7 of each qword from the row's word i (the
  // first row of a 128-bit lane at bytes 2i, 2i + 1, the second at 8 + 2i, 9 + 2i); the rest zeroed
  __m512i place[4];
  for (int i = 0; i < 4; ++i) {
    const long long q0 = static_cast<long long>(0x0000808080808080ull | (2ull * i) << 48 | (2ull * i + 1) << 56);
    const long long q1 = q0 + (0x0808ll << 48);
    place[i] = _mm512_set_epi64(q1, q0, q1, q0, q1, q0, q1, q0);
  }
  const std::uint8_t* wr[8];
  for (int r = 0; r < 8; ++r) wr[r] = w + (r < valid ? r : 0) * ldw;
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    if (ahead)
      for (int r = 0; r < valid; ++r) prefetch_block(w + r * ldw, ahead + kb * 128);
    // up to 4 x rows, even and odd columns apart: twice the independent FMA chains (8 rows have 8)
    constexpr int S = MT <= 4 ? 2 : 1;
    __m512d acc[S][MT];
    for (int e = 0; e < S; ++e)
      for (int m = 0; m < MT; ++m) acc[e][m] = _mm512_setzero_pd();
    for (int c64 = 0; c64 < 128; c64 += 64) {
      __m512i codes[8];
      for (int r = 0; r < 8; ++r) codes[r] = _mm512_loadu_si512(wr[r] + kb * 128 + c64);
      transpose8q(codes);
      for (int j = 0; j < 8; ++j) {
        const __m512i lo = _mm512_permutex2var_epi8(tl0, codes[j], tl1);
        const __m512i hi =
            _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(th0, codes[j], th1), codes[j], sign, 0xF8);
        // 128-bit lane L: row 2L's columns 0..7, then row 2L + 1's, as (lo, hi) words; then columns
        // 0..3 (q[0]) and 4..7 (q[1]) of both rows
        const __m512i p0 = _mm512_unpacklo_epi8(lo, hi), p1 = _mm512_unpackhi_epi8(lo, hi);
        const __m512i q[2] = {_mm512_unpacklo_epi64(p0, p1), _mm512_unpackhi_epi64(p0, p1)};
        const double* x = xv + (kb * 128 + c64 + 8 * j) * MT;
#if !defined(__CUDACC__)
#pragma GCC unroll 8
#endif
        for (int i = 0; i < 8; ++i) {
          const __m512d wv = _mm512_castsi512_pd(_mm512_shuffle_epi8(q[i / 4], place[i % 4]));
          for (int m = 0; m < MT; ++m)
            acc[i % S][m] = _mm512_fmadd_pd(wv, _mm512_set1_pd(x[i * MT + m]), acc[i % S][m]);
        }
      }
    }
    for (int m = 0; m < MT; ++m) {
      const __m512d dot = S == 2 ? _mm512_add_pd(acc[0][m], acc[S - 1][m]) : acc[0][m];  // exact either way
      const __m256 p = opaque(_mm256_mul_ps(_mm512_cvtpd_ps(dot), _mm256_set1_ps(xs[m * ldxs + kb] * ws[kb])));
      float* o = out + m * ldo;
      _mm256_mask_storeu_ps(o, lanes, _mm256_add_ps(_mm256_maskz_loadu_ps(lanes, o), p));
    }
  }
}

/// GemmOps::e4m3_panel_rows_f64: e4m3_panel8_f64 over 8-row groups, the next group's blocks hinted
/// where rows are short.
DSV32_TARGET_AVX512_VBMI inline void e4m3_panel_rows_f64(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                                         const double* xv, const float* xs, std::int64_t ldxs,
                                                         const std::uint8_t* w, std::int64_t ldw, const float* ws,
                                                         float* out, std::int64_t ldo) {
  using Kernel = void (*)(std::int64_t, const double*, const float*, std::int64_t, const std::uint8_t*, std::int64_t,
                          const float*, int, float*, std::int64_t, std::int64_t);
  static constexpr Kernel kernels[8] = {e4m3_panel8_f64<1>, e4m3_panel8_f64<2>, e4m3_panel8_f64<3>,
                                        e4m3_panel8_f64<4>, e4m3_panel8_f64<5>, e4m3_panel8_f64<6>,
                                        e4m3_panel8_f64<7>, e4m3_panel8_f64<8>};
  const Kernel kernel = kernels[M - 1];
  for (int g0 = 0; g0 < rows; g0 += 8) {
    const int valid = rows - g0 < 8 ? rows - g0 : 8;
    const std::int64_t ahead = ldw <= kPanelPrefetchMaxK && rows - g0 >= 16 ? 8 * ldw : 0;
    kernel(kb1 - kb0, xv + kb0 * 128 * M, xs + kb0, ldxs, w + g0 * ldw + kb0 * 128, ldw, ws + kb0, valid, out + g0,
           ldo, ahead);
  }
}

/// The plane tables of the AMX kernels: t[q][c] = E4m3Plane digit of code c (bit 7 clear) where its
/// plane is q, else 0; one VPERMT2B over a plane's two 64-byte halves looks 64 codes up.
struct E4m3PlaneTables {
  alignas(64) std::int8_t t[4][128];
};
inline const E4m3PlaneTables& e4m3_plane_tables() {
  static const E4m3PlaneTables tables = [] {
    E4m3PlaneTables r{};
    for (int c = 0; c < 128; ++c) {
      const E4m3Plane p = e4m3_plane(static_cast<std::uint8_t>(c));
      r.t[p.plane][c] = static_cast<std::int8_t>(p.digit);
    }
    return r;
  }();
  return tables;
}

/// The plane tables in registers.
struct PlaneLut {
  __m512i t[8];  // plane q's halves at 2q, 2q + 1
  DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) static PlaneLut load() {
    const E4m3PlaneTables& p = e4m3_plane_tables();
    PlaneLut l;
    for (int i = 0; i < 8; ++i) l.t[i] = _mm512_load_si512(p.t[i / 2] + 64 * (i % 2));
    return l;
  }
  /// Plane q's signed digits of 64 codes (`neg`: the codes with bit 7 set).
  DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) __m512i digits(int q, __m512i codes, __mmask64 neg) const {
    const __m512i d = _mm512_permutex2var_epi8(t[2 * q], codes, t[2 * q + 1]);
    return _mm512_mask_sub_epi8(d, neg, _mm512_setzero_si512(), d);
  }
};

/// GemmOps::e4m3_plane_tiles: per row and 64 codes, each plane's digits scattered as one dword
/// column of the row group's tile (rows past M as code 0: digit 0 in every plane).
DSV32_TARGET_AVX512_AMX inline void e4m3_plane_tiles(const std::uint8_t* xq, int M, std::int64_t K, std::int8_t* out) {
  const PlaneLut lut = PlaneLut::load();
  const int G = (M + 3) / 4;
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(64));
  for (std::int64_t c = 0; c < K / 64; ++c)
    for (int m = 0; m < 4 * G; ++m) {
      const __m512i codes = m < M ? _mm512_loadu_si512(xq + m * K + 64 * c) : _mm512_setzero_si512();
      const __mmask64 neg = _mm512_movepi8_mask(codes);
      std::int8_t* tile = out + (c * G + m / 4) * 1024 + 4 * (m % 4);
      for (int p = 0; p < 4; ++p) _mm512_i32scatter_epi32(tile + 16 * p, rows, lut.digits(p, codes, neg), 1);
    }
}

/// The AMX tile configuration (palette 1): tiles 0..7 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

/// Plane q's digits of columns off .. off + 63 of 4 weight rows (wr[r]) as the A tile in `tile`:
/// row 4 q + r.
DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) inline void plane_rows4(const PlaneLut& lut,
                                                                              const std::uint8_t* const* wr,
                                                                              std::int64_t off, std::int8_t* tile) {
  for (int r = 0; r < 4; ++r) {
    const __m512i codes = _mm512_loadu_si512(wr[r] + off);
    const __mmask64 neg = _mm512_movepi8_mask(codes);
    for (int q = 0; q < 4; ++q) _mm512_store_si512(tile + (4 * q + r) * 64, lut.digits(q, codes, neg));
  }
}

/// A block's exact dots from its C tile (int32 [4 q + r][4 p + t], r a weight row, t an x row):
/// dot(t, r) = sum over p, q of C 16^(p + q) 2^-18, as f32 (rounded once) in lane 4 r + t. The q
/// pairs are added in int32 first (|C| < 2^21, so C + 16 C' < 2^26), the rest in double, exactly:
/// every partial sum is a multiple of 2^-18 below 128 * 480^2 < 2^25 in magnitude (43 bits).
DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) inline __m512 tile_dots(const std::int32_t* c,
                                                                              const __m512d scale[4]) {
  __m512d d[4];
  for (int r = 0; r < 4; ++r) {
    const __m512i q01 = _mm512_add_epi32(_mm512_load_si512(c + 16 * r), _mm512_slli_epi32(_mm512_load_si512(c + 16 * (4 + r)), 4));
    const __m512i q23 =
        _mm512_add_epi32(_mm512_load_si512(c + 16 * (8 + r)), _mm512_slli_epi32(_mm512_load_si512(c + 16 * (12 + r)), 4));
    __m512d s = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(q01)), scale[0]);
    s = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(q01, 1)), scale[1], s);
    s = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(q23)), scale[2], s);
    d[r] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(q23, 1)), scale[3], s);  // lanes (p % 2, t)
  }
  __m256 f[2];
  for (int i = 0; i < 2; ++i) {  // rows 2i, 2i + 1: the two p halves of each added, lanes (r, t)
    const __m512d lo = _mm512_shuffle_f64x2(d[2 * i], d[2 * i + 1], 0x44), hi = _mm512_shuffle_f64x2(d[2 * i], d[2 * i + 1], 0xEE);
    f[i] = _mm512_cvtpd_ps(_mm512_add_pd(lo, hi));
  }
  return _mm512_insertf32x8(_mm512_castps256_ps512(f[0]), f[1], 1);
}

/// tile_dots' factors 16^(p + q) 2^-18 for lanes (p, t) of its int32 sums: scale[0] for the q pair
/// (0, 1) at p = 0 (lanes 0..3) and 1 (lanes 4..7), scale[1] for the same pair at p = 2 and 3,
/// scale[2] and scale[3] for the q pair (2, 3) likewise.
DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) inline void tile_dot_scales(__m512d scale[4]) {
  for (int i = 0; i < 4; ++i) {
    const int e = 4 * (2 * (i & 1) + 2 * (i >> 1)) - 18;
    const double lo = std::ldexp(1.0, e), hi = std::ldexp(1.0, e + 4);
    scale[i] = _mm512_set_pd(hi, hi, hi, hi, lo, lo, lo, lo);
  }
}

/// Lanes 4 r + t of out[t][r] (t < 4 x rows ldo apart, r < 4): the order of tile_dots.
DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) inline __m512i tile_lanes(std::int64_t ldo) {
  const __m512i t = _mm512_set_epi32(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0);
  const __m512i r = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  return _mm512_add_epi32(_mm512_mullo_epi32(t, _mm512_set1_epi32(static_cast<int>(ldo))), r);
}

/// The A tiles of one block for 8 weight rows (wr): a[h][s] for the 64-column half h and the 4-row
/// half s.
DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) inline void plane_block8(const PlaneLut& lut,
                                                                               const std::uint8_t* const* wr,
                                                                               std::int64_t kb, std::int8_t (*a)[2][1024]) {
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 2; ++s) plane_rows4(lut, wr + 4 * s, kb * 128 + 64 * h, a[h][s]);
}

/// Block kb's dots (its C tiles c[2 g + s]) times (x scale * weight scale), added to acc[2 g + s]
/// (lanes 4 r + t), the multiply and the add rounded apart.
template <int G>
DSV32_TARGET_AVX512_AMX __attribute__((always_inline)) inline void add_block_dots(int M, const std::int32_t (*c)[256],
                                                                                 const __m512d scale[4], const float* xs,
                                                                                 std::int64_t ldxs, const float* ws,
                                                                                 std::int64_t kb, __m512* acc) {
  for (int g = 0; g < G; ++g) {
    alignas(16) float xw[4];
    for (int t = 0; t < 4; ++t) xw[t] = 4 * g + t < M ? xs[(4 * g + t) * ldxs + kb] * ws[kb] : 0.0f;
    const __m512 factor = _mm512_broadcast_f32x4(_mm_load_ps(xw));
    for (int s = 0; s < 2; ++s)
      acc[2 * g + s] = _mm512_add_ps(acc[2 * g + s], opaque(_mm512_mul_ps(tile_dots(c[2 * g + s], scale), factor)));
  }
}

/// GemmOps::e4m3_tiles_rows for 8 weight rows and G groups of 4 x rows (M <= 4 G). Per block, each
/// 4-row half s of the weight rows becomes two A tiles in memory (one per 64 columns; rows: plane q
/// x row r), and TDPBSSD multiplies them into one C tile per (s, g) with x's plane tiles (B, whose
/// columns are plane p x row t): C[4 q + r][4 p + t] sums row r's plane-q digits times row t's
/// plane-p digits over the block's 128 columns. tile_dots turns each C into 16 exact dots; out's
/// 8 x 4 G values stay in registers, each block's f32(dot) * (x scale * weight scale) added as
/// e4m3_rows adds it. Software-pipelined by one block — the next block's A tiles are made before
/// this block's tile products, the previous block's dots taken after them — so that the vector work
/// never waits on a tile just written. `ahead` as in e4m3_panel8_f64; rows past `valid` read row 0
/// and are not written.
template <int G>
DSV32_TARGET_AVX512_AMX void e4m3_tiles8(int M, std::int64_t blocks, const std::int8_t* xt, const float* xs,
                                         std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw, const float* ws,
                                         int valid, float* out, std::int64_t ldo, std::int64_t ahead) {
  const PlaneLut lut = PlaneLut::load();
  __m512d scale[4];
  tile_dot_scales(scale);
  const TileConfig config;
  _tile_loadconfig(&config);
  alignas(64) std::int8_t a[2][2][2][1024];   // [block % 2][64-column half][4-row half]
  alignas(64) std::int32_t c[2][2 * G][256];  // [block % 2][2 g + s]
  const std::uint8_t* wr[8];
  for (int r = 0; r < 8; ++r) wr[r] = w + (r < valid ? r : 0) * ldw;
  const __m512i at = tile_lanes(ldo);
  __m512 acc[2 * G];
  __mmask16 lanes[2 * G];
  for (int g = 0; g < G; ++g)
    for (int s = 0; s < 2; ++s) {
      unsigned m = 0;
      for (int r = 0; r < 4; ++r)
        for (int t = 0; t < 4; ++t)
          if (4 * s + r < valid && 4 * g + t < M) m |= 1u << (4 * r + t);
      lanes[2 * g + s] = static_cast<__mmask16>(m);
      acc[2 * g + s] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes[2 * g + s], at, out + 4 * g * ldo + 4 * s, 4);
    }
  if (blocks > 0) plane_block8(lut, wr, 0, a[0]);
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    if (ahead)
      for (int r = 0; r < valid; ++r) prefetch_block(w + r * ldw, ahead + kb * 128);
    if (kb + 1 < blocks) plane_block8(lut, wr, kb + 1, a[(kb + 1) & 1]);
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (G == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int h = 0; h < 2; ++h) {
      const std::int8_t* b = xt + (2 * kb + h) * G * 1024;
      _tile_loadd(4, a[kb & 1][h][0], 64);
      _tile_loadd(5, a[kb & 1][h][1], 64);
      _tile_loadd(6, b, 64);
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 5, 6);
      if constexpr (G == 2) {
        _tile_loadd(7, b + 1024, 64);
        _tile_dpbssd(2, 4, 7);
        _tile_dpbssd(3, 5, 7);
      }
    }
    _tile_stored(0, c[kb & 1][0], 64);
    _tile_stored(1, c[kb & 1][1], 64);
    if constexpr (G == 2) {
      _tile_stored(2, c[kb & 1][2], 64);
      _tile_stored(3, c[kb & 1][3], 64);
    }
    if (kb > 0) add_block_dots<G>(M, c[(kb - 1) & 1], scale, xs, ldxs, ws, kb - 1, acc);
  }
  if (blocks > 0) add_block_dots<G>(M, c[(blocks - 1) & 1], scale, xs, ldxs, ws, blocks - 1, acc);
  _tile_release();
  for (int g = 0; g < G; ++g)
    for (int s = 0; s < 2; ++s)
      _mm512_mask_i32scatter_ps(out + 4 * g * ldo + 4 * s, lanes[2 * g + s], at, acc[2 * g + s], 4);
}

/// GemmOps::e4m3_tiles_rows: e4m3_tiles8 over 8-row groups.
DSV32_TARGET_AVX512_AMX inline void e4m3_tiles_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                                    const std::int8_t* xt, const float* xs, std::int64_t ldxs,
                                                    const std::uint8_t* w, std::int64_t ldw, const float* ws,
                                                    float* out, std::int64_t ldo) {
  const int G = (M + 3) / 4;
  for (int g0 = 0; g0 < rows; g0 += 8) {
    const int valid = rows - g0 < 8 ? rows - g0 : 8;
    const std::int64_t ahead = ldw <= kPanelPrefetchMaxK && rows - g0 >= 16 ? 8 * ldw : 0;
    const auto kernel = G == 2 ? e4m3_tiles8<2> : e4m3_tiles8<1>;
    kernel(M, kb1 - kb0, xt + kb0 * 2 * G * 1024, xs + kb0, ldxs, w + g0 * ldw + kb0 * 128, ldw, ws + kb0, valid,
           out + g0, ldo, ahead);
  }
}

/// GemmOps::e4m3_tiles_gemm: for each block, the A tiles of each 8 weight rows are made once and
/// kept in tile registers 4..7 while every group of 4 x rows passes (its two B tiles loaded, four
/// TDPBSSD into the two C tiles of the 4-row halves, stored; the previous group's dots taken
/// meanwhile); c's values, in tile_dots' lane order (4 r + t per 8-row group, half and x group),
/// are kept in a stack array (64 KB at most) from the first block to the last.
DSV32_TARGET_AVX512_AMX inline void e4m3_tiles_gemm(int rows, int cols, std::int64_t blocks, const std::int8_t* xt,
                                                    std::int64_t groups_ld, const float* xs, std::int64_t ldxs,
                                                    const std::uint8_t* w, std::int64_t ldw, const float* ws,
                                                    std::int64_t ldws, float* c, std::int64_t ldc) {
  const PlaneLut lut = PlaneLut::load();
  __m512d scale[4];
  tile_dot_scales(scale);
  constexpr int kGroups = kE4m3TilesGemmRows / 4, kGroups8 = kE4m3TilesGemmCols / 8;
  const int groups = (rows + 3) / 4, groups8 = (cols + 7) / 8;
  alignas(64) float acc[kGroups8][2][kGroups][16] = {};  // [8-row group][half s][x group][lane 4 r + t]
  for (int w8 = 0; w8 < groups8; ++w8)
    for (int s = 0; s < 2; ++s)
      for (int g = 0; g < groups; ++g)
        for (int r = 0; r < 4; ++r)
          for (int t = 0; t < 4; ++t)
            if (4 * g + t < rows && 8 * w8 + 4 * s + r < cols) acc[w8][s][g][4 * r + t] = c[(4 * g + t) * ldc + 8 * w8 + 4 * s + r];
  alignas(64) float factor[2][4 * kGroups];  // per 128-row weight block: x scale * weight scale, per x row
  alignas(64) std::int8_t a[2][2][1024];
  alignas(64) std::int32_t cb[2][2][256];  // [x group % 2][half s]
  const TileConfig config;
  _tile_loadconfig(&config);
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    for (int j = 0; j < 2 && 128 * j < cols; ++j)
      for (int i = 0; i < 4 * groups; ++i) factor[j][i] = i < rows ? xs[i * ldxs + kb] * ws[j * ldws + kb] : 0.0f;
    const std::int8_t* xb = xt + 2 * kb * groups_ld * 1024;
    for (int w8 = 0; w8 < groups8; ++w8) {
      const int valid = cols - 8 * w8 < 8 ? cols - 8 * w8 : 8;
      const std::uint8_t* wr[8];
      for (int r = 0; r < 8; ++r) wr[r] = w + (8 * w8 + (r < valid ? r : 0)) * ldw;
      plane_block8(lut, wr, kb, a);
      _tile_loadd(4, a[0][0], 64);
      _tile_loadd(5, a[0][1], 64);
      _tile_loadd(6, a[1][0], 64);
      _tile_loadd(7, a[1][1], 64);
      const float* f = factor[8 * w8 / 128];
      for (int g = 0; g <= groups; ++g) {
        if (g < groups) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_loadd(2, xb + g * 1024, 64);
          _tile_loadd(3, xb + (groups_ld + g) * 1024, 64);
          _tile_dpbssd(0, 4, 2);
          _tile_dpbssd(1, 5, 2);
          _tile_dpbssd(0, 6, 3);
          _tile_dpbssd(1, 7, 3);
          _tile_stored(0, cb[g & 1][0], 64);
          _tile_stored(1, cb[g & 1][1], 64);
        }
        if (g > 0) {  // the previous group's dots
          const int p = g - 1;
          const __m512 fx = _mm512_broadcast_f32x4(_mm_load_ps(f + 4 * p));
          for (int s = 0; s < 2; ++s)
            _mm512_store_ps(acc[w8][s][p], _mm512_add_ps(_mm512_load_ps(acc[w8][s][p]),
                                                         opaque(_mm512_mul_ps(tile_dots(cb[p & 1][s], scale), fx))));
        }
      }
    }
  }
  _tile_release();
  for (int w8 = 0; w8 < groups8; ++w8)
    for (int s = 0; s < 2; ++s)
      for (int g = 0; g < groups; ++g)
        for (int r = 0; r < 4; ++r)
          for (int t = 0; t < 4; ++t) {
            const int i = 4 * g + t, j = 8 * w8 + 4 * s + r;
            if (i < rows && j < cols) c[i * ldc + j] = acc[w8][s][g][4 * r + t];
          }
}

#define DSV32_TARGET_WIDTH DSV32_TARGET_AVX512  // the target of every function in gemm_x86-inl.hpp
#include "dsv32/backend/cpu/simd/gemm_x86-inl.hpp"  // IWYU pragma: keep
#undef DSV32_TARGET_WIDTH

/// GemmOps::e4m3_rows.
DSV32_TARGET_AVX512 inline void e4m3_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1, const double* xd,
                                          std::int64_t ldx, const float* xs, std::int64_t ldxs, const std::uint8_t* w,
                                          std::int64_t ldw, const float* ws, float* out, std::int64_t ldo) {
  E4m3RowsDriver<E4m3RowsKernel>::rows(M, rows, kb0, kb1, xd, ldx, xs, ldxs, w, ldw, ws, out, ldo, kPanelPrefetchMaxK);
}

#include "dsv32/backend/cpu/simd/table_entries-inl.hpp"  // IWYU pragma: keep

}  // namespace dsv32::cpu::simd::avx512

namespace dsv32::cpu::simd {

/// \brief The AVX-512 tables (f.isa avx512 or avx512_bf16): a pure function of the features. On
///        the avx512 level, the fast FP8 small-M kernels look codes up with VBMI; without it
///        (Skylake-SP, Cascade Lake) they are the AVX2 table's, the same bits. The avx512_bf16 level
///        adds VDPBF16PS for the fast FP8 row-order kernel (1-4 rows, bound by the code lookups and
///        memory), and for the compute-bound products — fast FP8 prefill panels and 5-8 row panels,
///        bf16 weights at 2-8 rows — unless the CPU's FMAs outrun the instruction (f.fma_dots) —
///        and, with f.amx_int8, AMX-INT8 tiles for the exact FP8 products from 3 rows on
///        (e4m3_tiles_rows, e4m3_tiles_gemm). Every other entry is the AVX-512 one; the results are
///        the same bits either way. Only call with features the host has (detected_features()).
inline GemmOps avx512_table(const CpuFeatures& f) {
  GemmOps o;
  o.isa = f.isa;
  avx512::common_entries(o);
  o.bf16_rows = avx512::bf16_rows;
  o.e4m3_scaled_cols = avx512::e4m3_scaled_cols;
  const bool bf16 = f.isa == Isa::avx512_bf16;
  if (f.vbmi) {
    o.e4m3_pair_rows = bf16 ? avx512::e4m3_pair_rows<true> : avx512::e4m3_pair_rows<false>;
    o.e4m3_panel_rows_f64 = avx512::e4m3_panel_rows_f64;
    o.e4m3_scaled_rows = avx512::e4m3_scaled_rows;
    if (bf16 && !f.fma_dots) o.e4m3_panel_rows = avx512::e4m3_panel_rows;
    else o.e4m3_panel_rows_f32 = avx512::e4m3_panel_rows_f32;
  } else {
    o.e4m3_pair_rows = avx2::e4m3_pair_rows;
    o.e4m3_panel_rows = avx2::e4m3_panel_rows;
    o.e4m3_scaled_rows = avx2::e4m3_scaled_rows;
  }
  if (bf16 && f.vbmi && f.amx_int8)
    o.e4m3_tiles_rows = avx512::e4m3_tiles_rows, o.e4m3_plane_tiles = avx512::e4m3_plane_tiles,
    o.e4m3_tiles_gemm = avx512::e4m3_tiles_gemm;
  if (bf16 && !f.fma_dots) {
    o.fp8_pair_dots = avx512::fp8_pair_dots_bf16;
    o.bf16_pair_rows = avx512::bf16_pair_rows;
  }
  return o;
}

}  // namespace dsv32::cpu::simd

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // DSV32_CPU_X86
