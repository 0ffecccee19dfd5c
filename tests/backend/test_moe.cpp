// Tests of dsv32/backend/cpu/moe.hpp and dsv32/backend/routing.hpp (route_token(), the routing of both
// backends, which cpu::route() runs per token): the gate's routing on hand-checked cases (sigmoid vs
// softmax, group selection by top-2 sum with a bias and by max without, the bias used for selection
// only, normalization and route_scale, ties) and against a naive reference on random logits, at the
// model's shape too; gather / scatter.
#include "dsv32/backend/cpu/moe.hpp"
#include "dsv32/backend/cpu/quant.hpp"
#include "dsv32/backend/routing.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

namespace {

using dsv32::bf16;
using dsv32::ScoreFunc;
using Params = dsv32::RoutingParams;
namespace cpu = dsv32::cpu;

struct Routed {
  std::vector<std::int32_t> experts;
  std::vector<float> weights;
};

// Routes one token.
Routed route_one(const std::vector<float>& logits, const std::vector<float>* bias, const Params& p) {
  Routed r{std::vector<std::int32_t>(p.top_k), std::vector<float>(p.top_k)};
  const auto E = static_cast<std::int64_t>(logits.size());
  cpu::route({logits.data(), 1, E, E}, bias ? bias->data() : nullptr, p, {r.weights.data(), 1, p.top_k, p.top_k},
             {r.experts.data(), 1, p.top_k, p.top_k});
  return r;
}

// The logit whose sigmoid is p.
float logit(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

Params params(ScoreFunc f, std::int64_t groups, std::int64_t limited, std::int64_t top_k, float scale) {
  Params p;
  p.score_func = f;
  p.n_groups = groups;
  p.n_limited_groups = limited;
  p.top_k = top_k;
  p.route_scale = scale;
  return p;
}

// A naive routing written from the README: scores, biased copy for selection, group scores (sum of
// the top two biased scores with a bias, max without), best groups, best experts among them (stable:
// lower index first on ties), weights from the unbiased scores (normalized for sigmoid) times route_scale.
Routed naive_route(const std::vector<float>& logits, const std::vector<float>* bias, const Params& p) {
  const std::size_t E = logits.size(), per = E / static_cast<std::size_t>(p.n_groups);
  std::vector<double> score(E), sel(E);
  if (p.score_func == ScoreFunc::sigmoid) {
    for (std::size_t e = 0; e < E; ++e) score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
  } else {
    double sum = 0.0;
    for (std::size_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e]));
    for (std::size_t e = 0; e < E; ++e) score[e] = std::exp(static_cast<double>(logits[e])) / sum;
  }
  for (std::size_t e = 0; e < E; ++e) sel[e] = score[e] + (bias ? (*bias)[e] : 0.0);
  std::vector<bool> allowed(E, true);
  if (p.n_groups > 1) {
    std::vector<double> gs(p.n_groups);
    for (std::int64_t g = 0; g < p.n_groups; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      gs[g] = bias ? v[0] + v[1] : v[0];
    }
    std::vector<int> order(p.n_groups);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return gs[a] > gs[b]; });
    std::vector<bool> keep(p.n_groups, false);
    for (std::int64_t i = 0; i < p.n_limited_groups; ++i) keep[order[i]] = true;
    for (std::size_t e = 0; e < E; ++e) allowed[e] = keep[e / per];
  }
  std::vector<int> order;
  for (std::size_t e = 0; e < E; ++e)
    if (allowed[e]) order.push_back(static_cast<int>(e));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });
  Routed r;
  double sum = 0.0;
  for (std::int64_t i = 0; i < p.top_k; ++i) sum += score[order[i]];
  for (std::int64_t i = 0; i < p.top_k; ++i) {
    r.experts.push_back(order[i]);
    const double w = p.score_func == ScoreFunc::sigmoid ? score[order[i]] / sum : score[order[i]];
    r.weights.push_back(static_cast<float>(w * p.route_scale));
  }
  return r;
}

}  // namespace

TEST_CASE("cpu::route: sigmoid scores, top-k, weights normalized to 1 times route_scale") {
  // sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4, sigmoid(ln 9) = 9/10
  const std::vector<float> l{0.0f, logit(0.75), logit(0.25), logit(0.9)};
  const Routed r = route_one(l, nullptr, params(ScoreFunc::sigmoid, 1, 1, 2, 1.5f));
  CHECK(r.experts == std::vector<std::int32_t>{3, 1});
  CHECK(r.weights[0] == doctest::Approx(0.9 / 1.65 * 1.5).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(0.75 / 1.65 * 1.5).epsilon(1e-6));
  CHECK(r.weights[0] + r.weights[1] == doctest::Approx(1.5).epsilon(1e-6));
}

TEST_CASE("cpu::route: softmax scores are not renormalized over the chosen experts") {
  const std::vector<float> l{1.0f, 2.0f, 3.0f, 0.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0;
  const Routed r = route_one(l, nullptr, params(ScoreFunc::softmax, 1, 1, 2, 2.0f));
  CHECK(r.experts == std::vector<std::int32_t>{2, 1});
  CHECK(r.weights[0] == doctest::Approx(2.0 * std::exp(3.0) / z).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(2.0 * std::exp(2.0) / z).epsilon(1e-6));
  CHECK(r.weights[0] + r.weights[1] < 2.0f * 0.95f);
}

TEST_CASE("cpu::route: the bias steers the selection, the weights come from the unbiased scores") {
  const std::vector<float> l{logit(0.9), logit(0.8), logit(0.3), logit(0.2)};
  const std::vector<float> bias{0.0f, -0.6f, 0.55f, 0.0f};  // selection scores 0.9, 0.2, 0.85, 0.2
  const Routed r = route_one(l, &bias, params(ScoreFunc::sigmoid, 1, 1, 2, 1.0f));
  CHECK(r.experts == std::vector<std::int32_t>{0, 2});
  CHECK(r.weights[0] == doctest::Approx(0.9 / 1.2).epsilon(1e-6));  // 0.75, not 0.9 / 1.75
  CHECK(r.weights[1] == doctest::Approx(0.3 / 1.2).epsilon(1e-6));
  // without the bias the two best unbiased experts win
  CHECK(route_one(l, nullptr, params(ScoreFunc::sigmoid, 1, 1, 2, 1.0f)).experts == std::vector<std::int32_t>{0, 1});
}

TEST_CASE("cpu::route: groups ranked by the sum of their top two (with bias) or by their max (without)") {
  // 4 groups of 2: A = [.9, .1] (max .9, top-2 1.0), B = [.6, .6] (max .6, 1.2), C = [.7, .45] (max .7, 1.15),
  // D = [.2, .2]; keep 2 groups, choose 2 experts
  const std::vector<float> l{logit(0.9), logit(0.1), logit(0.6), logit(0.6), logit(0.7), logit(0.45), logit(0.2), logit(0.2)};
  const std::vector<float> zero_bias(8, 0.0f);
  const Params p = params(ScoreFunc::sigmoid, 4, 2, 2, 1.0f);
  const Routed with_bias = route_one(l, &zero_bias, p);  // groups B and C: expert 0 (.9) is out of reach
  CHECK(with_bias.experts == std::vector<std::int32_t>{4, 2});  // .7, then .6 (experts 2 and 3 tie: lower first)
  CHECK(with_bias.weights[0] == doctest::Approx(0.7 / 1.3).epsilon(1e-6));
  CHECK(with_bias.weights[1] == doctest::Approx(0.6 / 1.3).epsilon(1e-6));
  const Routed without = route_one(l, nullptr, p);  // groups A and C
  CHECK(without.experts == std::vector<std::int32_t>{0, 4});
  CHECK(without.weights[0] == doctest::Approx(0.9 / 1.6).epsilon(1e-6));
  // one group only: B with the bias (top-2 1.2), A without (max .9)
  CHECK(route_one(l, &zero_bias, params(ScoreFunc::sigmoid, 4, 1, 2, 1.0f)).experts == std::vector<std::int32_t>{2, 3});
  CHECK(route_one(l, nullptr, params(ScoreFunc::sigmoid, 4, 1, 2, 1.0f)).experts == std::vector<std::int32_t>{0, 1});
}

TEST_CASE("cpu::route: a group's score is its top two, not its sum; a bias can move a group up") {
  // 2 groups of 4: G0 = [.5, .5, .02, .02] (top-2 1.0, sum 1.04), G1 = [.45 x 4] (top-2 .9, sum 1.8)
  const std::vector<float> l{logit(0.5), logit(0.5), logit(0.02), logit(0.02), logit(0.45), logit(0.45), logit(0.45), logit(0.45)};
  const std::vector<float> zero_bias(8, 0.0f);
  const Routed r = route_one(l, &zero_bias, params(ScoreFunc::sigmoid, 2, 1, 2, 2.5f));
  CHECK(r.experts == std::vector<std::int32_t>{0, 1});
  CHECK(r.weights[0] == doctest::Approx(1.25).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(1.25).epsilon(1e-6));
  // a bias of +0.1 on G1 lifts its top-2 to 1.1: G1 wins; weights still from the unbiased .45s
  std::vector<float> bias(8, 0.0f);
  for (int e = 4; e < 8; ++e) bias[e] = 0.1f;
  const Routed b = route_one(l, &bias, params(ScoreFunc::sigmoid, 2, 1, 2, 2.5f));
  CHECK(b.experts == std::vector<std::int32_t>{4, 5});
  CHECK(b.weights[0] == doctest::Approx(1.25).epsilon(1e-6));
}

TEST_CASE("cpu::route: softmax with groups, several tokens") {
  // token 0: groups by max, G1 holds the best expert; token 1: the other way round
  const std::vector<float> l{0.0f, 1.0f, 0.5f, 2.0f,   // token 0
                             3.0f, 0.0f, 0.2f, 0.1f};  // token 1
  std::vector<float> w(2);
  std::vector<std::int32_t> e(2);
  cpu::route({l.data(), 2, 4, 4}, nullptr, params(ScoreFunc::softmax, 2, 1, 1, 1.0f), {w.data(), 2, 1, 1}, {e.data(), 2, 1, 1});
  CHECK(e == std::vector<std::int32_t>{3, 0});
  const double z0 = 1.0 + std::exp(1.0) + std::exp(0.5) + std::exp(2.0), z1 = std::exp(3.0) + 1.0 + std::exp(0.2) + std::exp(0.1);
  CHECK(w[0] == doctest::Approx(std::exp(2.0) / z0).epsilon(1e-6));
  CHECK(w[1] == doctest::Approx(std::exp(3.0) / z1).epsilon(1e-6));
}

TEST_CASE("cpu::route agrees with a naive routing on random logits") {
  std::mt19937 gen(17);
  std::normal_distribution<float> d(0.0f, 1.5f), bd(0.0f, 0.3f);
  const std::int64_t E = 16, T = 200;
  for (ScoreFunc f : {ScoreFunc::sigmoid, ScoreFunc::softmax})
    for (bool with_bias : {false, true})
      for (const auto& [groups_, limited, k] : {std::tuple{4, 2, 4}, std::tuple{1, 1, 3}, std::tuple{8, 3, 5}}) {
        const int groups = groups_;  // CAPTURE's lambda cannot capture a structured binding before clang 16
        CAPTURE(with_bias);
        CAPTURE(groups);
        const Params p = params(f, groups, limited, k, 2.5f);
        std::vector<float> bias(E);
        for (auto& b : bias) b = bd(gen);
        std::vector<float> logits(T * E), w(T * k);
        for (auto& x : logits) x = d(gen);
        std::vector<std::int32_t> e(T * k);
        cpu::route({logits.data(), T, E, E}, with_bias ? bias.data() : nullptr, p, {w.data(), T, k, k}, {e.data(), T, k, k});
        for (std::int64_t t = 0; t < T; ++t) {
          const std::vector<float> row(logits.begin() + t * E, logits.begin() + (t + 1) * E);
          const Routed want = naive_route(row, with_bias ? &bias : nullptr, p);
          CHECK(std::vector<std::int32_t>(e.begin() + t * k, e.begin() + (t + 1) * k) == want.experts);
          float sum = 0.0f;
          for (std::int64_t i = 0; i < k; ++i) {
            CHECK(w[t * k + i] == doctest::Approx(want.weights[i]).epsilon(1e-5));
            sum += w[t * k + i];
          }
          if (f == ScoreFunc::sigmoid) CHECK(sum == doctest::Approx(2.5).epsilon(1e-5));
        }
      }
}

TEST_CASE("route_token at the model's shape (256 experts, 8 groups, 4 kept, top 8) and with 128 groups agrees with a naive routing") {
  std::mt19937 gen(23);
  std::normal_distribution<float> d(0.0f, 2.0f), bd(0.0f, 0.05f);
  const std::int64_t E = 256, T = 40;
  for (ScoreFunc f : {ScoreFunc::sigmoid, ScoreFunc::softmax})
    for (bool with_bias : {false, true})
      for (const auto& [groups_, limited, k] : {std::tuple{8, 4, 8}, std::tuple{128, 5, 8}, std::tuple{1, 1, 8}}) {
        const int groups = groups_;  // CAPTURE's lambda cannot capture a structured binding before clang 16
        CAPTURE(with_bias);
        CAPTURE(groups);
        const Params p = params(f, groups, limited, k, 2.5f);
        std::vector<float> bias(E), logits(T * E), w(T * k);
        for (auto& b : bias) b = bd(gen);
        for (auto& x : logits) x = d(gen);
        std::vector<std::int32_t> e(T * k);
        cpu::route({logits.data(), T, E, E}, with_bias ? bias.data() : nullptr, p, {w.data(), T, k, k}, {e.data(), T, k, k});
        const dsv32::RouteFields rf = dsv32::route_fields(p);
        std::vector<float> scratch(static_cast<std::size_t>(dsv32::route_scratch_floats(E, rf))), tw(k);
        std::vector<std::int32_t> te(k);
        for (std::int64_t t = 0; t < T; ++t) {
          const std::vector<float> row(logits.begin() + t * E, logits.begin() + (t + 1) * E);
          const Routed want = naive_route(row, with_bias ? &bias : nullptr, p);
          CHECK(std::vector<std::int32_t>(e.begin() + t * k, e.begin() + (t + 1) * k) == want.experts);
          for (std::int64_t i = 0; i < k; ++i) CHECK(w[t * k + i] == doctest::Approx(want.weights[i]).epsilon(1e-5));
          // cpu::route is route_token per token: the same bits
          dsv32::route_token(row.data(), with_bias ? bias.data() : nullptr, static_cast<std::int32_t>(E), rf,
                             scratch.data(), tw.data(), te.data());
          CHECK(te == std::vector<std::int32_t>(e.begin() + t * k, e.begin() + (t + 1) * k));
          CHECK(tw == std::vector<float>(w.begin() + t * k, w.begin() + (t + 1) * k));
        }
      }
}

TEST_CASE("route_token: equal scores and equal groups go to the lower index") {
  const std::int64_t E = 32;
  const std::vector<float> zero_bias(E, 0.0f);
  std::vector<float> l(E, 0.5f);
  for (const bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    // all equal: groups 0 and 1 of 8 kept, experts 0 .. 4 in order
    const Routed all = route_one(l, with_bias ? &zero_bias : nullptr, params(ScoreFunc::sigmoid, 8, 2, 5, 1.0f));
    CHECK(all.experts == std::vector<std::int32_t>{0, 1, 2, 3, 4});
    for (float x : all.weights) CHECK(x == doctest::Approx(0.2));
  }
  // two groups tie above the rest (groups 3 and 5: experts 12..15 and 20..23 higher): both kept, and
  // within the tie the lower experts first
  for (std::int64_t e = 12; e < 16; ++e) l[e] = 1.0f;
  for (std::int64_t e = 20; e < 24; ++e) l[e] = 1.0f;
  const Routed r = route_one(l, &zero_bias, params(ScoreFunc::sigmoid, 8, 2, 6, 1.0f));
  CHECK(r.experts == std::vector<std::int32_t>{12, 13, 14, 15, 20, 21});
  // one group kept: the lower of the two
  CHECK(route_one(l, &zero_bias, params(ScoreFunc::sigmoid, 8, 1, 3, 1.0f)).experts == std::vector<std::int32_t>{12, 13, 14});
}

TEST_CASE("cpu::gather_rows, scatter_add, round_to_bf16 and widen_to_f32") {
  std::vector<bf16> x(4 * 2);
  for (int i = 0; i < 8; ++i) x[i] = bf16(static_cast<float>(i));
  const std::int32_t rows[] = {3, 0, 3};
  std::vector<bf16> g(3 * 2);
  cpu::gather_rows({x.data(), 4, 2, 2}, rows, 3, {g.data(), 3, 2, 2});
  const float gw[] = {6, 7, 0, 1, 6, 7};
  for (int i = 0; i < 6; ++i) CHECK(static_cast<float>(g[i]) == gw[i]);

  std::vector<float> y(4 * 2, 1.0f);
  const float weight[] = {0.5f, 2.0f, -1.0f};
  cpu::scatter_add({g.data(), 3, 2, 2}, rows, weight, {y.data(), 4, 2, 2});
  // row 3 receives 0.5 * [6, 7] and -1 * [6, 7]; row 0 receives 2 * [0, 1]
  const float yw[] = {1, 3, 1, 1, 1, 1, 1 + 3 - 6, 1 + 3.5f - 7};
  for (int i = 0; i < 8; ++i) CHECK(y[i] == yw[i]);
  // no rows, no weights: y[i] += src[i]
  cpu::scatter_add({g.data(), 3, 2, 2}, nullptr, nullptr, {y.data(), 3, 2, 2});
  const float yw2[] = {7, 10, 1, 2, 7, 8, -2, -2.5f};
  for (int i = 0; i < 8; ++i) CHECK(y[i] == yw2[i]);

  std::vector<float> f{1.0f, 1.00390625f, 1.005859375f, -3.0f};  // 1 + 2^-8 is a tie (down), 1 + 3*2^-9 rounds up
  std::vector<bf16> rb(4);
  cpu::round_to_bf16({f.data(), 2, 2, 2}, {rb.data(), 2, 2, 2});
  CHECK(static_cast<float>(rb[0]) == 1.0f);
  CHECK(static_cast<float>(rb[1]) == 1.0f);
  CHECK(static_cast<float>(rb[2]) == 1.0078125f);
  CHECK(static_cast<float>(rb[3]) == -3.0f);
  std::vector<float> back(4);
  cpu::widen_to_f32({rb.data(), 2, 2, 2}, {back.data(), 2, 2, 2});
  CHECK(back == std::vector<float>{1.0f, 1.0f, 1.0078125f, -3.0f});
}

TEST_CASE("cpu::moe_plan groups (token, slot) pairs by local expert, tokens in order, other ranks' experts left out") {
  // 4 tokens, top-2, experts 0..7; this rank holds experts [4, 8)
  const std::vector<std::int32_t> experts = {5, 1, 4, 5, 7, 2, 5, 4};
  const std::vector<float> weights = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  std::vector<std::int32_t> rows(8, -1), offsets(5, -1);
  std::vector<float> rw(8, -1.0f);
  cpu::moe_plan({experts.data(), 4, 2, 2}, {weights.data(), 4, 2, 2}, 4, rows.data(), rw.data(), offsets.data(), 4);
  // expert 4: tokens 1 (0.3), 3 (0.8); expert 5: tokens 0 (0.1), 1 (0.4), 3 (0.7); expert 6: none; expert 7: token 2 (0.5)
  CHECK(offsets == std::vector<std::int32_t>{0, 2, 5, 5, 6});
  CHECK(std::vector<std::int32_t>(rows.begin(), rows.begin() + 6) == std::vector<std::int32_t>{1, 3, 0, 1, 3, 2});
  CHECK(std::vector<float>(rw.begin(), rw.begin() + 6) == std::vector<float>{0.3f, 0.8f, 0.1f, 0.4f, 0.7f, 0.5f});
  // every pair of a local expert appears exactly once: a brute-force count over random routings
  std::mt19937 gen(3);
  std::uniform_int_distribution<std::int32_t> pick(0, 15);
  for (int round = 0; round < 20; ++round) {
    const std::int64_t T = 1 + round, k = 3, first = 8, local = 8;
    std::vector<std::int32_t> e(static_cast<std::size_t>(T * k));
    std::vector<float> w(e.size());
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = pick(gen), w[i] = static_cast<float>(i);
    std::vector<std::int32_t> r(e.size()), off(local + 1);
    std::vector<float> rwt(e.size());
    cpu::moe_plan({e.data(), T, k, k}, {w.data(), T, k, k}, first, r.data(), rwt.data(), off.data(), local);
    for (std::int64_t x = 0; x < local; ++x) {
      std::vector<std::int32_t> want;
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t j = 0; j < k; ++j)
          if (e[t * k + j] == first + x) want.push_back(static_cast<std::int32_t>(t));
      CHECK(std::vector<std::int32_t>(r.begin() + off[x], r.begin() + off[x + 1]) == want);
      for (std::int32_t i = off[x]; i < off[x + 1]; ++i) CHECK(e[static_cast<std::size_t>(rwt[i])] == first + x);
    }
  }
}
