// Tests of dsv32/layers/rope.hpp: RoPE frequencies with and without YaRN against the formula in
// double, the YaRN ramp's hand-computed bounds, MLA's softmax scale, and the cos/sin tables.
#include "dsv32/backend/cpu/memory.hpp"
#include "dsv32/layers/rope.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

namespace {

// The reference's precompute_freqs_cis, in double.
std::vector<double> reference_frequencies(int dim, const dsv32::RuntimeOptions& o) {
  std::vector<double> f(dim / 2);
  for (int i = 0; i < dim / 2; ++i) f[i] = 1.0 / std::pow(o.rope_theta, 2.0 * i / dim);
  if (o.max_seq_len > o.original_seq_len) {
    auto corr = [&](double rot) { return dim * std::log(o.original_seq_len / (rot * 2 * std::numbers::pi)) / (2 * std::log(o.rope_theta)); };
    const double low = std::max(std::floor(corr(static_cast<double>(o.beta_fast))), 0.0);
    double high = std::min(std::ceil(corr(static_cast<double>(o.beta_slow))), dim - 1.0);
    if (low == high) high += 0.001;
    for (int i = 0; i < dim / 2; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double smooth = 1.0 - ramp;
      f[i] = f[i] / o.rope_factor * (1.0 - smooth) + f[i] * smooth;
    }
  }
  return f;
}

dsv32::RuntimeOptions options(std::int64_t max_seq, std::int64_t original, double factor = 40.0) {
  dsv32::RuntimeOptions o;
  o.max_seq_len = max_seq;
  o.original_seq_len = original;
  o.rope_factor = factor;
  return o;
}

}  // namespace

TEST_CASE("rope_frequencies without YaRN: theta^(-2i/d)") {
  const auto o = options(4096, 4096);
  REQUIRE_FALSE(o.yarn());
  for (int dim : {8, 16, 64}) {
    const auto got = dsv32::rope_frequencies(dim, o);
    const auto want = reference_frequencies(dim, o);
    REQUIRE(got.size() == static_cast<std::size_t>(dim / 2));
    for (int i = 0; i < dim / 2; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(2e-6));
    CHECK(got[0] == 1.0f);
  }
  // dim 8, theta 10000: 1, 0.1, 0.01, 0.001
  const auto f8 = dsv32::rope_frequencies(8, o);
  CHECK(f8[1] == doctest::Approx(0.1).epsilon(1e-6));
  CHECK(f8[3] == doctest::Approx(0.001).epsilon(1e-6));
}

TEST_CASE("rope_frequencies with YaRN: unchanged below the ramp, divided by the factor above it") {
  // the 671B settings: d = 64, theta 1e4, original 4096, beta 32 / 1, factor 40:
  // low = floor(64 ln(4096 / (64 pi)) / (2 ln 1e4)) = floor(10.47) = 10,
  // high = ceil(64 ln(4096 / (2 pi)) / (2 ln 1e4)) = ceil(22.5) = 23
  const auto o = options(16384, 4096);
  REQUIRE(o.yarn());
  const auto got = dsv32::rope_frequencies(64, o);
  const auto want = reference_frequencies(64, o);
  for (int i = 0; i < 32; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(2e-6));
  for (int i = 0; i <= 10; ++i) CHECK(got[i] == doctest::Approx(std::pow(1e4, -2.0 * i / 64)).epsilon(2e-6));
  for (int i = 23; i < 32; ++i) CHECK(got[i] == doctest::Approx(std::pow(1e4, -2.0 * i / 64) / 40).epsilon(2e-6));
  const double ramp = (16 - 10) / 13.0;  // in between: a blend
  CHECK(got[16] == doctest::Approx(std::pow(1e4, -0.5) * (ramp / 40 + 1 - ramp)).epsilon(2e-6));

  // the golden FP8 YaRN scenario: d = 16, original 32, max 64: low = floor(16 ln(32/(64 pi)) / ...) < 0 -> 0
  const auto small = options(64, 32);
  const auto g16 = dsv32::rope_frequencies(16, small);
  const auto w16 = reference_frequencies(16, small);
  for (int i = 0; i < 8; ++i) CHECK(g16[i] == doctest::Approx(w16[i]).epsilon(2e-6));
  CHECK(g16[0] == 1.0f);  // i = low = 0: ramp 0

  // a steep ramp (low 20, high 21)
  dsv32::RuntimeOptions narrow = options(8192, 4096);
  narrow.beta_fast = 2;
  narrow.beta_slow = 2;
  const auto gn = dsv32::rope_frequencies(64, narrow);
  const auto wn = reference_frequencies(64, narrow);
  for (int i = 0; i < 32; ++i) CHECK(gn[i] == doctest::Approx(wn[i]).epsilon(2e-6));
}

TEST_CASE("mla_softmax_scale: (nope + rope)^-0.5, times mscale^2 with YaRN") {
  CHECK(dsv32::mla_softmax_scale(192, options(4096, 4096)) == static_cast<float>(1.0 / std::sqrt(192.0)));
  const double m = 0.1 * 1.0 * std::log(40.0) + 1.0;  // 1.36888...
  CHECK(dsv32::mla_softmax_scale(192, options(16384, 4096)) == static_cast<float>(m * m / std::sqrt(192.0)));
  dsv32::RuntimeOptions o = options(64, 32, 4.0);
  o.mscale = 0.707;
  const double m2 = 0.1 * 0.707 * std::log(4.0) + 1.0;
  CHECK(dsv32::mla_softmax_scale(48, o) == static_cast<float>(m2 * m2 / std::sqrt(48.0)));
}

TEST_CASE("RopeTable: cos and sin of f32(position) * freq for every position") {
  const auto o = options(32, 16);  // YaRN on
  const dsv32::RopeTable<dsv32::Cpu> table(8, o);
  CHECK(table.bytes() == 2 * 32 * 4 * sizeof(float));
  CHECK(table.cos().rows == 32);
  CHECK(table.cos().cols == 4);
  const auto freqs = dsv32::rope_frequencies(8, o);
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < 4; ++i) {
      const float angle = static_cast<float>(t) * freqs[i];
      CHECK(table.cos().row(t)[i] == std::cos(angle));
      CHECK(table.sin().row(t)[i] == std::sin(angle));
      CHECK(table.cos().row(t)[i] == doctest::Approx(std::cos(static_cast<double>(t) * freqs[i])).epsilon(1e-5).scale(1e-5));
    }
  CHECK(table.cos().row(0)[0] == 1.0f);
  CHECK(table.sin().row(0)[0] == 0.0f);
}
