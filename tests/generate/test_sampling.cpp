// Sampling (include/dsv32/generate/sampling.hpp) against closed forms: greedy = first maximum,
// top_k = 1 and a tiny top_p reduce to the argmax at any temperature, truncation keeps exactly the
// expected sets, the exponential race matches a two-token distribution within a binomial bound,
// and the random streams are reproducible and distinct.
#include <doctest/doctest.h>

#include <dsv32/generate/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::contains;

namespace {

using dsv32::Sampler;
using dsv32::SamplingOptions;
using dsv32::SamplingRng;

SamplingOptions opts(double temperature, std::int64_t top_k = 0, double top_p = 1.0) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  return o;
}

// A row of distinct-ish logits with its maximum at `peak` and a tie for it at `peak + 5`.
std::vector<float> bumpy_logits(std::size_t n, std::size_t peak) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  v[peak] = 5.0f;
  v[peak + 5] = 5.0f;
  return v;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dsv32::Error& e) {
    CHECK(e.kind() == dsv32::ErrorKind::invalid_argument);
    return e.what();
  }
  return "no error";
}


}  // namespace

TEST_CASE("sampling: temperature 0 is the first maximum of the logits") {
  const auto logits = bumpy_logits(100, 40);
  SamplingRng rng(1);
  Sampler greedy(opts(0.0));
  CHECK(dsv32::argmax(logits) == 40);
  CHECK(greedy.sample(logits, rng) == 40);
  const auto d = greedy.distribution(logits);
  CHECK(d[40] == 1.0f);
  CHECK(std::accumulate(d.begin(), d.end(), 0.0) == 1.0);
  // greedy never touches the random stream
  SamplingRng fresh(1);
  CHECK(rng.engine()() == fresh.engine()());
}

TEST_CASE("sampling: top_k = 1 and a tiny top_p are the argmax at any temperature") {
  const auto logits = bumpy_logits(300, 123);
  for (double t : {1e-6, 0.3, 1.0, 5.0, 1e3}) {
    Sampler k1(opts(t, 1)), p_tiny(opts(t, 0, 1e-9)), both(opts(t, 50, 1e-9));
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      SamplingRng a(seed), b(seed), c(seed);
      CHECK(k1.sample(logits, a) == 123);
      CHECK(p_tiny.sample(logits, b) == 123);
      CHECK(both.sample(logits, c) == 123);
    }
  }
}

TEST_CASE("sampling: a two-token distribution is matched within a binomial bound") {
  // p(1) = 0.7 at T = 1; at T = 2 the probabilities are proportional to sqrt(0.3), sqrt(0.7).
  const std::vector<float> logits = {std::log(0.3f), std::log(0.7f)};
  for (double t : {1.0, 2.0}) {
    const double p1 = std::pow(0.7, 1 / t) / (std::pow(0.3, 1 / t) + std::pow(0.7, 1 / t));
    Sampler s(opts(t));
    SamplingRng rng(42);
    const int n = 20000;
    int ones = 0;
    for (int i = 0; i < n; ++i) ones += s.sample(logits, rng);
    const double sigma = std::sqrt(n * p1 * (1 - p1));
    CAPTURE(t);
    CHECK(std::fabs(ones - n * p1) < 5 * sigma);
    const auto d = s.distribution(logits);
    CHECK(d[1] == doctest::Approx(p1).epsilon(1e-6));
  }
}

TEST_CASE("sampling: top_k keeps the k most probable tokens, renormalized") {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f, 3.0f};  // tie at ids 1 and 4
  Sampler s(opts(1.0, 2));
  const auto d = s.distribution(logits);
  CHECK(d[1] == doctest::Approx(0.5));
  CHECK(d[4] == doctest::Approx(0.5));
  CHECK(d[0] == 0.0f);
  CHECK(d[2] == 0.0f);
  CHECK(d[3] == 0.0f);
  Sampler k3(opts(1.0, 3));  // then id 2
  const auto d3 = k3.distribution(logits);
  const double z = 2 * std::exp(3.0) + std::exp(2.0);
  CHECK(d3[2] == doctest::Approx(std::exp(2.0) / z));
  CHECK(d3[0] == 0.0f);
  // top_k >= vocab keeps everything
  Sampler all(opts(1.0, 99));
  CHECK(all.distribution(logits)[3] > 0.0f);
  // sampled ids stay in the kept set
  SamplingRng rng(3);
  for (int i = 0; i < 200; ++i) {
    const auto id = s.sample(logits, rng);
    CHECK((id == 1 || id == 4));
  }
}

TEST_CASE("sampling: top_p keeps the smallest most-probable set reaching p") {
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto kept = [&](double p, std::int64_t k = 0) {
    Sampler s(opts(1.0, k, p));
    std::set<int> out;
    const auto d = s.distribution(logits);
    double sum = 0;
    for (std::size_t i = 0; i < d.size(); ++i)
      if (d[i] > 0) out.insert(static_cast<int>(i)), sum += d[i];
    CHECK(sum == doctest::Approx(1.0));
    return out;
  };
  CHECK(kept(0.4) == std::set<int>{1});
  CHECK(kept(0.75) == std::set<int>{1, 3});
  CHECK(kept(0.85) == std::set<int>{0, 1, 3});
  CHECK(kept(1.0) == std::set<int>{0, 1, 2, 3});
  // top-k first (keeps 0.5 and 0.3, renormalized to 0.625 / 0.375), then top-p on that
  CHECK(kept(0.6, 2) == std::set<int>{1});
  CHECK(kept(0.7, 2) == std::set<int>{1, 3});
}

TEST_CASE("sampling: top_p over a large vocabulary matches a brute-force nucleus") {
  // Past the first sorted chunk (64) so the incremental sort is exercised.
  std::vector<float> logits(5000);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = std::cos(0.011f * static_cast<float>(i * i % 977));
  Sampler full(opts(0.7));
  const auto full_d = full.distribution(logits);
  const std::vector<float> p(full_d.begin(), full_d.end());
  for (double top_p : {0.01, 0.3, 0.9, 0.999}) {
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    const double mass = std::accumulate(p.begin(), p.end(), 0.0);
    double cumulative = 0;
    std::size_t want = 0;
    while (want < order.size()) {
      cumulative += p[order[want++]];
      if (cumulative >= top_p * mass) break;
    }
    Sampler s(opts(0.7, 0, top_p));
    const auto d = s.distribution(logits);
    std::size_t got = 0;
    for (std::size_t i = 0; i < want; ++i) CHECK(d[order[i]] > 0.0f);
    for (float v : d) got += v > 0.0f;
    CAPTURE(top_p);
    CHECK(got == want);
  }
}

TEST_CASE("sampling: masked (-inf) tokens are never drawn; NaN, +inf and all -inf are refused") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {-inf, 0.0f, -inf, 0.0f};
  Sampler s(opts(1.0));
  SamplingRng rng(5);
  for (int i = 0; i < 100; ++i) {
    const auto id = s.sample(logits, rng);
    CHECK((id == 1 || id == 3));
  }
  std::vector<float> bad = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  CHECK(contains(error_of([&] { s.sample(bad, rng); }), "logit 1 is nan"));
  CHECK(contains(error_of([&] { Sampler(opts(0)).sample(bad, rng); }), "logit 1 is NaN"));
  bad[1] = inf;
  CHECK(contains(error_of([&] { s.sample(bad, rng); }), "finite or -inf"));
  std::vector<float> masked = {-inf, -inf};
  CHECK(contains(error_of([&] { s.sample(masked, rng); }), "every logit is -inf"));
  CHECK(contains(error_of([&] { s.sample({}, rng); }), "empty"));
  // logits / T overflowing f32 falls back to the T -> 0 limit
  std::vector<float> huge = {3e38f, 1.0f, 2e38f};
  Sampler cold(opts(1e-6));
  CHECK(cold.sample(huge, rng) == 0);
}

TEST_CASE("sampling: options are validated with clear messages") {
  CHECK(contains(error_of([] { Sampler(opts(-0.1)); }), "temperature must be finite and >= 0"));
  CHECK(contains(error_of([] { Sampler(opts(std::nan(""))); }), "temperature"));
  CHECK(contains(error_of([] { Sampler(opts(HUGE_VAL)); }), "temperature"));
  CHECK(contains(error_of([] { Sampler(opts(1, -1)); }), "top_k must be >= 0"));
  CHECK(contains(error_of([] { Sampler(opts(1, 0, 0.0)); }), "top_p must be in (0, 1]"));
  CHECK(contains(error_of([] { Sampler(opts(1, 0, 1.5)); }), "top_p"));
  CHECK(contains(error_of([] { Sampler(opts(1, 0, std::nan(""))); }), "top_p"));
  CHECK_NOTHROW(Sampler(opts(0, 0, 1.0)));
  CHECK(opts(0).greedy());
  CHECK_FALSE(opts(1e-9).greedy());
}

TEST_CASE("sampling: same seed, same tokens; other seeds or streams, other tokens") {
  std::vector<float> flat(1000, 0.0f);  // uniform over 1000 ids
  Sampler s(opts(1.0));
  auto draw = [&](std::uint64_t seed, std::uint64_t stream) {
    SamplingRng rng(seed, stream);
    std::vector<std::int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(s.sample(flat, rng));
    return out;
  };
  CHECK(draw(7, 0) == draw(7, 0));
  CHECK(draw(7, 0) != draw(8, 0));  // equal with probability 1e-96
  CHECK(draw(7, 0) != draw(7, 1));
  CHECK(draw(0, 1) != draw(1, 0));  // seed and stream are not interchangeable
  // the uniform draws stay inside (0, 1) and the exponentials average 1
  SamplingRng rng(11);
  double sum = 0;
  bool inside = true;
  for (int i = 0; i < 100000; ++i) {
    const double u = rng.uniform();
    inside = inside && u > 0.0 && u < 1.0;
    sum += rng.exponential();
  }
  CHECK(inside);
  CHECK(sum / 100000 == doctest::Approx(1.0).epsilon(0.02));
}
