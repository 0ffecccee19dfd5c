/// \file
/// \brief cuBLASLt products of the CUDA backend: a GemmKey (plan.hpp) turned into cuBLASLt descriptors
///        once, the heuristic's algorithm cached per key in the context, and the product run on the
///        context's stream with its workspace.
///
/// Host header (CUDA runtime and cuBLASLt; no kernels): reached only through <dsv32/cuda.hpp>.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "dsv32/backend/cuda/check.hpp"
#include "dsv32/backend/cuda/handles.hpp"
#include "dsv32/backend/cuda/memory.hpp"
#include "dsv32/backend/cuda/plan.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// \brief The CUDA data type of a GemmType.
inline cudaDataType_t cuda_type(GemmType t) noexcept {
  switch (t) {
    case GemmType::f32: return CUDA_R_32F;
    case GemmType::e4m3: return CUDA_R_8F_E4M3;
    case GemmType::bf16: break;
  }
  return CUDA_R_16BF;
}

/// \brief cuBLASLt's scale mode of a GemmScale.
inline cublasLtMatmulMatrixScale_t lt_scale_mode(GemmScale s) noexcept {
  switch (s) {
    case GemmScale::vec128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case GemmScale::blk128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case GemmScale::none: break;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

namespace detail {
template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
  check_cublas(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value), what, __FILE__, __LINE__);
}

/// A column-major layout of `rows` x `cols` with leading dimension ld (and a batch when key.batch > 1).
inline LtMatrixLayout make_layout(GemmType t, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t batch,
                                  std::int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  DSV32_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(t), static_cast<std::uint64_t>(rows),
                                                static_cast<std::uint64_t>(cols), ld));
  LtMatrixLayout owned(l);
  if (batch > 1) {
    const std::int32_t count = static_cast<std::int32_t>(batch);
    DSV32_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    DSV32_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return owned;
}
}  // namespace detail

/// \brief Prepares (descriptors and heuristic) the product of `key`: D[m, n] = op(A) op(B) in f32
///        compute, column-major, A of op T ([k, m] stored, ld lda), B of op N ([k, n], ld ldb), D [m, n]
///        (ld ldd); the heuristic is asked for algorithms fitting the context's workspace and the
///        operands' alignments. `has_algo` is false when it returned none.
inline CachedMatmul prepare_matmul(ExecutionContext<Cuda>& ctx, const GemmKey& key) {
  CachedMatmul m;
  cublasLtMatmulDesc_t desc = nullptr;
  DSV32_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  m.desc = LtMatmulDesc(desc);
  const cublasOperation_t ta = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  detail::set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, ta, "cublasLtMatmulDescSetAttribute(TRANSA)");
  detail::set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, tb, "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (key.a_scale != GemmScale::none) {
    const cublasLtMatmulMatrixScale_t a_mode = lt_scale_mode(key.a_scale), b_mode = lt_scale_mode(key.b_scale);
    detail::set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode, "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)");
    detail::set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode, "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)");
    // DeepSeek's scaling needs the exact per-block accumulation: fast accumulation is rejected anyway
    const std::int8_t fast = 0;
    detail::set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast, "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
  }
  // op(A) is m x k: A stored k x m (op T) or m x k (op N); op(B) is k x n
  m.a = key.transpose_a ? detail::make_layout(key.a_type, key.k, key.m, key.lda, key.batch, key.stride_a)
                        : detail::make_layout(key.a_type, key.m, key.k, key.lda, key.batch, key.stride_a);
  m.b = key.transpose_b ? detail::make_layout(key.b_type, key.n, key.k, key.ldb, key.batch, key.stride_b)
                        : detail::make_layout(key.b_type, key.k, key.n, key.ldb, key.batch, key.stride_b);
  m.d = detail::make_layout(key.d_type, key.m, key.n, key.ldd, key.batch, key.stride_d);

  cublasLtMatmulPreference_t pref = nullptr;
  DSV32_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const LtPreference owned_pref(pref);
  const std::uint64_t ws = ctx.workspace_bytes();
  DSV32_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::uint32_t aligns[3] = {key.align_a, key.align_b, key.align_d};
  DSV32_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aligns[0],
                                                          sizeof aligns[0]));
  DSV32_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &aligns[1],
                                                          sizeof aligns[1]));
  DSV32_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &aligns[2],
                                                          sizeof aligns[2]));
  DSV32_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &aligns[2],
                                                          sizeof aligns[2]));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt(), desc, m.a.get(), m.b.get(), m.d.get(),
                                                               m.d.get(), pref, 1, &result, &found);
  // NOT_SUPPORTED (and INVALID_VALUE, for a combination of types, layouts and scale modes this cuBLASLt
  // does not take) is how the heuristic says "no algorithm for this problem": the caller falls back to
  // dsv32's reference kernel and counts it (ExecutionContext::gemm_fallbacks()). Anything else is an error.
  m.heuristic_status = status;
  if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE) DSV32_CUBLAS_CHECK(status);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    m.algo = result.algo;
    m.workspace = result.workspaceSize;
    m.has_algo = true;
  }
  return m;
}

/// \brief Runs the product of `key` on the context's stream: D = op(A) op(B) (alpha 1, beta 0), with the
///        FP8 scale pointers when the key has scale modes. Prepares and caches the matmul on first use.
/// \return false (nothing enqueued) when cuBLASLt has no algorithm for the key
inline bool run_matmul(ExecutionContext<Cuda>& ctx, const GemmKey& key, const void* a, const void* b, void* d,
                       const float* a_scale = nullptr, const float* b_scale = nullptr) {
  CachedMatmul* m = ctx.find_matmul(key);
  if (!m) m = &ctx.store_matmul(key, prepare_matmul(ctx, key));
  if (!m->has_algo) return false;
  if (key.a_scale != GemmScale::none) {
    detail::set_desc(m->desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale,
                     "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
    detail::set_desc(m->desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale,
                     "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
  }
  const float alpha = 1.0f, beta = 0.0f;
  DSV32_CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt(), m->desc.get(), &alpha, a, m->a.get(), b, m->b.get(), &beta, d,
                                    m->d.get(), d, m->d.get(), &m->algo, ctx.workspace(), ctx.workspace_bytes(),
                                    ctx.stream()));
  return true;
}

/// @}

}  // namespace dsv32::cuda
