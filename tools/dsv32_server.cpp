// dsv32-server: an OpenAI-compatible HTTP server on dsv32::Engine (continuous batching over a paged
// cache, prefix reuse) — see --help and docs/serving.md.
//
// Structure: arguments -> a Backend (the one template: Engine<ServedModel<Transformer<Config>>> for the
// config chosen — the demo model, a preset with random weights, or the one matching a checkpoint's
// config.json) and the tokenizer -> HTTP routes (cpp-httplib, a thread per connection). A request is
// read and checked by dsv32::openai (serving/openai.hpp), rendered and tokenized, and submitted to the
// engine; its tokens become text on the engine's thread (Reply: detokenizer, stop strings, the chat
// format's reply parser) and reach the HTTP thread through the Reply's queue, which the handler turns
// into one response or a stream of server-sent events. The engine knows nothing of HTTP or JSON.
#include <dsv32/dsv32.hpp>
#include <dsv32/config/registry.hpp>
#include <dsv32/core/filesystem.hpp>
#include <dsv32/io/checkpoint.hpp>
#include <dsv32/serving/engine.hpp>
#include <dsv32/serving/metrics.hpp>
#include <dsv32/serving/openai.hpp>
#include <dsv32/tokenizer.hpp>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace fs = std::filesystem;
using dsv32::openai::ApiError;
using dsv32::openai::Json;

namespace {

using Tokens = std::vector<std::int32_t>;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kRandomWeightSeed = 2025;  // dsv32-generate's embedded model's seed
constexpr std::int64_t kRandomMaxSeqLen = 4096;

constexpr std::string_view kUsage = "usage: dsv32-server [--model DIR | --random-weights PRESET] [options]";

constexpr std::string_view kDescription = R"(An OpenAI-compatible HTTP server (POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
GET /health, GET /metrics) on dsv32's serving engine: continuous batching over a paged cache, prefix
reuse. With no model argument it serves the demo model: DeepSeek's vocabulary, seeded random weights
(gibberish text), DeepSeek-V3.2-Exp's tokenizer from the dsv32 source tree; no downloads. It prints
"listening on http://HOST:PORT" when ready. Reference: docs/serving.md.)";

constexpr std::string_view kFooter = R"(Exit status: 0 after a clean shutdown (SIGINT, SIGTERM), 1 when the model or the port fails, 2 for
bad arguments.

examples:
  dsv32-server
  dsv32-server --model /models/DeepSeek-V3.2-Exp --port 8000 --api-key secret
  dsv32-server --random-weights deepseek-v3.2-671b-slice-fp8 --bench 1,8,32)";

// ------------------------------------------------------------------ arguments

struct Arguments {
  std::optional<fs::path> model, tokenizer, scripted_output;
  std::optional<std::string> random_weights, served_model_name, api_key;
  std::optional<dsv32::ChatFormat> chat_format;
  std::optional<std::int64_t> max_seq_len;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::size_t max_body_bytes = std::size_t{8} << 20;
  std::int64_t http_threads = 0;
  double shutdown_timeout = 30;
  std::optional<std::size_t> cache_bytes;
  std::int64_t page_size = dsv32::kDefaultPageSize, max_running = 16, step_tokens = 512, max_waiting = 64;
  bool prefix_caching = true, fp8_fast = false;
  int threads = 0;
  std::vector<std::int64_t> bench;
  std::int64_t bench_prompt = 64, bench_output = 32, bench_requests = 0, bench_rounds = 2;
};

[[noreturn]] void usage_error(const std::string& message) { dsv32::tools::usage_error("dsv32-server", message); }

// "1,8,32": the concurrencies of --bench (each in [1, 4096]); empty when `list` is not such a list.
std::vector<std::int64_t> parse_concurrencies(const std::string& list) {
  std::vector<std::int64_t> out;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    std::int64_t n = 0;
    if (!dsv32::tools::parse_integer(item, 1, 4096, n)) return {};
    out.push_back(n);
  }
  return out;
}

Arguments parse_arguments(int argc, char** argv) {
  namespace cli = dsv32::tools;
  Arguments a;
  constexpr std::int64_t kMax = std::int64_t{1} << 30;
  CLI::App app(std::string(kDescription), "dsv32-server");
  cli::setup(app, std::string(kUsage), 27);
  app.footer(std::string(kFooter));
  const auto count = [&app](const char* name, std::int64_t lo, std::int64_t hi, auto& target, const char* value_name,
                            const char* description) {
    return app.add_option(name, target, description)->option_text(value_name)->check(cli::integer(lo, hi));
  };

  app.option_defaults()->group("model");
  cli::add_optional(app, "--model", a.model, "DIR",
                    "checkpoint directory (Hugging Face layout or the reference's converted\n"
                    "format); the compiled config matching its config.json is served");
  cli::add_optional(app, "--random-weights", a.random_weights, "PRESET",
                    "a preset with seeded random weights, for benchmarks: demo-fp8,\n"
                    "deepseek-v3.2-671b-slice-fp8, deepseek-v3.2-671b-slice-bf16 (or any config\n"
                    "name below)");
  cli::add_optional(app, "--tokenizer", a.tokenizer, "DIR",
                    "tokenizer.json and tokenizer_config.json (default: DIR of --model when it\n"
                    "holds them, else DeepSeek-V3.2-Exp's in the dsv32 source tree)");
  app.add_option_function<std::string>(
         "--chat-format", [&](const std::string& name) { a.chat_format = dsv32::chat_format_from_name(name); },
         "deepseek-v3.2-exp | deepseek-v3.2 (| deepseek-v3); default: the tokenizer\n"
         "files' (a recognized template, or V3.2's encoding when there is none)")
      ->option_text("F")
      ->check(cli::chat_format());
  cli::add_optional(app, "--served-model-name", a.served_model_name, "N",
                    "the name clients give as \"model\" (default: DIR's name, the preset's name, or\n"
                    "dsv32-demo)")
      ->check(cli::non_empty());
  cli::add_optional(app, "--max-seq-len", a.max_seq_len, "N", "context length (default: config.json's; random weights: 4096)")
      ->check(cli::integer(2, dsv32::RuntimeOptions::kMaxSeqLen));
  app.add_flag("--fp8-fast", a.fp8_fast, "FP8 models: the fast accumulation mode (docs/performance.md)");
  count("--threads", 1, 4096, a.threads, "N", "CPU threads of the model (default: the machine's cores)");

  app.option_defaults()->group("server");
  app.add_option("--host", a.host, "address to listen on (default 127.0.0.1)")->option_text("H");
  count("--port", 0, 65535, a.port, "P", "port (default 8000; 0: any free port, printed)");
  cli::add_optional(app, "--api-key", a.api_key, "KEY",
                    "require \"Authorization: Bearer KEY\" on /v1/ routes (default: the\n"
                    "DSV32_API_KEY environment variable; none when unset)")
      ->check(cli::non_empty());
  count("--max-body-bytes", 1024, std::int64_t{1} << 34, a.max_body_bytes, "N",
        "largest request body (default 8388608): larger ones get 413");
  count("--http-threads", 1, 65536, a.http_threads, "N",
        "connections served at once (default: max-running + max-waiting + 16)");
  count("--shutdown-timeout", 0, 86400, a.shutdown_timeout, "S",
        "on SIGINT/SIGTERM, seconds in-flight requests may take to finish before\n"
        "they are cancelled (default 30)");

  app.option_defaults()->group("engine");
  app.add_option_function<std::uint64_t>(
         "--cache-memory", [&](std::uint64_t bytes) { a.cache_bytes = static_cast<std::size_t>(bytes); },
         "the paged cache's budget, e.g. 4G, 512M (default: max-running sequences of\n"
         "max-seq-len positions)")
      ->option_text("BYTES")
      ->transform(cli::bytes(std::uint64_t{1} << 60, "2^60"));
  count("--page-size", 1, 1 << 20, a.page_size, "N", "positions per cache page (default 64)");
  count("--max-running", 1, dsv32::RuntimeOptions::kMaxBatchSize, a.max_running, "N", "sequences per step (default 16)");
  count("--step-tokens", 1, std::int64_t{1} << 24, a.step_tokens, "N",
        "tokens per step: decode tokens plus prefill chunks (default 512)");
  count("--max-waiting", 0, kMax, a.max_waiting, "N", "requests queued beyond the running ones before 429 (default 64)");
  app.add_flag_callback("--no-prefix-caching", [&] { a.prefix_caching = false; },
                        "do not share cached prompt prefixes between requests");
  cli::add_optional(app, "--scripted-output", a.scripted_output, "FILE", "tests only: see ServedModel")->group("");  // (not in --help)

  app.option_defaults()->group("benchmark (--random-weights or --model; docs/serving.md \"Benchmark\")");
  app.add_option_function<std::string>(
         "--bench", [&](const std::string& list) { a.bench = parse_concurrencies(list); },
         "run each concurrency against the engine directly, then through HTTP\n"
         "(streamed /v1/completions on loopback), print the figures and exit")
      ->option_text("C1,C2,...")
      ->check(cli::expects("concurrencies in [1, 4096] separated by commas, e.g. 1,8,32",
                           [](const std::string& list) { return !parse_concurrencies(list).empty(); }));
  count("--bench-prompt", 1, kMax, a.bench_prompt, "N", "prompt tokens per request (default 64)");
  count("--bench-output", 1, kMax, a.bench_output, "N", "completion tokens per request (default 32)");
  count("--bench-requests", 1, kMax, a.bench_requests, "N",
        "requests per concurrency level and round (default: max(concurrency, 4))");
  count("--bench-rounds", 1, 1000, a.bench_rounds, "N",
        "rounds per concurrency level, the two paths in ABBA order so that a\n"
        "machine that slows down or speeds up weighs on both alike (default 2)");

  cli::add_help(app, "this help", "other");
  cli::parse(app, argc, argv);
  if (a.model && a.random_weights) usage_error("give --model or --random-weights, not both");
  if (a.step_tokens < a.max_running)
    usage_error("--step-tokens (" + std::to_string(a.step_tokens) + ") must be >= --max-running (" +
                std::to_string(a.max_running) + "): every running sequence gets a token each step");
  if (!a.api_key) {
    if (const char* env = std::getenv("DSV32_API_KEY"); env != nullptr && *env != '\0') a.api_key = env;
  }
  if (a.scripted_output) a.prefix_caching = false;  // ServedModel tells sequences apart by their first page
  return a;
}

// ------------------------------------------------------------------ the model

// --scripted-output FILE (tests): replies chosen by the prompt, for what random weights never write
// (reasoning, tool calls, broken markup). FILE: {"replies": [{"when": "TEXT", "reply": "TEXT"}, ...]};
// a prompt whose text contains `when` gets `reply` (its text encoded, special tokens spelled), then
// eos; when several match, the one whose `when` occurs last in the prompt. Other prompts get the
// model's own logits.
struct Script {
  struct Entry {
    std::string when;
    Tokens reply;
  };
  std::vector<Entry> entries;
  dsv32::Tokenizer tokenizer;
  std::int32_t eos = 0;

  static Script load(const fs::path& file, const dsv32::Tokenizer& tok) {
    std::ifstream in(file);
    if (!in) throw dsv32::Error(dsv32::ErrorKind::io, "cannot open the script " + file.string());
    const nlohmann::json j = nlohmann::json::parse(in);
    Script s{{}, tok, tok.eos_id().value_or(0)};
    for (const auto& e : j.at("replies")) s.entries.push_back({e.at("when").get<std::string>(), tok.encode(e.at("reply").get<std::string>())});
    return s;
  }

  const Tokens* choose(std::span<const std::int32_t> prompt) const {
    const std::string text = tokenizer.decode(prompt);
    const Tokens* best = nullptr;
    std::size_t best_at = 0;
    for (const Entry& e : entries) {
      const std::size_t at = text.rfind(e.when);
      if (at != std::string::npos && (best == nullptr || at >= best_at)) {
        best = &e.reply;
        best_at = at;
      }
    }
    return best;
  }
};

// The model the engine runs: the Transformer, plus two things only the engine's thread can do.
// (1) The model's thread count: OpenMP's is per thread, so it is set from the engine's thread, at
// its first pass. (2) With a script (tests), the logits of sequences whose prompt matches are
// replaced by the scripted reply's next token (every other logit far below), so that the real
// engine — scheduling, sampling, stop ids, log-probabilities — produces it. Sequences are told
// apart by their first cache page, which is theirs alone without prefix caching (off with a
// script); a sequence starts at position 0.
template <class Inner>
class ServedModel {
 public:
  using config_type = typename Inner::config_type;
  using backend_type = typename Inner::backend_type;

  ServedModel(Inner& inner, const Script* script, int threads) : inner_(inner), script_(script), threads_(threads) {}

  const dsv32::RuntimeOptions& options() const noexcept { return inner_.options(); }
  const dsv32::Parallel& parallel() const noexcept { return inner_.parallel(); }
  bool ready() const noexcept { return inner_.ready(); }
  void release_caches() { inner_.release_caches(); }
  void reserve(const dsv32::ForwardLimits& l) { inner_.reserve(l); }

  dsv32::Logits forward(std::span<const dsv32::SequenceSlice> slices, dsv32::KvCache<backend_type>& cache,
                        const dsv32::ForwardOptions& o) {
    if (threads_ > 0) {
      dsv32::cpu::set_num_threads(threads_);
      threads_ = 0;
    }
    dsv32::Logits logits = inner_.forward(slices, cache, o);
    if (script_ == nullptr) return logits;
    std::int64_t row = 0;
    for (const dsv32::SequenceSlice& s : slices) {
      Scripted& seq = sequences_[s.pages.front()];
      if (s.start_pos == 0) seq = {};
      seq.tokens.insert(seq.tokens.end(), s.tokens.begin(), s.tokens.end());
      if (!s.logits) continue;
      if (!seq.decided) {
        seq.decided = true;
        seq.reply = script_->choose(seq.tokens);
        seq.prompt = seq.tokens.size();
      }
      if (seq.reply != nullptr) {
        const std::size_t k = seq.tokens.size() - seq.prompt;
        const std::int32_t next = k < seq.reply->size() ? (*seq.reply)[k] : script_->eos;
        float* r = logits.values.data() + row * logits.vocab;
        std::fill(r, r + logits.vocab, -1e9f);
        r[next] = 0.0f;
      }
      ++row;
    }
    return logits;
  }

 private:
  struct Scripted {
    Tokens tokens;
    std::size_t prompt = 0;
    const Tokens* reply = nullptr;
    bool decided = false;
  };
  Inner& inner_;
  const Script* script_;
  int threads_;
  std::unordered_map<std::int32_t, Scripted> sequences_;
};

// The engine behind a virtual seam: everything but the model is compiled once.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual dsv32::RequestHandle submit(dsv32::Request r) = 0;
  virtual void cancel(const dsv32::RequestHandle& h) = 0;
  virtual dsv32::EngineStats stats() const = 0;
  virtual void stop() = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t max_seq_len() const = 0;
  virtual std::int64_t pool_tokens() const = 0;
  virtual std::string describe() const = 0;
};

template <class Config>
class ModelBackend final : public Backend {
 public:
  using Model = dsv32::Transformer<Config>;

  ModelBackend(const Arguments& a, const dsv32::RuntimeOptions& runtime, const Script* script)
      : model_(runtime), served_(model_, script, a.threads) {
    if (a.fp8_fast) model_.context().kernels.fp8 = dsv32::cpu::Fp8Accumulation::fast;
    const auto t0 = Clock::now();
    if (a.model) dsv32::load_checkpoint(model_, *a.model);
    else model_.init_random(kRandomWeightSeed);
    load_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
    dsv32::EngineOptions eo;
    eo.page_size = a.page_size;
    eo.max_running = a.max_running;
    eo.step_tokens = a.step_tokens;
    eo.max_waiting = a.max_waiting;
    eo.prefix_caching = a.prefix_caching;
    if (a.cache_bytes) {
      eo.cache_bytes = *a.cache_bytes;
    } else {  // every running sequence at full length: no preemption
      eo.cache_pages = (a.max_running * runtime.max_seq_len + a.page_size - 1) / a.page_size;
    }
    engine_.emplace(served_, eo);
    engine_->start();
  }
  ~ModelBackend() override { engine_.reset(); }

  dsv32::RequestHandle submit(dsv32::Request r) override { return engine_->submit(std::move(r)); }
  void cancel(const dsv32::RequestHandle& h) override { engine_->cancel(h); }
  dsv32::EngineStats stats() const override { return engine_->stats(); }
  void stop() override { engine_->stop(); }
  std::int64_t vocab_size() const override { return Config::vocab_size; }
  std::int64_t max_seq_len() const override { return model_.options().max_seq_len; }
  std::int64_t pool_tokens() const override { return engine_->pool().tokens; }
  std::string describe() const override {
    const dsv32::MemoryPlan plan = model_.memory_plan();
    const auto& p = engine_->pool();
    std::ostringstream os;
    os << "model " << Config::name << ": " << plan.parameters << " parameters, "
       << dsv32::format_bytes(static_cast<double>(plan.weights)) << " of weights (" << std::fixed;
    os.precision(2);
    os << load_s_ << " s); cache pool " << p.pages << " pages of " << p.page_size << " positions ("
       << dsv32::format_bytes(static_cast<double>(p.bytes)) << "), max_seq_len " << model_.options().max_seq_len;
    return os.str();
  }

 private:
  Model model_;
  ServedModel<Model> served_;
  std::optional<dsv32::Engine<ServedModel<Model>>> engine_;
  double load_s_ = 0;
};

// The configs this server is compiled for: the demo model, the released 671B model, its two-layer
// slice (benchmarks) and one golden scenario (its checkpoint serves in the tests). Each costs about
// 10 s of compilation; a program for another model lists its own config here.
using ServedConfigs = dsv32::ConfigList<dsv32::DemoFp8, dsv32::Config671B, dsv32::Slice671BFp8, dsv32::Slice671BBf16,
                                        dsv32::TinyFp8Ue8m0Yarn>;

std::unique_ptr<Backend> make_backend(const Arguments& a, const Script* script) {
  std::unique_ptr<Backend> backend;
  dsv32::RuntimeOptions runtime;
  runtime.max_batch_size = 1;  // the model's own caches are released; the engine's pool replaces them
  if (a.model) {
    if (!dsv32::detail::path_is_directory(*a.model))
      throw dsv32::Error(dsv32::ErrorKind::io, "model directory " + a.model->string() + " does not exist");
    dsv32::ModelArgs args = dsv32::read_model_config(*a.model);
    args.runtime.max_batch_size = 1;
    if (a.max_seq_len) args.runtime.max_seq_len = *a.max_seq_len;
    args.runtime.validate();
    dsv32::dispatch_config<ServedConfigs>(
        args, [&]<class C>() { backend = std::make_unique<ModelBackend<C>>(a, args.runtime, script); },
        (*a.model / "config.json").string());
    return backend;
  }
  runtime.max_seq_len = a.max_seq_len.value_or(kRandomMaxSeqLen);
  const std::string name = a.random_weights.value_or(std::string(dsv32::DemoFp8::name));
  if (!ServedConfigs::by_name(name, [&]<class C>() { backend = std::make_unique<ModelBackend<C>>(a, runtime, script); }))
    throw dsv32::Error(dsv32::ErrorKind::invalid_argument,
                       "--random-weights: no config named '" + name + "' (compiled: " + ServedConfigs::names() + ")");
  return backend;
}

// ------------------------------------------------------------------ replies

// Completion ids to text, as the chat format's reply parser reads it: DeepSeek-V3.2-Exp's (and V3's)
// markers spelled, other special tokens skipped — what ChatOutputParser::push(id) decodes; V3.2's
// ids all spelled (its parser reads its markers as text); plain completions skip special tokens.
class TokenText {
 public:
  TokenText(const dsv32::Tokenizer& tok, bool chat, dsv32::ChatFormat format)
      : tok_(tok), decoder_(tok.stream_decoder(/*skip_special_tokens=*/!(chat && format == dsv32::ChatFormat::deepseek_v3_2))) {
    if (!chat || format == dsv32::ChatFormat::deepseek_v3_2) return;
    namespace ct = dsv32::chat_tokens;
    for (std::string_view m : {ct::think_begin, ct::think_end, ct::tool_calls_begin, ct::tool_calls_end, ct::tool_call_begin,
                               ct::tool_sep, ct::tool_call_end, ct::end_of_sentence})
      if (const auto id = tok.token_to_id(m)) markers_.emplace(*id, m);
  }
  // An id the model has but the tokenizer does not (the 671B model's vocabulary is 129280, DeepSeek's
  // tokenizer ends at 128815) is no text.
  std::string push(std::int32_t id) {
    if (const auto it = markers_.find(id); it != markers_.end()) return decoder_.finish() + std::string(it->second);
    return tok_.contains(id) ? decoder_.push(id) : std::string();
  }
  std::string finish() { return decoder_.finish(); }

 private:
  dsv32::Tokenizer tok_;
  dsv32::StreamDecoder decoder_;
  std::unordered_map<std::int32_t, std::string_view> markers_;
};

// What some tokens added to the reply.
struct Piece {
  dsv32::ChatOutputDelta delta;                    // completions: the text in delta.content
  std::vector<dsv32::openai::TokenLogprob> logprobs;
  bool token = false;                              // made by a token (completions stream one chunk per token)
};

// One request's reply: its tokens become text (TokenText), stop strings are matched (StopStrings),
// and chat replies are parsed (ChatOutputParser). on_token() runs on the engine's thread; the HTTP
// thread takes the pieces, and finish()es the reply once the request is done (no callback runs then).
//
// A reply that breaks the chat format's markup never fails the request: DeepSeek-V3.2's parser hands
// the rest back as content itself; DeepSeek-V3.2-Exp's throws, and then the text it had not yet
// accounted for (since it last stood in reasoning or content with nothing held back, or completed a
// tool call) and everything after it is content, as generated. So a response holds the tool calls
// that were complete and well formed, and the rest as text: nothing it says is false.
class Reply {
 public:
  Reply(const dsv32::Tokenizer& tok, bool chat, dsv32::ChatFormat format, dsv32::ChatOutputState start,
        std::vector<std::string> stops, bool logprobs)
      : tok_(tok), chat_(chat), throwing_parser_(format != dsv32::ChatFormat::deepseek_v3_2), text_(tok, chat, format),
        stops_(std::move(stops)), logprobs_(logprobs) {
    if (chat) parser_.emplace(format, start);
  }

  // The engine's thread: false ends the request (a stop string was found).
  bool on_token(const dsv32::TokenEvent& e) {
    Piece piece;
    piece.token = true;
    if (logprobs_) {
      dsv32::openai::TokenLogprob lp{e.token, token_bytes(e.token), e.logprob, {}};
      for (const dsv32::TokenLogprob& t : e.top) lp.top.push_back({t.token, token_bytes(t.token), t.logprob});
      piece.logprobs.push_back(std::move(lp));
    }
    const auto r = stops_.push(text_.push(e.token));
    if (r.match) stop_match_ = r.match;
    feed(r.text, piece.delta);
    publish(std::move(piece));
    return !r.match;
  }

  // The HTTP thread, after the request is done: what was held back.
  void finish() {
    Piece piece;
    if (!stops_.matched()) {
      const auto r = stops_.push(text_.finish());
      if (r.match) stop_match_ = r.match;
      feed(r.text + stops_.flush(), piece.delta);
    }
    if (parser_ && !raw_) {
      try {
        append(piece.delta, parser_->finish());
      } catch (const dsv32::Error&) {  // the reply ended inside tool calls
        piece.delta.content += unconfirmed_;
        raw_ = true;
      }
      unconfirmed_.clear();
    }
    publish(std::move(piece));
  }

  // Waits up to `wait` for pieces; takes them all.
  std::vector<Piece> take(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (pieces_.empty() && wait.count() > 0) cv_.wait_for(lock, wait, [&] { return !pieces_.empty(); });
    std::vector<Piece> out(std::make_move_iterator(pieces_.begin()), std::make_move_iterator(pieces_.end()));
    pieces_.clear();
    return out;
  }

  std::optional<std::size_t> stop_match() const { return stop_match_; }

 private:
  static void append(dsv32::ChatOutputDelta& to, dsv32::ChatOutputDelta from) {
    to.reasoning += from.reasoning;
    to.content += from.content;
    for (auto& c : from.tool_calls) to.tool_calls.push_back(std::move(c));
  }

  // The length of the longest tail of `s` that begins a marker: what push_text() holds back until
  // the next text tells whether the marker comes (every marker starts with '<').
  static std::size_t marker_start_length(std::string_view s) {
    namespace ct = dsv32::chat_tokens;
    std::size_t longest = 0;
    for (std::string_view m : {ct::think_begin, ct::think_end, ct::tool_calls_begin, ct::tool_calls_end, ct::tool_call_begin,
                               ct::tool_sep, ct::tool_call_end, ct::end_of_sentence}) {
      for (std::size_t n = std::min(m.size() - 1, s.size()); n > longest; --n) {
        if (s.substr(s.size() - n) == m.substr(0, n)) {
          longest = n;
          break;
        }
      }
    }
    return longest;
  }

  void feed(const std::string& text, dsv32::ChatOutputDelta& out) {
    if (text.empty()) return;
    if (!parser_ || raw_) {
      out.content += text;
      return;
    }
    if (!throwing_parser_) {
      append(out, parser_->push_text(text));
      return;
    }
    unconfirmed_ += text;
    try {
      dsv32::ChatOutputDelta d = parser_->push_text(text);
      const auto s = parser_->state();
      if (s == dsv32::ChatOutputState::reasoning || s == dsv32::ChatOutputState::content) {
        unconfirmed_.erase(0, unconfirmed_.size() - marker_start_length(unconfirmed_));  // the rest was emitted
      } else if (!d.tool_calls.empty()) {
        unconfirmed_.clear();  // a call completed: everything before it is accounted for
      }
      append(out, std::move(d));
    } catch (const dsv32::Error&) {
      out.content += unconfirmed_;
      unconfirmed_.clear();
      raw_ = true;
    }
  }

  void publish(Piece piece) {
    if (piece.delta.empty() && piece.logprobs.empty() && (chat_ || !piece.token)) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pieces_.push_back(std::move(piece));
    }
    cv_.notify_all();
  }

  std::string token_bytes(std::int32_t id) const {
    const auto token = tok_.id_to_token(id);
    if (!token) return {};
    if (auto bytes = dsv32::bpe::byte_level_decode(*token)) return *bytes;
    return std::string(*token);
  }

  dsv32::Tokenizer tok_;
  bool chat_, throwing_parser_;
  TokenText text_;
  dsv32::openai::StopStrings stops_;
  bool logprobs_;
  std::optional<dsv32::ChatOutputParser> parser_;
  bool raw_ = false;          // the markup broke: the rest is content
  std::string unconfirmed_;   // text the parser took but has not accounted for yet
  std::optional<std::size_t> stop_match_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> pieces_;
};

// ------------------------------------------------------------------ HTTP

bool constant_time_equal(std::string_view given, std::string_view expected) {
  // time depends on the expected key's length only
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) diff |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ expected[i]);
  return diff == 0;
}

std::string random_hex(std::size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(n, '0');
  for (auto& c : s) c = digits[rng() & 15];
  return s;
}

std::uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

std::int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dsv32::openai::dump(e.body()), "application/json");
}

struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
                             {"/health", "GET"}, {"/metrics", "GET"}};

// cpp-httplib 0.11 (Debian's shared library) listens with a backlog of 5 connections, compiled in:
// a burst of clients (the tests' 64) then finds connections reset. Listening again on the bound
// socket raises the backlog (Linux takes a second listen() on a listening socket as an update).
class HttpServer : public httplib::Server {
 public:
  bool raise_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

class Server {
 public:
  Server(const Arguments& a, Backend& backend, dsv32::Tokenizer tok, dsv32::ChatFormat format, std::string model_name)
      : args_(a), backend_(backend), tok_(std::move(tok)), format_(format), model_name_(std::move(model_name)),
        created_(unix_time()) {
    if (const auto bos = tok_.bos_id()) bos_text_ = std::string(tok_.id_to_token(*bos).value_or(""));
    eos_ = tok_.eos_id();
  }

  void install(httplib::Server& http) {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return pre_route(req, res); });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] { chat(req, res); });
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] { completion(req, res); });
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dsv32::openai::dump(Json{{"object", "list"}, {"data", Json::array({model_json()})}}), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != model_name_) {
        send_error(res, not_found_model(req.matches[1]));
        return;
      }
      res.set_content(dsv32::openai::dump(model_json()), "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining_) {
        send_error(res, ApiError(503, "server_error", "the server is shutting down", "", "shutting_down"));
        return;
      }
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.render(backend_.stats()), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413) {
        send_error(res, ApiError(413, "invalid_request_error", "the request body is larger than the server's limit",
                                 "", "request_too_large"));
      } else if (res.status == 404) {
        send_error(res, ApiError(404, "invalid_request_error", "unknown request URL: " + req.method + " " + req.path, "",
                                 "unknown_url"));
      } else {
        send_error(res, ApiError(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                                 "HTTP " + std::to_string(res.status), "", ""));
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "server_error", "internal error: " + what, "", "internal_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics_.count_response(endpoint_label(req.path), res.status);
    });
  }

  // SIGINT/SIGTERM: refuse new work, let in-flight requests finish for `timeout` seconds, then cancel
  // them; returns when none is left.
  void drain(double timeout) {
    draining_ = true;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
    std::unique_lock<std::mutex> lock(inflight_mu_);
    if (!inflight_cv_.wait_until(lock, deadline, [&] { return inflight_ == 0; })) {
      std::cerr << "dsv32-server: " << inflight_ << " request(s) still running after " << timeout << " s: cancelled\n";
      lock.unlock();
      backend_.stop();  // every request in flight ends (cancelled), pages back
      lock.lock();
      inflight_cv_.wait(lock, [&] { return inflight_ == 0; });
    }
  }

  bool draining() const { return draining_; }

 private:
  // One generation in flight: its reply, its handle, what the response needs.
  struct Job {
    std::shared_ptr<Reply> reply;
    dsv32::RequestHandle handle;
    std::int64_t prompt_tokens = 0;
    dsv32::openai::GenerationParams params;
    Clock::time_point arrived;
  };

  // Counts a job in flight for drain(); the handler (or its stream) holds one while it runs.
  class InFlight {
   public:
    explicit InFlight(Server& s) : s_(&s) {
      std::lock_guard<std::mutex> lock(s.inflight_mu_);
      ++s.inflight_;
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() {
      std::lock_guard<std::mutex> lock(s_->inflight_mu_);
      --s_->inflight_;
      s_->inflight_cv_.notify_all();
    }

   private:
    Server* s_;
  };

  static std::string endpoint_label(const std::string& path) {
    for (const Route& r : kRoutes)
      if (path == r.path) return path;
    if (path.starts_with("/v1/models/")) return "/v1/models/{model}";
    return "other";
  }

  Json model_json() const {
    return Json{{"id", model_name_}, {"object", "model"}, {"created", created_}, {"owned_by", "dsv32"},
                {"max_model_len", backend_.max_seq_len()}};
  }

  static ApiError not_found_model(const std::string& name) {
    return ApiError(404, "invalid_request_error", "the model '" + name + "' does not exist", "model", "model_not_found");
  }

  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
    using H = httplib::Server::HandlerResponse;
    const bool v1 = req.path.starts_with("/v1/");
    if (v1 && args_.api_key) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string_view prefix = "Bearer ";
      const bool ok = auth.starts_with(prefix) && constant_time_equal(std::string_view(auth).substr(prefix.size()), *args_.api_key);
      if (!ok) {
        res.set_header("WWW-Authenticate", "Bearer");
        send_error(res, ApiError(401, "invalid_request_error",
                                 auth.empty() ? "missing API key: send \"Authorization: Bearer KEY\""
                                              : "incorrect API key provided",
                                 "", "invalid_api_key"));
        return H::Handled;
      }
    }
    const bool models_item = req.path.starts_with("/v1/models/") && req.path.size() > 11;
    const char* allowed = models_item ? "GET" : nullptr;
    for (const Route& r : kRoutes)
      if (req.path == r.path) allowed = r.method;
    if (allowed == nullptr) {
      send_error(res, ApiError(404, "invalid_request_error", "unknown request URL: " + req.method + " " + req.path, "",
                               "unknown_url"));
      return H::Handled;
    }
    const bool method_ok = req.method == allowed || (req.method == "HEAD" && std::string_view(allowed) == "GET");
    if (!method_ok) {
      res.set_header("Allow", allowed);
      send_error(res, ApiError(405, "invalid_request_error",
                               "method " + req.method + " is not allowed on " + req.path + " (use " + allowed + ")", "",
                               "method_not_allowed"));
      return H::Handled;
    }
    if (draining_ && req.method == "POST") {
      send_error(res, ApiError(503, "server_error", "the server is shutting down", "", "shutting_down"));
      return H::Handled;
    }
    return H::Unhandled;
  }

  template <class F>
  void guarded(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const dsv32::Error& e) {
      send_error(res, dsv32::openai::invalid_request(e.message(), "", "invalid_value"));
    }
  }

  Json parse_body(const httplib::Request& req) const {
    try {
      return Json::parse(req.body);
    } catch (const nlohmann::json::exception& e) {
      throw dsv32::openai::invalid_request(std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
  }

  void check_model(const std::string& name) const {
    if (name != model_name_) throw not_found_model(name);
  }

  // Submits a generation; ApiError for what the context, the queue or the engine refuses.
  Job submit(Tokens prompt, const dsv32::openai::GenerationParams& p, std::shared_ptr<Reply> reply, const char* prompt_param) {
    Job job;
    job.arrived = Clock::now();
    job.reply = std::move(reply);
    job.params = p;
    const auto n = static_cast<std::int64_t>(prompt.size());
    job.prompt_tokens = n;
    const std::int64_t context = std::min(backend_.max_seq_len(), backend_.pool_tokens());
    if (n >= context) {
      throw ApiError(400, "invalid_request_error",
                     "this model's maximum context length is " + std::to_string(context) + " tokens; the prompt holds " +
                         std::to_string(n),
                     prompt_param, "context_length_exceeded");
    }
    const std::int64_t max_new = p.max_tokens.value_or(context - n);
    if (n + max_new > context) {
      throw ApiError(400, "invalid_request_error",
                     "this model's maximum context length is " + std::to_string(context) + " tokens; the request asks for " +
                         std::to_string(n + max_new) + " (" + std::to_string(n) + " in the prompt, " +
                         std::to_string(max_new) + " in the completion)",
                     "max_tokens", "context_length_exceeded");
    }
    dsv32::Request r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    if (eos_) r.stop_ids.push_back(*eos_);
    r.stop_ids.insert(r.stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    r.sampling = p.sampling;
    r.seed = p.seed ? *p.seed : random_seed();
    r.logprobs = p.logprobs;
    r.on_token = [reply = job.reply](const dsv32::TokenEvent& e) { return reply->on_token(e); };
    if (draining_) throw ApiError(503, "server_error", "the server is shutting down", "", "shutting_down");
    try {
      job.handle = backend_.submit(std::move(r));
    } catch (const dsv32::Error& e) {
      if (e.kind() == dsv32::ErrorKind::busy) {
        throw ApiError(429, "rate_limit_error",
                       "the server is busy: " + std::to_string(args_.max_waiting) +
                           " requests are waiting already (--max-waiting); retry later",
                       "", "server_busy");
      }
      if (e.kind() == dsv32::ErrorKind::state) throw ApiError(503, "server_error", "the server is shutting down", "", "shutting_down");
      throw dsv32::openai::invalid_request(e.message(), "", "invalid_value");
    }
    return job;
  }

  // How a finished request ended, for the response.
  struct Ending {
    std::string finish_reason;
    Json stop_reason;
    std::optional<ApiError> error;  // cancelled by shutdown, or the engine failed
  };

  Ending ending(const Job& job, const dsv32::RequestResult& r, bool has_tool_calls) const {
    using F = dsv32::FinishReason;
    Ending e;
    e.stop_reason = nullptr;
    switch (r.finish) {
      case F::eos:
        if (r.stop_token && (!eos_ || *r.stop_token != *eos_)) e.stop_reason = *r.stop_token;
        e.finish_reason = dsv32::openai::chat_finish_reason(true, false, has_tool_calls);
        break;
      case F::stopped:
        if (const auto m = job.reply->stop_match()) e.stop_reason = job.params.stop[*m];
        e.finish_reason = dsv32::openai::chat_finish_reason(true, false, has_tool_calls);
        break;
      case F::max_new_tokens:
      case F::max_seq_len: e.finish_reason = "length"; break;
      case F::cancelled:
        e.error = ApiError(503, "server_error", "the server is shutting down: the request was cancelled", "", "shutting_down");
        break;
      case F::error: e.error = ApiError(500, "server_error", "generation failed: " + r.message, "", "internal_error"); break;
    }
    return e;
  }

  void record(const Job& job, const dsv32::RequestResult& r) {
    if (r.finish == dsv32::FinishReason::cancelled) return;
    metrics_.record_generation(job.prompt_tokens, static_cast<std::int64_t>(r.tokens.size()), r.stats.ttft_s, r.stats.tpot_s,
                               std::chrono::duration<double>(Clock::now() - job.arrived).count());
  }

  static dsv32::openai::Usage usage(const Job& job, const dsv32::RequestResult& r) {
    return {job.prompt_tokens, static_cast<std::int64_t>(r.tokens.size()), r.stats.cached_tokens};
  }

  // ---------------------------------------------------------------- chat

  void chat(const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req);
    dsv32::openai::ChatRequest cr = dsv32::openai::parse_chat_request(body, backend_.vocab_size());
    check_model(cr.model);
    const std::string prompt = dsv32::openai::render_chat_prompt(cr, format_, bos_text_);
    Tokens ids = tok_.encode(prompt);
    auto reply = std::make_shared<Reply>(tok_, true, format_, dsv32::ChatOutputParser::start_state(prompt), cr.params.stop,
                                         cr.params.logprobs >= 0);
    auto inflight = std::make_shared<InFlight>(*this);
    auto job = std::make_shared<Job>(submit(std::move(ids), cr.params, reply, "messages"));
    auto builder = std::make_shared<dsv32::openai::ChatCompletionBuilder>("chatcmpl-" + random_hex(24), unix_time(),
                                                                          model_name_, cr.params.logprobs >= 0,
                                                                          cr.params.tokens_as_ids);
    if (!cr.params.stream) {
      const dsv32::RequestResult& r = job->handle.wait();
      job->reply->finish();
      for (Piece& p : job->reply->take(std::chrono::milliseconds(0))) builder->add(p.delta, p.logprobs);
      record(*job, r);
      const Ending e = ending(*job, r, builder->has_tool_calls());
      if (e.error) throw *e.error;
      res.set_content(dsv32::openai::dump(builder->response(e.finish_reason, e.stop_reason, usage(*job, r))), "application/json");
      return;
    }
    stream(res, job, inflight, [builder](const Piece& p) { return builder->add(p.delta, p.logprobs); },
           [this, builder, job](const dsv32::RequestResult& r, std::string& out) {
             const Ending e = ending(*job, r, builder->has_tool_calls());
             if (e.error) return std::optional<ApiError>(*e.error);
             out += builder->finish_chunk(e.finish_reason, e.stop_reason);
             if (job->params.include_usage) out += builder->usage_chunk(usage(*job, r));
             return std::optional<ApiError>();
           },
           builder->role_chunk());
  }

  // ---------------------------------------------------------------- completions

  void completion(const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req);
    dsv32::openai::CompletionRequest cr = dsv32::openai::parse_completion_request(body, backend_.vocab_size());
    check_model(cr.model);
    Tokens ids = cr.prompt_text ? tok_.encode(*cr.prompt_text, /*add_special_tokens=*/true) : cr.prompt_ids;
    auto reply = std::make_shared<Reply>(tok_, false, format_, dsv32::ChatOutputState::content, cr.params.stop,
                                         cr.params.logprobs >= 0);
    auto inflight = std::make_shared<InFlight>(*this);
    auto job = std::make_shared<Job>(submit(std::move(ids), cr.params, reply, "prompt"));
    auto builder = std::make_shared<dsv32::openai::CompletionBuilder>("cmpl-" + random_hex(24), unix_time(), model_name_,
                                                                      cr.params.logprobs >= 0, cr.params.tokens_as_ids);
    if (!cr.params.stream) {
      const dsv32::RequestResult& r = job->handle.wait();
      job->reply->finish();
      for (Piece& p : job->reply->take(std::chrono::milliseconds(0))) builder->add(p.delta.content, p.logprobs);
      record(*job, r);
      const Ending e = ending(*job, r, false);
      if (e.error) throw *e.error;
      res.set_content(dsv32::openai::dump(builder->response(e.finish_reason, e.stop_reason, usage(*job, r))), "application/json");
      return;
    }
    stream(res, job, inflight, [builder](const Piece& p) { return builder->add(p.delta.content, p.logprobs); },
           [this, builder, job](const dsv32::RequestResult& r, std::string& out) {
             const Ending e = ending(*job, r, false);
             if (e.error) return std::optional<ApiError>(*e.error);
             out += builder->finish_chunk(e.finish_reason, e.stop_reason);
             if (job->params.include_usage) out += builder->usage_chunk(usage(*job, r));
             return std::optional<ApiError>();
           },
           "");
  }

  // ---------------------------------------------------------------- streams

  // A stream of server-sent events: `first`, a chunk per piece as the engine produces them, the end
  // (`finish` writes the last chunks, or returns the error to send as an event), `data: [DONE]`. A
  // write that fails means the client went away: the request is cancelled (its pages go back).
  template <class Chunk, class Finish>
  void stream(httplib::Response& res, std::shared_ptr<Job> job, std::shared_ptr<InFlight> inflight, Chunk chunk,
              Finish finish, std::string first) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, inflight, chunk, finish, first](std::size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
          auto gone = [&] {
            backend_.cancel(job->handle);
            metrics_.count_disconnect();
            return false;
          };
          if (!write(first)) return gone();
          auto last_write = Clock::now();
          for (;;) {
            const bool done = job->handle.done();  // every callback has run once this holds
            for (const Piece& p : job->reply->take(done ? std::chrono::milliseconds(0) : std::chrono::milliseconds(20))) {
              const std::string c = chunk(p);
              if (c.empty()) continue;
              if (!write(c)) return gone();
              last_write = Clock::now();
            }
            if (done) break;
            if (Clock::now() - last_write > std::chrono::seconds(2)) {  // a comment: finds a client that left while queued
              if (!write(": keep-alive\n\n")) return gone();
              last_write = Clock::now();
            }
          }
          const dsv32::RequestResult& r = job->handle.wait();
          job->reply->finish();
          std::string out;
          for (const Piece& p : job->reply->take(std::chrono::milliseconds(0))) out += chunk(p);
          record(*job, r);
          if (const std::optional<ApiError> error = finish(r, out)) {
            out += dsv32::openai::sse_event(error->body());
          }
          out += dsv32::openai::sse_done;
          if (!write(out)) return false;
          sink.done();
          return true;
        },
        [this, job](bool success) {  // the stream did not end normally (its headers never went out, say)
          if (!success) backend_.cancel(job->handle);
        });
  }

  const Arguments& args_;
  Backend& backend_;
  dsv32::Tokenizer tok_;
  dsv32::ChatFormat format_;
  std::string model_name_;
  std::int64_t created_;
  std::string bos_text_;
  std::optional<std::int32_t> eos_;
  dsv32::ServerMetrics metrics_;
  std::atomic<bool> draining_{false};
  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;
  std::int64_t inflight_ = 0;
};

// ------------------------------------------------------------------ benchmark

struct Run {
  std::vector<double> ttft, tpot;
  std::int64_t tokens = 0, requests = 0, errors = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // the whole process's CPU time: engine, server and (HTTP path) client threads
  std::int64_t steps = 0;  // the engine's forward passes
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

Tokens bench_prompt(std::int64_t n, std::int64_t vocab, std::uint64_t salt) {
  Tokens t(static_cast<std::size_t>(n));
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (salt + 1);
  for (auto& v : t) {
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    v = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(vocab));
  }
  return t;
}

// `clients` threads, each sending requests until `requests` were sent; `one(i)` runs request i and
// adds its times to the run.
template <class One>
Run closed_loop(std::int64_t clients, std::int64_t requests, One one) {
  Run run;
  std::mutex mu;
  std::atomic<std::int64_t> next{0};
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  std::vector<std::thread> threads;
  for (std::int64_t c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      for (std::int64_t i; (i = next++) < requests;) one(i, run, mu);
    });
  for (auto& t : threads) t.join();
  run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  run.cpu_seconds = process_cpu_seconds() - cpu0;
  run.requests = requests;
  return run;
}

void add_times(Run& run, std::mutex& mu, Clock::time_point sent, const std::vector<Clock::time_point>& token_times) {
  std::lock_guard<std::mutex> lock(mu);
  run.tokens += static_cast<std::int64_t>(token_times.size());
  if (token_times.empty()) {
    ++run.errors;
    return;
  }
  run.ttft.push_back(std::chrono::duration<double>(token_times.front() - sent).count());
  if (token_times.size() > 1)
    run.tpot.push_back(std::chrono::duration<double>(token_times.back() - token_times.front()).count() /
                       static_cast<double>(token_times.size() - 1));
}

// The engine driven directly: the same requests as the HTTP run, tokens timed in the callback.
Run bench_engine(Backend& backend, const Arguments& a, std::int64_t clients, std::int64_t requests, std::uint64_t salt) {
  return closed_loop(clients, requests, [&](std::int64_t i, Run& run, std::mutex& mu) {
    dsv32::Request r;
    r.prompt = bench_prompt(a.bench_prompt, backend.vocab_size(), salt + static_cast<std::uint64_t>(i));
    r.max_new_tokens = a.bench_output;
    r.sampling.temperature = 0;
    std::vector<Clock::time_point> times;
    r.on_token = [&](const dsv32::TokenEvent&) {
      times.push_back(Clock::now());
      return true;
    };
    const auto sent = Clock::now();
    backend.submit(std::move(r)).wait();
    add_times(run, mu, sent, times);
  });
}

// Through HTTP: streamed /v1/completions with the prompt as ids, one SSE chunk per token.
Run bench_http(const Arguments& a, int port, const std::string& model, std::int64_t vocab, std::int64_t clients,
               std::int64_t requests, std::uint64_t salt) {
  return closed_loop(clients, requests, [&](std::int64_t i, Run& run, std::mutex& mu) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(3600, 0);
    cli.set_tcp_nodelay(true);  // the request in one segment, not held back for an ACK
    const Json body{{"model", model},
                    {"prompt", bench_prompt(a.bench_prompt, vocab, salt + static_cast<std::uint64_t>(i))},
                    {"max_tokens", a.bench_output},
                    {"temperature", 0},
                    {"stream", true}};
    std::vector<Clock::time_point> times;
    std::string pending;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.headers = {{"Content-Type", "application/json"}};
    if (a.api_key) req.headers.emplace("Authorization", "Bearer " + *a.api_key);
    req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      const auto now = Clock::now();
      pending.append(data, n);
      for (std::size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        const std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (!event.starts_with("data: {")) continue;
        const Json j = Json::parse(event.substr(6));
        if (!j["choices"].empty() && j["choices"][0]["finish_reason"].is_null()) times.push_back(now);
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const auto sent = Clock::now();
    if (!cli.send(req, res, err) || res.status != 200) times.clear();
    add_times(run, mu, sent, times);
  });
}

// Two runs as one: their requests, tokens and times together.
void merge(Run& into, const Run& r) {
  into.ttft.insert(into.ttft.end(), r.ttft.begin(), r.ttft.end());
  into.tpot.insert(into.tpot.end(), r.tpot.begin(), r.tpot.end());
  into.tokens += r.tokens;
  into.requests += r.requests;
  into.errors += r.errors;
  into.seconds += r.seconds;
  into.cpu_seconds += r.cpu_seconds;
  into.steps += r.steps;
}

void print_run(std::int64_t c, const char* path, const Run& r) {
  std::printf("%11lld  %-6s  %8lld  %6lld  %12.2f  %8.3f  %8.3f  %8.3f  %8.4f  %8.4f  %12.2f  %5lld\n", static_cast<long long>(c),
              path, static_cast<long long>(r.requests), static_cast<long long>(r.errors),
              static_cast<double>(r.tokens) / r.seconds, static_cast<double>(r.requests) / r.seconds,
              percentile(r.ttft, 0.5), percentile(r.ttft, 0.99), percentile(r.tpot, 0.5), percentile(r.tpot, 0.99),
              1e3 * r.cpu_seconds / static_cast<double>(std::max<std::int64_t>(r.tokens, 1)), static_cast<long long>(r.steps));
  std::fflush(stdout);
}

int run_bench(const Arguments& a, Backend& backend, int port, const std::string& model) {
  std::printf("bench: prompt %lld tokens, %lld completion tokens per request, greedy; the engine driven directly and "
              "streamed /v1/completions on loopback, %lld round(s) in ABBA order\n",
              static_cast<long long>(a.bench_prompt), static_cast<long long>(a.bench_output),
              static_cast<long long>(a.bench_rounds));
  std::printf("concurrency  path    requests  errors  output tok/s     req/s  TTFT p50  TTFT p99  TPOT p50  TPOT p99  "
              "CPU ms/token  steps\n");
  // warm-up: one short request each way
  bench_engine(backend, a, 1, 1, 1u << 30);
  bench_http(a, port, model, backend.vocab_size(), 1, 1, 1u << 31);
  std::uint64_t salt = 0;  // every request its own prompt: no prefix-cache hit on either path
  for (const std::int64_t c : a.bench) {
    const std::int64_t n = a.bench_requests > 0 ? a.bench_requests : std::max<std::int64_t>(c, 4);
    Run direct, http;
    for (std::int64_t round = 0; round < a.bench_rounds; ++round) {
      for (const bool engine_path : {round % 2 == 0, round % 2 != 0}) {  // ABBA
        const std::int64_t steps = backend.stats().steps;
        Run r = engine_path ? bench_engine(backend, a, c, n, salt) : bench_http(a, port, model, backend.vocab_size(), c, n, salt);
        r.steps = backend.stats().steps - steps;
        merge(engine_path ? direct : http, r);
        salt += static_cast<std::uint64_t>(n);
      }
    }
    print_run(c, "engine", direct);
    print_run(c, "http", http);
    const double overhead = 1.0 - (static_cast<double>(http.tokens) / http.seconds) / (static_cast<double>(direct.tokens) / direct.seconds);
    const double cpu_overhead = (http.cpu_seconds / static_cast<double>(std::max<std::int64_t>(http.tokens, 1))) /
                                    (direct.cpu_seconds / static_cast<double>(std::max<std::int64_t>(direct.tokens, 1))) - 1.0;
    std::printf("%11lld  overhead of HTTP + JSON + streaming: %.1f%% of the engine's output tokens/s; %.1f%% more CPU time "
                "per token (client included)\n",
                static_cast<long long>(c), 100.0 * overhead, 100.0 * cpu_overhead);
    std::fflush(stdout);
  }
  return 0;
}

// ------------------------------------------------------------------ main

fs::path tokenizer_dir(const Arguments& a) {
  if (a.tokenizer) return *a.tokenizer;
  if (a.model && dsv32::detail::path_is_regular_file(*a.model / "tokenizer.json")) return *a.model;
#if defined(DSV32_SERVER_DEFAULT_TOKENIZER)
  return DSV32_SERVER_DEFAULT_TOKENIZER;
#else
  throw dsv32::Error(dsv32::ErrorKind::invalid_argument, "no tokenizer: give --tokenizer DIR");
#endif
}

int serve(const Arguments& a, const sigset_t& signals) {
  const fs::path dir = tokenizer_dir(a);
  // Each thread that encodes keeps its own BPE word cache, and every HTTP thread encodes prompts:
  // 4096 entries (256 KiB) each rather than the default 1 MiB keep that memory small.
  dsv32::TokenizerOptions tokenizer_options;
  tokenizer_options.cache_capacity = 4096;
  const dsv32::Tokenizer tok = dsv32::Tokenizer::from_directory(dir, tokenizer_options);
  const dsv32::ChatFormat format = a.chat_format.value_or(tok.chat_format().value_or(dsv32::ChatFormat::deepseek_v3_2_exp));
  std::optional<Script> script;
  if (a.scripted_output) script = Script::load(*a.scripted_output, tok);
  std::unique_ptr<Backend> backend = make_backend(a, script ? &*script : nullptr);
  std::string name = a.served_model_name.value_or(a.random_weights.value_or("dsv32-demo"));
  if (a.model && !a.served_model_name) {
    fs::path p = fs::absolute(*a.model).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    name = p.filename().string();
  }
  std::cerr << "dsv32-server: " << backend->describe() << "\n";
  std::cerr << "dsv32-server: serving '" << name << "', tokenizer " << dir.string() << " (" << dsv32::to_string(format)
            << " chat format)" << (a.api_key ? ", API key required" : "") << "\n";
  if (static_cast<std::int64_t>(tok.vocab_size()) > backend->vocab_size())
    std::cerr << "dsv32-server: warning: the tokenizer has " << tok.vocab_size() << " ids, the model "
              << backend->vocab_size() << ": text whose ids fall outside the model's vocabulary is refused (400)\n";

  Server server(a, *backend, tok, format, name);
  HttpServer http;
  const std::int64_t threads = a.http_threads > 0 ? a.http_threads : a.max_running + a.max_waiting + 16;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  http.set_payload_max_length(a.max_body_bytes);
  http.set_keep_alive_timeout(10);  // longer than clients keep idle connections (httpx: 5 s), so they close first
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_tcp_nodelay(true);
  server.install(http);
  int port = a.port;
  if (a.port == 0) {
    port = http.bind_to_any_port(a.host);
  } else if (!http.bind_to_port(a.host, a.port)) {
    port = -1;
  }
  if (port <= 0) throw dsv32::Error(dsv32::ErrorKind::io, "cannot listen on " + a.host + ":" + std::to_string(a.port));
  if (!http.raise_backlog(1024)) std::cerr << "dsv32-server: warning: the listen backlog stays at cpp-httplib's 5\n";
  std::mutex listen_mu;
  std::condition_variable listen_cv;
  bool listened = false;
  std::thread listener([&] {
    http.listen_after_bind();
    std::lock_guard<std::mutex> lock(listen_mu);
    listened = true;
    listen_cv.notify_all();
  });
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  if (!a.bench.empty()) {
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);  // a benchmark stops at Ctrl-C, as any program does
    const int status = run_bench(a, *backend, port, name);
    http.stop();
    listener.join();
    backend->stop();
    return status;
  }
  std::printf("listening on http://%s:%d\n", a.host.c_str(), port);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "dsv32-server: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": finishing the requests in flight (at most "
            << a.shutdown_timeout << " s)\n";
  server.drain(a.shutdown_timeout);
  http.stop();
  backend->stop();
  std::cerr << "dsv32-server: stopped\n";
  // The listener returns once its connections end; those idle between requests wait out the
  // keep-alive timeout, with nothing left to answer: the process does not wait for them.
  std::unique_lock<std::mutex> lock(listen_mu);
  if (!listen_cv.wait_for(lock, std::chrono::seconds(1), [&] { return listened; })) {
    std::fflush(nullptr);
    std::_Exit(0);
  }
  lock.unlock();
  listener.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse_arguments(argc, argv);
  // SIGINT and SIGTERM are taken by sigwait() (blocked in every thread, which inherit the mask);
  // a client gone mid-write must not kill the process.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return serve(args, signals);
  } catch (const std::exception& e) {
    std::cerr << "dsv32-server: " << e.what() << '\n';
    return 1;
  }
}
