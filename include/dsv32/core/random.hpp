/// \file
/// \brief Counter-based random numbers: the value at index i of a stream depends only on (key, i),
///        so a tensor of billions of elements is filled in parallel, in any order, and the same
///        seed gives the same tensor on any thread count.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief SplitMix64's finalizer: a bijective 64-bit mix with full avalanche.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// \brief FNV-1a of a string: a stream key that, unlike std::hash, is the same on every platform.
constexpr std::uint64_t fnv1a64(std::string_view s) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

namespace detail {

/// Acklam's rational approximation of the standard normal quantile (relative error < 1.2e-9).
inline double normal_quantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  };
  if (p < 0.02425) return tail(std::sqrt(-2.0 * std::log(p)));
  if (p > 1.0 - 0.02425) return -tail(std::sqrt(-2.0 * std::log(1.0 - p)));
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
}

inline constexpr int kQuantileBits = 12;
inline constexpr int kQuantileBins = 1 << kQuantileBits;

/// The normal quantile function at kQuantileBins + 1 points, scaled so that the piecewise-linear
/// quantile function through them has variance exactly 1 (it is symmetric, so its mean is 0).
inline const std::array<float, kQuantileBins + 1>& normal_quantile_table() {
  static const std::array<float, kQuantileBins + 1> table = [] {
    std::array<double, kQuantileBins + 1> q{};
    for (int j = 0; j <= kQuantileBins; ++j) q[j] = normal_quantile((j + 1.0) / (kQuantileBins + 2.0));
    // E[X^2] of X = q_j + f (q_{j+1} - q_j), bin j chosen uniformly, f ~ U[0, 1)
    double second = 0.0;
    for (int j = 0; j < kQuantileBins; ++j) second += (q[j] * q[j] + q[j] * q[j + 1] + q[j + 1] * q[j + 1]) / 3.0;
    const double norm = 1.0 / std::sqrt(second / kQuantileBins);
    std::array<float, kQuantileBins + 1> t{};
    for (int j = 0; j <= kQuantileBins; ++j) t[j] = static_cast<float>(q[j] * norm);
    return t;
  }();
  return table;
}

}  // namespace detail

/// \brief A standard-normal stream read many times in a row (element i equals counter_normal(key, i)):
///        the quantile table is looked up once.
class NormalStream {
 public:
  /// \param key the stream (see counter_normal())
  explicit NormalStream(std::uint64_t key) noexcept : key_(key), q_(detail::normal_quantile_table().data()) {}
  /// \brief Element `index` of the stream: counter_normal(key, index).
  float operator()(std::uint64_t index) const noexcept {
    const std::uint64_t z = mix64(key_ + (index + 1) * 0x9E3779B97F4A7C15ull);
    const auto bin = static_cast<std::uint32_t>(z >> (64 - detail::kQuantileBits));
    const float frac = static_cast<float>(static_cast<std::uint32_t>(z) >> 8) * (1.0f / 16777216.0f);
    return q_[bin] + frac * (q_[bin + 1] - q_[bin]);
  }

 private:
  std::uint64_t key_;
  const float* q_;
};

/// \brief Element `index` of the standard-normal stream `key`: mean 0, variance 1, drawn through a
///        piecewise-linear normal quantile function of 4096 bins (tails cut near +-3.7), from one
///        SplitMix64 hash of (key, index). A few nanoseconds per value, no state.
inline float counter_normal(std::uint64_t key, std::uint64_t index) noexcept { return NormalStream(key)(index); }

/// @}

}  // namespace dsv32
