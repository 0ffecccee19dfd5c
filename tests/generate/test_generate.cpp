// generate() (include/dsv32/generate/generate.hpp): the reference's loop (prefill to the shortest
// prompt, then one position per call, prompt tokens overriding sampled ones), eos and length
// limits per sequence, streaming, seeds, stats, and argument checks that leave the model usable.
// Most cases run on a fake model whose greedy choice is a closed form of (last token, position),
// so every completion is known exactly; the last ones run a tiny Transformer.
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/generate/generate.hpp>

#include <string>
#include <utility>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::contains;

namespace {

using Tokens = std::vector<std::int32_t>;
using Batch = std::vector<Tokens>;

struct FakeConfig {
  static constexpr std::int64_t vocab_size = 50;
};

// Logits peak (10 vs 0) at rule(token, position) of each sequence's last token in the call;
// with `flat` every logit is 0 (uniform sampling). Checks calls are contiguous like Transformer.
class FakeModel {
 public:
  using config_type = FakeConfig;
  struct Call {
    std::int64_t start_pos, batch;
    Tokens tokens;
  };

  explicit FakeModel(std::int64_t max_batch = 4, std::int64_t max_seq = 64) : filled_(static_cast<std::size_t>(max_batch)) {
    options_.max_batch_size = max_batch;
    options_.max_seq_len = max_seq;
  }
  static std::int32_t rule(std::int32_t token, std::int64_t pos) {
    return static_cast<std::int32_t>((token * 7 + pos * 3 + 1) % FakeConfig::vocab_size);
  }
  const dsv32::RuntimeOptions& options() const { return options_; }
  void reset() {
    ++resets;
    std::fill(filled_.begin(), filled_.end(), 0);
  }
  dsv32::Logits forward(std::span<const std::int32_t> tokens, std::int64_t batch, std::int64_t start_pos,
                        const dsv32::ForwardOptions&) {
    const auto seq = static_cast<std::int64_t>(tokens.size()) / batch;
    REQUIRE(seq * batch == static_cast<std::int64_t>(tokens.size()));
    REQUIRE(start_pos + seq <= options_.max_seq_len);
    calls.push_back({start_pos, batch, Tokens(tokens.begin(), tokens.end())});
    dsv32::Logits out{batch, 1, FakeConfig::vocab_size, std::vector<float>(static_cast<std::size_t>(batch * 50), 0.0f)};
    for (std::int64_t b = 0; b < batch; ++b) {
      REQUIRE(start_pos <= filled_[b]);  // no gap after what the sequence has cached
      filled_[b] = start_pos + seq;
      if (!flat) out.values[b * 50 + rule(tokens[(b + 1) * seq - 1], start_pos + seq - 1)] = 10.0f;
    }
    return out;
  }

  bool flat = false;
  int resets = 0;
  std::vector<Call> calls;

 private:
  dsv32::RuntimeOptions options_;
  std::vector<std::int64_t> filled_;
};

// The greedy completion of one prompt under FakeModel::rule, computed alone.
Tokens expected_completion(const Tokens& prompt, std::int64_t n) {
  Tokens out;
  std::int32_t t = prompt.back();
  for (auto pos = static_cast<std::int64_t>(prompt.size()) - 1; static_cast<std::int64_t>(out.size()) < n; ++pos)
    out.push_back(t = FakeModel::rule(t, pos));
  return out;
}

dsv32::GenerateOptions greedy(std::int64_t max_new) {
  dsv32::GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = 0;
  return o;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const dsv32::Error& e) {
    return e.what();
  }
  return "no error";
}


}  // namespace

TEST_CASE("generate: ragged prompts follow the reference's call pattern") {
  FakeModel model;
  const Batch prompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10, 11, 12, 13}};
  const auto r = dsv32::generate(model, prompts, greedy(4));
  CHECK(model.resets == 1);
  // total = 4 + 6 = 10 positions: a prefill of 3 (the shortest), then positions 3..8 one at a time
  REQUIRE(model.calls.size() == 7);
  CHECK(model.calls[0].start_pos == 0);
  CHECK(model.calls[0].tokens == Tokens{1, 2, 3, 4, 5, 6, 10, 11, 12});
  for (std::size_t i = 1; i < model.calls.size(); ++i) {
    CHECK(model.calls[i].start_pos == static_cast<std::int64_t>(i) + 2);
    CHECK(model.calls[i].tokens.size() == 3);
  }
  // prompt tokens override the model's choice while a sequence is inside its prompt
  CHECK(model.calls[1].tokens[1] == 7);
  CHECK(model.calls[3].tokens[1] == 9);
  CHECK(model.calls[1].tokens[2] == 13);
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    CAPTURE(b);
    CHECK(r.sequences[b].tokens == expected_completion(prompts[b], 4));
    CHECK(r.sequences[b].finish == dsv32::FinishReason::max_new_tokens);
  }
  CHECK(r.completions()[1] == expected_completion(prompts[1], 4));
  CHECK(r.stats.prompt_tokens == 13);
  CHECK(r.stats.generated_tokens == 12);
  CHECK(r.stats.forward_calls == 7);
  CHECK(r.stats.prefill_tokens == 9);
  CHECK(r.stats.decode_steps == 6);
  CHECK(r.stats.decode_tokens == 11);  // all but sequence 0's first, which came with the prefill
  CHECK(r.stats.time_to_first_token_s > 0);
  CHECK(r.stats.total_s >= r.stats.time_to_first_token_s + r.stats.decode_s - 1e-9);
}

TEST_CASE("generate: eos ends one sequence while the other continues") {
  const Batch prompts = {{1, 2, 3}, {20, 21, 22}};
  const Tokens free0 = expected_completion(prompts[0], 8), free1 = expected_completion(prompts[1], 8);
  // an eos that sequence 0 reaches at its 3rd token and sequence 1 never produces
  const std::int32_t eos = free0[2];
  REQUIRE(std::find(free1.begin(), free1.end(), eos) == free1.end());
  REQUIRE(std::find(free0.begin(), free0.begin() + 2, eos) == free0.begin() + 2);
  FakeModel model;
  auto o = greedy(8);
  o.eos_id = eos;
  const auto r = dsv32::generate(model, prompts, o);
  CHECK(r.sequences[0].tokens == Tokens(free0.begin(), free0.begin() + 2));
  CHECK(r.sequences[0].finish == dsv32::FinishReason::eos);
  CHECK(r.sequences[1].tokens == free1);
  CHECK(r.sequences[1].finish == dsv32::FinishReason::max_new_tokens);

  SUBCASE("and the run stops once every sequence has finished") {
    FakeModel m2;
    auto o2 = greedy(8);
    o2.eos_id = free0[0];  // both sequences produce it first
    const Batch same = {{1, 2, 3}, {1, 2, 3}};
    const auto r2 = dsv32::generate(m2, same, o2);
    CHECK(m2.calls.size() == 1);
    CHECK(r2.sequences[0].tokens.empty());
    CHECK(r2.sequences[1].finish == dsv32::FinishReason::eos);
    CHECK(r2.stats.generated_tokens == 0);
  }
}

TEST_CASE("generate: max_seq_len caps the total length") {
  FakeModel model(2, 10);
  const Batch prompts = {{1, 2, 3, 4, 5, 6, 7}, {8, 9}};
  const auto r = dsv32::generate(model, prompts, greedy(20));
  // total = min(10, 20 + 7) = 10
  CHECK(r.sequences[0].tokens == expected_completion(prompts[0], 3));
  CHECK(r.sequences[0].finish == dsv32::FinishReason::max_seq_len);
  CHECK(r.sequences[1].tokens == expected_completion(prompts[1], 8));
  CHECK(r.sequences[1].finish == dsv32::FinishReason::max_seq_len);
  CHECK(model.calls.back().start_pos == 8);

  SUBCASE("a prompt of exactly max_seq_len tokens gets an empty completion") {
    FakeModel m(1, 4);
    const auto r2 = dsv32::generate(m, {{1, 2, 3, 4}}, greedy(5));
    CHECK(r2.sequences[0].tokens.empty());
    CHECK(r2.sequences[0].finish == dsv32::FinishReason::max_seq_len);
    CHECK(m.calls.empty());
  }
  SUBCASE("max_new_tokens = 0 runs nothing") {
    FakeModel m;
    const auto r2 = dsv32::generate(m, {{1, 2}}, greedy(0));
    CHECK(r2.sequences[0].tokens.empty());
    CHECK(r2.sequences[0].finish == dsv32::FinishReason::max_new_tokens);
    CHECK(m.calls.empty());
    CHECK(r2.stats.forward_calls == 0);
  }
}

TEST_CASE("generate: the streaming callback sees exactly the returned tokens, in order") {
  FakeModel model;
  model.flat = true;  // sampled, so the stream is not a closed form
  const Batch prompts = {{1, 2, 3}, {4, 5, 6, 7, 8}};
  auto o = greedy(6);
  o.sampling.temperature = 1.0;
  o.seed = 99;
  std::vector<Tokens> streamed(2);
  std::vector<std::size_t> order;
  o.on_token = [&](std::size_t seq, std::int32_t id) {
    streamed[seq].push_back(id);
    order.push_back(seq);
    return true;
  };
  const auto r = dsv32::generate(model, prompts, o);
  CHECK(streamed[0] == r.sequences[0].tokens);
  CHECK(streamed[1] == r.sequences[1].tokens);
  CHECK(streamed[0].size() == 6);
  // sequence 0 (shorter prompt) starts two steps earlier
  REQUIRE(order.size() == 12);
  CHECK(Tokens(order.begin(), order.begin() + 3) == Tokens{0, 0, 0});
  CHECK(order[3] == 1);

  SUBCASE("returning false ends that sequence only") {
    std::vector<Tokens> seen(2);
    o.on_token = [&](std::size_t seq, std::int32_t id) {
      seen[seq].push_back(id);
      return !(seq == 1 && seen[1].size() == 2);
    };
    FakeModel m2;
    m2.flat = true;
    const auto r2 = dsv32::generate(m2, prompts, o);
    CHECK(r2.sequences[1].tokens == seen[1]);
    CHECK(r2.sequences[1].tokens.size() == 2);
    CHECK(r2.sequences[1].finish == dsv32::FinishReason::stopped);
    CHECK(r2.sequences[0].tokens == r.sequences[0].tokens);  // same seed, same stream
    CHECK(r2.sequences[0].finish == dsv32::FinishReason::max_new_tokens);
  }
}

TEST_CASE("generate: seeds make sampling reproducible and independent of batch position") {
  auto run = [](const Batch& prompts, std::uint64_t seed, std::vector<std::uint64_t> seeds = {}) {
    FakeModel m;
    m.flat = true;
    auto o = greedy(16);
    o.sampling.temperature = 0.8;
    o.seed = seed;
    o.seeds = std::move(seeds);
    return dsv32::generate(m, prompts, o).completions();
  };
  const Tokens a = {1, 2, 3}, b = {4, 5, 6};
  CHECK(run({a, b}, 1) == run({a, b}, 1));
  CHECK(run({a, b}, 1) != run({a, b}, 2));
  CHECK(run({a, b}, 1)[0] != run({a, b}, 1)[1]);  // each sequence has its own stream
  CHECK(run({a, b}, 1)[0] == run({a}, 1)[0]);     // sequence 0 uses stream 0 in any batch
  // explicit per-sequence seeds follow the sequence wherever it sits
  const auto ab = run({a, b}, 0, {11, 22});
  const auto ba = run({b, a}, 0, {22, 11});
  CHECK(ab[0] == ba[1]);
  CHECK(ab[1] == ba[0]);
  CHECK(run({b}, 0, {22})[0] == ab[1]);
}

TEST_CASE("generate: bad arguments throw before the model is touched") {
  FakeModel model(2, 8);
  auto o = greedy(4);
  auto err = [&](const Batch& p, const dsv32::GenerateOptions& opt = greedy(4)) {
    return error_of([&] { dsv32::generate(model, p, opt); });
  };
  CHECK(contains(err({}), "generate: no prompts"));
  CHECK(contains(err({{1}, {2}, {3}}), "3 prompts exceed the model's max_batch_size = 2"));
  CHECK(contains(err({{1}, {}}), "prompt 1 is empty"));
  CHECK(contains(err({{1, 2, 3, 4, 5, 6, 7, 8, 9}}), "prompt 0 has 9 tokens, more than the model's max_seq_len = 8"));
  CHECK(contains(err({{1, 50}}), "prompt 0 token 1 is 50, outside the vocabulary [0, 50)"));
  CHECK(contains(err({{-1}}), "token 0 is -1"));
  o.max_new_tokens = -1;
  CHECK(contains(err({{1}}, o), "max_new_tokens must be >= 0"));
  o = greedy(4);
  o.eos_id = 50;
  CHECK(contains(err({{1}}, o), "eos_id 50 is outside the vocabulary"));
  o = greedy(4);
  o.seeds = {1, 2};
  CHECK(contains(err({{1}}, o), "2 seeds given for 1 prompts"));
  o = greedy(4);
  o.sampling.top_p = 0;
  CHECK(contains(err({{1}}, o), "top_p must be in (0, 1]"));
  CHECK(model.resets == 0);
  CHECK(model.calls.empty());
  CHECK_NOTHROW(dsv32::generate(model, {{1}}, greedy(4)));
}

// ------------------------------------------------------------------ a real (tiny, random) model

namespace {
dsv32::Transformer<dsv32::TinyBf16>& tiny_model() {
  static dsv32::Transformer<dsv32::TinyBf16> model = [] {
    dsv32::RuntimeOptions o;
    o.max_batch_size = 2;
    o.max_seq_len = 24;
    return dsv32::Transformer<dsv32::TinyBf16>(o);
  }();
  if (!model.ready()) model.init_random(7);
  return model;
}
}  // namespace

TEST_CASE("generate: a Transformer runs ragged batches; errors leave it usable") {
  auto& model = tiny_model();
  const Batch prompts = {{5, 17, 42, 99}, {250, 3, 8, 77, 120, 9, 1}};
  const auto first = dsv32::generate(model, prompts, greedy(6));
  CHECK(first.sequences[0].tokens.size() == 6);
  CHECK(first.sequences[1].tokens.size() == 6);
  CHECK(first.stats.forward_calls == 9);  // prefill of 4, then positions 4..11

  // Rows are independent: alone, the shortest prompt (fed the same way: one prefill) gets the
  // same greedy completion. (The longer one would not be compared: alone it is prefilled at once
  // instead of position by position, which rounds differently.)
  const auto alone = dsv32::generate(model, {prompts[0]}, greedy(6));
  CHECK(alone.sequences[0].tokens == first.sequences[0].tokens);

  CHECK(contains(error_of([&] { dsv32::generate(model, {{1}, {2}, {3}}, greedy(2)); }), "max_batch_size = 2"));
  CHECK(contains(error_of([&] { dsv32::generate(model, {{1, 300}}, greedy(2)); }), "outside the vocabulary [0, 300)"));
  Tokens long_prompt(25, 1);
  CHECK(contains(error_of([&] { dsv32::generate(model, {long_prompt}, greedy(2)); }), "max_seq_len = 24"));
  // an exception from the callback midway leaves caches half-written; the next call resets them
  auto o = greedy(6);
  o.on_token = [](std::size_t, std::int32_t) -> bool { throw std::runtime_error("stop"); };
  CHECK_THROWS_AS(dsv32::generate(model, prompts, o), std::runtime_error);
  const auto again = dsv32::generate(model, prompts, greedy(6));
  CHECK(again.completions() == first.completions());
}

TEST_CASE("generate: sampling on a Transformer is reproducible per seed") {
  auto& model = tiny_model();
  auto o = greedy(8);
  o.sampling.temperature = 1.0;
  o.sampling.top_k = 20;
  o.seed = 5;
  const Batch prompts = {{1, 2, 3}, {4, 5, 6}};
  const auto a = dsv32::generate(model, prompts, o);
  const auto b = dsv32::generate(model, prompts, o);
  CHECK(a.completions() == b.completions());
  o.seed = 6;
  CHECK(dsv32::generate(model, prompts, o).completions() != a.completions());
  CHECK(a.stats.decode_tokens == 14);
  CHECK(a.stats.decode_tokens_per_s() > 0);
  CHECK(a.stats.ms_per_step() > 0);
}
