/// \file
/// \brief RoPE tables with YaRN frequency correction, and the MLA softmax scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>
#include <cstdint>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief The rotary frequencies of each pair, f32 as the reference computes them: theta^(-2i/d),
///        blended towards theta^(-2i/d) / rope_factor by the YaRN ramp when max_seq_len > original_seq_len.
/// \return [rope_dim / 2]
inline std::vector<float> rope_frequencies(std::int64_t rope_dim, const RuntimeOptions& o) {
  const std::int64_t half = rope_dim / 2;
  std::vector<float> freqs(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    freqs[i] = 1.0f / std::pow(static_cast<float>(o.rope_theta), exponent);
  }
  if (o.yarn()) {
    auto correction_dim = [&](double rotations) {
      return static_cast<double>(rope_dim) * std::log(static_cast<double>(o.original_seq_len) / (rotations * 2 * std::numbers::pi)) /
             (2 * std::log(o.rope_theta));
    };
    const double low = std::max(std::floor(correction_dim(static_cast<double>(o.beta_fast))), 0.0);
    double high = std::min(std::ceil(correction_dim(static_cast<double>(o.beta_slow))), static_cast<double>(rope_dim - 1));
    if (low == high) high += 0.001;
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    const float factor = static_cast<float>(o.rope_factor);
    for (std::int64_t i = 0; i < half; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      freqs[i] = freqs[i] / factor * (1.0f - smooth) + freqs[i] * smooth;
    }
  }
  return freqs;
}

/// \brief MLA's softmax scale: (qk_nope + qk_rope)^-0.5, times mscale^2 with
///        mscale = 0.1 * mscale_arg * ln(rope_factor) + 1 when YaRN is on.
inline float mla_softmax_scale(std::int64_t qk_head_dim, const RuntimeOptions& o) {
  double scale = std::pow(static_cast<double>(qk_head_dim), -0.5);
  if (o.yarn()) {
    const double m = 0.1 * o.mscale * std::log(o.rope_factor) + 1.0;
    scale = scale * m * m;
  }
  return static_cast<float>(scale);
}

/// \brief cos/sin of every (position, pair) angle f32(position) * freq, for positions [0, max_seq_len).
/// \tparam Backend backend tag
template <class Backend>
class RopeTable {
 public:
  RopeTable() = default;
  /// \brief Computes the tables on the host and copies them to the backend.
  /// \param rope_dim qk_rope_head_dim (even)
  /// \param o        max_seq_len and the RoPE/YaRN scalars
  RopeTable(std::int64_t rope_dim, const RuntimeOptions& o)
      : cos_(Shape{o.max_seq_len, rope_dim / 2}), sin_(Shape{o.max_seq_len, rope_dim / 2}) {
    const std::vector<float> freqs = rope_frequencies(rope_dim, o);
    const std::int64_t half = rope_dim / 2;
    std::vector<float> c(static_cast<std::size_t>(o.max_seq_len * half)), s(c.size());
    for (std::int64_t t = 0; t < o.max_seq_len; ++t)
      for (std::int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(t) * freqs[i];
        c[t * half + i] = std::cos(angle);
        s[t * half + i] = std::sin(angle);
      }
    Memory<Backend>::copy_from_host(cos_.data(), c.data(), c.size() * sizeof(float));
    Memory<Backend>::copy_from_host(sin_.data(), s.data(), s.size() * sizeof(float));
  }
  /// \brief [max_seq_len, rope_dim / 2] f32, in the backend's memory.
  MatrixView<const float, space_of<Backend>> cos() const noexcept { return cos_.mat(); }
  /// \brief [max_seq_len, rope_dim / 2] f32, in the backend's memory.
  MatrixView<const float, space_of<Backend>> sin() const noexcept { return sin_.mat(); }
  /// \brief Memory both tables occupy.
  std::size_t bytes() const noexcept { return cos_.bytes() + sin_.bytes(); }

 private:
  Tensor<float, Backend> cos_, sin_;
};

/// @}

}  // namespace dsv32
