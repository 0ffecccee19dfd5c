/// \file
/// \brief CPU: the model's matrix products — bf16 and f32 weights, and FP8 E4M3 weights with 128x128
///        block scales against 1x128-quantized activations — on register-blocked kernels chosen at
///        run time for the CPU (AVX-512, AVX2 + FMA, portable; see simd/).
///
/// Weights stay in their stored dtype and are widened in registers or in a small per-thread panel,
/// so no wholesale wide copy of a weight ever exists. Two shapes of work:
/// - few activation rows (decode): weight rows are streamed once per call, every thread on its own
///   rows of the same matrix; FP8 rows are turned into doubles eight codes at a time by bit shifts
///   (exact mode), or into bf16 pairs 64 codes at a time by byte lookups for VDPBF16PS (fast mode);
/// - many rows (prefill): a weight panel is packed (widened, transposed) once per 128 columns and
///   reused by every row tile of the activations, BLIS-style, every thread on its own panels; the
///   fast FP8 mode packs f32 values for FMAs, or bf16 pairs for VDPBF16PS where that instruction
///   outruns the FMAs (simd::cpu_prefers_fma_dots()).
///
/// Arithmetic (identical on every ISA path, see simd/gemm_ops.hpp): bf16/f32 weights sum each
/// output in f32 in increasing k; FP8 block dots are exact by default (Fp8Accumulation::exact) and
/// f32 sums in the optional fast mode; the block results are combined as the reference does.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "dsv32/backend/cpu/kernel_helpers.hpp"
#include "dsv32/backend/cpu/kernel_plan.hpp"
#include "dsv32/backend/cpu/parallel_for.hpp"
#include "dsv32/backend/cpu/quant.hpp"
#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/isa.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

namespace cpu {

/// \brief Rows [r0, r0 + n) of a weight as f32: exact for BF16 and F32; for F8_E4M3 the reference's
///        dequantization bf16(e4m3 * block scale) (the NaN codes 0x7F / 0xFF reading as +-480, as
///        in the products).
/// \param w   the weight ([out, in])
/// \param r0  first row
/// \param n   rows, with r0 + n <= w.out
/// \param out [n, w.in] f32
/// \param k   the kernels to run on
/// \throws Error(unsupported) for a dtype other than BF16, F32 or F8_E4M3
inline void weight_rows_f32(const WeightView<>& w, std::int64_t r0, std::int64_t n, float* out,
                            const CpuKernels& k = default_kernels()) {
  const std::int64_t K = w.in;
  switch (w.dtype) {
    case DType::F32: {
      const float* src = static_cast<const float*>(w.data) + r0 * K;
      std::copy(src, src + n * K, out);
      break;
    }
    case DType::BF16:
      k.ops().widen_bf16(static_cast<const std::uint16_t*>(w.data) + r0 * K, n * K, out);
      break;
    case DType::F8_E4M3: {
      const simd::GemmOps& ops = k.ops();
      const auto* src = static_cast<const std::uint8_t*>(w.data);
      const std::int64_t sc = w.scale_cols();
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t row = r0 + r;
        ops.dequant_e4m3(src + row * K, K, w.scale + (row / kBlockSize) * sc, out + r * K);
      }
      break;
    }
    default:
      fail(ErrorKind::unsupported, "weight dtype ", dtype_name(w.dtype), " in a matrix product");
  }
}

namespace detail {

inline void check_linear_shapes(MatrixView<const bf16> x, const WeightView<>& w, std::int64_t y_rows,
                                std::int64_t y_cols) {
  DSV32_CHECK(x.cols == w.in && y_cols == w.out && y_rows == x.rows, invalid_argument, "linear: input [", x.rows,
              ", ", x.cols, "] and output [", y_rows, ", ", y_cols, "] do not fit weight [", w.out, ", ", w.in, "]");
}

/// Columns of x (and of a weight) per packed panel: one FP8 scale block.
inline constexpr int kPanelK = 128;

struct GemmScratchTag;
/// The GEMM drivers' scratch arrays (thread_scratch), slots 0-5.
template <class T>
T* gemm_scratch(int slot, std::size_t n) {
  return thread_scratch<T, GemmScratchTag>(slot, n);
}

/// Rows per task so that [0, n) gives about want_tasks tasks: a multiple of align, at most max_rows.
inline std::int64_t chunk_rows(std::int64_t n, std::int64_t want_tasks, std::int64_t align, std::int64_t max_rows) {
  std::int64_t rows = (n + want_tasks - 1) / want_tasks;
  rows = (rows + align - 1) / align * align;
  return std::clamp<std::int64_t>(rows, align, max_rows);
}

/// y = x W^T for a BF16 or F32 weight on the path plan_dense() names; store(m0, rows, n0, cols,
/// tile, ld) receives f32 tiles.
template <class Store>
void dense_product(const CpuKernels& kernels, MatrixView<const bf16> x, const WeightView<>& w, Store&& store) {
  const simd::GemmOps& ops = kernels.ops();
  const std::int64_t M = x.rows, N = w.out, K = w.in;
  const DensePath path = plan_dense(kernels.features, w.dtype, M);
  const int nr = ops.nr, mr = ops.mr;
  const auto micro = w.dtype == DType::F32 ? ops.micro_rounded_products : ops.micro_exact_products;
  auto pack_b = [&](std::int64_t row, int n, std::int64_t k0, int kc, float* out) {
    if (w.dtype == DType::F32)
      ops.pack_f32(static_cast<const float*>(w.data) + row * K + k0, K, n, kc, out);
    else
      ops.pack_bf16(reinterpret_cast<const std::uint16_t*>(w.data) + row * K + k0, K, n, kc, out);
  };
  // rows [m0, m0 + rows) of x, columns [k0, k0 + kc), as f32 rows kPanelK apart
  auto pack_a = [&](std::int64_t m0, std::int64_t rows, std::int64_t k0, int kc, float* out) {
    for (std::int64_t i = 0; i < rows; ++i)
      ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(x.row(m0 + i) + k0), kc, out + i * kPanelK);
  };
  const std::int64_t chunks = (K + kPanelK - 1) / kPanelK;
  if (path == DensePath::rows_bf16 || path == DensePath::rows_bf16_pairs) {
    // Decode on bf16 weights: rows streamed once, transposed in registers, 16 at a time.
    const std::int64_t kpad = (K + 31) / 32 * 32;
    float* a = gemm_scratch<float>(0, static_cast<std::size_t>(M * kpad));
    for (std::int64_t i = 0; i < M; ++i) {
      ops.widen_bf16(reinterpret_cast<const std::uint16_t*>(x.row(i)), K, a + i * kpad);
      std::fill(a + i * kpad + K, a + (i + 1) * kpad, 0.0f);
    }
    // VDPBF16PS where the CPU has it and x allows (GemmOps::bf16_pair_rows): x as swapped bf16 pairs
    // and the least biased exponent the weights need for the instruction's sums to be bf16_rows'
    const std::uint32_t* xp = nullptr;
    std::uint16_t limit = 0;
    if (path == DensePath::rows_bf16_pairs) {
      int least = 255;  // biased exponent of x's smallest nonzero magnitude; 0: a subnormal
      std::uint32_t* pairs = gemm_scratch<std::uint32_t>(2, static_cast<std::size_t>(M * kpad / 2));
      for (std::int64_t i = 0; i < M; ++i) {
        const auto* xb = reinterpret_cast<const std::uint16_t*>(x.row(i));
        for (std::int64_t k = 0; k < K; ++k)
          if ((xb[k] & 0x7FFF) != 0) least = std::min(least, (xb[k] >> 7) & 0xFF);
        for (std::int64_t p = 0; p < kpad / 2; ++p) {
          const std::uint32_t even = 2 * p < K ? xb[2 * p] : 0, odd = 2 * p + 1 < K ? xb[2 * p + 1] : 0;
          pairs[i * (kpad / 2) + p] = odd | (even << 16);
        }
      }
      if (least > 0) xp = pairs, limit = static_cast<std::uint16_t>(128 * std::max(1, 142 - least) - 1);
    }
    const std::int64_t rows = chunk_rows(N, 8 * num_threads(), 16, 256);
    const auto* wb = static_cast<const std::uint16_t*>(w.data);
    parallel_for((N + rows - 1) / rows, (M + 1) * rows * K, [&](std::int64_t t) {
      const std::int64_t n0 = t * rows, cols = std::min(rows, N - n0);
      float* cbuf = gemm_scratch<float>(2, static_cast<std::size_t>(M * rows));
      for (std::int64_t p = 0; p < cols; p += 16) {
        const int n = static_cast<int>(std::min<std::int64_t>(16, cols - p));
        if (xp)
          ops.bf16_pair_rows(static_cast<int>(M), n, K, a, kpad, xp, kpad / 2, limit, wb + (n0 + p) * K, K, cbuf + p,
                             rows);
        else
          ops.bf16_rows(static_cast<int>(M), n, K, a, kpad, wb + (n0 + p) * K, K, cbuf + p, rows);
      }
      store(0, M, n0, cols, cbuf, rows);
    });
    return;
  }
  if (path == DensePath::rows_packed) {
    // Decode: every weight row is read once; a thread streams whole rows, nr at a time.
    float* a = gemm_scratch<float>(0, static_cast<std::size_t>(M * chunks * kPanelK));
    for (std::int64_t c = 0; c < chunks; ++c) {
      const int kc = static_cast<int>(std::min<std::int64_t>(kPanelK, K - c * kPanelK));
      pack_a(0, M, c * kPanelK, kc, a + c * kPanelK * M);
    }
    const std::int64_t rows = chunk_rows(N, 8 * num_threads(), nr, 4 * nr);
    parallel_for((N + rows - 1) / rows, (M + 1) * rows * K, [&](std::int64_t t) {
      const std::int64_t n0 = t * rows, cols = std::min(rows, N - n0);
      float* bp = gemm_scratch<float>(1, static_cast<std::size_t>(kPanelK * nr));
      float* cbuf = gemm_scratch<float>(2, static_cast<std::size_t>(M * rows));
      for (std::int64_t p = 0; p < cols; p += nr) {
        const int n = static_cast<int>(std::min<std::int64_t>(nr, cols - p));
        for (std::int64_t c = 0; c < chunks; ++c) {
          const int kc = static_cast<int>(std::min<std::int64_t>(kPanelK, K - c * kPanelK));
          pack_b(n0 + p, n, c * kPanelK, kc, bp);
          micro(static_cast<int>(M), kc, a + c * kPanelK * M, kPanelK, bp, nr, cbuf + p, rows, c > 0);
        }
      }
      store(0, M, n0, cols, cbuf, rows);
    });
    return;
  }
  // Prefill: tasks of (mc x rows) x (nc weight rows); each packs its weight panel once per 128
  // columns and runs every row tile of x against it.
  const std::int64_t nc = 4 * nr, mc = std::min<std::int64_t>(M, 16 * mr);
  const std::int64_t tm = (M + mc - 1) / mc, tn = (N + nc - 1) / nc;
  parallel_for(tm * tn, mc * nc * K, [&](std::int64_t t) {
    const std::int64_t m0 = (t % tm) * mc, n0 = (t / tm) * nc;
    const std::int64_t rows = std::min(mc, M - m0), cols = std::min(nc, N - n0);
    float* bp = gemm_scratch<float>(1, static_cast<std::size_t>(kPanelK * nc));
    float* ap = gemm_scratch<float>(3, static_cast<std::size_t>(kPanelK * mc));
    float* cbuf = gemm_scratch<float>(2, static_cast<std::size_t>(mc * nc));
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t k0 = c * kPanelK;
      const int kc = static_cast<int>(std::min<std::int64_t>(kPanelK, K - k0));
      for (std::int64_t p = 0; p < cols; p += nr)
        pack_b(n0 + p, static_cast<int>(std::min<std::int64_t>(nr, cols - p)), k0, kc, bp + p * kPanelK);
      pack_a(m0, rows, k0, kc, ap);
      for (std::int64_t p = 0; p < cols; p += nr)
        for (std::int64_t i = 0; i < rows; i += mr)
          micro(static_cast<int>(std::min<std::int64_t>(mr, rows - i)), kc, ap + i * kPanelK, kPanelK,
                bp + p * kPanelK, nr, cbuf + i * nc + p, nc, c > 0);
    }
    store(m0, rows, n0, cols, cbuf, nc);
  });
}

/// out[p * width + j] = bf16 bits of f[2p][j] (low half) and f[2p + 1][j] (high half), for p < pairs and
/// j < width (f is [2 pairs][width]); the f32 values must be exact in bf16 (E4M3 values are), so the
/// bits are cut, not rounded.
inline void bf16_pairs(const float* f, int pairs, int width, std::uint32_t* out) {
  for (int p = 0; p < pairs; ++p) {
    const float* even = f + 2 * p * width;
    const float* odd = even + width;
    for (int j = 0; j < width; ++j)
      out[p * width + j] = (std::bit_cast<std::uint32_t>(odd[j]) & 0xFFFF0000u) | (std::bit_cast<std::uint32_t>(even[j]) >> 16);
  }
}

/// Two E4M3 codes as one dword of bf16 values (exact): `even`'s in the low half, `odd`'s in the high.
inline std::uint32_t e4m3_bf16_pair(std::uint8_t even, std::uint8_t odd) {
  return (std::bit_cast<std::uint32_t>(kE4m3Decode[odd]) & 0xFFFF0000u) | (std::bit_cast<std::uint32_t>(kE4m3Decode[even]) >> 16);
}

/// y = dequant(xq) dequant(W)^T for an F8_E4M3 weight: per 128-wide block the dot of E4M3 values
/// (exact, or f32 in the fast mode in VDPBF16PS's order, simd/gemm_ops.hpp), rounded to f32, times xs[m, kb] * w_scale[n / 128, kb], summed
/// over the blocks in increasing k in f32 — the reference's arithmetic, on the path plan_fp8() names
/// for the kernels' features and FP8 mode. store() as dense_product().
template <class Store>
void fp8_product(const CpuKernels& kernels, const std::uint8_t* xq, const float* xs, std::int64_t M,
                 const WeightView<>& w, Store&& store) {
  const simd::GemmOps& ops = kernels.ops();
  const std::int64_t N = w.out, K = w.in, KB = K / kPanelK, sc = w.scale_cols();
  const auto* wq = static_cast<const std::uint8_t*>(w.data);
  const Fp8Path path = plan_fp8(kernels.features, kernels.fp8, M);
  const bool panel_order = path == Fp8Path::panel_rows_pairs || path == Fp8Path::panel_rows_f32;
  const bool panel_f32 = path == Fp8Path::panel_rows_f32;
  if (path == Fp8Path::tiles_rows || path == Fp8Path::panel_rows_f64 || path == Fp8Path::rows_f64 ||
      path == Fp8Path::row_order_pairs || panel_order) {
    // Decode: weight rows streamed once. Exact mode: exact block dots against x * 2^512 in double,
    // or with lanes over the weight rows (from kE4m3PanelF64MinRows rows), or on AMX-INT8 tiles (x
    // as plane tiles, made once per call): the same bits, each block's dot is exact. Fast mode: f32
    // block dots in the row order (simd/gemm_ops.hpp), x as bf16 pairs in slot order, or in the
    // panel order, x as bf16 pairs in column order or as f32 values, rows side by side.
    const bool exact = kernels.fp8 == Fp8Accumulation::exact;
    const bool exact_panel = path == Fp8Path::panel_rows_f64 || path == Fp8Path::tiles_rows;
    const bool exact_tiles = path == Fp8Path::tiles_rows;
    std::int8_t* xt = nullptr;
    double* xd = nullptr;
    std::uint32_t* xp = nullptr;
    float* xf = nullptr;
    // x's exact values, the M rows of each column side by side (the lanes-over-rows kernels' layout)
    auto x_value = [&](std::int64_t m, std::int64_t k) { return kE4m3Decode[xq[m * K + k]]; };
    if (exact_tiles) {
      xt = gemm_scratch<std::int8_t>(0, static_cast<std::size_t>(simd::e4m3_plane_tile_bytes(static_cast<int>(M), K)));
      ops.e4m3_plane_tiles(xq, static_cast<int>(M), K, xt);
    } else if (exact_panel) {
      xd = gemm_scratch<double>(0, static_cast<std::size_t>(M * K));
      side_by_side(M, K, x_value, xd);
    } else if (exact) {
      xd = gemm_scratch<double>(0, static_cast<std::size_t>(M * K));
      ops.widen_e4m3_f64(xq, M * K, xd);
      for (std::int64_t i = 0; i < M * K; ++i) xd[i] *= simd::kE4m3RowsXScale;
    } else if (panel_f32) {
      xf = gemm_scratch<float>(0, static_cast<std::size_t>(M * K));
      side_by_side(M, K, x_value, xf);
    } else {
      xp = gemm_scratch<std::uint32_t>(2, static_cast<std::size_t>(M * K / 2));
      for (std::int64_t i = 0; i < M * KB; ++i)
        for (int s = 0; s < 64; ++s) {
          const std::uint8_t* pair = xq + i * kPanelK + 2 * (panel_order ? s : simd::row_order_pair(s));
          xp[i * 64 + s] = e4m3_bf16_pair(pair[0], pair[1]);
        }
    }
    std::int64_t rows = 64;  // a power of two, so that a task never straddles two 128-row scale blocks
    while (rows > 8 && (N + rows - 1) / rows < 8 * num_threads()) rows /= 2;
    // x blocks of one pass stay in L2 (the panel-order kernels take all of x's rows against each
    // weight group in one pass: 8 rows of x as pairs, 2 K bytes each, fit in L2 whole; as doubles,
    // 8 K bytes each, up to 1.2 MB at the slice's widest K, 18432: within a 2 MB L2)
    const std::int64_t kb_step = panel_order || exact_panel ? KB : std::max<std::int64_t>(1, 256 / M);
    parallel_for((N + rows - 1) / rows, (M + 1) * rows * K, [&](std::int64_t t) {
      const std::int64_t n0 = t * rows, cols = std::min(rows, N - n0);
      float* out = gemm_scratch<float>(2, static_cast<std::size_t>(M * rows));
      std::fill(out, out + M * rows, 0.0f);
      const float* ws = w.scale + (n0 / kBlockSize) * sc;
      for (std::int64_t kb = 0; kb < KB; kb += kb_step) {
        const std::int64_t kb1 = std::min(KB, kb + kb_step);
        if (exact_tiles)
          ops.e4m3_tiles_rows(static_cast<int>(M), static_cast<int>(cols), kb, kb1, xt, xs, KB, wq + n0 * K, K, ws, out,
                              rows);
        else if (exact_panel)
          ops.e4m3_panel_rows_f64(static_cast<int>(M), static_cast<int>(cols), kb, kb1, xd, xs, KB, wq + n0 * K, K,
                                  ws, out, rows);
        else if (exact)
          ops.e4m3_rows(static_cast<int>(M), static_cast<int>(cols), kb, kb1, xd, K, xs, KB, wq + n0 * K, K, ws, out,
                        rows);
        else if (panel_f32)
          ops.e4m3_panel_rows_f32(static_cast<int>(M), static_cast<int>(cols), kb, kb1, xf, xs, KB, wq + n0 * K, K, ws,
                                  out, rows);
        else if (panel_order)
          ops.e4m3_panel_rows(static_cast<int>(M), static_cast<int>(cols), kb, kb1, xp, K / 2, xs, KB, wq + n0 * K, K,
                              ws, out, rows);
        else
          ops.e4m3_pair_rows(static_cast<int>(M), static_cast<int>(cols), kb, kb1, xp, K / 2, xs, KB, wq + n0 * K, K,
                             ws, out, rows);
      }
      store(0, M, n0, cols, out, rows);
    });
    return;
  }
  // Prefill (and the fast mode's products of 5 to 8 rows on a level without a streamed kernel):
  // tasks of (mc x rows) x (nc weight rows, whole 128-row scale blocks); per 128 columns
  // the weight panel is packed once (f64 exact values; in the fast mode f32 values, or bf16 pairs
  // where the table has VDPBF16PS dots) and every row tile of x runs against it. For the pair dots
  // x becomes bf16 pairs once per call (in chunks of about 128 mr rows, which bounds that scratch
  // at ~128 mr x K x 2 bytes), not once per weight tile; otherwise each row tile is widened just
  // before it runs (mr x 128 values, in L1).
  const bool exact = path == Fp8Path::panels_f64 || path == Fp8Path::tiles_gemm;
  const bool pairs = path == Fp8Path::panels_pairs;
  // exact mode on AMX-INT8 tiles: tasks of kE4m3TilesGemmRows x rows, whose plane tiles are made
  // once per chunk of 4 tasks' rows (4 x 256 rows x K bytes at most)
  const bool tiles = path == Fp8Path::tiles_gemm;
  const int nr = exact ? ops.nr64 : ops.nr, mr = exact ? ops.mr64 : ops.mr;
  const std::int64_t blocks = (N + kBlockSize - 1) / kBlockSize;
  // fast mode: row tiles of up to 48 mr rows when the weight tiles alone give the threads enough
  // tasks (each weight panel is converted once per row tile), against 128 weight rows for the pair
  // dots (their x pairs are made once per call), 256 on f32 values when there are enough (x is
  // widened per task and 128 columns)
  const bool tall = !exact && blocks >= 4 * num_threads();
  const std::int64_t nc = kBlockSize * ((!tall || !pairs) && blocks >= 8 * num_threads() ? 2 : 1), tn = (N + nc - 1) / nc;
  const std::int64_t mc = std::min<std::int64_t>(M, tiles ? simd::kE4m3TilesGemmRows : (tall ? 48 : 16) * mr);
  const std::int64_t chunk = tiles ? std::min(M, 4 * mc)
                             : !pairs ? M
                                      : std::min(M, mc * std::max<std::int64_t>(1, 128 * mr / mc));
  for (std::int64_t c0 = 0; c0 < M; c0 += chunk) {
    const std::int64_t cm = std::min(chunk, M - c0), tm = (cm + mc - 1) / mc;
    constexpr std::int64_t kPairs = kPanelK / 2;
    std::int8_t* xt = nullptr;  // [chunk of 64 columns][row group of 4] tiles of x rows c0..
    if (tiles) {
      xt = gemm_scratch<std::int8_t>(0, static_cast<std::size_t>(simd::e4m3_plane_tile_bytes(static_cast<int>(cm), K)));
      ops.e4m3_plane_tiles(xq + c0 * K, static_cast<int>(cm), K, xt);
    }
    std::uint32_t* xp = nullptr;  // [cm][K / 2] x rows c0.. as pairs (even column low), exact in bf16
    if (pairs) {
      xp = gemm_scratch<std::uint32_t>(2, static_cast<std::size_t>(cm * K / 2));
      parallel_for(cm, K, [&](std::int64_t i) {
        const std::uint8_t* codes = xq + (c0 + i) * K;
        for (std::int64_t p = 0; p < K / 2; ++p)
          xp[i * (K / 2) + p] = e4m3_bf16_pair(codes[2 * p], codes[2 * p + 1]);
      });
    }
    parallel_for(tm * tn, mc * nc * K, [&](std::int64_t t) {
      const std::int64_t m0 = c0 + (t % tm) * mc, n0 = (t / tm) * nc;
      const std::int64_t rows = std::min(mc, c0 + cm - m0), cols = std::min(nc, N - n0);
      float* cbuf = gemm_scratch<float>(2, static_cast<std::size_t>(mc * nc));
      std::fill(cbuf, cbuf + mc * nc, 0.0f);
      if (tiles) {
        ops.e4m3_tiles_gemm(static_cast<int>(rows), static_cast<int>(cols), KB, xt + (m0 - c0) / 4 * 1024,
                            (cm + 3) / 4, xs + m0 * KB, KB, wq + n0 * K, K, w.scale + (n0 / kBlockSize) * sc, sc, cbuf,
                            nc);
        store(m0, rows, n0, cols, cbuf, nc);
        return;
      }
      float* scale = gemm_scratch<float>(3, static_cast<std::size_t>(mc * (nc / kBlockSize)));
      for (std::int64_t kb = 0; kb < KB; ++kb) {
        const std::int64_t k0 = kb * kPanelK;
        for (std::int64_t j = 0; j * kBlockSize < cols; ++j)  // scale[j][i]: row i against weight block j
          for (std::int64_t i = 0; i < rows; ++i)
            scale[j * mc + i] = xs[(m0 + i) * KB + kb] * w.scale[(n0 / kBlockSize + j) * sc + kb];
        // the next 128 columns of the task's weight rows, asked for while this block's row tiles
        // run: the rows are K bytes apart, and packing them stalled on memory (fast prefill on
        // Granite Rapids: packing 4.6% of the time before)
        if (kb + 1 < KB)
          for (std::int64_t r = 0; r < cols; ++r) prefetch_bytes(wq + (n0 + r) * K + k0 + kPanelK, kPanelK);
        // One row tile of x widened at a time (mr x 128 values, in L1) and run against every panel;
        // meanwhile the next tile's codes are fetched: x's rows are K bytes apart, out of the
        // hardware prefetcher's reach, and their first reads stalled the widening (~7% of the
        // exact prefill) until they were prefetched.
        auto by_row_tiles = [&](auto widen, auto* ap, auto&& run) {
          for (std::int64_t i = 0; i < rows; i += mr) {
            const int h = static_cast<int>(std::min<std::int64_t>(mr, rows - i));
            for (int r = 0; r < h; ++r) widen(xq + (m0 + i + r) * K + k0, kPanelK, ap + r * kPanelK);
            const bool last = i + mr >= rows;
            if (!last || kb + 1 < KB) {
              const std::uint8_t* next = last ? xq + m0 * K + k0 + kPanelK : xq + (m0 + i + mr) * K + k0;
              const std::int64_t n_next = std::min<std::int64_t>(mr, last ? rows : rows - i - mr);
              for (std::int64_t r = 0; r < n_next; ++r) prefetch_bytes(next + r * K, kPanelK);
            }
            run(h, i);
          }
        };
        if (exact) {
          double* bp = gemm_scratch<double>(1, static_cast<std::size_t>(kPanelK * nc));
          double* ap = gemm_scratch<double>(2, static_cast<std::size_t>(kPanelK * mr));
          for (std::int64_t p = 0; p < cols; p += nr)
            ops.pack_e4m3_f64(wq + (n0 + p) * K + k0, K, static_cast<int>(std::min<std::int64_t>(nr, cols - p)),
                              kPanelK, bp + p * kPanelK);
          by_row_tiles(ops.widen_e4m3_f64, ap, [&](int h, std::int64_t i) {
            for (std::int64_t p = 0; p < cols; p += nr) {
              const int n = static_cast<int>(std::min<std::int64_t>(nr, cols - p));
              const float* s = scale + (p / kBlockSize) * mc + i;
              ops.micro_f64_scaled(h, n, ap, kPanelK, bp + p * kPanelK, s, cbuf + i * nc + p, nc);
            }
          });
        } else if (!pairs) {
          // the fast mode on f32 values (FMAs): the weight panel [128][nr] per nr rows
          float* bp = gemm_scratch<float>(6, static_cast<std::size_t>(kPanelK * nc));
          float* ap = gemm_scratch<float>(7, static_cast<std::size_t>(kPanelK * mr));
          for (std::int64_t p = 0; p < cols; p += nr)
            ops.pack_e4m3(wq + (n0 + p) * K + k0, K, static_cast<int>(std::min<std::int64_t>(nr, cols - p)), kPanelK,
                          bp + p * kPanelK);
          by_row_tiles(ops.widen_e4m3, ap, [&](int h, std::int64_t i) {
            for (std::int64_t p = 0; p < cols; p += nr) {
              const int n = static_cast<int>(std::min<std::int64_t>(nr, cols - p));
              const float* s = scale + (p / kBlockSize) * mc + i;
              ops.fp8_value_dots_scaled(h, n, ap, kPanelK, bp + p * kPanelK, s, cbuf + i * nc + p, nc);
            }
          });
        } else {
          // values as bf16 pairs (exact): the weight panel [64][nr] per nr rows against x's pairs
          std::uint32_t* bp = gemm_scratch<std::uint32_t>(0, static_cast<std::size_t>(kPairs * nc));
          float* wide = gemm_scratch<float>(1, static_cast<std::size_t>(kPanelK * nr));
          for (std::int64_t p = 0; p < cols; p += nr) {
            ops.pack_e4m3(wq + (n0 + p) * K + k0, K, static_cast<int>(std::min<std::int64_t>(nr, cols - p)), kPanelK, wide);
            bf16_pairs(wide, kPairs, nr, bp + p * kPairs);
          }
          const std::uint32_t* ap = xp + (m0 - c0) * (K / 2) + kb * kPairs;
          alignas(64) float dot[16 * 32];
          for (std::int64_t p = 0; p < cols; p += nr)
            for (std::int64_t i = 0; i < rows; i += mr) {
              const int h = static_cast<int>(std::min<std::int64_t>(mr, rows - i));
              ops.fp8_pair_dots(h, ap + i * (K / 2), K / 2, bp + p * kPairs, dot, nr);
              ops.epilogue_f32(h, static_cast<int>(std::min<std::int64_t>(nr, cols - p)), dot, nr,
                               scale + (p / kBlockSize) * mc + i, cbuf + i * nc + p, nc);
            }
        }
      }
      store(m0, rows, n0, cols, cbuf, nc);
    });
  }
}

}  // namespace detail

/// \brief c = a b for f32 operands whose every product is exact in f32 (bf16 or E4M3 values times
///        each other): c[i][j] = sum_k a[i][k] b(k, j) for i < M, j < N, f32 sums in increasing k
///        with one rounding per addition — the same bits on every ISA, equal to the plain loop's. On
///        the calling thread (the attention kernels call it inside their own parallel loops).
/// \param M        rows of a and c
/// \param N        columns of c
/// \param K        the summed dimension (K <= 0: c is zeroed)
/// \param a        [M, K] row-major
/// \param lda      elements between a's rows
/// \param b        b(k, j) = b[j ldb + k] when b_rows_n (a weight's [N, K] layout), else b[k ldb + j]
/// \param ldb      b's row stride
/// \param b_rows_n whether b is laid out [N, K]
/// \param c        [M, N] f32 output
/// \param ldc      elements between c's rows
/// \param kernels  the kernels to run on
inline void matmul_exact(std::int64_t M, std::int64_t N, std::int64_t K, const float* a, std::int64_t lda,
                         const float* b, std::int64_t ldb, bool b_rows_n, float* c, std::int64_t ldc,
                         const CpuKernels& kernels = default_kernels()) {
  using detail::gemm_scratch, detail::kPanelK;
  const simd::GemmOps& ops = kernels.ops();
  const int nr = ops.nr, mr = ops.mr;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (std::int64_t i = 0; i < M; ++i) std::fill(c + i * ldc, c + i * ldc + N, 0.0f);
    return;
  }
  float* bp = gemm_scratch<float>(1, static_cast<std::size_t>(kPanelK * nr));
  float* tile = gemm_scratch<float>(2, static_cast<std::size_t>(M * nr));
  for (std::int64_t n0 = 0; n0 < N; n0 += nr) {
    const int n = static_cast<int>(std::min<std::int64_t>(nr, N - n0));
    for (std::int64_t k0 = 0; k0 < K; k0 += kPanelK) {
      const int kc = static_cast<int>(std::min<std::int64_t>(kPanelK, K - k0));
      const float* panel = bp;
      std::int64_t ldp = nr;
      if (b_rows_n) {
        ops.pack_f32(b + n0 * ldb + k0, ldb, n, kc, bp);
      } else if (n == nr) {
        panel = b + k0 * ldb + n0;
        ldp = ldb;
      } else {
        for (int k = 0; k < kc; ++k)
          for (int j = 0; j < nr; ++j) bp[k * nr + j] = j < n ? b[(k0 + k) * ldb + n0 + j] : 0.0f;
      }
      for (std::int64_t m0 = 0; m0 < M; m0 += mr)
        ops.micro_exact_products(static_cast<int>(std::min<std::int64_t>(mr, M - m0)), kc, a + m0 * lda + k0, lda,
                                 panel, ldp, tile + m0 * nr, nr, k0 > 0);
    }
    for (std::int64_t i = 0; i < M; ++i) std::copy(tile + i * nr, tile + i * nr + n, c + i * ldc + n0);
  }
}

/// \brief Rows packed once into the micro-kernels' panels (pack_rows()) for many products with them
///        (matmul_exact_packed()): the latent attention packs its selected keys once for every head.
struct PackedRows {
  std::int64_t n = 0;       ///< rows
  std::int64_t K = 0;       ///< values per row
  int nr = 0;               ///< rows per panel (the kernel table's GemmOps::nr)
  float* panels = nullptr;  ///< packed_rows_floats() floats
  /// \brief Panels of nr rows.
  std::int64_t blocks() const noexcept { return (n + nr - 1) / nr; }
  /// \brief Chunks of 128 columns per row.
  std::int64_t chunks() const noexcept { return (K + detail::kPanelK - 1) / detail::kPanelK; }
};

/// \brief Floats of the panels of n rows of K values on `kernels` (pack_rows()).
inline std::int64_t packed_rows_floats(std::int64_t n, std::int64_t K, const CpuKernels& kernels = default_kernels()) {
  const std::int64_t nr = kernels.ops().nr;
  return (n + nr - 1) / nr * ((K + detail::kPanelK - 1) / detail::kPanelK) * detail::kPanelK * nr;
}

/// \brief Packs rows [n, K] (row-major) into `panels` (packed_rows_floats() floats), the panels split
///        over the threads.
/// \param rows [n, K] f32 \param n rows \param K values per row \param panels the output
/// \param kernels the kernels to run on
/// \return the packed rows, for matmul_exact_packed()
inline PackedRows pack_rows(const float* rows, std::int64_t n, std::int64_t K, float* panels,
                            const CpuKernels& kernels = default_kernels()) {
  const simd::GemmOps& ops = kernels.ops();
  const PackedRows p{n, K, ops.nr, panels};
  const std::int64_t chunks = p.chunks(), panel = detail::kPanelK * p.nr;
  parallel_for(p.blocks(), p.nr * K, [&](std::int64_t b) {
    const int r = static_cast<int>(std::min<std::int64_t>(p.nr, n - b * p.nr));
    for (std::int64_t c = 0; c < chunks; ++c)
      ops.pack_f32(rows + b * p.nr * K + c * detail::kPanelK, K, r,
                   static_cast<int>(std::min<std::int64_t>(detail::kPanelK, K - c * detail::kPanelK)),
                   panels + (b * chunks + c) * panel);
  });
  return p;
}

/// \brief c[i][j] = sum_k a[i][k] rows[j][k] for i < M, j < rows.n: matmul_exact()'s sums (exact
///        products, f32 sums in increasing k: the same bits) on rows packed by pack_rows(), on the
///        calling thread.
/// \param M rows of a \param a [M, rows.K] \param lda elements between a's rows
/// \param rows the packed rows \param c [M, rows.n] f32 \param ldc elements between c's rows
/// \param tile M * rows.nr floats of scratch \param kernels the kernels that packed the rows
inline void matmul_exact_packed(std::int64_t M, const float* a, std::int64_t lda, const PackedRows& rows, float* c,
                                std::int64_t ldc, float* tile, const CpuKernels& kernels = default_kernels()) {
  const simd::GemmOps& ops = kernels.ops();
  const std::int64_t chunks = rows.chunks(), panel = detail::kPanelK * rows.nr;
  for (std::int64_t b = 0; b < rows.blocks(); ++b) {
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      const std::int64_t k0 = ch * detail::kPanelK;
      const int kc = static_cast<int>(std::min<std::int64_t>(detail::kPanelK, rows.K - k0));
      for (std::int64_t m0 = 0; m0 < M; m0 += ops.mr)
        ops.micro_exact_products(static_cast<int>(std::min<std::int64_t>(ops.mr, M - m0)), kc, a + m0 * lda + k0, lda,
                                 rows.panels + (b * chunks + ch) * panel, rows.nr, tile + m0 * rows.nr, rows.nr, k0 > 0);
    }
    const std::int64_t cols = std::min<std::int64_t>(rows.nr, rows.n - b * rows.nr);
    for (std::int64_t i = 0; i < M; ++i)
      std::copy(tile + i * rows.nr, tile + i * rows.nr + cols, c + i * ldc + b * rows.nr);
  }
}

/// \brief y = bf16(x W^T) with f32 accumulation: the reference's `linear` (bf16 or FP8 weights).
/// \param x       [M, in] bf16
/// \param w       [out, in] BF16, F32 or F8_E4M3 (then x is quantized per 1x128 block with `fmt`)
/// \param fmt     activation scale format for FP8 weights
/// \param y       [M, out] bf16
/// \param kernels the kernels and FP8 mode to run on (a model passes its ExecutionContext's)
inline void linear(MatrixView<const bf16> x, const WeightView<>& w, ScaleFmt fmt, MatrixView<bf16> y,
                   const CpuKernels& kernels = default_kernels()) {
  detail::check_linear_shapes(x, w, y.rows, y.cols);
  detail::check_weight_dtype(w, "linear");
  if (x.rows == 0) return;
  const IeeeSubnormalScope ieee;  // the products widen E4M3 subnormal codes through subnormal floats
  auto store = [&](std::int64_t m0, std::int64_t rows, std::int64_t n0, std::int64_t cols, const float* tile,
                   std::int64_t ld) {
    for (std::int64_t r = 0; r < rows; ++r) {
      bf16* dst = y.row(m0 + r) + n0;
      for (std::int64_t j = 0; j < cols; ++j) dst[j] = bf16(tile[r * ld + j]);
    }
  };
  if (w.dtype == DType::F8_E4M3) {
    DSV32_CHECK(w.in % kBlockSize == 0, invalid_argument, "FP8 linear needs in_features % 128 == 0, got ", w.in);
    const std::int64_t kb = w.in / kBlockSize;
    // the calling thread's scratch slots that no task of the product uses
    std::uint8_t* xq = detail::gemm_scratch<std::uint8_t>(0, static_cast<std::size_t>(x.rows * w.in));
    float* xs = detail::gemm_scratch<float>(4, static_cast<std::size_t>(x.rows * kb));
    act_quant(x, fmt, {xq, x.rows, w.in, w.in}, {xs, x.rows, kb, kb}, kernels);
    detail::fp8_product(kernels, xq, xs, x.rows, w, store);
  } else {
    detail::dense_product(kernels, x, w, store);
  }
}

/// \brief y = f32(x) f32(W)^T, all in f32: the MoE gate's scores and the output head.
/// \param x [M, in] bf16
/// \param w [out, in] BF16 or F32
/// \param y [M, out] f32
/// \param kernels the kernels to run on
inline void linear_f32(MatrixView<const bf16> x, const WeightView<>& w, MatrixView<float> y,
                       const CpuKernels& kernels = default_kernels()) {
  detail::check_linear_shapes(x, w, y.rows, y.cols);
  DSV32_CHECK(w.dtype == DType::BF16 || w.dtype == DType::F32, invalid_argument,
              "f32 linear needs a BF16 or F32 weight, got ", dtype_name(w.dtype));
  if (x.rows == 0) return;
  const IeeeSubnormalScope ieee;
  detail::dense_product(kernels, x, w,
                        [&](std::int64_t m0, std::int64_t rows, std::int64_t n0, std::int64_t cols, const float* tile,
                            std::int64_t ld) {
                          for (std::int64_t r = 0; r < rows; ++r)
                            std::copy(tile + r * ld, tile + r * ld + cols, y.row(m0 + r) + n0);
                        });
}

}  // namespace cpu
}  // namespace dsv32
