// Concurrency: independent models and tokenizers used from several threads at once, and one
// tokenizer shared by several threads, give exactly what serial use gives. Built into the regular
// suites, and again under ThreadSanitizer by the sanitizer build (DSV32_TSAN_TESTS), where any data
// race between the threads fails the run.
//
// A Transformer is not shared between threads (it owns its caches); each thread gets its own. A
// Tokenizer is documented as safe to share: its tables are immutable and its BPE word cache is
// per thread. The serving engine is shared: submit(), cancel(), stats() and waiting on handles from
// any thread while its own thread steps.
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/serving/engine.hpp>
#include <dsv32/tokenizer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tiny_tokenizer.hpp"

namespace {

using Ids = std::vector<std::int32_t>;
const std::string kData = DSV32_TEST_DATA;

// Runs every job on its own thread, all started together, and waits for them.
void run_at_once(const std::vector<std::function<void()>>& jobs) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        jobs[i]();
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

template <class Config>
std::vector<Ids> greedy_completions(const std::string& scenario, const std::vector<Ids>& prompts) {
  dsv32::ModelArgs args = dsv32::ModelArgs::from_file(kData + "/golden/" + scenario + "/config.json");
  args.runtime.max_batch_size = static_cast<std::int64_t>(prompts.size());
  args.runtime.max_seq_len = 32;
  dsv32::Transformer<Config> model(args.runtime);
  dsv32::load_checkpoint(model, kData + "/golden/" + scenario);
  dsv32::GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling.temperature = 0;
  return dsv32::generate(model, prompts, o).completions();
}

const dsv32::Tokenizer& deepseek() {
  static const dsv32::Tokenizer tok = dsv32::Tokenizer::from_directory(kData + "/tokenizer/deepseek_v3");
  return tok;
}

std::vector<std::string> sample_texts() {
  const auto cases = dsv32::bpe::read_json_file(kData + "/tokenizer/deepseek_v3/encode_cases.json");
  std::vector<std::string> texts;
  for (const auto& c : cases.at("cases")) texts.push_back(c.at("text").get<std::string>());
  return texts;
}

// What a thread does with a tokenizer: encode every text, decode the ids at once and streamed.
struct TokenizerWork {
  std::vector<Ids> ids;
  std::vector<std::string> decoded, streamed;
  bool operator==(const TokenizerWork&) const = default;
};

TokenizerWork tokenizer_work(const dsv32::Tokenizer& tok, const std::vector<std::string>& texts) {
  TokenizerWork w;
  for (const std::string& text : texts) {
    Ids ids = tok.encode(text, true);
    w.decoded.push_back(tok.decode(ids, true));
    auto stream = tok.stream_decoder();
    std::string s;
    for (std::int32_t id : ids) s += stream.push(id);
    w.streamed.push_back(s + stream.finish());
    w.ids.push_back(std::move(ids));
  }
  return w;
}

}  // namespace

TEST_CASE("concurrency: two models of different configs generate at once as they do alone") {
  const std::vector<Ids> prompts_a = {{97, 260, 130, 5}, {1, 2}};
  const std::vector<Ids> prompts_b = {{11, 22, 33}};
  const auto serial_a = greedy_completions<dsv32::TinyBf16>("tiny_bf16", prompts_a);
  const auto serial_b = greedy_completions<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn", prompts_b);
  REQUIRE(serial_a.size() == 2);
  REQUIRE(serial_b.size() == 1);
  CHECK(serial_a[0].size() == 8);
  CHECK(serial_b[0].size() == 8);

  // Two models of each config, four threads.
  std::vector<std::vector<Ids>> a(2), b(2);
  run_at_once({[&] { a[0] = greedy_completions<dsv32::TinyBf16>("tiny_bf16", prompts_a); },
               [&] { b[0] = greedy_completions<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn", prompts_b); },
               [&] { a[1] = greedy_completions<dsv32::TinyBf16>("tiny_bf16", prompts_a); },
               [&] { b[1] = greedy_completions<dsv32::TinyFp8Ue8m0Yarn>("tiny_fp8_ue8m0_yarn", prompts_b); }});
  CHECK(a[0] == serial_a);
  CHECK(a[1] == serial_a);
  CHECK(b[0] == serial_b);
  CHECK(b[1] == serial_b);
}

TEST_CASE("concurrency: one tokenizer shared by four threads gives the serial results") {
  const auto texts = sample_texts();
  REQUIRE(texts.size() == 66);
  const TokenizerWork serial = tokenizer_work(deepseek(), texts);
  CHECK(serial.decoded[0] == texts[0]);
  std::vector<TokenizerWork> results(4);
  std::vector<std::function<void()>> jobs;
  for (std::size_t t = 0; t < results.size(); ++t)
    jobs.push_back([&, t] {
      for (int round = 0; round < 2; ++round) results[t] = tokenizer_work(deepseek(), texts);
    });
  run_at_once(jobs);
  for (const auto& r : results) CHECK(r == serial);
}

TEST_CASE("concurrency: two tokenizers, each in its own threads, give the serial results") {
  const auto texts = sample_texts();
  const dsv32::Tokenizer small = dsv32::Tokenizer::from_json(tiny::tokenizer_json(), tiny::config_json());
  const dsv32::Tokenizer copy = deepseek();  // a copy shares the loaded tables
  const TokenizerWork serial_big = tokenizer_work(deepseek(), texts);
  const TokenizerWork serial_small = tokenizer_work(small, texts);
  CHECK(serial_small.ids != serial_big.ids);
  std::vector<TokenizerWork> big(2), tiny_results(2);
  run_at_once({[&] { big[0] = tokenizer_work(deepseek(), texts); },
               [&] { tiny_results[0] = tokenizer_work(small, texts); },
               [&] { big[1] = tokenizer_work(copy, texts); },
               [&] { tiny_results[1] = tokenizer_work(small, texts); }});
  CHECK(big[0] == serial_big);
  CHECK(big[1] == serial_big);
  CHECK(tiny_results[0] == serial_small);
  CHECK(tiny_results[1] == serial_small);
}

TEST_CASE("concurrency: the serving engine takes submissions, cancellations and reads from four threads") {
  dsv32::ModelArgs args = dsv32::ModelArgs::from_file(kData + "/golden/tiny_bf16/config.json");
  args.runtime.max_seq_len = 64;
  dsv32::Transformer<dsv32::TinyBf16> model(args.runtime);
  dsv32::load_checkpoint(model, kData + "/golden/tiny_bf16");
  auto request = [](int i) {
    dsv32::Request r;
    for (int j = 0; j < 3 + i % 9; ++j) r.prompt.push_back((i * 31 + j * 7) % 300);
    r.max_new_tokens = 6;
    r.sampling.temperature = 0;
    return r;
  };
  // each request alone first (a caller-stepped engine), for the expected tokens
  std::vector<Ids> alone;
  dsv32::EngineOptions eo;
  eo.cache_pages = 10;  // 80 positions for up to 4 sequences of up to 17: preemptions happen
  eo.page_size = 8;
  eo.max_running = 4;
  eo.step_tokens = 12;
  {
    dsv32::Engine engine(model, eo);
    for (int i = 0; i < 24; ++i) {
      const auto h = engine.submit(request(i));
      engine.run_until_idle();
      alone.push_back(h.wait().tokens);
    }
  }
  dsv32::Engine engine(model, eo);
  engine.start();
  std::vector<dsv32::RequestResult> results(24);
  std::atomic<bool> reading{true};
  std::vector<std::function<void()>> jobs;
  for (int t = 0; t < 3; ++t)
    jobs.push_back([&, t] {
      for (int i = t; i < 24; i += 3) {
        const auto h = engine.submit(request(i));
        if (i % 5 == 4) engine.cancel(h);
        results[static_cast<std::size_t>(i)] = h.wait();
      }
    });
  jobs.push_back([&] {  // a reader of the figures meanwhile
    while (reading.load()) {
      const dsv32::EngineStats s = engine.stats();
      CHECK(s.pages_used <= s.pages);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  run_at_once({[&] {
                 std::vector<std::function<void()>> submitters(jobs.begin(), jobs.begin() + 3);
                 run_at_once(submitters);
                 reading = false;
               },
               jobs[3]});
  engine.stop();
  for (int i = 0; i < 24; ++i) {
    CAPTURE(i);
    const auto& r = results[static_cast<std::size_t>(i)];
    if (r.finish == dsv32::FinishReason::cancelled) continue;
    CHECK(r.tokens == alone[static_cast<std::size_t>(i)]);
  }
  CHECK(engine.stats().pages_used == 0);
  CHECK(engine.stats().finished == 24);
}
