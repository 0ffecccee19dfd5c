/// \file
/// \brief Engine: continuous batching over a paged latent cache with prefix reuse — requests submitted
///        from any thread, admitted while others decode, chunked prefill mixed with decode steps,
///        preemption when pages run out, and results that do not depend on the batch.
///
/// \code
/// dsv32::Transformer<dsv32::TinyBf16> model(options);
/// model.init_random(1);
/// dsv32::EngineOptions eo;
/// eo.cache_bytes = std::size_t{1} << 30;          // the page pool: 1 GiB of cache pages
/// dsv32::Engine engine(model, eo);
/// engine.start();                                  // its loop on its own thread
/// dsv32::Request r;
/// r.prompt = {0, 3476, 477, 260};
/// r.max_new_tokens = 32;
/// r.on_token = [](const dsv32::TokenEvent& e) { std::printf("%d ", e.token); return true; };
/// dsv32::RequestHandle h = engine.submit(std::move(r));
/// const dsv32::RequestResult& result = h.wait();
/// \endcode
///
/// Each step the scheduler gives every running sequence its next tokens — one for a sequence that
/// decodes, the next chunk of the prompt for one that prefills — in admission order, then admits
/// waiting requests first come first served while the step's token budget and the running limit
/// allow (vLLM's and Sarathi's chunked prefill). A request admitted first shares the longest prefix
/// of full pages the pool has cached (PagePool). When a sequence needs a page and none is left, the
/// most recently admitted sequence is preempted: its pages go back (its full ones stay cached) and it
/// waits at the head of the queue to be recomputed. The step is one ragged forward pass
/// (Transformer::forward with SequenceSlice) over the pool's KvCache in the latent (decode) arithmetic
/// for every token, so a token's logits do not depend on the chunking of its prompt, on which other
/// sequences share the step, nor on whether its prefix came from the cache; with the CPU backend's
/// exact FP8 products (the default) and bf16 models they are bit-identical to the request run alone
/// (docs/serving.md, "Batch invariance").
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "dsv32/core/error.hpp"
#include "dsv32/generate/generate.hpp"
#include "dsv32/generate/sampling.hpp"
#include "dsv32/layers/kv_cache.hpp"
#include "dsv32/layers/transformer.hpp"
#include "dsv32/serving/page_pool.hpp"

namespace dsv32 {

/// \addtogroup serving
/// @{

/// \brief What an Engine needs of a model: Transformer<Config, Backend> models it, and so does a
///        wrapper with the same members (e.g. one whose logits follow a script, for tests).
/// \tparam M the model type
template <class M>
concept ServingModel = requires(M& m, std::span<const SequenceSlice> s, KvCache<typename M::backend_type>& cache,
                                const ForwardOptions& o, const ForwardLimits& l) {
  { M::config_type::vocab_size } -> std::convertible_to<std::int64_t>;
  { m.options() } -> std::convertible_to<const RuntimeOptions&>;
  { m.parallel() } -> std::convertible_to<const Parallel&>;
  m.reserve(l);
  { m.forward(s, cache, o) } -> std::same_as<Logits>;
};

/// \brief Limits of an Engine.
struct EngineOptions {
  /// The page pool's budget in backend bytes (plan_page_pool()); 0: cache_pages gives the pool.
  std::size_t cache_bytes = 0;
  /// The page pool in pages, when cache_bytes is 0 (one of the two must be set).
  std::int64_t cache_pages = 0;
  std::int64_t page_size = kDefaultPageSize;  ///< positions per page (64: FlashMLA's block size)
  std::int64_t max_running = 16;   ///< sequences per step (decoding and prefilling together)
  std::int64_t step_tokens = 512;  ///< tokens per step: one per decoding sequence plus prefill chunks
  bool prefix_caching = true;      ///< share full pages of equal prefixes between requests
  /// Requests waiting to be admitted before submit() refuses more (Error(busy)); 0: no limit.
  std::int64_t max_waiting = 0;

  /// \brief Throws Error(invalid_argument) naming the first option out of range.
  void validate() const {
    DSV32_CHECK(cache_bytes > 0 || cache_pages > 0, invalid_argument,
                "EngineOptions: give the page pool a budget (cache_bytes) or a size (cache_pages)");
    DSV32_CHECK(cache_pages >= 0, invalid_argument, "EngineOptions: cache_pages must be >= 0, got ", cache_pages);
    DSV32_CHECK(page_size >= 1 && page_size <= (std::int64_t{1} << 20), invalid_argument,
                "EngineOptions: page_size must be in [1, 2^20], got ", page_size);
    DSV32_CHECK(max_running >= 1 && max_running <= RuntimeOptions::kMaxBatchSize, invalid_argument,
                "EngineOptions: max_running must be in [1, ", RuntimeOptions::kMaxBatchSize, "], got ", max_running);
    DSV32_CHECK(step_tokens >= max_running && step_tokens <= (std::int64_t{1} << 24), invalid_argument,
                "EngineOptions: step_tokens must be in [max_running = ", max_running,
                ", 2^24] (every running sequence gets a token each step), got ", step_tokens);
    DSV32_CHECK(max_waiting >= 0, invalid_argument, "EngineOptions: max_waiting must be >= 0 (0: no limit), got ",
                max_waiting);
  }
};

/// \brief A token's log-probability.
struct TokenLogprob {
  std::int32_t token = 0;  ///< the token id
  float logprob = 0.0f;    ///< log softmax of the raw logits (before temperature, top-k and top-p), f32
};

/// \brief One completion token, as the streaming callback receives it.
struct TokenEvent {
  std::int32_t token = 0;   ///< the token id
  std::int64_t index = 0;   ///< its place in the completion (0: the first)
  float logprob = 0.0f;     ///< its log-probability (Request::logprobs >= 0, else 0)
  std::vector<TokenLogprob> top;  ///< the Request::logprobs most likely tokens, most likely first
};

/// \brief Receives each completion token of one request on the engine's thread, in order. Returning
///        false ends the request (FinishReason::stopped) after this token; throwing ends it with
///        FinishReason::error. Either way the other requests go on.
using StreamCallback = std::function<bool(const TokenEvent&)>;

/// \brief A request: the prompt, how long and how to continue it, where to stream it.
struct Request {
  std::vector<std::int32_t> prompt;   ///< token ids (at least one)
  std::int64_t max_new_tokens = 256;  ///< most completion tokens (>= 0; prompt + this <= max_seq_len)
  std::vector<std::int32_t> stop_ids; ///< tokens that end the completion (not included in it)
  SamplingOptions sampling;           ///< temperature (0: greedy), top-k, top-p
  std::uint64_t seed = 0;             ///< the request's own random stream: SamplingRng(seed, 0)
  /// Log-probabilities: -1 none; 0 the chosen token's; n > 0 also the n most likely (at most 20).
  std::int64_t logprobs = -1;
  bool keep_logits = false;  ///< keep the logits of the last token chosen (RequestResult::last_logits)
  /// Positions below this take the reference's prefill arithmetic (SequenceSlice::expanded_end), the
  /// later ones (the rest of the prompt, the completion) its decode arithmetic; -1: the whole prompt.
  /// Above the model's absorbed_prefill_from every position takes the decode arithmetic, as
  /// Transformer::forward() does for long prompts. The reference's generate() prefills its batch up to
  /// the shortest prompt: that length here replays it exactly.
  std::int64_t prefill_positions = -1;
  StreamCallback on_token;   ///< streams completion tokens (may be empty)
};

/// \brief Figures of one request (seconds on the steady clock).
struct RequestStats {
  std::int64_t prompt_tokens = 0;     ///< prompt length
  std::int64_t cached_tokens = 0;     ///< prompt positions taken from the prefix cache at its first admission
  std::int64_t generated_tokens = 0;  ///< completion tokens
  std::int64_t preemptions = 0;       ///< times it was preempted (and recomputed)
  double queue_s = 0;   ///< submit to first admission
  double ttft_s = 0;    ///< submit to its first completion token (0 if none)
  double tpot_s = 0;    ///< mean time between completion tokens after the first (0 with fewer than two)
  double total_s = 0;   ///< submit to finish
};

/// \brief What a request produced.
struct RequestResult {
  std::vector<std::int32_t> tokens;            ///< the completion (a stop id that ended it excluded)
  FinishReason finish = FinishReason::cancelled;  ///< why it ended
  std::optional<std::int32_t> stop_token;      ///< the stop id that ended it (FinishReason::eos)
  std::string message;                         ///< why, for FinishReason::error (and stopped by a throw)
  std::vector<TokenEvent> logprobs;            ///< per completion token, with Request::logprobs >= 0
  std::vector<float> last_logits;              ///< the last chosen token's logits, with Request::keep_logits
  RequestStats stats;                          ///< its figures
};

namespace detail {
// The part of a request its handle and the engine share.
struct RequestState {
  std::uint64_t id = 0;
  const void* owner = nullptr;  // the engine that accepted it
  std::atomic<bool> cancel{false};
  std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool done = false;
  bool admitted = false;  // live.queue_s is set
  RequestStats live;      // the figures so far, while it runs
  RequestResult result;
};
}  // namespace detail

/// \brief A submitted request: wait for its result, ask whether it is done, cancel it through its
///        engine. Copies share the request. A default handle refers to none.
class RequestHandle {
 public:
  RequestHandle() = default;
  /// \brief Whether it refers to a request.
  bool valid() const noexcept { return state_ != nullptr; }
  /// \brief The request's id (unique per engine, from 1).
  /// \throws Error(state) for a default handle
  std::uint64_t id() const { return state().id; }
  /// \brief Whether the request has finished.
  bool done() const {
    const auto& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.done;
  }
  /// \brief The request's figures now (any thread): while it waits or runs, those so far (queue time
  ///        so far until admitted, completion tokens, time to the first token, time per token, total);
  ///        once done, its result's.
  RequestStats stats() const {
    const auto& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.done) return s.result.stats;
    RequestStats r = s.live;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.submitted).count();
    r.total_s = elapsed;
    if (!s.admitted) r.queue_s = elapsed;
    return r;
  }
  /// \brief Waits until the request finishes; its result (valid as long as a handle to it exists).
  const RequestResult& wait() const {
    const auto& s = state();
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return s.done; });
    return s.result;
  }
  /// \brief Waits at most `timeout`; whether the request finished.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    const auto& s = state();
    std::unique_lock<std::mutex> lock(s.mu);
    return s.cv.wait_for(lock, timeout, [&] { return s.done; });
  }

 private:
  template <ServingModel M>
  friend class Engine;
  explicit RequestHandle(std::shared_ptr<detail::RequestState> s) : state_(std::move(s)) {}
  const detail::RequestState& state() const {
    DSV32_CHECK(state_ != nullptr, state, "RequestHandle: a default handle refers to no request");
    return *state_;
  }
  std::shared_ptr<detail::RequestState> state_;
};

/// \brief Engine figures, read at any time (Engine::stats()).
struct EngineStats {
  std::int64_t running = 0;          ///< sequences admitted (decoding or prefilling)
  std::int64_t waiting = 0;          ///< requests submitted and not admitted (preempted ones included)
  std::int64_t pages = 0;            ///< pages in the pool
  std::int64_t page_size = 0;        ///< positions per page
  std::int64_t pages_used = 0;       ///< pages held by sequences
  std::int64_t pages_cached = 0;     ///< released full pages kept for prefix reuse
  std::int64_t pages_free = 0;       ///< the others
  std::int64_t steps = 0;            ///< forward passes run
  std::int64_t submitted = 0;        ///< requests accepted by submit()
  std::int64_t finished = 0;         ///< requests finished, for any reason
  std::int64_t finished_by[6] = {};  ///< requests finished, by FinishReason (its value as index)
  std::int64_t preemptions = 0;      ///< sequences preempted
  std::int64_t prompt_tokens = 0;    ///< prompt positions of admitted requests (first admissions)
  std::int64_t prefix_hit_tokens = 0;  ///< of those, taken from the prefix cache
  std::int64_t computed_tokens = 0;  ///< positions run through the model (recomputations included)
  std::int64_t generated_tokens = 0; ///< completion tokens produced

  /// \brief prefix_hit_tokens / prompt_tokens (0 before any admission).
  double prefix_hit_rate() const noexcept {
    return prompt_tokens > 0 ? static_cast<double>(prefix_hit_tokens) / static_cast<double>(prompt_tokens) : 0.0;
  }
};

/// \brief Continuous batching over a paged cache for one model (see the file description).
///
/// submit(), cancel() and stats() may be called from any thread. The engine runs on its own thread
/// (start(), stop()) or is stepped by its caller (step(), run_until_idle()) — not both at once. Streaming
/// callbacks run on the thread that steps. The model must outlive the engine and is used by no one
/// else meanwhile; the engine frees the model's own rectangular caches (Transformer::release_caches())
/// and reserves its scratch for the engine's steps.
///
/// With model parallelism (the model's world size > 1) rank 0 runs the engine and every other rank
/// calls follow(): rank 0 sends each step's plan — sequences, tokens, positions, block tables — over
/// the model's communicator and every rank runs the same pass on its own pool.
/// \tparam Model a ServingModel, e.g. Transformer<Config, Backend>
template <ServingModel Model>
class Engine {
 public:
  using backend_type = typename Model::backend_type;  ///< the model's backend
  using config_type = typename Model::config_type;    ///< the model's config

  /// \brief An engine over `model` (weights loaded) with a page pool of options.cache_bytes or
  ///        options.cache_pages.
  /// \throws Error(invalid_argument) for options out of range, or a budget below one page;
  ///         Error(state) when the model's weights are not loaded; what allocating the pool throws
  Engine(Model& model, const EngineOptions& options)
      : model_(model), options_((options.validate(), options)), rank_(model.parallel().rank),
        world_(model.parallel().world_size) {
    if constexpr (requires { model.ready(); })
      DSV32_CHECK(model.ready(), state, "Engine: the model's weights are not loaded");
    const ModelArgs args = ModelArgs::of<config_type>();
    plan_ = options_.cache_bytes > 0 ? plan_page_pool(args, options_.cache_bytes, options_.page_size)
                                     : PagePoolPlan{options_.page_size, options_.cache_pages,
                                                    options_.cache_pages * options_.page_size,
                                                    cache_bytes_per_page(args, options_.page_size),
                                                    cache_bytes_per_page(args, options_.page_size) *
                                                        static_cast<std::size_t>(options_.cache_pages)};
    DSV32_CHECK(plan_.pages >= 1, invalid_argument, "Engine: a cache budget of ", options_.cache_bytes,
                " bytes holds no page of ", options_.page_size, " positions (", plan_.bytes_per_page, " bytes each)");
    if constexpr (requires { model.release_caches(); }) model.release_caches();
    ForwardLimits l = ForwardLimits::of(model.options(), world_);
    l.batch = options_.max_running;
    l.seq = options_.step_tokens;
    l.max_tokens = options_.step_tokens;
    l.page_size = options_.page_size;
    model.reserve(l);
    if (world_ > 1) {  // every rank's pool must hold the pages rank 0 hands out
      const std::string shape = detail::concat(plan_.pages, ' ', plan_.page_size, ' ', options_.max_running, ' ',
                                               options_.step_tokens);
      check_same_on_all_ranks(model.parallel().comm, shape, "the engine's pool and step limits (EngineOptions)");
    }
    cache_ = KvCache<backend_type>(args, plan_.pages, plan_.page_size);
    pool_ = std::make_unique<PagePool>(plan_.pages, plan_.page_size, options_.prefix_caching);
    publish_stats();
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  /// \brief Stops the engine (stop()).
  ~Engine() {
    try {
      stop();
    } catch (...) {  // a destructor must not throw; stop() only throws for a broken communicator
    }
  }

  /// \brief The options, as validated.
  const EngineOptions& options() const noexcept { return options_; }
  /// \brief The page pool: pages, positions and bytes.
  const PagePoolPlan& pool() const noexcept { return plan_; }

  /// \brief Queues a request (any thread); its tokens stream through its callback as the engine
  ///        steps. A request with max_new_tokens 0 finishes at once with no tokens.
  /// \throws Error(invalid_argument) for an empty prompt, a token id (prompt or stop id) outside the
  ///         vocabulary, max_new_tokens < 0, prompt + max_new_tokens above max_seq_len or above the
  ///         pool, sampling options out of range, logprobs outside [-1, 20]; Error(busy) when
  ///         max_waiting requests wait already; Error(state) once the engine has stopped or on a
  ///         rank other than 0
  RequestHandle submit(Request request) {
    validate(request);
    auto state = std::make_shared<detail::RequestState>();
    state->owner = this;
    state->result.stats.prompt_tokens = static_cast<std::int64_t>(request.prompt.size());
    auto seq = std::make_unique<Sequence>(std::move(request), state);
    const auto prompt = static_cast<std::int64_t>(seq->req.prompt.size());
    const std::int64_t k = seq->req.prefill_positions < 0 ? prompt : std::min(seq->req.prefill_positions, prompt);
    seq->expanded_end = k <= model_.options().absorbed_prefill_from ? k : 0;
    std::unique_lock<std::mutex> lock(mu_);
    DSV32_CHECK(!stopped_, state, "Engine::submit: the engine has stopped");
    DSV32_CHECK(options_.max_waiting == 0 || waiting_count_ + static_cast<std::int64_t>(incoming_.size()) < options_.max_waiting,
                busy, "Engine::submit: ", options_.max_waiting, " requests wait already (EngineOptions::max_waiting)");
    state->id = ++next_id_;
    ++submitted_;
    incoming_.push_back(std::move(seq));
    wake_ = true;
    cv_.notify_all();
    return RequestHandle(state);
  }

  /// \brief Cancels a request (any thread): it ends with FinishReason::cancelled at the next step,
  ///        its pages back in the pool. Harmless for a finished request, a default handle or one of
  ///        another engine.
  void cancel(const RequestHandle& h) noexcept {
    if (!h.state_ || h.state_->owner != this) return;
    h.state_->cancel.store(true, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
    cv_.notify_all();
  }

  /// \brief Runs the engine's loop on its own thread until stop(). That thread runs the model with
  ///        the OpenMP thread count of the thread calling start() (cpu::set_num_threads() before it).
  /// \throws Error(state) when it runs already or has stopped, or on a rank other than 0
  void start() {
    DSV32_CHECK(rank_ == 0, state, "Engine::start: rank ", rank_, " follows rank 0 (call follow())");
    std::lock_guard<std::mutex> lock(mu_);
    DSV32_CHECK(!stopped_ && !thread_.joinable(), state, "Engine::start: the engine ",
                stopped_ ? "has stopped" : "runs already");
#if defined(_OPENMP)
    const int threads = omp_get_max_threads();  // a thread's own setting: a new thread would not inherit it
    thread_ = std::thread([this, threads] {
      omp_set_num_threads(threads);
      loop();
    });
#else
    thread_ = std::thread([this] { loop(); });
#endif
  }

  /// \brief Stops the engine: the loop (if started) ends after its step, every request in flight
  ///        ends with FinishReason::cancelled, every page goes back to the pool, and ranks in
  ///        follow() return. Later submissions are refused. Idempotent.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      wake_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    if (rank_ != 0) return;
    std::lock_guard<std::mutex> step_lock(step_mu_);
    take_incoming();
    while (!running_.empty()) finish(running_.back(), FinishReason::cancelled);
    while (!waiting_.empty()) finish(waiting_.back(), FinishReason::cancelled);
    publish_stats();
    if (world_ > 1) broadcast_plan(nullptr);  // the followers return
  }

  /// \brief One step (see the file description); whether it ran a pass. For engines stepped by
  ///        their caller; a started engine steps itself.
  /// \throws Error(state) on a rank other than 0
  bool step() {
    DSV32_CHECK(rank_ == 0, state, "Engine::step: rank ", rank_, " follows rank 0 (call follow())");
    std::lock_guard<std::mutex> step_lock(step_mu_);
    return step_locked();
  }

  /// \brief Steps until no request is left (caller-stepped engines).
  void run_until_idle() {
    while (step()) {
    }
  }

  /// \brief On ranks other than 0: runs the passes rank 0's engine sends until it stops. A pass that
  ///        fails its checks fails on every rank alike (rank 0 fails its requests and goes on; so does
  ///        this rank).
  /// \throws Error(state) on rank 0
  void follow() {
    DSV32_CHECK(rank_ != 0, state, "Engine::follow: rank 0 runs the engine");
    CommunicatorBase* comm = model_.parallel().comm;
    std::vector<std::int64_t> plan;
    for (;;) {
      std::int64_t size = 0;
      comm->broadcast_host(std::as_writable_bytes(std::span(&size, 1)), 0);
      if (size == 0) return;
      plan.resize(static_cast<std::size_t>(size));
      comm->broadcast_host(std::as_writable_bytes(std::span(plan)), 0);
      try {
        run_plan(plan);
      } catch (const Error&) {  // refused before any collective, as on rank 0
      }
    }
  }

  /// \brief The engine's figures now (any thread).
  EngineStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    EngineStats s = stats_;
    std::lock_guard<std::mutex> lock2(mu_);
    s.waiting += static_cast<std::int64_t>(incoming_.size());
    s.submitted = submitted_;
    return s;
  }

 private:
  using clock = std::chrono::steady_clock;

  // A request inside the engine.
  struct Sequence {
    Sequence(Request r, std::shared_ptr<detail::RequestState> s)
        : req(std::move(r)), state(std::move(s)), tokens(req.prompt), sampler(req.sampling), rng(req.seed, 0),
          submitted(state->submitted) {}
    Request req;
    std::shared_ptr<detail::RequestState> state;
    std::vector<std::int32_t> tokens;  // prompt, then completion
    std::int64_t computed = 0;         // positions [0, computed) are in its pages
    std::vector<std::int32_t> pages;   // its block table
    std::vector<std::uint64_t> keys;   // prefix keys of its full pages, in order
    std::int64_t expanded_end = 0;     // positions below take the reference's prefill arithmetic
    Sampler sampler;
    SamplingRng rng;
    RequestResult out;
    clock::time_point submitted, first_token, last_token;
    bool admitted = false;
    bool done = false;  // ended in this step: leaves the running list at its end
  };
  struct Scheduled {
    Sequence* seq;
    std::int64_t tokens;
  };

  static double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

  void validate(const Request& r) const {
    const std::int64_t vocab = config_type::vocab_size, max_seq = model_.options().max_seq_len;
    const auto n = static_cast<std::int64_t>(r.prompt.size());
    DSV32_CHECK(rank_ == 0, state, "Engine::submit: rank ", rank_, " follows rank 0 (submit there)");
    DSV32_CHECK(n >= 1, invalid_argument, "Engine::submit: the prompt is empty");
    for (std::int64_t i = 0; i < n; ++i)
      DSV32_CHECK(r.prompt[i] >= 0 && r.prompt[i] < vocab, invalid_argument, "Engine::submit: prompt token ", i, " is ",
                  r.prompt[i], ", outside the vocabulary [0, ", vocab, ")");
    for (const std::int32_t t : r.stop_ids)
      DSV32_CHECK(t >= 0 && t < vocab, invalid_argument, "Engine::submit: stop id ", t, " is outside the vocabulary [0, ",
                  vocab, ")");
    DSV32_CHECK(r.max_new_tokens >= 0, invalid_argument, "Engine::submit: max_new_tokens must be >= 0, got ",
                r.max_new_tokens);
    DSV32_CHECK(r.max_new_tokens <= max_seq - n, invalid_argument, "Engine::submit: prompt (", n,
                " tokens) + max_new_tokens (", r.max_new_tokens, ") exceed the model's max_seq_len = ", max_seq);
    const std::int64_t need = (n + r.max_new_tokens + plan_.page_size - 1) / plan_.page_size;
    DSV32_CHECK(need <= plan_.pages, invalid_argument, "Engine::submit: prompt (", n, " tokens) + max_new_tokens (",
                r.max_new_tokens, ") need ", need, " pages of ", plan_.page_size, " positions, more than the pool's ",
                plan_.pages);
    r.sampling.validate();
    DSV32_CHECK(r.logprobs >= -1 && r.logprobs <= 20, invalid_argument,
                "Engine::submit: logprobs must be in [-1, 20] (-1: none), got ", r.logprobs);
  }

  // The engine's thread: steps while there is work, sleeps until a submission, a cancellation or stop().
  void loop() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopped_) return;
        wake_ = false;
      }
      bool worked = false;
      {
        std::lock_guard<std::mutex> step_lock(step_mu_);
        worked = step_locked();
      }
      if (!worked) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopped_ || wake_; });
      }
    }
  }

  // Moves the submitted requests to the queue (a request for no token finishes at once).
  void take_incoming() {
    std::vector<std::unique_ptr<Sequence>> in;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in.swap(incoming_);
      waiting_count_ = static_cast<std::int64_t>(waiting_.size() + in.size());
    }
    for (auto& s : in) {
      waiting_.push_back(std::move(s));
      if (waiting_.back()->req.max_new_tokens == 0) finish(waiting_.back(), FinishReason::max_new_tokens);
    }
  }

  bool step_locked() {
    take_incoming();
    // cancellations first: their pages serve this step
    for (std::size_t i = running_.size(); i-- > 0;)
      if (running_[i]->state->cancel.load(std::memory_order_relaxed)) finish(running_[i], FinishReason::cancelled);
    for (std::size_t i = waiting_.size(); i-- > 0;)
      if (waiting_[i]->state->cancel.load(std::memory_order_relaxed)) finish(waiting_[i], FinishReason::cancelled);
    std::vector<Scheduled> plan;
    std::int64_t budget = options_.step_tokens;
    const std::int64_t P = plan_.page_size;
    // 1. the running sequences, in admission order: first a token for each that decodes, then the
    //    next chunks of the prompts being prefilled (decode steps never wait behind a long prompt)
    for (const bool decoding : {true, false})
      for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
        Sequence* s = running_[i].get();
        const std::int64_t left = static_cast<std::int64_t>(s->tokens.size()) - s->computed;
        if ((left == 1) != decoding) continue;
        const std::int64_t n = std::min(left, budget);
        if (!grow(*s, s->computed + n, plan, budget)) break;  // s itself was preempted: it was the last
        plan.push_back({s, n});
        budget -= n;
      }
    // 2. admissions, first come first served, while the budget, the running limit and the pages allow
    while (budget > 0 && static_cast<std::int64_t>(running_.size()) < options_.max_running && !waiting_.empty()) {
      Sequence& s = *waiting_.front();
      const auto len = static_cast<std::int64_t>(s.tokens.size());
      // the longest cached prefix of full pages, leaving at least one token to compute
      s.pages = pool_->match(s.tokens, (len - 1) / P, [&](std::int64_t j) { return page_tag(s, j); });
      s.keys.clear();
      std::uint64_t key = PagePool::kRootKey;
      for (std::size_t j = 0; j < s.pages.size(); ++j) {
        key = PagePool::page_key(key, std::span(s.tokens).subspan(j * static_cast<std::size_t>(P), static_cast<std::size_t>(P)),
                                 page_tag(s, static_cast<std::int64_t>(j)));
        s.keys.push_back(key);
      }
      s.computed = static_cast<std::int64_t>(s.pages.size()) * P;
      const std::int64_t n = std::min(len - s.computed, budget);
      if (!grow(s, s.computed + n)) {
        release_pages(s);  // no pages for it now: it waits at the head of the queue
        break;
      }
      if (!s.admitted) {
        s.admitted = true;
        s.out.stats.queue_s = seconds(clock::now() - s.submitted);
        s.out.stats.cached_tokens = s.computed;
        publish_live(s);
        counters_.prompt_tokens += static_cast<std::int64_t>(s.req.prompt.size());
        counters_.prefix_hit_tokens += s.computed;
      }
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      plan.push_back({running_.back().get(), n});
      budget -= n;
    }
    {  // the admitted ones no longer count against max_waiting
      std::lock_guard<std::mutex> lock(mu_);
      waiting_count_ = static_cast<std::int64_t>(waiting_.size());
    }
    if (plan.empty()) {
      publish_stats();
      return false;
    }
    // 3. one ragged pass
    std::vector<SequenceSlice> slices;
    slices.reserve(plan.size());
    for (const Scheduled& p : plan) {
      const Sequence& s = *p.seq;
      slices.push_back({std::span<const std::int32_t>(s.tokens).subspan(static_cast<std::size_t>(s.computed),
                                                                         static_cast<std::size_t>(p.tokens)),
                        s.computed, s.pages, s.computed + p.tokens == static_cast<std::int64_t>(s.tokens.size()),
                        s.expanded_end});
    }
    Logits logits;
    try {
      if (world_ > 1) broadcast_plan(&slices);
      logits = model_.forward(slices, cache_, pass_options());
    } catch (const std::exception& e) {
      // a pass that fails fails its sequences (their pages back); the engine goes on with the others
      for (const Scheduled& p : plan) fail(*p.seq, std::string("the forward pass failed: ") + e.what());
      publish_stats();
      return true;
    }
    ++counters_.steps;
    // 4. the results: pages that filled up join the prefix cache; sequences at their end choose a token
    std::int64_t row = 0;
    for (const Scheduled& p : plan) {
      Sequence& s = *p.seq;
      s.computed += p.tokens;
      counters_.computed_tokens += p.tokens;
      while (static_cast<std::int64_t>(s.keys.size()) < s.computed / P) {
        const std::size_t j = s.keys.size();
        s.keys.push_back(pool_->register_page(s.pages[j], j ? s.keys[j - 1] : PagePool::kRootKey,
                                               std::span<const std::int32_t>(s.tokens).subspan(j * static_cast<std::size_t>(P),
                                                                                               static_cast<std::size_t>(P)),
                                               page_tag(s, static_cast<std::int64_t>(j))));
      }
      if (s.computed == static_cast<std::int64_t>(s.tokens.size())) choose(s, logits.row(row++));
    }
    // finished sequences leave (their pages back)
    for (std::size_t i = running_.size(); i-- > 0;)
      if (running_[i]->done) finish(running_[i], running_[i]->out.finish);
    publish_stats();
    return true;
  }

  ForwardOptions pass_options() const { return {}; }

  // The tag of page j of `s`: how many of its positions take the prefill arithmetic (a page computed
  // otherwise holds other bits, so it must not be shared).
  std::uint32_t page_tag(const Sequence& s, std::int64_t j) const {
    return static_cast<std::uint32_t>(std::clamp<std::int64_t>(s.expanded_end - j * plan_.page_size, 0, plan_.page_size));
  }

  // Gives `s` pages for positions [0, end). When the pool is empty and `plan` is given: preempts the
  // most recently admitted running sequence until a page frees up — taking it out of the step's plan
  // (its tokens back into `budget`) if it was in it — and fails only when that is `s` itself. Without
  // a plan (an admission), fails when no page is left.
  bool grow(Sequence& s, std::int64_t end, std::vector<Scheduled>* plan = nullptr, std::int64_t* budget = nullptr) {
    const std::int64_t need = (end + plan_.page_size - 1) / plan_.page_size;
    while (static_cast<std::int64_t>(s.pages.size()) < need) {
      if (const auto page = pool_->allocate()) {
        s.pages.push_back(*page);
        continue;
      }
      if (!plan) return false;
      Sequence* victim = running_.back().get();
      if (const auto it = std::find_if(plan->begin(), plan->end(), [&](const Scheduled& x) { return x.seq == victim; });
          it != plan->end()) {
        *budget += it->tokens;
        plan->erase(it);
      }
      preempt();
      if (victim == &s) return false;
    }
    return true;
  }
  bool grow(Sequence& s, std::int64_t end, std::vector<Scheduled>& plan, std::int64_t& budget) {
    return grow(s, end, &plan, &budget);
  }

  // Preempts the most recently admitted running sequence: pages back (full ones stay cached), to the
  // head of the queue, recomputed when admitted again (its completion so far is part of what it
  // recomputes; its random stream goes on where it was).
  void preempt() {
    std::unique_ptr<Sequence> s = std::move(running_.back());
    running_.pop_back();
    release_pages(*s);
    ++s->out.stats.preemptions;
    publish_live(*s);
    ++counters_.preemptions;
    waiting_.push_front(std::move(s));
  }

  void release_pages(Sequence& s) {
    for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) pool_->release(*it);  // the tail is least useful
    s.pages.clear();
    s.keys.clear();
    s.computed = 0;
  }

  // Chooses the next token of `s` from its logits row, streams it, and marks the sequence done when
  // it ends.
  void choose(Sequence& s, std::span<const float> row) {
    try {
      const std::int32_t token = s.sampler.sample(row, s.rng);
      const auto now = clock::now();
      if (s.req.keep_logits) s.out.last_logits.assign(row.begin(), row.end());
      if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), token) != s.req.stop_ids.end()) {
        s.out.stop_token = token;
        return mark_done(s, FinishReason::eos);
      }
      TokenEvent event;
      event.token = token;
      event.index = static_cast<std::int64_t>(s.out.tokens.size());
      if (s.req.logprobs >= 0) logprobs(row, token, s.req.logprobs, event);
      s.tokens.push_back(token);
      s.out.tokens.push_back(token);
      ++counters_.generated_tokens;
      if (s.out.tokens.size() == 1)
        s.first_token = now;
      s.last_token = now;
      if (s.req.logprobs >= 0) s.out.logprobs.push_back(event);
      publish_live(s);
      if (s.req.on_token && !s.req.on_token(event)) return mark_done(s, FinishReason::stopped);
      if (static_cast<std::int64_t>(s.out.tokens.size()) >= s.req.max_new_tokens) return mark_done(s, FinishReason::max_new_tokens);
      if (static_cast<std::int64_t>(s.tokens.size()) >= model_.options().max_seq_len)
        return mark_done(s, FinishReason::max_seq_len);
    } catch (const std::exception& e) {
      s.out.message = e.what();
      mark_done(s, FinishReason::error);
    }
  }

  // log softmax of the raw logits: the chosen token's and the `top` most likely.
  static void logprobs(std::span<const float> row, std::int32_t token, std::int64_t top, TokenEvent& e) {
    float mx = -INFINITY;
    for (const float v : row) mx = std::max(mx, v);
    double sum = 0.0;
    for (const float v : row) sum += std::exp(static_cast<double>(v) - mx);
    const double lse = mx + std::log(sum);
    e.logprob = static_cast<float>(row[static_cast<std::size_t>(token)] - lse);
    if (top <= 0) return;
    std::vector<std::int32_t> ids(row.size());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i);
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(top, static_cast<std::int64_t>(row.size())));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](std::int32_t a, std::int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (std::size_t i = 0; i < k; ++i) e.top.push_back({ids[i], static_cast<float>(row[ids[i]] - lse)});
  }

  void mark_done(Sequence& s, FinishReason why) {
    s.out.finish = why;
    s.done = true;
  }

  void fail(Sequence& s, const std::string& message) {
    s.out.message = message;
    mark_done(s, FinishReason::error);
  }

  // Ends sequence `p` (running or waiting): pages back, result published, out of the lists.
  void finish(std::unique_ptr<Sequence>& p, FinishReason why) {
    std::unique_ptr<Sequence> s = std::move(p);
    if (auto it = std::find(running_.begin(), running_.end(), nullptr); it != running_.end()) running_.erase(it);
    else if (auto w = std::find(waiting_.begin(), waiting_.end(), nullptr); w != waiting_.end()) waiting_.erase(w);
    release_pages(*s);
    complete(*s, why);
    ++counters_.finished;
    ++counters_.finished_by[static_cast<int>(why)];
  }

  // The figures of `s` so far (s.out.stats completed with its tokens and times).
  static void update_stats(Sequence& s) {
    RequestStats& r = s.out.stats;
    r.prompt_tokens = static_cast<std::int64_t>(s.req.prompt.size());
    r.generated_tokens = static_cast<std::int64_t>(s.out.tokens.size());
    if (!s.out.tokens.empty()) r.ttft_s = seconds(s.first_token - s.submitted);
    if (s.out.tokens.size() > 1)
      r.tpot_s = seconds(s.last_token - s.first_token) / static_cast<double>(s.out.tokens.size() - 1);
  }

  // Publishes the figures of `s` so far to its handle (RequestHandle::stats()).
  static void publish_live(Sequence& s) {
    update_stats(s);
    std::lock_guard<std::mutex> lock(s.state->mu);
    s.state->live = s.out.stats;
    s.state->admitted = s.admitted;
  }

  // Publishes a sequence's result to its handle.
  static void complete(Sequence& s, FinishReason why) {
    const auto now = clock::now();
    RequestResult& r = s.out;
    r.finish = why;
    update_stats(s);
    r.stats.total_s = seconds(now - s.submitted);
    std::lock_guard<std::mutex> lock(s.state->mu);
    s.state->result = std::move(r);
    s.state->done = true;
    s.state->cv.notify_all();
  }

  void publish_stats() {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_ = counters_;
    stats_.running = static_cast<std::int64_t>(running_.size());
    stats_.waiting = static_cast<std::int64_t>(waiting_.size());
    stats_.pages = pool_->pages();
    stats_.page_size = pool_->page_size();
    stats_.pages_used = pool_->used_pages();
    stats_.pages_cached = pool_->cached_pages();
    stats_.pages_free = pool_->free_pages();
    std::lock_guard<std::mutex> lock2(mu_);
    waiting_count_ = stats_.waiting;
  }

  // Model parallelism: a step's plan as integers, sent by rank 0 (null: the end).
  // [n, then per sequence: start_pos, tokens, pages, logits, expanded_end][tokens...][pages...]
  void broadcast_plan(const std::vector<SequenceSlice>* slices) {
    CommunicatorBase* comm = model_.parallel().comm;
    std::vector<std::int64_t> plan;
    if (slices) {
      plan.push_back(static_cast<std::int64_t>(slices->size()));
      for (const SequenceSlice& s : *slices)
        plan.insert(plan.end(), {s.start_pos, static_cast<std::int64_t>(s.tokens.size()),
                                 static_cast<std::int64_t>(s.pages.size()), s.logits ? 1 : 0, s.expanded_end});
      for (const SequenceSlice& s : *slices) plan.insert(plan.end(), s.tokens.begin(), s.tokens.end());
      for (const SequenceSlice& s : *slices) plan.insert(plan.end(), s.pages.begin(), s.pages.end());
    }
    std::int64_t size = static_cast<std::int64_t>(plan.size());
    comm->broadcast_host(std::as_writable_bytes(std::span(&size, 1)), 0);
    if (size > 0) comm->broadcast_host(std::as_writable_bytes(std::span(plan)), 0);
  }

  // A follower's pass from rank 0's plan.
  void run_plan(const std::vector<std::int64_t>& plan) {
    constexpr std::size_t F = 5;  // fields per sequence
    const auto n = static_cast<std::size_t>(plan[0]);
    auto field = [&](std::size_t i, std::size_t f) { return plan[1 + F * i + f]; };
    std::size_t total_tokens = 0, total_pages = 0;
    for (std::size_t i = 0; i < n; ++i)
      total_tokens += static_cast<std::size_t>(field(i, 1)), total_pages += static_cast<std::size_t>(field(i, 2));
    std::vector<std::int32_t> tokens(total_tokens), pages(total_pages);
    std::size_t at = 1 + F * n;
    for (auto& t : tokens) t = static_cast<std::int32_t>(plan[at++]);
    for (auto& p : pages) p = static_cast<std::int32_t>(plan[at++]);
    std::vector<SequenceSlice> slices(n);
    std::size_t t = 0, p = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto nt = static_cast<std::size_t>(field(i, 1)), np = static_cast<std::size_t>(field(i, 2));
      slices[i] = {std::span<const std::int32_t>(tokens).subspan(t, nt), field(i, 0),
                   std::span<const std::int32_t>(pages).subspan(p, np), field(i, 3) != 0, field(i, 4)};
      t += nt, p += np;
    }
    (void)model_.forward(slices, cache_, pass_options());
  }

  Model& model_;
  EngineOptions options_;
  int rank_ = 0, world_ = 1;
  PagePoolPlan plan_;
  KvCache<backend_type> cache_;
  std::unique_ptr<PagePool> pool_;
  // scheduler state: only the stepping thread touches it (under step_mu_)
  std::mutex step_mu_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;   // FCFS; preempted ones at the front
  EngineStats counters_;
  // shared with submitters (under mu_)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> incoming_;
  std::int64_t waiting_count_ = 0, submitted_ = 0;
  std::uint64_t next_id_ = 0;
  bool stopped_ = false, wake_ = false;
  std::thread thread_;
  // the figures stats() returns
  mutable std::mutex stats_mu_;
  EngineStats stats_;
};

/// @}

}  // namespace dsv32
