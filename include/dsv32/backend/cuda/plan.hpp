/// \file
/// \brief Host-side planning of the CUDA backend, as pure functions: how each matrix product maps onto
///        cuBLASLt (operands, transposes, leading dimensions, FP8 scale modes and layouts, staging and
///        chunking through the context's scratch), the scale layouts cuBLASLt's DeepSeek-style FP8
///        scaling wants (and the repacking of the checkpoint's block scales into them), the cache key
///        of a cuBLASLt heuristic, and the launch geometry of dsv32's kernels.
///
/// Nothing here includes a CUDA header or touches a device: the CPU unit tests
/// (tests/backend/test_cuda_plan.cpp) check every decision on machines without a GPU, and the CUDA
/// implementation turns a plan into cuBLASLt descriptors one to one.
///
/// cuBLASLt's 1x128 / 128x128 FP8 scaling (cuBLAS >= 12.9, sm_90 only) takes TN products only (K
/// contiguous in both operands). For row-major Y[M, N] = X W^T the plan is the column-major product
/// D[N, M] = W(op T)[N, K] X(op N)[K, M]: A = W (ld K) with 128x128 block scales, B = the quantized X
/// (ld K) with 1x128 vector scales, D = Y (ld = Y's row stride). Vector scales are stored
/// [ceil(K/128)][M'] with the activation row contiguous (M' = M rounded up to 4); block scales
/// [ceil(N/128)][roundup(ceil(K/128), 4)], which is the checkpoint's `scale` tensor as it is whenever
/// ceil(K/128) is a multiple of 4 (every 671B shape) and a repacked copy otherwise (the tiny configs).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "dsv32/config/model_config.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// \brief `a / b` rounded up (b > 0).
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }
/// \brief `a` rounded up to a multiple of `b` (b > 0).
constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) noexcept { return ceil_div(a, b) * b; }

/// \brief Bytes every region of the context's scratch is aligned to (cuBLASLt's default assumption).
inline constexpr std::size_t kScratchAlignment = 256;

/// \brief The alignment of an address: the largest power of two dividing it, at most 256 (cuBLASLt's
///        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES take it, so that the heuristic only offers
///        algorithms the actual pointers allow). 256 for null.
constexpr std::uint32_t alignment_of(std::uintptr_t address) noexcept {
  std::uint32_t a = 1;
  while (a < 256 && (address % (2u * a)) == 0) a *= 2;
  return address == 0 ? 256u : a;
}

/// \brief An operand's element type as cuBLASLt sees it.
enum class GemmType : std::uint8_t {
  bf16,  ///< CUDA_R_16BF
  f32,   ///< CUDA_R_32F
  e4m3,  ///< CUDA_R_8F_E4M3
};

/// \brief An FP8 operand's scaling mode (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_MODE).
enum class GemmScale : std::uint8_t {
  none,        ///< no scale pointer (bf16 / f32 products)
  vec128,      ///< CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: one f32 per row and 128-wide K block
  blk128x128,  ///< CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: one f32 per 128x128 block
};

/// \brief How the activations reach cuBLASLt.
enum class GemmInput : std::uint8_t {
  direct,     ///< X itself (bf16, any row stride)
  quantized,  ///< E4M3 codes of X per 1x128 block, with vector scales, in the scratch
  widened,    ///< X widened to f32 in the scratch (f32 weights: cuBLASLt does not mix bf16 and f32 operands)
};

/// \brief How the result reaches Y.
enum class GemmOutput : std::uint8_t {
  direct,   ///< cuBLASLt writes Y itself
  staged,   ///< cuBLASLt writes a contiguous copy in the scratch, then a kernel copies (or rounds) it into Y
};

/// \brief One linear product Y[M, N] = X[M, K] W[N, K]^T as cuBLASLt runs it: the column-major problem
///        D[m, n] = op(A)[m, k] op(B)[k, n] with A = W, B = X, D = Y, and what the scratch holds.
///
/// Rows are processed in chunks of at most chunk_rows (the scratch bounds the staged activations);
/// scratch regions are given as byte offsets from the scratch's start, each 256-byte aligned.
struct GemmPlan {
  std::int64_t rows = 0;        ///< M: activation rows of the whole call
  std::int64_t out = 0;         ///< N: output features (cuBLAS m)
  std::int64_t in = 0;          ///< K: input features (cuBLAS k)
  GemmType a_type = GemmType::bf16;   ///< the weight's type
  GemmType b_type = GemmType::bf16;   ///< the activations' type as cuBLASLt reads them
  GemmType d_type = GemmType::bf16;   ///< the product's type as cuBLASLt writes it
  bool transpose_a = true;      ///< CUBLASLT_MATMUL_DESC_TRANSA = CUBLAS_OP_T (W is [N, K] row-major)
  bool transpose_b = false;     ///< CUBLASLT_MATMUL_DESC_TRANSB = CUBLAS_OP_N (X is [M, K] row-major)
  std::int64_t lda = 0;         ///< K
  std::int64_t ldb = 0;         ///< X's row stride (direct), else K
  std::int64_t ldd = 0;         ///< Y's row stride (direct output), else N
  GemmScale a_scale = GemmScale::none;  ///< blk128x128 for FP8 weights
  GemmScale b_scale = GemmScale::none;  ///< vec128 for quantized activations
  GemmInput input = GemmInput::direct;  ///< how X reaches cuBLASLt
  GemmOutput output = GemmOutput::direct;  ///< how the product reaches Y (direct unless rounding or padding needs a copy)
  bool round_output = false;    ///< staged f32 product rounded to bf16 into Y (f32 weight, bf16 result)
  bool pad_rows = false;        ///< FP8: each chunk's GEMM runs on its rows rounded up to a multiple of 4
  std::int64_t k_blocks = 0;    ///< FP8: ceil(K / 128)
  std::int64_t w_scale_ld = 0;  ///< FP8: roundup(k_blocks, 4), the block scales' row length cuBLASLt reads
  bool repack_w_scales = false; ///< FP8: the checkpoint's [ceil(N/128), k_blocks] scales are repacked (k_blocks % 4 != 0)
  std::int64_t chunk_rows = 0;  ///< activation rows per cuBLASLt call (the last chunk may be shorter)
  std::size_t x_offset = 0;     ///< scratch offset of the staged activations (codes or f32), [chunk', K]
  std::size_t x_scale_offset = 0;  ///< scratch offset of the vector scales, [k_blocks][chunk']
  std::size_t w_scale_offset = 0;  ///< scratch offset of the repacked block scales, [ceil(N/128)][w_scale_ld]
  std::size_t d_offset = 0;     ///< scratch offset of the staged product, [chunk', N]
  std::size_t scratch_bytes = 0;  ///< scratch the plan uses

  /// \brief Rows the GEMM of a chunk of `r` rows runs on: r, or r rounded up to 4 (pad_rows).
  constexpr std::int64_t gemm_rows(std::int64_t r) const noexcept { return pad_rows ? round_up(r, 4) : r; }
  /// \brief Whether a chunk of `r` rows must go through the staged output (its GEMM rows exceed r).
  constexpr bool stages_chunk(std::int64_t r) const noexcept { return output == GemmOutput::staged || gemm_rows(r) != r; }
};

/// \brief What a linear call asks for.
struct GemmRequest {
  DType weight = DType::BF16;   ///< BF16, F32 or F8_E4M3
  bool f32_result = false;      ///< linear_f32 (f32 Y) rather than linear (bf16 Y)
  std::int64_t rows = 0;        ///< M
  std::int64_t out = 0;         ///< N
  std::int64_t in = 0;          ///< K
  std::int64_t x_stride = 0;    ///< X's row stride in elements (>= K)
  std::int64_t y_stride = 0;    ///< Y's row stride in elements (>= N)
  bool pad_fp8_rows = true;     ///< FP8: round each GEMM's rows up to a multiple of 4 (see plan_linear())
};

namespace detail {
inline std::size_t align_scratch(std::size_t n) { return (n + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment; }
}  // namespace detail

/// \brief Block scales' row length cuBLASLt reads for K input features: roundup(ceil(K / 128), 4).
constexpr std::int64_t block_scale_ld(std::int64_t in) noexcept { return round_up(ceil_div(in, kBlockSize), 4); }

/// \brief Whether a weight's checkpoint scales ([ceil(N/128), ceil(K/128)] row-major) must be repacked
///        for cuBLASLt: exactly when ceil(K/128) is not a multiple of 4.
constexpr bool block_scales_need_repack(std::int64_t in) noexcept { return ceil_div(in, kBlockSize) % 4 != 0; }

/// \brief Plans a linear product (see GemmPlan) within `scratch_bytes` of scratch.
///
/// FP8 weights take 1x128-quantized activations (every FP8 shape has K % 128 == 0, as on the CPU);
/// their vector scales' leading dimension is the GEMM's row count, which is rounded up to a multiple of
/// 4 when `pad_fp8_rows` is set — then chunks whose row count is not a multiple of 4 write a staged
/// product (padding rows zero) that is copied into Y, so the result does not depend on whether
/// cuBLASLt requires that multiple of 4 (scripts/device-check.sh's probe settles it). F32 weights take
/// f32 activations (widened in the scratch), and a bf16 result of them is staged in f32 and rounded.
/// \throws Error(invalid_argument) for FP8 weights with K % 128 != 0, an FP8 linear_f32, a dtype other
///         than BF16, F32 or F8_E4M3, a negative or zero size, or strides below the row lengths;
///         Error(unsupported) when the scratch cannot hold even 4 rows
inline GemmPlan plan_linear(const GemmRequest& r, std::size_t scratch_bytes) {
  DSV32_CHECK(r.weight == DType::BF16 || r.weight == DType::F32 || r.weight == DType::F8_E4M3, invalid_argument,
              "CUDA linear: weight dtype ", dtype_name(r.weight), " in a matrix product (BF16, F32 or F8_E4M3 expected)");
  DSV32_CHECK(r.rows >= 0 && r.out > 0 && r.in > 0, invalid_argument, "CUDA linear: shape [", r.rows, ", ", r.in,
              "] x [", r.out, ", ", r.in, "]^T has an empty or negative dimension");
  DSV32_CHECK(r.x_stride >= r.in && r.y_stride >= r.out, invalid_argument, "CUDA linear: row strides ", r.x_stride,
              " (input) and ", r.y_stride, " (output) below the row lengths ", r.in, " and ", r.out);
  GemmPlan p;
  p.rows = r.rows;
  p.out = r.out;
  p.in = r.in;
  p.lda = r.in;
  p.d_type = r.f32_result ? GemmType::f32 : GemmType::bf16;
  std::size_t per_row = 0, fixed = 0;
  if (r.weight == DType::F8_E4M3) {
    DSV32_CHECK(!r.f32_result, invalid_argument, "CUDA linear_f32: needs a BF16 or F32 weight, got F8_E4M3");
    DSV32_CHECK(r.in % kBlockSize == 0, invalid_argument, "CUDA FP8 linear: needs in_features % 128 == 0, got ", r.in);
    p.a_type = p.b_type = GemmType::e4m3;
    p.a_scale = GemmScale::blk128x128;
    p.b_scale = GemmScale::vec128;
    p.input = GemmInput::quantized;
    p.ldb = r.in;
    p.k_blocks = ceil_div(r.in, kBlockSize);
    p.w_scale_ld = block_scale_ld(r.in);
    p.repack_w_scales = block_scales_need_repack(r.in);
    p.pad_rows = r.pad_fp8_rows;
    if (p.repack_w_scales) fixed += detail::align_scratch(static_cast<std::size_t>(ceil_div(r.out, kBlockSize) * p.w_scale_ld) * 4);
    // per activation row: its codes, its vector scales, and (when padding may stage) its bf16 product
    per_row = static_cast<std::size_t>(r.in) + static_cast<std::size_t>(p.k_blocks) * 4 +
              (p.pad_rows && r.rows % 4 != 0 ? static_cast<std::size_t>(r.out) * 2 : 0);
  } else if (r.weight == DType::F32) {
    p.a_type = p.b_type = GemmType::f32;
    p.input = GemmInput::widened;
    p.ldb = r.in;
    p.d_type = GemmType::f32;  // cuBLASLt's f32 products write f32; a bf16 result is rounded from the stage
    if (!r.f32_result) {
      p.output = GemmOutput::staged;
      p.round_output = true;
    }
    per_row = static_cast<std::size_t>(r.in) * 4 + (r.f32_result ? 0 : static_cast<std::size_t>(r.out) * 4);
  } else {
    p.a_type = p.b_type = GemmType::bf16;
    p.ldb = r.x_stride;
  }
  if (per_row == 0) {  // bf16: no scratch
    p.chunk_rows = std::max<std::int64_t>(r.rows, 1);
  } else {
    // regions are aligned, so leave one alignment unit per region of slack
    const std::size_t slack = 4 * kScratchAlignment;
    const std::size_t room = scratch_bytes > fixed + slack ? scratch_bytes - fixed - slack : 0;
    std::int64_t chunk = static_cast<std::int64_t>(room / per_row) / 4 * 4;
    DSV32_CHECK(chunk >= 4, unsupported, "CUDA linear: the context's scratch (", scratch_bytes, " bytes) cannot stage 4 rows of [",
                r.rows, ", ", r.in, "] x [", r.out, ", ", r.in, "]^T (", per_row, " bytes a row, ", fixed,
                " fixed); construct the ExecutionContext<Cuda> with more scratch");
    p.chunk_rows = std::max<std::int64_t>(std::min<std::int64_t>(chunk, round_up(std::max<std::int64_t>(r.rows, 1), 4)), 4);
  }
  if (p.output == GemmOutput::direct) p.ldd = r.y_stride;
  else p.ldd = r.out;
  // scratch regions, in order: staged activations, vector scales, repacked block scales, staged product
  const std::int64_t rows_pad = round_up(p.chunk_rows, 4);
  std::size_t at = 0;
  if (p.input == GemmInput::quantized) {
    p.x_offset = at;
    at += detail::align_scratch(static_cast<std::size_t>(rows_pad * r.in));
    p.x_scale_offset = at;
    at += detail::align_scratch(static_cast<std::size_t>(p.k_blocks * rows_pad) * 4);
    if (p.repack_w_scales) {
      p.w_scale_offset = at;
      at += detail::align_scratch(static_cast<std::size_t>(ceil_div(r.out, kBlockSize) * p.w_scale_ld) * 4);
    }
    if (p.pad_rows && r.rows % 4 != 0) {
      p.d_offset = at;
      at += detail::align_scratch(static_cast<std::size_t>(rows_pad * r.out) * 2);
    }
  } else if (p.input == GemmInput::widened) {
    p.x_offset = at;
    at += detail::align_scratch(static_cast<std::size_t>(p.chunk_rows * r.in) * 4);
    if (p.output == GemmOutput::staged) {
      p.d_offset = at;
      at += detail::align_scratch(static_cast<std::size_t>(p.chunk_rows * r.out) * 4);
    }
  }
  p.scratch_bytes = at;
  DSV32_CHECK(at <= scratch_bytes, unsupported, "CUDA linear: plan needs ", at, " bytes of scratch, the context has ",
              scratch_bytes);
  return p;
}

/// \brief Repacks a weight's block scales from the checkpoint's layout ([n_blocks, k_blocks] row-major)
///        into cuBLASLt's ([n_blocks][roundup(k_blocks, 4)], K blocks contiguous); padding entries are 0.
///        The host statement of what the device's repacking kernel writes.
/// \param src [n_blocks, k_blocks] \param n_blocks ceil(N / 128) \param k_blocks ceil(K / 128)
/// \param dst [n_blocks, roundup(k_blocks, 4)]
inline void repack_block_scales(const float* src, std::int64_t n_blocks, std::int64_t k_blocks, float* dst) {
  const std::int64_t ld = round_up(k_blocks, 4);
  for (std::int64_t nb = 0; nb < n_blocks; ++nb)
    for (std::int64_t kb = 0; kb < ld; ++kb) dst[nb * ld + kb] = kb < k_blocks ? src[nb * k_blocks + kb] : 0.0f;
}

/// \brief Index of activation row `row`'s scale of K block `kb` in cuBLASLt's vector-scale layout
///        ([k_blocks][ld], rows contiguous; ld = the GEMM's row count).
constexpr std::int64_t vector_scale_index(std::int64_t row, std::int64_t kb, std::int64_t ld) noexcept {
  return kb * ld + row;
}

/// \brief Transposes activation scales from the Kernels contract's layout ([rows, k_blocks], what
///        act_quant() writes) to cuBLASLt's vector-scale layout ([k_blocks][ld]); rows in [rows, ld)
///        get 1. The host statement of what the device's GEMM quantization writes.
inline void to_vector_scale_layout(const float* src, std::int64_t rows, std::int64_t k_blocks, std::int64_t ld,
                                   float* dst) {
  for (std::int64_t kb = 0; kb < k_blocks; ++kb)
    for (std::int64_t r = 0; r < ld; ++r) dst[vector_scale_index(r, kb, ld)] = r < rows ? src[r * k_blocks + kb] : 1.0f;
}

/// \brief What identifies a cuBLASLt heuristic query: the problem, the layouts and the pointers'
///        alignments. The context caches one algorithm (and its descriptors) per key.
struct GemmKey {
  GemmType a_type = GemmType::bf16;  ///< A's type
  GemmType b_type = GemmType::bf16;  ///< B's type
  GemmType d_type = GemmType::bf16;  ///< D's type
  GemmScale a_scale = GemmScale::none;  ///< A's scale mode
  GemmScale b_scale = GemmScale::none;  ///< B's scale mode
  bool transpose_a = true;   ///< A's op
  bool transpose_b = false;  ///< B's op
  std::int64_t m = 0;        ///< cuBLAS m (output features)
  std::int64_t n = 0;        ///< cuBLAS n (activation rows of the call)
  std::int64_t k = 0;        ///< cuBLAS k
  std::int64_t lda = 0;      ///< A's leading dimension
  std::int64_t ldb = 0;      ///< B's leading dimension
  std::int64_t ldd = 0;      ///< D's leading dimension
  std::int64_t batch = 1;    ///< strided-batched count (1: a single product)
  std::int64_t stride_a = 0;  ///< batch stride of A in elements
  std::int64_t stride_b = 0;  ///< batch stride of B in elements
  std::int64_t stride_d = 0;  ///< batch stride of D in elements
  std::uint32_t align_a = 256;  ///< alignment_of(A)
  std::uint32_t align_b = 256;  ///< alignment_of(B)
  std::uint32_t align_d = 256;  ///< alignment_of(D)

  /// \brief Field-wise equality.
  friend bool operator==(const GemmKey&, const GemmKey&) = default;
};

/// \brief Hash of a GemmKey (for the context's cache).
struct GemmKeyHash {
  /// \brief Combines every field.
  std::size_t operator()(const GemmKey& k) const noexcept {
    std::size_t h = 0;
    auto mix = [&h](std::uint64_t v) { h ^= std::hash<std::uint64_t>{}(v) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2); };
    mix(static_cast<std::uint64_t>(k.a_type) | static_cast<std::uint64_t>(k.b_type) << 8 |
        static_cast<std::uint64_t>(k.d_type) << 16 | static_cast<std::uint64_t>(k.a_scale) << 24 |
        static_cast<std::uint64_t>(k.b_scale) << 32 | static_cast<std::uint64_t>(k.transpose_a) << 40 |
        static_cast<std::uint64_t>(k.transpose_b) << 41);
    for (std::int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldd, k.batch, k.stride_a, k.stride_b, k.stride_d})
      mix(static_cast<std::uint64_t>(v));
    mix(static_cast<std::uint64_t>(k.align_a) | static_cast<std::uint64_t>(k.align_b) << 16 |
        static_cast<std::uint64_t>(k.align_d) << 32);
    return h;
  }
};

/// \brief The key of one chunk of a planned linear product with the given pointers.
/// \param p the plan \param chunk rows of this chunk \param a, b, d the operand addresses
inline GemmKey gemm_key(const GemmPlan& p, std::int64_t chunk, std::uintptr_t a, std::uintptr_t b, std::uintptr_t d) {
  GemmKey k;
  k.a_type = p.a_type;
  k.b_type = p.b_type;
  k.d_type = p.d_type;
  k.a_scale = p.a_scale;
  k.b_scale = p.b_scale;
  k.transpose_a = p.transpose_a;
  k.transpose_b = p.transpose_b;
  k.m = p.out;
  k.n = p.gemm_rows(chunk);
  k.k = p.in;
  k.lda = p.lda;
  k.ldb = p.ldb;
  k.ldd = p.stages_chunk(chunk) ? p.out : p.ldd;
  k.align_a = alignment_of(a);
  k.align_b = alignment_of(b);
  k.align_d = alignment_of(d);
  return k;
}

/// \brief Threads, blocks and dynamic shared memory of one kernel launch.
struct LaunchShape {
  std::int64_t blocks = 0;  ///< grid size (x)
  int threads = 0;          ///< block size
  std::size_t smem = 0;     ///< dynamic shared memory in bytes
};

/// \brief Largest grid of a grid-stride launch: enough blocks to fill any current GPU many times over.
inline constexpr std::int64_t kMaxGridBlocks = 65535;

/// \brief A grid-stride launch over `n` independent elements, `threads` per block.
constexpr LaunchShape elementwise_launch(std::int64_t n, int threads = 256) noexcept {
  return {std::clamp<std::int64_t>(ceil_div(n, threads), 1, kMaxGridBlocks), threads, 0};
}

/// \brief A block per row of `cols` elements: a multiple of 32 threads, at most 256, no more than the
///        row's length rounded up to a warp; `smem_per_col` bytes of dynamic shared memory per column.
constexpr LaunchShape row_launch(std::int64_t rows, std::int64_t cols, std::size_t smem_per_col = 0) noexcept {
  return {rows, static_cast<int>(std::clamp<std::int64_t>(round_up(cols, 32), 32, 256)),
          static_cast<std::size_t>(cols) * smem_per_col};
}

/// \brief Next power of two >= n (n >= 1).
constexpr std::int64_t next_pow2(std::int64_t n) noexcept {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

/// \brief The indexer's two kernels: scoring (one block per query row and tile of keys, integer exact
///        E4M3 dot products) and top-k (one block per query row: radix select, then a bitonic sort of
///        the selected keys in shared memory).
struct IndexerPlan {
  int keys_per_block = 64;        ///< keys one scoring block scores
  int score_threads = 128;        ///< threads of a scoring block
  std::size_t score_smem = 0;     ///< its dynamic shared memory: queries [H][D] and keys [D][tile] as int32, logits [H][tile] f32
  int topk_threads = 1024;        ///< threads of a top-k block
  std::int64_t sort_capacity = 0; ///< next_pow2(k): the bitonic sort's size
  std::size_t topk_smem = 0;      ///< its dynamic shared memory: the sort's keys (8 bytes each)
  std::int64_t rows_per_pass = 0; ///< query rows scored per pass: their [rows, cache positions] f32 scores fit the scratch
};

/// \brief Plans the indexer for H heads of dimension D, top-k `k`, `queries` query rows of which each
///        sees at most `max_keys` cached positions, within `scratch_bytes` and `smem_limit` bytes of
///        shared memory per block.
/// \throws Error(unsupported) when a block's shared memory or one row's scores do not fit
inline IndexerPlan plan_indexer(std::int64_t H, std::int64_t D, std::int64_t k, std::int64_t queries,
                                std::int64_t max_keys, std::size_t scratch_bytes, std::size_t smem_limit) {
  IndexerPlan p;
  p.score_smem = static_cast<std::size_t>(H * D + D * p.keys_per_block) * 4 + static_cast<std::size_t>(H * p.keys_per_block) * 4;
  DSV32_CHECK(p.score_smem <= smem_limit, unsupported, "CUDA indexer: ", H, " heads of dimension ", D, " need ",
              p.score_smem, " bytes of shared memory per block, the device allows ", smem_limit);
  p.sort_capacity = next_pow2(std::max<std::int64_t>(k, 1));
  p.topk_smem = static_cast<std::size_t>(p.sort_capacity) * 8;
  DSV32_CHECK(p.topk_smem <= smem_limit, unsupported, "CUDA indexer: top-", k, " needs ", p.topk_smem,
              " bytes of shared memory to sort, the device allows ", smem_limit);
  const std::size_t row_bytes = static_cast<std::size_t>(std::max<std::int64_t>(max_keys, 1)) * 4;
  const std::int64_t fit = static_cast<std::int64_t>(scratch_bytes / row_bytes);
  DSV32_CHECK(fit >= 1, unsupported, "CUDA indexer: one query's scores over ", max_keys, " positions (", row_bytes,
              " bytes) exceed the context's scratch (", scratch_bytes, " bytes)");
  p.rows_per_pass = std::min<std::int64_t>(fit, std::max<std::int64_t>(queries, 1));
  return p;
}

/// \brief MLA attention kernels: absorbed decode (a block per sequence and group of heads) and prefill
///        (a block per query and head).
struct AttentionPlan {
  std::int64_t heads_per_block = 1;  ///< decode: heads sharing one pass over the selected latents
  int threads = 256;                 ///< threads per block
  std::size_t smem = 0;              ///< dynamic shared memory: queries and scores in f32
};

/// \brief Plans the absorbed decode for H heads, latent rank C, rope dim R, top-k `k`: the most heads
///        per block (a power of two dividing H, at most 8) whose queries and scores fit `smem_limit`.
/// \throws Error(unsupported) when even one head does not fit
inline AttentionPlan plan_latent_attention(std::int64_t H, std::int64_t C, std::int64_t R, std::int64_t k,
                                           std::size_t smem_limit) {
  AttentionPlan p;
  auto bytes = [&](std::int64_t g) { return static_cast<std::size_t>(g * (C + R) + g * k) * 4; };
  std::int64_t g = 8;
  while (g > 1 && (H % g != 0 || bytes(g) > smem_limit)) g /= 2;
  DSV32_CHECK(bytes(g) <= smem_limit, unsupported, "CUDA latent attention: one head's query and ", k, " scores need ",
              bytes(g), " bytes of shared memory, the device allows ", smem_limit);
  p.heads_per_block = g;
  p.smem = bytes(g);
  return p;
}

/// \brief Plans the prefill attention (one block per query and head) for head dims nope + rope, top-k `k`.
/// \throws Error(unsupported) when the query and the scores do not fit `smem_limit`
inline AttentionPlan plan_sparse_attention(std::int64_t nope, std::int64_t rope, std::int64_t k, std::size_t smem_limit) {
  AttentionPlan p;
  p.threads = 128;
  p.smem = static_cast<std::size_t>(nope + rope + k) * 4;
  DSV32_CHECK(p.smem <= smem_limit, unsupported, "CUDA sparse attention: a query of ", nope + rope, " and ", k,
              " scores need ", p.smem, " bytes of shared memory, the device allows ", smem_limit);
  return p;
}

/// \brief Rows and columns of one tile of the grouped expert GEMMs (a Tile x Tile block of outputs per
///        thread block, as the reference GEMM).
inline constexpr int kGroupedTile = 16;

/// \brief The grouped expert compute of one MoE call, sized for the worst case so that no routing
///        data comes back to the host: every (token, slot) pair on this rank (tokens * k grouped rows).
///
/// The gated GEMM (w1 and w3 with the SwiGLU epilogue) and the down GEMM (w2) run on a grid of
/// (column tiles, row_blocks): block y takes global row tiles y, y + row_blocks, ... below the
/// device's count of tiles (sum over experts of ceil(rows / tile)), which is at most max_row_tiles.
struct GroupedExpertPlan {
  std::int64_t max_rows = 0;       ///< tokens * k: grouped rows at most (each pair picks one local expert or none)
  std::int64_t max_row_tiles = 0;  ///< ceil(max_rows / tile) + min(n_local, max_rows): row tiles at most
  std::int64_t row_blocks = 0;     ///< grid.y of both GEMMs: max_row_tiles, at most kMaxGridBlocks
  std::int64_t gate_col_tiles = 0; ///< grid.x of the gated GEMM: ceil(inter / tile)
  std::int64_t down_col_tiles = 0; ///< grid.x of the down GEMM: ceil(dim / tile)
  bool fp8 = false;                ///< E4M3 experts: x and the hidden rows are quantized per 1x128 block
};

/// \brief Plans the grouped expert compute of `tokens` tokens with k experts each over `n_local` local
///        experts of shape w1, w3 [inter, dim], w2 [dim, inter].
/// \throws Error(invalid_argument) for an empty or negative size, FP8 experts whose dim or inter is not a
///         multiple of 128, or more grouped rows than 32-bit row indices hold
inline GroupedExpertPlan plan_grouped_experts(std::int64_t tokens, std::int64_t k, std::int64_t n_local,
                                              std::int64_t dim, std::int64_t inter, bool fp8) {
  DSV32_CHECK(tokens >= 0 && k > 0 && n_local > 0 && dim > 0 && inter > 0, invalid_argument,
              "CUDA grouped experts: ", tokens, " tokens, k = ", k, ", ", n_local, " local experts of [", inter, ", ",
              dim, "] (positive sizes expected)");
  DSV32_CHECK(!fp8 || (dim % kBlockSize == 0 && inter % kBlockSize == 0), invalid_argument,
              "CUDA grouped experts: FP8 experts need dim and inter multiples of 128, got dim ", dim, ", inter ", inter);
  DSV32_CHECK(tokens * k < (std::int64_t{1} << 31), invalid_argument, "CUDA grouped experts: ", tokens, " tokens x ", k,
              " experts exceed 32-bit row indices");
  GroupedExpertPlan p;
  p.max_rows = tokens * k;
  p.max_row_tiles = ceil_div(p.max_rows, kGroupedTile) + std::min(n_local, p.max_rows);
  p.row_blocks = std::clamp<std::int64_t>(p.max_row_tiles, 1, kMaxGridBlocks);
  p.gate_col_tiles = ceil_div(inter, kGroupedTile);
  p.down_col_tiles = ceil_div(dim, kGroupedTile);
  p.fp8 = fp8;
  return p;
}

/// @}

}  // namespace dsv32::cuda
