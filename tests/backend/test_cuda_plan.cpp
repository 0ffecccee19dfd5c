// Host-side tests of the CUDA backend, run on every machine (no GPU, no CUDA toolkit needed): the
// scalar numerics its kernels call (backend/cuda/numeric.hpp) against the CPU backend's on every bf16
// pattern and on activation scales and codes, the exponential both backends round once, the expert
// plan its kernels run per thread (backend/cuda/routing.hpp) against cpu::moe_plan(), the grouped
// experts' indexing (row tiles, a row's expert, the combine order) against the CPU MoE's per-expert
// loop, and the planning of cuBLASLt products, scale layouts, grouped experts and kernel launches
// (backend/cuda/plan.hpp). The E4M3 codes and the routing are not the CUDA backend's own: both
// backends call core/e4m3.hpp and backend/routing.hpp, tested in tests/core/test_numeric.cpp and
// tests/backend/test_moe.cpp.
#include "dsv32/backend/cuda/numeric.hpp"
#include "dsv32/backend/cuda/plan.hpp"
#include "dsv32/backend/cuda/routing.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

#include "dsv32/backend/cpu/attention.hpp"
#include "dsv32/backend/cpu/moe.hpp"
#include "dsv32/backend/cpu/quant.hpp"
#include "support/test_support.hpp"

namespace {

namespace cu = dsv32::cuda;
using dsv32::bf16;

std::uint16_t bits_of(bf16 b) { return std::bit_cast<std::uint16_t>(b); }

}  // namespace

TEST_CASE("CUDA numerics: bf16 rounding equals Eigen's on every bf16 neighbourhood and random floats") {
  std::mt19937 gen(1);
  std::uniform_int_distribution<std::uint32_t> any;
  int mismatches = 0;
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (const std::uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const float f = std::bit_cast<float>(hi << 16 | lo);
      mismatches += cu::float_to_bf16(f) != bits_of(bf16(f));
    }
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(any(gen));
    mismatches += cu::float_to_bf16(f) != bits_of(bf16(f));
  }
  CHECK(mismatches == 0);
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = cu::bf16_to_float(static_cast<std::uint16_t>(b));
    const float want = static_cast<float>(std::bit_cast<bf16>(static_cast<std::uint16_t>(b)));
    CHECK((std::bit_cast<std::uint32_t>(f) == std::bit_cast<std::uint32_t>(want) || (std::isnan(f) && std::isnan(want))));
  }
}

TEST_CASE("CUDA numerics: activation scales and quantized codes equal cpu::act_quant's") {
  std::mt19937 gen(3);
  std::lognormal_distribution<float> amax(0.0f, 4.0f);
  std::normal_distribution<float> x(0.0f, 3.0f);
  for (int i = 0; i < 100000; ++i) {
    const float a = i == 0 ? 0.0f : amax(gen);
    for (const auto fmt : {dsv32::ScaleFmt::none, dsv32::ScaleFmt::ue8m0}) {
      const float s = cu::activation_scale(a, fmt == dsv32::ScaleFmt::ue8m0);
      REQUIRE(std::bit_cast<std::uint32_t>(s) == std::bit_cast<std::uint32_t>(dsv32::cpu::activation_scale(a, fmt)));
      const float v = x(gen) * a;
      REQUIRE(cu::quantize_activation(v, s) == dsv32::encode_e4m3(std::clamp(v / s, -448.0f, 448.0f)));
    }
  }
}

TEST_CASE("exp_rounded: exp rounded once from double is the C library's expf almost everywhere") {
  std::mt19937 gen(4);
  std::uniform_real_distribution<float> d(-80.0f, 80.0f);
  int differ = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float x = d(gen);
    const float a = dsv32::exp_rounded(x), b = std::exp(x);
    CHECK(std::fabs(a - b) <= std::fabs(b) * 1.2e-7f);  // one ulp at most
    differ += a != b;
  }
  MESSAGE("exp_rounded differs from std::exp(float) on " << differ << " of " << n << " inputs (by one ulp)");
  CHECK(differ <= n / 1000);
}

TEST_CASE("CUDA numerics: top-k keys order like cpu::top_k (scores, then the lower position)") {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> small(-3, 3);
  for (int round = 0; round < 50; ++round) {
    const int n = 1 + round * 7;
    std::vector<float> s(static_cast<std::size_t>(n));
    for (auto& v : s) v = round % 3 == 0 ? static_cast<float>(small(gen)) : std::ldexp(static_cast<float>(small(gen)), small(gen));
    if (n > 3) s[1] = -0.0f, s[2] = 0.0f, s[3] = -INFINITY;
    std::vector<std::int32_t> want(static_cast<std::size_t>(n));
    dsv32::cpu::top_k(s.data(), n, n, want.data());
    std::vector<std::uint64_t> keys;
    for (int i = 0; i < n; ++i) keys.push_back(cu::topk_key(s[i], i));
    std::sort(keys.begin(), keys.end(), std::greater<>());
    std::vector<std::int32_t> got;
    for (auto k : keys) got.push_back(cu::topk_position(k));
    CHECK(got == want);
  }
}

TEST_CASE("CUDA plan: expert_rows and expert_count equal cpu::moe_plan on routed tokens") {
  std::mt19937 gen(6);
  std::normal_distribution<float> d(0.0f, 2.0f);
  struct Case {
    dsv32::RoutingParams p;
    std::int64_t E;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{dsv32::ScoreFunc::sigmoid, 8, 4, 8, 2.5f}, 256, true},
      {{dsv32::ScoreFunc::sigmoid, 2, 1, 3, 1.5f}, 8, true},
      {{dsv32::ScoreFunc::sigmoid, 4, 2, 4, 1.0f}, 32, false},
      {{dsv32::ScoreFunc::softmax, 1, 1, 6, 1.0f}, 64, false},
      {{dsv32::ScoreFunc::softmax, 4, 2, 2, 1.0f}, 16, true},
  };
  for (const auto& c : cases) {
    const std::int64_t T = 40, k = c.p.top_k;
    std::vector<float> logits(static_cast<std::size_t>(T * c.E)), bias(static_cast<std::size_t>(c.E));
    for (auto& v : logits) v = d(gen);
    for (auto& v : bias) v = d(gen) * 0.05f;
    std::vector<float> w(static_cast<std::size_t>(T * k));
    std::vector<std::int32_t> e(w.size());
    dsv32::cpu::route({logits.data(), T, c.E, c.E}, c.bias ? bias.data() : nullptr, c.p, {w.data(), T, k, k},
                      {e.data(), T, k, k});
    const std::int64_t first = c.E / 4, local = c.E / 2;
    std::vector<std::int32_t> rows(w.size()), offsets(static_cast<std::size_t>(local + 1)), grows(w.size());
    std::vector<float> rw(w.size()), grw(w.size());
    dsv32::cpu::moe_plan({e.data(), T, k, k}, {w.data(), T, k, k}, first, rows.data(), rw.data(), offsets.data(), local);
    std::int32_t at = 0;
    for (std::int64_t x = 0; x < local; ++x) {
      CHECK(at == offsets[static_cast<std::size_t>(x)]);
      cu::expert_rows(e.data(), w.data(), T, k, first, x, at, grows.data(), grw.data());
      at += cu::expert_count(e.data(), T * k, first, x);
    }
    CHECK(at == offsets.back());
    CHECK(std::equal(rows.begin(), rows.begin() + at, grows.begin()));
    CHECK(std::equal(rw.begin(), rw.begin() + at, grw.begin()));
  }
}

TEST_CASE("CUDA plan: cuBLASLt operands, FP8 scale layouts and scratch chunking") {
  using dsv32::DType;
  cu::GemmRequest r;
  // bf16: A = W (op T, ld K), B = X (op N, ld = its row stride), D = Y (ld = its row stride), no scratch
  r = {DType::BF16, false, 5, 1536, 7168, 7200, 1600, true};
  auto p = cu::plan_linear(r, 1 << 20);
  CHECK(p.a_type == cu::GemmType::bf16);
  CHECK(p.transpose_a);
  CHECK_FALSE(p.transpose_b);
  CHECK(p.lda == 7168);
  CHECK(p.ldb == 7200);
  CHECK(p.ldd == 1600);
  CHECK(p.scratch_bytes == 0);
  CHECK(p.chunk_rows == 5);
  // FP8 671B shape: block scales as the checkpoint stores them (56 K blocks, a multiple of 4)
  r = {DType::F8_E4M3, false, 2048, 2048, 7168, 7168, 2048, true};
  p = cu::plan_linear(r, 64u << 20);
  CHECK(p.a_scale == cu::GemmScale::blk128x128);
  CHECK(p.b_scale == cu::GemmScale::vec128);
  CHECK(p.k_blocks == 56);
  CHECK(p.w_scale_ld == 56);
  CHECK_FALSE(p.repack_w_scales);
  CHECK(p.chunk_rows % 4 == 0);
  CHECK(p.scratch_bytes <= (64u << 20));
  CHECK(p.x_scale_offset >= p.x_offset + static_cast<std::size_t>(p.chunk_rows * 7168));
  // tiny FP8 shapes: 2 K blocks, repacked to 4; 3 rows padded to 4 and staged
  r = {DType::F8_E4M3, false, 3, 160, 256, 256, 160, true};
  p = cu::plan_linear(r, 1 << 20);
  CHECK(p.repack_w_scales);
  CHECK(p.w_scale_ld == 4);
  CHECK(p.gemm_rows(3) == 4);
  CHECK(p.stages_chunk(3));
  CHECK(p.w_scale_offset % cu::kScratchAlignment == 0);
  CHECK(p.d_offset % cu::kScratchAlignment == 0);
  // an f32 weight with a bf16 result: widened X, f32 product staged and rounded
  r = {DType::F32, false, 7, 300, 96, 96, 300, true};
  p = cu::plan_linear(r, 1 << 20);
  CHECK(p.input == cu::GemmInput::widened);
  CHECK(p.output == cu::GemmOutput::staged);
  CHECK(p.round_output);
  // errors name the shapes
  r = {DType::F8_E4M3, false, 64, 2048, 7168, 7168, 2048, true};
  dsv32::test::check_error([&] { (void)cu::plan_linear(r, 4096); }, dsv32::ErrorKind::unsupported, {"scratch", "7168"});
  r = {DType::F8_E4M3, true, 4, 64, 256, 256, 64, true};
  dsv32::test::check_error([&] { (void)cu::plan_linear(r, 1 << 20); }, dsv32::ErrorKind::invalid_argument, {"F8_E4M3"});
  r = {DType::F8_E4M3, false, 4, 64, 200, 200, 64, true};
  dsv32::test::check_error([&] { (void)cu::plan_linear(r, 1 << 20); }, dsv32::ErrorKind::invalid_argument, {"128"});
}

TEST_CASE("CUDA plan: scale repacking, vector-scale layout, heuristic keys and launch shapes") {
  const std::vector<float> src = {1, 2, 3, 4, 5, 6};  // [2 N blocks, 3 K blocks]
  std::vector<float> dst(8, -1.0f);
  cu::repack_block_scales(src.data(), 2, 3, dst.data());
  CHECK(dst == std::vector<float>{1, 2, 3, 0, 4, 5, 6, 0});
  CHECK(cu::block_scale_ld(7168) == 56);
  CHECK(cu::block_scale_ld(256) == 4);
  CHECK_FALSE(cu::block_scales_need_repack(7168));
  CHECK(cu::block_scales_need_repack(1536 + 128));
  const std::vector<float> act = {1, 2, 3, 4, 5, 6};  // [3 rows, 2 blocks]
  std::vector<float> vec(8);
  cu::to_vector_scale_layout(act.data(), 3, 2, 4, vec.data());
  CHECK(vec == std::vector<float>{1, 3, 5, 1, 2, 4, 6, 1});
  cu::GemmRequest r{dsv32::DType::BF16, false, 5, 64, 96, 96, 64, true};
  const auto p = cu::plan_linear(r, 0);
  const auto k1 = cu::gemm_key(p, 5, 0x1000, 0x2000, 0x3000), k2 = cu::gemm_key(p, 5, 0x1000, 0x2010, 0x3000);
  CHECK_FALSE(k1 == k2);  // another alignment of B: another heuristic query
  CHECK(k2.align_b == 16);
  CHECK(k1 == cu::gemm_key(p, 5, 0x5000, 0x6000, 0x7000));
  CHECK(cu::GemmKeyHash{}(k1) == cu::GemmKeyHash{}(cu::gemm_key(p, 5, 0x5000, 0x6000, 0x7000)));
  CHECK(cu::alignment_of(0) == 256);
  CHECK(cu::alignment_of(6) == 2);
  CHECK(cu::elementwise_launch(10).blocks == 1);
  CHECK(cu::elementwise_launch(std::int64_t{1} << 40).blocks == cu::kMaxGridBlocks);
  CHECK(cu::next_pow2(2048) == 2048);
  CHECK(cu::next_pow2(2049) == 4096);
  const auto ip = cu::plan_indexer(64, 128, 2048, 64, 4096, 64u << 20, 227u << 10);
  CHECK(ip.sort_capacity == 2048);
  CHECK(ip.rows_per_pass == 64);
  dsv32::test::check_error([] { (void)cu::plan_indexer(64, 128, 2048, 64, 1 << 30, 1024, 227u << 10); },
                           dsv32::ErrorKind::unsupported, {"scratch"});
  dsv32::test::check_error([] { (void)cu::plan_sparse_attention(128, 64, 1 << 20, 227u << 10); },
                           dsv32::ErrorKind::unsupported, {"shared memory"});
}

TEST_CASE("CUDA plan: hand-computed chunks, attention and row launches, vector-scale indices") {
  using dsv32::DType;
  // the 671B FP8 shape with 64 MiB of scratch: a row costs 7168 code bytes + 56 scales * 4 = 7392 bytes;
  // floor((64 MiB - 4 * 256) / 7392) = 9078 rows, 9076 as a multiple of 4, more than the 2048 asked:
  // one chunk of all 2048 rows; codes 2048 * 7168 = 14680064 bytes, then scales 56 * 2048 * 4 = 458752
  cu::GemmRequest r{DType::F8_E4M3, false, 2048, 2048, 7168, 7168, 2048, true};
  auto p = cu::plan_linear(r, 64u << 20);
  CHECK(p.chunk_rows == 2048);
  CHECK(p.x_offset == 0);
  CHECK(p.x_scale_offset == 14680064);
  CHECK(p.scratch_bytes == 14680064 + 458752);
  // with 8 MiB: floor((8388608 - 1024) / 7392) = 1134 rows, 1132 as a multiple of 4
  p = cu::plan_linear(r, 8u << 20);
  CHECK(p.chunk_rows == 1132);

  // latent attention: g heads need g * (C + R + k) * 4 bytes; C = 512, R = 64, k = 2048 -> 10496 per head
  auto a = cu::plan_latent_attention(128, 512, 64, 2048, 227u << 10);
  CHECK(a.heads_per_block == 8);
  CHECK(a.smem == 8 * 10496);
  a = cu::plan_latent_attention(12, 512, 64, 2048, 227u << 10);  // 8 does not divide 12
  CHECK(a.heads_per_block == 4);
  CHECK(a.smem == 4 * 10496);
  a = cu::plan_latent_attention(16, 512, 64, 2048, 48u << 10);  // 8 heads (83968 bytes) exceed 48 KiB
  CHECK(a.heads_per_block == 4);
  a = cu::plan_latent_attention(3, 512, 64, 2048, 227u << 10);  // odd: one head per block
  CHECK(a.heads_per_block == 1);
  CHECK(a.smem == 10496);
  dsv32::test::check_error([] { (void)cu::plan_latent_attention(1, 512, 64, 2048, 10000); },
                           dsv32::ErrorKind::unsupported, {"shared memory", "10496"});
  // sparse attention: (nope + rope + k) * 4 bytes, 128 threads
  const auto sp = cu::plan_sparse_attention(128, 64, 2048, 227u << 10);
  CHECK(sp.smem == (128 + 64 + 2048) * 4);
  CHECK(sp.threads == 128);

  // row launches: a block per row, threads = the row rounded up to a warp within [32, 256]
  auto l = cu::row_launch(10, 7168, 4);
  CHECK(l.blocks == 10);
  CHECK(l.threads == 256);
  CHECK(l.smem == 7168 * 4);
  l = cu::row_launch(3, 40);
  CHECK(l.threads == 64);
  CHECK(l.smem == 0);
  CHECK(cu::row_launch(1, 1).threads == 32);

  // vector scales [k_blocks][ld]: row 3 of K block 2 with ld 8 sits at 2 * 8 + 3
  CHECK(cu::vector_scale_index(3, 2, 8) == 19);
  CHECK(cu::vector_scale_index(0, 0, 4) == 0);
  const std::vector<float> act = {1, 2, 3, 4, 5, 6};  // [3 rows, 2 blocks]
  std::vector<float> vec(8);
  cu::to_vector_scale_layout(act.data(), 3, 2, 4, vec.data());
  for (std::int64_t row = 0; row < 3; ++row)
    for (std::int64_t kb = 0; kb < 2; ++kb)
      CHECK(vec[static_cast<std::size_t>(cu::vector_scale_index(row, kb, 4))] == act[static_cast<std::size_t>(row * 2 + kb)]);
}

TEST_CASE("CUDA grouped experts: the worst-case plan, row tiles, each row's expert and the combine order") {
  // 671B prefill of 2048 tokens, 8 experts each, 256 local experts: 16384 rows; at most
  // ceil(16384 / 16) = 1024 full tiles plus one partial tile per non-empty expert (256)
  auto p = cu::plan_grouped_experts(2048, 8, 256, 7168, 2048, true);
  CHECK(p.max_rows == 16384);
  CHECK(p.max_row_tiles == 1024 + 256);
  CHECK(p.row_blocks == 1280);
  CHECK(p.gate_col_tiles == 2048 / 16);
  CHECK(p.down_col_tiles == 7168 / 16);
  p = cu::plan_grouped_experts(1, 8, 256, 7168, 2048, true);  // decode of one token: 8 rows, one tile each at most
  CHECK(p.max_rows == 8);
  CHECK(p.max_row_tiles == 1 + 8);
  p = cu::plan_grouped_experts(0, 8, 256, 7168, 2048, true);
  CHECK(p.max_rows == 0);
  CHECK(p.row_blocks == 1);
  p = cu::plan_grouped_experts(1 << 20, 8, 256, 64, 64, false);  // more tiles than a grid's y: blocks loop
  CHECK(p.row_blocks == cu::kMaxGridBlocks);
  dsv32::test::check_error([] { (void)cu::plan_grouped_experts(4, 2, 8, 200, 256, true); },
                           dsv32::ErrorKind::invalid_argument, {"128", "200"});
  dsv32::test::check_error([] { (void)cu::plan_grouped_experts(std::int64_t{1} << 29, 8, 8, 128, 128, true); },
                           dsv32::ErrorKind::invalid_argument, {"32-bit"});

  // group_of: bounds {0, 0, 3, 3, 7} hold groups 0 (empty), 1 = [0, 3), 2 (empty), 3 = [3, 7)
  const std::vector<std::int32_t> bounds = {0, 0, 3, 3, 7};
  CHECK(cu::group_of(bounds.data(), 4, 0) == 1);
  CHECK(cu::group_of(bounds.data(), 4, 2) == 1);
  CHECK(cu::group_of(bounds.data(), 4, 3) == 3);
  CHECK(cu::group_of(bounds.data(), 4, 6) == 3);
  // row tiles of 16: counts 0, 17, 0, 33 -> 0, 2, 0, 3 tiles
  const std::vector<std::int32_t> offsets = {0, 0, 17, 17, 50};
  std::vector<std::int32_t> tiles(5, -1);
  cu::expert_row_tiles(offsets.data(), 4, 16, tiles.data());
  CHECK(tiles == std::vector<std::int32_t>{0, 0, 2, 2, 5});

  // random routings: the tiles cover each grouped row once, with its own expert, and each token's
  // combine order is the CPU MoE's (its experts in increasing order, as the per-expert scatter-adds)
  std::mt19937 gen(12);
  for (const auto& [T, k, E, first, local] : std::vector<std::array<std::int64_t, 5>>{
           {37, 4, 16, 4, 6}, {1, 8, 256, 0, 256}, {300, 8, 64, 32, 32}, {5, 3, 8, 0, 8}}) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(E));
    for (std::int64_t e = 0; e < E; ++e) ids[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(e);
    std::vector<std::int32_t> experts(static_cast<std::size_t>(T * k));
    std::vector<float> weights(experts.size(), 0.5f);
    for (std::int64_t t = 0; t < T; ++t) {
      std::shuffle(ids.begin(), ids.end(), gen);
      std::copy_n(ids.begin(), k, experts.begin() + t * k);
    }
    std::vector<std::int32_t> rows(experts.size()), offs(static_cast<std::size_t>(local + 1));
    std::vector<float> rw(experts.size());
    dsv32::cpu::moe_plan({experts.data(), T, k, k}, {weights.data(), T, k, k}, first, rows.data(), rw.data(), offs.data(),
                         local);
    const auto plan = cu::plan_grouped_experts(T, k, local, 128, 128, true);
    std::vector<std::int32_t> t_of(static_cast<std::size_t>(local + 1));
    cu::expert_row_tiles(offs.data(), local, cu::kGroupedTile, t_of.data());
    CHECK(t_of.back() <= plan.max_row_tiles);
    std::vector<int> covered(static_cast<std::size_t>(offs.back()), 0);
    for (std::int64_t j = 0; j < t_of.back(); ++j) {
      const std::int64_t e = cu::group_of(t_of.data(), local, j);
      const std::int64_t row0 = offs[static_cast<std::size_t>(e)] + (j - t_of[static_cast<std::size_t>(e)]) * cu::kGroupedTile;
      REQUIRE(row0 < offs[static_cast<std::size_t>(e) + 1]);
      for (std::int64_t i = row0; i < std::min<std::int64_t>(row0 + cu::kGroupedTile, offs[static_cast<std::size_t>(e) + 1]); ++i) {
        ++covered[static_cast<std::size_t>(i)];
        CHECK(cu::group_of(offs.data(), local, i) == e);
      }
    }
    CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
    std::vector<std::int32_t> order(experts.size(), -1);
    for (std::int64_t i = 0; i < offs.back(); ++i)
      cu::expert_order_of_row(experts.data(), k, first, rows.data(), offs.data(), local, i, order.data());
    std::vector<std::vector<std::int32_t>> cpu_order(static_cast<std::size_t>(T));  // the CPU loop's order
    for (std::int64_t e = 0; e < local; ++e)
      for (std::int32_t i = offs[static_cast<std::size_t>(e)]; i < offs[static_cast<std::size_t>(e) + 1]; ++i)
        cpu_order[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)])].push_back(i);
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<std::int32_t> mine;
      for (std::int64_t r = 0; r < k && order[static_cast<std::size_t>(t * k + r)] >= 0; ++r)
        mine.push_back(order[static_cast<std::size_t>(t * k + r)]);
      CHECK(mine == cpu_order[static_cast<std::size_t>(t)]);
    }
  }
}
