/// \file
/// \brief GenerationGroup: generation with a model split over ranks when only rank 0 reads the input
///        and writes the output (a command-line tool, a server's front end). Rank 0 calls
///        generate(); every other rank calls serve(), which makes the same calls with the prompts and
///        options rank 0 broadcasts.
///
/// \code
/// dsv32::GenerationGroup group(model);            // model: this rank's part, loaded
/// if (group.leader()) {
///   auto r = group.generate(prompts, options);     // streams through options.on_token, on rank 0 only
///   group.finish();                                // the other ranks return from serve()
/// } else {
///   group.serve();
/// }
/// \endcode
///
/// What travels (over the communicator's host control plane, CommunicatorBase::broadcast_host()):
/// per generate() call the prompts' token ids and the options (lengths, eos, sampling, seeds); then,
/// when rank 0 has an on_token callback, one byte per streamed token saying whether rank 0's callback
/// asked to stop that sequence, so that every rank stops where rank 0 stops. Sampling needs nothing
/// more: every rank holds the same logits (the head's all-gather) and the same random streams.
/// An observer in the options is rank 0's own; the other ranks run without one.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "dsv32/core/error.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/generate/generate.hpp"

namespace dsv32 {

/// \addtogroup generate
/// @{

/// \brief The ranks of a model-parallel group generating together, led by rank 0 (see the file's
///        documentation). With one rank, generate() is plain dsv32::generate().
/// \tparam Model a Transformer (anything generate() accepts, with parallel())
template <GenerationModel Model>
class GenerationGroup {
 public:
  /// \brief The group of `model`'s communicator (model.parallel()); the model must outlive it.
  explicit GenerationGroup(Model& model) : model_(model), comm_(model.parallel().comm) {
    if (model.parallel().world_size == 1) comm_ = nullptr;
  }
  GenerationGroup(const GenerationGroup&) = delete;
  GenerationGroup& operator=(const GenerationGroup&) = delete;
  /// \brief On rank 0, finish() unless already done or out of step (see broken()).
  ~GenerationGroup() {
    if (leader() && !finished_ && !broken_) {
      try {
        finish();
      } catch (...) {  // the group is going away with an error already
      }
    }
  }

  /// \brief Whether this is rank 0, which calls generate() and finish().
  bool leader() const noexcept { return comm_ == nullptr || comm_->rank() == 0; }

  /// \brief Rank 0: generates on every rank, as dsv32::generate(model, prompts, options).
  ///
  /// The arguments are checked before anything is sent, so bad arguments throw on rank 0 only and
  /// the group stays usable. When options.on_token throws, every rank stops at that token: rank 0
  /// rethrows, the others go back to waiting in serve(), and the group stays usable. Any other
  /// failure during the run (the model's) leaves the ranks out of step: broken() is then true, and
  /// the caller must end the group (MpiSession::abort(), ThreadCommunicator::abort()).
  /// \throws Error(state) when called on another rank than 0 or after finish(); as dsv32::generate().
  GenerationResult generate(const std::vector<std::vector<std::int32_t>>& prompts, const GenerateOptions& options) {
    if (comm_ == nullptr) return dsv32::generate(model_, prompts, options);
    DSV32_CHECK(leader(), state, "GenerationGroup::generate is rank 0's call; rank ", comm_->rank(), " calls serve()");
    DSV32_CHECK(!finished_ && !broken_, state, "GenerationGroup::generate after ",
                finished_ ? "finish()" : "a failure that left the ranks out of step");
    validate_generate_arguments(prompts, options, model_.options(), Model::config_type::vocab_size);
    send_request(prompts, options);
    GenerateOptions o = options;
    if (options.on_token)
      o.on_token = [&](std::size_t sequence, std::int32_t token) {
        std::byte verdict{kStop};
        try {
          verdict = std::byte{options.on_token(sequence, token) ? kContinue : kStop};
        } catch (...) {
          verdict = std::byte{kLeaderFailed};
          callback_failed_ = true;  // every rank stops here: the group stays in step
          comm_->broadcast_host(std::span(&verdict, 1), 0);
          throw;
        }
        comm_->broadcast_host(std::span(&verdict, 1), 0);
        return verdict == std::byte{kContinue};
      };
    try {
      return dsv32::generate(model_, prompts, o);
    } catch (...) {
      if (!callback_failed_) broken_ = true;
      callback_failed_ = false;
      throw;
    }
  }

  /// \brief Ranks other than 0: makes rank 0's generate() calls, until rank 0 calls finish().
  /// \throws Error(state) on rank 0; what the model throws (the group is then out of step, broken()).
  void serve() {
    if (comm_ == nullptr) return;
    DSV32_CHECK(!leader(), state, "GenerationGroup::serve is for ranks other than 0; rank 0 calls generate()");
    for (;;) {
      std::vector<std::vector<std::int32_t>> prompts;
      GenerateOptions options;
      if (!receive_request(prompts, options)) return;
      bool leader_failed = false;
      if (options.on_token)  // rank 0 streams: stop where its callback stops
        options.on_token = [&](std::size_t, std::int32_t) {
          std::byte verdict{};
          comm_->broadcast_host(std::span(&verdict, 1), 0);
          if (verdict == std::byte{kLeaderFailed}) {
            leader_failed = true;
            fail(ErrorKind::state, "GenerationGroup: rank 0's token callback failed");
          }
          return verdict == std::byte{kContinue};
        };
      try {
        dsv32::generate(model_, prompts, options);
      } catch (...) {
        if (!leader_failed) {
          broken_ = true;
          throw;
        }
      }
    }
  }

  /// \brief Rank 0: releases the other ranks from serve(). Called by the destructor if not before.
  void finish() {
    if (comm_ == nullptr || finished_) return;
    DSV32_CHECK(leader(), state, "GenerationGroup::finish is rank 0's call");
    std::int64_t header[kHeaderWords] = {};
    header[0] = kFinish;
    comm_->broadcast_host(std::as_writable_bytes(std::span(header)), 0);
    finished_ = true;
  }

  /// \brief Whether a failure left the ranks out of step (see generate()); the group must then be ended.
  bool broken() const noexcept { return broken_; }

 private:
  static constexpr unsigned char kStop = 0, kContinue = 1, kLeaderFailed = 2;
  static constexpr std::int64_t kFinish = 0, kGenerate = 1;
  static constexpr std::size_t kHeaderWords = 12;

  // The request as 64-bit words: a fixed header, then the prompts' lengths, their ids and the seeds.
  void send_request(const std::vector<std::vector<std::int32_t>>& prompts, const GenerateOptions& o) {
    std::int64_t ids = 0;
    for (const auto& p : prompts) ids += static_cast<std::int64_t>(p.size());
    std::int64_t header[kHeaderWords] = {kGenerate,
                                         static_cast<std::int64_t>(prompts.size()),
                                         ids,
                                         static_cast<std::int64_t>(o.seeds.size()),
                                         o.max_new_tokens,
                                         o.eos_id.has_value(),
                                         o.eos_id.value_or(0),
                                         o.sampling.top_k,
                                         std::bit_cast<std::int64_t>(o.sampling.temperature),
                                         std::bit_cast<std::int64_t>(o.sampling.top_p),
                                         std::bit_cast<std::int64_t>(o.seed),
                                         static_cast<bool>(o.on_token)};
    comm_->broadcast_host(std::as_writable_bytes(std::span(header)), 0);
    std::vector<std::int64_t> payload;
    payload.reserve(prompts.size() + static_cast<std::size_t>(ids) + o.seeds.size());
    for (const auto& p : prompts) payload.push_back(static_cast<std::int64_t>(p.size()));
    for (const auto& p : prompts) payload.insert(payload.end(), p.begin(), p.end());
    for (std::uint64_t s : o.seeds) payload.push_back(std::bit_cast<std::int64_t>(s));
    comm_->broadcast_host(std::as_writable_bytes(std::span(payload)), 0);
  }
  // Receives a request; false for finish.
  bool receive_request(std::vector<std::vector<std::int32_t>>& prompts, GenerateOptions& o) {
    std::int64_t header[kHeaderWords] = {};
    comm_->broadcast_host(std::as_writable_bytes(std::span(header)), 0);
    if (header[0] == kFinish) return false;
    const auto n = static_cast<std::size_t>(header[1]), ids = static_cast<std::size_t>(header[2]),
               seeds = static_cast<std::size_t>(header[3]);
    o.max_new_tokens = header[4];
    if (header[5] != 0) o.eos_id = static_cast<std::int32_t>(header[6]);
    o.sampling.top_k = header[7];
    o.sampling.temperature = std::bit_cast<double>(header[8]);
    o.sampling.top_p = std::bit_cast<double>(header[9]);
    o.seed = std::bit_cast<std::uint64_t>(header[10]);
    if (header[11] != 0) o.on_token = [](std::size_t, std::int32_t) { return true; };  // replaced by serve()
    std::vector<std::int64_t> payload(n + ids + seeds);
    comm_->broadcast_host(std::as_writable_bytes(std::span(payload)), 0);
    prompts.resize(n);
    std::size_t at = n;
    for (std::size_t b = 0; b < n; ++b) {
      const auto len = static_cast<std::size_t>(payload[b]);
      prompts[b].assign(payload.begin() + static_cast<std::ptrdiff_t>(at),
                        payload.begin() + static_cast<std::ptrdiff_t>(at + len));
      at += len;
    }
    for (std::size_t s = 0; s < seeds; ++s) o.seeds.push_back(std::bit_cast<std::uint64_t>(payload[at + s]));
    return true;
  }

  Model& model_;
  CommunicatorBase* comm_ = nullptr;
  bool finished_ = false, broken_ = false, callback_failed_ = false;
};

/// @}

}  // namespace dsv32
