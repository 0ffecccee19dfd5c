// dsv32-bench --serving: the serving engine on the 671B slice (included by dsv32_bench.cpp, one
// translation unit with its model). Four figures, in one run, each printed with what it is set
// against:
//  1. batch 8, prompt 256, output 64: the static batch's decode tokens/s (Transformer::forward on the
//     rectangular caches, all sequences in lockstep) and the engine's (8 requests submitted at once,
//     steps after every prompt has its first token), medians of 56 steps timed in turn — the engine
//     should keep >= 0.9x;
//  2. 16 requests (prompt 128, output 32) arriving at once, then at a fixed rate: output tokens/s,
//     TTFT and TPOT p50 / p99;
//  3. 8 requests sharing a 2,048-token system prompt (each with its own 32-token question, 8 tokens
//     out), one after another: the mean TTFT of requests 2-8 with the prefix cache and without it;
//  4. (--serving-memory) 64 sequences of 1,024 positions at once in a pool that holds 64 x 1,024
//     positions (every page needed, no more), against the 64 x max_seq_len the rectangular caches
//     reserve: the pool, the peak of its pages in use, the run's time.
#pragma once

#include <dsv32/serving/engine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace dsv32::bench {

/// The serving figures' parameters (dsv32-bench --serving ...).
struct ServingOptions {
  bool json = false;
  std::uint64_t seed = 1;
  double rate = 0.5;        ///< requests per second of the fixed-rate arrivals
  bool memory = false;      ///< also figure 4 (minutes of prefill on the slice)
  std::int64_t max_seq_len = 16384;  ///< the model's max_seq_len (the rectangular caches' size)
};

struct LatencySummary {
  double tokens_per_s = 0, ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0, seconds = 0;
};

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

inline std::vector<std::int32_t> serving_prompt(std::int64_t n, std::int64_t vocab, std::uint64_t salt) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (salt + 1);
  for (auto& v : t) {
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    v = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(vocab));
  }
  return t;
}

/// The requests' results summarized: output tokens per second over `seconds`, TTFT and TPOT percentiles.
inline LatencySummary summarize(const std::vector<RequestResult>& results, double seconds) {
  LatencySummary s;
  std::vector<double> ttft, tpot;
  std::int64_t tokens = 0;
  for (const RequestResult& r : results) {
    tokens += static_cast<std::int64_t>(r.tokens.size());
    ttft.push_back(r.stats.ttft_s);
    if (r.tokens.size() > 1) tpot.push_back(r.stats.tpot_s);
  }
  s.seconds = seconds;
  s.tokens_per_s = static_cast<double>(tokens) / seconds;
  s.ttft_p50 = percentile(ttft, 0.5), s.ttft_p99 = percentile(ttft, 0.99);
  s.tpot_p50 = percentile(tpot, 0.5), s.tpot_p99 = percentile(tpot, 0.99);
  return s;
}

template <class Config>
int run_serving(const ServingOptions& o) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  constexpr std::int64_t V = Config::vocab_size;
  RuntimeOptions ro;
  ro.max_batch_size = 8;
  ro.max_seq_len = o.max_seq_len;
  ro.max_tokens_per_call = 512;
  Transformer<Config> model(ro);
  const auto t_init = Clock::now();
  model.init_random(o.seed);
  const double init_s = since(t_init);
  auto log = [&](const char* what) {
    if (!o.json) std::fprintf(stderr, "dsv32-bench --serving: %s\n", what);
  };

  // 1. static batch 8 against the engine: both prefill 8 prompts of 256, then their decode steps are
  //    timed in turn, one static step then one engine step, so that a noisy host weighs on both alike
  log("1/4: batch 8, prompt 256, output 64: static and engine decode steps in turn");
  std::vector<std::vector<std::int32_t>> prompts;
  for (int b = 0; b < 8; ++b) prompts.push_back(serving_prompt(256, V, 10 + static_cast<std::uint64_t>(b)));
  EngineOptions eo;
  eo.cache_bytes = std::size_t{2} << 30;
  eo.max_running = 16;
  eo.step_tokens = 512;
  double static_tps = 0, engine_decode_tps = 0, engine_total_tps = 0;
  {
    Engine engine(model, eo);  // frees the rectangular caches; the static steps below allocate them again
    std::vector<RequestHandle> hs;
    std::int64_t started = 0, produced = 0;  // requests with a first token, tokens so far (this thread's)
    const auto t0 = Clock::now();
    for (const auto& p : prompts) {
      Request r;
      r.prompt = p;
      r.max_new_tokens = 64 + 8;  // every request still decodes through the timed steps
      r.sampling.temperature = 0;
      r.on_token = [&](const TokenEvent& e) {
        started += e.index == 0;
        ++produced;
        return true;
      };
      hs.push_back(engine.submit(r));
    }
    while (started < 8) engine.step();  // the prompts, chunked, until every request has its first token
    const double prefill_s = since(t0);
    std::vector<std::int32_t> flat;
    for (const auto& p : prompts) flat.insert(flat.end(), p.begin(), p.end());
    Logits last = model.forward(flat, 8, 0);
    std::vector<double> static_s, engine_s;
    for (int i = 0; i < 56; ++i) {
      std::vector<std::int32_t> next(8);
      for (int b = 0; b < 8; ++b) next[static_cast<std::size_t>(b)] = last.argmax(b);
      auto t = Clock::now();
      last = model.forward(next, 8, 256 + i);
      static_s.push_back(since(t));
      t = Clock::now();
      engine.step();
      engine_s.push_back(since(t));
    }
    double engine_sum = 0;
    for (double x : engine_s) engine_sum += x;
    static_tps = 8.0 / percentile(static_s, 0.5);
    engine_decode_tps = 8.0 / percentile(engine_s, 0.5);
    engine_total_tps = static_cast<double>(produced) / (prefill_s + engine_sum);
    engine.stop();
  }
  // 2. 16 requests at once, then at a fixed rate
  log("2/4: 16 requests (prompt 128, output 32) at once, then at a fixed rate");
  auto sixteen = [&](double rate) {
    Engine engine(model, eo);
    engine.start();
    std::vector<RequestHandle> hs;
    const auto t0 = Clock::now();
    for (int i = 0; i < 16; ++i) {
      if (rate > 0 && i > 0)
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(i / rate)));
      Request r;
      r.prompt = serving_prompt(128, V, 100 + static_cast<std::uint64_t>(i));
      r.max_new_tokens = 32;
      r.sampling.temperature = 0;
      hs.push_back(engine.submit(r));
    }
    std::vector<RequestResult> rs;
    for (const auto& h : hs) rs.push_back(h.wait());
    const double s = since(t0);
    engine.stop();
    return summarize(rs, s);
  };
  const LatencySummary burst = sixteen(0), paced = sixteen(o.rate);

  // 3. a shared 2,048-token system prompt, with and without the prefix cache
  log("3/4: 8 requests sharing a 2,048-token system prompt, with and without the prefix cache");
  auto shared = [&](bool caching) {
    EngineOptions so = eo;
    so.prefix_caching = caching;
    Engine engine(model, so);
    const auto system = serving_prompt(2048, V, 7);
    std::vector<double> ttft;
    for (int i = 0; i < 8; ++i) {
      Request r;
      r.prompt = system;
      const auto q = serving_prompt(32, V, 300 + static_cast<std::uint64_t>(i));
      r.prompt.insert(r.prompt.end(), q.begin(), q.end());
      r.max_new_tokens = 8;
      r.sampling.temperature = 0;
      const auto h = engine.submit(r);
      engine.run_until_idle();
      if (i > 0) ttft.push_back(h.wait().stats.ttft_s);
    }
    double sum = 0;
    for (double t : ttft) sum += t;
    return sum / static_cast<double>(ttft.size());
  };
  const double ttft_cached = shared(true), ttft_uncached = shared(false);

  // 4. 64 sequences of 1,024 positions in a pool of exactly 64 x 1,024
  double mem_s = 0, pool_bytes = 0, rect_bytes = 0;
  std::int64_t mem_pages = 0, mem_peak_pages = 0, mem_tokens = 0, mem_preemptions = 0;
  if (o.memory) {
    log("4/4: 64 sequences of 1,024 positions (prompt 960, output 64) in a pool of 64 x 1,024 positions");
    EngineOptions mo = eo;
    mo.cache_bytes = 0;
    mo.cache_pages = 64 * 1024 / mo.page_size;
    mo.max_running = 64;
    mo.step_tokens = 1024;
    Engine engine(model, mo);
    pool_bytes = static_cast<double>(engine.pool().bytes);
    rect_bytes = static_cast<double>(64) * static_cast<double>(o.max_seq_len) *
                 static_cast<double>(mla_cache_bytes_per_token(ModelArgs::of<Config>()) * Config::n_layers);
    mem_pages = engine.pool().pages;
    std::vector<RequestHandle> hs;
    const auto t0 = Clock::now();
    for (int i = 0; i < 64; ++i) {
      Request r;
      r.prompt = serving_prompt(960, V, 1000 + static_cast<std::uint64_t>(i));
      r.max_new_tokens = 64;
      r.sampling.temperature = 0;
      hs.push_back(engine.submit(r));
    }
    while (engine.step()) mem_peak_pages = std::max(mem_peak_pages, engine.stats().pages_used);
    mem_s = since(t0);
    for (const auto& h : hs) mem_tokens += static_cast<std::int64_t>(h.wait().tokens.size());
    mem_preemptions = engine.stats().preemptions;
  } else {
    log("4/4: skipped (--serving-memory runs it: minutes of prefill on this model)");
  }

  const double ratio = engine_decode_tps / static_tps, prefix_ratio = ttft_cached / ttft_uncached;
  if (o.json) {
    auto lat = [](const LatencySummary& s) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "{\"tokens_per_s\": %.3f, \"ttft_p50_s\": %.3f, \"ttft_p99_s\": %.3f, \"tpot_p50_s\": %.4f, "
                    "\"tpot_p99_s\": %.4f, \"seconds\": %.2f}",
                    s.tokens_per_s, s.ttft_p50, s.ttft_p99, s.tpot_p50, s.tpot_p99, s.seconds);
      return std::string(buf);
    };
    std::printf("{\"config\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"init_s\": %.2f, "
                "\"static_batch8_decode_tokens_per_s\": %.3f, \"engine_batch8_decode_tokens_per_s\": %.3f, "
                "\"engine_batch8_total_tokens_per_s\": %.3f, \"engine_vs_static\": %.3f, "
                "\"sixteen_at_once\": %s, \"sixteen_at_rate\": %s, \"rate_per_s\": %.3f, "
                "\"shared_prompt_ttft_cached_s\": %.3f, \"shared_prompt_ttft_uncached_s\": %.3f, "
                "\"shared_prompt_ttft_ratio\": %.4f",
                std::string(Config::name).c_str(), cpu::num_threads(), std::string(cpu::isa_name(cpu::detected_features().isa)).c_str(),
                init_s, static_tps, engine_decode_tps, engine_total_tps, ratio, lat(burst).c_str(), lat(paced).c_str(),
                o.rate, ttft_cached, ttft_uncached, prefix_ratio);
    if (o.memory)
      std::printf(", \"memory\": {\"sequences\": 64, \"positions_each\": 1024, \"pool_pages\": %lld, "
                  "\"pool_bytes\": %.0f, \"rectangular_bytes\": %.0f, \"peak_pages_used\": %lld, "
                  "\"tokens_out\": %lld, \"preemptions\": %lld, \"seconds\": %.1f}",
                  static_cast<long long>(mem_pages), pool_bytes, rect_bytes, static_cast<long long>(mem_peak_pages),
                  static_cast<long long>(mem_tokens), static_cast<long long>(mem_preemptions), mem_s);
    std::printf("}\n");
    return 0;
  }
  std::printf("serving engine on %s, %d threads, kernels %s (weights drawn in %.1f s)\n\n", std::string(Config::name).c_str(),
              cpu::num_threads(), std::string(cpu::isa_name(cpu::detected_features().isa)).c_str(), init_s);
  std::printf("%-58s %12s\n", "figure", "value");
  std::printf("%-58s %12.2f\n", "1. static batch 8 decode at 256 context, tokens/s", static_tps);
  std::printf("%-58s %12.2f   %.2fx static (target >= 0.9x)\n", "   engine, 8 requests decoding, tokens/s", engine_decode_tps, ratio);
  std::printf("%-58s %12.2f\n", "   engine: output tokens/s, prompts included", engine_total_tps);
  auto lat_rows = [](const char* what, const LatencySummary& s) {
    std::printf("%-58s %12.2f   TTFT p50 %.2f s p99 %.2f s, TPOT p50 %.0f ms p99 %.0f ms (%.1f s)\n", what, s.tokens_per_s,
                s.ttft_p50, s.ttft_p99, 1e3 * s.tpot_p50, 1e3 * s.tpot_p99, s.seconds);
  };
  lat_rows("2. 16 requests at once: output tokens/s", burst);
  char paced_label[96];
  std::snprintf(paced_label, sizeof paced_label, "   16 requests at %.2f/s: output tokens/s", o.rate);
  lat_rows(paced_label, paced);
  std::printf("%-58s %12.3f\n", "3. shared 2,048-token prompt, TTFT of requests 2-8, cached, s", ttft_cached);
  std::printf("%-58s %12.3f   ratio %.3f (target <= 0.2)\n", "   without the prefix cache, s", ttft_uncached, prefix_ratio);
  if (o.memory) {
    std::printf("%-58s %12lld   %.1f MiB (rectangular caches: %.1f MiB)\n", "4. 64 x 1,024 positions: pool pages", static_cast<long long>(mem_pages),
                pool_bytes / 1048576.0, rect_bytes / 1048576.0);
    std::printf("%-58s %12lld   %lld tokens out, %lld preemptions, %.1f s\n", "   peak pages in use", static_cast<long long>(mem_peak_pages),
                static_cast<long long>(mem_tokens), static_cast<long long>(mem_preemptions), mem_s);
  }
  return 0;
}

}  // namespace dsv32::bench
