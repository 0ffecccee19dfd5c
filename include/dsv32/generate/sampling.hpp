/// \file
/// \brief Choosing the next token from a row of logits, as the reference's `generate.py` does:
///        greedy argmax at temperature 0, otherwise an exact categorical sample of
///        softmax(logits / T) by the exponential race — with optional top-k / top-p truncation and
///        a seedable, portable per-sequence random stream.
///
/// The reference samples with `probs / Exponential(1)` then argmax: if E_i ~ Exp(1) i.i.d., then
/// argmax_i p_i / E_i = argmin_i E_i / p_i, and E_i / p_i ~ Exp(p_i) are independent clocks, so the
/// first to ring is i with probability p_i / sum p — an exact sample with no cumulative sum (it is
/// the Gumbel-max trick written with exponentials). dsv32 keeps that method; only the random
/// numbers differ from PyTorch's (which cannot be reproduced outside it).
///
/// The pipeline of Sampler::sample(), in order:
///  1. temperature 0: return the first maximum of the raw logits (nothing below runs);
///  2. x = logits / max(T, 1e-5) in f32 (the reference's clamp), p = softmax(x) in f32 (sum in f64);
///  3. top_k > 0: keep the k most probable tokens (ties: lower id first), renormalize;
///  4. top_p < 1: keep the smallest most-probable-first set whose probability reaches top_p,
///     renormalize;
///  5. the exponential race over the tokens kept (p > 0), one Exp(1) draw each, in id order.
///
/// Logits may be -inf (a masked token: probability 0); NaN or +inf logits throw.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \defgroup generate Generation
/// \brief Sampling the next token and the batched generation loop of the reference's generate.py.
/// @{

/// \brief How the next token is chosen from a row of logits.
struct SamplingOptions {
  /// Softmax temperature. 0 selects greedy decoding (first maximum of the logits); values in
  /// (0, 1e-5) are clamped to 1e-5 as the reference does. Must be finite and >= 0.
  double temperature = 1.0;
  /// Keep only the k most probable tokens before sampling; 0 keeps all. Must be >= 0.
  std::int64_t top_k = 0;
  /// Nucleus sampling: keep the smallest set of most probable tokens whose probability reaches
  /// top_p; 1 keeps all. Must be in (0, 1].
  double top_p = 1.0;

  /// \brief Whether the choice is the deterministic argmax.
  bool greedy() const noexcept { return temperature == 0.0; }

  /// \brief Throws Error(invalid_argument) naming the first option out of range.
  void validate() const {
    DSV32_CHECK(std::isfinite(temperature) && temperature >= 0.0, invalid_argument,
                "sampling: temperature must be finite and >= 0 (0 = greedy), got ", temperature);
    DSV32_CHECK(top_k >= 0, invalid_argument, "sampling: top_k must be >= 0 (0 = off), got ", top_k);
    DSV32_CHECK(top_p > 0.0 && top_p <= 1.0, invalid_argument, "sampling: top_p must be in (0, 1] (1 = off), got ",
                top_p);
  }
};

/// \brief The random stream of one sequence.
///
/// A std::mt19937_64 seeded through std::seed_seq from the four 32-bit halves of (seed, stream);
/// both are fully specified by the C++ standard, and the exponential draws are computed here
/// rather than by std::exponential_distribution (whose algorithm is left to the library), so a
/// (seed, stream) pair gives the same tokens with every standard library.
class SamplingRng {
 public:
  /// \param seed   the user's seed
  /// \param stream which stream of that seed (generate() uses the sequence's index in the batch)
  explicit SamplingRng(std::uint64_t seed = 0, std::uint64_t stream = 0) {
    std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                      static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
    engine_.seed(seq);
  }

  /// \brief Uniform in the open interval (0, 1): 53 random bits, centred in their cell.
  double uniform() noexcept { return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1p-53; }

  /// \brief An Exp(1) draw, always > 0 and finite.
  double exponential() noexcept { return -std::log(uniform()); }

  /// \brief The underlying engine (for callers that draw other things from the same stream).
  std::mt19937_64& engine() noexcept { return engine_; }

 private:
  std::mt19937_64 engine_;
};

/// \brief The first maximum of `logits` (the reference's `argmax`).
/// \param logits [vocab] one row of logits
/// \return the id of the first maximum
/// \throws Error(invalid_argument) for an empty row or a NaN logit (its index is named).
inline std::int32_t argmax(std::span<const float> logits) {
  DSV32_CHECK(!logits.empty(), invalid_argument, "argmax: empty logits");
  std::size_t best = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    DSV32_CHECK(!std::isnan(logits[i]), invalid_argument, "sampling: logit ", i, " is NaN");
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

/// \brief Samples token ids from logit rows; holds scratch buffers, so one Sampler serves many
///        calls without allocating. Not safe to share between threads.
class Sampler {
 public:
  /// \param options how to choose tokens
  /// \throws Error(invalid_argument) when `options` are out of range (see SamplingOptions::validate).
  explicit Sampler(const SamplingOptions& options = {}) : options_((options.validate(), options)) {}

  /// \brief The options, as validated.
  const SamplingOptions& options() const noexcept { return options_; }

  /// \brief The next token for one row of logits (see the file description for the pipeline).
  /// \param logits [vocab] one sequence's logits
  /// \param rng    the sequence's random stream (unused when greedy)
  /// \return the chosen token id
  /// \throws Error(invalid_argument) for an empty row, a NaN or +inf logit, or only -inf logits.
  std::int32_t sample(std::span<const float> logits, SamplingRng& rng) {
    if (options_.greedy()) return argmax(logits);
    compute_distribution(logits);
    std::int32_t best = -1;
    double best_score = -1.0;
    for (std::size_t i = 0; i < probs_.size(); ++i) {
      if (probs_[i] <= 0.0f) continue;  // masked or truncated: can never win, draw nothing
      const double score = static_cast<double>(probs_[i]) / rng.exponential();
      if (score > best_score) {
        best_score = score;
        best = static_cast<std::int32_t>(i);
      }
    }
    return best;
  }

  /// \brief The distribution sample() draws from: after temperature, top-k and top-p, normalized
  ///        (greedy: one-hot at the argmax). Valid until the next call.
  /// \param logits [vocab]
  /// \return [vocab] probabilities
  std::span<const float> distribution(std::span<const float> logits) {
    if (options_.greedy()) {
      const std::int32_t best = argmax(logits);
      probs_.assign(logits.size(), 0.0f);
      probs_[static_cast<std::size_t>(best)] = 1.0f;
    } else {
      compute_distribution(logits);
    }
    return probs_;
  }

 private:
  // probs_ = softmax(logits / T), then truncated and renormalized; zero outside the kept set.
  void compute_distribution(std::span<const float> logits) {
    DSV32_CHECK(!logits.empty(), invalid_argument, "sampling: empty logits");
    const float inv_t = 1.0f / static_cast<float>(std::max(options_.temperature, 1e-5));
    const std::size_t n = logits.size();
    probs_.resize(n);
    float max_x = -INFINITY;
    for (std::size_t i = 0; i < n; ++i) {
      const float v = logits[i];
      DSV32_CHECK(!std::isnan(v) && v != INFINITY, invalid_argument, "sampling: logit ", i, " is ", v,
                  " (logits must be finite or -inf)");
      probs_[i] = v * inv_t;
      max_x = std::max(max_x, probs_[i]);
    }
    DSV32_CHECK(max_x > -INFINITY, invalid_argument, "sampling: every logit is -inf");
    if (max_x == INFINITY) {  // logits / T overflowed f32: the T -> 0 limit, all mass on the argmax
      const std::int32_t best = argmax(logits);
      std::fill(probs_.begin(), probs_.end(), 0.0f);
      probs_[static_cast<std::size_t>(best)] = 1.0f;
      return;
    }
    double sum = 0.0;
    for (float& p : probs_) {
      p = std::exp(p - max_x);
      sum += p;
    }
    scale(sum);

    const bool cut_k = options_.top_k > 0 && static_cast<std::size_t>(options_.top_k) < n;
    const bool cut_p = options_.top_p < 1.0;
    if (!cut_k && !cut_p) return;
    // Candidates most probable first; ties broken by the lower id (so top_k = 1 is the argmax).
    order_.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (probs_[i] > 0.0f) order_.push_back(static_cast<std::int32_t>(i));
    const auto before = [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::size_t keep = order_.size();
    if (cut_k && static_cast<std::size_t>(options_.top_k) < keep) {
      keep = static_cast<std::size_t>(options_.top_k);
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), order_.end(), before);
      order_.resize(keep);
      if (!cut_p) return truncate_to_order();
      std::sort(order_.begin(), order_.end(), before);
    }
    if (cut_p) {
      // The mass of the kept set, to renormalize after top-k before comparing with top_p.
      double mass = 0.0;
      for (std::int32_t i : order_) mass += probs_[i];
      // Sort only as far as needed: the nucleus is usually a small prefix of the vocabulary.
      const double target = options_.top_p * mass;
      double cumulative = 0.0;
      std::size_t sorted = 0, chunk = 64;
      keep = order_.size();
      for (bool found = false; !found && sorted < order_.size(); chunk *= 2) {
        const std::size_t end = std::min(order_.size(), sorted + chunk);
        if (!cut_k) std::partial_sort(order_.begin() + static_cast<std::ptrdiff_t>(sorted),
                                      order_.begin() + static_cast<std::ptrdiff_t>(end), order_.end(), before);
        for (; sorted < end; ++sorted) {
          cumulative += probs_[order_[sorted]];
          if (cumulative >= target) {
            keep = sorted + 1;
            found = true;
            break;
          }
        }
      }
      order_.resize(keep);
    }
    truncate_to_order();
  }

  // Zero every probability outside order_, renormalize the rest.
  void truncate_to_order() {
    kept_.assign(probs_.size(), 0.0f);
    double sum = 0.0;
    for (std::int32_t i : order_) {
      kept_[static_cast<std::size_t>(i)] = probs_[static_cast<std::size_t>(i)];
      sum += probs_[static_cast<std::size_t>(i)];
    }
    probs_.swap(kept_);
    scale(sum);
  }

  void scale(double sum) {
    const float inv = static_cast<float>(1.0 / sum);
    for (float& p : probs_) p *= inv;
  }

  SamplingOptions options_;
  std::vector<float> probs_, kept_;    // [vocab]
  std::vector<std::int32_t> order_;    // candidate ids, most probable first once sorted
};

/// @}

}  // namespace dsv32
