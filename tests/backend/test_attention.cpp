// Tests of dsv32/backend/cpu/attention.hpp: top-k, the lightning indexer's scores and selection on
// hand-made E4M3 codes and against a naive double reference, sparse prefill attention against a dense
// masked softmax, and the absorbed decode path (absorb_query, latent_attention, project_values)
// against the expanded per-head keys and values computed in double.
#include "dsv32/backend/cpu/attention.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include "support/isa_scope.hpp"
#include "support/test_support.hpp"

using dsv32::test::random_bf16;

namespace {

using dsv32::bf16;
using dsv32::DType;
using WeightView = dsv32::WeightView<>;
namespace cpu = dsv32::cpu;

std::uint8_t code(float v) {
  const std::uint8_t c = dsv32::encode_e4m3(v);
  REQUIRE(dsv32::decode_e4m3(c) == v);  // only exactly representable values in hand-made cases
  return c;
}

double f(bf16 b) { return static_cast<double>(static_cast<float>(b)); }

std::vector<std::uint8_t> random_codes(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, 40.0f);
  std::vector<std::uint8_t> v(n);
  for (auto& c : v) c = dsv32::encode_e4m3(d(gen));
  return v;
}

}  // namespace

TEST_CASE("cpu::top_k: highest first, ties to the lower position, k beyond n") {
  const float s[] = {1.0f, 3.0f, 3.0f, -1.0f, 2.0f, 3.0f};
  std::int32_t out[6] = {};
  CHECK(cpu::top_k(s, 6, 4, out) == 4);
  CHECK(std::vector<std::int32_t>(out, out + 4) == std::vector<std::int32_t>{1, 2, 5, 4});
  CHECK(cpu::top_k(s, 6, 10, out) == 6);
  CHECK(std::vector<std::int32_t>(out, out + 6) == std::vector<std::int32_t>{1, 2, 5, 4, 0, 3});
  CHECK(cpu::top_k(s, 3, 5, out) == 3);  // only the first n scores count
  CHECK(std::vector<std::int32_t>(out, out + 3) == std::vector<std::int32_t>{1, 2, 0});
  CHECK(cpu::top_k(s, 0, 5, out) == 0);
  const float inf = std::numeric_limits<float>::infinity();
  const float t[] = {-inf, 0.0f, -inf};
  CHECK(cpu::top_k(t, 3, 2, out) == 2);
  CHECK(out[0] == 1);
  CHECK(out[1] == 0);
}

TEST_CASE("cpu::indexer_topk on hand-made E4M3 codes: relu, head weights, k_scale, causal visibility") {
  // H = 2 heads, D = 128; q head 0 reads dim 0, q head 1 reads dim 1 (q_h = alpha_h e_h), so
  // q_h . k_t is alpha_h times k_t's entry; scores are small exact numbers.
  const std::int64_t H = 2, D = 128, S = 3, start_pos = 2, T = start_pos + S;
  const float a[T] = {1.0f, -2.0f, 0.5f, 3.0f, 1.0f};   // k_t[0]
  const float b[T] = {2.0f, 4.0f, -1.0f, 0.0f, 2.0f};   // k_t[1]
  const float k_scale[T] = {1.0f, 1.0f, 2.0f, 0.5f, 1.0f};
  std::vector<std::uint8_t> k(T * D, 0);
  for (std::int64_t t = 0; t < T; ++t) k[t * D] = code(a[t]), k[t * D + 1] = code(b[t]);
  // per query: alpha (head 0), beta (head 1), weights w_0, w_1
  const float alpha[S] = {1.0f, 1.0f, -1.0f}, beta[S] = {1.0f, 1.0f, 1.0f};
  const float w[S][2] = {{1.0f, 0.5f}, {1.0f, -0.5f}, {1.0f, 0.5f}};
  std::vector<std::uint8_t> q(S * H * D, 0);
  std::vector<float> qw(S * H);
  for (std::int64_t s = 0; s < S; ++s) {
    q[(s * H + 0) * D + 0] = code(alpha[s]);
    q[(s * H + 1) * D + 1] = code(beta[s]);
    qw[s * H] = w[s][0];
    qw[s * H + 1] = w[s][1];
  }
  // score[s, t] = (relu(alpha a_t) w_0 + relu(beta b_t) w_1) k_scale_t
  //   s = 0 (sees t < 3): [2, 2, 1]            -> 0, 1, 2 (tie 0/1: lower first)
  //   s = 1 (sees t < 4): [0, -2, 1, 1.5]       -> 3, 2, 0 (a negative head weight)
  //   s = 2 (sees t < 5): [1, 4, 0, 0, 1]       -> 1, 0, 4 (relu of -a; tie 0/4)
  std::vector<std::int32_t> sel(S * 3, -1);
  std::vector<std::int32_t> count(S, -1);
  cpu::indexer_topk(q.data(), qw.data(), nullptr, S, H, D, k.data(), k_scale, start_pos, 3, sel.data(), count.data());
  CHECK(count == std::vector<std::int32_t>{3, 3, 3});
  CHECK(sel == std::vector<std::int32_t>{0, 1, 2, 3, 2, 0, 1, 0, 4});

  // the scores themselves
  std::vector<float> scores(S * T);
  const std::int64_t visible[S] = {3, 4, 5};
  cpu::index_scores(q.data(), qw.data(), nullptr, S, H, D, k.data(), k_scale, T, visible, scores.data());
  CHECK(std::vector<float>(scores.begin(), scores.begin() + 3) == std::vector<float>{2, 2, 1});
  CHECK(std::vector<float>(scores.begin() + 5, scores.begin() + 9) == std::vector<float>{0, -2, 1, 1.5f});
  CHECK(std::vector<float>(scores.begin() + 10, scores.end()) == std::vector<float>{1, 4, 0, 0, 1});

  // fewer visible keys than k: a prefill from position 0 (query s sees s + 1 keys)
  std::vector<std::int32_t> sel5(S * 5, -1);
  std::vector<std::int32_t> count5(S);
  cpu::indexer_topk(q.data(), qw.data(), nullptr, S, H, D, k.data(), k_scale, 0, 5, sel5.data(), count5.data());
  CHECK(count5 == std::vector<std::int32_t>{1, 2, 3});
  CHECK(sel5[0] == 0);
  CHECK(std::vector<std::int32_t>(sel5.begin() + 5, sel5.begin() + 7) == std::vector<std::int32_t>{0, 1});  // [0, -2]
  CHECK(std::vector<std::int32_t>(sel5.begin() + 10, sel5.begin() + 13) == std::vector<std::int32_t>{1, 0, 2});  // [1, 4, 0]
}

TEST_CASE("cpu::index_scores and indexer_topk agree with a naive double reference (D = 128 and D = 256)") {
  std::mt19937 gen(9);
  for (std::int64_t D : {128, 256}) {
    CAPTURE(D);
    const std::int64_t H = 4, S = 5, start_pos = 7, T = start_pos + S, blocks = D / 128, K = 6;
    const auto q = random_codes(S * H * D, gen), k = random_codes(T * D, gen);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.01f, 1.0f);
    std::vector<float> qw(S * H), qs(S * H * blocks), ks(T * blocks);
    for (auto& x : qw) x = u(gen);
    for (auto& x : qs) x = pos(gen);
    for (auto& x : ks) x = pos(gen);
    std::vector<std::int64_t> visible(S);
    for (std::int64_t s = 0; s < S; ++s) visible[s] = start_pos + s + 1;
    std::vector<float> scores(S * T);
    cpu::index_scores(q.data(), qw.data(), qs.data(), S, H, D, k.data(), ks.data(), T, visible.data(), scores.data());
    std::vector<std::int32_t> sel(S * K);
    std::vector<std::int32_t> count(S);
    cpu::indexer_topk(q.data(), qw.data(), qs.data(), S, H, D, k.data(), ks.data(), start_pos, K, sel.data(), count.data());
    for (std::int64_t s = 0; s < S; ++s) {
      std::vector<double> ref(visible[s]);
      for (std::int64_t t = 0; t < visible[s]; ++t) {
        double acc = 0.0, mag = 0.0;  // mag: the sum of |terms|, which bounds f32 rounding errors
        for (std::int64_t h = 0; h < H; ++h) {
          double logit = 0.0, logit_mag = 0.0;
          for (std::int64_t bl = 0; bl < blocks; ++bl) {
            double dot = 0.0, dot_mag = 0.0;
            for (std::int64_t d = bl * 128; d < (bl + 1) * 128; ++d) {
              const double p = static_cast<double>(dsv32::decode_e4m3(q[(s * H + h) * D + d])) * dsv32::decode_e4m3(k[t * D + d]);
              dot += p;
              dot_mag += std::fabs(p);
            }
            // D == 128: the q scale is folded into the head weight; D > 128: per-block scales
            const double block_scale = blocks == 1 ? 1.0 : static_cast<double>(qs[(s * H + h) * blocks + bl]) * ks[t * blocks + bl];
            logit += dot * block_scale;
            logit_mag += dot_mag * block_scale;
          }
          acc += std::max(logit, 0.0) * qw[s * H + h];
          mag += logit_mag * std::fabs(qw[s * H + h]);
        }
        ref[t] = blocks == 1 ? acc * ks[t] : acc;
        if (blocks == 1) mag *= ks[t];
        CHECK(std::fabs(scores[s * T + t] - ref[t]) <= 1e-6 * mag);
      }
      // the selection: the K best visible positions by the reference's scores, best first
      CHECK(count[s] == std::min<std::int64_t>(K, visible[s]));
      std::vector<std::int32_t> order(visible[s]);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return ref[x] > ref[y]; });
      for (std::int64_t j = 0; j < count[s]; ++j) CHECK(sel[s * K + j] == order[j]);
    }
  }
}

namespace {
/// One sparse_attention() problem: random bf16 queries, keys/values and rope keys; each query selects
/// a random subset of its causal prefix (`take(s, prefix)` positions of it, shuffled).
struct SparseProblem {
  std::int64_t S, H, nope, rope, v, start_pos, kmax;
  float scale;
  std::vector<bf16> q, kv, pe;
  std::vector<std::int32_t> sel, count;

  template <class Take>
  SparseProblem(std::mt19937& gen, std::int64_t S_, std::int64_t H_, std::int64_t nope_, std::int64_t rope_,
                std::int64_t v_, std::int64_t start_pos_, std::int64_t kmax_, Take take)
      : S(S_), H(H_), nope(nope_), rope(rope_), v(v_), start_pos(start_pos_), kmax(kmax_),
        scale(1.0f / std::sqrt(static_cast<float>(nope_ + rope_))),
        q(random_bf16(S_ * H_ * (nope_ + rope_), gen)), kv(random_bf16((start_pos_ + S_) * H_ * (nope_ + v_), gen)),
        pe(random_bf16((start_pos_ + S_) * rope_, gen)), sel(S_ * kmax_, -1), count(S_) {
    for (std::int64_t s = 0; s < S; ++s) {
      std::vector<std::int32_t> all(start_pos + s + 1);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), gen);
      count[s] = static_cast<std::int32_t>(std::min<std::int64_t>(take(s, static_cast<std::int64_t>(all.size())), kmax));
      std::copy(all.begin(), all.begin() + count[s], sel.begin() + s * kmax);
    }
  }
  std::vector<bf16> run() const {
    std::vector<bf16> out(S * H * v);
    cpu::sparse_attention(q.data(), kv.data(), pe.data(), S, H, nope, rope, v, sel.data(), count.data(), kmax, scale,
                          out.data());
    return out;
  }
  /// Checks `out` against a dense softmax in double with -inf at every unselected position.
  void check_against_dense(const std::vector<bf16>& out) const {
    const std::int64_t T = start_pos + S, dq = nope + rope, dkv = nope + v;
    double worst = 0.0;
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h) {
        std::vector<double> p(T, -std::numeric_limits<double>::infinity());
        for (std::int64_t j = 0; j < count[s]; ++j) {
          const std::int64_t t = sel[s * kmax + j];
          double dot = 0.0;
          for (std::int64_t d = 0; d < nope; ++d) dot += f(q[(s * H + h) * dq + d]) * f(kv[(t * H + h) * dkv + d]);
          for (std::int64_t d = 0; d < rope; ++d) dot += f(q[(s * H + h) * dq + nope + d]) * f(pe[t * rope + d]);
          p[t] = dot * scale;
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0.0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (double& x : p) x /= sum;
        for (std::int64_t d = 0; d < v; ++d) {
          double ref = 0.0, mag = 0.0;
          for (std::int64_t t = 0; t < T; ++t) {
            const double vv = f(kv[(t * H + h) * dkv + nope + d]);
            ref += p[t] * vv;
            mag += p[t] * std::fabs(vv);
          }
          // bf16 probabilities (2^-9 relative each) and a bf16 result (2^-9 relative)
          const double err = std::fabs(f(out[(s * H + h) * v + d]) - ref);
          CHECK(err <= std::ldexp(mag, -8) + std::ldexp(std::fabs(ref), -8) + 1e-7);
          worst = std::max(worst, err / (mag + 1e-30));
        }
      }
    MESSAGE("sparse_attention (S " << S << ", kmax " << kmax << "): worst error / sum p|v| = " << worst);
  }
};

bool same_bits(bf16 a, bf16 b) { return Eigen::numext::bit_cast<std::uint16_t>(a) == Eigen::numext::bit_cast<std::uint16_t>(b); }
}  // namespace

TEST_CASE("cpu::sparse_attention equals a dense softmax with a mask of the unselected positions") {
  std::mt19937 gen(21);
  // each query attends to a random subset of its causal prefix (at most kmax, some fewer, in any order)
  const SparseProblem small(gen, 4, 3, 16, 8, 24, 6, 5, [](std::int64_t s, std::int64_t n) { return std::min<std::int64_t>(5, n) - s % 2; });
  small.check_against_dense(small.run());
  // more queries than one block takes, and selections whose unions force several block sizes
  const SparseProblem sparse(gen, 130, 2, 16, 8, 16, 300, 40, [](std::int64_t s, std::int64_t) { return 1 + (s * 7) % 40; });
  sparse.check_against_dense(sparse.run());
  // a whole causal prefill (every visible position selected), as short prompts give
  const SparseProblem causal(gen, 110, 2, 16, 8, 16, 0, 128, [](std::int64_t, std::int64_t n) { return n; });
  causal.check_against_dense(causal.run());
}

TEST_CASE("cpu::sparse_attention: a query's output does not depend on the call's other queries or on its selection's order") {
  // the documented sums run in increasing position order, one chain per score and output, so each
  // query alone (S = 1), and the same selection in another order, give the same bits
  std::mt19937 gen(22);
  for (const bool causal : {false, true}) {
    SparseProblem all(gen, 100, 2, 16, 8, 16, causal ? 0 : 60, causal ? 100 : 32,
                      [&](std::int64_t s, std::int64_t n) { return causal ? n : 1 + (s * 5) % 32; });
    const std::vector<bf16> together = all.run();
    for (std::int64_t s = 0; s < all.S; s += 7) {
      SparseProblem one = all;
      one.S = 1;
      one.q.assign(all.q.begin() + s * all.H * (all.nope + all.rope), all.q.begin() + (s + 1) * all.H * (all.nope + all.rope));
      one.sel.assign(all.sel.begin() + s * all.kmax, all.sel.begin() + (s + 1) * all.kmax);
      std::reverse(one.sel.begin(), one.sel.begin() + all.count[s]);
      one.count = {all.count[s]};
      const std::vector<bf16> alone = one.run();
      std::int64_t differ = 0;
      for (std::int64_t i = 0; i < all.H * all.v; ++i) differ += !same_bits(alone[i], together[s * all.H * all.v + i]);
      CAPTURE(causal);
      CAPTURE(s);
      CHECK(differ == 0);
    }
  }
}

namespace {

// The absorbed decode path (absorb_query -> latent_attention -> project_values) against the expanded
// computation in double: per-head keys and values W_k kv_t, W_v kv_t, softmax over the selected
// positions, sum of p v. `w_rows` holds the weight as the kernels see it (dequantized for FP8).
void check_absorbed_against_expanded(const WeightView& wkv_b, const std::vector<float>& w_rows, std::int64_t H,
                                     std::int64_t nope, std::int64_t rope, std::int64_t v, std::int64_t C,
                                     std::mt19937& gen) {
  const std::int64_t T = 9, qk = nope + rope, n = 6;
  const float scale = 0.3f;
  const auto q = random_bf16(H * qk, gen, 1.0f), kv = random_bf16(T * C, gen, 1.0f), pe = random_bf16(T * rope, gen, 1.0f);
  const std::vector<std::int32_t> selected{8, 0, 3, 5, 2, 7};  // any order, not all positions

  std::vector<bf16> q_lat(H * C), o_lat(H * C), out(H * v);
  cpu::absorb_query(q.data(), 1, H, nope, rope, v, wkv_b, q_lat.data());
  cpu::latent_attention(q_lat.data(), q.data() + nope, qk, kv.data(), pe.data(), H, C, rope, selected.data(), n, scale,
                        o_lat.data());
  cpu::project_values(o_lat.data(), 1, H, nope, v, wkv_b, out.data());

  auto W = [&](std::int64_t row, std::int64_t c) { return static_cast<double>(w_rows[row * C + c]); };
  double worst = 0.0;
  for (std::int64_t h = 0; h < H; ++h) {
    std::vector<double> p(n), vals(n * v);
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t t = selected[j];
      double score = 0.0;
      for (std::int64_t d = 0; d < nope; ++d) {
        double k_nope = 0.0;  // expanded key W_k[h, d] . kv_t
        for (std::int64_t c = 0; c < C; ++c) k_nope += W(h * (nope + v) + d, c) * f(kv[t * C + c]);
        score += f(q[h * qk + d]) * k_nope;
      }
      for (std::int64_t r = 0; r < rope; ++r) score += f(q[h * qk + nope + r]) * f(pe[t * rope + r]);
      p[j] = score * scale;
      for (std::int64_t d = 0; d < v; ++d) {
        double val = 0.0;  // expanded value W_v[h, d] . kv_t
        for (std::int64_t c = 0; c < C; ++c) val += W(h * (nope + v) + nope + d, c) * f(kv[t * C + c]);
        vals[j * v + d] = val;
      }
    }
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0.0;
    for (double& x : p) sum += (x = std::exp(x - mx));
    for (double& x : p) x /= sum;
    double vmax = 0.0;
    for (double x : vals) vmax = std::max(vmax, std::fabs(x));
    for (std::int64_t d = 0; d < v; ++d) {
      double ref = 0.0;
      for (std::int64_t j = 0; j < n; ++j) ref += p[j] * vals[j * v + d];
      // in units of a bf16 ulp of the head's largest value: q_lat, probabilities, o_lat and the
      // output are each rounded to bf16 once
      const double err = std::fabs(f(out[h * v + d]) - ref) / std::ldexp(vmax, -8);
      worst = std::max(worst, err);
      CHECK(err <= 4.0);
    }
  }
  MESSAGE("absorbed vs expanded: worst error " << worst << " bf16 ulps of max |v|");
}

}  // namespace

TEST_CASE("cpu::absorb_query + latent_attention + project_values equal the expanded attention (BF16 wkv_b)") {
  std::mt19937 gen(33);
  const std::int64_t H = 3, nope = 16, rope = 8, v = 24, C = 32;
  const auto w = random_bf16(H * (nope + v) * C, gen, 1.0f / std::sqrt(32.0f));
  std::vector<float> rows(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) rows[i] = static_cast<float>(w[i]);
  check_absorbed_against_expanded({DType::BF16, w.data(), H * (nope + v), C, nullptr}, rows, H, nope, rope, v, C, gen);
}

TEST_CASE("cpu::absorb_query + latent_attention + project_values equal the expanded attention (FP8 wkv_b)") {
  std::mt19937 gen(34);
  const std::int64_t H = 4, nope = 32, rope = 16, v = 32, C = 128, out = H * (nope + v);  // 256 rows: 2 row blocks
  std::normal_distribution<float> d(0.0f, 100.0f);
  std::vector<std::uint8_t> codes(out * C);
  for (auto& c : codes) c = dsv32::encode_e4m3(d(gen));
  const std::vector<float> scale{1.0f / 1024.0f, 1.0f / 1536.0f};  // [2 row blocks, 1 column block]
  // the README's dequantization: bf16(e4m3 value * block scale)
  std::vector<float> rows(codes.size());
  for (std::int64_t r = 0; r < out; ++r)
    for (std::int64_t c = 0; c < C; ++c)
      rows[r * C + c] = dsv32::round_bf16(dsv32::decode_e4m3(codes[r * C + c]) * scale[r / 128]);
  check_absorbed_against_expanded({DType::F8_E4M3, codes.data(), out, C, scale.data()}, rows, H, nope, rope, v, C, gen);
}

TEST_CASE("cpu::absorb_query / project_values on FP8 codes as stored: the bits of the dequantized weight") {
  // An FP8 wkv_b against the same weight dequantized by the test into a BF16 one (bf16(value *
  // block scale), codes 0x7F / 0xFF reading as +-480), which takes the widen-and-multiply path, on
  // every ISA level here. With power-of-two scales and up to 8 tokens the kernels read the codes
  // (GemmOps::e4m3_scaled_cols, e4m3_scaled_rows); a block with a scale that is no power of two,
  // heads whose rows straddle two 128-row blocks, and 9 tokens take the dequantizing path. All 256
  // codes occur in every weight.
  struct Dims {
    std::int64_t H, nope, v, C;
  };
  std::mt19937 gen(35);
  for (const Dims dm : {Dims{4, 32, 32, 256}, Dims{3, 16, 40, 128}, Dims{2, 128, 128, 512}}) {
    const std::int64_t rows = dm.H * (dm.nope + dm.v), rope = 8, qk = dm.nope + rope;
    const std::int64_t rb = (rows + 127) / 128, cb = dm.C / 128;
    std::vector<std::uint8_t> codes(rows * dm.C);
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>((i * 151 + gen() % 3) & 0xFF);
    std::vector<float> scale(rb * cb);
    for (std::int64_t i = 0; i < rb * cb; ++i) scale[i] = std::ldexp(1.0f, -4 - static_cast<int>(i % 9));
    scale.back() = 1.0f / 1536.0f;  // the last row block's last column block: dequantized, rounded
    std::vector<bf16> dequantized(codes.size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < dm.C; ++c) {
        const std::uint8_t k = codes[r * dm.C + c];
        const float value = (k & 0x7F) == 0x7F ? ((k & 0x80) != 0 ? -480.0f : 480.0f) : dsv32::decode_e4m3(k);
        dequantized[r * dm.C + c] = bf16(dsv32::round_bf16(value * scale[(r / 128) * cb + c / 128]));
      }
    const WeightView fp8{DType::F8_E4M3, codes.data(), rows, dm.C, scale.data()};
    const WeightView wide{DType::BF16, dequantized.data(), rows, dm.C, nullptr};
    for (const std::int64_t T : {1, 2, 3, 5, 8, 9}) {
      // values spread over 2^-8..2^8, so that the f32 sums round differently in any other order
      auto spread = [&](std::vector<bf16> x) {
        for (bf16& e : x) e = bf16(std::ldexp(static_cast<float>(e), static_cast<int>(gen() % 17) - 8));
        return x;
      };
      const auto q = spread(random_bf16(T * dm.H * qk, gen)), o_lat = spread(random_bf16(T * dm.H * dm.C, gen));
      std::vector<bf16> lat_want(T * dm.H * dm.C), val_want(T * dm.H * dm.v);
      cpu::absorb_query(q.data(), T, dm.H, dm.nope, rope, dm.v, wide, lat_want.data());
      cpu::project_values(o_lat.data(), T, dm.H, dm.nope, dm.v, wide, val_want.data());
      for (const cpu::Isa isa : dsv32::test::isas_here()) {
        const cpu::CpuKernels kernels = dsv32::test::kernels_at(isa);
        const int level = static_cast<int>(isa);
        CAPTURE(dm.H);
        CAPTURE(dm.v);
        CAPTURE(T);
        CAPTURE(level);
        std::vector<bf16> lat(lat_want.size()), val(val_want.size());
        cpu::absorb_query(q.data(), T, dm.H, dm.nope, rope, dm.v, fp8, lat.data(), kernels);
        cpu::project_values(o_lat.data(), T, dm.H, dm.nope, dm.v, fp8, val.data(), kernels);
        std::int64_t lat_diff = 0, val_diff = 0;
        for (std::size_t i = 0; i < lat.size(); ++i) lat_diff += !same_bits(lat[i], lat_want[i]);
        for (std::size_t i = 0; i < val.size(); ++i) val_diff += !same_bits(val[i], val_want[i]);
        CHECK(lat_diff == 0);
        CHECK(val_diff == 0);
      }
    }
  }
}

TEST_CASE("cpu::latent_attention: one selected position returns its latent; q_pe stride is honoured") {
  const std::int64_t H = 2, C = 4, rope = 2;
  std::vector<bf16> kv(3 * C), pe(3 * rope), q_lat(H * C, bf16(0.5f)), q_pe(H * 5, bf16(0.25f)), out(H * C);
  for (int i = 0; i < 3 * C; ++i) kv[i] = bf16(static_cast<float>(i) - 4.0f);
  for (int i = 0; i < 3 * rope; ++i) pe[i] = bf16(1.0f);
  const std::int32_t one[] = {2};
  cpu::latent_attention(q_lat.data(), q_pe.data(), 5, kv.data(), pe.data(), H, C, rope, one, 1, 0.1f, out.data());
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t c = 0; c < C; ++c) CHECK(static_cast<float>(out[h * C + c]) == static_cast<float>(kv[2 * C + c]));
  // two positions whose scores differ by ln 3 / scale: probabilities 3/4 and 1/4
  // q_lat = e_0, kv_0 = [0, ...], kv_1 = [ln 3 / 0.5, ...]; rope parts cancel (pe = 0)
  std::vector<bf16> q2(H * C, bf16(0.0f)), kv2(2 * C, bf16(0.0f)), pe2(2 * rope, bf16(0.0f)), out2(H * C);
  for (std::int64_t h = 0; h < H; ++h) q2[h * C] = bf16(1.0f);
  const float l = static_cast<float>(bf16(static_cast<float>(std::log(3.0) / 0.5)));
  kv2[C] = bf16(l);
  kv2[C + 1] = bf16(8.0f);
  const std::int32_t both[] = {0, 1};
  cpu::latent_attention(q2.data(), pe2.data(), rope, kv2.data(), pe2.data(), H, C, rope, both, 2, 0.5f, out2.data());
  const double p1 = 1.0 / (1.0 + std::exp(-0.5 * l));  // ~3/4
  CHECK(static_cast<float>(out2[1]) == doctest::Approx(8.0 * p1).epsilon(8e-3));
  CHECK(static_cast<float>(out2[0]) == doctest::Approx(l * p1).epsilon(8e-3));
}

TEST_CASE("cpu::absorb_query and project_values refuse a weight dtype they cannot read, before threading") {
  // H = 4 heads of nope = v = 128 over C = 1024 latents: enough work per call to run on a thread team
  const std::int64_t H = 4, nope = 128, rope = 16, v = 128, C = 1024;
  std::vector<std::int32_t> w(H * (nope + v) * C);
  const WeightView bad{DType::I32, w.data(), H * (nope + v), C, nullptr};
  std::vector<bf16> q(H * (nope + rope)), q_lat(H * C), out(H * v);
  try {
    cpu::absorb_query(q.data(), 1, H, nope, rope, v, bad, q_lat.data());
    FAIL("expected an error");
  } catch (const dsv32::Error& e) {
    CHECK(e.kind() == dsv32::ErrorKind::unsupported);
    CHECK(std::string(e.what()).find("absorb_query: weight dtype I32") != std::string::npos);
  }
  CHECK_THROWS_AS(cpu::project_values(q_lat.data(), 1, H, nope, v, bad, out.data()), dsv32::Error);
}
