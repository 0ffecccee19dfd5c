// Tests of dsv32/backend/cpu/rope.hpp: rotation of interleaved and half-split pairs, positions of
// [batch, seq] rows, and the strided head layout the layers use.
#include "dsv32/backend/cpu/rope.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using dsv32::bf16;
namespace cpu = dsv32::cpu;

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(bf16(f));
  return out;
}
std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out;
  for (bf16 b : v) out.push_back(static_cast<float>(b));
  return out;
}

}  // namespace

TEST_CASE("cpu::rope: a quarter turn on hand-built vectors, interleaved vs half-split pairs") {
  // one position (0) whose 4 pairs all turn by 90 degrees: (a, b) -> (-b, a)
  const std::vector<float> cos(4, 0.0f), sin(4, 1.0f);
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  {
    auto v = to_bf16(x);
    cpu::rope(v.data(), 1, 8, 1, 8, 8, 1, 0, cos.data(), sin.data(), /*interleaved=*/true);
    CHECK(to_float(v) == std::vector<float>{-2, 1, -4, 3, -6, 5, -8, 7});  // pairs (2i, 2i+1)
  }
  {
    auto v = to_bf16(x);
    cpu::rope(v.data(), 1, 8, 1, 8, 8, 1, 0, cos.data(), sin.data(), /*interleaved=*/false);
    CHECK(to_float(v) == std::vector<float>{-5, -6, -7, -8, 1, 2, 3, 4});  // pairs (i, i + 4)
  }
}

TEST_CASE("cpu::rope: position 0 of a real table is the identity; a known angle rotates by cos/sin") {
  // table for positions 0..2, 2 pairs: angle = position * freq
  const float freq[2] = {1.0f, 0.25f};
  std::vector<float> cos(3 * 2), sin(3 * 2);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 2; ++i) {
      cos[t * 2 + i] = std::cos(static_cast<float>(t) * freq[i]);
      sin[t * 2 + i] = std::sin(static_cast<float>(t) * freq[i]);
    }
  const std::vector<float> x{0.75f, -1.5f, 2.25f, 0.5f};
  for (bool interleaved : {true, false}) {
    CAPTURE(interleaved);
    auto v = to_bf16(x);
    cpu::rope(v.data(), 1, 4, 1, 4, 4, 1, 0, cos.data(), sin.data(), interleaved);
    CHECK(to_float(v) == x);  // cos 0 = 1, sin 0 = 0

    // position 2: pair i turns by 2 * freq[i]
    v = to_bf16(x);
    cpu::rope(v.data(), 1, 4, 1, 4, 4, 1, 2, cos.data(), sin.data(), interleaved);
    for (int i = 0; i < 2; ++i) {
      const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + 2;
      const double th = 2.0 * freq[i], a = x[ia], b = x[ib];
      CHECK(static_cast<float>(v[ia]) == doctest::Approx(a * std::cos(th) - b * std::sin(th)).epsilon(4e-3));
      CHECK(static_cast<float>(v[ib]) == doctest::Approx(a * std::sin(th) + b * std::cos(th)).epsilon(4e-3));
      // exactly the f32 complex product rounded to bf16
      const float c = cos[2 * 2 + i], s = sin[2 * 2 + i];
      CHECK(static_cast<float>(v[ia]) == static_cast<float>(bf16(x[ia] * c - x[ib] * s)));
      CHECK(static_cast<float>(v[ib]) == static_cast<float>(bf16(x[ia] * s + x[ib] * c)));
    }
  }
}

TEST_CASE("cpu::rope: rows of [batch, seq] sit at start_pos + t % seq; only the rope slice of each head moves") {
  // positions 0..9, one pair per head (rope_dim 2); angle = position * pi / 2 exactly (cos, sin in {0, +-1})
  const int max_pos = 10;
  std::vector<float> cos(max_pos), sin(max_pos);
  const float c4[4] = {1, 0, -1, 0}, s4[4] = {0, 1, 0, -1};
  for (int t = 0; t < max_pos; ++t) cos[t] = c4[t % 4], sin[t] = s4[t % 4];
  // 2 sequences x 2 tokens, 3 heads per token, each head [nope 3 | rope 2] (stride 5), token stride 15
  const std::int64_t batch = 2, seq = 2, heads = 3, head_stride = 5, token_stride = 15, start_pos = 5;
  std::vector<float> x(batch * seq * token_stride);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  auto v = to_bf16(x);
  cpu::rope(v.data() + 3, batch * seq, token_stride, heads, head_stride, 2, seq, start_pos, cos.data(), sin.data(), true);
  for (std::int64_t t = 0; t < batch * seq; ++t) {
    const std::int64_t pos = start_pos + t % seq;  // 5, 6, 5, 6
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = t * token_stride + h * head_stride;
      for (int d = 0; d < 3; ++d) CHECK(static_cast<float>(v[base + d]) == x[base + d]);  // nope part untouched
      const float a = x[base + 3], b = x[base + 4];
      CHECK(static_cast<float>(v[base + 3]) == a * cos[pos] - b * sin[pos]);
      CHECK(static_cast<float>(v[base + 4]) == a * sin[pos] + b * cos[pos]);
    }
  }
}
