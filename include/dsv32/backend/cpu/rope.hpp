/// \file
/// \brief CPU: rotary position embedding on interleaved or half-split pairs.
#pragma once

#include <cstdint>

#include "dsv32/core/numeric.hpp"

namespace dsv32::cpu {

namespace detail {
// Rotates the `heads` heads of one token at position `pos` (see rope()).
inline void rope_token(bf16* token, std::int64_t heads, std::int64_t head_stride, std::int64_t rope_dim, std::int64_t pos,
                       const float* cos, const float* sin, bool interleaved) {
  const std::int64_t half = rope_dim / 2;
  const float* c = cos + pos * half;
  const float* s = sin + pos * half;
  for (std::int64_t h = 0; h < heads; ++h) {
    bf16* x = token + h * head_stride;
    for (std::int64_t i = 0; i < half; ++i) {
      bf16& xa = interleaved ? x[2 * i] : x[i];
      bf16& xb = interleaved ? x[2 * i + 1] : x[i + half];
      const float a = static_cast<float>(xa), b = static_cast<float>(xb);
      xa = bf16(a * c[i] - b * s[i]);
      xb = bf16(a * s[i] + b * c[i]);
    }
  }
}
}  // namespace detail

/// \brief Rotates the RoPE slice of every head of every token by its position's angles, in f32,
///        rounding the result to bf16.
///
/// Token row t sits at position start_pos + t % seq_len (rows are [batch, seq] flattened). Its
/// head h holds `rope_dim` values at `data + t * token_stride + h * head_stride`. Interleaved
/// layout pairs (2i, 2i+1); the half-split layout pairs (i, i + rope_dim/2).
/// \param data         bf16, rotated in place
/// \param tokens       token rows (batch * seq)
/// \param token_stride elements between consecutive tokens
/// \param heads        heads per token
/// \param head_stride  elements between consecutive heads of a token
/// \param rope_dim     rotated values per head (even)
/// \param seq_len      tokens per sequence of this call
/// \param start_pos    position of each sequence's first token
/// \param cos, sin     [max_seq_len, rope_dim / 2] f32 tables (RopeTable)
/// \param interleaved  pairs (2i, 2i+1) instead of (i, i + rope_dim/2)
inline void rope(bf16* data, std::int64_t tokens, std::int64_t token_stride, std::int64_t heads,
                 std::int64_t head_stride, std::int64_t rope_dim, std::int64_t seq_len, std::int64_t start_pos,
                 const float* cos, const float* sin, bool interleaved) {
  for (std::int64_t t = 0; t < tokens; ++t)
    detail::rope_token(data + t * token_stride, heads, head_stride, rope_dim, start_pos + t % seq_len, cos, sin,
                       interleaved);
}

/// \brief rope() with each token's own position: token row t sits at position positions[t] (a
///        ragged pass, every sequence at its own position).
/// \param data         bf16, rotated in place
/// \param tokens       token rows
/// \param token_stride elements between consecutive tokens
/// \param heads        heads per token
/// \param head_stride  elements between consecutive heads of a token
/// \param rope_dim     rotated values per head (even)
/// \param positions    [tokens] positions, each within the tables' rows
/// \param cos, sin     [max_seq_len, rope_dim / 2] f32 tables (RopeTable)
/// \param interleaved  pairs (2i, 2i+1) instead of (i, i + rope_dim/2)
inline void rope(bf16* data, std::int64_t tokens, std::int64_t token_stride, std::int64_t heads,
                 std::int64_t head_stride, std::int64_t rope_dim, const std::int32_t* positions, const float* cos,
                 const float* sin, bool interleaved) {
  for (std::int64_t t = 0; t < tokens; ++t)
    detail::rope_token(data + t * token_stride, heads, head_stride, rope_dim, positions[t], cos, sin, interleaved);
}

}  // namespace dsv32::cpu
