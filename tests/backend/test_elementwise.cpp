// Tests of dsv32/backend/cpu/elementwise.hpp: embedding, RMSNorm (plain and with the fused residual),
// LayerNorm, SiLU gating and the Hadamard transform, against closed forms and double-precision
// references.
#include "dsv32/backend/cpu/elementwise.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::random_bf16;
using dsv32::test::ulp_distance;

namespace {

using dsv32::bf16;
using dsv32::MatrixView;
namespace cpu = dsv32::cpu;

bool same_bits(bf16 a, bf16 b) {
  return Eigen::numext::bit_cast<std::uint16_t>(a) == Eigen::numext::bit_cast<std::uint16_t>(b);
}

// The bf16 nearest to a double, and whether the double is too close to a bf16 rounding midpoint for an
// f32 computation of it to be sure to round the same way (within `margin` of a bf16 ulp).
bf16 to_bf16(double v) { return bf16(static_cast<float>(v)); }
bool near_midpoint(double v, double margin = 1e-3) {
  const float f = static_cast<float>(v);
  const bf16 r(f);
  const double a = static_cast<double>(static_cast<float>(r));
  const auto bits = Eigen::numext::bit_cast<std::uint16_t>(r);
  const double up = static_cast<double>(static_cast<float>(Eigen::numext::bit_cast<bf16>(static_cast<std::uint16_t>(bits + 1))));
  const double ulp = std::fabs(up - a);
  const double frac = std::fabs(v - a) / ulp;  // 0 .. 0.5
  return std::fabs(frac - 0.5) < margin;
}

std::vector<float> bf16_valued_floats(std::size_t n, std::mt19937& gen, float mean, float sd) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(bf16(std::normal_distribution<float>(mean, sd)(gen)));
  return v;
}

MatrixView<bf16> view(std::vector<bf16>& v, std::int64_t rows, std::int64_t cols) { return {v.data(), rows, cols, cols}; }

}  // namespace

TEST_CASE("cpu::embedding copies the rows of this rank's ids and zeroes the others") {
  std::vector<bf16> table(4 * 3);
  for (int i = 0; i < 12; ++i) table[i] = bf16(static_cast<float>(i + 1));
  const std::int32_t tokens[] = {10, 13, 9, 14, 11};  // this part holds ids [10, 14)
  std::vector<bf16> out(5 * 3, bf16(-7.0f));
  cpu::embedding(tokens, 5, {table.data(), 4, 3, 3}, 10, view(out, 5, 3));
  const float want[5][3] = {{1, 2, 3}, {10, 11, 12}, {0, 0, 0}, {0, 0, 0}, {4, 5, 6}};
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 3; ++c) CHECK(static_cast<float>(out[r * 3 + c]) == want[r][c]);
}

TEST_CASE("cpu::rms_norm: a constant row gives the weight exactly; eps is inside the root") {
  std::mt19937 gen(1);
  const std::int64_t dim = 96;
  const std::vector<float> w = bf16_valued_floats(dim, gen, 1.0f, 0.5f);
  for (float c : {3.0f, -2.0f, 0.5f, 100.0f}) {
    CAPTURE(c);
    std::vector<bf16> x(dim, bf16(c)), y(dim);
    cpu::rms_norm(view(x, 1, dim), w.data(), 1e-6f, view(y, 1, dim));
    // x * rsqrt(c^2 + eps) = sign(c) (1 - eps / 2c^2): far below half a bf16 ulp of 1
    for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(y[i]) == (c > 0 ? w[i] : -w[i]));
  }
  // a constant as small as sqrt(eps): eps counts, y = w * c / sqrt(c^2 + eps) = w / sqrt(2)
  const float c = 1e-3f;
  std::vector<bf16> x(dim, bf16(c)), y(dim);
  cpu::rms_norm(view(x, 1, dim), w.data(), 1e-6f, view(y, 1, dim));
  const double cb = static_cast<double>(static_cast<float>(bf16(c)));
  for (std::int64_t i = 0; i < dim; ++i) {
    const double want = w[i] * cb / std::sqrt(cb * cb + 1e-6);
    CHECK(ulp_distance(y[i], to_bf16(want)) <= 1);
  }
  CHECK(std::fabs(static_cast<float>(y[0]) / w[0] - 0.7071) < 0.01);  // sanity: about 1/sqrt(2) (c^2 ~ eps)
}

TEST_CASE("cpu::rms_norm: matches the double formula and is invariant to scaling the input") {
  std::mt19937 gen(2);
  const std::int64_t rows = 5, dim = 256;
  const std::vector<float> w = bf16_valued_floats(dim, gen, 1.0f, 0.2f);
  std::vector<bf16> x = random_bf16(rows * dim, gen, 2.0f, 0.3f), y(rows * dim), x16(rows * dim), y16(rows * dim);
  for (std::size_t i = 0; i < x.size(); ++i) x16[i] = bf16(static_cast<float>(x[i]) * 16.0f);  // exact
  cpu::rms_norm(view(x, rows, dim), w.data(), 1e-6f, view(y, rows, dim));
  cpu::rms_norm(view(x16, rows, dim), w.data(), 1e-6f, view(y16, rows, dim));
  for (std::int64_t r = 0; r < rows; ++r) {
    double sq = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) sq += std::pow(static_cast<double>(x[r * dim + i]), 2);
    const double inv = 1.0 / std::sqrt(sq / dim + 1e-6);
    for (std::int64_t i = 0; i < dim; ++i) {
      const double want = w[i] * static_cast<double>(x[r * dim + i]) * inv;
      CHECK(ulp_distance(y[r * dim + i], to_bf16(want)) <= 1);
      CHECK(ulp_distance(y[r * dim + i], y16[r * dim + i]) <= 1);
    }
  }
  // in place (y aliasing x)
  std::vector<bf16> z = x;
  cpu::rms_norm(view(z, rows, dim), w.data(), 1e-6f, view(z, rows, dim));
  for (std::size_t i = 0; i < z.size(); ++i) CHECK(same_bits(z[i], y[i]));
}

TEST_CASE("cpu::rms_norm_residual: residual = bf16(x + r) and the norm uses the unrounded sum") {
  std::mt19937 gen(3);
  const std::int64_t rows = 4, dim = 256;
  const std::vector<float> w = bf16_valued_floats(dim, gen, 1.0f, 0.3f);
  // x and the residual at different scales, so most sums are not bf16 values
  std::vector<bf16> x = random_bf16(rows * dim, gen, 1.0f), r = random_bf16(rows * dim, gen, 37.0f);
  const std::vector<bf16> r_in = r;
  std::vector<bf16> y(rows * dim);
  cpu::rms_norm_residual(view(x, rows, dim), view(r, rows, dim), w.data(), 1e-6f, view(y, rows, dim));

  int rounded_sums = 0, checked = 0, differs_from_rounded_path = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    std::vector<double> s(dim), sr(dim);
    double sq = 0.0, sqr = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) {
      s[i] = static_cast<double>(x[row * dim + i]) + static_cast<double>(r_in[row * dim + i]);  // exact in double
      sr[i] = static_cast<double>(static_cast<float>(to_bf16(s[i])));
      if (sr[i] != s[i]) ++rounded_sums;
      sq += s[i] * s[i];
      sqr += sr[i] * sr[i];
    }
    const double inv = 1.0 / std::sqrt(sq / dim + 1e-6), invr = 1.0 / std::sqrt(sqr / dim + 1e-6);
    for (std::int64_t i = 0; i < dim; ++i) {
      CHECK(same_bits(r[row * dim + i], to_bf16(s[i])));  // the residual stream, rounded once
      const double want = w[i] * s[i] * inv, wrong = w[i] * sr[i] * invr;
      if (near_midpoint(want) || near_midpoint(wrong)) continue;
      ++checked;
      CHECK(same_bits(y[row * dim + i], to_bf16(want)));
      if (!same_bits(y[row * dim + i], to_bf16(wrong))) ++differs_from_rounded_path;
    }
  }
  CHECK(rounded_sums > rows * dim / 2);
  CHECK(checked > rows * dim * 9 / 10);
  // normalizing the rounded copy instead would have changed many outputs
  CHECK(differs_from_rounded_path > 20);
  MESSAGE("outputs that normalizing bf16(x + r) would change: " << differs_from_rounded_path << " of " << checked);
}

TEST_CASE("cpu::layer_norm: hand case, constant rows give the bias, mean 0 / variance 1") {
  {  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25
    std::vector<bf16> x{bf16(1.0f), bf16(2.0f), bf16(3.0f), bf16(4.0f)}, y(4);
    const float w[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 0};
    cpu::layer_norm(view(x, 1, 4), w, b, 1e-6f, view(y, 1, 4));
    const double inv = 1.0 / std::sqrt(1.25 + 1e-6);
    const double want[4] = {-1.5 * inv, -0.5 * inv, 0.5 * inv, 1.5 * inv};
    for (int i = 0; i < 4; ++i) CHECK(same_bits(y[i], to_bf16(want[i])));
    CHECK(static_cast<float>(y[0]) == -1.34375f);  // bf16(-1.341640...)
    CHECK(static_cast<float>(y[2]) == 0.447265625f);
  }
  std::mt19937 gen(4);
  const std::int64_t dim = 128;
  const std::vector<float> w = bf16_valued_floats(dim, gen, 1.0f, 0.5f), b = bf16_valued_floats(dim, gen, 0.0f, 0.5f);
  {  // a constant row normalizes to 0: y = b exactly
    std::vector<bf16> x(dim, bf16(5.25f)), y(dim);
    cpu::layer_norm(view(x, 1, dim), w.data(), b.data(), 1e-6f, view(y, 1, dim));
    for (std::int64_t i = 0; i < dim; ++i) CHECK(static_cast<float>(y[i]) == b[i]);
  }
  // random rows: the double formula within 1 ulp; with w = 1, b = 0 the output has mean 0, variance 1
  const std::int64_t rows = 3;
  std::vector<bf16> x = random_bf16(rows * dim, gen, 3.0f, 4.0f), y(rows * dim), z(rows * dim);
  const std::vector<float> ones(dim, 1.0f), zeros(dim, 0.0f);
  cpu::layer_norm(view(x, rows, dim), w.data(), b.data(), 1e-6f, view(y, rows, dim));
  cpu::layer_norm(view(x, rows, dim), ones.data(), zeros.data(), 1e-6f, view(z, rows, dim));
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) mean += static_cast<double>(x[r * dim + i]) / dim;
    for (std::int64_t i = 0; i < dim; ++i) var += std::pow(static_cast<double>(x[r * dim + i]) - mean, 2) / dim;
    double zm = 0.0, zv = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) {
      const double n = (static_cast<double>(x[r * dim + i]) - mean) / std::sqrt(var + 1e-6);
      CHECK(ulp_distance(y[r * dim + i], to_bf16(n * w[i] + b[i])) <= 1);
      CHECK(ulp_distance(z[r * dim + i], to_bf16(n)) <= 1);
      zm += static_cast<double>(z[r * dim + i]) / dim;
    }
    for (std::int64_t i = 0; i < dim; ++i) zv += std::pow(static_cast<double>(z[r * dim + i]) - zm, 2) / dim;
    CHECK(std::fabs(zm) < 1e-2);
    CHECK(std::fabs(zv - 1.0) < 1e-2);
  }
}

TEST_CASE("cpu::silu_mul: bf16(silu(a) * b) in f32") {
  std::mt19937 gen(5);
  const std::int64_t rows = 3, n = 200;
  std::vector<bf16> a = random_bf16(rows * n, gen, 4.0f), b = random_bf16(rows * n, gen), out(rows * n);
  a[0] = bf16(0.0f);
  a[1] = bf16(30.0f);
  a[2] = bf16(-30.0f);
  cpu::silu_mul(view(a, rows, n), view(b, rows, n), view(out, rows, n));
  for (std::int64_t i = 0; i < rows * n; ++i) {
    const double g = static_cast<double>(a[i]);
    CHECK(ulp_distance(out[i], to_bf16(g / (1.0 + std::exp(-g)) * static_cast<double>(b[i]))) <= 1);
  }
  CHECK(static_cast<float>(out[0]) == 0.0f);                            // silu(0) = 0
  CHECK(static_cast<float>(out[1]) == static_cast<float>(bf16(30.0f * static_cast<float>(b[1]))));  // silu(30) ~ 30
  CHECK(std::fabs(static_cast<float>(out[2])) < 1e-10f);                // silu(-30) ~ -2.8e-12
  // in place (out aliasing a)
  cpu::silu_mul(view(a, rows, n), view(b, rows, n), view(a, rows, n));
  for (std::int64_t i = 0; i < rows * n; ++i) CHECK(same_bits(a[i], out[i]));
}

TEST_CASE("cpu::hadamard: e_0, involution, and the explicit Sylvester matrix") {
  for (std::int64_t n : {2, 4, 16, 128, 256}) {
    CAPTURE(n);
    // e_0 -> every entry n^-0.5
    std::vector<bf16> e(n, bf16(0.0f));
    e[0] = bf16(1.0f);
    cpu::hadamard(view(e, 1, n));
    for (std::int64_t i = 0; i < n; ++i) CHECK(same_bits(e[i], to_bf16(1.0 / std::sqrt(static_cast<double>(n)))));

    // Sylvester's construction: H_1 = [1], H_2m = [[H, H], [H, -H]]; the kernel computes x H / sqrt(n)
    std::vector<int> H(n * n);
    H[0] = 1;
    for (std::int64_t m = 1; m < n; m *= 2)
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < m; ++j) {
          const int h = H[i * n + j];
          H[i * n + j + m] = h;
          H[(i + m) * n + j] = h;
          H[(i + m) * n + j + m] = -h;
        }
    std::mt19937 gen(static_cast<unsigned>(n));
    const std::int64_t rows = 3;
    std::vector<bf16> x = random_bf16(rows * n, gen), y = x;
    cpu::hadamard(view(y, rows, n));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < n; ++j) {
        double want = 0.0, mag = 0.0;
        for (std::int64_t i = 0; i < n; ++i) {
          want += static_cast<double>(x[r * n + i]) * H[i * n + j];
          mag += std::fabs(static_cast<double>(x[r * n + i]));
        }
        want /= std::sqrt(static_cast<double>(n));
        // f32 butterflies: within 1 bf16 ulp unless cancellation makes the result tiny
        const double err = std::fabs(static_cast<double>(y[r * n + j]) - want);
        CHECK((ulp_distance(y[r * n + j], to_bf16(want)) <= 1 || err <= 1e-6 * mag));
      }
    // H H = n I: applying the scaled transform twice gives the input back up to bf16 rounding
    std::vector<bf16> z = y;
    cpu::hadamard(view(z, rows, n));
    for (std::int64_t r = 0; r < rows; ++r) {
      double amax = 0.0;
      for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[r * n + i])));
      for (std::int64_t i = 0; i < n; ++i)
        CHECK(std::fabs(static_cast<double>(z[r * n + i]) - static_cast<double>(x[r * n + i])) <= amax * std::ldexp(1.0, -7));
    }
  }
}
