/// \file
/// \brief CPU: the portable GemmOps (plain C++): the fallback on any CPU, and the definition the
///        vectorized tables are tested against.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/core/numeric.hpp"

/// Turns off GCC's contraction of a * b + c into an FMA inside one function (GCC fuses across
/// statements by default whenever the target has FMA, which would change the rounding; Clang fuses
/// only within one expression, which the code below never writes).
#if defined(__GNUC__) && !defined(__clang__)
#define DSV32_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define DSV32_NO_FP_CONTRACT
#endif

namespace dsv32::cpu::simd {

/// \brief E4M3 code -> its value as the products read weights: exact, with the NaN codes
///        0x7F / 0xFF read as +-480 (what the vector conversions give).
inline constexpr std::array<float, 256> kE4m3Weight = [] {
  std::array<float, 256> t{};
  for (unsigned c = 0; c < 256; ++c) {
    const float sign = (c & 0x80u) ? -1.0f : 1.0f;
    t[c] = (c & 0x7Fu) == 0x7Fu ? sign * 480.0f : ::dsv32::decode_e4m3(static_cast<std::uint8_t>(c));
  }
  return t;
}();

/// \cond DSV32_KERNEL_INTERNALS (the entries of the table; GemmOps documents them)
namespace portable {

/// Tile sizes (GemmOps::nr, mr, nr64, mr64).
inline constexpr int kMr = 4, kNr = 16, kMr64 = 4, kNr64 = 8;

inline void pack_bf16(const std::uint16_t* w, std::int64_t ldw, int n, int kc, float* out) {
  constexpr int nr = 16;
  for (int k = 0; k < kc; ++k)
    for (int j = 0; j < nr; ++j)
      out[k * nr + j] = j < n ? std::bit_cast<float>(static_cast<std::uint32_t>(w[j * ldw + k]) << 16) : 0.0f;
}

inline void pack_f32(const float* w, std::int64_t ldw, int n, int kc, float* out) {
  constexpr int nr = 16;
  for (int k = 0; k < kc; ++k)
    for (int j = 0; j < nr; ++j) out[k * nr + j] = j < n ? w[j * ldw + k] : 0.0f;
}

inline void pack_e4m3(const std::uint8_t* w, std::int64_t ldw, int n, int kc, float* out) {
  constexpr int nr = 16;
  for (int k = 0; k < kc; ++k)
    for (int j = 0; j < nr; ++j) out[k * nr + j] = j < n ? kE4m3Weight[w[j * ldw + k]] : 0.0f;
}

inline void pack_e4m3_f64(const std::uint8_t* w, std::int64_t ldw, int n, int kc, double* out) {
  constexpr int nr = 8;
  for (int k = 0; k < kc; ++k)
    for (int j = 0; j < nr; ++j) out[k * nr + j] = j < n ? kE4m3Weight[w[j * ldw + k]] : 0.0;
}

/// micro_exact_products' loops: k in increasing order or, kPairSwap, in the FP8 panel order
/// (k = 1, 0, 3, 2, ...: each column pair's odd column first).
template <bool kPairSwap = false>
void micro_exact_sums(int mr, int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                      std::int64_t ldc, bool accumulate) {
  constexpr int nr = 16;
  if (mr > 4) {
    for (int i = 0; i < mr; i += 4)
      micro_exact_sums<kPairSwap>(mr - i < 4 ? mr - i : 4, kc, a + i * lda, lda, b, ldb, c + i * ldc, ldc, accumulate);
    return;
  }
  float acc[4][nr];
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
  for (int kk = 0; kk < kc; ++kk) {
    const int k = kPairSwap ? kk ^ 1 : kk;
    for (int i = 0; i < mr; ++i) {
      const float ai = a[i * lda + k];
      for (int j = 0; j < nr; ++j) acc[i][j] += ai * b[k * ldb + j];  // exact product: fusing is harmless
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = acc[i][j];
}

inline void micro_exact_products(int mr, int kc, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                                 float* c, std::int64_t ldc, bool accumulate) {
  micro_exact_sums(mr, kc, a, lda, b, ldb, c, ldc, accumulate);
}

DSV32_NO_FP_CONTRACT inline void micro_rounded_products(int mr, int kc, const float* a, std::int64_t lda,
                                                        const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                                                        bool accumulate) {
  constexpr int nr = 16;
  if (mr > 4) {
    for (int i = 0; i < mr; i += 4)
      micro_rounded_products(mr - i < 4 ? mr - i : 4, kc, a + i * lda, lda, b, ldb, c + i * ldc, ldc, accumulate);
    return;
  }
  float acc[4][nr];
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
  for (int k = 0; k < kc; ++k)
    for (int i = 0; i < mr; ++i) {
      const float ai = a[i * lda + k];
      for (int j = 0; j < nr; ++j) {
        const float p = ai * b[k * ldb + j];
        acc[i][j] += p;
      }
    }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = acc[i][j];
}

inline void fp8_value_dots(int mr, const float* a, std::int64_t lda, const float* b, float* dot, std::int64_t ldd) {
  micro_exact_sums<true>(mr, 128, a, lda, b, 16, dot, ldd, false);
}

inline void micro_f64(int mr, int kc, const double* a, std::int64_t lda, const double* b, double* c,
                      std::int64_t ldc) {
  constexpr int nr = 8;
  if (mr > 4) {
    for (int i = 0; i < mr; i += 4) micro_f64(mr - i < 4 ? mr - i : 4, kc, a + i * lda, lda, b, c + i * ldc, ldc);
    return;
  }
  double acc[4][nr] = {};
  for (int k = 0; k < kc; ++k)
    for (int i = 0; i < mr; ++i) {
      const double ai = a[i * lda + k];
      for (int j = 0; j < nr; ++j) acc[i][j] += ai * b[k * nr + j];
    }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = acc[i][j];
}

inline void widen_bf16(const std::uint16_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16);
}
inline void widen_e4m3(const std::uint8_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = kE4m3Decode[x[i]];
}
inline float amax_bf16(const std::uint16_t* x, std::int64_t n) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i)
    amax = std::max(amax, std::fabs(std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16)));
  return amax;
}
inline void quantize_e4m3(const std::uint16_t* x, std::int64_t n, float s, std::uint8_t* out) {
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = encode_e4m3(std::clamp(std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16) / s, -kE4m3Max, kE4m3Max));
}
inline void widen_e4m3_f64(const std::uint8_t* x, std::int64_t n, double* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = kE4m3Decode[x[i]];
}

inline void dequant_e4m3(const std::uint8_t* w, std::int64_t n, const float* block_scale, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = round_bf16(kE4m3Weight[w[i]] * block_scale[i / 128]);
}

DSV32_NO_FP_CONTRACT inline void epilogue_f64(int mr, int n, const double* dot, std::int64_t ldd, const float* scale,
                                              float* c, std::int64_t ldc) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < n; ++j) {
      const float p = static_cast<float>(dot[i * ldd + j]) * scale[i];
      c[i * ldc + j] += p;
    }
}

DSV32_NO_FP_CONTRACT inline void epilogue_f32(int mr, int n, const float* dot, std::int64_t ldd, const float* scale,
                                              float* c, std::int64_t ldc) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < n; ++j) {
      const float p = dot[i * ldd + j] * scale[i];
      c[i * ldc + j] += p;
    }
}

DSV32_NO_FP_CONTRACT inline void e4m3_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1, const double* xd,
                                           std::int64_t ldx, const float* xs, std::int64_t ldxs,
                                           const std::uint8_t* w, std::int64_t ldw, const float* ws, float* out,
                                           std::int64_t ldo) {
  for (int r = 0; r < rows; ++r)
    for (std::int64_t kb = kb0; kb < kb1; ++kb) {
      const std::uint8_t* wb = w + r * ldw + kb * 128;
      for (int m = 0; m < M; ++m) {
        const double* xb = xd + m * ldx + kb * 128;
        double d = 0.0;  // exact: every product and partial sum is a multiple of 2^(512-18) below 2^(512+25)
        for (int k = 0; k < 128; ++k) d += xb[k] * static_cast<double>(kE4m3Weight[wb[k]]);
        const float p = static_cast<float>(d * 0x1p-512) * (xs[m * ldxs + kb] * ws[kb]);
        out[m * ldo + r] += p;
      }
    }
}

DSV32_NO_FP_CONTRACT inline void e4m3_pair_rows(int M, int rows, std::int64_t kb0, std::int64_t kb1,
                                                const std::uint32_t* xp, std::int64_t ldx, const float* xs,
                                                std::int64_t ldxs, const std::uint8_t* w, std::int64_t ldw,
                                                const float* ws, float* out, std::int64_t ldo) {
  auto odd = [](std::uint32_t d) { return std::bit_cast<float>(d & 0xFFFF0000u); };
  auto even = [](std::uint32_t d) { return std::bit_cast<float>(d << 16); };
  for (int r = 0; r < rows; ++r)
    for (std::int64_t kb = kb0; kb < kb1; ++kb) {
      const std::uint8_t* wb = w + r * ldw + kb * 128;
      for (int m = 0; m < M; ++m) {
        const std::uint32_t* xb = xp + m * ldx + kb * 64;
        float l[16] = {};
        for (int s = 0; s < 64; ++s) {
          const int p = row_order_pair(s);
          const float po = odd(xb[s]) * kE4m3Weight[wb[2 * p + 1]];  // exact products
          const float pe = even(xb[s]) * kE4m3Weight[wb[2 * p]];
          l[s & 15] += po;
          l[s & 15] += pe;
        }
        float h8[8], h4[4];
        for (int i = 0; i < 8; ++i) h8[i] = l[i] + l[i + 8];
        for (int i = 0; i < 4; ++i) h4[i] = h8[i] + h8[i + 4];
        const float dot = (h4[0] + h4[2]) + (h4[1] + h4[3]);
        const float p = dot * (xs[m * ldxs + kb] * ws[kb]);
        out[m * ldo + r] += p;
      }
    }
}

/// micro_f64 over one 128-column block, then epilogue_f64 (the two calls the other tables fuse).
inline void micro_f64_scaled(int mr, int n, const double* a, std::int64_t lda, const double* b, const float* scale,
                             float* c, std::int64_t ldc) {
  double dot[16 * kNr64];  // the drivers pass mr <= 4, tests up to 13
  micro_f64(mr, 128, a, lda, b, dot, kNr64);
  epilogue_f64(mr, n, dot, kNr64, scale, c, ldc);
}

/// fp8_value_dots, then epilogue_f32.
inline void fp8_value_dots_scaled(int mr, int n, const float* a, std::int64_t lda, const float* b, const float* scale,
                                  float* c, std::int64_t ldc) {
  float dot[16 * kNr];  // the drivers pass mr <= 4, tests up to 13
  fp8_value_dots(mr, a, lda, b, dot, kNr);
  epilogue_f32(mr, n, dot, kNr, scale, c, ldc);
}

#include "dsv32/backend/cpu/simd/table_entries-inl.hpp"  // IWYU pragma: keep

}  // namespace portable
/// \endcond

/// \brief The portable table.
inline GemmOps portable_table() {
  GemmOps o;
  o.isa = Isa::portable;
  portable::common_entries(o);
  o.e4m3_pair_rows = portable::e4m3_pair_rows;
  return o;
}

}  // namespace dsv32::cpu::simd
