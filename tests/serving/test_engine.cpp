// The serving engine: the page pool's bookkeeping, and the engine's results against the same request
// run alone — bit for bit, whatever else the steps hold (staggered arrivals, shared prefixes, a pool
// small enough to preempt, cancellations, another step budget, another backend).
#include <doctest/doctest.h>

#include <dsv32/dsv32.hpp>
#include <dsv32/io/checkpoint.hpp>
#include <dsv32/serving/engine.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/mp_test_support.hpp"
#include "support/temp_dir.hpp"
#include "support/test_support.hpp"

// a named namespace: the unit suite compiles this file in one unity source with the other model tests
namespace engine_test {

using dsv32::ErrorKind;
using dsv32::FinishReason;
using dsv32::test::contains;
using dsv32::test::error_of;
using Tokens = std::vector<std::int32_t>;

// ------------------------------------------------------------------------------------------- PagePool

TEST_CASE("PagePool: allocation, refcounts, release to free or cached, LRU eviction") {
  dsv32::PagePool pool(4, 2);
  CHECK(pool.free_pages() == 4);
  const auto a = pool.allocate(), b = pool.allocate();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a == 0);  // page 0 first
  CHECK(*b == 1);
  CHECK(pool.used_pages() == 2);
  CHECK(pool.free_pages() == 2);
  // an unregistered page is freed at once
  pool.release(*b);
  CHECK(pool.used_pages() == 1);
  CHECK(pool.free_pages() == 3);
  CHECK(pool.cached_pages() == 0);
  // a registered full page is cached on release, and found again by its prefix
  const Tokens prompt = {5, 6, 7, 8, 9};
  const std::uint64_t k0 = pool.register_page(*a, dsv32::PagePool::kRootKey, std::span(prompt).subspan(0, 2));
  CHECK(k0 == dsv32::PagePool::page_key(dsv32::PagePool::kRootKey, std::span(prompt).subspan(0, 2)));
  pool.release(*a);
  CHECK(pool.cached_pages() == 1);
  CHECK(pool.used_pages() == 0);
  auto hit = pool.match(prompt, 2);
  REQUIRE(hit.size() == 1);  // the second page was never registered
  CHECK(hit[0] == *a);
  CHECK(pool.refcount(*a) == 1);
  CHECK(pool.cached_pages() == 0);
  // a second holder of the same page; released twice, cached once
  auto hit2 = pool.match(prompt, 1);
  REQUIRE(hit2.size() == 1);
  CHECK(pool.refcount(*a) == 2);
  pool.release(*a);
  pool.release(*a);
  CHECK(pool.cached_pages() == 1);
  CHECK(contains(error_of([&] { pool.release(*a); }, ErrorKind::state), "released but not held"));
  // other prefixes miss, max_pages caps, and the tokens are compared, not only the key
  CHECK(pool.match(Tokens{5, 7, 7}, 1).empty());
  CHECK(pool.match(prompt, 0).empty());
  // with every free page taken, the cached one is evicted (its key forgotten)
  std::vector<std::int32_t> held;
  while (auto p = pool.allocate()) held.push_back(*p);
  CHECK(held.size() == 4);
  CHECK(pool.cached_pages() == 0);
  CHECK(pool.match(prompt, 2).empty());
  CHECK_FALSE(pool.allocate());
  for (const auto p : held) pool.release(p);
  CHECK(pool.free_pages() == 4);
}

TEST_CASE("PagePool: the least recently released cached page is evicted first; caching off frees at once") {
  dsv32::PagePool pool(3, 1);
  const Tokens t = {1, 2, 3};
  std::vector<std::int32_t> pages;
  std::uint64_t key = dsv32::PagePool::kRootKey;
  for (int i = 0; i < 3; ++i) {
    pages.push_back(*pool.allocate());
    key = pool.register_page(pages.back(), key, std::span(t).subspan(static_cast<std::size_t>(i), 1));
  }
  pool.release(pages[2]);  // released first: evicted first
  pool.release(pages[0]);
  pool.release(pages[1]);
  CHECK(pool.cached_pages() == 3);
  CHECK(*pool.allocate() == pages[2]);
  CHECK(pool.match(t, 3).size() == 2);  // pages 0 and 1 still hold the prefix [1, 2]

  dsv32::PagePool plain(2, 1, /*prefix_caching=*/false);
  const auto p = plain.allocate();
  plain.register_page(*p, dsv32::PagePool::kRootKey, std::span(t).subspan(0, 1));
  plain.release(*p);
  CHECK(plain.cached_pages() == 0);
  CHECK(plain.free_pages() == 2);
  CHECK(plain.match(t, 1).empty());
  CHECK(contains(error_of([] { dsv32::PagePool(0, 4); }, ErrorKind::invalid_argument), "0 pages"));
  CHECK(contains(error_of([&] { plain.register_page(0, 0, t); }, ErrorKind::invalid_argument), "holds 1 tokens"));
}

// ------------------------------------------------------------------------------------------- Engine

dsv32::RuntimeOptions tiny_options() {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 2;
  o.max_seq_len = 256;
  o.absorbed_prefill_from = 24;  // the engine attends in the latent space whatever this says
  return o;
}

Tokens random_tokens(std::size_t n, std::uint32_t seed, std::int32_t vocab) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  Tokens t(n);
  for (auto& x : t) x = d(gen);
  return t;
}

// The mixed workload: prompt lengths from 1 to 90 (those up to absorbed_prefill_from = 24 in the
// reference's prefill arithmetic, the others in its decode arithmetic), three long ones sharing a
// 40-token prefix (two full pages of 16 and a part) and two short ones a 16-token page, greedy and
// seeded sampling.
std::vector<dsv32::Request> workload(std::int32_t vocab) {
  const Tokens shared = random_tokens(40, 7, vocab), shared_short = random_tokens(16, 8, vocab);
  const std::size_t lengths[] = {1, 5, 17, 33, 48, 64, 90, 12, 70, 3, 26, 50, 41, 58, 20, 22};
  std::vector<dsv32::Request> out;
  for (std::size_t i = 0; i < std::size(lengths); ++i) {
    dsv32::Request r;
    r.prompt = random_tokens(lengths[i], 100 + static_cast<std::uint32_t>(i), vocab);
    if (i >= 11 && i <= 13) std::copy(shared.begin(), shared.end(), r.prompt.begin());  // lengths 50, 41, 58
    if (i >= 14) std::copy(shared_short.begin(), shared_short.end(), r.prompt.begin());  // lengths 20, 22
    r.max_new_tokens = 6 + static_cast<std::int64_t>(i % 5) * 3;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8;
      r.sampling.top_p = 0.9;
      r.sampling.top_k = i % 4 == 1 ? 20 : 0;
      r.seed = 1000 + i;
    } else {
      r.sampling.temperature = 0.0;
    }
    r.keep_logits = true;
    out.push_back(r);
  }
  return out;
}

template <class Model>
dsv32::RequestResult run_alone(Model& model, const dsv32::Request& r) {
  dsv32::EngineOptions eo;
  eo.cache_pages = 64;
  eo.page_size = 16;
  eo.max_running = 1;
  eo.step_tokens = 7;  // prompts in chunks of 7: other boundaries than the shared run's
  eo.prefix_caching = false;
  dsv32::Engine engine(model, eo);
  const dsv32::RequestHandle h = engine.submit(r);
  engine.run_until_idle();
  REQUIRE(h.done());
  return h.wait();
}

// Runs the workload through one engine with staggered arrivals, a pool small enough to preempt and two
// cancellations, then each request alone; every request not cancelled must match bit for bit.
template <class Config, class Backend = dsv32::Cpu>
void check_batch_invariance() {
  dsv32::Transformer<Config, Backend> model(tiny_options());
  model.init_random(11);
  const auto requests = workload(static_cast<std::int32_t>(Config::vocab_size));
  dsv32::EngineOptions eo;
  eo.cache_pages = 14;  // 224 positions for requests of up to 102: preemption guaranteed
  eo.page_size = 16;
  eo.max_running = 6;
  eo.step_tokens = 40;
  std::vector<dsv32::RequestResult> results(requests.size());
  dsv32::EngineStats stats;
  {
    dsv32::Engine engine(model, eo);
    std::vector<dsv32::RequestHandle> handles;
    std::size_t next = 0;
    for (int step = 0; next < requests.size() || engine.stats().running + engine.stats().waiting > 0; ++step) {
      // arrivals: two at first, then one every other step
      if (next < requests.size() && (step == 0 || step % 2 == 1)) handles.push_back(engine.submit(requests[next++]));
      if (step == 0 && next < requests.size()) handles.push_back(engine.submit(requests[next++]));
      if (step == 5) engine.cancel(handles[2]);  // mid-run
      if (step == 9) engine.cancel(handles[6]);
      engine.step();
      REQUIRE(step < 2000);
    }
    for (std::size_t i = 0; i < handles.size(); ++i) results[i] = handles[i].wait();
    stats = engine.stats();
    CHECK(stats.pages_used == 0);
    CHECK(stats.running == 0);
    CHECK(stats.waiting == 0);
  }
  MESSAGE(Config::name << " on " << std::string(Backend::name) << ": " << stats.steps << " steps, " << stats.preemptions
                       << " preemptions, prefix hit rate " << stats.prefix_hit_rate());
  CHECK(stats.preemptions > 0);
  CHECK(stats.prefix_hit_tokens >= 32 + 16);  // at least the shared long prefix's two pages and the short one's page
  CHECK(results[2].finish == FinishReason::cancelled);
  CHECK(results[6].finish == FinishReason::cancelled);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (i == 2 || i == 6) continue;
    CAPTURE(i);
    const dsv32::RequestResult alone = run_alone(model, requests[i]);
    CHECK(results[i].finish == alone.finish);
    CHECK(results[i].tokens == alone.tokens);
    CHECK(results[i].last_logits == alone.last_logits);  // bitwise
    CHECK(!alone.last_logits.empty());
    CHECK(results[i].stats.prompt_tokens == static_cast<std::int64_t>(requests[i].prompt.size()));
  }
}

TEST_CASE("Engine: a bf16 model's requests give bit for bit what they give alone") {
  check_batch_invariance<dsv32::TinyBf16>();
}
TEST_CASE("Engine: an FP8 model's requests (exact products) give bit for bit what they give alone") {
  check_batch_invariance<dsv32::TinyFp8Ue8m0Yarn>();
}
TEST_CASE("Engine on HostInvisible: the same bits, no host read of backend memory") {
  check_batch_invariance<dsv32::TinyBf16, dsv32::testing::HostInvisible>();
}

TEST_CASE("Engine: a pool that holds one request at a time: preemption after preemption, the same bits") {
  dsv32::Transformer<dsv32::TinyBf16> model(tiny_options());
  model.init_random(6);
  dsv32::EngineOptions eo;
  eo.cache_pages = 6;  // 48 positions; each request needs 44 (prompts of 10 to 14 and 30 tokens out)
  eo.page_size = 8;
  eo.max_running = 4;
  eo.step_tokens = 9;
  dsv32::Engine engine(model, eo);
  std::vector<dsv32::Request> requests;
  std::vector<dsv32::RequestHandle> hs;
  for (int i = 0; i < 4; ++i) {
    dsv32::Request r;
    r.prompt = random_tokens(static_cast<std::size_t>(10 + i), static_cast<std::uint32_t>(200 + i), 300);
    r.max_new_tokens = 44 - static_cast<std::int64_t>(r.prompt.size());
    r.sampling.temperature = i % 2 ? 0.9 : 0.0;
    r.seed = static_cast<std::uint64_t>(i);
    r.keep_logits = true;
    requests.push_back(r);
    hs.push_back(engine.submit(r));
  }
  engine.run_until_idle();
  const dsv32::EngineStats st = engine.stats();
  MESSAGE(st.preemptions << " preemptions in " << st.steps << " steps");
  CHECK(st.preemptions >= 3);
  CHECK(st.pages_used == 0);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    const auto alone = run_alone(model, requests[i]);
    CHECK(hs[i].wait().tokens.size() == static_cast<std::size_t>(requests[i].max_new_tokens));
    CHECK(hs[i].wait().tokens == alone.tokens);
    CHECK(hs[i].wait().last_logits == alone.last_logits);
  }
}

TEST_CASE("Engine: the same tokens on Cpu and HostInvisible; a prefix hit gives the bits of a miss") {
  dsv32::Transformer<dsv32::TinyBf16> cpu(tiny_options());
  dsv32::Transformer<dsv32::TinyBf16, dsv32::testing::HostInvisible> hi(tiny_options());
  cpu.init_random(3);
  hi.init_random(3);
  dsv32::Request r;
  r.prompt = random_tokens(70, 5, 300);
  r.max_new_tokens = 12;
  r.sampling.temperature = 0;
  r.keep_logits = true;
  CHECK(run_alone(cpu, r).tokens == run_alone(hi, r).tokens);
  // the same prompt twice through one engine with prefix caching: the second reuses 4 pages
  dsv32::EngineOptions eo;
  eo.cache_pages = 32;
  eo.page_size = 16;
  dsv32::Engine engine(cpu, eo);
  const auto first = engine.submit(r);
  engine.run_until_idle();
  const auto second = engine.submit(r);
  engine.run_until_idle();
  CHECK(second.wait().stats.cached_tokens == 64);
  CHECK(engine.stats().prefix_hit_tokens == 64);
  CHECK(first.wait().tokens == second.wait().tokens);
  CHECK(first.wait().last_logits == second.wait().last_logits);
  // a follow-up turn: the prompt, the completion and more; its prefix includes generated tokens
  dsv32::Request turn = r;
  turn.prompt.insert(turn.prompt.end(), first.wait().tokens.begin(), first.wait().tokens.end());
  turn.prompt.push_back(7);
  const auto third = engine.submit(turn);
  engine.run_until_idle();
  CHECK(third.wait().stats.cached_tokens == 80);  // 83 positions: five full pages
  CHECK(third.wait().last_logits == run_alone(cpu, turn).last_logits);
}

TEST_CASE("Engine: bad requests are refused at submit with a clear error; the engine goes on") {
  dsv32::Transformer<dsv32::TinyBf16> model(tiny_options());
  model.init_random(1);
  dsv32::EngineOptions eo;
  eo.cache_pages = 8;
  eo.page_size = 16;
  dsv32::Engine engine(model, eo);
  auto submit_error = [&](auto&& edit, const char* what) {
    dsv32::Request r;
    r.prompt = {1, 2, 3};
    r.max_new_tokens = 4;
    edit(r);
    CAPTURE(what);
    const std::string message = error_of([&] { (void)engine.submit(r); }, ErrorKind::invalid_argument);
    CHECK(contains(message, what));
  };
  submit_error([](dsv32::Request& r) { r.prompt.clear(); }, "the prompt is empty");
  submit_error([](dsv32::Request& r) { r.prompt[1] = 300; }, "prompt token 1 is 300, outside the vocabulary [0, 300)");
  submit_error([](dsv32::Request& r) { r.prompt[0] = -1; }, "prompt token 0 is -1");
  submit_error([](dsv32::Request& r) { r.stop_ids = {999}; }, "stop id 999");
  submit_error([](dsv32::Request& r) { r.max_new_tokens = -1; }, "max_new_tokens must be >= 0");
  submit_error([](dsv32::Request& r) { r.max_new_tokens = 254; }, "exceed the model's max_seq_len = 256");
  submit_error([](dsv32::Request& r) { r.max_new_tokens = 200; }, "need 13 pages of 16 positions, more than the pool's 8");
  submit_error([](dsv32::Request& r) { r.sampling.temperature = -1; }, "temperature must be finite and >= 0");
  submit_error([](dsv32::Request& r) { r.sampling.top_p = 0; }, "top_p must be in (0, 1]");
  submit_error([](dsv32::Request& r) { r.sampling.top_k = -2; }, "top_k must be >= 0");
  submit_error([](dsv32::Request& r) { r.logprobs = 21; }, "logprobs must be in [-1, 20]");
  dsv32::Request ok;
  ok.prompt = {1, 2, 3};
  ok.max_new_tokens = 4;
  ok.sampling.temperature = 0;
  const auto h = engine.submit(ok);
  engine.run_until_idle();
  CHECK(h.wait().tokens.size() == 4);
  CHECK(h.wait().finish == FinishReason::max_new_tokens);
  // no tokens wanted: done at once
  ok.max_new_tokens = 0;
  const auto none = engine.submit(ok);
  engine.run_until_idle();
  CHECK(none.wait().tokens.empty());
  CHECK(none.wait().finish == FinishReason::max_new_tokens);
  // engine options out of range
  CHECK(contains(error_of([&] { (void)dsv32::Engine(model, dsv32::EngineOptions{}); }, ErrorKind::invalid_argument),
                 "give the page pool a budget"));
  dsv32::EngineOptions bad = eo;
  bad.step_tokens = 3;
  CHECK(contains(error_of([&] { (void)dsv32::Engine(model, bad); }, ErrorKind::invalid_argument), "step_tokens must be in"));
  bad = eo;
  bad.cache_pages = 0;
  bad.cache_bytes = 100;
  CHECK(contains(error_of([&] { (void)dsv32::Engine(model, bad); }, ErrorKind::invalid_argument), "holds no page"));
  // a full queue
  bad = eo;
  bad.max_waiting = 1;
  dsv32::Engine small(model, bad);
  ok.max_new_tokens = 2;
  (void)small.submit(ok);
  CHECK(contains(error_of([&] { (void)small.submit(ok); }, ErrorKind::busy), "1 requests wait already"));
}

TEST_CASE("Engine: callbacks that stop or throw end their request only; stop ids; logprobs") {
  dsv32::Transformer<dsv32::TinyBf16> model(tiny_options());
  model.init_random(2);
  dsv32::EngineOptions eo;
  eo.cache_pages = 32;
  eo.page_size = 16;
  dsv32::Engine engine(model, eo);
  dsv32::Request base;
  base.prompt = random_tokens(20, 9, 300);
  base.max_new_tokens = 8;
  base.sampling.temperature = 0;
  base.logprobs = 3;
  const dsv32::RequestResult plain = run_alone(model, base);
  REQUIRE(plain.tokens.size() == 8);
  REQUIRE(plain.logprobs.size() == 8);
  for (const auto& e : plain.logprobs) {
    CHECK(e.logprob <= 0.0f);
    REQUIRE(e.top.size() == 3);
    CHECK(e.top[0].token == e.token);  // greedy: the chosen token is the most likely
    CHECK(e.top[0].logprob == e.logprob);
    CHECK(e.top[1].logprob <= e.top[0].logprob);
  }

  dsv32::Request stopper = base, thrower = base, stop_id = base, other = base;
  std::vector<std::int32_t> streamed;
  stopper.on_token = [&](const dsv32::TokenEvent& e) {
    streamed.push_back(e.token);
    return e.index < 2;  // three tokens, then stop
  };
  thrower.on_token = [](const dsv32::TokenEvent& e) -> bool {
    if (e.index == 1) throw std::runtime_error("client went away");
    return true;
  };
  stop_id.stop_ids = {plain.tokens[4]};
  const auto a = engine.submit(stopper), b = engine.submit(thrower), c = engine.submit(stop_id), d = engine.submit(other);
  engine.run_until_idle();
  CHECK(a.wait().finish == FinishReason::stopped);
  CHECK(a.wait().tokens == Tokens(plain.tokens.begin(), plain.tokens.begin() + 3));
  CHECK(streamed == a.wait().tokens);
  CHECK(b.wait().finish == FinishReason::error);
  CHECK(contains(b.wait().message, "client went away"));
  CHECK(b.wait().tokens.size() == 2);
  const auto first_stop = std::find(plain.tokens.begin(), plain.tokens.end(), plain.tokens[4]);
  CHECK(c.wait().finish == FinishReason::eos);
  CHECK(c.wait().stop_token == plain.tokens[4]);
  CHECK(c.wait().tokens == Tokens(plain.tokens.begin(), first_stop));
  CHECK(d.wait().tokens == plain.tokens);
  CHECK(engine.stats().pages_used == 0);
}

TEST_CASE("Engine: a request's figures can be read while it waits and runs, and equal its result's at the end") {
  dsv32::Transformer<dsv32::TinyBf16> model(tiny_options());
  model.init_random(7);
  dsv32::EngineOptions eo;
  eo.cache_pages = 16;
  eo.page_size = 16;
  eo.max_running = 1;
  eo.step_tokens = 8;
  dsv32::Engine engine(model, eo);
  dsv32::Request r;
  r.prompt = random_tokens(20, 3, 300);
  r.max_new_tokens = 5;
  r.sampling.temperature = 0;
  const auto first = engine.submit(r);
  const auto second = engine.submit(r);  // waits: one sequence at a time
  CHECK(first.stats().generated_tokens == 0);
  CHECK(first.stats().prompt_tokens == 0);  // not admitted yet: nothing published but the times
  engine.step();                            // 8 of the first's 20 prompt tokens
  CHECK(first.stats().prompt_tokens == 20);
  CHECK(first.stats().generated_tokens == 0);
  engine.step();
  engine.step();  // the prompt's end: the first token
  CHECK(first.stats().generated_tokens == 1);
  CHECK(first.stats().ttft_s > 0);
  CHECK(second.stats().generated_tokens == 0);
  const double queued = second.stats().queue_s;  // still queued: its queue time grows
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(second.stats().queue_s > queued);
  CHECK(second.stats().prompt_tokens == 0);
  engine.run_until_idle();
  const auto done = first.stats();
  CHECK(done.generated_tokens == 5);
  CHECK(done.total_s == first.wait().stats.total_s);
  CHECK(done.tpot_s == first.wait().stats.tpot_s);
  CHECK(second.wait().stats.cached_tokens == 16);  // the first's full page
}

TEST_CASE("Engine: stop() ends requests in flight as cancelled and returns every page; cancel is harmless") {
  dsv32::Transformer<dsv32::TinyBf16> model(tiny_options());
  model.init_random(4);
  dsv32::EngineOptions eo;
  eo.cache_pages = 32;
  eo.page_size = 16;
  eo.max_running = 2;
  dsv32::Engine engine(model, eo);
  dsv32::Request r;
  r.prompt = random_tokens(30, 1, 300);
  r.max_new_tokens = 50;
  std::vector<dsv32::RequestHandle> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(engine.submit(r));
  engine.step();
  engine.step();
  CHECK(engine.stats().pages_used > 0);
  CHECK(engine.stats().running == 2);
  CHECK(engine.stats().waiting == 2);
  engine.cancel(dsv32::RequestHandle());  // a default handle: nothing
  engine.stop();
  for (const auto& h : hs) CHECK(h.wait().finish == FinishReason::cancelled);
  CHECK(engine.stats().pages_used == 0);
  CHECK(engine.stats().running == 0);
  CHECK(engine.stats().waiting == 0);
  engine.cancel(hs[0]);  // finished: nothing
  CHECK(contains(error_of([&] { (void)engine.submit(r); }, ErrorKind::state), "has stopped"));
  engine.stop();  // twice: nothing
}

TEST_CASE("Engine on its own thread: submissions and cancellations from several threads") {
  dsv32::Transformer<dsv32::TinyBf16> model(tiny_options());
  model.init_random(5);
  dsv32::EngineOptions eo;
  eo.cache_pages = 40;
  eo.page_size = 16;
  eo.max_running = 4;
  eo.step_tokens = 32;
  std::vector<dsv32::Request> requests;
  for (int i = 0; i < 12; ++i) {
    dsv32::Request r;
    r.prompt = random_tokens(static_cast<std::size_t>(5 + 7 * i), static_cast<std::uint32_t>(50 + i), 300);
    r.max_new_tokens = 5;
    r.sampling.temperature = 0;
    requests.push_back(r);
  }
  std::vector<dsv32::RequestResult> alone;
  for (const auto& r : requests) alone.push_back(run_alone(model, r));
  dsv32::Engine engine(model, eo);
  engine.start();
  std::vector<dsv32::RequestHandle> handles(requests.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < requests.size(); i += 3) {
        handles[i] = engine.submit(requests[i]);
        if (i % 4 == 3) engine.cancel(handles[i]);
      }
    });
  for (auto& th : threads) th.join();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& res = handles[i].wait();
    if (res.finish == FinishReason::cancelled) continue;  // cancelled before or while it ran
    CAPTURE(i);
    CHECK(res.tokens == alone[i].tokens);
  }
  engine.stop();
  CHECK(engine.stats().pages_used == 0);
  CHECK(engine.stats().finished == 12);
}

TEST_CASE("Engine over two thread ranks: rank 0 schedules, rank 1 follows; the tokens of one rank") {
  dsv32::test::TempDir dir("engine_ranks");
  dsv32_test::write_random_hf_checkpoint<dsv32_test::MpTestBf16Config>(dir.path / "hf");
  dsv32::RuntimeOptions o = dsv32_test::runtime_options();
  o.max_seq_len = 64;
  dsv32::EngineOptions eo;
  eo.cache_pages = 12;
  eo.page_size = 8;
  eo.max_running = 3;
  eo.step_tokens = 10;
  std::vector<dsv32::Request> requests;
  for (int i = 0; i < 5; ++i) {
    dsv32::Request r;
    r.prompt = random_tokens(static_cast<std::size_t>(3 + 6 * i), static_cast<std::uint32_t>(70 + i), 512);
    r.max_new_tokens = 8;
    r.sampling.temperature = 0;
    requests.push_back(r);
  }
  std::vector<Tokens> one_rank;
  {
    dsv32::Transformer<dsv32_test::MpTestBf16Config> model(o);
    dsv32::load_checkpoint(model, dir.path / "hf");
    dsv32::Engine engine(model, eo);
    std::vector<dsv32::RequestHandle> hs;
    for (const auto& r : requests) hs.push_back(engine.submit(r));
    engine.run_until_idle();
    for (const auto& h : hs) one_rank.push_back(h.wait().tokens);
  }
  std::vector<Tokens> two_ranks;
  dsv32_test::on_thread_ranks(2, [&](int rank, dsv32::ThreadCommunicator<>& comm) {
    dsv32::Transformer<dsv32_test::MpTestBf16Config> model(o, dsv32::Parallel::from(comm));
    dsv32::load_checkpoint(model, dir.path / "hf");
    dsv32::Engine engine(model, eo);
    if (rank != 0) {
      engine.follow();
      return;
    }
    engine.start();
    std::vector<dsv32::RequestHandle> hs;
    for (const auto& r : requests) hs.push_back(engine.submit(r));
    for (const auto& h : hs) two_ranks.push_back(h.wait().tokens);
    engine.stop();  // rank 1's follow() returns
  });
  REQUIRE(two_ranks.size() == requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    CHECK(two_ranks[i].size() == 8);
    CHECK(two_ranks[i] == one_rank[i]);
  }
}

}  // namespace engine_test
