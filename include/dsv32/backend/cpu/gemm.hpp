/// \file
/// \brief CPU: the model's matrix products through Eigen — bf16 and f32 weights widened tile by tile,
///        FP8 E4M3 weights with 128x128 block scales against 1x128-quantized activations.
///
/// Weights stay in their stored dtype; each thread widens one tile of weight rows into a small
/// f32 scratch and hands it to Eigen's GEMM, so no wholesale f32 copy of a weight ever exists.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "dsv32/backend/cpu/parallel_for.hpp"
#include "dsv32/backend/cpu/quant.hpp"
#include "dsv32/backend/cpu/simd/isa.hpp"
#include "dsv32/backend/weight_view.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

namespace cpu {

/// \brief How FP8 matrix products sum the E4M3 products of each 128-wide block.
enum class Fp8Accumulation {
  exact,  ///< exactly (as the reference's arithmetic defines it): the default
  fast,   ///< in f32 (rounded partial sums), for prefill-sized products only
};

namespace detail {
inline std::atomic<int>& fp8_accumulation_setting() {
  static std::atomic<int> value{static_cast<int>(Fp8Accumulation::exact)};
  return value;
}
}  // namespace detail

/// \brief The FP8 accumulation mode the products use now.
inline Fp8Accumulation fp8_accumulation() noexcept {
  return static_cast<Fp8Accumulation>(detail::fp8_accumulation_setting().load(std::memory_order_relaxed));
}
/// \brief Sets the process-wide FP8 accumulation mode; returns the previous one.
inline Fp8Accumulation set_fp8_accumulation(Fp8Accumulation mode) noexcept {
  return static_cast<Fp8Accumulation>(detail::fp8_accumulation_setting().exchange(static_cast<int>(mode)));
}

/// \brief The kernels' f32 work matrix: dynamic size, row-major like dsv32's tensors.
using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// \brief Per-thread f32 scratch, grown on demand and reused.
inline float* thread_scratch(std::size_t slot, std::size_t n) {
  thread_local std::vector<float> buffers[4];
  auto& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

/// \brief Rows [r0, r0 + n) of a weight as f32: exact for BF16 and F32; for F8_E4M3 the reference's
///        dequantization bf16(e4m3 * block scale).
/// \param w   the weight ([out, in])
/// \param r0  first row
/// \param n   rows, with r0 + n <= w.out
/// \param out [n, w.in] f32
/// \throws Error(unsupported) for a dtype other than BF16, F32 or F8_E4M3
inline void weight_rows_f32(const WeightView& w, std::int64_t r0, std::int64_t n, float* out) {
  const std::int64_t K = w.in;
  switch (w.dtype) {
    case DType::F32: {
      const float* src = static_cast<const float*>(w.data) + r0 * K;
      std::copy(src, src + n * K, out);
      break;
    }
    case DType::BF16: {
      const bf16* src = static_cast<const bf16*>(w.data) + r0 * K;
      for (std::int64_t i = 0; i < n * K; ++i) out[i] = static_cast<float>(src[i]);
      break;
    }
    case DType::F8_E4M3: {
      const auto* src = static_cast<const std::uint8_t*>(w.data);
      const std::int64_t sc = w.scale_cols();
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t row = r0 + r;
        const float* srow = w.scale + (row / kBlockSize) * sc;
        for (std::int64_t k = 0; k < K; ++k)
          out[r * K + k] = dequant_weight(src[row * K + k], srow[k / kBlockSize]);
      }
      break;
    }
    default:
      fail(ErrorKind::unsupported, "weight dtype ", dtype_name(w.dtype), " in a matrix product");
  }
}

namespace detail {

/// Rows of a weight tile so that one widened tile stays around 256 KiB.
inline std::int64_t tile_rows(std::int64_t k) { return std::clamp<std::int64_t>((1 << 16) / std::max<std::int64_t>(k, 1), 8, 256); }

/// Y = X W^T for a BF16 or F32 weight; `store(n0, nb, tile)` receives each [M, nb] f32 tile.
template <class Store>
void dense_product(const float* x, std::int64_t m, const WeightView& w, Store&& store) {
  const std::int64_t k = w.in, n = w.out, nb = tile_rows(k);
  const Eigen::Map<const RowMatrixF> X(x, m, k);
  parallel_for((n + nb - 1) / nb, (m + 1) * nb * k, [&](std::int64_t t) {
    const std::int64_t n0 = t * nb, rows = std::min(nb, n - n0);
    const float* wt;
    if (w.dtype == DType::F32) {
      wt = static_cast<const float*>(w.data) + n0 * k;
    } else {
      float* scratch = thread_scratch(0, static_cast<std::size_t>(rows * k));
      weight_rows_f32(w, n0, rows, scratch);
      wt = scratch;
    }
    const Eigen::Map<const RowMatrixF> W(wt, rows, k);
    Eigen::Map<RowMatrixF> Y(thread_scratch(1, static_cast<std::size_t>(m * rows)), m, rows);
    Y.noalias() = X * W.transpose();
    store(n0, rows, Y.data());
  });
}

/// Y = dequant(Xq) dequant(W)^T block by block: per 128-wide K block the dot product of E4M3 values,
/// computed exactly (in double: every product and partial sum of E4M3 values is representable) and
/// rounded once to f32, times a_scale[m, kb] * w_scale[n / 128, kb], summed over K blocks in f32 —
/// the reference's arithmetic exactly, which matters because quantized sums often land exactly on
/// bf16 rounding midpoints.
/// Activation rows up to which the FP8 product streams the weights row by row instead of going
/// through Eigen's blocked GEMM.
inline constexpr std::int64_t kFewRows = 4;

/// E4M3 code -> exact double value.
inline constexpr auto kE4m3DecodeDouble = [] {
  std::array<double, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = ::dsv32::detail::e4m3_value(c);
  return t;
}();

template <class Store>
void fp8_product(const std::uint8_t* xq, const float* xs, std::int64_t m, const WeightView& w, Store&& store) {
  using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::int64_t k = w.in, n = w.out, kb_count = k / kBlockSize, sc = w.scale_cols();
  RowMatrixD xd(m, k);
  for (std::int64_t i = 0; i < m * k; ++i) xd.data()[i] = decode_e4m3(xq[i]);
  const auto* wq = static_cast<const std::uint8_t*>(w.data);
  parallel_for((n + kBlockSize - 1) / kBlockSize, (m + 1) * kBlockSize * k, [&](std::int64_t nb) {
    const std::int64_t n0 = nb * kBlockSize, rows = std::min(kBlockSize, n - n0);
    Eigen::Map<RowMatrixF> acc(thread_scratch(1, static_cast<std::size_t>(m * rows)), m, rows);
    acc.setZero();
    if (m <= kFewRows) {
      // Decode: a few activation rows. Each weight is read once and looked up in a double table; the
      // block dots are the same exact sums (in another order, which exact sums do not notice).
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint8_t* wrow = wq + (n0 + r) * k;
        for (std::int64_t kb = 0; kb < kb_count; ++kb) {
          const std::uint8_t* wb = wrow + kb * kBlockSize;
          const float ws = w.scale[nb * sc + kb];
          for (std::int64_t i = 0; i < m; ++i) {
            const double* xb = xd.data() + i * k + kb * kBlockSize;
            double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
            for (std::int64_t c = 0; c < kBlockSize; c += 4) {
              d0 += kE4m3DecodeDouble[wb[c]] * xb[c];
              d1 += kE4m3DecodeDouble[wb[c + 1]] * xb[c + 1];
              d2 += kE4m3DecodeDouble[wb[c + 2]] * xb[c + 2];
              d3 += kE4m3DecodeDouble[wb[c + 3]] * xb[c + 3];
            }
            acc(i, r) += static_cast<float>((d0 + d1) + (d2 + d3)) * (xs[i * kb_count + kb] * ws);
          }
        }
      }
      store(n0, rows, acc.data());
      return;
    }
    RowMatrixD wblock(rows, kBlockSize), partial(m, rows);
    for (std::int64_t kb = 0; kb < kb_count; ++kb) {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < kBlockSize; ++c)
          wblock(r, c) = decode_e4m3(wq[(n0 + r) * k + kb * kBlockSize + c]);
      partial.noalias() = xd.middleCols(kb * kBlockSize, kBlockSize) * wblock.transpose();
      const float ws = w.scale[nb * sc + kb];
      for (std::int64_t i = 0; i < m; ++i) {
        const float row_scale = xs[i * kb_count + kb] * ws;
        for (std::int64_t j = 0; j < rows; ++j) acc(i, j) += static_cast<float>(partial(i, j)) * row_scale;
      }
    }
    store(n0, rows, acc.data());
  });
}

inline std::vector<float> widen(MatrixView<const bf16> x) {
  std::vector<float> out(static_cast<std::size_t>(x.rows * x.cols));
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) out[r * x.cols + c] = static_cast<float>(x.row(r)[c]);
  return out;
}

/// Refuses a weight dtype the products cannot read, before any parallel loop: an exception thrown
/// inside an OpenMP region would terminate the program instead of reaching the caller.
inline void check_weight_dtype(const WeightView& w, const char* op) {
  DSV32_CHECK(w.dtype == DType::BF16 || w.dtype == DType::F32 || w.dtype == DType::F8_E4M3, unsupported, op,
              ": weight dtype ", dtype_name(w.dtype), " in a matrix product (BF16, F32 or F8_E4M3 expected)");
}

inline void check_linear_shapes(MatrixView<const bf16> x, const WeightView& w, std::int64_t y_rows,
                                std::int64_t y_cols) {
  DSV32_CHECK(x.cols == w.in && y_cols == w.out && y_rows == x.rows, invalid_argument, "linear: input [", x.rows,
              ", ", x.cols, "] and output [", y_rows, ", ", y_cols, "] do not fit weight [", w.out, ", ", w.in, "]");
}

}  // namespace detail

/// \brief y = bf16(x W^T) with f32 accumulation: the reference's `linear` (bf16 or FP8 weights).
/// \param x   [M, in] bf16
/// \param w   [out, in] BF16, F32 or F8_E4M3 (then x is quantized per 1x128 block with `fmt`)
/// \param fmt activation scale format for FP8 weights
/// \param y   [M, out] bf16
inline void linear(MatrixView<const bf16> x, const WeightView& w, ScaleFmt fmt, MatrixView<bf16> y) {
  detail::check_linear_shapes(x, w, y.rows, y.cols);
  detail::check_weight_dtype(w, "linear");
  if (x.rows == 0) return;
  auto store = [&](std::int64_t n0, std::int64_t nb, const float* tile) {
    for (std::int64_t r = 0; r < x.rows; ++r)
      for (std::int64_t j = 0; j < nb; ++j) y.row(r)[n0 + j] = bf16(tile[r * nb + j]);
  };
  if (w.dtype == DType::F8_E4M3) {
    DSV32_CHECK(w.in % kBlockSize == 0, invalid_argument, "FP8 linear needs in_features % 128 == 0, got ", w.in);
    const std::int64_t kb = w.in / kBlockSize;
    std::vector<std::uint8_t> xq(static_cast<std::size_t>(x.rows * w.in));
    std::vector<float> xs(static_cast<std::size_t>(x.rows * kb));
    act_quant(x, fmt, {xq.data(), x.rows, w.in, w.in}, {xs.data(), x.rows, kb, kb});
    detail::fp8_product(xq.data(), xs.data(), x.rows, w, store);
  } else {
    const std::vector<float> xf = detail::widen(x);
    detail::dense_product(xf.data(), x.rows, w, store);
  }
}

/// \brief y = f32(x) f32(W)^T, all in f32: the MoE gate's scores and the output head.
/// \param x [M, in] bf16
/// \param w [out, in] BF16 or F32
/// \param y [M, out] f32
inline void linear_f32(MatrixView<const bf16> x, const WeightView& w, MatrixView<float> y) {
  detail::check_linear_shapes(x, w, y.rows, y.cols);
  DSV32_CHECK(w.dtype == DType::BF16 || w.dtype == DType::F32, invalid_argument,
              "f32 linear needs a BF16 or F32 weight, got ", dtype_name(w.dtype));
  if (x.rows == 0) return;
  const std::vector<float> xf = detail::widen(x);
  detail::dense_product(xf.data(), x.rows, w, [&](std::int64_t n0, std::int64_t nb, const float* tile) {
    for (std::int64_t r = 0; r < x.rows; ++r) std::copy(tile + r * nb, tile + (r + 1) * nb, y.row(r) + n0);
  });
}

}  // namespace cpu
}  // namespace dsv32
