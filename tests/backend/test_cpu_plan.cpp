// The CPU kernel plan (backend/cpu/kernel_plan.hpp) and the kernel tables (simd/tables.hpp) on
// every feature set, on any host: the paths against the rules the plan documents, written out case
// by case here; every table holding each entry its paths call; and, for every feature set this host
// can run (levels capped, VBMI and AMX dropped, both dot-product preferences), the products' bits
// equal to the portable table's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dsv32/backend/cpu/gemm.hpp"
#include "dsv32/backend/cpu/kernel_plan.hpp"

namespace cpu = dsv32::cpu;
using cpu::CpuFeatures;
using cpu::DensePath;
using cpu::Fp8Path;
using cpu::Isa;
using cpu::LatentPath;
using dsv32::DType;

namespace {

constexpr auto kExact = cpu::Fp8Accumulation::exact;
constexpr auto kFast = cpu::Fp8Accumulation::fast;

constexpr CpuFeatures kPortable{Isa::portable, false, false, false};
constexpr CpuFeatures kAvx2{Isa::avx2, false, false, false};
constexpr CpuFeatures kSkylake{Isa::avx512, false, false, false};          // AVX-512 without VBMI
constexpr CpuFeatures kIceLake{Isa::avx512, true, false, false};           // with VBMI
constexpr CpuFeatures kZen4{Isa::avx512_bf16, true, false, false};         // VDPBF16PS preferred
constexpr CpuFeatures kGraniteNoAmx{Isa::avx512_bf16, true, false, true};  // Intel: FMAs preferred
constexpr CpuFeatures kGranite{Isa::avx512_bf16, true, true, true};        // with AMX-INT8
constexpr CpuFeatures kCooperLake{Isa::avx512_bf16, false, false, true};   // BF16 without VBMI

// Every raw combination of the four fields (capped() or not).
std::vector<CpuFeatures> every_feature_set() {
  std::vector<CpuFeatures> v;
  for (int isa = 0; isa <= 3; ++isa)
    for (int bits = 0; bits < 8; ++bits)
      v.push_back({static_cast<Isa>(isa), (bits & 4) != 0, (bits & 2) != 0, (bits & 1) != 0});
  return v;
}

// The feature sets this host can run: every level up to its own, with and without VBMI and AMX
// where it has them, both dot-product preferences at avx512_bf16.
std::vector<CpuFeatures> feature_sets_here() {
  const CpuFeatures host = cpu::detected_features();
  std::vector<CpuFeatures> v;
  for (int isa = 0; isa <= static_cast<int>(host.isa); ++isa)
    for (int bits = 0; bits < 8; ++bits) {
      const CpuFeatures f{static_cast<Isa>(isa), (bits & 4) != 0, (bits & 2) != 0, (bits & 1) != 0};
      if ((f.vbmi && !host.vbmi) || (f.amx_int8 && !host.amx_int8)) continue;
      if (cpu::capped(f, f.isa) == f) v.push_back(f);
    }
  return v;
}

}  // namespace

TEST_CASE("cpu::capped: a level's impossible features are cleared, the cap lowers the level") {
  CHECK(cpu::capped({Isa::avx2, true, true, true}, Isa::avx512_bf16) == kAvx2);
  CHECK(cpu::capped(kGranite, Isa::avx512) == kIceLake);
  CHECK(cpu::capped(kGranite, Isa::avx512_bf16) == kGranite);
  CHECK(cpu::capped({Isa::avx512_bf16, false, true, false}, Isa::avx512_bf16) ==
        CpuFeatures{Isa::avx512_bf16, false, false, false});  // AMX tiles only with VBMI
  CHECK(cpu::capped(kZen4, Isa::portable) == kPortable);
  // distinct indices for the distinct capped sets
  std::vector<int> seen(cpu::kCpuFeatureSets, 0);
  for (const CpuFeatures& f : every_feature_set()) {
    const CpuFeatures c = cpu::capped(f, f.isa);
    if (c == f) ++seen[cpu::feature_index(f)];
  }
  for (int n : seen) CHECK(n <= 1);
}

TEST_CASE("cpu::plan_dense: the documented rules, case by case") {
  CHECK(cpu::plan_dense(kPortable, DType::BF16, 1) == DensePath::rows_packed);
  CHECK(cpu::plan_dense(kPortable, DType::BF16, 4) == DensePath::rows_packed);
  CHECK(cpu::plan_dense(kPortable, DType::BF16, 5) == DensePath::panels);
  CHECK(cpu::plan_dense(kAvx2, DType::BF16, 8) == DensePath::rows_bf16);
  CHECK(cpu::plan_dense(kAvx2, DType::BF16, 9) == DensePath::panels);
  CHECK(cpu::plan_dense(kAvx2, DType::F32, 6) == DensePath::rows_packed);
  CHECK(cpu::plan_dense(kAvx2, DType::F32, 7) == DensePath::panels);
  CHECK(cpu::plan_dense(kIceLake, DType::BF16, 3) == DensePath::rows_bf16);
  CHECK(cpu::plan_dense(kIceLake, DType::BF16, 12) == DensePath::rows_packed);
  CHECK(cpu::plan_dense(kIceLake, DType::F32, 12) == DensePath::rows_packed);
  CHECK(cpu::plan_dense(kIceLake, DType::F32, 13) == DensePath::panels);
  CHECK(cpu::plan_dense(kZen4, DType::BF16, 1) == DensePath::rows_bf16_pairs);
  CHECK(cpu::plan_dense(kZen4, DType::F32, 1) == DensePath::rows_packed);
  CHECK(cpu::plan_dense(kGranite, DType::BF16, 2) == DensePath::rows_bf16);
  CHECK(cpu::plan_dense(kCooperLake, DType::BF16, 8) == DensePath::rows_bf16);
  CHECK(cpu::plan_dense({Isa::avx512_bf16, false, false, false}, DType::BF16, 8) == DensePath::rows_bf16_pairs);
}

TEST_CASE("cpu::plan_fp8: the documented rules, case by case") {
  // exact: lanes along k below 3 rows, over the weight rows from 3 to 8 (VBMI; AMX tiles), panels beyond
  CHECK(cpu::plan_fp8(kPortable, kExact, 1) == Fp8Path::rows_f64);
  CHECK(cpu::plan_fp8(kPortable, kExact, 8) == Fp8Path::rows_f64);
  CHECK(cpu::plan_fp8(kPortable, kExact, 9) == Fp8Path::panels_f64);
  CHECK(cpu::plan_fp8(kAvx2, kExact, 4) == Fp8Path::rows_f64);
  CHECK(cpu::plan_fp8(kSkylake, kExact, 3) == Fp8Path::rows_f64);
  CHECK(cpu::plan_fp8(kIceLake, kExact, 2) == Fp8Path::rows_f64);
  CHECK(cpu::plan_fp8(kIceLake, kExact, 3) == Fp8Path::panel_rows_f64);
  CHECK(cpu::plan_fp8(kIceLake, kExact, 8) == Fp8Path::panel_rows_f64);
  CHECK(cpu::plan_fp8(kIceLake, kExact, 9) == Fp8Path::panels_f64);
  CHECK(cpu::plan_fp8(kGranite, kExact, 2) == Fp8Path::rows_f64);
  CHECK(cpu::plan_fp8(kGranite, kExact, 3) == Fp8Path::tiles_rows);
  CHECK(cpu::plan_fp8(kGranite, kExact, 9) == Fp8Path::tiles_gemm);
  CHECK(cpu::plan_fp8(kGraniteNoAmx, kExact, 3) == Fp8Path::panel_rows_f64);
  CHECK(cpu::plan_fp8(kGraniteNoAmx, kExact, 512) == Fp8Path::panels_f64);
  // fast: the row order up to 4 rows, the panel order beyond (streamed up to 8 where a level has it)
  for (const CpuFeatures& f : {kPortable, kAvx2, kSkylake, kIceLake, kZen4, kGranite, kCooperLake})
    for (int rows = 1; rows <= 4; ++rows) CHECK(cpu::plan_fp8(f, kFast, rows) == Fp8Path::row_order_pairs);
  CHECK(cpu::plan_fp8(kPortable, kFast, 5) == Fp8Path::panels_values);
  CHECK(cpu::plan_fp8(kAvx2, kFast, 5) == Fp8Path::panel_rows_pairs);
  CHECK(cpu::plan_fp8(kAvx2, kFast, 8) == Fp8Path::panel_rows_pairs);
  CHECK(cpu::plan_fp8(kAvx2, kFast, 9) == Fp8Path::panels_values);
  CHECK(cpu::plan_fp8(kSkylake, kFast, 5) == Fp8Path::panel_rows_pairs);
  CHECK(cpu::plan_fp8(kIceLake, kFast, 5) == Fp8Path::panel_rows_f32);
  CHECK(cpu::plan_fp8(kZen4, kFast, 5) == Fp8Path::panel_rows_pairs);
  CHECK(cpu::plan_fp8(kZen4, kFast, 9) == Fp8Path::panels_pairs);
  CHECK(cpu::plan_fp8(kGranite, kFast, 5) == Fp8Path::panel_rows_f32);
  CHECK(cpu::plan_fp8(kGranite, kFast, 9) == Fp8Path::panels_values);
  CHECK(cpu::plan_fp8(kCooperLake, kFast, 6) == Fp8Path::panel_rows_pairs);
  CHECK(cpu::plan_fp8(kCooperLake, kFast, 64) == Fp8Path::panels_values);
  // features a level cannot have change nothing
  CHECK(cpu::plan_fp8({Isa::avx2, true, true, false}, kExact, 3) == Fp8Path::rows_f64);
}

TEST_CASE("cpu::plan_latent: codes as stored on the SIMD levels up to 8 tokens") {
  CHECK(cpu::plan_latent(kPortable, false, 1, 512) == LatentPath::dequantized);
  CHECK(cpu::plan_latent(kPortable, true, 1, 512) == LatentPath::dequantized);
  CHECK(cpu::plan_latent(kAvx2, false, 4, 512) == LatentPath::scaled_codes);
  CHECK(cpu::plan_latent(kAvx2, false, 8, 512) == LatentPath::scaled_codes);
  CHECK(cpu::plan_latent(kAvx2, false, 9, 512) == LatentPath::dequantized);
  CHECK(cpu::plan_latent(kAvx2, true, 8, 512) == LatentPath::scaled_codes);
  CHECK(cpu::plan_latent(kAvx2, true, 8, 500) == LatentPath::dequantized);
  CHECK(cpu::plan_latent(kIceLake, false, 8, 512) == LatentPath::scaled_codes);
  CHECK(cpu::plan_latent(kIceLake, false, 9, 512) == LatentPath::dequantized);
  CHECK(cpu::plan_latent(kSkylake, true, 9, 512) == LatentPath::dequantized);
}

TEST_CASE("cpu::kernel_table: every feature set's table holds every entry its planned paths call") {
  using Ops = cpu::simd::GemmOps;
  for (const CpuFeatures& raw : every_feature_set()) {
    const CpuFeatures f = cpu::capped(raw, raw.isa);
    const Ops& ops = cpu::kernel_table(raw);
    CAPTURE(cpu::isa_name(raw.isa));
    CAPTURE(raw.vbmi);
    CAPTURE(raw.amx_int8);
    CAPTURE(raw.fma_dots);
    CHECK(ops.isa == f.isa);
    CHECK(ops.mr == cpu::micro_rows(f.isa));
    CHECK(ops.mr64 == cpu::micro_rows(f.isa));
    CHECK(&ops == &cpu::kernel_table(f));  // one table per distinct feature set
    // the entries every path may reach (packing, widening, quantizing, the epilogues, the panels)
    for (const bool present :
         {ops.pack_bf16 != nullptr, ops.pack_f32 != nullptr, ops.pack_e4m3 != nullptr, ops.pack_e4m3_f64 != nullptr,
          ops.micro_exact_products != nullptr, ops.micro_rounded_products != nullptr, ops.micro_f64 != nullptr,
          ops.micro_f64_scaled != nullptr, ops.widen_bf16 != nullptr, ops.widen_e4m3 != nullptr,
          ops.widen_e4m3_f64 != nullptr, ops.amax_bf16 != nullptr, ops.quantize_e4m3 != nullptr,
          ops.dequant_e4m3 != nullptr, ops.epilogue_f64 != nullptr, ops.epilogue_f32 != nullptr,
          ops.fp8_value_dots != nullptr, ops.fp8_value_dots_scaled != nullptr, ops.e4m3_rows != nullptr,
          ops.e4m3_pair_rows != nullptr})
      CHECK(present);
    for (const DType dtype : {DType::BF16, DType::F32})
      for (std::int64_t rows = 1; rows <= 20; ++rows) {
        CAPTURE(rows);
        switch (cpu::plan_dense(raw, dtype, rows)) {
          case DensePath::rows_bf16_pairs: CHECK((ops.bf16_pair_rows && ops.bf16_rows)); break;
          case DensePath::rows_bf16: CHECK((ops.bf16_rows != nullptr)); break;
          default: break;  // the packing and micro-kernels above
        }
      }
    for (const auto mode : {kExact, kFast})
      for (std::int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 64, 512}) {
        CAPTURE(rows);
        const Fp8Path path = cpu::plan_fp8(raw, mode, rows);
        CAPTURE(cpu::path_name(path));
        switch (path) {
          case Fp8Path::tiles_rows: CHECK((ops.e4m3_tiles_rows && ops.e4m3_plane_tiles)); break;
          case Fp8Path::panel_rows_f64: CHECK((ops.e4m3_panel_rows_f64 != nullptr)); break;
          case Fp8Path::panel_rows_pairs: CHECK((ops.e4m3_panel_rows != nullptr)); break;
          case Fp8Path::panel_rows_f32: CHECK((ops.e4m3_panel_rows_f32 != nullptr)); break;
          case Fp8Path::tiles_gemm: CHECK((ops.e4m3_tiles_gemm && ops.e4m3_plane_tiles)); break;
          case Fp8Path::panels_pairs: CHECK((ops.fp8_pair_dots != nullptr)); break;
          default: break;  // rows_f64, row_order_pairs, panels_f64, panels_values: the entries above
        }
        // exact mode never on a fast path, and the reverse
        const bool fast_path = path == Fp8Path::row_order_pairs || path == Fp8Path::panel_rows_pairs ||
                               path == Fp8Path::panel_rows_f32 || path == Fp8Path::panels_values ||
                               path == Fp8Path::panels_pairs;
        CHECK(fast_path == (mode == kFast));
      }
    for (const bool project : {false, true})
      for (std::int64_t tokens = 1; tokens <= 9; ++tokens)
        if (cpu::plan_latent(raw, project, tokens, 512) == LatentPath::scaled_codes)
          CHECK((project ? ops.e4m3_scaled_rows != nullptr : ops.e4m3_scaled_cols != nullptr));
  }
}

TEST_CASE("cpu::linear on every feature set this host runs: each planned path gives the portable table's bits") {
  // FP8 (both modes) and BF16 products at row counts that reach every path, on one random problem,
  // against the portable feature set's result.
  std::mt19937 gen(83);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t N = 256, K = 512;
  std::vector<std::uint8_t> wq(static_cast<std::size_t>(N * K));
  std::vector<dsv32::bf16> wb(wq.size());
  for (std::size_t i = 0; i < wq.size(); ++i) {
    const float v = normal(gen) * 0.02f;
    wq[i] = dsv32::encode_e4m3(v * 448.0f * 16.0f);
    wb[i] = dsv32::bf16(v);
  }
  std::vector<float> scale(static_cast<std::size_t>((N / 128) * (K / 128)));
  for (std::size_t i = 0; i < scale.size(); ++i) scale[i] = std::ldexp(1.0f, -12 + static_cast<int>(i % 3));
  const dsv32::WeightView<> fp8{DType::F8_E4M3, wq.data(), N, K, scale.data()};
  const dsv32::WeightView<> bf16w{DType::BF16, wb.data(), N, K, nullptr};
  const std::vector<CpuFeatures> sets = feature_sets_here();
  int runs = 0;
  for (const std::int64_t M : {1, 3, 5, 8, 13}) {
    std::vector<dsv32::bf16> x(static_cast<std::size_t>(M * K));
    for (auto& v : x) v = dsv32::bf16(normal(gen));
    for (const auto mode : {kExact, kFast}) {
      std::vector<dsv32::bf16> want(static_cast<std::size_t>(M * N)), want_dense(want.size());
      cpu::linear({x.data(), M, K, K}, fp8, dsv32::ScaleFmt::ue8m0, {want.data(), M, N, N}, {kPortable, mode});
      cpu::linear({x.data(), M, K, K}, bf16w, dsv32::ScaleFmt::none, {want_dense.data(), M, N, N}, {kPortable, mode});
      for (const CpuFeatures& f : sets) {
        CAPTURE(M);
        CAPTURE(mode == kFast);
        CAPTURE(cpu::isa_name(f.isa));
        CAPTURE(f.vbmi);
        CAPTURE(f.amx_int8);
        CAPTURE(f.fma_dots);
        CAPTURE(cpu::path_name(cpu::plan_fp8(f, mode, M)));
        std::vector<dsv32::bf16> y(want.size());
        cpu::linear({x.data(), M, K, K}, fp8, dsv32::ScaleFmt::ue8m0, {y.data(), M, N, N}, {f, mode});
        int diff = 0;
        for (std::size_t i = 0; i < y.size(); ++i)
          diff += Eigen::numext::bit_cast<std::uint16_t>(y[i]) != Eigen::numext::bit_cast<std::uint16_t>(want[i]);
        CHECK(diff == 0);
        cpu::linear({x.data(), M, K, K}, bf16w, dsv32::ScaleFmt::none, {y.data(), M, N, N}, {f, mode});
        diff = 0;
        for (std::size_t i = 0; i < y.size(); ++i)
          diff += Eigen::numext::bit_cast<std::uint16_t>(y[i]) != Eigen::numext::bit_cast<std::uint16_t>(want_dense[i]);
        CHECK(diff == 0);
        ++runs;
      }
    }
  }
  MESSAGE(sets.size() << " feature sets on this host, " << runs << " products per dtype");
  CHECK(runs == static_cast<int>(sets.size()) * 10);
}
