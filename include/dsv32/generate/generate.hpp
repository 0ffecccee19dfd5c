/// \file
/// \brief generate(): batched text generation as the reference's `generate.py` does it — ragged
///        prompts, a prefill up to the shortest prompt, then one position per call with prompt
///        tokens overriding sampled ones — plus streaming, finish reasons and timing.
///
/// \code
/// dsv32::Transformer<dsv32::TinyBf16> model(args.runtime);
/// dsv32::load_checkpoint(model, dir);
/// dsv32::GenerateOptions opts;
/// opts.max_new_tokens = 32;
/// opts.sampling.temperature = 0.6;
/// opts.on_token = [](std::size_t seq, std::int32_t id) { std::printf("%zu:%d ", seq, id); return true; };
/// const dsv32::GenerationResult r = dsv32::generate(model, {{1, 2, 3}, {4, 5}}, opts);
/// std::printf("\nTTFT %.1f ms, %.1f tokens/s\n", 1e3 * r.stats.time_to_first_token_s,
///             r.stats.decode_tokens_per_s());
/// \endcode
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "dsv32/config/runtime_options.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/generate/sampling.hpp"
#include "dsv32/layers/transformer.hpp"

namespace dsv32 {

/// \addtogroup generate
/// @{

/// \brief What generate() needs of a model: Transformer<Config, Backend> models it, and so does a
///        wrapper with the same members (e.g. one that records the calls).
/// \tparam M the model type
template <class M>
concept GenerationModel = requires(M& m, std::span<const std::int32_t> tokens, std::int64_t n, const ForwardOptions& o) {
  { M::config_type::vocab_size } -> std::convertible_to<std::int64_t>;
  { m.options() } -> std::convertible_to<const RuntimeOptions&>;
  m.reset();
  { m.forward(tokens, n, n, o) } -> std::same_as<Logits>;
};

/// \brief Why a sequence's completion ended.
enum class FinishReason {
  eos,             ///< the model produced eos_id, or one of a request's stop ids (not part of the completion)
  max_new_tokens,  ///< the completion holds max_new_tokens tokens
  max_seq_len,     ///< the model's max_seq_len was reached first
  stopped,         ///< the streaming callback returned false
  cancelled,       ///< the serving engine's request was cancelled, or the engine stopped
  error,           ///< the request failed (its callback threw, its logits were not finite); the others go on
};

/// \brief Name of a FinishReason as printed ("eos", "max_new_tokens", "max_seq_len", "stopped",
///        "cancelled", "error").
/// \param r the reason
constexpr const char* to_string(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::eos: return "eos";
    case FinishReason::max_new_tokens: return "max_new_tokens";
    case FinishReason::max_seq_len: return "max_seq_len";
    case FinishReason::stopped: return "stopped";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "unknown";
}

/// \brief Receives each completion token as it is produced: (sequence index, token id). Within a
///        step, sequences come in index order. Returning false ends that sequence's completion
///        (FinishReason::stopped) after this token; the others go on. Tokens of a prompt, eos and
///        tokens past a sequence's end are never passed.
using TokenCallback = std::function<bool(std::size_t sequence, std::int32_t token)>;

/// \brief Options of one generate() call.
struct GenerateOptions {
  /// Most tokens generated per sequence (>= 0). The whole run is capped at
  /// min(max_seq_len, max_new_tokens + longest prompt) positions, as in the reference.
  std::int64_t max_new_tokens = 100;
  /// Token that ends a sequence (not included in its completion); none: only lengths end them.
  std::optional<std::int32_t> eos_id;
  /// How tokens are chosen (default: the reference's temperature 1.0; 0 = greedy).
  SamplingOptions sampling;
  /// Seed of the random streams: sequence b draws from SamplingRng(seed, b).
  std::uint64_t seed = 0;
  /// When not empty, one seed per prompt: sequence b draws from SamplingRng(seeds[b], 0), so its
  /// samples do not depend on where it sits in the batch.
  std::vector<std::uint64_t> seeds;
  /// Streams tokens as they are produced (may be empty).
  TokenCallback on_token;
  /// Passed to every forward call (debugging, golden replays); may be null.
  ForwardObserver* observer = nullptr;
};

/// \brief Timing and counts of one generate() call (wall clock, callback time included).
struct GenerationStats {
  std::int64_t prompt_tokens = 0;     ///< sum of the prompts' lengths
  std::int64_t generated_tokens = 0;  ///< sum of the completions' lengths
  std::int64_t forward_calls = 0;     ///< model.forward() calls made
  std::int64_t prefill_tokens = 0;    ///< tokens of the first call: batch x shortest prompt
  double time_to_first_token_s = 0;   ///< start to the first completion token (prefill + sampling)
  std::int64_t decode_tokens = 0;     ///< completion tokens produced after the first call
  std::int64_t decode_steps = 0;      ///< forward calls after the first (one position each)
  double decode_s = 0;                ///< time of those calls, sampling included
  double total_s = 0;                 ///< the whole call

  /// \brief Completion tokens per second after the first call (0 when there were none).
  double decode_tokens_per_s() const noexcept { return decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0.0; }
  /// \brief Milliseconds per decode step (0 when there were none).
  double ms_per_step() const noexcept { return decode_steps > 0 ? 1e3 * decode_s / static_cast<double>(decode_steps) : 0.0; }
};

/// \brief One sequence's outcome.
struct SequenceResult {
  std::vector<std::int32_t> tokens;                   ///< the completion: tokens after the prompt, eos excluded
  FinishReason finish = FinishReason::max_new_tokens;  ///< why it ended
  double time_to_first_token_s = 0;                   ///< start to its first completion token (0 if none)
};

/// \brief What generate() returns: one SequenceResult per prompt, in prompt order, and the stats.
struct GenerationResult {
  std::vector<SequenceResult> sequences;  ///< one per prompt, in prompt order
  GenerationStats stats;                  ///< counts and timing of the whole call

  /// \brief The completions alone (what the reference's generate() returns).
  std::vector<std::vector<std::int32_t>> completions() const {
    std::vector<std::vector<std::int32_t>> out;
    out.reserve(sequences.size());
    for (const auto& s : sequences) out.push_back(s.tokens);
    return out;
  }
};

/// \brief Checks generate()'s arguments against a model's limits without running anything.
/// \throws Error(invalid_argument) naming the first problem: an empty batch, more prompts than
///         max_batch_size, an empty prompt, a prompt longer than max_seq_len, a token id outside
///         [0, vocab_size), a negative max_new_tokens, an eos_id outside the vocabulary, a seeds
///         list of the wrong length, or sampling options out of range.
/// \param prompts    as given to generate()
/// \param options    as given to generate()
/// \param limits     the model's runtime options (max_batch_size, max_seq_len)
/// \param vocab_size the model's vocabulary size
inline void validate_generate_arguments(const std::vector<std::vector<std::int32_t>>& prompts,
                                        const GenerateOptions& options, const RuntimeOptions& limits,
                                        std::int64_t vocab_size) {
  DSV32_CHECK(!prompts.empty(), invalid_argument, "generate: no prompts");
  DSV32_CHECK(static_cast<std::int64_t>(prompts.size()) <= limits.max_batch_size, invalid_argument, "generate: ",
              prompts.size(), " prompts exceed the model's max_batch_size = ", limits.max_batch_size);
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const auto& p = prompts[b];
    DSV32_CHECK(!p.empty(), invalid_argument, "generate: prompt ", b, " is empty");
    DSV32_CHECK(static_cast<std::int64_t>(p.size()) <= limits.max_seq_len, invalid_argument, "generate: prompt ", b,
                " has ", p.size(), " tokens, more than the model's max_seq_len = ", limits.max_seq_len);
    for (std::size_t i = 0; i < p.size(); ++i)
      DSV32_CHECK(p[i] >= 0 && p[i] < vocab_size, invalid_argument, "generate: prompt ", b, " token ", i, " is ", p[i],
                  ", outside the vocabulary [0, ", vocab_size, ")");
  }
  DSV32_CHECK(options.max_new_tokens >= 0, invalid_argument, "generate: max_new_tokens must be >= 0, got ",
              options.max_new_tokens);
  if (options.eos_id)
    DSV32_CHECK(*options.eos_id >= 0 && *options.eos_id < vocab_size, invalid_argument, "generate: eos_id ",
                *options.eos_id, " is outside the vocabulary [0, ", vocab_size, ")");
  DSV32_CHECK(options.seeds.empty() || options.seeds.size() == prompts.size(), invalid_argument, "generate: ",
              options.seeds.size(), " seeds given for ", prompts.size(), " prompts (give one per prompt, or none)");
  options.sampling.validate();
}

/// \brief Generates completions of a batch of prompts, as the reference's generate() does.
///
/// The run covers positions [0, total) with total = min(max_seq_len, max_new_tokens + longest
/// prompt). The first forward call takes every sequence's first `shortest prompt` tokens
/// (start_pos 0); each later call takes one position for every sequence, at start_pos = the
/// previous position. The token chosen at a position is the prompt's own while a sequence is
/// still inside its prompt, otherwise the sampled one. Sequences stay in the batch to the end
/// (a finished sequence is fed its greedy choice, which no one sees); the run stops early once
/// every sequence has finished. So a sequence's completion is what the reference returns: the
/// tokens after its prompt, at most max_new_tokens, cut before the first eos.
///
/// The call first checks its arguments (validate_generate_arguments) and leaves the model
/// untouched if they fail; then it resets the model's sequences (model.reset()). Errors thrown
/// later (by the model or the callback) propagate; the model stays usable (the next generate()
/// resets it).
///
/// With model parallelism every rank calls generate() with the same arguments: each rank receives
/// the gathered logits, so with the same seeds all ranks choose the same tokens and stay in step.
/// \tparam Model a GenerationModel, e.g. Transformer<Config, Backend>
/// \param model   a model with its weights loaded
/// \param prompts one vector of token ids per sequence, lengths may differ
/// \param options length limits, eos, sampling, seeds, streaming callback
/// \return one SequenceResult per prompt, and the stats
template <GenerationModel Model>
GenerationResult generate(Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                          const GenerateOptions& options = {}) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const RuntimeOptions& limits = model.options();
  validate_generate_arguments(prompts, options, limits, Model::config_type::vocab_size);
  if constexpr (requires { model.ready(); })
    DSV32_CHECK(model.ready(), state, "generate: the model's weights are not loaded");
  Sampler sampler(options.sampling);

  const std::size_t batch = prompts.size();
  std::int64_t shortest = limits.max_seq_len, longest = 0;
  GenerationResult result;
  result.sequences.resize(batch);
  GenerationStats& stats = result.stats;
  for (const auto& p : prompts) {
    const auto len = static_cast<std::int64_t>(p.size());
    shortest = std::min(shortest, len);
    longest = std::max(longest, len);
    stats.prompt_tokens += len;
  }
  // min(max_seq_len, max_new_tokens + longest), without overflow for huge max_new_tokens
  const std::int64_t total = longest + std::min(options.max_new_tokens, limits.max_seq_len - longest);

  // tokens[b * total + pos]: the prompt, then what is chosen (the reference's `tokens` matrix)
  std::vector<std::int32_t> tokens(batch * static_cast<std::size_t>(total), 0);
  std::vector<SamplingRng> rngs;
  std::vector<bool> done(batch, false);
  std::size_t active = batch;
  auto finish = [&](std::size_t b, FinishReason why) {
    result.sequences[b].finish = why;
    done[b] = true;
    --active;
  };
  rngs.reserve(batch);
  for (std::size_t b = 0; b < batch; ++b) {
    std::copy(prompts[b].begin(), prompts[b].end(), tokens.begin() + static_cast<std::ptrdiff_t>(b * total));
    rngs.emplace_back(options.seeds.empty() ? options.seed : options.seeds[b], options.seeds.empty() ? b : 0);
    if (options.max_new_tokens == 0) finish(b, FinishReason::max_new_tokens);
    else if (static_cast<std::int64_t>(prompts[b].size()) >= total) finish(b, FinishReason::max_seq_len);
  }

  model.reset();
  std::vector<std::int32_t> call;  // [batch, cur - prev]
  std::int64_t prev = 0;
  for (std::int64_t cur = shortest; cur < total && active > 0; ++cur) {
    call.clear();
    for (std::size_t b = 0; b < batch; ++b)
      call.insert(call.end(), tokens.begin() + static_cast<std::ptrdiff_t>(b * total + prev),
                  tokens.begin() + static_cast<std::ptrdiff_t>(b * total + cur));
    const Logits logits = model.forward(std::span<const std::int32_t>(call), static_cast<std::int64_t>(batch), prev,
                                        ForwardOptions{false, options.observer});
    ++stats.forward_calls;
    std::int64_t produced = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      std::int32_t& slot = tokens[b * total + cur];
      if (cur < static_cast<std::int64_t>(prompts[b].size())) continue;  // the prompt's token stays
      if (done[b]) {
        slot = logits.argmax(static_cast<std::int64_t>(b));
        continue;
      }
      slot = sampler.sample(logits.row(static_cast<std::int64_t>(b)), rngs[b]);
      SequenceResult& seq = result.sequences[b];
      if (options.eos_id && slot == *options.eos_id) {
        finish(b, FinishReason::eos);
        continue;
      }
      if (seq.tokens.empty()) seq.time_to_first_token_s = std::chrono::duration<double>(clock::now() - t0).count();
      seq.tokens.push_back(slot);
      ++produced;
      if (options.on_token && !options.on_token(b, slot)) finish(b, FinishReason::stopped);
      else if (static_cast<std::int64_t>(seq.tokens.size()) == options.max_new_tokens)
        finish(b, FinishReason::max_new_tokens);
    }
    const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    if (stats.forward_calls == 1) {
      stats.time_to_first_token_s = elapsed;
    } else {
      stats.decode_tokens += produced;
      ++stats.decode_steps;
      stats.decode_s = elapsed - stats.time_to_first_token_s;
    }
    prev = cur;
  }
  for (std::size_t b = 0; b < batch; ++b) {
    if (!done[b]) finish(b, FinishReason::max_seq_len);
    stats.generated_tokens += static_cast<std::int64_t>(result.sequences[b].tokens.size());
  }
  if (stats.forward_calls > 0) stats.prefill_tokens = static_cast<std::int64_t>(batch) * shortest;
  stats.total_s = std::chrono::duration<double>(clock::now() - t0).count();
  return result;
}

/// @}

}  // namespace dsv32
