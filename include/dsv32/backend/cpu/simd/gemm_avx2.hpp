/// \file
/// \brief CPU: the AVX2 + FMA + F16C GemmOps, compiled with target attributes; used on x86-64 CPUs
///        without AVX-512. Same arithmetic as the AVX-512 and portable tables (see gemm_ops.hpp).
///
/// Micro-tiles: 6 x rows by 16 weight rows in f32 (12 ymm accumulators), 6 by 8 in f64, the FP8
/// block epilogue in their registers. The small-M kernels stream weight rows once: bf16 (the head,
/// bf16_rows) with lanes over 8 weight rows, transposed as column pairs in the 128-bit lanes; exact
/// FP8 (e4m3_rows) with codes placed as doubles by byte shuffles (e4m3_doubles8); fast FP8 in the
/// row order (e4m3_pair_rows) widened to f32 by shifts, and from 5 x rows on in the panel order
/// (e4m3_panel_rows: lanes over 8 weight rows). docs/performance.md ("AVX2") says why.
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

#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/gemm_portable.hpp"
#include "dsv32/backend/cpu/simd/rows_driver.hpp"
#include "dsv32/core/numeric.hpp"

// GCC 12 reports the "undefined" pass-through operand of its own AVX-512 intrinsics as
// uninitialized once they are inlined here (GCC bug 105593); the operand is never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dsv32::cpu::simd::avx2 {

/// Micro-tiles: kMr x rows by kNr weight rows in f32 (12 ymm accumulators), kMr by kNr64 in f64.
inline constexpr int kMr = 6, kNr = 16, kMr64 = 6, kNr64 = 8;

/// Hides a value from the optimizer so that a multiply is never fused into the following add.
DSV32_TARGET_AVX2 inline __m256 opaque(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

/// In-register transpose of 8 rows of 8 floats.
DSV32_TARGET_AVX2 inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

/// The low 8 bytes of `codes` (E4M3; 0x7F / 0xFF as +-480) as f32 values times 2^-8, exactly: each
/// code's 7 low bits under an f16's exponent and its sign on top (normals and subnormals alike),
/// widened by F16C.
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline __m256 e4m3_f16_values8(__m128i codes) {
  const __m128i s = _mm_cvtepi8_epi16(codes);
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16(static_cast<short>(0xBF80))));
}

/// 8 columns of one weight row as f32 (cnt < 8: the rest zero).
template <int Kind>  // 0 bf16, 1 f32, 2 e4m3
DSV32_TARGET_AVX2 inline __m256 load_row(const void* w, std::int64_t ldw, int row, int k0, int cnt) {
  if constexpr (Kind == 0) {
    const std::uint16_t* p = static_cast<const std::uint16_t*>(w) + row * ldw + k0;
    __m128i h;
    if (cnt == 8) {
      h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    } else {
      std::uint16_t tmp[8] = {};
      std::memcpy(tmp, p, static_cast<std::size_t>(cnt) * 2);
      h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp));
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (Kind == 1) {
    const float* p = static_cast<const float*>(w) + row * ldw + k0;
    if (cnt == 8) return _mm256_loadu_ps(p);
    float tmp[8] = {};
    std::memcpy(tmp, p, static_cast<std::size_t>(cnt) * 4);
    return _mm256_loadu_ps(tmp);
  } else {
    const std::uint8_t* p = static_cast<const std::uint8_t*>(w) + row * ldw + k0;
    std::int64_t bits = 0;
    std::memcpy(&bits, p, static_cast<std::size_t>(cnt));
    return _mm256_mul_ps(e4m3_f16_values8(_mm_cvtsi64_si128(bits)), _mm256_set1_ps(256.0f));
  }
}

/// Packs n <= 16 rows x kc columns into [kc][16] f32.
template <int Kind>
DSV32_TARGET_AVX2 void pack_panel(const void* w, std::int64_t ldw, int n, int kc, float* out) {
  for (int k0 = 0; k0 < kc; k0 += 8) {
    const int cnt = kc - k0 < 8 ? kc - k0 : 8;
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) {
        const int row = half * 8 + j;
        r[j] = row < n ? load_row<Kind>(w, ldw, row, k0, cnt) : _mm256_setzero_ps();
      }
      transpose8(r);
      for (int c = 0; c < cnt; ++c) _mm256_storeu_ps(out + (k0 + c) * 16 + half * 8, r[c]);
    }
  }
}


/// The byte shuffles that turn 8 E4M3 codes into doubles (e4m3_doubles8): qword lane i of
/// place[j] takes its bytes 6, 7 from bytes 4j + i and 8 + 4j + i of its 128-bit lane; the rest 0.
struct E4m3Place {
  __m256i sign, place[2];
};
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline E4m3Place e4m3_place() {
  auto q = [](unsigned code) {
    return static_cast<long long>(0x0000808080808080ull | std::uint64_t{code} << 48 | (8ull + code) << 56);
  };
  E4m3Place p;
  p.sign = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int j = 0; j < 2; ++j) p.place[j] = _mm256_setr_epi64x(q(4 * j), q(4 * j + 1), q(4 * j + 2), q(4 * j + 3));
  return p;
}
/// 8 E4M3 codes, c holding them in every qword, as the doubles whose top 16 bits are sign << 15 |
/// (code & 0x7F) << 1 and whose other bits are 0: each code's value times 2^-1016 (0x7F / 0xFF as
/// +-480; E4M3's subnormal codes become subnormal doubles). c + c and c & 0x80 are blended into one
/// vector (each 128-bit lane: c + c in its low 8 bytes, c & 0x80 in its high 8), and one in-lane byte
/// shuffle per 4 codes moves their two bytes to the tops of 4 doubles, the low lane taking codes
/// 4j, 4j + 1 and the high lane 4j + 2, 4j + 3: d[0] holds codes 0-3, d[1] codes 4-7.
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline void e4m3_doubles8(__m256i c, const E4m3Place& p,
                                                                          __m256d d[2]) {
  const __m256i v = _mm256_blend_epi32(_mm256_add_epi8(c, c), _mm256_and_si256(c, p.sign), 0xCC);
  for (int j = 0; j < 2; ++j) d[j] = _mm256_castsi256_pd(_mm256_shuffle_epi8(v, p.place[j]));
}

/// The byte transpose of an 8 x 8 block: r[j] holds row j's 8 bytes in its low half; col[q] gets
/// columns 2q (low 8 bytes) and 2q + 1 (high 8 bytes), byte j from row j (byte, word and dword
/// unpacks: 12 operations for 64 codes).
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline void transpose_bytes8x8(const __m128i r[8], __m128i col[4]) {
  const __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
  const __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
  const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
  col[0] = _mm_unpacklo_epi32(b0, b2);
  col[1] = _mm_unpackhi_epi32(b0, b2);
  col[2] = _mm_unpacklo_epi32(b1, b3);
  col[3] = _mm_unpackhi_epi32(b1, b3);
}

/// Packs n <= 8 rows of E4M3 codes x kc columns into [kc][8] doubles (exact values). Per 8 columns
/// the rows' 8-byte pieces are transposed by byte, word and dword unpacks into columns of 8 codes,
/// each made 8 doubles by e4m3_doubles8 and times 2^1016 (exact); a last partial 8 columns go the
/// f32 way (F16C, then an 8 x 8 transpose and widening, which took 1.6x the operations per code).
DSV32_TARGET_AVX2 inline void pack_e4m3_f64(const std::uint8_t* w, std::int64_t ldw, int n, int kc, double* out) {
  const E4m3Place place = e4m3_place();
  const __m256d unbias = _mm256_set1_pd(0x1p1016);
  int k0 = 0;
  for (; k0 + 8 <= kc; k0 += 8) {
    __m128i r[8], col[4];
    for (int j = 0; j < 8; ++j)
      r[j] = j < n ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + j * ldw + k0)) : _mm_setzero_si128();
    transpose_bytes8x8(r, col);  // col[q]: columns k0 + 2q and k0 + 2q + 1
    for (int q = 0; q < 4; ++q)
      for (int h = 0; h < 2; ++h) {
        const __m256i wide = _mm256_castsi128_si256(col[q]);  // each 64-bit column broadcast (immediates)
        const __m256i c = h ? _mm256_permute4x64_epi64(wide, 0x55) : _mm256_permute4x64_epi64(wide, 0x00);
        __m256d d[2];
        e4m3_doubles8(c, place, d);
        double* o = out + (k0 + 2 * q + h) * 8;
        _mm256_storeu_pd(o, _mm256_mul_pd(d[0], unbias));
        _mm256_storeu_pd(o + 4, _mm256_mul_pd(d[1], unbias));
      }
  }
  if (k0 < kc) {
    const int cnt = kc - k0;
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = j < n ? load_row<2>(w, ldw, j, k0, cnt) : _mm256_setzero_ps();
    transpose8(r);
    for (int c = 0; c < cnt; ++c) {
      _mm256_storeu_pd(out + (k0 + c) * 8, _mm256_cvtps_pd(_mm256_castps256_ps128(r[c])));
      _mm256_storeu_pd(out + (k0 + c) * 8 + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(r[c], 1)));
    }
  }
}

/// c[i][0..16) (+)= sum_k a[i * lda + k] b[k][0..16) for i < MR, in increasing k or, kPairSwap, in
/// the FP8 panel order (k = 1, 0, 3, 2, ...: each column pair's odd column first; kc even). kc < 1
/// apart and the start compiled in, as in the AVX-512 micro32_tile (else GCC keeps the accumulators
/// on the stack); kLda / kLdb: the strides compiled in (0: lda / ldb), the pair-swapped loop then
/// stepping a column pair at a time, as there. kScaled (with kAccumulate false): instead of storing
/// the sums, c[i][j] += sum_ij * scale[i] for j < n, each operation rounded (the f32 epilogue of the
/// FP8 block dots in registers, as the AVX-512 kernel does).
template <int MR, bool kRounded, bool kPairSwap, bool kAccumulate, int kLda = 0, int kLdb = 0, bool kScaled = false>
DSV32_TARGET_AVX2 void micro16_tile(int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                                    std::int64_t ldc, const float* scale = nullptr, int n = 16) {
  const std::int64_t la = kLda ? kLda : lda, lb = kLdb ? kLdb : ldb;
  if (kc < 1) {  // empty sums
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 16; ++j) {
        if constexpr (kScaled) {
          if (j < n) c[i * ldc + j] += 0.0f * scale[i];  // exact: fused or not
        } else if (!kAccumulate) {
          c[i * ldc + j] = 0.0f;
        }
      }
    return;
  }
  __m256 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) {
    c0[i] = kAccumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    c1[i] = kAccumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  constexpr int kStep = kPairSwap ? 2 : 1;
  for (int kk = 0; kk < kc; kk += kStep, a += kStep, b += kStep * lb) {
    for (int q = kStep - 1; q >= 0; --q) {  // the pair's odd column first
      const __m256 b0 = _mm256_loadu_ps(b + q * lb), b1 = _mm256_loadu_ps(b + q * lb + 8);
      for (int i = 0; i < MR; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + i * la + q);
        if constexpr (kRounded) {
          c0[i] = _mm256_add_ps(c0[i], opaque(_mm256_mul_ps(ai, b0)));
          c1[i] = _mm256_add_ps(c1[i], opaque(_mm256_mul_ps(ai, b1)));
        } else {
          c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
          c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
      }
    }
  }
  if constexpr (kScaled) {
    const __m256i col = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), col);
    const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), col);
    for (int i = 0; i < MR; ++i) {
      const __m256 si = _mm256_set1_ps(scale[i]);
      float* ci = c + i * ldc;
      _mm256_maskstore_ps(ci, lo, _mm256_add_ps(_mm256_maskload_ps(ci, lo), opaque(_mm256_mul_ps(c0[i], si))));
      _mm256_maskstore_ps(ci + 8, hi, _mm256_add_ps(_mm256_maskload_ps(ci + 8, hi), opaque(_mm256_mul_ps(c1[i], si))));
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      _mm256_storeu_ps(c + i * ldc, c0[i]);
      _mm256_storeu_ps(c + i * ldc + 8, c1[i]);
    }
  }
}

template <int MR, bool kRounded, bool kPairSwap = false, int kLda = 0, int kLdb = 0>
DSV32_TARGET_AVX2 void micro16(int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                               std::int64_t ldc, bool accumulate) {
  if (accumulate) micro16_tile<MR, kRounded, kPairSwap, true, kLda, kLdb>(kc, a, lda, b, ldb, c, ldc);
  else micro16_tile<MR, kRounded, kPairSwap, false, kLda, kLdb>(kc, a, lda, b, ldb, c, ldc);
}

/// The f32 micro-kernel over mr rows: tiles of kMr rows, then 4, 2, 1.
template <bool kRounded, bool kPairSwap = false, int kLda = 0, int kLdb = 0>
DSV32_TARGET_AVX2 void micro_any(int mr, int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                 float* c, std::int64_t ldc, bool accumulate) {
  for_row_tiles<kMr>(mr, [&](auto rows, int i) DSV32_TARGET_AVX2 {
    micro16<decltype(rows)::value, kRounded, kPairSwap, kLda, kLdb>(kc, a + i * lda, lda, b, ldb, c + i * ldc, ldc,
                                                                    accumulate);
  });
}

/// GemmOps::fp8_value_dots_scaled: fp8_value_dots with epilogue_f32 in registers.
template <int kLda>
DSV32_TARGET_AVX2 void fp8_value_dots_scaled_any(int mr, int n, const float* a, std::int64_t lda, const float* b,
                                                 const float* scale, float* c, std::int64_t ldc) {
  const std::int64_t la = kLda ? kLda : lda;
  for_row_tiles<kMr>(mr, [&](auto rows, int i) DSV32_TARGET_AVX2 {
    micro16_tile<decltype(rows)::value, false, true, false, kLda, kNr, true>(128, a + i * la, lda, b, kNr, c + i * ldc,
                                                                            ldc, scale + i, n);
  });
}
DSV32_TARGET_AVX2 inline void fp8_value_dots_scaled(int mr, int n, const float* a, std::int64_t lda, const float* b,
                                                    const float* scale, float* c, std::int64_t ldc) {
  if (lda == 128) fp8_value_dots_scaled_any<128>(mr, n, a, lda, b, scale, c, ldc);
  else fp8_value_dots_scaled_any<0>(mr, n, a, lda, b, scale, c, ldc);
}

/// c[i][0..8) = sum_k a[i * lda + k] b[k][0..8) in double, i < MR; with kScaled, instead f[i][j] +=
/// f32(that sum) * scale[i] for j < n (epilogue_f64 in registers: the same bits). kLda: lda compiled
/// in (0: as given).
template <int MR, bool kScaled = false, int kLda = 0>
DSV32_TARGET_AVX2 void micro_f64_tile(int kc, const double* a, std::int64_t lda, const double* b, double* c, std::int64_t ldc,
                               int n = 8, const float* scale = nullptr, float* f = nullptr, std::int64_t ldf = 0) {
  const std::int64_t la = kLda ? kLda : lda;
  if (kc < 1) {  // (apart, so that GCC knows the loop below runs: see micro16_tile)
    if constexpr (!kScaled)
      for (int i = 0; i < MR; ++i) std::fill(c + i * ldc, c + i * ldc + 8, 0.0);
    return;
  }
  __m256d c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_pd();
  for (int k = 0; k < kc; ++k) {
    const __m256d b0 = _mm256_loadu_pd(b + k * 8), b1 = _mm256_loadu_pd(b + k * 8 + 4);
    for (int i = 0; i < MR; ++i) {
      const __m256d ai = _mm256_broadcast_sd(a + i * la + k);
      c0[i] = _mm256_fmadd_pd(ai, b0, c0[i]);
      c1[i] = _mm256_fmadd_pd(ai, b1, c1[i]);
    }
  }
  if constexpr (kScaled) {
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int i = 0; i < MR; ++i) {
      const __m256 d = _mm256_set_m128(_mm256_cvtpd_ps(c1[i]), _mm256_cvtpd_ps(c0[i]));
      const __m256 p = opaque(_mm256_mul_ps(d, _mm256_set1_ps(scale[i])));
      _mm256_maskstore_ps(f + i * ldf, lanes, _mm256_add_ps(_mm256_maskload_ps(f + i * ldf, lanes), p));
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      _mm256_storeu_pd(c + i * ldc, c0[i]);
      _mm256_storeu_pd(c + i * ldc + 4, c1[i]);
    }
  }
}

/// GemmOps::micro_f64_scaled: micro_f64 over one 128-column block with epilogue_f64 in registers
/// (the drivers' x tiles are 128 values a row: that stride compiled in).
template <int kLda>
DSV32_TARGET_AVX2 void micro_f64_scaled_any(int mr, int n, const double* a, std::int64_t lda, const double* b,
                                            const float* scale, float* c, std::int64_t ldc) {
  const std::int64_t la = kLda ? kLda : lda;
  for_row_tiles<kMr64>(mr, [&](auto rows, int i) DSV32_TARGET_AVX2 {
    micro_f64_tile<decltype(rows)::value, true, kLda>(128, a + i * la, lda, b, nullptr, 0, n, scale + i, c + i * ldc,
                                                      ldc);
  });
}
DSV32_TARGET_AVX2 inline void micro_f64_scaled(int mr, int n, const double* a, std::int64_t lda, const double* b,
                                               const float* scale, float* c, std::int64_t ldc) {
  if (lda == 128) micro_f64_scaled_any<128>(mr, n, a, lda, b, scale, c, ldc);
  else micro_f64_scaled_any<0>(mr, n, a, lda, b, scale, c, ldc);
}

DSV32_TARGET_AVX2 inline void widen_bf16(const std::uint16_t* x, std::int64_t n, float* out) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load_row<0>(x + i, 0, 0, 0, 8));
  for (; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16);
}
/// 8 E4M3 activation codes as exact f32 values, the NaN codes as NaN.
DSV32_TARGET_AVX2 inline __m256 load_x_e4m3(const std::uint8_t* p) {
  std::int64_t bits;
  std::memcpy(&bits, p, 8);
  const __m256i c = _mm256_and_si256(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bits)), _mm256_set1_epi32(0x7F));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(c, _mm256_set1_epi32(0x7F)));
  return _mm256_blendv_ps(load_row<2>(p, 0, 0, 0, 8), _mm256_set1_ps(__builtin_nanf("")), nan);
}
DSV32_TARGET_AVX2 inline void widen_e4m3(const std::uint8_t* x, std::int64_t n, float* out) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load_x_e4m3(x + i));
  for (; i < n; ++i) out[i] = kE4m3Decode[x[i]];
}
/// max |x| over n bf16 values; MAXPS(v, acc) keeps acc where v is NaN, as std::max(acc, v) does.
DSV32_TARGET_AVX2 inline float amax_bf16(const std::uint16_t* x, std::int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 acc = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_and_ps(load_row<0>(x + i, 0, 0, 0, 8), abs_mask), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float amax = 0.0f;  // the maximum is exact in any order (no lane holds a NaN)
  for (const float v : lanes) amax = std::max(amax, v);
  for (; i < n; ++i) amax = std::max(amax, std::fabs(std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16)));
  return amax;
}
/// encode_e4m3(clamp(f32(x) / s, -448, 448)), 8 at a time, branch-free (as the AVX-512 version): the
/// same bits.
DSV32_TARGET_AVX2 inline void quantize_e4m3(const std::uint16_t* x, std::int64_t n, float s, std::uint8_t* out) {
  const __m256 vs = _mm256_set1_ps(s), hi = _mm256_set1_ps(kE4m3Max), lo = _mm256_set1_ps(-kE4m3Max);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  // byte 0 of each dword to the lane's first 4 bytes
  const __m256i gather = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // std::clamp: lo if v < lo, else hi if hi < v, else v (NaN stays NaN): MINPS / MAXPS return
    // their second operand unless the first compares smaller / greater
    const __m256 v = _mm256_max_ps(lo, _mm256_min_ps(hi, _mm256_div_ps(load_row<0>(x + i, 0, 0, 0, 8), vs)));
    const __m256i bits = _mm256_castps_si256(v), abs = _mm256_and_si256(bits, abs_mask);
    const __m256 a = _mm256_castsi256_ps(abs);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
    // normal: 3 mantissa bits, half to even on the bit pattern; (e + 7) << 3 | m == (r >> 20) - 960
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(abs, _mm256_set1_epi32(0x7FFFF)),
                                       _mm256_and_si256(_mm256_srli_epi32(abs, 20), _mm256_set1_epi32(1)));
    __m256i code = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(960));
    // subnormal: multiples of 2^-9, rounded in the current mode (nearbyint's)
    const __m256i sub = _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.015625f), _CMP_LT_OQ));
    code = _mm256_blendv_epi8(code, _mm256_cvtps_epi32(_mm256_mul_ps(a, _mm256_set1_ps(512.0f))), sub);
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7E), _mm256_castps_si256(_mm256_cmp_ps(a, hi, _CMP_GE_OQ)));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000)));
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_or_si256(code, sign), gather);
    const __m128i packed = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), packed);
  }
  portable::quantize_e4m3(x + i, n - i, s, out + i);
}
DSV32_TARGET_AVX2 inline void widen_e4m3_f64(const std::uint8_t* x, std::int64_t n, double* out) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = load_x_e4m3(x + i);
    _mm256_storeu_pd(out + i, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    _mm256_storeu_pd(out + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  for (; i < n; ++i) out[i] = kE4m3Decode[x[i]];
}

DSV32_TARGET_AVX2 inline void dequant_e4m3(const std::uint8_t* w, std::int64_t n, const float* block_scale,
                                           float* out) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float s = block_scale[i / 128];
    const __m256 v = _mm256_mul_ps(load_row<2>(w + i, 0, 0, 0, 8), _mm256_set1_ps(s));
    if (e4m3_scale_exact(s)) {  // exact in bf16: nothing to round
      _mm256_storeu_ps(out + i, v);
      continue;
    }
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)))));
  }
  for (; i < n; ++i) out[i] = round_bf16(kE4m3Weight[w[i]] * block_scale[i / 128]);
}

DSV32_TARGET_AVX2 inline void epilogue_f64(int mr, int n, const double* dot, std::int64_t ldd, const float* scale,
                                           float* c, std::int64_t ldc) {
  for (int i = 0; i < mr; ++i) {
    const __m128 s = _mm_set1_ps(scale[i]);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      const __m128 p = _mm_mul_ps(_mm256_cvtpd_ps(_mm256_loadu_pd(dot + i * ldd + j)), s);
      __m128 q = p;
      __asm__("" : "+x"(q));
      _mm_storeu_ps(c + i * ldc + j, _mm_add_ps(_mm_loadu_ps(c + i * ldc + j), q));
    }
    for (; j < n; ++j) {
      float p = static_cast<float>(dot[i * ldd + j]) * scale[i];
      __asm__("" : "+x"(p));
      c[i * ldc + j] += p;
    }
  }
}

DSV32_TARGET_AVX2 inline void epilogue_f32(int mr, int n, const float* dot, std::int64_t ldd, const float* scale,
                                           float* c, std::int64_t ldc) {
  for (int i = 0; i < mr; ++i) {
    const __m256 s = _mm256_set1_ps(scale[i]);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 p = opaque(_mm256_mul_ps(_mm256_loadu_ps(dot + i * ldd + j), s));
      _mm256_storeu_ps(c + i * ldc + j, _mm256_add_ps(_mm256_loadu_ps(c + i * ldc + j), p));
    }
    for (; j < n; ++j) {
      float p = dot[i * ldd + j] * scale[i];
      __asm__("" : "+x"(p));
      c[i * ldc + j] += p;
    }
  }
}

/// 8 columns (4 pairs) of 8 bf16 weight rows from column k on as p[c] = pair c of every row (dword
/// lane j: row j's bf16 bits of columns k + 2c, low half, and k + 2c + 1, high half): each vector
/// loaded from two rows, row q into the low 128-bit lane and row q + 4 into the high one, then a
/// 4 x 4 dword transpose inside the 128-bit lanes (8 unpacks per 64 weights, against 24 shuffles and
/// two widening passes per 64 for pack_panel's 8 x 8 f32 transpose).
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline void load_pairs8(const std::uint16_t* const* wr,
                                                                        std::int64_t k, __m256i p[4]) {
  __m256i v[4];
  for (int q = 0; q < 4; ++q)
    v[q] = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[q] + k))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[q + 4] + k)), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  p[0] = _mm256_unpacklo_epi64(t0, t2);
  p[1] = _mm256_unpackhi_epi64(t0, t2);
  p[2] = _mm256_unpacklo_epi64(t1, t3);
  p[3] = _mm256_unpackhi_epi64(t1, t3);
}

/// How far ahead (in columns) bf16_rows_groups asks for each of its rows: 512 bytes, as the AVX-512
/// kernel does (one Zen 5 core forced to AVX2, 1 x row from memory: 256 and 512 columns within
/// noise, 128 and 1024 3-15% slower).
inline constexpr std::int64_t kBf16RowsAhead = 256;

/// 8 columns of bf16_rows_groups: the weights from rows[8 g + j] + kw, x from column kx.
template <int MT, int G>
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline void bf16_rows_step(const std::uint16_t* const* rows,
                                                                           std::int64_t kw, const float* x,
                                                                           std::int64_t ldx, std::int64_t kx,
                                                                           __m256 (*acc)[MT]) {
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int g = 0; g < G; ++g) {
    __m256i p[4];
    load_pairs8(rows + 8 * g, kw, p);
    for (int c = 0; c < 4; ++c) {
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(p[c], 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(p[c], hi));
      for (int m = 0; m < MT; ++m)
        acc[g][m] = _mm256_fmadd_ps(even, _mm256_broadcast_ss(x + m * ldx + kx + 2 * c), acc[g][m]);
      for (int m = 0; m < MT; ++m)
        acc[g][m] = _mm256_fmadd_ps(odd, _mm256_broadcast_ss(x + m * ldx + kx + 2 * c + 1), acc[g][m]);
    }
  }
}

/// GemmOps::bf16_rows for MT x rows and n <= 8 G weight rows, lane j of group g's vectors over weight
/// row 8 g + j: 8 columns of the rows at a time as 4 vectors of column pairs per group (load_pairs8),
/// each pair's even then odd column multiplied into the group's MT accumulators (exact products, one
/// rounding per addition: the sequential f32 sum), x broadcast from memory. Each accumulator is one
/// chain of K dependent FMAs, so a kernel with fewer than 8 of them waits on the FMA latency: up to 4
/// x rows take 16 weight rows at once (G = 2; one Zen 5 core forced to AVX2, weights in L2, 1 x row
/// 7.8 -> 15.0 G elements/s, 2 x rows 7.9 -> 11.7). Rows past n read row 0 and are not stored; a
/// column tail (K % 8) runs on a zero-padded copy (x is zero there too).
template <int MT, int G>
DSV32_TARGET_AVX2 void bf16_rows_groups(std::int64_t K, const float* x, std::int64_t ldx, const std::uint16_t* w,
                                        std::int64_t ldw, int n, float* out, std::int64_t ldo) {
  const std::uint16_t* wr[8 * G];
  for (int j = 0; j < 8 * G; ++j) wr[j] = w + (j < n ? j : 0) * ldw;
  __m256 acc[G][MT];
  for (int g = 0; g < G; ++g)
    for (int m = 0; m < MT; ++m) acc[g][m] = _mm256_setzero_ps();
  std::int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    if (k + kBf16RowsAhead < K)
      for (int j = 0; j < 8 * G; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(wr[j] + k + kBf16RowsAhead), _MM_HINT_T0);
#if !defined(__CUDACC__)  // nvcc's front end does not know the pragma (gcc compiles this code anyway)
#pragma GCC unroll 4
#endif
    for (int s = 0; s < 32; s += 8) bf16_rows_step<MT, G>(wr, k + s, x, ldx, k + s, acc);
  }
  for (; k + 8 <= K; k += 8) bf16_rows_step<MT, G>(wr, k, x, ldx, k, acc);
  if (k < K) {
    alignas(16) std::uint16_t tile[8 * G][8] = {};
    const std::uint16_t* tr[8 * G];
    for (int j = 0; j < 8 * G; ++j) {
      std::memcpy(tile[j], wr[j] + k, static_cast<std::size_t>(K - k) * 2);
      tr[j] = tile[j];
    }
    bf16_rows_step<MT, G>(tr, 0, x, ldx, k, acc);
  }
  for (int g = 0; g < G; ++g) {
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8 * g), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int m = 0; m < MT; ++m) _mm256_maskstore_ps(out + m * ldo + 8 * g, lanes, acc[g][m]);
  }
}

/// GemmOps::bf16_rows: all M x rows at once (one kernel per M, so that each weight is read once),
/// 16 weight rows at a time up to 4 x rows (where 8 rows leave it short of chains), else 8.
DSV32_TARGET_AVX2 inline void bf16_rows(int M, int n, std::int64_t K, const float* x, std::int64_t ldx,
                                        const std::uint16_t* w, std::int64_t ldw, float* out, std::int64_t ldo) {
  using Kernel = void (*)(std::int64_t, const float*, std::int64_t, const std::uint16_t*, std::int64_t, int, float*,
                          std::int64_t);
  static constexpr Kernel pairs[4] = {bf16_rows_groups<1, 2>, bf16_rows_groups<2, 2>, bf16_rows_groups<3, 2>,
                                      bf16_rows_groups<4, 2>};
  static constexpr Kernel singles[8] = {bf16_rows_groups<1, 1>, bf16_rows_groups<2, 1>, bf16_rows_groups<3, 1>,
                                        bf16_rows_groups<4, 1>, bf16_rows_groups<5, 1>, bf16_rows_groups<6, 1>,
                                        bf16_rows_groups<7, 1>, bf16_rows_groups<8, 1>};
  int r0 = 0;
  if (M <= 4)
    for (; n - r0 > 8; r0 += 16) pairs[M - 1](K, x, ldx, w + r0 * ldw, ldw, n - r0 < 16 ? n - r0 : 16, out + r0, ldo);
  for (; r0 < n; r0 += 8) singles[M - 1](K, x, ldx, w + r0 * ldw, ldw, n - r0 < 8 ? n - r0 : 8, out + r0, ldo);
}

/// The sums of four vectors of doubles, as the four lanes of one vector.
DSV32_TARGET_AVX2 inline __m256d reduce4(const __m256d a[4]) {
  const __m256d h01 = _mm256_hadd_pd(a[0], a[1]), h23 = _mm256_hadd_pd(a[2], a[3]);
  return _mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20), _mm256_permute2f128_pd(h01, h23, 0x31));
}

/// The exact FP8 kernels' block epilogue for four outputs: the lane sums of a[0..3] (exact block dots
/// times 2^-504) made exact dots, rounded to f32, times their scale products (`scales`), rounded
/// again, never fused into the addition, then added to c.
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline __m128 add_block_dots(const __m256d a[4], __m128 scales,
                                                                             __m128 c) {
  const __m256d d = _mm256_mul_pd(reduce4(a), _mm256_set1_pd(0x1p504));
  __m128 q = _mm_mul_ps(_mm256_cvtpd_ps(d), scales);
  __asm__("" : "+x"(q));
  return _mm_add_ps(c, q);
}

/// The small-M FP8 kernels ask for each weight block one group of rows ahead (the 8 or 16 rows
/// after those they read) where rows are short (ldw <= kPanelPrefetchMaxK columns): a group then
/// spans a few KB per row, too short for the hardware prefetcher's streams to get going. On one
/// Granite Rapids core, 1536-column rows against one x row: exact kernel 4.2 -> 8.0 GB/s, fast row
/// order 6.1 -> 8.9 (9.0 at 7168 columns); 8 x rows, fast panel order: 3.6 -> 5.1 (6.0). From
/// 4096 columns on the hints cost the panel kernel 5-10%. This table's kernels on the same host
/// (DSV32_CPU_ISA=avx2), 1536-column rows: exact, one core, 4.8 -> 8.0-8.3 GB/s; two cores, fast
/// row order 8.9-9.2 -> 13.9-14.9, 8 x rows' panels 4.7-4.8 -> 6.2-6.3; 7168-column rows
/// unchanged. (Shared by the AVX-512 kernels.)
inline constexpr std::int64_t kPanelPrefetchMaxK = 2048;

/// Where rows are longer, the exact FP8 kernel for one x row (e4m3_rows) asks for the block this many
/// bytes further along each row it reads: the hardware prefetcher alone left the two cores short of
/// memory speed. dsv32-bench-gemm's wo shape at M = 1 (7168 rows of 16384 codes, streamed), two cores
/// of a Zen 5 host forced to AVX2, before -> after in alternating runs: exact 17.4-19.2 -> 19.8-21.7
/// GB/s. More x rows of the exact kernels are bound by their FMAs: no hints there (the batch-8 step
/// measured no better with them). (The fast row-order kernel hints the next rows: e4m3_pair_rows.)
inline constexpr std::int64_t kLongRowAhead = 512;

/// A hint for the two cache lines of the 128-byte block `offset` bytes from row: the address is
/// formed as an integer, as it may lie past the matrix (after its last group), where the hint is
/// dropped.
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline void prefetch_block(const std::uint8_t* row,
                                                                          std::int64_t offset) {
  const auto at = reinterpret_cast<std::uintptr_t>(row) + static_cast<std::uintptr_t>(offset);
  _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(at + 64), _MM_HINT_T0);
}

/// Blocks [kb0, kb1) of e4m3_rows for MT x rows and R weight rows (MT * R <= 8): xd at column 0
/// (rows ldx apart), wr[r] weight row r's first code; each block's product is added to out[m][r]
/// for r < valid_rows, the sums kept in registers from block to block (the same additions in the same
/// order as adding to out per block). Each 8 codes of a row become doubles (their values times
/// 2^-1016, as in the AVX-512 kernel) by e4m3_doubles8 from one broadcast load, against x as stored:
/// two shuffles and three simple operations per 8 codes, where the sign extension, shift and mask
/// per 4 codes took two shuffles and four (the shuffle-and-shift ports bound this kernel at one and
/// two x rows: one Zen 5 core, forced to AVX2, 7168-column rows in L2, 1 row 13.9 -> 15.4 G codes/s,
/// 2 rows 11.4 -> 12.3; streamed from memory, 1 row 11.0 -> 12.1). `ahead`: hint the block at that
/// offset from each row (0: none).
template <int MT, int R>
DSV32_TARGET_AVX2 void e4m3_blocks(std::int64_t kb0, std::int64_t kb1, const double* xd, std::int64_t ldx,
                                   const float* xs, std::int64_t ldxs, const std::uint8_t* const* wr, const float* ws,
                                   int valid_rows, float* out, std::int64_t ldo, std::int64_t ahead) {
  constexpr int A = MT * R, V = A > 4 ? 2 : 1;
  const E4m3Place place = e4m3_place();
  alignas(16) float c[4 * V];
  for (int i = 0; i < 4 * V; ++i) c[i] = i < A && i % R < valid_rows ? out[(i / R) * ldo + i % R] : 0.0f;
  __m128 cv[V];
  for (int v = 0; v < V; ++v) cv[v] = _mm_load_ps(c + 4 * v);
  for (std::int64_t kb = kb0; kb < kb1; ++kb) {
    if (ahead)
      for (int r = 0; r < valid_rows; ++r) prefetch_block(wr[r], ahead + kb * 128);
    const double* xb = xd + kb * 128;
    __m256d acc[4 * V];
    for (int i = 0; i < 4 * V; ++i) acc[i] = _mm256_setzero_pd();
    for (int k = 0; k < 128; k += 8) {
      for (int r = 0; r < R; ++r) {
        std::int64_t bits;
        std::memcpy(&bits, wr[r] + kb * 128 + k, 8);
        __m256d wv[2];
        e4m3_doubles8(_mm256_set1_epi64x(bits), place, wv);
        for (int j = 0; j < 2; ++j)
          for (int m = 0; m < MT; ++m)
            acc[m * R + r] = _mm256_fmadd_pd(wv[j], _mm256_loadu_pd(xb + m * ldx + k + 4 * j), acc[m * R + r]);
      }
    }
    for (int v = 0; v < V; ++v) {
      float s[4];
      for (int i = 0; i < 4; ++i) {
        const int m = (4 * v + i) / R;
        s[i] = m < MT ? xs[m * ldxs + kb] * ws[kb] : 0.0f;
      }
      cv[v] = add_block_dots(acc + 4 * v, _mm_setr_ps(s[0], s[1], s[2], s[3]), cv[v]);
    }
  }
  for (int v = 0; v < V; ++v) _mm_store_ps(c + 4 * v, cv[v]);
  for (int i = 0; i < A; ++i)
    if (i % R < valid_rows) out[(i / R) * ldo + i % R] = c[i];
}

/// Weight rows per group of mt x rows in e4m3_rows (MT x R <= 8 accumulators of 4 doubles).
constexpr int e4m3_weight_rows(int mt) { return mt == 8 ? 1 : mt == 4 ? 2 : mt == 2 ? 4 : 8; }

/// One x row in the order e4m3_row_blocks reads it (n values, a multiple of 32): in each 32 columns,
/// vector 4 h + q (h < 2, q < 4) holds columns 8 h + 2 q and 8 h + 2 q + 1 in its low 128-bit lane
/// and the two 16 columns further in its high lane.
DSV32_TARGET_AVX2 inline void lane_pair_order(const double* x, std::int64_t n, double* out) {
  for (std::int64_t c = 0; c < n; c += 32)
    for (int v = 0; v < 8; ++v) {
      const double* s = x + c + 8 * (v / 4) + 2 * (v % 4);
      _mm256_storeu_pd(out + c + 4 * v, _mm256_loadu2_m128d(s + 16, s));
    }
}

/// e4m3_blocks for one x row and 8 weight rows, x in lane_pair_order (xp: block kb0's first value).
/// Where e4m3_blocks makes each 8 codes doubles from a broadcast load (an add, an and and a blend per
/// 8 codes, at half the vector's width), this kernel takes 32 codes per load: c + c and c & 0x80 of
/// all 32 at once, then two qword unpacks give each 128-bit lane the (c + c, c & 0x80) halves of one
/// group of 8 codes — a lane's codes, not a broadcast's, so the two lanes serve different columns,
/// hence x's order — and one byte shuffle per 4 codes moves each code's two bytes to the top of a
/// double, as e4m3_doubles8 does: per 32 codes 1 load, 2 simple operations, 2 unpacks, 8 shuffles and
/// 8 FMAs, against 4 broadcast loads, 12 simple operations, 8 shuffles and 8 FMAs. The block dots are
/// exact either way, so the order of the additions does not change a bit; the rest is e4m3_blocks'.
/// llvm-mca (LLVM 14), cycles per 8 codes of a row, this loop against e4m3_blocks<1, 8>: Zen 3 2.0
/// against 3.0, Zen 2 2.1 against 2.7, Skylake 2.1 against 2.6. Measured on a Zen 5 host forced to
/// AVX2 (whose 256-bit shuffles and FMAs share about 2.4 issue slots a cycle, so the saving is
/// smaller there), 7168-column rows, the same bits: one core in L2 12.4-13.9 -> 14.3-17.3 G codes/s;
/// two cores streaming 16384 rows (this kernel with kLongRowAhead's hints, the other without)
/// 17.4-19.0 -> 20.3-24.7. The loops over k and r are unrolled by request: GCC 12 otherwise
/// interchanged them and kept the 16 accumulators in memory (14.3-15.4 against 11.0-12.5 G codes/s in
/// L2).
DSV32_TARGET_AVX2 inline void e4m3_row_blocks(std::int64_t kb0, std::int64_t kb1, const double* xp, const float* xs,
                                              const std::uint8_t* const* wr, const float* ws, int valid_rows,
                                              float* out, std::int64_t ahead) {
  constexpr int R = 8;
  __m256i place[4];  // pattern q: qword j of each lane takes bytes 2 q + j (c + c) and 8 + 2 q + j (c & 0x80)
  for (int q = 0; q < 4; ++q) {
    auto word = [q](int j) {
      return static_cast<long long>(0x0000808080808080ull | std::uint64_t(2 * q + j) << 48 |
                                    std::uint64_t(8 + 2 * q + j) << 56);
    };
    place[q] = _mm256_setr_epi64x(word(0), word(1), word(0), word(1));
  }
  const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
  alignas(16) float c[R];
  for (int i = 0; i < R; ++i) c[i] = i < valid_rows ? out[i] : 0.0f;
  __m128 cv[2] = {_mm_load_ps(c), _mm_load_ps(c + 4)};
  for (std::int64_t kb = kb0; kb < kb1; ++kb) {
    if (ahead)
      for (int r = 0; r < valid_rows; ++r) prefetch_block(wr[r], ahead + kb * 128);
    const double* xb = xp + (kb - kb0) * 128;
    __m256d acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_pd();
    DSV32_UNROLL_ALL
    for (int k = 0; k < 128; k += 32)
      DSV32_UNROLL_ALL
      for (int r = 0; r < R; ++r) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + kb * 128 + k));
        const __m256i m = _mm256_add_epi8(v, v), s = _mm256_and_si256(v, sign);
        // lane L of half h: (c + c, c & 0x80) of columns k + 16 L + 8 h .. + 7
        const __m256i half[2] = {_mm256_unpacklo_epi64(m, s), _mm256_unpackhi_epi64(m, s)};
        for (int h = 0; h < 2; ++h)
          for (int q = 0; q < 4; ++q)
            acc[r][h] = _mm256_fmadd_pd(_mm256_castsi256_pd(_mm256_shuffle_epi8(half[h], place[q])),
                                        _mm256_loadu_pd(xb + k + 4 * (4 * h + q)), acc[r][h]);
      }
    __m256d sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm256_add_pd(acc[r][0], acc[r][1]);
    const __m128 scale = _mm_set1_ps(xs[kb] * ws[kb]);
    for (int v = 0; v < 2; ++v) cv[v] = add_block_dots(sum + 4 * v, scale, cv[v]);
  }
  _mm_store_ps(c, cv[0]);
  _mm_store_ps(c + 4, cv[1]);
  for (int i = 0; i < valid_rows; ++i) out[i] = c[i];
}

/// e4m3_pair_rows (the row order, gemm_ops.hpp) for MT x rows and R weight rows, MT * R <= 4. A
/// block's 16 lanes are two 8-lane halves u: the lanes 8u + j of slot group g hold the column pairs
/// 32 (g / 2) + 16 u + 4 (g % 2) + j % 4 + 8 (j / 4), i.e. the 8-byte pieces at 64 (g / 2) + 32 u +
/// 8 (g % 2) and 16 bytes further: the low and the high 8 bytes of the 128-bit lanes of the 32
/// bytes at 64 (g / 2) + 32 u, so one load serves two slot groups, each dealt to dwords by one word
/// unpack. Each code is shifted to bits 20..27 (its sign to 31) and masked: the f32 of its value
/// times 2^-120, exactly (an f32 subnormal for E4M3's subnormal codes). x comes times 2^119 (<= 480
/// x 2^119 < 2^128), so each FMA adds the exact product / 2, and the block's dot is the sum times 2:
/// the same bits as without the powers of two, which commute with every rounding (the sums are
/// multiples of 2^-19, far from f32's subnormals). Each pair adds its odd column's product, then its
/// even one's (FMAs of exact products), as VDPBF16PS does. x comes as f32 values in slot order, the
/// odd columns' (xf) and the even columns' (xf + 64) of each block 128 apart, rows ldx apart. Taking
/// the 2^120 into x saves the two multiplies per 16 codes that scaled the codes (one Zen 5 core
/// forced to AVX2, one x row, 7168-column rows in L2, the same bits: 17.8-18.0 -> 21.1-21.3 G
/// codes/s); it also keeps subnormal codes off the multiplier, which takes ~10x longer on them on
/// that core (uniformly random codes, 1/16 of them subnormal: 8.4-10.1 -> 20.4-20.6).
template <int MT, int R>
DSV32_TARGET_AVX2 void e4m3_pair_group(std::int64_t kb0, std::int64_t kb1, const float* xf, std::int64_t ldx,
                                       const float* xs, std::int64_t ldxs, const std::uint8_t* const* wr,
                                       const float* ws, int valid, float* out, std::int64_t ldo, std::int64_t ahead) {
  static_assert(MT * R <= 4);
  const __m256i code_bits = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
  float c[MT * R];
  for (int i = 0; i < MT * R; ++i) c[i] = i % R < valid ? out[(i / R) * ldo + i % R] : 0.0f;
  for (std::int64_t kb = kb0; kb < kb1; ++kb) {
    if (ahead)
      for (int r = 0; r < R; ++r) prefetch_block(wr[r], ahead + kb * 128);
    const float* xb = xf + (kb - kb0) * 128;
    __m256 acc[MT * R][2];
    for (int i = 0; i < MT * R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int g2 = 0; g2 < 2; ++g2)
      for (int u = 0; u < 2; ++u) {
        __m256i v[R];
        for (int r = 0; r < R; ++r)
          v[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + kb * 128 + 64 * g2 + 32 * u));
        for (int h = 0; h < 2; ++h) {
          const int g = 2 * g2 + h;
          __m256 we[R], wo[R];
          for (int r = 0; r < R; ++r) {
            // dword j: pair j's code word twice, odd << 24 | even << 16 | odd << 8 | even
            const __m256i d = h == 0 ? _mm256_unpacklo_epi16(v[r], v[r]) : _mm256_unpackhi_epi16(v[r], v[r]);
            we[r] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_slli_epi32(d, 8), 4), code_bits));
            wo[r] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(d, 4), code_bits));
          }
          for (int m = 0; m < MT; ++m) {
            const float* xm = xb + m * ldx + 16 * g + 8 * u;
            for (int r = 0; r < R; ++r) {
              acc[m * R + r][u] = _mm256_fmadd_ps(_mm256_loadu_ps(xm), wo[r], acc[m * R + r][u]);
              acc[m * R + r][u] = _mm256_fmadd_ps(_mm256_loadu_ps(xm + 64), we[r], acc[m * R + r][u]);
            }
          }
        }
      }
    for (int i = 0; i < MT * R; ++i) {
      const __m256 h8 = _mm256_add_ps(acc[i][0], acc[i][1]);  // l[i] + l[i + 8]
      const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
      const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));  // h4[0] + h4[2], h4[1] + h4[3]
      const float dot = _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2))) * 2.0f;  // (exact)
      float p = dot * (xs[(i / R) * ldxs + kb] * ws[kb]);
      __asm__("" : "+x"(p));  // rounded, never fused into the addition
      c[i] += p;
    }
  }
  for (int i = 0; i < MT * R; ++i)
    if (i % R < valid) out[(i / R) * ldo + i % R] = c[i];
}

/// GemmOps::e4m3_pair_rows: x's pairs of blocks [kb0, kb1) made f32 times 2^119 (see
/// e4m3_pair_group) once per call (odd and even columns apart, in this thread's scratch: at most 8 x
/// 256 blocks' 128 KB, as the caller passes them), where each x-row group used to widen them per
/// slot group and weight-row group (one Zen 5 core forced to AVX2, 7168-column rows in L2: 4 x rows
/// 6.1 -> 7.9 G codes/s, 2 rows 11.0 -> 12.5); then 8 weight rows at a time, each against every
/// x-row group (in cache after the first). Hints, from the first x-row group: where rows are short,
/// each block of the 8 rows after; where they are long, each block of the next R weight rows (the
/// same columns R rows on), so that each group's R streams do not start cold. Two cores of a Zen 5
/// host forced to AVX2, 16384 x 7168 codes streamed in 64-row tasks, alternating: 1 x row (where
/// hints 512 bytes along the rows being read, kLongRowAhead, were the rule) 20.8-24.2 -> 26.3-28.2
/// GB/s; 2 x rows (no hints before) 10.0-13.5 -> 18.8-24.1; 3 rows 6.5-9.6 -> 13.1-13.3; 4 rows
/// 8.2-8.7 -> 11.4-11.5. (A hinted line is read R ldw bytes later: from L1 or L2.) The exact
/// one-row kernel measured the same either way.
DSV32_TARGET_AVX2 inline void e4m3_pair_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                             const std::uint32_t* xp, std::int64_t ldx, const float* xs,
                                             std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                             const float* ws, float* out, std::int64_t ldo) {
  const std::int64_t blocks = kb1 - kb0, ldf = 128 * blocks;
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<std::size_t>(M * ldf)) scratch.resize(static_cast<std::size_t>(M * ldf));
  float* xf = scratch.data();
  const __m256i hi_half = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256 bias = _mm256_set1_ps(0x1p119f);
  for (int m = 0; m < M; ++m)
    for (std::int64_t b = 0; b < blocks; ++b)
      for (int s = 0; s < 64; s += 8) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + m * ldx + (kb0 + b) * 64 + s));
        float* f = xf + m * ldf + b * 128 + s;
        _mm256_storeu_ps(f, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(v, hi_half)), bias));
        _mm256_storeu_ps(f + 64, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), bias));
      }
  for (int g0 = 0; g0 < rows; g0 += 8) {
    for (int m0 = 0; m0 < M;) {
      const int left = M - m0;
      const int mt = left >= 4 ? 4 : left >= 2 ? 2 : 1, R = 4 / mt;
      const float* x = xf + m0 * ldf;
      const float* s = xs + m0 * ldxs;
      // the first x-row group asks for the next 8 rows' blocks where rows are short, for the
      // next R rows' where they are long (the later groups read the rows from cache)
      const std::int64_t ahead = m0 != 0 ? 0 : ldw <= kPanelPrefetchMaxK ? 8 * ldw : R * ldw;
      for (int r0 = g0; r0 < g0 + 8 && r0 < rows; r0 += R) {
        const int valid = rows - r0 < R ? rows - r0 : R;
        const std::uint8_t* wr[4];
        for (int r = 0; r < R; ++r) wr[r] = w + (r0 + (r < valid ? r : 0)) * ldw;  // a stand-in row past the last
        float* o = out + m0 * ldo + r0;
        if (mt == 4) e4m3_pair_group<4, 1>(kb0, kb1, x, ldf, s, ldxs, wr, ws, valid, o, ldo, ahead);
        else if (mt == 2) e4m3_pair_group<2, 2>(kb0, kb1, x, ldf, s, ldxs, wr, ws, valid, o, ldo, ahead);
        else e4m3_pair_group<1, 4>(kb0, kb1, x, ldf, s, ldxs, wr, ws, valid, o, ldo, ahead);
      }
      m0 += mt;
    }
  }
}

/// The low 8 bytes of `codes` as the f32 values of E4M3 codes (0x7F / 0xFF as +-480) times 2^-120,
/// exactly, as in e4m3_pair_group: each code sign-extended, shifted to bits 20..27 and masked with
/// code_bits (its sign at bit 31).
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline __m256 widen_codes8(__m128i codes, __m256i code_bits) {
  const __m256i d = _mm256_cvtepi8_epi32(codes);
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(d, 20), code_bits));
}

/// e4m3_panel_rows (the panel order, gemm_ops.hpp) for MT x rows against 8 weight rows, lanes
/// running over the weight rows: per 8 columns, 8 bytes of each row are transposed by three levels
/// of unpacks (8, 16, 32 bits) into columns of 8 codes, each sign-extended to dwords and made f32 as
/// in e4m3_pair_group (times 2^-120); per column pair the odd column's products, then the even
/// one's, are added (FMAs of exact products) into one accumulator per x row, the x values broadcast
/// from xo / xe (x row m's odd and even columns of the chunk as f32 times 2^119, ldxf apart). Per
/// block each accumulator is doubled (exact), scaled and added to out. Arguments start at the first
/// block; out's rows masked to `valid`.
template <int MT>
DSV32_TARGET_AVX2 void e4m3_panel8(std::int64_t blocks, const float* xo, const float* xe, std::int64_t ldxf,
                                   const float* xs, std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                   const float* ws, int valid, float* out, std::int64_t ldo) {
  const __m256i code_bits = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
  const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const bool ahead = valid == 8 && ldw <= kPanelPrefetchMaxK;  // the next 8 rows' blocks (not on the padded tile)
  for (std::int64_t kb = 0; kb < blocks; ++kb) {
    if (ahead)
      for (int r = 0; r < 8; ++r) prefetch_block(w + r * ldw, 8 * ldw + kb * 128);
    __m256 acc[MT];
    for (int m = 0; m < MT; ++m) acc[m] = _mm256_setzero_ps();
    for (int c0 = 0; c0 < 128; c0 += 8) {
      const std::uint8_t* p = w + kb * 128 + c0;
      __m128i r[8], col[4];
      for (int j = 0; j < 8; ++j) r[j] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j * ldw));
      transpose_bytes8x8(r, col);  // col[q]: columns c0 + 2q and c0 + 2q + 1
      for (int q = 0; q < 4; ++q) {
        const __m256 even = widen_codes8(col[q], code_bits);
        const __m256 odd = widen_codes8(_mm_unpackhi_epi64(col[q], col[q]), code_bits);
        const std::int64_t at = kb * 64 + c0 / 2 + q;
        for (int m = 0; m < MT; ++m) {
          acc[m] = _mm256_fmadd_ps(odd, _mm256_broadcast_ss(xo + m * ldxf + at), acc[m]);
          acc[m] = _mm256_fmadd_ps(even, _mm256_broadcast_ss(xe + m * ldxf + at), acc[m]);
        }
      }
    }
    for (int m = 0; m < MT; ++m) {
      const __m256 dots = _mm256_add_ps(acc[m], acc[m]);  // (exact: x came times 2^119, the codes times 2^-120)
      const __m256 scaled = opaque(_mm256_mul_ps(dots, _mm256_set1_ps(xs[m * ldxs + kb] * ws[kb])));
      _mm256_maskstore_ps(out + m * ldo, lanes, _mm256_add_ps(_mm256_maskload_ps(out + m * ldo, lanes), scaled));
    }
  }
}

/// GemmOps::e4m3_panel_rows: x converted to f32 times 2^119 (odd and even columns apart) 8 blocks
/// at a time, then 8 weight rows at a time against all M x rows at once (one kernel per M), a last
/// partial group copied per block into a zero-padded 8 x 128 tile.
DSV32_TARGET_AVX2 inline void e4m3_panel_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                              const std::uint32_t* xp, std::int64_t ldx, const float* xs,
                                              std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                              const float* ws, float* out, std::int64_t ldo) {
  using Kernel = void (*)(std::int64_t, const float*, const float*, std::int64_t, const float*, std::int64_t,
                          const std::uint8_t*, std::int64_t, const float*, int, float*, std::int64_t);
  static constexpr Kernel kernels[8] = {e4m3_panel8<1>, e4m3_panel8<2>, e4m3_panel8<3>, e4m3_panel8<4>,
                                        e4m3_panel8<5>, e4m3_panel8<6>, e4m3_panel8<7>, e4m3_panel8<8>};
  const Kernel kernel = kernels[M - 1];
  constexpr std::int64_t kChunk = 8, ldxf = 64 * kChunk;
  alignas(32) float xo[8 * ldxf], xe[8 * ldxf];
  const __m256i hi_half = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256 bias = _mm256_set1_ps(0x1p119f);
  for (std::int64_t c0 = kb0; c0 < kb1; c0 += kChunk) {
    const std::int64_t blocks = kb1 - c0 < kChunk ? kb1 - c0 : kChunk;
    for (int m = 0; m < M; ++m)
      for (std::int64_t i = 0; i < 64 * blocks; i += 8) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + m * ldx + 64 * c0 + i));
        _mm256_store_ps(xo + m * ldxf + i, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(v, hi_half)), bias));
        _mm256_store_ps(xe + m * ldxf + i, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), bias));
      }
    for (int g0 = 0; g0 < rows; g0 += 8) {
      const int valid = rows - g0 < 8 ? rows - g0 : 8;
      const std::uint8_t* wg = w + g0 * ldw + c0 * 128;
      if (valid == 8) {
        kernel(blocks, xo, xe, ldxf, xs + c0, ldxs, wg, ldw, ws + c0, valid, out + g0, ldo);
        continue;
      }
      alignas(32) std::uint8_t tile[8 * 128] = {};
      for (std::int64_t b = 0; b < blocks; ++b) {
        for (int r = 0; r < valid; ++r) std::memcpy(tile + 128 * r, wg + r * ldw + 128 * b, 128);
        kernel(1, xo + 64 * b, xe + 64 * b, ldxf, xs + c0 + b, ldxs, tile, 128, ws + c0 + b, valid, out + g0, ldo);
      }
    }
  }
}

/// e4m3_scaled_cols_mt's pass over kNv vectors of 8 columns from j0 (kFull: all 8 x kNv of them
/// inside the N columns, read by fixed 8-byte loads; otherwise `cnt` columns of each, by load_row).
/// The codes become f32 of value x 2^-8 (e4m3_f16_values8) and are multiplied by the block's scale
/// times 256 (exact: e4m3_scale_exact), so each weight is its dequantized value, as the AVX-512
/// kernel's. The full pass keeps its accumulators in registers; with the columns' counts known only
/// at run time GCC kept them in memory and copied the codes through the stack (one Zen 5 core forced
/// to AVX2, 128 heads of 128 x 512 codes, the same bits: 1 x row 2.1-3.3 -> 0.63-0.65 ms, 8 rows
/// 5.3 -> 1.8).
template <int MT, int kNv, bool kFull>
DSV32_TARGET_AVX2 __attribute__((always_inline)) inline void scaled_cols_pass(
    std::int64_t D, std::int64_t N, std::int64_t j0, const float* x, const std::uint8_t* w, std::int64_t ldw,
    const float* scale, float* out, std::int64_t ldo, const std::uint8_t* next, std::int64_t& ahead) {
  const std::int64_t ahead_end = next ? D * ldw : 0;
  int cnt[kNv];
  __m256 s[kNv];
  for (int v = 0; v < kNv; ++v) {
    const std::int64_t j = j0 + 8 * v;
    cnt[v] = kFull ? 8 : static_cast<int>(std::clamp<std::int64_t>(N - j, 0, 8));
    s[v] = _mm256_set1_ps(cnt[v] > 0 ? scale[j / 128] * (kFull ? 256.0f : 1.0f) : 0.0f);  // (load_row<2> has the 256)
  }
  __m256 acc[MT][kNv];
  for (int m = 0; m < MT; ++m)
    for (int v = 0; v < kNv; ++v) acc[m][v] = _mm256_setzero_ps();
  const std::uint8_t* wr = w + j0;
  for (std::int64_t d = 0; d < D; ++d, wr += ldw) {
    if (ahead < ahead_end) _mm_prefetch(reinterpret_cast<const char*>(next + ahead), _MM_HINT_T0), ahead += 64;
    __m256 wv[kNv];
    for (int v = 0; v < kNv; ++v) {
      if (kFull) {
        wv[v] = _mm256_mul_ps(e4m3_f16_values8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + 8 * v))), s[v]);
      } else {
        wv[v] = cnt[v] > 0 ? _mm256_mul_ps(load_row<2>(wr + 8 * v, 0, 0, 0, cnt[v]), s[v]) : _mm256_setzero_ps();
      }
    }
    for (int m = 0; m < MT; ++m) {
      const __m256 xm = _mm256_set1_ps(x[d * MT + m]);
      for (int v = 0; v < kNv; ++v) acc[m][v] = _mm256_fmadd_ps(wv[v], xm, acc[m][v]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int v = 0; v < kNv; ++v) {
      if (kFull) {
        _mm256_storeu_ps(out + m * ldo + j0 + 8 * v, acc[m][v]);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[m][v]);
        std::copy(tmp, tmp + cnt[v], out + m * ldo + j0 + 8 * v);
      }
    }
}

/// GemmOps::e4m3_scaled_cols for MT x rows: the AVX-512 kernel's arithmetic on 8-lane vectors, NV
/// vectors of 8 columns at a time (at most 8 accumulators), each row's codes widened exactly and
/// times their column block's scale (exact: e4m3_scale_exact), one FMA per product; the last
/// partial pass by the general form of scaled_cols_pass.
template <int MT>
DSV32_TARGET_AVX2 void e4m3_scaled_cols_mt(std::int64_t D, std::int64_t N, const float* x, const std::uint8_t* w,
                                           std::int64_t ldw, const float* scale, float* out, std::int64_t ldo,
                                           const std::uint8_t* next) {
  constexpr int NV = MT > 4 ? 1 : MT > 2 ? 2 : 4;
  std::int64_t ahead = 0, j0 = 0;
  for (; j0 + 8 * NV <= N; j0 += 8 * NV)
    scaled_cols_pass<MT, NV, true>(D, N, j0, x, w, ldw, scale, out, ldo, next, ahead);
  if (j0 < N) scaled_cols_pass<MT, NV, false>(D, N, j0, x, w, ldw, scale, out, ldo, next, ahead);
}

/// GemmOps::e4m3_scaled_rows for MT x rows and n <= 8 weight rows (lanes over the rows): per 8
/// columns the rows' codes widened exactly, times their block's scale, transposed (transpose8) and
/// multiplied into the MT accumulators in increasing column order, x broadcast from memory.
template <int MT>
DSV32_TARGET_AVX2 void e4m3_scaled_rows8(std::int64_t K, const float* x, const std::uint8_t* w, std::int64_t ldw,
                                         const float* scale, int n, float* out, std::int64_t ldo) {
  __m256 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm256_setzero_ps();
  for (std::int64_t k0 = 0; k0 < K; k0 += 8) {
    const __m256 s = _mm256_set1_ps(scale[k0 / 128]);
    __m256 r[8];
    for (int j = 0; j < 8; ++j) r[j] = j < n ? _mm256_mul_ps(load_row<2>(w, ldw, j, static_cast<int>(k0), 8), s) : _mm256_setzero_ps();
    transpose8(r);
    for (int c = 0; c < 8; ++c)
      for (int m = 0; m < MT; ++m) acc[m] = _mm256_fmadd_ps(r[c], _mm256_set1_ps(x[(k0 + c) * MT + m]), acc[m]);
  }
  for (int m = 0; m < MT; ++m) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, acc[m]);
    std::copy(tmp, tmp + n, out + m * ldo);
  }
}

/// GemmOps::e4m3_scaled_rows: e4m3_scaled_rows8 for M rows, 8 weight rows at a time (`next` is not
/// used: the rows' transposes, not their reads, bound this kernel).
DSV32_TARGET_AVX2 inline void e4m3_scaled_rows(int M, int n, std::int64_t K, const float* x, const std::uint8_t* w,
                                               std::int64_t ldw, const float* scale, float* out, std::int64_t ldo,
                                               const std::uint8_t* /*next*/) {
  using Kernel = void (*)(std::int64_t, const float*, const std::uint8_t*, std::int64_t, const float*, int, float*,
                          std::int64_t);
  static constexpr Kernel kernels[8] = {e4m3_scaled_rows8<1>, e4m3_scaled_rows8<2>, e4m3_scaled_rows8<3>,
                                        e4m3_scaled_rows8<4>, e4m3_scaled_rows8<5>, e4m3_scaled_rows8<6>,
                                        e4m3_scaled_rows8<7>, e4m3_scaled_rows8<8>};
  for (int r0 = 0; r0 < n; r0 += 8)
    kernels[M - 1](K, x, w + r0 * ldw, ldw, scale, n - r0 < 8 ? n - r0 : 8, out + r0, ldo);
}

#define DSV32_TARGET_WIDTH DSV32_TARGET_AVX2  // the target of every function in gemm_x86-inl.hpp
#include "dsv32/backend/cpu/simd/gemm_x86-inl.hpp"  // IWYU pragma: keep
#undef DSV32_TARGET_WIDTH

/// GemmOps::e4m3_rows: one x row (decode) in e4m3_row_blocks, x put in its order once per call (in
/// this thread's scratch: 1 KB per block of [kb0, kb1), at most 256 blocks as gemm.hpp calls it), 8
/// weight rows at a time; more x rows as E4m3RowsDriver takes them.
DSV32_TARGET_AVX2 inline void e4m3_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1, const double* xd,
                                        std::int64_t ldx, const float* xs, std::int64_t ldxs, const std::uint8_t* w,
                                        std::int64_t ldw, const float* ws, float* out, std::int64_t ldo) {
  if (M != 1) {
    E4m3RowsDriver<E4m3RowsKernel>::rows(M, rows, kb0, kb1, xd, ldx, xs, ldxs, w, ldw, ws, out, ldo, kPanelPrefetchMaxK);
    return;
  }
  thread_local std::vector<double> scratch;
  const std::int64_t n = 128 * (kb1 - kb0);
  if (scratch.size() < static_cast<std::size_t>(n)) scratch.resize(static_cast<std::size_t>(n));
  lane_pair_order(xd + 128 * kb0, n, scratch.data());
  const std::int64_t ahead = ldw <= kPanelPrefetchMaxK ? 8 * ldw : kLongRowAhead;
  for (int r0 = 0; r0 < rows; r0 += 8) {
    const int valid = rows - r0 < 8 ? rows - r0 : 8;
    const std::uint8_t* wr[8];
    for (int r = 0; r < 8; ++r) wr[r] = w + (r0 + (r < valid ? r : 0)) * ldw;  // a stand-in row past the last
    e4m3_row_blocks(kb0, kb1, scratch.data(), xs, wr, ws, valid, out + r0, ahead);
  }
}

#include "dsv32/backend/cpu/simd/table_entries-inl.hpp"  // IWYU pragma: keep

}  // namespace dsv32::cpu::simd::avx2

namespace dsv32::cpu::simd {

/// \brief The AVX2 table (only call where detected_isa() is at least Isa::avx2).
inline GemmOps avx2_table() {
  GemmOps o;
  o.isa = Isa::avx2;
  avx2::common_entries(o);
  o.bf16_rows = avx2::bf16_rows;
  o.e4m3_pair_rows = avx2::e4m3_pair_rows;
  o.e4m3_panel_rows = avx2::e4m3_panel_rows;
  o.e4m3_scaled_cols = avx2::e4m3_scaled_cols;
  o.e4m3_scaled_rows = avx2::e4m3_scaled_rows;
  return o;
}

}  // namespace dsv32::cpu::simd

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // DSV32_CPU_X86
