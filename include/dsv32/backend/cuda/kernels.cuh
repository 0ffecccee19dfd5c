/// \file
/// \brief Kernels<Cuda>: the Kernels contract (backend/cpu/kernels.hpp, docs/backends.md) on an NVIDIA
///        GPU — cuBLASLt for the linear layers, dsv32's kernels for the rest — every call ordered on the
///        context's stream, nothing read back to the host.
///
/// Each member takes the same views as Kernels<Cpu> (of the device space) and rounds where the CPU
/// backend rounds; the header of each kernel says what differs (summation order inside f32 dot
/// products and sums) and docs/cuda.md states each kernel's tolerance against the CPU backend.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cuda/attention.cuh"
#include "dsv32/backend/cuda/elementwise.cuh"
#include "dsv32/backend/cuda/experts.cuh"
#include "dsv32/backend/cuda/gemm.cuh"
#include "dsv32/backend/cuda/memory.hpp"
#include "dsv32/backend/cuda/moe.cuh"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/backend/kernels_contract.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief The CUDA backend's operations (see Kernels<Cpu> for each one's shapes and numerics).
template <>
struct Kernels<Cuda> {
  using Context = ExecutionContext<Cuda>;  ///< the context every call takes
  using Space = cuda::DeviceSpace;         ///< the memory space of every view
  /// \brief A matrix view of device memory.
  template <class T>
  using Mat = MatrixView<T, Space>;
  /// \brief An array view of device memory.
  template <class T>
  using Vec = VectorView<T, Space>;
  using Weight = WeightView<Space>;  ///< a weight in device memory

 private:
  using bits = cuda::bf16_bits;
  static const bits* b16(const bf16* p) noexcept { return reinterpret_cast<const bits*>(p); }
  static bits* b16(bf16* p) noexcept { return reinterpret_cast<bits*>(p); }
  static void check_linear(Mat<const bf16> x, const Weight& w, std::int64_t y_rows, std::int64_t y_cols) {
    DSV32_CHECK(x.cols == w.in && y_cols == w.out && y_rows == x.rows, invalid_argument, "CUDA linear: input [", x.rows,
                ", ", x.cols, "] and output [", y_rows, ", ", y_cols, "] do not fit weight [", w.out, ", ", w.in, "]");
  }

 public:
  // [n] ids -> [n, dim]
  /// \brief Embedding rows of the tokens in [first_id, first_id + table.rows), zero rows otherwise.
  static void embedding(Context& ctx, Vec<const std::int32_t> tokens, Mat<const bf16> table, std::int64_t first_id,
                        Mat<bf16> out) {
    cuda::launch_embedding(ctx, tokens.data, tokens.size, b16(table.data), table.rows, table.stride, first_id, out.cols,
                           b16(out.data), out.stride);
  }
  // [rows, dim] -> [rows, dim]
  /// \brief y = bf16(w * (x * rsqrt(mean(x^2) + eps))), in f32.
  static void rms_norm(Context& ctx, Mat<const bf16> x, Vec<const float> w, float eps, Mat<bf16> y) {
    cuda::launch_rms_norm(ctx, b16(x.data), x.stride, nullptr, 0, w.data, eps, x.rows, x.cols, b16(y.data), y.stride);
  }
  // [rows, dim], residual [rows, dim] in/out -> [rows, dim]
  /// \brief s = f32(x) + f32(residual); residual = bf16(s); y = RMSNorm(s).
  static void rms_norm_residual(Context& ctx, Mat<const bf16> x, Mat<bf16> residual, Vec<const float> w, float eps,
                                Mat<bf16> y) {
    cuda::launch_rms_norm(ctx, b16(x.data), x.stride, b16(residual.data), residual.stride, w.data, eps, x.rows, x.cols,
                          b16(y.data), y.stride);
  }
  // [rows, dim] -> [rows, dim]
  /// \brief y = bf16((x - mean) * rsqrt(var + eps) * w + b), in f32.
  static void layer_norm(Context& ctx, Mat<const bf16> x, Vec<const float> w, Vec<const float> b, float eps,
                         Mat<bf16> y) {
    cuda::launch_layer_norm(ctx, b16(x.data), x.stride, w.data, b.data, eps, x.rows, x.cols, b16(y.data), y.stride);
  }
  // [M, in] x [out, in]^T -> [M, out] bf16
  /// \brief y = bf16(x W^T) through cuBLASLt (FP8 weights: 1x128-quantized x, 128x128 weight scales).
  static void linear(Context& ctx, Mat<const bf16> x, const Weight& w, ScaleFmt fmt, Mat<bf16> y) {
    check_linear(x, w, y.rows, y.cols);
    cuda::LinearArgs a;
    a.x = b16(x.data);
    a.x_stride = x.stride;
    a.rows = x.rows;
    a.dtype = w.dtype;
    a.w = w.data;
    a.w_scale = w.scale;
    a.out = w.out;
    a.in = w.in;
    a.ue8m0 = fmt == ScaleFmt::ue8m0;
    a.y = y.data;
    a.y_stride = y.stride;
    cuda::run_linear(ctx, a);
  }
  // [M, in] x [out, in]^T -> [M, out] f32
  /// \brief y = f32(x) f32(W)^T (gate scores, the head); BF16 or F32 weights.
  static void linear_f32(Context& ctx, Mat<const bf16> x, const Weight& w, Mat<float> y) {
    check_linear(x, w, y.rows, y.cols);
    DSV32_CHECK(w.dtype == DType::BF16 || w.dtype == DType::F32, invalid_argument,
                "CUDA linear_f32: needs a BF16 or F32 weight, got ", dtype_name(w.dtype));
    cuda::LinearArgs a;
    a.x = b16(x.data);
    a.x_stride = x.stride;
    a.rows = x.rows;
    a.dtype = w.dtype;
    a.w = w.data;
    a.out = w.out;
    a.in = w.in;
    a.y = y.data;
    a.y_stride = y.stride;
    a.f32_result = true;
    cuda::run_linear(ctx, a);
  }
  // [rows, cols] -> codes [rows, cols], scales [rows, cols / 128]
  /// \brief Quantizes bf16 activations to E4M3 per 1x128 block.
  static void act_quant(Context& ctx, Mat<const bf16> x, ScaleFmt fmt, Mat<std::uint8_t> codes, Mat<float> s) {
    cuda::launch_act_quant(ctx, b16(x.data), x.stride, x.rows, x.rows, x.cols, fmt == ScaleFmt::ue8m0, codes.data,
                           codes.stride, s.data, s.stride, 1);
  }
  // in place, rows (token, head) of [tokens * heads, rope_dim]
  /// \brief Rotates rows in place in f32, rounding to bf16; row r sits at position positions[r / heads].
  static void rope(Context& ctx, Mat<bf16> x, std::int64_t heads, Vec<const std::int32_t> positions,
                   Mat<const float> cos, Mat<const float> sin, bool interleaved) {
    cuda::launch_rope(ctx, b16(x.data), x.stride, x.rows, x.cols, heads, positions.data, cos.data, sin.data, cos.stride,
                      interleaved);
  }
  // in place, [rows, n]
  /// \brief In-place Walsh-Hadamard transform of each row scaled by n^-0.5, f32 inside.
  static void hadamard(Context& ctx, Mat<bf16> x) { cuda::launch_hadamard(ctx, b16(x.data), x.stride, x.rows, x.cols); }
  // [rows, n], [rows, n] -> [rows, n]
  /// \brief out = bf16(silu(f32(a)) * f32(b)).
  static void silu_mul(Context& ctx, Mat<const bf16> a, Mat<const bf16> b, Mat<bf16> out) {
    cuda::launch_silu_mul(ctx, b16(a.data), a.stride, b16(b.data), b.stride, b16(out.data), out.stride, a.rows, a.cols);
  }
  // q [T * H, D], paged k cache [pool rows, D] -> selected [T, k], count [T]
  /// \brief The lightning indexer's selection for every query of a ragged pass (scores, then top-k), on
  ///        the device; query i sees positions [0, pages.position[i]] of its sequence.
  static void indexer_topk(Context& ctx, Mat<const std::uint8_t> q_codes, Mat<const float> q_scale,
                           Mat<const bf16> head_weights, float head_scale, float dim_scale,
                           Mat<const std::uint8_t> k_codes, Mat<const float> k_scale, const CachePages<Space>& pages,
                           Mat<std::int32_t> selected, Vec<std::int32_t> count) {
    cuda::IndexerArgs a;
    a.q_codes = q_codes.data;
    a.q_stride = q_codes.stride;
    a.q_scale = q_scale.data;
    a.qs_stride = q_scale.stride;
    a.head_weights = b16(head_weights.data);
    a.hw_stride = head_weights.stride;
    a.head_scale = head_scale;
    a.dim_scale = dim_scale;
    a.k_codes = k_codes.data;
    a.k_stride = k_codes.stride;
    a.k_scale = k_scale.data;
    a.ks_stride = k_scale.stride;
    a.T = head_weights.rows;
    a.H = head_weights.cols;
    a.D = q_codes.cols;
    a.block_table = pages.block_table.data;
    a.bt_stride = pages.block_table.stride;
    a.sequence = pages.sequence.data;
    a.position = pages.position.data;
    a.page_size = pages.page_size;
    a.max_visible = pages.max_visible;
    a.selected = selected.data;
    a.sel_stride = selected.stride;
    a.k = selected.cols;
    a.count = count.data;
    cuda::run_indexer(ctx, a);
  }
  // one sequence: q [S, H (nope + rope)], kv [T, H (nope + v)], k_pe [T, rope] -> [S, H v]
  /// \brief MLA prefill attention of one sequence over its selected positions.
  static void sparse_attention(Context& ctx, Mat<const bf16> q, Mat<const bf16> kv, Mat<const bf16> k_pe,
                               std::int64_t heads, std::int64_t nope, std::int64_t v, Mat<const std::int32_t> selected,
                               Vec<const std::int32_t> count, float scale, Mat<bf16> out) {
    cuda::launch_sparse_attention(ctx, b16(q.data), q.stride, q.rows, b16(kv.data), kv.stride, b16(k_pe.data),
                                  k_pe.stride, heads, nope, k_pe.cols, v, selected.data, selected.stride, selected.cols,
                                  count.data, scale, b16(out.data), out.stride);
  }
  // T queries of a ragged pass: q_lat [T H, C], q_pe [T H, rope], paged caches -> [T H, C]
  /// \brief MLA attention in the absorbed form for every query of a ragged pass, over its own
  ///        sequence's selected positions.
  static void latent_attention(Context& ctx, Mat<const bf16> q_lat, Mat<const bf16> q_pe, Mat<const bf16> kv_cache,
                               Mat<const bf16> pe_cache, const CachePages<Space>& pages, std::int64_t heads,
                               Mat<const std::int32_t> selected, Vec<const std::int32_t> count, float scale,
                               Mat<bf16> out) {
    const cuda::PagedArgs pg{pages.block_table.data, pages.block_table.stride, pages.sequence.data, pages.page_size};
    cuda::launch_latent_attention(ctx, b16(q_lat.data), q_lat.stride, b16(q_pe.data), q_pe.stride, b16(kv_cache.data),
                                  kv_cache.stride, b16(pe_cache.data), pe_cache.stride, pg, selected.rows, heads,
                                  q_lat.cols, pe_cache.cols, selected.data, selected.stride, selected.cols, count.data,
                                  scale, b16(out.data), out.stride);
  }
  // [T H, nope] (strided rows of q) -> [T H, C]
  /// \brief Projects q_nope into the latent space through wkv_b's key rows.
  static void absorb_query(Context& ctx, Mat<const bf16> q, const Weight& wkv_b, std::int64_t heads, std::int64_t nope,
                           std::int64_t v, Mat<bf16> q_lat) {
    const cuda::DeviceWeight w =
        cuda::device_weight(wkv_b.dtype, wkv_b.data, wkv_b.scale, wkv_b.out, wkv_b.in, "absorb_query");
    cuda::launch_absorb_query(ctx, b16(q.data), q.stride, q.rows, w, heads, nope, v, b16(q_lat.data));
  }
  // [T H, C] -> [T H, v]
  /// \brief Maps latent attention outputs to values through wkv_b's value rows.
  static void project_values(Context& ctx, Mat<const bf16> o_lat, const Weight& wkv_b, std::int64_t heads,
                             std::int64_t nope, Mat<bf16> out) {
    const cuda::DeviceWeight w =
        cuda::device_weight(wkv_b.dtype, wkv_b.data, wkv_b.scale, wkv_b.out, wkv_b.in, "project_values");
    cuda::launch_project_values(ctx, b16(o_lat.data), o_lat.rows, w, heads, nope, out.cols, b16(out.data), out.stride);
  }
  // logits [T, E] -> weights [T, k], experts [T, k]
  /// \brief The gate's routing decision.
  static void route(Context& ctx, Mat<const float> logits, Vec<const float> bias, const RoutingParams& p,
                    Mat<float> weights, Mat<std::int32_t> experts) {
    cuda::launch_route(ctx, logits.data, logits.stride, bias.empty() ? nullptr : bias.data, logits.rows, logits.cols,
                       route_fields(p), weights.data, weights.stride, experts.data, experts.stride);
  }
  // experts [T, k] -> rows [T k], row_weights [T k], offsets [n_local + 1]
  /// \brief Groups the call's (token, slot) pairs by local expert (see Kernels<Cpu>::moe_plan()).
  static void moe_plan(Context& ctx, Mat<const std::int32_t> experts, Mat<const float> weights,
                       std::int64_t first_expert, Vec<std::int32_t> rows, Vec<float> row_weights,
                       Vec<std::int32_t> offsets) {
    DSV32_CHECK(experts.contiguous() && weights.contiguous(), invalid_argument,
                "CUDA moe_plan: expert ids and weights must be contiguous [tokens, k]");
    cuda::launch_moe_plan(ctx, experts.data, weights.data, experts.rows, experts.cols, first_expert, offsets.size - 1,
                          rows.data, row_weights.data, offsets.data);
  }
  /// \brief The MoE layer runs its routed experts as one grouped call (expert_mlp_grouped()), reading no
  ///        routing data on the host (runs_grouped_experts<Cuda>).
  static constexpr bool grouped_experts = true;
  // x [T, dim], experts [T, k], plan rows / row_weights [T k], offsets [n_local + 1] -> sum [T, dim] f32 (added to)
  /// \brief sum[t] += sum over t's local experts e, in increasing e, of f32(MLP_e(x[t])) * weight: every
  ///        expert's w2(bf16(silu(f32(w1 x)) * f32(w3 x))) on its rows of the plan, with the plan read on
  ///        the device only (cuda::run_grouped_experts()). Scratch as ExpertGroupScratch, contiguous.
  static void expert_mlp_grouped(Context& ctx, Mat<const bf16> x, Mat<const std::int32_t> experts,
                                 std::int64_t first_expert, const ExpertGroupView<Space>& group,
                                 Vec<const std::int32_t> rows, Vec<const float> row_weights,
                                 Vec<const std::int32_t> offsets, const ExpertGroupScratch<Space>& s, Mat<float> sum) {
    const std::int64_t T = x.rows, k = experts.cols, R = T * k;
    const bool fp8 = group.dtype == DType::F8_E4M3;
    DSV32_CHECK(experts.contiguous() && experts.rows == T && x.cols == group.dim && sum.rows == T &&
                    sum.cols == group.dim && rows.size >= R && row_weights.size >= R && offsets.size == group.count + 1,
                invalid_argument, "CUDA expert_mlp_grouped: input [", x.rows, ", ", x.cols, "], experts [", experts.rows,
                ", ", experts.cols, "], plan of ", rows.size, " rows and ", offsets.size, " offsets, sum [", sum.rows,
                ", ", sum.cols, "] do not fit ", group.count, " experts of dim ", group.dim);
    auto fits = [](auto m, std::int64_t r, std::int64_t c) { return m.contiguous() && m.rows >= r && m.cols == c; };
    DSV32_CHECK(fits(s.hidden, R, group.inter) && fits(s.out, R, group.dim) && s.tiles.size >= group.count + 1 &&
                    s.order.size >= R &&
                    (!fp8 || (fits(s.x_codes, T, group.dim) && fits(s.x_scales, T, group.dim / kBlockSize) &&
                              fits(s.h_codes, R, group.inter) && fits(s.h_scales, R, group.inter / kBlockSize))),
                invalid_argument, "CUDA expert_mlp_grouped: scratch smaller than ", R, " grouped rows of ", group.inter,
                " and ", group.dim, " (contiguous)");
    cuda::GroupedExpertArgs a;
    a.x = b16(x.data);
    a.x_stride = x.stride;
    a.tokens = T;
    a.experts = experts.data;
    a.k = k;
    a.first_expert = first_expert;
    a.table = group.table;
    a.n_local = group.count;
    a.dtype = group.dtype;
    a.dim = group.dim;
    a.inter = group.inter;
    a.ue8m0 = group.fmt == ScaleFmt::ue8m0;
    a.rows = rows.data;
    a.row_weights = row_weights.data;
    a.offsets = offsets.data;
    a.x_codes = s.x_codes.data;
    a.x_scales = s.x_scales.data;
    a.hidden = b16(s.hidden.data);
    a.h_codes = s.h_codes.data;
    a.h_scales = s.h_scales.data;
    a.out = b16(s.out.data);
    a.tiles = s.tiles.data;
    a.order = s.order.data;
    a.sum = sum.data;
    a.sum_stride = sum.stride;
    cuda::run_grouped_experts(ctx, a);
  }
  // [T, dim] -> [n, dim]
  /// \brief out[i] = x[rows[i]].
  static void gather_rows(Context& ctx, Mat<const bf16> x, Vec<const std::int32_t> rows, Mat<bf16> out) {
    cuda::launch_gather_rows(ctx, b16(x.data), x.stride, rows.data, rows.size, x.cols, b16(out.data), out.stride);
  }
  // [n, d] -> rows of [R, d]
  /// \brief dst[rows[i]] = src[i] (distinct rows): a pass's latents, keys and scales into their cache slots.
  template <class T>
  static void scatter_rows(Context& ctx, Mat<const T> src, Vec<const std::int32_t> rows, Mat<T> dst) {
    if constexpr (std::is_same_v<T, bf16>)
      cuda::launch_scatter_rows(ctx, b16(src.data), src.stride, rows.data, rows.size, src.cols, b16(dst.data), dst.stride);
    else
      cuda::launch_scatter_rows(ctx, src.data, src.stride, rows.data, rows.size, src.cols, dst.data, dst.stride);
  }
  // y[rows[i]] += src[i] * weight[i]
  /// \brief y[rows[i]] += f32(src[i]) * weight[i] in order of i; empty rows mean row i, empty weights 1.
  static void scatter_add(Context& ctx, Mat<const bf16> src, Vec<const std::int32_t> rows, Vec<const float> weight,
                          Mat<float> y) {
    cuda::launch_scatter_add(ctx, b16(src.data), src.stride, src.rows, src.cols, rows.empty() ? nullptr : rows.data,
                             weight.empty() ? nullptr : weight.data, y.data, y.stride);
  }
  /// \brief out = bf16(x). \param ctx the context \param x [rows, n] f32 \param out [rows, n] bf16
  static void round_to_bf16(Context& ctx, Mat<const float> x, Mat<bf16> out) {
    cuda::launch_convert(ctx, false, x.data, x.stride, out.data, out.stride, x.rows, x.cols);
  }
  /// \brief out = f32(x), exact. \param ctx the context \param x [rows, n] bf16 \param out [rows, n] f32
  static void widen_to_f32(Context& ctx, Mat<const bf16> x, Mat<float> out) {
    cuda::launch_convert(ctx, true, x.data, x.stride, out.data, out.stride, x.rows, x.cols);
  }
};

static_assert(KernelsContract<Cuda>, "Kernels<Cuda> must provide every operation of the Kernels contract "
              "(backend/kernels_contract.hpp)");

/// @}

}  // namespace dsv32
