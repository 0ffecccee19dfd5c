// Tests of dsv32/backend/cpu/gemm.hpp and quant.hpp: bf16/f32 linears against a double-precision
// naive product, the FP8 linear against a naive implementation of the reference's formula
// (act_quant per 1x128 block, exact per-block dots, scale products, f32 sums over blocks), and
// act_quant's closed forms.
#include "dsv32/backend/cpu/gemm.hpp"
#include "dsv32/backend/cpu/quant.hpp"

#include <doctest/doctest.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include "dsv32/backend/cpu/simd/gemm_portable.hpp"  // kE4m3Weight
#include "dsv32/backend/cpu/simd/isa.hpp"
#include "support/isa_scope.hpp"
#include "support/test_support.hpp"

using dsv32::test::kernels_at;
using dsv32::test::isas_here;
using dsv32::test::random_bf16;
using dsv32::test::ulp_distance;

using dsv32::test::error_of;

namespace {

using dsv32::bf16;
using dsv32::DType;
using dsv32::MatrixView;
using dsv32::ScaleFmt;
using WeightView = dsv32::WeightView<>;
namespace cpu = dsv32::cpu;

// ---------------------------------------------------------------- host-gated kernels
// Kernels that only some CPUs run are tested by their own cases, named with the feature in brackets
// ("[AVX-512 VBMI]", "[AMX-INT8]"). On a host without the feature such a case prints "SKIPPED: ..."
// and checks nothing; its ctest entry (dsv32_unit_kernels_vbmi, dsv32_unit_kernels_amx in
// tests/CMakeLists.txt) then reports it skipped instead of passed. Where the host has the feature,
// the case requires the kernels in the table.
bool host_has_vbmi() { return cpu::detected_features().vbmi; }  // (within DSV32_CPU_ISA's cap)
// Whether the table of `isa` takes its VBMI kernels (the AVX-512 levels on a host with VBMI).
bool vbmi_level(cpu::Isa isa) { return isa >= cpu::Isa::avx512 && cpu::cpu_has_avx512_vbmi(); }
bool host_has_amx() { return cpu::detected_features().amx_int8; }
#define DSV32_SKIP_UNLESS(host_has, why) \
  if (!(host_has)) {                      \
    MESSAGE("SKIPPED: " why);             \
    return;                               \
  }

// ---------------------------------------------------------------- independent references


double e4m3_value(unsigned code) {  // closed form (tested against the library in test_numeric.cpp)
  const double sign = (code & 0x80u) ? -1.0 : 1.0;
  const int e = static_cast<int>((code >> 3) & 0xFu), m = static_cast<int>(code & 0x7u);
  if (e == 0) return sign * std::ldexp(m / 8.0, -6);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// Nearest finite E4M3 code by exhaustive search, ties to the even code; |x| beyond 448 saturates.
std::uint8_t nearest_code(float x) {
  const double a = std::min(std::fabs(static_cast<double>(x)), 448.0);
  unsigned best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (unsigned c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_value(c) - a);
    if (d < best_d || (d == best_d && c % 2 == 0)) best = c, best_d = d;
  }
  return static_cast<std::uint8_t>((std::signbit(x) ? 0x80u : 0u) | best);
}

// The smallest power of two >= s (s > 0 and normal), via frexp: s = f * 2^e with f in [0.5, 1).
float pow2_at_least(float s) {
  int e = 0;
  const float f = std::frexp(s, &e);
  return f == 0.5f ? s : std::ldexp(1.0f, e);
}

// The reference's act_quant of one 1x128 block (README: amax = max(|x|, 1e-4); s = amax * f32(1/448),
// rounded up to a power of two with ue8m0; q = e4m3(clamp(x / s, -448, 448))).
float reference_block_quant(const bf16* x, ScaleFmt fmt, std::uint8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
  amax = std::max(amax, 1e-4f);
  float s = amax * (1.0f / 448.0f);
  if (fmt == ScaleFmt::ue8m0) s = pow2_at_least(s);
  for (int i = 0; i < 128; ++i) q[i] = nearest_code(std::clamp(static_cast<float>(x[i]) / s, -448.0f, 448.0f));
  return s;
}

struct Fp8Weight {
  std::int64_t out = 0, in = 0;
  std::vector<std::uint8_t> codes;  // [out, in]
  std::vector<float> scale;         // [ceil(out / 128), in / 128]
  WeightView view() const { return {DType::F8_E4M3, codes.data(), out, in, scale.data()}; }
};

Fp8Weight random_fp8_weight(std::int64_t out, std::int64_t in, std::mt19937& gen) {
  Fp8Weight w;
  w.out = out;
  w.in = in;
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> sc(1e-3f, 2e-2f);
  w.codes.resize(static_cast<std::size_t>(out * in));
  for (auto& c : w.codes) {
    do c = static_cast<std::uint8_t>(code(gen));
    while ((c & 0x7F) == 0x7F);  // no NaN codes
  }
  w.scale.resize(static_cast<std::size_t>((out + 127) / 128 * (in / 128)));
  for (auto& s : w.scale) s = sc(gen);
  return w;
}

// The reference's FP8 GEMM scaffold: x quantized per 1x128 block, then per output and K block
// f32(dot of the block's E4M3 values) * (a_scale * w_scale), summed over blocks in f32, rounded to
// bf16; block_dot(x codes, w codes) gives the block's dot as the mode under test defines it.
template <class BlockDot>
std::vector<bf16> reference_fp8_linear_with(const std::vector<bf16>& x, std::int64_t m, const Fp8Weight& w,
                                            ScaleFmt fmt, BlockDot&& block_dot) {
  const std::int64_t k = w.in, kb = k / 128, sc = kb;
  std::vector<std::uint8_t> xq(static_cast<std::size_t>(m * k));
  std::vector<float> xs(static_cast<std::size_t>(m * kb));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t b = 0; b < kb; ++b) xs[r * kb + b] = reference_block_quant(&x[r * k + b * 128], fmt, &xq[r * k + b * 128]);
  std::vector<bf16> y(static_cast<std::size_t>(m * w.out));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t n = 0; n < w.out; ++n) {
      float acc = 0.0f;
      for (std::int64_t b = 0; b < kb; ++b) {
        const float dot = block_dot(&xq[r * k + b * 128], &w.codes[n * k + b * 128]);
        const float scale = xs[r * kb + b] * w.scale[(n / 128) * sc + b];
        acc += dot * scale;
      }
      y[r * w.out + n] = bf16(acc);
    }
  return y;
}

// The exact mode, the reference's arithmetic written naively: each block's dot of E4M3 values in
// double (where every product and partial sum is exact), rounded to f32.
std::vector<bf16> reference_fp8_linear(const std::vector<bf16>& x, std::int64_t m, const Fp8Weight& w, ScaleFmt fmt) {
  return reference_fp8_linear_with(x, m, w, fmt, [](const std::uint8_t* xb, const std::uint8_t* wb) {
    double dot = 0.0;
    for (int i = 0; i < 128; ++i) dot += e4m3_value(xb[i]) * e4m3_value(wb[i]);
    return static_cast<float>(dot);
  });
}

// The fast mode's panel order (more than 4 rows): each block's dot summed in f32 in VDPBF16PS's
// order: from +0, per pair of columns (2p, 2p + 1) first the odd column's product, then the even one's.
float panel_order_block_dot(const std::uint8_t* xb, const std::uint8_t* wb) {
  float dot = 0.0f;
  for (int i = 0; i < 128; i += 2)
    for (const int c : {i + 1, i}) {
      const float p = static_cast<float>(e4m3_value(xb[c]) * e4m3_value(wb[c]));  // exact
      dot += p;
    }
  return dot;
}

std::vector<bf16> reference_fp8_linear_fast(const std::vector<bf16>& x, std::int64_t m, const Fp8Weight& w,
                                            ScaleFmt fmt) {
  return reference_fp8_linear_with(x, m, w, fmt, panel_order_block_dot);
}

// The fast mode's row order (products of at most 4 rows), written from its definition in
// simd/gemm_ops.hpp: the 64 column pairs of a block dealt to 16 lanes (lane d of the slot group g
// within half h holds pair 32 h + 8 (d / 4) + d % 4 + 4 (g % 2)), each lane's pairs summed in
// order (odd column first), the lanes added as a halving tree.
float row_order_block_dot(const std::uint8_t* xb, const std::uint8_t* wb) {
  float lane[16] = {};
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 2; ++g)
      for (int d = 0; d < 16; ++d) {
        const int c = 2 * (32 * h + 8 * (d / 4) + d % 4 + 4 * g);
        for (const int col : {c + 1, c}) {
          const float p = static_cast<float>(e4m3_value(xb[col]) * e4m3_value(wb[col]));  // exact
          lane[d] += p;
        }
      }
  for (int half = 8; half >= 1; half /= 2)
    for (int i = 0; i < half; ++i) lane[i] += lane[i + half];
  return lane[0];
}

std::vector<bf16> reference_fp8_linear_fast_rows(const std::vector<bf16>& x, std::int64_t m, const Fp8Weight& w,
                                                 ScaleFmt fmt) {
  return reference_fp8_linear_with(x, m, w, fmt, row_order_block_dot);
}

// The dense products' definition: each output the f32 sum of f32-rounded products in increasing k;
// with fused, each product fused into its addition instead (exact product, one rounding per step).
std::vector<float> reference_dense_f32(const std::vector<bf16>& x, std::int64_t m, const std::vector<float>& w,
                                       std::int64_t n_out, std::int64_t k, bool fused = false) {
  std::vector<float> y(static_cast<std::size_t>(m * n_out));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t n = 0; n < n_out; ++n) {
      float acc = 0.0f;
      for (std::int64_t i = 0; i < k; ++i) {
        const float a = static_cast<float>(x[r * k + i]), b = w[n * k + i];
        if (fused) {
          acc = std::fma(a, b, acc);
        } else {
          volatile float p = a * b;  // rounded, never fused
          acc += p;
        }
      }
      y[r * n_out + n] = acc;
    }
  return y;
}

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (Eigen::numext::bit_cast<std::uint16_t>(a[i]) != Eigen::numext::bit_cast<std::uint16_t>(b[i])) return false;
  return true;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}



}  // namespace

TEST_CASE("cpu::linear with BF16 and F32 weights: within 1 bf16 ulp of the double product rounded to bf16") {
  std::mt19937 gen(7);
  struct Dims {
    std::int64_t m, k, n;
  };
  // n spans several weight tiles (tile rows = clamp(65536 / k, 8, 256)); m = 1 is the decode shape
  for (const Dims d : {Dims{1, 64, 600}, Dims{3, 96, 40}, Dims{5, 1000, 200}, Dims{17, 130, 7}, Dims{2, 1, 3}}) {
    for (DType dt : {DType::BF16, DType::F32}) {
      CAPTURE(d.m);
      CAPTURE(d.k);
      CAPTURE(d.n);
      CAPTURE(dsv32::dtype_name(dt));
      const auto x = random_bf16(static_cast<std::size_t>(d.m * d.k), gen);
      const auto wb = random_bf16(static_cast<std::size_t>(d.n * d.k), gen);
      std::vector<float> wf(wb.size());
      for (std::size_t i = 0; i < wb.size(); ++i) wf[i] = static_cast<float>(wb[i]);
      const WeightView w{dt, dt == DType::BF16 ? static_cast<const void*>(wb.data()) : wf.data(), d.n, d.k, nullptr};
      std::vector<bf16> y(static_cast<std::size_t>(d.m * d.n));
      cpu::linear({x.data(), d.m, d.k, d.k}, w, ScaleFmt::none, {y.data(), d.m, d.n, d.n});
      std::vector<float> y32(y.size());
      cpu::linear_f32({x.data(), d.m, d.k, d.k}, w, {y32.data(), d.m, d.n, d.n});
      int worst = 0;
      for (std::int64_t r = 0; r < d.m; ++r)
        for (std::int64_t n = 0; n < d.n; ++n) {
          double ref = 0.0, mag = 0.0;
          for (std::int64_t i = 0; i < d.k; ++i) {
            const double p = static_cast<double>(x[r * d.k + i]) * static_cast<double>(wb[n * d.k + i]);
            ref += p;
            mag += std::fabs(p);
          }
          worst = std::max(worst, ulp_distance(y[r * d.n + n], bf16(static_cast<float>(ref))));
          // linear_f32: f32 accumulation, no rounding to bf16
          CHECK(std::fabs(y32[r * d.n + n] - ref) <= 1e-6 * mag + 1e-30);
        }
      CHECK(worst <= 1);
    }
  }
}

TEST_CASE("cpu::linear with FP8 weights equals a naive implementation of the reference's formula exactly") {
  std::mt19937 gen(11);
  struct Dims {
    std::int64_t m, k, n;
  };
  for (ScaleFmt fmt : {ScaleFmt::none, ScaleFmt::ue8m0}) {
    for (const Dims d : {Dims{1, 128, 128}, Dims{4, 256, 200}, Dims{3, 384, 300}, Dims{6, 512, 64}}) {
      CAPTURE(d.m);
      CAPTURE(d.k);
      CAPTURE(d.n);
      CAPTURE(fmt == ScaleFmt::ue8m0);
      const Fp8Weight w = random_fp8_weight(d.n, d.k, gen);
      // activations: each 1x128 block with its own magnitude, one all-zero block, one tiny block
      std::vector<bf16> x = random_bf16(static_cast<std::size_t>(d.m * d.k), gen);
      std::uniform_real_distribution<float> mag(-6.0f, 6.0f);
      for (std::int64_t r = 0; r < d.m; ++r)
        for (std::int64_t b = 0; b < d.k / 128; ++b) {
          const float f = std::exp2(mag(gen));
          for (std::int64_t i = 0; i < 128; ++i) {
            bf16& v = x[r * d.k + b * 128 + i];
            v = bf16(static_cast<float>(v) * f);
            if (r == 0 && b == 0 && d.m > 1) v = bf16(0.0f);
            if (r == 1 && b == 0) v = bf16(static_cast<float>(v) * 1e-6f);  // amax below the 1e-4 clamp
          }
        }
      std::vector<bf16> y(static_cast<std::size_t>(d.m * d.n));
      cpu::linear({x.data(), d.m, d.k, d.k}, w.view(), fmt, {y.data(), d.m, d.n, d.n});
      const std::vector<bf16> ref = reference_fp8_linear(x, d.m, w, fmt);
      int mismatches = 0;
      for (std::size_t i = 0; i < y.size(); ++i)
        if (Eigen::numext::bit_cast<std::uint16_t>(y[i]) != Eigen::numext::bit_cast<std::uint16_t>(ref[i])) ++mismatches;
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("cpu::linear_f32 / linear with BF16 and F32 weights, every ISA: bit-identical to the sequential f32 sum") {
  // m covers the decode path (m <= the micro-tile height) and the packed path with row-tile tails;
  // n and k cover panel tails (32 / 16 weight rows) and column tails (128)
  std::mt19937 gen(17);
  struct Dims {
    std::int64_t m, k, n;
  };
  for (const Dims d : {Dims{1, 96, 257}, Dims{2, 7, 33}, Dims{3, 128, 31}, Dims{5, 300, 40}, Dims{8, 130, 100},
                       Dims{12, 1, 5}, Dims{13, 200, 70}, Dims{40, 129, 65}, Dims{200, 64, 129}}) {
    const auto x = random_bf16(static_cast<std::size_t>(d.m * d.k), gen);
    const auto wb = random_bf16(static_cast<std::size_t>(d.n * d.k), gen);
    std::vector<float> wbf(wb.size()), wf(wb.size());
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (std::size_t i = 0; i < wb.size(); ++i) wbf[i] = static_cast<float>(wb[i]), wf[i] = nd(gen);  // full f32
    const std::vector<float> ref_b = reference_dense_f32(x, d.m, wbf, d.n, d.k), ref_f = reference_dense_f32(x, d.m, wf, d.n, d.k);
    for (cpu::Isa isa : isas_here()) {
      const cpu::CpuKernels kernels = kernels_at(isa);
      CAPTURE(cpu::isa_name(isa));
      CAPTURE(d.m);
      CAPTURE(d.k);
      CAPTURE(d.n);
      std::vector<float> y(static_cast<std::size_t>(d.m * d.n));
      cpu::linear_f32({x.data(), d.m, d.k, d.k}, {DType::BF16, wb.data(), d.n, d.k, nullptr}, {y.data(), d.m, d.n, d.n}, kernels);
      CHECK(y == ref_b);
      cpu::linear_f32({x.data(), d.m, d.k, d.k}, {DType::F32, wf.data(), d.n, d.k, nullptr}, {y.data(), d.m, d.n, d.n}, kernels);
      CHECK(y == ref_f);
      std::vector<bf16> yb(y.size()), rb(y.size());
      cpu::linear({x.data(), d.m, d.k, d.k}, {DType::BF16, wb.data(), d.n, d.k, nullptr}, ScaleFmt::none,
                  {yb.data(), d.m, d.n, d.n}, kernels);
      for (std::size_t i = 0; i < rb.size(); ++i) rb[i] = bf16(ref_b[i]);
      CHECK(same_bits(yb, rb));
    }
  }
}

TEST_CASE("cpu::linear / linear_f32, every ISA: a row's result does not depend on the rows beside it in the call") {
  // Batch invariance, which the serving engine relies on: every row of a call of M rows gives the
  // bits it gives alone, for bf16 and f32 weights (streamed rows up to 8, packed panels beyond) and
  // FP8 in the exact mode; in the fast mode within each order (row order up to 4 rows, panel order
  // from 5: there a row is compared with the same row in a call of 5). K = 1000 leaves a column tail
  // of every kernel's step; 70 weight rows a partial row group.
  std::mt19937 gen(71);
  const std::int64_t k = 1000, n = 70, kq = 384, nq = 200, most = 17;
  const auto x = random_bf16(static_cast<std::size_t>(most * k), gen);
  const auto wb = random_bf16(static_cast<std::size_t>(n * k), gen, 0.05f);
  std::vector<float> wf(wb.size());
  for (std::size_t i = 0; i < wb.size(); ++i) wf[i] = static_cast<float>(wb[i]) * 1.2345f;
  const Fp8Weight wq = random_fp8_weight(nq, kq, gen);
  std::vector<bf16> xq = random_bf16(static_cast<std::size_t>(most * kq), gen);
  auto rows_of = [](const auto& v, std::int64_t first, std::int64_t count, std::int64_t width) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    return std::vector<T>(v.begin() + first * width, v.begin() + (first + count) * width);
  };
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    CAPTURE(cpu::isa_name(isa));
    // (dtype: 0 bf16 through linear_f32, 1 bf16 through linear, 2 f32, 3 FP8 exact, 4 FP8 fast)
    auto run = [&](int dtype, std::int64_t first, std::int64_t m) {
      std::vector<float> y;
      if (dtype == 0 || dtype == 2) {
        y.resize(static_cast<std::size_t>(m * n));
        const WeightView w = dtype == 0 ? WeightView{DType::BF16, wb.data(), n, k, nullptr}
                                        : WeightView{DType::F32, wf.data(), n, k, nullptr};
        cpu::linear_f32({x.data() + first * k, m, k, k}, w, {y.data(), m, n, n}, kernels);
      } else if (dtype == 1) {
        std::vector<bf16> yb(static_cast<std::size_t>(m * n));
        cpu::linear({x.data() + first * k, m, k, k}, {DType::BF16, wb.data(), n, k, nullptr}, ScaleFmt::none,
                    {yb.data(), m, n, n}, kernels);
        for (const bf16 v : yb) y.push_back(static_cast<float>(v));
      } else {
        const cpu::CpuKernels fp8_kernels = kernels_at(isa, dtype == 3 ? cpu::Fp8Accumulation::exact : cpu::Fp8Accumulation::fast);
        std::vector<bf16> yb(static_cast<std::size_t>(m * nq));
        cpu::linear({xq.data() + first * kq, m, kq, kq}, wq.view(), ScaleFmt::ue8m0, {yb.data(), m, nq, nq}, fp8_kernels);
        for (const bf16 v : yb) y.push_back(static_cast<float>(v));
      }
      return y;
    };
    for (int dtype = 0; dtype < 5; ++dtype) {
      CAPTURE(dtype);
      const std::int64_t width = dtype >= 3 ? nq : n;
      for (std::int64_t m = 2; m <= most; ++m) {
        CAPTURE(m);
        const std::vector<float> all = run(dtype, 0, m);
        // the fast mode's panel order (m > 4) against calls of 5 rows; else against each row alone
        const std::int64_t unit = dtype == 4 && m > cpu::simd::kFp8RowOrderMaxRows ? 5 : 1;
        for (std::int64_t first = 0; first + unit <= m; first += unit) {
          const std::vector<float> part = run(dtype, first, unit);
          CHECK(same_bits(rows_of(all, first, unit, width), part));
        }
      }
    }
  }
}

TEST_CASE("cpu::linear_f32 with BF16 weights, every ISA: subnormal and tiny operands summed as the sequential f32 sum") {
  // VDPBF16PS (the AVX512_BF16 decode kernel) treats subnormal inputs and results as zero: x rows and
  // weight rows built so that doing so would change the sum must take the f32 path and give the
  // sequential sum bit for bit; exact zeros must not matter.
  std::mt19937 gen(29);
  const std::int64_t k = 64, n = 48;
  auto bits_of = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<std::uint32_t>(v[i]);
    return b;
  };
  auto bf16_bits = [](std::uint16_t b) { return Eigen::numext::bit_cast<bf16>(b); };
  enum class Case { subnormal_weights, tiny_products, subnormal_x, zero_weights };
  for (const Case c : {Case::subnormal_weights, Case::tiny_products, Case::subnormal_x, Case::zero_weights})
    for (const std::int64_t m : {1, 3, 8}) {
      auto x = random_bf16(static_cast<std::size_t>(m * k), gen);
      auto wb = random_bf16(static_cast<std::size_t>(n * k), gen);
      switch (c) {
        case Case::subnormal_weights:  // row 20: subnormal weights (products far below f32's normal range)
          for (std::int64_t i = 0; i < k; ++i) wb[20 * k + i] = bf16_bits(static_cast<std::uint16_t>((i % 2 ? 0x8000 : 0) | (8 + i % 5)));
          break;
        case Case::tiny_products:  // x near 2^-20, row 21 near 2^-110: normal operands, subnormal products
          for (auto& v : x) v = bf16(static_cast<float>(v) * 0x1p-20f);
          for (std::int64_t i = 0; i < k; ++i) wb[21 * k + i] = bf16(static_cast<float>(wb[21 * k + i]) * 0x1p-110f);
          break;
        case Case::subnormal_x:  // x row 0: one subnormal value, the rest zero; its weights near 2^10
          for (std::int64_t i = 0; i < k; ++i) x[i] = bf16(0.0f);
          x[3] = bf16_bits(0x0011);
          for (std::int64_t r = 0; r < n; ++r) wb[r * k + 3] = bf16(static_cast<float>(wb[r * k + 3]) * 1024.0f);
          break;
        case Case::zero_weights:
          for (std::int64_t i = 0; i < k; i += 3) wb[22 * k + i] = bf16(0.0f), wb[5 * k + i] = bf16(-0.0f);
          break;
      }
      std::vector<float> wbf(wb.size());
      for (std::size_t i = 0; i < wb.size(); ++i) wbf[i] = static_cast<float>(wb[i]);
      // a product below f32's normal range may be inexact: the FMA kernels add it unrounded (one
      // rounding per step), the portable kernel rounds it first (GemmOps)
      const std::vector<float> rounded = reference_dense_f32(x, m, wbf, n, k), fused = reference_dense_f32(x, m, wbf, n, k, true);
      if (c != Case::tiny_products) CHECK(bits_of(rounded) == bits_of(fused));  // every product exact
      if (c != Case::zero_weights) {  // the case can tell: flushing its subnormals changes some sum
        bool tiny = false;
        for (float v : fused) tiny = tiny || (v != 0.0f && std::fabs(v) < 0x1p-100f);
        CHECK(tiny);
      }
      for (cpu::Isa isa : isas_here()) {
        const cpu::CpuKernels kernels = kernels_at(isa);
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(static_cast<int>(c));
        CAPTURE(m);
        std::vector<float> y(static_cast<std::size_t>(m * n));
        cpu::linear_f32({x.data(), m, k, k}, {DType::BF16, wb.data(), n, k, nullptr}, {y.data(), m, n, n}, kernels);
        CHECK(bits_of(y) == bits_of(isa == cpu::Isa::portable ? rounded : fused));
      }
    }
}

TEST_CASE("cpu::linear with FP8 weights, every ISA and row count: exact and fast modes bit-identical to their formulas") {
  // m <= 8 takes the row-streaming decode kernels (fast mode: the row order up to 4 rows, the panel
  // order from 5, streamed where the ISA's table has e4m3_panel_rows, else packed), m > 8 the packed
  // kernels (fast mode: the panel order; x converted in several row chunks: m = 1600; tall row tiles
  // against 128-row weight tiles when there are enough of those: n = 1100)
  std::mt19937 gen(23);
  struct Dims {
    std::int64_t m, k, n;
  };
  for (const Dims d : {Dims{1, 256, 200}, Dims{2, 128, 70}, Dims{3, 384, 129}, Dims{4, 128, 9}, Dims{5, 256, 64},
                       Dims{7, 128, 33}, Dims{8, 256, 130}, Dims{9, 128, 100}, Dims{13, 384, 257}, Dims{30, 256, 40},
                       Dims{1600, 128, 40}, Dims{600, 128, 1100}}) {
    const Fp8Weight w = random_fp8_weight(d.n, d.k, gen);
    std::vector<bf16> x = random_bf16(static_cast<std::size_t>(d.m * d.k), gen);
    std::uniform_real_distribution<float> mag(-8.0f, 8.0f);
    for (std::int64_t b = 0; b < d.m * d.k / 128; ++b) {  // every 1x128 block its own magnitude
      const float f = std::exp2(mag(gen));
      for (std::int64_t i = 0; i < 128; ++i) x[b * 128 + i] = bf16(static_cast<float>(x[b * 128 + i]) * f);
    }
    for (ScaleFmt fmt : {ScaleFmt::none, ScaleFmt::ue8m0}) {
      const std::vector<bf16> exact = reference_fp8_linear(x, d.m, w, fmt);
      const std::vector<bf16> fast =
          d.m > cpu::simd::kFp8RowOrderMaxRows ? reference_fp8_linear_fast(x, d.m, w, fmt)
                                               : reference_fp8_linear_fast_rows(x, d.m, w, fmt);
      for (cpu::Isa isa : isas_here()) {
        const cpu::CpuKernels kernels = kernels_at(isa);
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(d.m);
        CAPTURE(d.k);
        CAPTURE(d.n);
        CAPTURE(fmt == ScaleFmt::ue8m0);
        std::vector<bf16> y(static_cast<std::size_t>(d.m * d.n));
        cpu::linear({x.data(), d.m, d.k, d.k}, w.view(), fmt, {y.data(), d.m, d.n, d.n}, kernels);
        CHECK(same_bits(y, exact));
        const cpu::CpuKernels fp8_kernels = kernels_at(isa, cpu::Fp8Accumulation::fast);
        cpu::linear({x.data(), d.m, d.k, d.k}, w.view(), fmt, {y.data(), d.m, d.n, d.n}, fp8_kernels);
        CHECK(same_bits(y, fast));
      }
    }
  }
}

namespace {
// The row order's decode kernel (e4m3_pair_rows) at every ISA and the panel order's (e4m3_panel_rows
// and _f32) where the table has them, except the AVX-512 VBMI kernels (`vbmi` false); or only those
// (`vbmi` true). The same data either way.
void check_pair_and_panel_rows(bool vbmi) {
  // The decode kernels' own f32 outputs (cpu::linear rounds them to bf16, which hides most changes
  // of summation order): codes over the whole range and both signs, so that each block's sum cancels
  // and its rounding depends on the order; blocks given in two calls (kb0 / kb1), added to what out
  // holds; the second call longer than the AVX-512 row-order driver's passes (128 / groups blocks:
  // 32 with four x-row groups, 128 with one — 130 blocks for 1, 2 and 8 rows), M up to two of its
  // 15-row passes (e4m3_panel_rows: M <= 8; rows 5 and 37 end in a partial 16-row group).
  std::mt19937 gen(41);
  std::uniform_int_distribution<int> any_code(0, 255);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  int panel_kernels = 0;
  struct Shape {
    int KB;
    std::vector<int> Ms;
  };
  for (const Shape& shape : {Shape{35, {1, 2, 3, 4, 5, 6, 7, 8, 16}}, Shape{130, {1, 2, 8}}}) {
    const int KB = shape.KB, K = 128 * KB;
    for (const int M : shape.Ms)
      for (const int rows : {1, 5, 16, 37}) {
        std::vector<std::uint8_t> xq(static_cast<std::size_t>(M * K)), wq(static_cast<std::size_t>(rows * K));
        for (auto& c : xq)
          do c = static_cast<std::uint8_t>(any_code(gen));
          while ((c & 0x7F) == 0x7F);  // activations have no NaN codes; weights read 0x7F / 0xFF as +-480
        for (auto& c : wq) c = static_cast<std::uint8_t>(any_code(gen));
        std::vector<float> xs(static_cast<std::size_t>(M * KB)), ws(KB), start(static_cast<std::size_t>(M * rows));
        for (auto& v : xs) v = unit(gen);
        for (auto& v : ws) v = unit(gen);
        for (auto& v : start) v = unit(gen) - 1.25f;
        // x as bf16 pairs, in slot order (dword s of block kb holds the pair row_order_pair(s)) and in column order
        auto bf16_pair = [](const std::uint8_t* pair) {
          auto bits = [](double v) { return std::bit_cast<std::uint32_t>(static_cast<float>(v)) >> 16; };
          return bits(e4m3_value(pair[0])) | bits(e4m3_value(pair[1])) << 16;
        };
        std::vector<std::uint32_t> xp(static_cast<std::size_t>(M * K / 2)), xc(xp.size());
        std::vector<float> xf(static_cast<std::size_t>(M * K));  // f32, the M rows of a column side by side
        for (int m = 0; m < M; ++m)
          for (int k = 0; k < K; ++k) xf[k * M + m] = static_cast<float>(e4m3_value(xq[m * K + k]));
        for (int m = 0; m < M; ++m)
          for (int kb = 0; kb < KB; ++kb)
            for (int slot = 0; slot < 64; ++slot) {
              const std::uint8_t* block = &xq[m * K + kb * 128];
              xp[m * K / 2 + kb * 64 + slot] = bf16_pair(block + 2 * cpu::simd::row_order_pair(slot));
              xc[m * K / 2 + kb * 64 + slot] = bf16_pair(block + 2 * slot);
            }
        std::vector<float> expected_rows = start, expected_panel = start;
        for (int m = 0; m < M; ++m)
          for (int r = 0; r < rows; ++r)
            for (int kb = 0; kb < KB; ++kb) {
              const std::uint8_t *xb = &xq[m * K + kb * 128], *wb = &wq[r * K + kb * 128];
              const float scale = xs[m * KB + kb] * ws[kb];
              volatile float p = row_order_block_dot(xb, wb) * scale;
              expected_rows[m * rows + r] += p;
              volatile float q = panel_order_block_dot(xb, wb) * scale;
              expected_panel[m * rows + r] += q;
            }
        auto differ = [](const std::vector<float>& a, const std::vector<float>& b) {
          int n = 0;
          for (std::size_t i = 0; i < a.size(); ++i)
            n += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]);
          return n;
        };
        for (cpu::Isa isa : isas_here()) {
          const cpu::CpuKernels kernels = kernels_at(isa);
          CAPTURE(cpu::isa_name(isa));
          CAPTURE(M);
          CAPTURE(rows);
          const cpu::simd::GemmOps& ops = kernels.ops();
          std::vector<float> out = start;
          if (!vbmi) {
            for (const auto& [kb0, kb1] : {std::pair{0, 1}, std::pair{1, KB}})
              ops.e4m3_pair_rows(M, rows, kb0, kb1, xp.data(), K / 2, xs.data(), KB, wq.data(), K, ws.data(), out.data(),
                                 rows);
            CHECK(differ(out, expected_rows) == 0);
          }
          if (M > 8 || vbmi != vbmi_level(isa)) continue;
          if (ops.e4m3_panel_rows) {
            ++panel_kernels;
            out = start;
            for (const auto& [kb0, kb1] : {std::pair{0, 1}, std::pair{1, KB}})
              ops.e4m3_panel_rows(M, rows, kb0, kb1, xc.data(), K / 2, xs.data(), KB, wq.data(), K, ws.data(),
                                  out.data(), rows);
            CHECK(differ(out, expected_panel) == 0);
          }
          if (ops.e4m3_panel_rows_f32) {
            ++panel_kernels;
            out = start;
            for (const auto& [kb0, kb1] : {std::pair{0, 1}, std::pair{1, KB}})
              ops.e4m3_panel_rows_f32(M, rows, kb0, kb1, xf.data(), xs.data(), KB, wq.data(), K, ws.data(), out.data(),
                                      rows);
            CHECK(differ(out, expected_panel) == 0);
          }
        }
      }
  }
  if (vbmi) CHECK(panel_kernels > 0);
}
}  // namespace

TEST_CASE("GemmOps::e4m3_pair_rows / e4m3_panel_rows(_f32), every ISA: f32 outputs bit-identical to the row / panel order's definition") {
  check_pair_and_panel_rows(false);
}

TEST_CASE("GemmOps::e4m3_panel_rows(_f32) [AVX-512 VBMI]: f32 outputs bit-identical to the panel order's definition") {
  DSV32_SKIP_UNLESS(host_has_vbmi(), "this CPU has no AVX-512 VBMI: its GemmOps::e4m3_panel_rows(_f32) not tested here");
  check_pair_and_panel_rows(true);
}

namespace {
enum class ExactRows { general, vbmi, amx };
// The exact decode kernels, on the same data whichever part: e4m3_rows at every ISA and
// e4m3_panel_rows_f64 where a table without the VBMI kernels has it (general); e4m3_panel_rows_f64 of
// the AVX-512 VBMI tables (vbmi); e4m3_tiles_rows, AMX-INT8 (amx).
void check_exact_rows(ExactRows which) {
  // The exact decode kernels' own f32 outputs against their definition: per block the exact dot
  // (a double sum of exact products, any order) rounded to f32, times the f32 product of the scales,
  // added to what out holds; blocks in two calls. Every code (subnormal ones, +-0, 0x7F / 0xFF as
  // +-480) in weights and x (no NaN codes in x); rows 13 and 37 end in partial 8-row groups; rows of
  // 1152 columns take the next-group hints (rows <= 2048 columns), rows of 2176 do not.
  std::mt19937 gen(43);
  std::uniform_int_distribution<int> any_code(0, 255);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  int panel_kernels = 0, tile_kernels = 0;
  for (const int KB : {9, 17})
    for (const int M : {1, 2, 3, 4, 5, 6, 7, 8})
      for (const int rows : {1, 8, 13, 37}) {
        const int K = 128 * KB;
        std::vector<std::uint8_t> xq(static_cast<std::size_t>(M * K)), wq(static_cast<std::size_t>(rows * K));
        for (auto& c : xq)
          do c = static_cast<std::uint8_t>(any_code(gen));
          while ((c & 0x7F) == 0x7F);
        for (auto& c : wq) c = static_cast<std::uint8_t>(any_code(gen));
        std::vector<float> xs(static_cast<std::size_t>(M * KB)), ws(static_cast<std::size_t>(KB));
        std::vector<float> start(static_cast<std::size_t>(M * rows));
        for (auto& v : xs) v = unit(gen);
        for (auto& v : ws) v = unit(gen);
        for (auto& v : start) v = unit(gen) - 1.25f;
        std::vector<double> xd(static_cast<std::size_t>(M * K)), xv(xd.size());  // rows x 2^512; columns side by side
        for (int m = 0; m < M; ++m)
          for (int k = 0; k < K; ++k) {
            xd[m * K + k] = std::ldexp(e4m3_value(xq[m * K + k]), 512);
            xv[k * M + m] = e4m3_value(xq[m * K + k]);
          }
        std::vector<float> expected = start;
        for (int m = 0; m < M; ++m)
          for (int r = 0; r < rows; ++r)
            for (int kb = 0; kb < KB; ++kb) {
              double dot = 0.0;  // exact
              for (int c = 0; c < 128; ++c) dot += e4m3_value(xq[m * K + kb * 128 + c]) * e4m3_value(wq[r * K + kb * 128 + c]);
              volatile float p = static_cast<float>(dot) * (xs[m * KB + kb] * ws[kb]);
              expected[m * rows + r] += p;
            }
        for (cpu::Isa isa : isas_here()) {
          const cpu::CpuKernels kernels = kernels_at(isa);
          CAPTURE(cpu::isa_name(isa));
          CAPTURE(KB);
          CAPTURE(M);
          CAPTURE(rows);
          const cpu::simd::GemmOps& ops = kernels.ops();
          std::vector<float> out = start;
          if (which == ExactRows::general) {
            for (const auto& [kb0, kb1] : {std::pair{0, 2}, std::pair{2, KB}})
              ops.e4m3_rows(M, rows, kb0, kb1, xd.data(), K, xs.data(), KB, wq.data(), K, ws.data(), out.data(), rows);
            CHECK(same_bits(out, expected));
          }
          if (which != ExactRows::amx) {
            if (!ops.e4m3_panel_rows_f64 || (which == ExactRows::vbmi) != vbmi_level(isa)) continue;
            out = start;
            ++panel_kernels;
            for (const auto& [kb0, kb1] : {std::pair{0, 2}, std::pair{2, KB}})
              ops.e4m3_panel_rows_f64(M, rows, kb0, kb1, xv.data(), xs.data(), KB, wq.data(), K, ws.data(), out.data(),
                                      rows);
            CHECK(same_bits(out, expected));
            continue;
          }
          if (!ops.e4m3_tiles_rows) continue;
          ++tile_kernels;
          std::vector<std::int8_t> xt(static_cast<std::size_t>(cpu::simd::e4m3_plane_tile_bytes(M, K)));
          ops.e4m3_plane_tiles(xq.data(), M, K, xt.data());
          out = start;
          for (const auto& [kb0, kb1] : {std::pair{0, 2}, std::pair{2, KB}})
            ops.e4m3_tiles_rows(M, rows, kb0, kb1, xt.data(), xs.data(), KB, wq.data(), K, ws.data(), out.data(), rows);
          CHECK(same_bits(out, expected));
        }
      }
  if (which == ExactRows::vbmi) CHECK(panel_kernels > 0);
  if (which == ExactRows::amx) CHECK(tile_kernels > 0);
}
}  // namespace

TEST_CASE("GemmOps::e4m3_rows / e4m3_panel_rows_f64, every ISA: f32 outputs bit-identical to the exact block dots") {
  check_exact_rows(ExactRows::general);
}

TEST_CASE("GemmOps::e4m3_panel_rows_f64 [AVX-512 VBMI]: f32 outputs bit-identical to the exact block dots") {
  DSV32_SKIP_UNLESS(host_has_vbmi(), "this CPU has no AVX-512 VBMI: its GemmOps::e4m3_panel_rows_f64 not tested here");
  check_exact_rows(ExactRows::vbmi);
}

TEST_CASE("GemmOps::e4m3_tiles_rows [AMX-INT8]: f32 outputs bit-identical to the exact block dots") {
  DSV32_SKIP_UNLESS(host_has_amx(), "this CPU (or OS) has no AMX-INT8 for this process: GemmOps::e4m3_tiles_rows not tested here");
  check_exact_rows(ExactRows::amx);
}

TEST_CASE("GemmOps::e4m3_tiles_gemm [AMX-INT8]: f32 outputs bit-identical to the exact block dots") {
  DSV32_SKIP_UNLESS(host_has_amx(), "this CPU (or OS) has no AMX-INT8 for this process: GemmOps::e4m3_tiles_gemm not tested here");
  // The AMX prefill kernel against the definition: per block the exact dot rounded to f32, times the
  // f32 product of the scales, added to what c holds (a random start), blocks in increasing order.
  // x's tiles are made for 8 more rows than the call takes (it starts at row group 2); weight rows
  // span two 128-row scale blocks; partial 8-row and 4-row groups; every code (in w 0x7F / 0xFF as
  // +-480; x has no NaN codes).
  std::mt19937 gen(53);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  int calls = 0;
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    const cpu::simd::GemmOps& ops = kernels.ops();
    if (!ops.e4m3_tiles_gemm) continue;
    for (const int rows : {64, 37, 3})
      for (const int cols : {256, 131, 8}) {
        CAPTURE(rows);
        CAPTURE(cols);
        const int KB = 3, K = 128 * KB, M = rows + 8;
        std::vector<std::uint8_t> xq(static_cast<std::size_t>(M * K)), wq(static_cast<std::size_t>(cols * K));
        for (auto& c : xq)
          do c = static_cast<std::uint8_t>(gen() & 0xFF);
          while ((c & 0x7F) == 0x7F);
        for (auto& c : wq) c = static_cast<std::uint8_t>(gen() & 0xFF);
        std::vector<float> xs(static_cast<std::size_t>(M * KB)), ws(static_cast<std::size_t>(2 * KB));
        std::vector<float> start(static_cast<std::size_t>(rows * cols));
        for (auto& v : xs) v = unit(gen);
        for (auto& v : ws) v = unit(gen);
        for (auto& v : start) v = unit(gen) - 1.25f;
        std::vector<float> expected = start;
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j)
            for (int kb = 0; kb < KB; ++kb) {
              double dot = 0.0;  // exact
              for (int k = 0; k < 128; ++k) {
                const unsigned cw = wq[j * K + kb * 128 + k];
                const double wv = (cw & 0x7F) == 0x7F ? ((cw & 0x80) ? -480.0 : 480.0) : e4m3_value(cw);
                dot += e4m3_value(xq[(8 + i) * K + kb * 128 + k]) * wv;
              }
              volatile float p = static_cast<float>(dot) * (xs[(8 + i) * KB + kb] * ws[(j / 128) * KB + kb]);
              expected[i * cols + j] += p;
            }
        std::vector<std::int8_t> xt(static_cast<std::size_t>(cpu::simd::e4m3_plane_tile_bytes(M, K)));
        ops.e4m3_plane_tiles(xq.data(), M, K, xt.data());
        std::vector<float> got = start;
        ops.e4m3_tiles_gemm(rows, cols, KB, xt.data() + 2 * 1024, (M + 3) / 4, xs.data() + 8 * KB, KB, wq.data(), K,
                            ws.data(), KB, got.data(), cols);
        CHECK(same_bits(got, expected));
        ++calls;
      }
  }
  CHECK(calls > 0);
}

TEST_CASE("simd::e4m3_plane: every code's magnitude as digit * 16^plane * 2^-9, digits within int8") {
  // The split the AMX kernel's exactness rests on, against the closed form of the E4M3 values.
  for (unsigned code = 0; code < 256; ++code) {
    CAPTURE(code);
    const cpu::simd::E4m3Plane p = cpu::simd::e4m3_plane(static_cast<std::uint8_t>(code));
    CHECK(p.plane >= 0);
    CHECK(p.plane <= 3);
    CHECK(p.digit >= 0);
    CHECK(p.digit <= 120);
    const double magnitude = (code & 0x7F) == 0x7F ? 480.0 : std::fabs(e4m3_value(code));
    CHECK(std::ldexp(static_cast<double>(p.digit), 4 * p.plane - 9) == magnitude);
  }
}

TEST_CASE("GemmOps::e4m3_plane_tiles [AMX-INT8]: the documented tile layout") {
  DSV32_SKIP_UNLESS(host_has_amx(), "this CPU (or OS) has no AMX-INT8 for this process: GemmOps::e4m3_plane_tiles not tested here");
  int tables = 0;
  // Expected bytes written from the layout of simd::e4m3_plane_tile_bytes' comment: per 64-column
  // chunk c and group g of 4 rows a 16 x 64-byte tile, byte [i][4 (4 p + t) + j] the signed digit of
  // x[4 g + t][64 c + 4 i + j] in plane p, 0 in the other planes and for rows past M.
  std::mt19937 gen(47);
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    const cpu::simd::GemmOps& ops = kernels.ops();
    if (!ops.e4m3_plane_tiles) continue;
    ++tables;
    for (const int M : {1, 3, 4, 5, 8}) {
      CAPTURE(M);
      const std::int64_t K = 256;
      const int G = (M + 3) / 4;
      std::vector<std::uint8_t> xq(static_cast<std::size_t>(M * K));
      for (auto& c : xq) c = static_cast<std::uint8_t>(gen() & 0xFF);
      std::vector<std::int8_t> expected(static_cast<std::size_t>(cpu::simd::e4m3_plane_tile_bytes(M, K)), 0);
      for (int m = 0; m < M; ++m)
        for (std::int64_t k = 0; k < K; ++k) {
          const std::uint8_t code = xq[m * K + k];
          const cpu::simd::E4m3Plane p = cpu::simd::e4m3_plane(code);
          const std::int64_t c = k / 64, i = (k % 64) / 4, j = k % 4, g = m / 4, t = m % 4;
          expected[(c * G + g) * 1024 + i * 64 + 4 * (4 * p.plane + t) + j] =
              static_cast<std::int8_t>(code & 0x80 ? -p.digit : p.digit);
        }
      std::vector<std::int8_t> got(expected.size(), 99);
      ops.e4m3_plane_tiles(xq.data(), M, K, got.data());
      CHECK(got == expected);
    }
  }
  CHECK(tables > 0);
}

#if defined(__SSE__)
// Sets MXCSR's bits on this thread and on every OpenMP thread, restores the previous values after.
struct MxcsrScope {
  static void set_everywhere(unsigned bits, bool on) {
    auto apply = [&] { _mm_setcsr(on ? (_mm_getcsr() | bits) : (_mm_getcsr() & ~bits)); };
#if defined(_OPENMP)
#pragma omp parallel
    apply();
#endif
    apply();
  }
  unsigned bits;
  explicit MxcsrScope(unsigned b) : bits(b) { set_everywhere(bits, true); }
  ~MxcsrScope() { set_everywhere(bits, false); }
};

namespace {

// One 128-column block of a prefill product for the scaled-epilogue tests: E4M3 codes of mr x rows
// (no NaN) and nr weight rows, a scale per x row and a start for c ([mr][nr]).
struct ScaledBlock {
  std::vector<std::uint8_t> xq, wq;
  std::vector<float> scale, start;
};
ScaledBlock scaled_block(std::mt19937& gen, int mr, int nr) {
  std::uniform_int_distribution<int> any_code(0, 255);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  ScaledBlock t{std::vector<std::uint8_t>(static_cast<std::size_t>(mr * 128)),
                std::vector<std::uint8_t>(static_cast<std::size_t>(nr * 128)),
                std::vector<float>(static_cast<std::size_t>(mr)), std::vector<float>(static_cast<std::size_t>(mr * nr))};
  for (auto& c : t.xq)
    do c = static_cast<std::uint8_t>(any_code(gen));
    while ((c & 0x7F) == 0x7F);
  for (auto& c : t.wq) c = static_cast<std::uint8_t>(any_code(gen));
  for (auto& v : t.scale) v = unit(gen);
  for (auto& v : t.start) v = unit(gen) - 1.25f;
  return t;
}

// How many elements of got differ from expected in their bits.
int bit_mismatches(const std::vector<float>& got, const std::vector<float>& expected) {
  int wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    wrong += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(expected[i]);
  return wrong;
}

}  // namespace

TEST_CASE("GemmOps::fp8_value_dots(_scaled), every ISA: the panel order's block dots, scaled and added in f32") {
  // The prefill's block dots on widened values (a: x rows of 128, b: a packed [128][nr] panel) and
  // the fused form that adds them, scaled, to c in registers: both against the definition, for every
  // row count of the tiles (1-13: a 12-row tile and its remainders) and partial panels.
  std::mt19937 gen(57);
  int fused = 0;
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    CAPTURE(cpu::isa_name(isa));
    const cpu::simd::GemmOps& ops = kernels.ops();
    const int nr = ops.nr;
    for (int mr = 1; mr <= 13; ++mr)
      for (const int n : {nr, nr - 3, 5}) {
        CAPTURE(mr);
        CAPTURE(n);
        const auto [xq, wq, scale, start] = scaled_block(gen, mr, nr);
        std::vector<float> a(xq.size()), b(wq.size());
        for (std::size_t i = 0; i < xq.size(); ++i) a[i] = static_cast<float>(e4m3_value(xq[i]));
        for (int j = 0; j < nr; ++j)
          for (int k = 0; k < 128; ++k) b[k * nr + j] = static_cast<float>(e4m3_value(wq[j * 128 + k]));
        std::vector<float> dots(static_cast<std::size_t>(mr * nr)), expected = start;
        for (int i = 0; i < mr; ++i)
          for (int j = 0; j < nr; ++j) {
            const float d = panel_order_block_dot(&xq[i * 128], &wq[j * 128]);
            dots[i * nr + j] = d;
            if (j < n) {
              volatile float p = d * scale[i];
              expected[i * nr + j] += p;
            }
          }
        std::vector<float> got(dots.size());
        ops.fp8_value_dots(mr, a.data(), 128, b.data(), got.data(), nr);
        CHECK(bit_mismatches(got, dots) == 0);
        if (!ops.fp8_value_dots_scaled) continue;
        ++fused;
        std::vector<float> c = start;
        ops.fp8_value_dots_scaled(mr, n, a.data(), 128, b.data(), scale.data(), c.data(), nr);
        CHECK(bit_mismatches(c, expected) == 0);  // columns >= n untouched
      }
  }
  if (cpu::detected_features().isa >= cpu::Isa::avx512) CHECK(fused > 0);
}

TEST_CASE("GemmOps::micro_f64(_scaled) + epilogue_f64, every ISA: exact block dots, scaled and added in f32") {
  // The exact prefill's block: dots of 128 E4M3 values in double (exact in any order), then
  // c += f32(dot) * scale with the multiply and the add rounded apart — as two calls (micro_f64,
  // epilogue_f64) and fused (micro_f64_scaled, where the table has it), for every row count of the
  // tiles (1-13: a 12-row tile and its remainders) and partial panels; columns >= n untouched.
  std::mt19937 gen(59);
  int fused = 0;
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    CAPTURE(cpu::isa_name(isa));
    const cpu::simd::GemmOps& ops = kernels.ops();
    const int nr = ops.nr64;
    for (int mr = 1; mr <= 13; ++mr)
      for (const int n : {nr, nr - 3, 5}) {
        CAPTURE(mr);
        CAPTURE(n);
        const auto [xq, wq, scale, start] = scaled_block(gen, mr, nr);
        std::vector<double> a(xq.size()), b(wq.size());  // b: a packed [128][nr] panel
        for (std::size_t i = 0; i < xq.size(); ++i) a[i] = e4m3_value(xq[i]);
        for (int j = 0; j < nr; ++j)
          for (int k = 0; k < 128; ++k) b[k * nr + j] = e4m3_value(wq[j * 128 + k]);
        std::vector<float> expected = start;
        for (int i = 0; i < mr; ++i)
          for (int j = 0; j < n; ++j) {
            double dot = 0.0;
            for (int k = 0; k < 128; ++k) dot += a[i * 128 + k] * b[k * nr + j];
            volatile float p = static_cast<float>(dot) * scale[i];
            expected[i * nr + j] += p;
          }
        std::vector<double> dot(static_cast<std::size_t>(mr * nr));
        std::vector<float> c = start;
        ops.micro_f64(mr, 128, a.data(), 128, b.data(), dot.data(), nr);
        ops.epilogue_f64(mr, n, dot.data(), nr, scale.data(), c.data(), nr);
        CHECK(bit_mismatches(c, expected) == 0);
        if (!ops.micro_f64_scaled) continue;
        ++fused;
        c = start;
        ops.micro_f64_scaled(mr, n, a.data(), 128, b.data(), scale.data(), c.data(), nr);
        CHECK(bit_mismatches(c, expected) == 0);
      }
  }
  if (cpu::detected_features().isa >= cpu::Isa::avx512) CHECK(fused > 0);
}

TEST_CASE("GemmOps micro-kernels, every ISA: c = (accumulate ? c : 0) + the sequential sum, empty sums included") {
  // micro_exact_products / micro_rounded_products / micro_f64 for every row count of a tile and its
  // remainders, depths 0 (an empty sum: zeros, or c untouched), 1, 7 and 128, both starts.
  std::mt19937 gen(71);
  std::uniform_int_distribution<int> mantissa(-127, 127);
  std::uniform_int_distribution<int> exponent(-8, 8);
  auto value = [&] { return std::ldexp(static_cast<float>(mantissa(gen)), exponent(gen)); };  // exact in bf16
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    CAPTURE(cpu::isa_name(isa));
    const cpu::simd::GemmOps& ops = kernels.ops();
    for (int mr = 1; mr <= 13; ++mr)
      for (const int kc : {0, 1, 7, 128}) {
        CAPTURE(mr);
        CAPTURE(kc);
        const int nr = ops.nr, nr64 = ops.nr64;
        std::vector<float> a(static_cast<std::size_t>(mr * std::max(kc, 1))), b(static_cast<std::size_t>(std::max(kc, 1) * nr));
        for (auto& v : a) v = value();
        for (auto& v : b) v = value();
        std::vector<float> start(static_cast<std::size_t>(mr * nr));
        for (auto& v : start) v = value();
        for (const bool accumulate : {false, true}) {
          CAPTURE(accumulate);
          std::vector<float> expected(start.size());
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j) {
              float sum = accumulate ? start[i * nr + j] : 0.0f;
              for (int k = 0; k < kc; ++k) {
                volatile float product = a[i * kc + k] * b[k * nr + j];  // exact: 8-bit significands
                sum += product;
              }
              expected[i * nr + j] = sum;
            }
          for (const auto kernel : {ops.micro_exact_products, ops.micro_rounded_products}) {
            std::vector<float> c = start;
            kernel(mr, kc, a.data(), kc, b.data(), nr, c.data(), nr, accumulate);
            int wrong = 0;
            for (std::size_t i = 0; i < c.size(); ++i) wrong += std::bit_cast<std::uint32_t>(c[i]) != std::bit_cast<std::uint32_t>(expected[i]);
            CHECK(wrong == 0);
          }
        }
        // micro_f64: exact double sums of the same values (b as a packed [kc][nr64] panel), no start
        std::vector<double> ad(a.begin(), a.end()), bd(static_cast<std::size_t>(std::max(kc, 1) * nr64));
        for (int k = 0; k < kc; ++k)
          for (int j = 0; j < nr64; ++j) bd[k * nr64 + j] = b[k * nr + j];
        std::vector<double> cd(static_cast<std::size_t>(mr * nr64), 1.5);
        ops.micro_f64(mr, kc, ad.data(), kc, bd.data(), cd.data(), nr64);
        int wrong = 0;
        for (int i = 0; i < mr; ++i)
          for (int j = 0; j < nr64; ++j) {
            double sum = 0.0;
            for (int k = 0; k < kc; ++k) sum += ad[i * kc + k] * bd[k * nr64 + j];
            wrong += cd[i * nr64 + j] != sum;
          }
        CHECK(wrong == 0);
      }
  }
}

TEST_CASE("cpu::linear with FP8 weights under denormals-are-zero and flush-to-zero: the same bits, MXCSR kept") {
  // Programs built with -ffast-math start with MXCSR's DAZ and FTZ bits set. The x86 kernels widen
  // E4M3's subnormal codes (every 16th code of these random weights) through subnormal floats, so
  // with those bits honoured they would read as zero: the CPU kernels clear them for their scope.
  constexpr unsigned kDazFtz = 0x8040u;
  std::mt19937 gen(57);
  for (const std::int64_t m : {1, 8, 20}) {
    const std::int64_t k = 256, n = 140;
    const Fp8Weight w = random_fp8_weight(n, k, gen);
    const std::vector<bf16> x = random_bf16(static_cast<std::size_t>(m * k), gen);
    const std::vector<bf16> exact = reference_fp8_linear(x, m, w, ScaleFmt::ue8m0);
    const std::vector<bf16> fast = m > 8 ? reference_fp8_linear_fast(x, m, w, ScaleFmt::ue8m0)
                                         : reference_fp8_linear_fast_rows(x, m, w, ScaleFmt::ue8m0);
    const MxcsrScope daz_ftz(kDazFtz);
    for (cpu::Isa isa : isas_here()) {
      const cpu::CpuKernels kernels = kernels_at(isa);
      CAPTURE(cpu::isa_name(isa));
      CAPTURE(m);
      std::vector<bf16> y(static_cast<std::size_t>(m * n));
      cpu::linear({x.data(), m, k, k}, w.view(), ScaleFmt::ue8m0, {y.data(), m, n, n}, kernels);
      CHECK(same_bits(y, exact));
      const cpu::CpuKernels fp8_kernels = kernels_at(isa, cpu::Fp8Accumulation::fast);
      cpu::linear({x.data(), m, k, k}, w.view(), ScaleFmt::ue8m0, {y.data(), m, n, n}, fp8_kernels);
      CHECK(same_bits(y, fast));
      CHECK((_mm_getcsr() & kDazFtz) == kDazFtz);  // the caller's environment is given back
    }
  }
}
#endif

TEST_CASE("cpu::linear: E4M3 weights over the whole code range, the NaN codes 0x7F / 0xFF reading as +-480") {
  // one weight row per code (128 columns of that code), one x row of ones: y = 128 * value * scales
  Fp8Weight w;
  w.out = 256;
  w.in = 128;
  w.codes.resize(256 * 128);
  for (int c = 0; c < 256; ++c)
    for (int i = 0; i < 128; ++i) w.codes[c * 128 + i] = static_cast<std::uint8_t>(c);
  w.scale = {1.0f, 1.0f};
  const std::vector<bf16> x(128, bf16(1.0f));
  for (std::int64_t m : {1, 6, 12}) {  // the decode kernels (lanes along k; over weight rows) and the packed ones
    std::vector<bf16> xm;
    for (std::int64_t r = 0; r < m; ++r) xm.insert(xm.end(), x.begin(), x.end());
    // both modes: 128 equal products sum exactly in f32 too
    for (cpu::Isa isa : isas_here())
      for (cpu::Fp8Accumulation acc : {cpu::Fp8Accumulation::exact, cpu::Fp8Accumulation::fast}) {
        const cpu::CpuKernels kernels = kernels_at(isa, acc);
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(acc == cpu::Fp8Accumulation::fast);
        CAPTURE(m);
        std::vector<bf16> y(static_cast<std::size_t>(m * 256));
        cpu::linear({xm.data(), m, 128, 128}, w.view(), ScaleFmt::ue8m0, {y.data(), m, 256, 256}, kernels);
        int bad = 0;
        for (int c = 0; c < 256; ++c) {
          const double v = (c & 0x7F) == 0x7F ? ((c & 0x80) ? -480.0 : 480.0) : e4m3_value(static_cast<unsigned>(c));
          // x = 1 quantizes to the code of 256 with the ue8m0 scale 2^-8: y = 128 * 256 * v * 2^-8 = 128 v
          const float want = static_cast<float>(bf16(static_cast<float>(128.0 * v)));
          for (std::int64_t r = 0; r < m; ++r) bad += static_cast<float>(y[r * 256 + c]) != want;
        }
        CHECK(bad == 0);
      }
  }
}

TEST_CASE("cpu::weight_rows_f32 dequantizes FP8 as bf16(e4m3 value * block scale)") {
  // 130 x 256: two row blocks (the second one 2 rows), two column blocks
  Fp8Weight w;
  w.out = 130;
  w.in = 256;
  w.codes.assign(130 * 256, 0x38);  // 1.0
  w.codes[0] = 0x40;                // 2.0 in block (0, 0)
  w.codes[129 * 256 + 255] = 0xC4;  // -3.0 in block (1, 1)
  w.codes[5 * 256 + 200] = 0x3C;    // 1.5 in block (0, 1)
  w.scale = {0.5f, 0.1f, 3.0f, 1.0f / 3.0f};
  std::vector<float> out(130 * 256);
  cpu::weight_rows_f32(w.view(), 0, 130, out.data());
  CHECK(out[0] == 1.0f);                                   // 2 * 0.5
  CHECK(out[1] == 0.5f);                                   // 1 * 0.5
  CHECK(out[128] == 0.10009765625f);                       // bf16(0.1)
  CHECK(out[5 * 256 + 200] == dsv32::round_bf16(1.5f * 0.1f));
  CHECK(out[128 * 256 + 3] == 3.0f);
  CHECK(out[129 * 256 + 255] == -1.0f);                    // -3 * f32(1/3) rounds to -1 in f32
  CHECK(cpu::dequant_weight(0x38, 1.0f / 3.0f) == 0.333984375f);  // bf16(1/3)
  // rows from an offset
  std::vector<float> tail(2 * 256);
  cpu::weight_rows_f32(w.view(), 128, 2, tail.data());
  CHECK(tail[255 + 256] == -1.0f);
  CHECK(tail[0] == 3.0f);
}

TEST_CASE("GemmOps::dequant_e4m3, every ISA: every code as bf16(value * scale), powers of two up to their limits") {
  // Powers of two inside [2^-117, 2^119] take a path without rounding (simd::e4m3_scale_exact);
  // the ones just outside, other scales and zero are rounded to bf16 (results past f32 become inf).
  const float scales[] = {1.0f, 0x1p-10f, -0x1p-3f, 0x1p-117f, 0x1p-118f, 0x1p-126f, 0x1p119f, 0x1p120f,
                          0.1f, 3.0f, -1.0f / 3.0f, 0.0f};
  CHECK(cpu::simd::e4m3_scale_exact(0x1p-117f));
  CHECK_FALSE(cpu::simd::e4m3_scale_exact(0x1p-118f));
  CHECK(cpu::simd::e4m3_scale_exact(0x1p119f));
  CHECK_FALSE(cpu::simd::e4m3_scale_exact(0x1p120f));
  CHECK_FALSE(cpu::simd::e4m3_scale_exact(0.75f));
  for (const float s1 : scales) {
    // three 128-column blocks (the middle one under scale 0.1), a tail of 37 columns past them
    const std::int64_t n = 3 * 128 + 37;
    const float block_scale[4] = {s1, 0.1f, s1, s1};
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) codes[i] = static_cast<std::uint8_t>((i * 7 + 3) % 256);
    for (int c = 0; c < 256; ++c) codes[c < 128 ? c : 256 + c - 128] = static_cast<std::uint8_t>(c);  // blocks 0, 2: every code
    for (cpu::Isa isa : isas_here()) {
      const cpu::CpuKernels kernels = kernels_at(isa);
      CAPTURE(cpu::isa_name(isa));
      CAPTURE(s1);
      std::vector<float> out(static_cast<std::size_t>(n), -7.0f);
      kernels.ops().dequant_e4m3(codes.data(), n, block_scale, out.data());
      int bad = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float expected = dsv32::round_bf16(cpu::simd::kE4m3Weight[codes[i]] * block_scale[i / 128]);
        bad += std::bit_cast<std::uint32_t>(out[i]) != std::bit_cast<std::uint32_t>(expected);
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("GemmOps::e4m3_scaled_cols / e4m3_scaled_rows, every ISA that has them: f32 sums of x times value * scale") {
  // The absorbed decode's kernels on FP8 codes as stored, against the definition in f32: each
  // product x * (value(code) * block scale) exact (power-of-two scales), summed from +0 in
  // increasing d (cols: the sums run down the weight's rows) or k (rows: along them). Every code
  // occurs (0x7F / 0xFF read as +-480); x spread over 2^-8..2^8 so that any other order of the
  // additions rounds differently; 1-8 x rows, partial column vectors and partial row groups.
  std::mt19937 gen(61);
  std::uniform_int_distribution<int> any_code(0, 255), exponent(-8, 8), scale_exp(-12, -2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto value = [](std::uint8_t c) { return static_cast<float>(e4m3_value(c)); };
  int tables = 0;
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    CAPTURE(cpu::isa_name(isa));
    const cpu::simd::GemmOps& ops = kernels.ops();
    if (!ops.e4m3_scaled_cols && !ops.e4m3_scaled_rows) continue;
    ++tables;
    for (int M = 1; M <= 8; ++M) {
      CAPTURE(M);
      const std::int64_t D = 37, N = 200, K = 256;  // N: a partial 16-column vector, two scale blocks
      std::vector<std::uint8_t> w(static_cast<std::size_t>(std::max(D * N, 16 * K)));
      for (auto& c : w) c = static_cast<std::uint8_t>(any_code(gen));
      const std::vector<float> scale{std::ldexp(1.0f, scale_exp(gen)), std::ldexp(1.0f, scale_exp(gen))};
      std::vector<float> x(static_cast<std::size_t>(std::max(D, K) * M));
      for (auto& v : x) v = dsv32::round_bf16(std::ldexp(normal(gen), exponent(gen)));
      if (ops.e4m3_scaled_cols) {
        std::vector<float> got(static_cast<std::size_t>(M * N), -1.0f), want(got.size());
        for (int m = 0; m < M; ++m)
          for (std::int64_t j = 0; j < N; ++j) {
            float acc = 0.0f;
            for (std::int64_t d = 0; d < D; ++d) {
              volatile float p = x[d * M + m] * (value(w[d * N + j]) * scale[j / 128]);
              acc += p;
            }
            want[m * N + j] = acc;
          }
        ops.e4m3_scaled_cols(M, D, N, x.data(), w.data(), N, scale.data(), got.data(), N, nullptr);
        CHECK(bit_mismatches(got, want) == 0);
      }
      if (ops.e4m3_scaled_rows)
        for (const int n : {16, 5}) {
          CAPTURE(n);
          std::vector<float> got(static_cast<std::size_t>(M * 16), -1.0f), want = got;
          for (int m = 0; m < M; ++m)
            for (int r = 0; r < n; ++r) {
              float acc = 0.0f;
              for (std::int64_t k = 0; k < K; ++k) {
                volatile float p = x[k * M + m] * (value(w[r * K + k]) * scale[k / 128]);
                acc += p;
              }
              want[m * 16 + r] = acc;
            }
          ops.e4m3_scaled_rows(M, n, K, x.data(), w.data(), K, scale.data(), got.data(), 16, w.data());
          CHECK(bit_mismatches(got, want) == 0);  // rows >= n untouched
        }
    }
  }
  if (cpu::detected_features().isa >= cpu::Isa::avx512) CHECK(tables > 0);
}

TEST_CASE("cpu::activation_scale and act_quant: closed forms") {
  // the 1e-4 clamp
  CHECK(cpu::activation_scale(0.0f, ScaleFmt::none) == 1e-4f * (1.0f / 448.0f));
  CHECK(cpu::activation_scale(5e-5f, ScaleFmt::none) == 1e-4f * (1.0f / 448.0f));
  CHECK(cpu::activation_scale(0.0f, ScaleFmt::ue8m0) == std::ldexp(1.0f, -22));  // 2^-23 < 1e-4/448 <= 2^-22
  // f32(1/448) * 448 rounds to exactly 1, so powers of two times 448 give exact power-of-two scales
  CHECK(cpu::activation_scale(448.0f, ScaleFmt::none) == 1.0f);
  CHECK(cpu::activation_scale(448.0f, ScaleFmt::ue8m0) == 1.0f);
  CHECK(cpu::activation_scale(3584.0f, ScaleFmt::ue8m0) == 8.0f);
  CHECK(cpu::activation_scale(449.0f, ScaleFmt::ue8m0) == 2.0f);
  CHECK(cpu::activation_scale(3.5f, ScaleFmt::ue8m0) == std::ldexp(1.0f, -7));  // 3.5 / 448 = 2^-7 exactly
  CHECK(cpu::activation_scale(3.6f, ScaleFmt::ue8m0) == std::ldexp(1.0f, -6));
  // ue8m0: the smallest power of two >= amax * f32(1/448), for amax over many magnitudes
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> e(-12.0f, 20.0f);
  for (int i = 0; i < 2000; ++i) {
    const float amax = std::exp2(e(gen));
    const float plain = std::max(amax, 1e-4f) * (1.0f / 448.0f);
    const float s = cpu::activation_scale(amax, ScaleFmt::ue8m0);
    CAPTURE(amax);
    CHECK(cpu::activation_scale(amax, ScaleFmt::none) == plain);
    int exponent = 0;
    CHECK(std::frexp(s, &exponent) == 0.5f);  // a power of two
    CHECK(s >= plain);
    CHECK(s / 2 < plain);
  }
}

TEST_CASE("act_quant's kernels, every ISA: every bf16 bit pattern quantized as encode_e4m3(clamp(x / s)), amax ignoring NaN") {
  // all 65536 patterns (zeros, subnormals, the rounding boundaries, infinities, NaNs of both signs)
  std::vector<std::uint16_t> x(65536);
  std::iota(x.begin(), x.end(), std::uint16_t{0});
  std::vector<std::uint8_t> got(x.size());
  for (cpu::Isa isa : isas_here()) {
    const cpu::CpuKernels kernels = kernels_at(isa);
    CAPTURE(cpu::isa_name(isa));
    const dsv32::cpu::simd::GemmOps& ops = kernels.ops();
    for (const float s : {1.0f, 0.5f, std::ldexp(1.0f, -20), 0.3712f, 3.0e-7f, 1.0e4f}) {
      CAPTURE(s);
      ops.quantize_e4m3(x.data(), 65536, s, got.data());
      std::int64_t wrong = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float v = std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16) / s;
        wrong += got[i] != dsv32::encode_e4m3(std::clamp(v, -448.0f, 448.0f));
      }
      CHECK(wrong == 0);
    }
    // odd lengths (the masked tail) leave the bytes after n alone
    std::fill(got.begin(), got.end(), std::uint8_t{0xAA});
    ops.quantize_e4m3(x.data() + 0x3F00, 37, 0.25f, got.data());
    for (int i = 0; i < 37; ++i)
      CHECK(got[i] == dsv32::encode_e4m3(std::bit_cast<float>(static_cast<std::uint32_t>(0x3F00 + i) << 16) / 0.25f));
    CHECK(got[37] == 0xAA);
    // amax: the largest magnitude, NaNs skipped as std::max skips them, infinities kept
    auto amax_of = [](const std::uint16_t* p, std::int64_t n) {
      float m = 0.0f;
      for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(std::bit_cast<float>(static_cast<std::uint32_t>(p[i]) << 16)));
      return m;
    };
    std::mt19937 gen(31);
    std::vector<std::uint16_t> block(131);
    for (int trial = 0; trial < 200; ++trial) {
      for (auto& b : block) b = static_cast<std::uint16_t>(gen() % 65536 < 60000 ? 0x3000 + gen() % 0x1800 : gen() % 65536);
      for (const std::int64_t n : {std::int64_t{128}, std::int64_t{131}, std::int64_t{5}})
        CHECK(std::bit_cast<std::uint32_t>(ops.amax_bf16(block.data(), n)) == std::bit_cast<std::uint32_t>(amax_of(block.data(), n)));
    }
    const std::uint16_t nan_first[4] = {0x7FC0, 0x3F80, 0xFFC1, 0xC000};  // NaN, 1, -NaN, -2
    CHECK(ops.amax_bf16(nan_first, 4) == 2.0f);
    for (int at = 0; at < 128; ++at) {  // a NaN in every place of a block
      std::vector<std::uint16_t> ones(128, 0x3F80);
      ones[static_cast<std::size_t>(at)] = 0x7FC0;
      CHECK(ops.amax_bf16(ones.data(), 128) == 1.0f);
    }
    const std::uint16_t inf[3] = {0x3F80, 0xFF80, 0x7FC0};  // 1, -inf, NaN
    CHECK(ops.amax_bf16(inf, 3) == INFINITY);
  }
}

TEST_CASE("cpu::act_quant: per-block scales, +-amax to +-448, codes as the nearest E4M3 of x / s") {
  std::mt19937 gen(5);
  for (ScaleFmt fmt : {ScaleFmt::none, ScaleFmt::ue8m0}) {
    CAPTURE(fmt == ScaleFmt::ue8m0);
    const std::int64_t rows = 3, cols = 384;
    std::vector<bf16> x = random_bf16(static_cast<std::size_t>(rows * cols), gen, 2.0f);
    // row 0 block 0: all zeros; row 0 block 1: +-amax at known places; row 1 block 2: powers of two
    for (int i = 0; i < 128; ++i) x[i] = bf16(0.0f);
    const float amax = 3584.0f;  // amax / 448 = 8: also exact for ue8m0
    for (int i = 0; i < 128; ++i) x[128 + i] = bf16(static_cast<float>(x[128 + i]) * 100.0f);
    x[128 + 7] = bf16(amax);
    x[128 + 99] = bf16(-amax);
    for (int i = 0; i < 128; ++i) x[cols + 256 + i] = bf16(std::ldexp(i % 2 ? -1.0f : 1.0f, i % 9 - 4));
    std::vector<std::uint8_t> q(static_cast<std::size_t>(rows * cols));
    std::vector<float> s(static_cast<std::size_t>(rows * 3));
    for (cpu::Isa isa : isas_here()) {
      const cpu::CpuKernels kernels = kernels_at(isa);
      CAPTURE(cpu::isa_name(isa));
      cpu::act_quant({x.data(), rows, cols, cols}, fmt, {q.data(), rows, cols, cols}, {s.data(), rows, 3, 3}, kernels);

      CHECK(s[0] == (fmt == ScaleFmt::none ? 1e-4f * (1.0f / 448.0f) : std::ldexp(1.0f, -22)));
      for (int i = 0; i < 128; ++i) CHECK(q[i] == 0x00);
      CHECK(s[1] == 8.0f);
      CHECK(q[128 + 7] == 0x7E);
      CHECK(q[128 + 99] == 0xFE);
      // every block against the naive act_quant
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t b = 0; b < 3; ++b) {
          std::uint8_t want[128];
          const float ws = reference_block_quant(&x[r * cols + b * 128], fmt, want);
          CHECK(s[r * 3 + b] == ws);
          for (int i = 0; i < 128; ++i) {
            CAPTURE(r);
            CAPTURE(b);
            CAPTURE(i);
            CHECK(q[r * cols + b * 128 + i] == want[i]);
          }
        }
      // with the plain scale the block's amax always maps to +-448
      if (fmt == ScaleFmt::none) {
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t b = 0; b < 3; ++b) {
            if (r == 0 && b == 0) continue;
            bool has_max = false;
            for (int i = 0; i < 128; ++i) has_max |= (q[r * cols + b * 128 + i] & 0x7F) == 0x7E;
            CHECK(has_max);
          }
      }
    }
  }
}

TEST_CASE("cpu::linear and linear_f32 refuse shapes and dtypes they cannot handle") {
  std::vector<bf16> x(6), y(10);
  std::vector<float> yf(10);
  std::vector<bf16> w(12);
  const WeightView w43{DType::BF16, w.data(), 4, 3, nullptr};
  std::string what = error_of([&] { cpu::linear({x.data(), 2, 3, 3}, w43, ScaleFmt::none, {y.data(), 2, 5, 5}); },
                              dsv32::ErrorKind::invalid_argument);
  CHECK(what.find("linear: input [2, 3] and output [2, 5] do not fit weight [4, 3]") != std::string::npos);
  error_of([&] { cpu::linear({x.data(), 3, 2, 2}, w43, ScaleFmt::none, {y.data(), 3, 4, 4}); },
           dsv32::ErrorKind::invalid_argument);
  error_of([&] { cpu::linear_f32({x.data(), 2, 3, 3}, w43, {yf.data(), 1, 4, 4}); }, dsv32::ErrorKind::invalid_argument);

  std::vector<std::uint8_t> codes(4 * 64);
  std::vector<float> scale(1, 1.0f);
  std::vector<bf16> x64(64), y4(4);
  const WeightView fp8{DType::F8_E4M3, codes.data(), 4, 64, scale.data()};
  what = error_of([&] { cpu::linear({x64.data(), 1, 64, 64}, fp8, ScaleFmt::none, {y4.data(), 1, 4, 4}); },
                  dsv32::ErrorKind::invalid_argument);
  CHECK(what.find("FP8 linear needs in_features % 128 == 0, got 64") != std::string::npos);
  std::vector<float> y4f(4);
  what = error_of([&] { cpu::linear_f32({x64.data(), 1, 64, 64}, fp8, {y4f.data(), 1, 4, 4}); },
                  dsv32::ErrorKind::invalid_argument);
  CHECK(what.find("f32 linear needs a BF16 or F32 weight, got F8_E4M3") != std::string::npos);
  // a dtype the products cannot read is refused before any parallel loop, also for a weight large
  // enough to be split over threads (an exception escaping an OpenMP region would terminate)
  std::vector<std::int32_t> big(1024 * 512);
  std::vector<bf16> xb(4 * 512), yb(4 * 1024);
  for (DType bad : {DType::I32, DType::F16}) {
    const WeightView wb{bad, big.data(), 1024, 512, nullptr};
    what = error_of([&] { cpu::linear({xb.data(), 4, 512, 512}, wb, ScaleFmt::none, {yb.data(), 4, 1024, 1024}); },
                    dsv32::ErrorKind::unsupported);
    CHECK(what.find(std::string("linear: weight dtype ") + std::string(dsv32::dtype_name(bad))) != std::string::npos);
  }
  // no rows: nothing to do, nothing touched
  CHECK_NOTHROW(cpu::linear({x.data(), 0, 3, 3}, w43, ScaleFmt::none, {y.data(), 0, 4, 4}));
}

TEST_CASE("cpu::set_num_threads refuses a thread count below 1 and keeps the current one") {
  const int before = dsv32::cpu::num_threads();
  for (int bad : {0, -1}) {
    try {
      dsv32::cpu::set_num_threads(bad);
      FAIL("set_num_threads(", bad, ") did not throw");
    } catch (const dsv32::Error& e) {
      CHECK(e.kind() == dsv32::ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find("the thread count must be >= 1, got " + std::to_string(bad)) != std::string::npos);
    }
  }
  CHECK(dsv32::cpu::num_threads() == before);
  dsv32::cpu::set_num_threads(1);
  CHECK(dsv32::cpu::num_threads() == 1);
  dsv32::cpu::set_num_threads(before);
}
