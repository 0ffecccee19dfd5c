/// \file
/// \brief CPU: the kernel plan — which kernel path each product takes, as pure functions of
///        (dtype, rows, FP8 mode, CPU features), the CPU counterpart of cuda/plan.hpp.
///
/// A product's call site asks the plan once (plan_dense(), plan_fp8(), plan_latent()) and runs the
/// named path; each path's kernels are entries of the feature set's table (simd::ops_for()), which
/// has every entry the plan can choose for it. The plan reads no global and probes nothing: the
/// features come from CpuKernels, which a model resolves from its KernelOptions and the host's
/// detected_features(). tests/backend/test_cpu_plan.cpp plans every feature set on any host — the
/// paths against the documented rules below, and the tables for the entries each path needs.
///
/// Every path of one product computes the same bits (simd/gemm_ops.hpp): the choice is speed only,
/// except the FP8 mode (exact or fast), which the caller chooses.
#pragma once

#include <cstdint>

#include "dsv32/backend/cpu/kernel_options.hpp"
#include "dsv32/backend/cpu/kernel_table.hpp"
#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/isa.hpp"
#include "dsv32/core/dtype.hpp"

namespace dsv32::cpu {

/// \addtogroup backend
/// @{

/// \brief A model's kernels, resolved: the features they may use and the FP8 mode. Every CPU
///        product and attention function takes one (by default default_kernels()).
struct CpuKernels {
  CpuFeatures features = detected_features();  ///< what the kernels may use
  Fp8Accumulation fp8 = Fp8Accumulation::exact;             ///< the FP8 products' block sums
  /// \brief The kernel table of the features.
  const simd::GemmOps& ops() const { return kernel_table(features); }
};

/// \brief The kernels of `options` on this host: detected_features() capped at options.max_isa.
inline CpuKernels resolve(const KernelOptions& options) noexcept {
  return {capped(detected_features(), options.max_isa), options.fp8};
}

/// \brief The host's best kernels in the exact FP8 mode (resolve(KernelOptions{})).
inline CpuKernels default_kernels() noexcept { return resolve(KernelOptions{}); }

/// \brief The height of a level's f32 micro-tile (GemmOps::mr; the f64 one, mr64, is the same).
constexpr int micro_rows(Isa isa) noexcept {
  return isa >= Isa::avx512 ? 12 : isa == Isa::avx2 ? 6 : 4;
}

/// \brief The paths of a product with a BF16 or F32 weight (dense_product in gemm.hpp).
enum class DensePath {
  rows_bf16_pairs,  ///< BF16 weight, at most 8 rows: rows streamed once on VDPBF16PS (bf16_pair_rows;
                    ///< per call it takes bf16_rows where x's exponents could make a subnormal sum)
  rows_bf16,        ///< BF16 weight, at most 8 rows: rows streamed once, FMAs (bf16_rows)
  rows_packed,      ///< at most micro_rows() rows: 16-row (nr) panels packed per thread and streamed
  panels,           ///< more rows: BLIS-style packed panels shared by every row tile of x
};

/// \brief The paths of a product with an F8_E4M3 weight (fp8_product in gemm.hpp). `rows_*` and
///        `*_rows` paths stream the weight rows once (at most 8 rows of x); `panels_*` and
///        `tiles_gemm` pack weight panels per 128 columns.
enum class Fp8Path {
  tiles_rows,        ///< exact, 3-8 rows: AMX-INT8 tiles (e4m3_tiles_rows)
  panel_rows_f64,    ///< exact, 3-8 rows: vector lanes over the weight rows, doubles (e4m3_panel_rows_f64)
  rows_f64,          ///< exact, 1-8 rows: lanes along k, doubles (e4m3_rows)
  row_order_pairs,   ///< fast, 1-4 rows: the row order (e4m3_pair_rows)
  panel_rows_pairs,  ///< fast, 5-8 rows: the panel order, x as bf16 pairs (e4m3_panel_rows)
  panel_rows_f32,    ///< fast, 5-8 rows: the panel order, x as f32 values (e4m3_panel_rows_f32)
  tiles_gemm,        ///< exact, more rows: AMX-INT8 tiles (e4m3_tiles_gemm)
  panels_f64,        ///< exact, more rows: f64 panels (pack_e4m3_f64, micro_f64_scaled)
  panels_values,     ///< fast, more rows (or 5-8 without a streamed kernel): f32 panels on FMAs
                     ///< (pack_e4m3, fp8_value_dots_scaled)
  panels_pairs,      ///< fast, the same on VDPBF16PS: bf16-pair panels (fp8_pair_dots)
};

/// \brief The paths of the absorbed attention's products with wkv_b (absorb_query, project_values).
enum class LatentPath {
  scaled_codes,  ///< the FP8 codes read as stored (e4m3_scaled_cols / e4m3_scaled_rows), where the
                 ///< head's block scales are exact (checked per head at run time)
  dequantized,   ///< the rows dequantized once per use, then matmul_exact()
};

namespace detail {
/// The fast FP8 mode's 5-8 row panel-order kernel on bf16 pairs (e4m3_panel_rows) exists: AVX2, and
/// AVX-512 without VBMI (the AVX2 one), or with VDPBF16PS where it outruns the FMAs.
constexpr bool has_panel_rows_pairs(const CpuFeatures& f) noexcept {
  return f.isa == Isa::avx2 || (f.isa >= Isa::avx512 && (!f.vbmi || (f.isa == Isa::avx512_bf16 && !f.fma_dots)));
}
/// VDPBF16PS where the CPU has it and its FMAs do not outrun it.
constexpr bool uses_bf16_dots(const CpuFeatures& f) noexcept {
  return f.isa == Isa::avx512_bf16 && !f.fma_dots;
}
}  // namespace detail

/// \brief The path of y = x W^T for `rows` rows of x and a BF16 or F32 weight.
constexpr DensePath plan_dense(CpuFeatures f, DType dtype, std::int64_t rows) noexcept {
  f = capped(f, f.isa);
  if (rows <= 8 && dtype == DType::BF16 && f.isa >= Isa::avx2)
    return detail::uses_bf16_dots(f) ? DensePath::rows_bf16_pairs : DensePath::rows_bf16;
  if (rows <= micro_rows(f.isa)) return DensePath::rows_packed;
  return DensePath::panels;
}

/// \brief The path of an FP8 product with `rows` rows of x in mode `mode`. Exact: lanes along k
///        below simd::kE4m3PanelF64MinRows (3) rows, lanes over the weight rows from there to 8
///        (with VBMI; on AMX tiles where granted), packed panels beyond (AMX tiles where granted).
///        Fast: the row order up to simd::kFp8RowOrderMaxRows (4) rows, the panel order beyond —
///        streamed up to 8 rows where a level has such a kernel, packed panels otherwise.
constexpr Fp8Path plan_fp8(CpuFeatures f, Fp8Accumulation mode, std::int64_t rows) noexcept {
  f = capped(f, f.isa);
  const bool fast = mode == Fp8Accumulation::fast;
  if (fast && rows > simd::kFp8RowOrderMaxRows) {
    if (rows <= 8 && detail::has_panel_rows_pairs(f)) return Fp8Path::panel_rows_pairs;
    if (rows <= 8 && f.isa >= Isa::avx512 && f.vbmi) return Fp8Path::panel_rows_f32;
    return detail::uses_bf16_dots(f) ? Fp8Path::panels_pairs : Fp8Path::panels_values;
  }
  if (rows <= 8) {
    if (fast) return Fp8Path::row_order_pairs;
    if (rows >= simd::kE4m3PanelF64MinRows && f.vbmi) return f.amx_int8 ? Fp8Path::tiles_rows : Fp8Path::panel_rows_f64;
    return Fp8Path::rows_f64;
  }
  if (fast) return detail::uses_bf16_dots(f) ? Fp8Path::panels_pairs : Fp8Path::panels_values;
  return f.amx_int8 ? Fp8Path::tiles_gemm : Fp8Path::panels_f64;
}

/// \brief The path of absorb_query (`project = false`) or project_values (`project = true`) for
///        `tokens` tokens and latent width `latent` (kv_lora_rank): the codes read as stored on the
///        SIMD levels up to 8 tokens (on AVX2 too: a Zen 5 host forced to it, 128 heads of the 671B
///        dims, two threads, absorb_query at 5 / 8 tokens: 1.13-1.14 / 1.56-1.63 ms against 2.16-2.32 /
///        2.31-2.41 dequantizing), project_values with latent % 128 == 0.
constexpr LatentPath plan_latent(CpuFeatures f, bool project, std::int64_t tokens, std::int64_t latent) noexcept {
  if (f.isa < Isa::avx2 || tokens > 8) return LatentPath::dequantized;
  if (project) return latent % 128 == 0 ? LatentPath::scaled_codes : LatentPath::dequantized;
  return LatentPath::scaled_codes;
}

/// \brief The name of a path (for tests and benchmark output).
constexpr const char* path_name(Fp8Path p) noexcept {
  switch (p) {
    case Fp8Path::tiles_rows: return "tiles_rows";
    case Fp8Path::panel_rows_f64: return "panel_rows_f64";
    case Fp8Path::rows_f64: return "rows_f64";
    case Fp8Path::row_order_pairs: return "row_order_pairs";
    case Fp8Path::panel_rows_pairs: return "panel_rows_pairs";
    case Fp8Path::panel_rows_f32: return "panel_rows_f32";
    case Fp8Path::tiles_gemm: return "tiles_gemm";
    case Fp8Path::panels_f64: return "panels_f64";
    case Fp8Path::panels_values: return "panels_values";
    case Fp8Path::panels_pairs: return "panels_pairs";
  }
  return "?";
}
/// \brief The name of a path.
constexpr const char* path_name(DensePath p) noexcept {
  switch (p) {
    case DensePath::rows_bf16_pairs: return "rows_bf16_pairs";
    case DensePath::rows_bf16: return "rows_bf16";
    case DensePath::rows_packed: return "rows_packed";
    case DensePath::panels: return "panels";
  }
  return "?";
}

/// @}

}  // namespace dsv32::cpu
