// dsv32-bench: the CPU backend on a DeepSeek-V3.2 "671B slice" — every dimension of the 671B model,
// 2 layers (1 dense, 1 MoE with 32 routed experts, 8 active), FP8 ue8m0 weights (or the bf16
// variant; the embedding and the output head are bf16 in both, as in the tensor table) — against the
// run's own yardsticks (STREAM-triad bandwidth, register-only f32 FMA peak).
// Medians over repetitions, printed as a table, or as one JSON object with --json. Figures that are
// compared with each other (the contexts, the two FP8 modes, batch B against batch 1) are timed in
// turn, one call each per round, so that a noisy host's slow minutes weigh on all of them alike.
//
//   dsv32-bench [--dtype fp8|bf16] [--threads N] [--reps N] [--json] [--checkpoint DIR] ...  (--help)
//
// Decode roofline fraction = (bytes one decode step must read: the weights it uses in their stored
// dtypes with their scales, the cache rows it touches) / step time / triad bandwidth. A batch step
// reads the routed experts its tokens chose (counted by a watched step) and each sequence's cache
// rows; "at batch 1's" is the speedup over batch 1 its bytes allow at the batch-1 step's fraction.
// Prefill FMA fraction = (matrix FLOPs of the prefill) / time / f32 FMA peak. Both yardsticks are
// measured before the figures and again after them, and the higher reading of each is used (STREAM
// itself reports its best trial): a host that is slow for a while when one reading is taken then
// cannot push the fractions up (one run on a drifting host read 22.8 GB/s before and gave roofline
// fractions above 1).
#include <dsv32/dsv32.hpp>

#include "serving_bench.hpp"

#include "cli.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace dsv32;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dtype = "fp8";
  int threads = 0;  // 0: the machine's cores
  int reps = 5;          // decode steps: medians of this many
  int prefill_reps = 3;  // prefills: medians of this many
  bool json = false;
  std::string checkpoint;
  std::uint64_t seed = 1;
  std::int64_t prefill = 512;
  std::vector<std::int64_t> contexts = {1024, 4096};
  std::int64_t batch = 8;
  std::int64_t batch_context = 256;
  bool fast_mode = true;  // also time the FP8 fast accumulation mode
  std::int64_t long_prompt = 0;  // > 0: only time one prefill of this many tokens (one pass)
  std::int64_t absorbed_from = RuntimeOptions{}.absorbed_prefill_from;
  bool fp8_fast = false;  // --long-prompt in the FP8 fast accumulation mode
  bool serving = false;   // the serving engine's figures instead (serving_bench.hpp)
  dsv32::bench::ServingOptions serving_options;
};

// "1024,4096": contexts (each >= 1), sorted; empty when `list` is not such a list.
std::vector<std::int64_t> parse_contexts(const std::string& list) {
  std::vector<std::int64_t> out;
  std::stringstream items(list);
  for (std::string part; std::getline(items, part, ',');) {
    std::int64_t n = 0;
    if (!dsv32::tools::parse_integer(part, 1, INT64_MAX, n)) return {};
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Options parse(int argc, char** argv) {
  namespace cli = dsv32::tools;  // the tools' CLI11 setup (tools/cli.hpp)
  Options o;
  CLI::App app("", "dsv32-bench");
  cli::setup(app, "usage: dsv32-bench [options]", 26);
  const auto at_least = [](std::int64_t lo) { return cli::integer(lo, INT64_MAX); };
  const auto positive_int = cli::integer(1, INT32_MAX);
  app.add_option("--dtype", o.dtype, "weights of the 671B slice (default fp8: E4M3 + ue8m0 scales)")
      ->option_text("fp8|bf16")
      ->check(cli::one_of({"fp8", "bf16"}));
  app.add_option("--threads", o.threads, "CPU threads, N >= 1 (default: the machine's cores)")
      ->option_text("N")
      ->check(positive_int);
  app.add_option("--reps", o.reps, "decode steps per figure, medians reported (default 5)")
      ->option_text("N")
      ->check(positive_int);
  app.add_option("--prefill-reps", o.prefill_reps, "prefills per figure, medians reported (default 3)")
      ->option_text("N")
      ->check(positive_int);
  app.add_flag("--json", o.json, "one JSON object on standard output instead of the table");
  app.add_option("--checkpoint", o.checkpoint,
                 "load DIR (its config.json must be the slice's) instead of random weights")
      ->option_text("DIR");
  app.add_option("--seed", o.seed, "seed of the random weights (default 1)")->option_text("S")->check(cli::unsigned64());
  app.add_option("--prefill", o.prefill, "prompt length of the prefill figure (default 512)")
      ->option_text("N")
      ->check(at_least(1));
  app.add_option_function<std::string>(
         "--contexts", [&](const std::string& list) { o.contexts = parse_contexts(list); },
         "contexts of the batch-1 decode figures (default 1024,4096)")
      ->option_text("A,B,...")
      ->check(cli::expects("integers >= 1 separated by commas",
                           [](const std::string& list) { return !parse_contexts(list).empty(); }));
  app.add_option("--batch", o.batch, "sequences of the batched decode figure (default 8)")
      ->option_text("B")
      ->check(at_least(1));
  app.add_option("--batch-context", o.batch_context, "their context (default 256)")
      ->option_text("N")
      ->check(at_least(1));
  app.add_flag_callback("--no-fast-mode", [&] { o.fast_mode = false; }, "skip the FP8 fast-accumulation figures");
  app.add_option("--long-prompt", o.long_prompt,
                 "instead: time one prefill of N tokens in one pass (tokens/s, peak memory)")
      ->option_text("N")
      ->check(at_least(2));
  app.add_option("--absorbed-from", o.absorbed_from,
                 "with --long-prompt: RuntimeOptions::absorbed_prefill_from (default 1024;\n"
                 "N + 1 forces the expanded prefill, 0 the absorbed one)")
      ->option_text("P")
      ->check(at_least(0));
  app.add_flag("--fp8-fast", o.fp8_fast, "with --long-prompt: the FP8 fast accumulation mode");
  app.add_flag("--serving", o.serving,
               "instead: the serving engine (static batch 8 against the engine, 16\n"
               "requests at once and at a rate, a shared 2,048-token prompt with and\n"
               "without the prefix cache)");
  app.add_option("--serving-rate", o.serving_options.rate, "with --serving: arrivals per second of the paced run (default 0.5)")
      ->option_text("R")
      ->check(cli::expects("a number > 0", [](const std::string& v) {
        char* end = nullptr;
        return !v.empty() && std::strtod(v.c_str(), &end) > 0 && *end == '\0';
      }));
  app.add_flag("--serving-memory", o.serving_options.memory,
               "with --serving: also 64 sequences of 1,024 positions in a pool of just\n"
               "that many (minutes of prefill)");
  cli::add_help(app);
  cli::parse(app, argc, argv);
  return o;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// Median seconds of each of `fs` over `reps` rounds that run every f once, in turn (after one
/// warm-up round): the figures that are compared with each other (1K against 4K, exact against
/// fast, batch 8 against batch 1) then see the same minutes of a noisy host, not different ones.
std::vector<double> interleaved_medians_s(int reps, const std::vector<std::function<void()>>& fs) {
  for (const auto& f : fs) f();
  std::vector<std::vector<double>> t(fs.size());
  for (int r = 0; r < reps; ++r)
    for (std::size_t i = 0; i < fs.size(); ++i) {
      const auto t0 = Clock::now();
      fs[i]();
      t[i].push_back(seconds_since(t0));
    }
  std::vector<double> m;
  for (auto& v : t) m.push_back(median(std::move(v)));
  return m;
}

/// f() run with the model context `ctx` in the FP8 accumulation mode `mode`, its mode restored after.
std::function<void()> in_mode(ExecutionContext<Cpu>& ctx, cpu::Fp8Accumulation mode, std::function<void()> f) {
  return [&ctx, mode, f = std::move(f)] {
    const cpu::Fp8Accumulation previous = std::exchange(ctx.kernels.fp8, mode);
    f();
    ctx.kernels.fp8 = previous;
  };
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

/// Peak resident set (VmHWM) in bytes, 0 where /proc is missing.
double peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) * 1024.0;
  return 0;
}
/// Resets VmHWM to the current resident set (Linux >= 4.0), so the yardsticks' arrays do not count.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// ------------------------------------------------------------------------------------------ yardsticks

/// STREAM triad a = b + s c over three arrays of 2^25 doubles (768 MiB), all threads, best of 7;
/// 24 bytes per element, as STREAM counts them.
double stream_triad_gbs() {
  const std::int64_t n = std::int64_t{1} << 25;
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
  double best = 0;
  for (int rep = 0; rep < 7; ++rep) {
    const double s = 0.5 + rep;
    const auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    best = std::max(best, 24.0 * static_cast<double>(n) / seconds_since(t0) / 1e9);
  }
  if (a[n / 2] < 0) std::printf("impossible\n");  // keeps the stores alive
  return best;
}

#if defined(DSV32_CPU_X86)
// 28 chains: some hosts (this project's Zen 4 VMs) need more than 16 independent zmm FMAs in flight
// to reach their throughput (the GEMM micro-kernels keep 24).
constexpr int kZmmChains = 28;
// Every loop over the chains is unrolled: otherwise GCC keeps the array in memory and the "peak"
// measures a load, an FMA and a store per chain (a third of the real figure: sessions 1-5 printed
// 52-70 GFLOP/s on hosts whose registers give ~210).
DSV32_TARGET_AVX512 double fma_chains_avx512(std::int64_t iters) {
  __m512 acc[kZmmChains];
#pragma GCC unroll 32
  for (int j = 0; j < kZmmChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int j = 0; j < kZmmChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]), "+v"(acc[5]),
                     "+v"(acc[6]), "+v"(acc[7]));
  }
  __m512 s = acc[0];
#pragma GCC unroll 32
  for (int j = 1; j < kZmmChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}
DSV32_TARGET_AVX2 double fma_chains_avx2(std::int64_t iters) {
  __m256 acc[12];
#pragma GCC unroll 16
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
    __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]), "+x"(acc[4]), "+x"(acc[5]));
  }
  __m256 s = acc[0];
#pragma GCC unroll 16
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
#endif

/// Register-only f32 FMA throughput (independent chains on the widest vectors the kernels use), all
/// threads; best of 5, in GFLOP/s (an FMA is 2 FLOPs).
double fma_peak_gflops(cpu::Isa isa) {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const std::int64_t iters = 20'000'000;
    double flops_per_thread = 0;
    const auto t0 = Clock::now();
#pragma omp parallel reduction(+ : flops_per_thread)
    {
      double sink = 0;
#if defined(DSV32_CPU_X86)
      if (isa >= cpu::Isa::avx512) {
        sink = fma_chains_avx512(iters);
        flops_per_thread += 2.0 * 16 * kZmmChains * static_cast<double>(iters);
      } else if (isa == cpu::Isa::avx2) {
        sink = fma_chains_avx2(iters / 2);
        flops_per_thread += 2.0 * 12 * 8 * static_cast<double>(iters / 2);
      }
#endif
      if (isa == cpu::Isa::portable) {
        float acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        for (std::int64_t i = 0; i < iters / 8; ++i)
          for (float& a : acc) a = a * 0.999999f + 1e-7f;
        sink = acc[0] + acc[7];
        flops_per_thread += 2.0 * 8 * static_cast<double>(iters / 8);
      }
      if (sink == 12345.678) std::printf(" ");
    }
    best = std::max(best, flops_per_thread / seconds_since(t0) / 1e9);
  }
  return best;
}

// ------------------------------------------------------------------------------------------ model runs

struct Figures {
  std::string config, weights;
  double init_s = 0;
  double weight_bytes = 0, cache_bytes = 0, scratch_bytes = 0;
  double planned_bytes = 0;  // MemoryPlan::total(): weights, caches, rope tables, forward scratch
  double prefill_tps = 0, prefill_flops = 0, prefill_fma_fraction = 0;
  double prefill_full_tps = 0, prefill_full_flops = 0, prefill_full_fma_fraction = 0;  // full_last_block
  double prefill_fast_tps = 0, prefill_fast_fma_fraction = 0;
  struct Decode {
    std::int64_t context = 0;
    double ms = 0, bytes = 0, roofline = 0, fast_ms = 0, fast_roofline = 0;
  };
  std::vector<Decode> decode;
  double batch_step_ms = 0, batch_tps = 0, batch1_tps = 0, batch_ratio = 0;
  double batch_fast_step_ms = 0, batch_fast_tps = 0, batch1_fast_tps = 0, batch_fast_ratio = 0;
  // the batch step's bytes (the experts its routing reads, counted by a watched step in each mode),
  // its roofline fraction, the batch-1 step's bytes, and the speedup those bytes allow when the batch
  // step reads at the batch-1 step's roofline fraction: batch x bytes1 / bytes
  struct BatchBytes {
    double bytes = 0, roofline = 0, bound = 0;
    std::vector<std::int64_t> experts;  // distinct routed experts per MoE layer
  };
  BatchBytes batch_bytes, batch_fast_bytes;
  std::int64_t routed_experts = 0;  // per MoE layer
  double batch1_bytes = 0, batch1_roofline = 0, batch1_fast_roofline = 0;
  double peak_rss = 0;

  /// The fractions as against other yardsticks: roofline fractions times `bandwidth_factor` (the
  /// bandwidth they were taken against / the new one), FMA fractions times `peak_factor`.
  void rescale(double bandwidth_factor, double peak_factor) {
    for (double* r : {&prefill_fma_fraction, &prefill_full_fma_fraction, &prefill_fast_fma_fraction}) *r *= peak_factor;
    for (Decode& d : decode) d.roofline *= bandwidth_factor, d.fast_roofline *= bandwidth_factor;
    for (double* r : {&batch_bytes.roofline, &batch_fast_bytes.roofline, &batch1_roofline, &batch1_fast_roofline})
      *r *= bandwidth_factor;
  }
};

std::vector<std::int32_t> prompt_tokens(std::int64_t n, std::int64_t vocab, std::int64_t salt) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>(mix64(static_cast<std::uint64_t>(i * 131 + salt)) % static_cast<std::uint64_t>(vocab));
  return t;
}

/// Bytes a decode step of `batch` sequences at context `ctx` (positions [0, ctx) cached) must read:
/// every weight it uses once (the routed experts of MoE layer l: `experts[l]` of them, the distinct
/// experts its tokens were routed to; empty: the n_activated_experts of a batch-1 step), the
/// embedding row and the cache rows of each sequence.
template <class Config, class Model>
double decode_step_bytes(Model& model, std::int64_t ctx, std::int64_t batch = 1,
                         const std::vector<std::int64_t>& experts = {}) {
  double bytes = 0;
  for (const TensorEntry& t : model.tensors()) {
    if (t.name == "embed.weight") {
      bytes += Config::dim * 2.0 * static_cast<double>(batch);  // one row per sequence
    } else if (t.name.find(".ffn.experts.") != std::string::npos) {
      const auto layer = static_cast<std::size_t>(std::stoll(t.name.substr(t.name.find('.') + 1)));
      const double used = experts.empty() ? static_cast<double>(Config::n_activated_experts)
                                          : static_cast<double>(experts.at(layer));
      bytes += static_cast<double>(t.bytes) * used / Config::n_routed_experts;
    } else {
      bytes += static_cast<double>(t.bytes);
    }
  }
  const double visible = static_cast<double>(ctx + 1), selected = std::min<double>(visible, Config::index_topk);
  const double per_layer = visible * (Config::index_head_dim + 4.0 * Config::index_head_dim / 128) +
                           selected * (Config::kv_lora_rank + Config::qk_rope_head_dim) * 2.0;
  return bytes + per_layer * Config::n_layers * static_cast<double>(batch);
}

/// Counts the distinct routed experts of each MoE layer over a forward call's tokens.
class RoutedExperts : public ForwardObserver {
 public:
  explicit RoutedExperts(std::int64_t layers) : seen_(static_cast<std::size_t>(layers)) {}
  void on_gate(int layer, MatrixView<const float>, MatrixView<const std::int32_t> experts) override {
    auto& ids = seen_.at(static_cast<std::size_t>(layer));
    for (std::int64_t r = 0; r < experts.rows; ++r) ids.insert(ids.end(), experts.row(r), experts.row(r) + experts.cols);
  }
  /// Distinct experts per layer (0 for a dense layer).
  std::vector<std::int64_t> counts() {
    std::vector<std::int64_t> n;
    for (auto& ids : seen_) {
      std::sort(ids.begin(), ids.end());
      n.push_back(std::unique(ids.begin(), ids.end()) - ids.begin());
    }
    return n;
  }

 private:
  std::vector<std::vector<std::int32_t>> seen_;
};

/// Matrix FLOPs of a batch-1 prefill of S tokens from position 0 returning the last logits; with
/// full_last_block false, the last block's feed-forward counts for the last token only (what the
/// model computes by default, ForwardOptions::full_last_block).
template <class Config, class Model>
double prefill_flops(Model& model, std::int64_t S, bool full_last_block) {
  double per_token = 0, per_position = 0, head = 0, last_ffn = 0;
  const std::string last_ffn_prefix = "layers." + std::to_string(Config::n_layers - 1) + ".ffn.";
  for (const TensorEntry& t : model.tensors()) {
    if (t.shape.rank() != 2 || t.name.ends_with(".scale") || t.name == "embed.weight") continue;
    double params = static_cast<double>(t.shape[0] * t.shape[1]);
    if (t.name.find(".ffn.experts.") != std::string::npos) params *= static_cast<double>(Config::n_activated_experts) / Config::n_routed_experts;
    if (t.name == "head.weight") head += params;
    else if (t.name.find(".wkv_b.") != std::string::npos) per_position += params;
    else if (!full_last_block && t.name.starts_with(last_ffn_prefix)) last_ffn += params;
    else per_token += params;
  }
  head += last_ffn;  // like the head, once per sequence
  double attn = 0;
  for (std::int64_t s = 0; s < S; ++s) {
    const double visible = static_cast<double>(s + 1), selected = std::min<double>(visible, Config::index_topk);
    attn += visible * Config::index_n_heads * Config::index_head_dim +
            selected * Config::n_heads * (Config::qk_nope_head_dim + Config::qk_rope_head_dim + Config::v_head_dim);
  }
  return 2.0 * (per_token * S + per_position * S + head) + 2.0 * attn * Config::n_layers;
}

/// --long-prompt: one prefill of o.long_prompt tokens in one pass, on the path o.absorbed_from selects.
template <class Config>
int run_long_prompt(const Options& o) {
  RuntimeOptions ro;
  ro.max_batch_size = 1;
  ro.max_seq_len = o.long_prompt + 64;
  ro.absorbed_prefill_from = o.absorbed_from;
  const bool absorbed = o.long_prompt > o.absorbed_from;
  auto model = std::make_unique<Transformer<Config>>(ro);
  if (o.checkpoint.empty()) model->init_random(o.seed);
  else load_checkpoint(*model, o.checkpoint);
  const MemoryPlan plan = model->memory_plan();
  if (o.fp8_fast) model->context().kernels.fp8 = cpu::Fp8Accumulation::fast;
  const auto prompt = prompt_tokens(o.long_prompt, Config::vocab_size, 3);
  reset_peak_rss();
  const std::string load_start = loadavg();
  const auto t0 = Clock::now();
  const Logits l = model->forward(prompt, 1, 0);
  const double s = seconds_since(t0);
  const double peak = peak_rss_bytes();
  std::printf("{\"config\": \"%s\", \"prompt_tokens\": %lld, \"path\": \"%s\", \"absorbed_prefill_from\": %lld, "
              "\"fp8_accumulation\": \"%s\", \"threads\": %d, \"seconds\": %.2f, \"tokens_per_s\": %.3f, "
              "\"peak_rss_bytes\": %.0f, \"plan_bytes\": %.0f, \"plan_scratch_bytes\": %.0f, \"weights_bytes\": %.0f, "
              "\"argmax\": %d, \"load_start\": \"%s\", \"load_end\": \"%s\"}\n",
              std::string(Config::name).c_str(), static_cast<long long>(o.long_prompt), absorbed ? "absorbed" : "expanded",
              static_cast<long long>(o.absorbed_from), o.fp8_fast ? "fast" : "exact", cpu::num_threads(), s,
              static_cast<double>(o.long_prompt) / s, peak, static_cast<double>(plan.total()),
              static_cast<double>(plan.scratch), static_cast<double>(plan.weights), l.argmax(0), load_start.c_str(),
              loadavg().c_str());
  return 0;
}

template <class Config>
Figures run(const Options& o, double fma_peak, double bandwidth) {
  Figures f;
  f.config = std::string(Config::name);
  f.routed_experts = Config::n_routed_experts;
  std::int64_t max_ctx = std::max(o.prefill, o.batch_context) + 1;
  for (std::int64_t c : o.contexts) max_ctx = std::max(max_ctx, c + 1);
  RuntimeOptions ro;
  ro.max_batch_size = std::max<std::int64_t>(1, o.batch);
  ro.max_seq_len = max_ctx + 63;
  // The forward scratch is sized for max_batch_size x max_tokens_per_call tokens: no call here has
  // more per sequence than the prefill, the batch's prompts or a 512-token cache fill.
  ro.max_tokens_per_call = std::max({o.prefill, o.batch_context, std::int64_t{512}});
  auto model = std::make_unique<Transformer<Config>>(ro);
  auto t0 = Clock::now();
  if (o.checkpoint.empty()) {
    model->init_random(o.seed);
    f.weights = "random (seed " + std::to_string(o.seed) + ")";
  } else {
    load_checkpoint(*model, o.checkpoint);
    f.weights = o.checkpoint;
  }
  f.init_s = seconds_since(t0);
  const MemoryPlan plan = model->memory_plan();
  f.weight_bytes = static_cast<double>(plan.weights);
  f.cache_bytes = static_cast<double>(plan.caches);
  f.scratch_bytes = static_cast<double>(plan.scratch);
  f.planned_bytes = static_cast<double>(plan.total());
  if (!o.json)
    std::fprintf(stderr, "%s: weights %s (%s) in %.1f s, caches %s, forward scratch %s; load %s\n", f.config.c_str(),
                 format_bytes(f.weight_bytes).c_str(), f.weights.c_str(), f.init_s, format_bytes(f.cache_bytes).c_str(),
                 format_bytes(f.scratch_bytes).c_str(), loadavg().c_str());

  // a decode step's roofline fraction: the bytes it must read / its time / the triad bandwidth
  auto roofline = [bandwidth](double bytes, double seconds) { return bytes / seconds / (bandwidth * 1e9); };
  const std::int64_t V = Config::vocab_size;
  const auto prompt = prompt_tokens(o.prefill, V, 1);
  const bool both_modes = o.fast_mode && ConfigTraits<Config>::fp8;
  const cpu::Fp8Accumulation default_mode = model->context().kernels.fp8;
  // the prefill; the same with the last block's feed-forward on every position (what llama.cpp does
  // not do); the prefill in the FP8 fast mode: in turn, round by round
  std::vector<std::function<void()>> prefills = {
      [&] { model->forward(prompt, 1, 0); }, [&] { model->forward(prompt, 1, 0, {.full_last_block = true}); }};
  if (both_modes) prefills.push_back(in_mode(model->context(), cpu::Fp8Accumulation::fast, [&] { model->forward(prompt, 1, 0); }));
  const std::vector<double> prefill_s = interleaved_medians_s(o.prefill_reps, prefills);
  f.prefill_flops = prefill_flops<Config>(*model, o.prefill, false);
  f.prefill_tps = static_cast<double>(o.prefill) / prefill_s[0];
  f.prefill_fma_fraction = f.prefill_flops / prefill_s[0] / (fma_peak * 1e9);
  f.prefill_full_flops = prefill_flops<Config>(*model, o.prefill, true);
  f.prefill_full_tps = static_cast<double>(o.prefill) / prefill_s[1];
  f.prefill_full_fma_fraction = f.prefill_full_flops / prefill_s[1] / (fma_peak * 1e9);
  if (both_modes) {
    f.prefill_fast_tps = static_cast<double>(o.prefill) / prefill_s[2];
    f.prefill_fast_fma_fraction = f.prefill_flops / prefill_s[2] / (fma_peak * 1e9);
  }
  if (!o.json)
    std::fprintf(stderr, "  prefill %lld: %.2f tokens/s (fast mode %.2f); load %s\n", static_cast<long long>(o.prefill),
                 f.prefill_tps, f.prefill_fast_tps, loadavg().c_str());

  // batch-1 decode at each context. The prompt's cache is extended in chunks of 512 tokens up to the
  // largest context first; a step at position ctx then attends to [0, ctx] only (causal), so the
  // contexts' steps (and both FP8 modes) can be timed in turn, round by round.
  std::int64_t filled = o.prefill;
  const std::int32_t next = 1;
  in_mode(model->context(), both_modes ? cpu::Fp8Accumulation::fast : default_mode, [&] {  // (the fill is not timed)
    while (filled < o.contexts.back()) {
      const std::int64_t n = std::min<std::int64_t>(512, o.contexts.back() - filled);
      model->forward(prompt_tokens(n, V, filled + 7), 1, filled);
      filled += n;
    }
  })();
  auto step_at = [&](std::int64_t ctx, cpu::Fp8Accumulation mode) {
    return in_mode(model->context(), mode, [&model, &next, ctx] { model->forward(std::span<const std::int32_t>(&next, 1), 1, ctx); });
  };
  std::vector<std::function<void()>> steps;
  for (std::int64_t ctx : o.contexts) {
    steps.push_back(step_at(ctx, default_mode));
    if (both_modes) steps.push_back(step_at(ctx, cpu::Fp8Accumulation::fast));
  }
  const std::vector<double> step_s = interleaved_medians_s(o.reps, steps);
  for (std::size_t c = 0; c < o.contexts.size(); ++c) {
    Figures::Decode d;
    d.context = o.contexts[c];
    const std::size_t k = both_modes ? 2 * c : c;
    d.ms = 1e3 * step_s[k];
    d.bytes = decode_step_bytes<Config>(*model, d.context);
    d.roofline = roofline(d.bytes, d.ms * 1e-3);
    if (both_modes) {  // the same step in the FP8 fast mode
      d.fast_ms = 1e3 * step_s[k + 1];
      d.fast_roofline = roofline(d.bytes, d.fast_ms * 1e-3);
    }
    f.decode.push_back(d);
    if (!o.json)
      std::fprintf(stderr, "  decode @ %lld: %.1f ms (fast mode %.1f ms); load %s\n", static_cast<long long>(d.context),
                   d.ms, d.fast_ms, loadavg().c_str());
  }

  if (o.batch > 1) {
    const auto prompts = prompt_tokens(o.batch * o.batch_context, V, 99);
    model->forward(prompts, o.batch, 0);
    // one token per sequence, all different (one token repeated would route every sequence to the
    // same experts and spare the step the bytes of the others)
    const std::vector<std::int32_t> step = prompt_tokens(o.batch, V, 4242);
    auto batch_step = [&](cpu::Fp8Accumulation mode) {
      return in_mode(model->context(), mode, [&model, &step, &o] { model->forward(step, o.batch, o.batch_context); });
    };
    // batch 8 and batch 1 (sequence 0 of the same caches) in turn, then the same in the fast mode
    std::vector<std::function<void()>> fs = {batch_step(default_mode), step_at(o.batch_context, default_mode)};
    if (both_modes) {
      fs.push_back(batch_step(cpu::Fp8Accumulation::fast));
      fs.push_back(step_at(o.batch_context, cpu::Fp8Accumulation::fast));
    }
    // the experts each mode's routing reads (a watched step, not timed: every step of the batch
    // figure rewrites the same cache rows with the same values, so its routing is the same)
    auto routed = [&](cpu::Fp8Accumulation mode) {
      RoutedExperts seen(Config::n_layers);
      in_mode(model->context(), mode, [&] { model->forward(step, o.batch, o.batch_context, {.observer = &seen}); })();
      return seen.counts();
    };
    f.batch_bytes.experts = routed(default_mode);
    if (both_modes) f.batch_fast_bytes.experts = routed(cpu::Fp8Accumulation::fast);
    const std::vector<double> s = interleaved_medians_s(o.reps, fs);
    f.batch1_bytes = decode_step_bytes<Config>(*model, o.batch_context);
    auto batch_bytes = [&](Figures::BatchBytes& b, double step_s) {
      b.bytes = decode_step_bytes<Config>(*model, o.batch_context, o.batch, b.experts);
      b.roofline = roofline(b.bytes, step_s);
      b.bound = static_cast<double>(o.batch) * f.batch1_bytes / b.bytes;
    };
    batch_bytes(f.batch_bytes, s[0]);
    f.batch1_roofline = roofline(f.batch1_bytes, s[1]);
    if (both_modes) {
      batch_bytes(f.batch_fast_bytes, s[2]);
      f.batch1_fast_roofline = roofline(f.batch1_bytes, s[3]);
    }
    f.batch_step_ms = 1e3 * s[0];
    f.batch_tps = static_cast<double>(o.batch) / s[0];
    f.batch1_tps = 1.0 / s[1];
    f.batch_ratio = f.batch_tps / f.batch1_tps;
    if (both_modes) {
      f.batch_fast_step_ms = 1e3 * s[2];
      f.batch_fast_tps = static_cast<double>(o.batch) / s[2];
      f.batch1_fast_tps = 1.0 / s[3];
      f.batch_fast_ratio = f.batch_fast_tps / f.batch1_fast_tps;
    }
  }
  f.peak_rss = peak_rss_bytes();
  return f;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  if (o.threads > 0) cpu::set_num_threads(o.threads);
  const int threads = cpu::num_threads();
  const cpu::Isa isa = cpu::detected_features().isa;
  if (o.long_prompt > 0) return o.dtype == "bf16" ? run_long_prompt<Slice671BBf16>(o) : run_long_prompt<Slice671BFp8>(o);
  if (o.serving) {
    dsv32::bench::ServingOptions so = o.serving_options;
    so.json = o.json;
    so.seed = o.seed;
    return o.dtype == "bf16" ? dsv32::bench::run_serving<Slice671BBf16>(so) : dsv32::bench::run_serving<Slice671BFp8>(so);
  }
  const std::string load_start = loadavg();
  const double bandwidth_start = stream_triad_gbs();
  const double fma_peak_start = fma_peak_gflops(isa);
  reset_peak_rss();
  if (!o.json)
    std::fprintf(stderr, "dsv32-bench: %d threads, kernels %s; STREAM triad %.1f GB/s, f32 FMA peak %.1f GFLOP/s; load %s\n",
                 threads, std::string(cpu::isa_name(isa)).c_str(), bandwidth_start, fma_peak_start, load_start.c_str());
  Figures f = o.dtype == "bf16" ? run<Slice671BBf16>(o, fma_peak_start, bandwidth_start)
                                : run<Slice671BFp8>(o, fma_peak_start, bandwidth_start);
  const std::string load_end = loadavg();
  // the yardsticks again (the model is gone, so the peak resident set is already taken); the higher
  // reading of each is the one the fractions are quoted against
  const double bandwidth_end = stream_triad_gbs();
  const double fma_peak_end = fma_peak_gflops(isa);
  const double bandwidth = std::max(bandwidth_start, bandwidth_end), fma_peak = std::max(fma_peak_start, fma_peak_end);
  f.rescale(bandwidth_start / bandwidth, fma_peak_start / fma_peak);
  const double budget = f.planned_bytes;

  if (o.json) {
    std::printf("{\"config\": \"%s\", \"weights\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"load_start\": \"%s\", "
                "\"load_end\": \"%s\", \"triad_gbs\": %.2f, \"triad_gbs_start\": %.2f, \"triad_gbs_end\": %.2f, "
                "\"fma_peak_gflops\": %.1f, \"fma_peak_gflops_start\": %.1f, \"fma_peak_gflops_end\": %.1f, \"init_s\": %.2f, "
                "\"weight_bytes\": %.0f, \"cache_bytes\": %.0f, \"scratch_bytes\": %.0f, \"planned_bytes\": %.0f, \"peak_rss_bytes\": %.0f, \"peak_rss_ratio\": %.3f, "
                "\"prefill_tokens\": %lld, \"prefill_tokens_per_s\": %.3f, \"prefill_gflop\": %.2f, "
                "\"prefill_fma_fraction\": %.3f, \"prefill_fast_tokens_per_s\": %.3f, \"prefill_fast_fma_fraction\": %.3f, "
                "\"prefill_full_last_block_tokens_per_s\": %.3f, \"prefill_full_last_block_gflop\": %.2f, "
                "\"prefill_full_last_block_fma_fraction\": %.3f, \"decode\": [",
                f.config.c_str(), f.weights.c_str(), threads, std::string(cpu::isa_name(isa)).c_str(), load_start.c_str(),
                load_end.c_str(), bandwidth, bandwidth_start, bandwidth_end, fma_peak, fma_peak_start, fma_peak_end, f.init_s, f.weight_bytes, f.cache_bytes, f.scratch_bytes, f.planned_bytes, f.peak_rss,
                f.peak_rss / budget, static_cast<long long>(o.prefill), f.prefill_tps, f.prefill_flops / 1e9,
                f.prefill_fma_fraction, f.prefill_fast_tps, f.prefill_fast_fma_fraction, f.prefill_full_tps,
                f.prefill_full_flops / 1e9, f.prefill_full_fma_fraction);
    for (std::size_t i = 0; i < f.decode.size(); ++i)
      std::printf("%s{\"context\": %lld, \"ms_per_token\": %.3f, \"bytes_per_step\": %.0f, \"roofline_fraction\": %.3f, "
                  "\"fast_ms_per_token\": %.3f, \"fast_roofline_fraction\": %.3f}",
                  i ? ", " : "", static_cast<long long>(f.decode[i].context), f.decode[i].ms, f.decode[i].bytes,
                  f.decode[i].roofline, f.decode[i].fast_ms, f.decode[i].fast_roofline);
    auto experts_json = [](const std::vector<std::int64_t>& e) {
      std::string t = "[";
      for (std::size_t i = 0; i < e.size(); ++i) t += (i ? ", " : "") + std::to_string(e[i]);
      return t + "]";
    };
    std::printf("], \"batch\": %lld, \"batch_context\": %lld, \"batch_step_ms\": %.3f, \"batch_tokens_per_s\": %.3f, "
                "\"batch1_tokens_per_s\": %.3f, \"batch_speedup\": %.3f, \"batch_fast_step_ms\": %.3f, "
                "\"batch_fast_tokens_per_s\": %.3f, \"batch1_fast_tokens_per_s\": %.3f, \"batch_fast_speedup\": %.3f, "
                "\"batch1_bytes_per_step\": %.0f, \"batch1_roofline_fraction\": %.3f, \"batch1_fast_roofline_fraction\": %.3f, "
                "\"batch_routed_experts\": %s, \"batch_bytes_per_step\": %.0f, \"batch_roofline_fraction\": %.3f, "
                "\"batch_bytes_bound\": %.3f, \"batch_fast_routed_experts\": %s, \"batch_fast_bytes_per_step\": %.0f, "
                "\"batch_fast_roofline_fraction\": %.3f, \"batch_fast_bytes_bound\": %.3f}\n",
                static_cast<long long>(o.batch), static_cast<long long>(o.batch_context), f.batch_step_ms, f.batch_tps,
                f.batch1_tps, f.batch_ratio, f.batch_fast_step_ms, f.batch_fast_tps, f.batch1_fast_tps, f.batch_fast_ratio,
                f.batch1_bytes, f.batch1_roofline, f.batch1_fast_roofline, experts_json(f.batch_bytes.experts).c_str(),
                f.batch_bytes.bytes, f.batch_bytes.roofline, f.batch_bytes.bound,
                experts_json(f.batch_fast_bytes.experts).c_str(), f.batch_fast_bytes.bytes, f.batch_fast_bytes.roofline,
                f.batch_fast_bytes.bound);
    return 0;
  }
  std::printf("dsv32-bench %s, weights %s, %d threads, kernels %s, load %s -> %s\n", f.config.c_str(), f.weights.c_str(),
              threads, std::string(cpu::isa_name(isa)).c_str(), load_start.c_str(), load_end.c_str());
  std::printf("| figure | value | derived |\n| --- | --- | --- |\n");
  std::printf("| STREAM triad | %.1f GB/s | the higher of %.1f before and %.1f after the figures |\n"
              "| f32 FMA peak | %.1f GFLOP/s | the higher of %.1f before and %.1f after |\n",
              bandwidth, bandwidth_start, bandwidth_end, fma_peak, fma_peak_start, fma_peak_end);
  const char* mode = o.dtype == "bf16" ? "bf16" : "FP8 exact";
  std::printf("| prefill %lld tokens (%s) | %.2f tokens/s | %.1f GFLOP, FMA fraction %.3f |\n",
              static_cast<long long>(o.prefill), mode, f.prefill_tps, f.prefill_flops / 1e9, f.prefill_fma_fraction);
  std::printf("| prefill %lld tokens (%s, last block's FFN on every position) | %.2f tokens/s | %.1f GFLOP, FMA fraction %.3f |\n",
              static_cast<long long>(o.prefill), mode, f.prefill_full_tps, f.prefill_full_flops / 1e9,
              f.prefill_full_fma_fraction);
  if (f.prefill_fast_tps > 0)
    std::printf("| prefill %lld tokens (FP8 fast) | %.2f tokens/s | FMA fraction %.3f |\n", static_cast<long long>(o.prefill),
                f.prefill_fast_tps, f.prefill_fast_fma_fraction);
  for (const auto& d : f.decode) {
    // beyond the first context: the step's time against the first context's (timed in the same rounds)
    const Figures::Decode& first = f.decode.front();
    auto against_first = [&](double ms, double first_ms) {
      char text[64] = "";
      if (&d != &first)
        std::snprintf(text, sizeof text, ", %.2fx the @%lld step", ms / first_ms, static_cast<long long>(first.context));
      return std::string(text);
    };
    std::printf("| decode batch 1 @ %lld | %.1f ms/token (%.2f tokens/s) | %.3f GB/step, roofline fraction %.3f%s |\n",
                static_cast<long long>(d.context), d.ms, 1e3 / d.ms, d.bytes / 1e9, d.roofline,
                against_first(d.ms, first.ms).c_str());
    if (d.fast_ms > 0)
      std::printf("| decode batch 1 @ %lld (FP8 fast) | %.1f ms/token (%.2f tokens/s) | roofline fraction %.3f%s |\n",
                  static_cast<long long>(d.context), d.fast_ms, 1e3 / d.fast_ms, d.fast_roofline,
                  against_first(d.fast_ms, first.fast_ms).c_str());
  }
  // the batch step's bytes: the routed experts it reads (of the MoE layers'), its roofline fraction,
  // and the speedup its bytes allow at the batch-1 step's roofline fraction
  auto batch_bytes = [&](const Figures::BatchBytes& b, double batch1_roofline) {
    std::string experts;
    for (std::size_t l = 0; l < b.experts.size(); ++l)
      if (b.experts[l] > 0) experts += (experts.empty() ? "" : ", ") + std::to_string(b.experts[l]);
    char text[256];
    std::snprintf(text, sizeof text,
                  "; %.3f GB/step (%s of %lld routed experts), roofline fraction %.3f (batch 1: %.3f GB, %.3f): "
                  "%.2fx at batch 1's",
                  b.bytes / 1e9, experts.c_str(), static_cast<long long>(f.routed_experts), b.roofline,
                  f.batch1_bytes / 1e9, batch1_roofline, b.bound);
    return std::string(text);
  };
  if (f.batch_step_ms > 0)
    std::printf("| decode batch %lld @ %lld | %.2f tokens/s (%.1f ms/step) | %.2fx batch 1 (%.2f tokens/s)%s |\n",
                static_cast<long long>(o.batch), static_cast<long long>(o.batch_context), f.batch_tps, f.batch_step_ms,
                f.batch_ratio, f.batch1_tps, batch_bytes(f.batch_bytes, f.batch1_roofline).c_str());
  if (f.batch_fast_step_ms > 0)
    std::printf("| decode batch %lld @ %lld (FP8 fast) | %.2f tokens/s (%.1f ms/step) | %.2fx batch 1 (%.2f tokens/s)%s |\n",
                static_cast<long long>(o.batch), static_cast<long long>(o.batch_context), f.batch_fast_tps,
                f.batch_fast_step_ms, f.batch_fast_ratio, f.batch1_fast_tps,
                batch_bytes(f.batch_fast_bytes, f.batch1_fast_roofline).c_str());
  std::printf("| peak resident memory | %s | %.3fx the memory plan: weights, caches, scratch (%s) |\n", format_bytes(f.peak_rss).c_str(),
              f.peak_rss / budget, format_bytes(budget).c_str());
  std::printf("| weights ready | %.1f s | |\n", f.init_s);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dsv32-bench: %s\n", e.what());
  return 1;
}
