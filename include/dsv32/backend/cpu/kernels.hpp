/// \file
/// \brief Kernels<Cpu>: the complete list of operations a backend provides to the layers, implemented
///        for the CPU with Eigen (see the cpu/ headers for each operation's definition).
///
/// The layers call only these functions and Memory<Backend>; a backend implements the same static
/// functions with the same shapes (pointers then address that backend's memory).
#pragma once

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/attention.hpp"
#include "dsv32/backend/cpu/elementwise.hpp"
#include "dsv32/backend/cpu/gemm.hpp"
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/backend/cpu/moe.hpp"
#include "dsv32/backend/cpu/quant.hpp"
#include "dsv32/backend/cpu/rope.hpp"

/// \namespace dsv32::cpu
/// \brief The CPU backend's kernels as free functions on raw pointers and MatrixView; Kernels<Cpu>
///        forwards to them. Host memory only; OpenMP parallelizes the loops worth a thread team.

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief The CPU backend's operations: thin forwards to the cpu:: functions, whose documentation
///        (shapes, dtypes, rounding) each member repeats.
template <>
struct Kernels<Cpu> {
  using RoutingParams = cpu::RoutingParams;  ///< the gate's routing fields, as route() takes them

  // [n] ids -> [n, dim]
  /// \copydoc dsv32::cpu::embedding
  static void embedding(const std::int32_t* tokens, std::int64_t n, MatrixView<const bf16> table, std::int64_t first_id,
                        MatrixView<bf16> out) { cpu::embedding(tokens, n, table, first_id, out); }
  // [rows, dim] -> [rows, dim]
  /// \copydoc dsv32::cpu::rms_norm
  static void rms_norm(MatrixView<const bf16> x, const float* w, float eps, MatrixView<bf16> y) {
    cpu::rms_norm(x, w, eps, y);
  }
  // [rows, dim], residual [rows, dim] in/out -> [rows, dim]
  /// \copydoc dsv32::cpu::rms_norm_residual
  static void rms_norm_residual(MatrixView<const bf16> x, MatrixView<bf16> residual, const float* w, float eps,
                                MatrixView<bf16> y) { cpu::rms_norm_residual(x, residual, w, eps, y); }
  // [rows, dim] -> [rows, dim]
  /// \copydoc dsv32::cpu::layer_norm
  static void layer_norm(MatrixView<const bf16> x, const float* w, const float* b, float eps, MatrixView<bf16> y) {
    cpu::layer_norm(x, w, b, eps, y);
  }
  // [M, in] x [out, in]^T -> [M, out] bf16
  /// \copydoc dsv32::cpu::linear
  static void linear(MatrixView<const bf16> x, const WeightView& w, ScaleFmt fmt, MatrixView<bf16> y) {
    cpu::linear(x, w, fmt, y);
  }
  // [M, in] x [out, in]^T -> [M, out] f32
  /// \copydoc dsv32::cpu::linear_f32
  static void linear_f32(MatrixView<const bf16> x, const WeightView& w, MatrixView<float> y) { cpu::linear_f32(x, w, y); }
  // [rows, cols] -> codes [rows, cols], scales [rows, cols / 128]
  /// \brief Quantizes bf16 activations to E4M3 per 1x128 block (cpu::act_quant()).
  /// \param x     [rows, cols] bf16, cols a multiple of 128
  /// \param fmt   activation scale format
  /// \param codes [rows, cols] E4M3 codes: e4m3(clamp(x / s, -448, 448))
  /// \param s     [rows, cols / 128] f32 block scales
  static void act_quant(MatrixView<const bf16> x, ScaleFmt fmt, MatrixView<std::uint8_t> codes, MatrixView<float> s) {
    cpu::act_quant(x, fmt, codes, s);
  }
  // in place, [tokens, heads, rope_dim] strided
  /// \copydoc dsv32::cpu::rope
  static void rope(bf16* data, std::int64_t tokens, std::int64_t token_stride, std::int64_t heads,
                   std::int64_t head_stride, std::int64_t rope_dim, std::int64_t seq_len, std::int64_t start_pos,
                   const float* cos, const float* sin, bool interleaved) {
    cpu::rope(data, tokens, token_stride, heads, head_stride, rope_dim, seq_len, start_pos, cos, sin, interleaved);
  }
  // in place, [rows, n]
  /// \copydoc dsv32::cpu::hadamard
  static void hadamard(MatrixView<bf16> x) { cpu::hadamard(x); }
  // [rows, n], [rows, n] -> [rows, n]
  /// \copydoc dsv32::cpu::silu_mul
  static void silu_mul(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> out) {
    cpu::silu_mul(a, b, out);
  }
  // one sequence: q [S, H, D], k cache [T, D] -> selected [S, k], count [S]
  /// \copydoc dsv32::cpu::indexer_topk
  static void indexer_topk(const std::uint8_t* q_codes, const float* q_weight, const float* q_scale, std::int64_t S,
                           std::int64_t H, std::int64_t D, const std::uint8_t* k_codes, const float* k_scale,
                           std::int64_t start_pos, std::int64_t k, std::int32_t* selected, std::int64_t* count) {
    cpu::indexer_topk(q_codes, q_weight, q_scale, S, H, D, k_codes, k_scale, start_pos, k, selected, count);
  }
  // one sequence: q [S, H, nope + rope], kv [T, H, nope + v], k_pe [T, rope] -> [S, H, v]
  /// \copydoc dsv32::cpu::sparse_attention
  static void sparse_attention(const bf16* q, const bf16* kv, const bf16* k_pe, std::int64_t S, std::int64_t H,
                               std::int64_t nope, std::int64_t rope, std::int64_t v, const std::int32_t* selected,
                               const std::int64_t* count, std::int64_t k_max, float scale, bf16* out) {
    cpu::sparse_attention(q, kv, k_pe, S, H, nope, rope, v, selected, count, k_max, scale, out);
  }
  // one token: q_lat [H, C], q_pe [H, rope], caches [T, C] and [T, rope] -> [H, C]
  /// \copydoc dsv32::cpu::latent_attention
  static void latent_attention(const bf16* q_lat, const bf16* q_pe, std::int64_t q_pe_stride, const bf16* kv_cache,
                               const bf16* pe_cache, std::int64_t H, std::int64_t C, std::int64_t rope,
                               const std::int32_t* selected, std::int64_t n, float scale, bf16* out) {
    cpu::latent_attention(q_lat, q_pe, q_pe_stride, kv_cache, pe_cache, H, C, rope, selected, n, scale, out);
  }
  // [T, H, nope + rope] -> [T, H, C]
  /// \copydoc dsv32::cpu::absorb_query
  static void absorb_query(const bf16* q, std::int64_t T, std::int64_t H, std::int64_t nope, std::int64_t rope,
                           std::int64_t v, const WeightView& wkv_b, bf16* q_lat) {
    cpu::absorb_query(q, T, H, nope, rope, v, wkv_b, q_lat);
  }
  // [T, H, C] -> [T, H, v]
  /// \copydoc dsv32::cpu::project_values
  static void project_values(const bf16* o_lat, std::int64_t T, std::int64_t H, std::int64_t nope, std::int64_t v,
                             const WeightView& wkv_b, bf16* out) {
    cpu::project_values(o_lat, T, H, nope, v, wkv_b, out);
  }
  // logits [T, E] -> weights [T, k], experts [T, k]
  /// \copydoc dsv32::cpu::route
  static void route(MatrixView<const float> logits, const float* bias, const RoutingParams& p,
                    MatrixView<float> weights, MatrixView<std::int32_t> experts) {
    cpu::route(logits, bias, p, weights, experts);
  }
  // [T, dim] -> [n, dim]
  /// \copydoc dsv32::cpu::gather_rows
  static void gather_rows(MatrixView<const bf16> x, const std::int32_t* rows, std::int64_t n, MatrixView<bf16> out) {
    cpu::gather_rows(x, rows, n, out);
  }
  // y[rows[i]] += src[i] * weight[i]
  /// \copydoc dsv32::cpu::scatter_add
  static void scatter_add(MatrixView<const bf16> src, const std::int32_t* rows, const float* weight,
                          MatrixView<float> y) { cpu::scatter_add(src, rows, weight, y); }
  /// \copydoc dsv32::cpu::round_to_bf16
  static void round_to_bf16(MatrixView<const float> x, MatrixView<bf16> out) { cpu::round_to_bf16(x, out); }
  /// \copydoc dsv32::cpu::widen_to_f32
  static void widen_to_f32(MatrixView<const bf16> x, MatrixView<float> out) { cpu::widen_to_f32(x, out); }
};

/// @}

}  // namespace dsv32
