/// \file
/// \brief CPU: embedding lookup, RMSNorm (with fused residual), LayerNorm, SiLU gating, Hadamard transform.
///
/// Every function computes in f32 and rounds to bf16 exactly where the reference does.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "dsv32/backend/cpu/parallel_for.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32::cpu {

/// \brief Embedding rows of the tokens in [first_id, first_id + table.rows); other tokens get zero rows
///        (the vocabulary-split embedding of a model-parallel rank; the all-reduce sums the parts).
/// \param tokens   [n] token ids
/// \param n        tokens
/// \param table    [part_vocab, dim] bf16: this rank's slice of the vocabulary
/// \param first_id token id of the table's row 0
/// \param out      [n, dim] bf16
inline void embedding(const std::int32_t* tokens, std::int64_t n, MatrixView<const bf16> table, std::int64_t first_id,
                      MatrixView<bf16> out) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t local = static_cast<std::int64_t>(tokens[i]) - first_id;
    bf16* dst = out.row(i);
    if (local < 0 || local >= table.rows) {
      std::fill(dst, dst + out.cols, bf16(0.0f));
    } else {
      std::copy(table.row(local), table.row(local) + table.cols, dst);
    }
  }
}

namespace detail {
inline float inverse_rms(const float* s, std::int64_t n, float eps) {
  double sq = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sq += static_cast<double>(s[i]) * s[i];
  const float var = static_cast<float>(sq / static_cast<double>(n));
  return 1.0f / std::sqrt(var + eps);
}
}  // namespace detail

/// \brief y = bf16(w * (x * rsqrt(mean(x^2) + eps))), in f32.
/// \param x   [rows, dim] bf16
/// \param w   [dim] f32
/// \param eps added to the mean square (1e-6 in the model)
/// \param y   [rows, dim] bf16 (may alias x)
inline void rms_norm(MatrixView<const bf16> x, const float* w, float eps, MatrixView<bf16> y) {
  parallel_for(x.rows, x.cols, [&](std::int64_t r) {
    std::vector<float> s(static_cast<std::size_t>(x.cols));
    for (std::int64_t i = 0; i < x.cols; ++i) s[i] = static_cast<float>(x.row(r)[i]);
    const float inv = detail::inverse_rms(s.data(), x.cols, eps);
    for (std::int64_t i = 0; i < x.cols; ++i) y.row(r)[i] = bf16(w[i] * (s[i] * inv));
  });
}

/// \brief The fused residual form: s = f32(x) + f32(residual); residual = bf16(s);
///        y = bf16(w * (s * rsqrt(mean(s^2) + eps))) — normalizing s itself, not its rounded copy.
/// \param x        [rows, dim] bf16
/// \param residual [rows, dim] bf16, updated in place
/// \param w        [dim] f32
/// \param eps      added to the mean square (1e-6 in the model)
/// \param y        [rows, dim] bf16 (may alias x)
inline void rms_norm_residual(MatrixView<const bf16> x, MatrixView<bf16> residual, const float* w, float eps,
                              MatrixView<bf16> y) {
  parallel_for(x.rows, x.cols, [&](std::int64_t r) {
    std::vector<float> s(static_cast<std::size_t>(x.cols));
    for (std::int64_t i = 0; i < x.cols; ++i)
      s[i] = static_cast<float>(x.row(r)[i]) + static_cast<float>(residual.row(r)[i]);
    for (std::int64_t i = 0; i < x.cols; ++i) residual.row(r)[i] = bf16(s[i]);
    const float inv = detail::inverse_rms(s.data(), x.cols, eps);
    for (std::int64_t i = 0; i < x.cols; ++i) y.row(r)[i] = bf16(w[i] * (s[i] * inv));
  });
}

/// \brief y = bf16((x - mean) * rsqrt(var + eps) * w + b) with the biased variance, in f32.
/// \param x   [rows, dim] bf16
/// \param w   [dim] f32
/// \param b   [dim] f32
/// \param eps added to the variance (1e-6 in the model)
/// \param y   [rows, dim] bf16 (may alias x)
inline void layer_norm(MatrixView<const bf16> x, const float* w, const float* b, float eps, MatrixView<bf16> y) {
  parallel_for(x.rows, x.cols, [&](std::int64_t r) {
    std::vector<float> s(static_cast<std::size_t>(x.cols));
    double sum = 0.0;
    for (std::int64_t i = 0; i < x.cols; ++i) {
      s[i] = static_cast<float>(x.row(r)[i]);
      sum += s[i];
    }
    const float mean = static_cast<float>(sum / static_cast<double>(x.cols));
    double sq = 0.0;
    for (std::int64_t i = 0; i < x.cols; ++i) sq += static_cast<double>(s[i] - mean) * (s[i] - mean);
    const float var = static_cast<float>(sq / static_cast<double>(x.cols));
    const float inv = 1.0f / std::sqrt(var + eps);
    for (std::int64_t i = 0; i < x.cols; ++i) y.row(r)[i] = bf16((s[i] - mean) * inv * w[i] + b[i]);
  });
}

/// \brief out = bf16(silu(f32(a)) * f32(b)): the gated activation of MLPs and experts.
/// \param a   [rows, n] bf16 (w1 x)
/// \param b   [rows, n] bf16 (w3 x)
/// \param out [rows, n] bf16 (may alias a)
inline void silu_mul(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> out) {
  for (std::int64_t r = 0; r < a.rows; ++r)
    for (std::int64_t i = 0; i < a.cols; ++i) {
      const float g = static_cast<float>(a.row(r)[i]);
      out.row(r)[i] = bf16(g / (1.0f + std::exp(-g)) * static_cast<float>(b.row(r)[i]));
    }
}

/// \brief In-place Walsh-Hadamard transform of each row (Sylvester order, x H), scaled by n^-0.5;
///        f32 inside, bf16 out.
/// \param x [rows, n] bf16, n a power of two
inline void hadamard(MatrixView<bf16> x) {
  const std::int64_t n = x.cols;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  parallel_for(x.rows, x.cols, [&](std::int64_t r) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(x.row(r)[i]);
    for (std::int64_t h = 1; h < n; h *= 2)
      for (std::int64_t i = 0; i < n; i += 2 * h)
        for (std::int64_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (std::int64_t i = 0; i < n; ++i) x.row(r)[i] = bf16(v[i] * scale);
  });
}

}  // namespace dsv32::cpu
