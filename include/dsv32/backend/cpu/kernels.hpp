/// \file
/// \brief Kernels<Cpu>: the complete list of operations a backend provides to the layers (the Kernels
///        contract), implemented for the CPU with Eigen (see the cpu/ headers for each operation).
///
/// The layers call only these functions, Memory<Backend> and the communicator. Every function takes
/// the model's ExecutionContext first and views of the backend's memory space (here Host); a backend
/// implements the same static functions with the same shapes and rounding points, ordered on its
/// context (a CUDA stream), and reads nothing back to the host. docs/backends.md lists the contract
/// with each entry's numerics; testing::HostInvisible checks that a backend's layers never touch its
/// memory from the host.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/attention.hpp"
#include "dsv32/backend/cpu/elementwise.hpp"
#include "dsv32/backend/cpu/gemm.hpp"
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/backend/cpu/moe.hpp"
#include "dsv32/backend/cpu/quant.hpp"
#include "dsv32/backend/cpu/rope.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/backend/kernels_contract.hpp"

/// \namespace dsv32::cpu
/// \brief The CPU backend's kernels as free functions on host pointers and views; Kernels<Cpu>
///        forwards to them. Host memory only; OpenMP parallelizes the loops worth a thread team.

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief The CPU backend's operations: thin forwards to the cpu:: functions, whose documentation
///        (shapes, dtypes, rounding) each member repeats or refers to.
template <>
struct Kernels<Cpu> {
  using Context = ExecutionContext<Cpu>;  ///< the context every call takes
  /// \brief A matrix view of the backend's memory.
  template <class T>
  using Mat = MatrixView<T, Host>;
  /// \brief An array view of the backend's memory.
  template <class T>
  using Vec = VectorView<T, Host>;
  using Weight = WeightView<Host>;  ///< a weight of the backend's memory

  // [n] ids -> [n, dim]
  /// \brief Embedding rows of the tokens in [first_id, first_id + table.rows); other tokens get zero
  ///        rows (cpu::embedding()).
  /// \param ctx the model's context \param tokens [n] ids \param table [part_vocab, dim] bf16
  /// \param first_id id of the table's row 0 \param out [n, dim] bf16
  static void embedding(Context& ctx, Vec<const std::int32_t> tokens, Mat<const bf16> table, std::int64_t first_id,
                        Mat<bf16> out) {
    (void)ctx;
    cpu::embedding(tokens.data, tokens.size, table, first_id, out);
  }
  // [rows, dim] -> [rows, dim]
  /// \brief y = bf16(w * (x * rsqrt(mean(x^2) + eps))), in f32 (cpu::rms_norm()).
  /// \param ctx the model's context \param x [rows, dim] \param w [dim] f32 \param eps epsilon
  /// \param y [rows, dim] (may alias x)
  static void rms_norm(Context& ctx, Mat<const bf16> x, Vec<const float> w, float eps, Mat<bf16> y) {
    (void)ctx;
    cpu::rms_norm(x, w.data, eps, y);
  }
  // [rows, dim], residual [rows, dim] in/out -> [rows, dim]
  /// \brief s = f32(x) + f32(residual); residual = bf16(s); y = RMSNorm(s) (cpu::rms_norm_residual()).
  /// \param ctx the model's context \param x [rows, dim] \param residual [rows, dim], updated
  /// \param w [dim] f32 \param eps epsilon \param y [rows, dim] (may alias x)
  static void rms_norm_residual(Context& ctx, Mat<const bf16> x, Mat<bf16> residual, Vec<const float> w, float eps,
                                Mat<bf16> y) {
    (void)ctx;
    cpu::rms_norm_residual(x, residual, w.data, eps, y);
  }
  // [rows, dim] -> [rows, dim]
  /// \brief y = bf16((x - mean) * rsqrt(var + eps) * w + b), in f32 (cpu::layer_norm()).
  /// \param ctx the model's context \param x [rows, dim] \param w, b [dim] f32 \param eps epsilon
  /// \param y [rows, dim] (may alias x)
  static void layer_norm(Context& ctx, Mat<const bf16> x, Vec<const float> w, Vec<const float> b, float eps,
                         Mat<bf16> y) {
    (void)ctx;
    cpu::layer_norm(x, w.data, b.data, eps, y);
  }
  // [M, in] x [out, in]^T -> [M, out] bf16
  /// \brief y = bf16(x W^T), f32 accumulation; FP8 weights against 1x128-quantized x with exact
  ///        block dot products (cpu::linear()).
  /// \param ctx the model's context \param x [M, in] bf16 (rows may be strided) \param w [out, in]
  /// \param fmt activation scale format for FP8 weights \param y [M, out] bf16
  static void linear(Context& ctx, Mat<const bf16> x, const Weight& w, ScaleFmt fmt, Mat<bf16> y) {
    cpu::linear(x, w, fmt, y, cpu::resolve(ctx.kernels));
  }
  // [M, in] x [out, in]^T -> [M, out] f32
  /// \brief y = f32(x) f32(W)^T, all f32 (gate scores, the head) (cpu::linear_f32()).
  /// \param ctx the model's context \param x [M, in] bf16 (rows may be strided) \param w [out, in]
  ///        BF16 or F32 \param y [M, out] f32
  static void linear_f32(Context& ctx, Mat<const bf16> x, const Weight& w, Mat<float> y) {
    cpu::linear_f32(x, w, y, cpu::resolve(ctx.kernels));
  }
  // [rows, cols] -> codes [rows, cols], scales [rows, cols / 128]
  /// \brief Quantizes bf16 activations to E4M3 per 1x128 block (cpu::act_quant()).
  /// \param ctx   the model's context
  /// \param x     [rows, cols] bf16, cols a multiple of 128
  /// \param fmt   activation scale format
  /// \param codes [rows, cols] E4M3 codes: e4m3(clamp(x / s, -448, 448))
  /// \param s     [rows, cols / 128] f32 block scales
  static void act_quant(Context& ctx, Mat<const bf16> x, ScaleFmt fmt, Mat<std::uint8_t> codes, Mat<float> s) {
    cpu::act_quant(x, fmt, codes, s, cpu::resolve(ctx.kernels));
  }
  // in place, rows (token, head) of [tokens * heads, rope_dim]
  /// \brief Rotates rows in place in f32, rounding to bf16 (cpu::rope()): row r belongs to token
  ///        r / heads, which sits at position positions[r / heads].
  /// \param ctx the model's context
  /// \param x [tokens * heads, rope_dim] bf16, rows `x.stride` apart (the RoPE slice of each head)
  /// \param heads heads per token \param positions [tokens] each token's position
  /// \param cos, sin [max_seq_len, rope_dim / 2] f32 tables \param interleaved pairs (2i, 2i+1) or (i, i + d/2)
  static void rope(Context& ctx, Mat<bf16> x, std::int64_t heads, Vec<const std::int32_t> positions,
                   Mat<const float> cos, Mat<const float> sin, bool interleaved) {
    (void)ctx;
    cpu::rope(x.data, x.rows / heads, heads * x.stride, heads, x.stride, x.cols, positions.data, cos.data, sin.data,
              interleaved);
  }
  // in place, [rows, n]
  /// \brief In-place Walsh-Hadamard transform of each row scaled by n^-0.5, f32 inside (cpu::hadamard()).
  /// \param ctx the model's context \param x [rows, n] bf16, n a power of two
  static void hadamard(Context& ctx, Mat<bf16> x) {
    (void)ctx;
    cpu::hadamard(x);
  }
  // [rows, n], [rows, n] -> [rows, n]
  /// \brief out = bf16(silu(f32(a)) * f32(b)) (cpu::silu_mul()).
  /// \param ctx the model's context \param a, b [rows, n] bf16 \param out [rows, n] (may alias a)
  static void silu_mul(Context& ctx, Mat<const bf16> a, Mat<const bf16> b, Mat<bf16> out) {
    (void)ctx;
    cpu::silu_mul(a, b, out);
  }
  // q [T * H, D], paged k cache [pool rows, D] -> selected [T, k], count [T]
  /// \brief The lightning indexer's selection for every query of a ragged pass.
  ///
  /// Query i of sequence pages.sequence[i] sits at position q = pages.position[i] and sees its
  /// sequence's cached keys at positions [0, q] (cache rows through the block table; this pass's keys
  /// written first). Head weights are w_h = bf16(f32(head_weights[i, h]) * head_scale); with one
  /// 128-block (D = 128, the model's) score[t] = sum_h relu(q_h . k_t) * ((w_h * q_scale_h) * dim_scale)
  /// * k_scale_t in f32 with exact E4M3 products — the reference's expression; with several blocks the
  /// dot product is dequantized per block (sum_b (q_hb . k_tb) * q_scale_hb * k_scale_tb) before the
  /// relu, then weighted by w_h * dim_scale. The top min(k, q + 1) positions are kept, highest first
  /// (ties: lower position first). A query's picks depend on nothing else in the pass.
  /// \param ctx          the model's context
  /// \param q_codes      [T * H, D] E4M3 codes of the queries
  /// \param q_scale      [T * H, D / 128] f32 query scales
  /// \param head_weights [T, H] bf16: weights_proj(x)
  /// \param head_scale   n_heads^-0.5
  /// \param dim_scale    index_head_dim^-0.5
  /// \param k_codes      [pool rows, D] E4M3 key cache
  /// \param k_scale      [pool rows, D / 128] f32 key scales
  /// \param pages        each query's sequence and position, the block table
  /// \param selected     [T, k] positions (k = its columns); count[i] of row i valid
  /// \param count        [T] how many positions each query selected
  static void indexer_topk(Context& ctx, Mat<const std::uint8_t> q_codes, Mat<const float> q_scale,
                           Mat<const bf16> head_weights, float head_scale, float dim_scale,
                           Mat<const std::uint8_t> k_codes, Mat<const float> k_scale, const CachePages<Host>& pages,
                           Mat<std::int32_t> selected, Vec<std::int32_t> count) {
    const std::int64_t T = head_weights.rows, H = head_weights.cols, D = q_codes.cols;
    const std::int64_t blocks = q_scale.cols;
    // The CPU scorer takes one f32 weight per head: with one block the reference's (w * q_scale) * d^-0.5,
    // with several w * d^-0.5 (it applies the block scales itself).
    std::vector<float> weight(static_cast<std::size_t>(T * H));
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const float w = round_bf16(static_cast<float>(head_weights.row(t)[h]) * head_scale);
        weight[t * H + h] = blocks == 1 ? w * q_scale.row(t * H + h)[0] * dim_scale : w * dim_scale;
      }
    cpu::indexer_topk(q_codes.data, weight.data(), q_scale.data, T, H, D, k_codes.data, k_scale.data, pages,
                      selected.stride, selected.data, count.data, cpu::resolve(ctx.kernels));
  }
  // one sequence: q [S, H (nope + rope)], kv [T, H (nope + v)], k_pe [T, rope] -> [S, H v]
  /// \brief MLA prefill attention of one sequence over its selected positions (cpu::sparse_attention()):
  ///        fp32 scores times `scale`, fp32 softmax, probabilities rounded to bf16, bf16 output.
  /// \param ctx the model's context
  /// \param q        [S, H * (nope + rope)] bf16 queries (q_pe rotated)
  /// \param kv       [T, H * (nope + v)] bf16: wkv_b applied to the sequence's cached latents
  /// \param k_pe     [T, rope] bf16 rotated key parts (the sequence's pe cache)
  /// \param heads    H \param nope qk_nope_head_dim \param v v_head_dim
  /// \param selected [S, k] positions; count[s] of them valid \param count [S] each in [1, k]
  /// \param scale    softmax scale \param out [S, H * v] bf16
  static void sparse_attention(Context& ctx, Mat<const bf16> q, Mat<const bf16> kv, Mat<const bf16> k_pe,
                               std::int64_t heads, std::int64_t nope, std::int64_t v, Mat<const std::int32_t> selected,
                               Vec<const std::int32_t> count, float scale, Mat<bf16> out) {
    cpu::sparse_attention(q.data, kv.data, k_pe.data, q.rows, heads, nope, k_pe.cols, v, selected.data, count.data,
                          selected.stride, scale, out.data, cpu::resolve(ctx.kernels));
  }
  // T queries of a ragged pass: q_lat [T H, C], q_pe [T H, rope], paged caches -> [T H, C]
  /// \brief MLA attention in the absorbed (latent) form for every query of a ragged pass
  ///        (cpu::latent_attention()): query i attends to its selected positions of its own sequence.
  /// \param ctx        the model's context
  /// \param q_lat      [T * H, C] bf16 absorbed queries
  /// \param q_pe       [T * H, rope] bf16 rotated query parts (rows may be strided)
  /// \param kv_cache   [pool rows, C] bf16 latent cache
  /// \param pe_cache   [pool rows, rope] bf16
  /// \param pages      each query's sequence, the block table
  /// \param heads      H
  /// \param selected   [T, k] positions \param count [T] valid positions per row, each >= 1
  /// \param scale      softmax scale \param out [T * H, C] bf16 latent output
  static void latent_attention(Context& ctx, Mat<const bf16> q_lat, Mat<const bf16> q_pe, Mat<const bf16> kv_cache,
                               Mat<const bf16> pe_cache, const CachePages<Host>& pages, std::int64_t heads,
                               Mat<const std::int32_t> selected, Vec<const std::int32_t> count, float scale,
                               Mat<bf16> out) {
    cpu::latent_attention(q_lat.data, q_pe.data, q_pe.stride, kv_cache.data, pe_cache.data, pages, heads, q_lat.cols,
                          pe_cache.cols, selected.data, selected.stride, count.data, scale, out.data,
                          cpu::resolve(ctx.kernels));
  }
  // [T H, nope] (strided rows of q) -> [T H, C]
  /// \brief Projects q_nope into the latent space through wkv_b's key rows (cpu::absorb_query()):
  ///        q_lat[t, h] = bf16(q_nope[t, h] . W[h (nope + v) + d, :]), wkv_b dequantized as the reference does.
  /// \param ctx the model's context
  /// \param q     [T * H, nope + rope] bf16 (only the first nope columns of each row are read)
  /// \param wkv_b [H (nope + v), C] \param heads H \param nope qk_nope_head_dim \param v v_head_dim
  /// \param q_lat [T * H, C] bf16
  static void absorb_query(Context& ctx, Mat<const bf16> q, const Weight& wkv_b, std::int64_t heads, std::int64_t nope,
                           std::int64_t v, Mat<bf16> q_lat) {
    cpu::absorb_query(q.data, q.rows / heads, heads, nope, q.stride - nope, v, wkv_b, q_lat.data,
                      cpu::resolve(ctx.kernels));
  }
  // [T H, C] -> [T H, v]
  /// \brief Maps latent attention outputs to values through wkv_b's value rows (cpu::project_values()).
  /// \param ctx the model's context \param o_lat [T * H, C] bf16 \param wkv_b [H (nope + v), C]
  /// \param heads H \param nope qk_nope_head_dim \param out [T * H, v] bf16
  static void project_values(Context& ctx, Mat<const bf16> o_lat, const Weight& wkv_b, std::int64_t heads,
                             std::int64_t nope, Mat<bf16> out) {
    cpu::project_values(o_lat.data, o_lat.rows / heads, heads, nope, out.cols, wkv_b, out.data,
                        cpu::resolve(ctx.kernels));
  }
  // logits [T, E] -> weights [T, k], experts [T, k]
  /// \brief The gate's routing decision (cpu::route()).
  /// \param ctx the model's context \param logits [T, E] f32 \param bias [E] f32 or empty
  /// \param p the routing fields \param weights [T, k] f32 \param experts [T, k] ids
  static void route(Context& ctx, Mat<const float> logits, Vec<const float> bias, const RoutingParams& p,
                    Mat<float> weights, Mat<std::int32_t> experts) {
    (void)ctx;
    cpu::route(logits, bias.empty() ? nullptr : bias.data, p, weights, experts);
  }
  // experts [T, k] -> rows [T k], row_weights [T k], offsets [n_local + 1]
  /// \brief Groups the call's (token, slot) pairs by the expert they chose (cpu::moe_plan()): for local
  ///        expert e (global id first_expert + e), rows[offsets[e], offsets[e + 1]) are its tokens in
  ///        increasing order and row_weights their routing weights; pairs choosing another rank's
  ///        experts are left out. offsets has n_local + 1 entries (offsets[0] = 0).
  /// \param ctx the model's context \param experts [T, k] ids \param weights [T, k] f32
  /// \param first_expert this rank's first expert \param rows [T * k] \param row_weights [T * k]
  /// \param offsets [n_local + 1]
  static void moe_plan(Context& ctx, Mat<const std::int32_t> experts, Mat<const float> weights,
                       std::int64_t first_expert, Vec<std::int32_t> rows, Vec<float> row_weights,
                       Vec<std::int32_t> offsets) {
    (void)ctx;
    cpu::moe_plan(experts, weights, first_expert, rows.data, row_weights.data, offsets.data, offsets.size - 1);
  }
  // [T, dim] -> [n, dim]
  /// \brief out[i] = x[rows[i]] (cpu::gather_rows()).
  /// \param ctx the model's context \param x [T, dim] \param rows [n] \param out [n, dim]
  static void gather_rows(Context& ctx, Mat<const bf16> x, Vec<const std::int32_t> rows, Mat<bf16> out) {
    (void)ctx;
    cpu::gather_rows(x, rows.data, rows.size, out);
  }
  // [n, d] -> rows of [R, d]
  /// \brief dst[rows[i]] = src[i] for i < n (cpu::scatter_rows()): a pass's latents, keys and
  ///        scales into their cache slots. The rows must be distinct.
  /// \tparam T bf16, std::uint8_t or float
  /// \param ctx the model's context \param src [n, d] (rows may be strided) \param rows [n]
  /// \param dst [R, d]
  template <class T>
  static void scatter_rows(Context& ctx, Mat<const T> src, Vec<const std::int32_t> rows, Mat<T> dst) {
    (void)ctx;
    cpu::scatter_rows(src, rows.data, dst);
  }
  // y[rows[i]] += src[i] * weight[i]
  /// \brief y[rows[i]] += f32(src[i]) * weight[i] in order of i (cpu::scatter_add()); empty rows mean
  ///        row i, empty weights mean 1.
  /// \param ctx the model's context \param src [n, dim] bf16 \param rows [n] or empty
  /// \param weight [n] f32 or empty \param y [T, dim] f32
  static void scatter_add(Context& ctx, Mat<const bf16> src, Vec<const std::int32_t> rows, Vec<const float> weight,
                          Mat<float> y) {
    (void)ctx;
    cpu::scatter_add(src, rows.empty() ? nullptr : rows.data, weight.empty() ? nullptr : weight.data, y);
  }
  /// \brief out = bf16(x) (cpu::round_to_bf16()). \param ctx the model's context
  /// \param x [rows, n] f32 \param out [rows, n] bf16
  static void round_to_bf16(Context& ctx, Mat<const float> x, Mat<bf16> out) {
    (void)ctx;
    cpu::round_to_bf16(x, out);
  }
  /// \brief out = f32(x), exact (cpu::widen_to_f32()). \param ctx the model's context
  /// \param x [rows, n] bf16 \param out [rows, n] f32
  static void widen_to_f32(Context& ctx, Mat<const bf16> x, Mat<float> out) {
    (void)ctx;
    cpu::widen_to_f32(x, out);
  }
};

static_assert(KernelsContract<Cpu>, "Kernels<Cpu> must provide every operation of the Kernels contract "
              "(backend/kernels_contract.hpp)");

/// @}

}  // namespace dsv32
