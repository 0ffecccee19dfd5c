/// \file
/// \brief Runtime options of a model: serving limits and the RoPE/YaRN scalars.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup config
/// @{

/// \brief What the reference's ModelArgs holds besides shapes, with its defaults. KV caches are
///        sized by max_batch_size x max_seq_len; YaRN (and the mscale softmax correction) is on
///        when max_seq_len > original_seq_len.
struct RuntimeOptions {
  std::int64_t max_batch_size = 8;      ///< sequences per forward call; the caches hold this many
  std::int64_t max_seq_len = 16384;     ///< positions per sequence the caches and RoPE tables hold
  std::int64_t original_seq_len = 4096; ///< pre-training context YaRN extends (HF `original_max_position_embeddings`)
  double rope_theta = 10000.0;          ///< RoPE base: pair i turns at theta^(-2i/rope_dim) radians per position
  double rope_factor = 40.0;            ///< YaRN: slow pairs' frequencies are divided by it (HF `rope_scaling.factor`)
  std::int64_t beta_fast = 32;          ///< YaRN: pairs turning more often than this over original_seq_len keep theirs
  std::int64_t beta_slow = 1;           ///< YaRN: pairs turning less often than this are fully divided by rope_factor
  double mscale = 1.0;                  ///< YaRN softmax correction (HF `mscale_all_dim`); see mla_softmax_scale()

  /// Tokens per sequence one forward pass computes at once; 0 means max_seq_len (any call in one
  /// pass). Longer calls are split into consecutive passes of this many tokens (chunked prefill, equal
  /// to the one-shot result to about 1e-6 relative). Scratch memory is sized by max_batch_size times
  /// this, so a smaller value bounds a long prompt's working memory. A dsv32 option, not in config.json.
  std::int64_t max_tokens_per_call = 0;

  /// Prefill passes (more than one token per sequence) that end past this position (start_pos +
  /// tokens > absorbed_prefill_from) attend in the latent space — wkv_b folded into the query and the
  /// output, as the reference's decode does and FlashMLA's sparse prefill — instead of expanding every
  /// cached latent through wkv_b into per-head keys and values. The expanded path is the reference's
  /// prefill arithmetic (what the golden prefills reproduce exactly); the absorbed path is its decode
  /// arithmetic, so an absorbed prefill equals feeding the prompt token by token. The expanded path's
  /// cost and scratch grow with the context (wkv_b over every cached position for each pass, and
  /// end_pos x heads x (nope + v) bf16 of keys: ~10.7 GB at 160K positions on the 671B model); the
  /// absorbed path's scratch is 2 x 256 tokens x heads x kv_lora_rank bf16 (64 MiB on the 671B
  /// model) at any length, and its attention reads the latent cache of the selected positions. On
  /// the CPU backend the absorbed path was also faster from 512 tokens up (docs/performance.md);
  /// the default keeps the reference's prefill rounding for prompts of up to 1024 positions.
  /// 0: every prefill is absorbed. A dsv32 option, not in config.json.
  std::int64_t absorbed_prefill_from = 1024;

  /// \brief max_tokens_per_call with 0 resolved: the tokens per sequence of one forward pass.
  std::int64_t tokens_per_call() const noexcept {
    return max_tokens_per_call > 0 && max_tokens_per_call < max_seq_len ? max_tokens_per_call : max_seq_len;
  }

  /// \brief Largest max_batch_size validate() accepts.
  static constexpr std::int64_t kMaxBatchSize = std::int64_t{1} << 16;
  /// \brief Largest max_seq_len (and original_seq_len, beta_fast, beta_slow) validate() accepts:
  ///        16,777,216 positions, 100 times the released model's 163,840.
  static constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;
  /// \brief Largest max_batch_size x max_seq_len validate() accepts: cache sizes (this times the
  ///        bytes per position) then stay far inside 64-bit arithmetic.
  static constexpr std::int64_t kMaxCachedPositions = std::int64_t{1} << 32;

  /// \brief Whether YaRN frequency correction and the mscale softmax correction apply.
  bool yarn() const noexcept { return max_seq_len > original_seq_len; }

  /// \brief Throws an Error naming the first option out of range (the limits above included: the
  ///        options may come from an untrusted config.json).
  /// \param source where the options came from, for the message
  void validate(const std::string& source = "runtime options") const {
    DSV32_CHECK(max_batch_size >= 1 && max_batch_size <= kMaxBatchSize, invalid_config, source,
                ": max_batch_size must be in [1, ", kMaxBatchSize, "], got ", max_batch_size);
    DSV32_CHECK(max_seq_len >= 1 && max_seq_len <= kMaxSeqLen, invalid_config, source, ": max_seq_len must be in [1, ",
                kMaxSeqLen, "], got ", max_seq_len);
    DSV32_CHECK(max_batch_size * max_seq_len <= kMaxCachedPositions, invalid_config, source, ": max_batch_size x max_seq_len = ",
                max_batch_size * max_seq_len, " cached positions, more than the ", kMaxCachedPositions, " accepted");
    DSV32_CHECK(original_seq_len >= 1 && original_seq_len <= kMaxSeqLen, invalid_config, source,
                ": original_seq_len must be in [1, ", kMaxSeqLen, "], got ", original_seq_len);
    DSV32_CHECK(max_tokens_per_call >= 0, invalid_config, source, ": max_tokens_per_call must be >= 0 (0: max_seq_len), got ",
                max_tokens_per_call);
    DSV32_CHECK(absorbed_prefill_from >= 0, invalid_config, source,
                ": absorbed_prefill_from must be >= 0 (0: every prefill absorbed), got ", absorbed_prefill_from);
    DSV32_CHECK(rope_theta > 1.0 && std::isfinite(rope_theta), invalid_config, source, ": rope_theta must be > 1, got ", rope_theta);
    DSV32_CHECK(rope_factor > 0.0 && std::isfinite(rope_factor), invalid_config, source, ": rope_factor must be > 0, got ",
                rope_factor);
    DSV32_CHECK(beta_fast > 0 && beta_slow > 0 && beta_fast <= kMaxSeqLen && beta_slow <= kMaxSeqLen, invalid_config,
                source, ": beta_fast and beta_slow must be in [1, ", kMaxSeqLen, "], got ", beta_fast, " and ", beta_slow);
    DSV32_CHECK(std::isfinite(mscale), invalid_config, source, ": mscale must be finite");
  }
};

/// @}

}  // namespace dsv32
