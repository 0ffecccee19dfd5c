/// \file
/// \brief KvCache: the model's paged caches — per layer, MLA's latent and rotated key and the indexer's
///        FP8 keys — in one pool of fixed-size pages, and the cache's bytes per token and per page.
///
/// A page holds `page_size` consecutive positions of one sequence in every layer; a sequence's block
/// table lists its pages in position order (CachePages). The pool only stores: which sequence owns
/// which page is decided by its user — Transformer::forward(tokens, batch, start_pos) gives each of
/// its max_batch_size sequences one page of max_seq_len positions (the reference's rectangular
/// caches), the serving engine (<dsv32/serving/engine.hpp>) hands out pages of 64 positions from a
/// memory budget, shares full pages between sequences with the same prefix and frees them when done.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Cache bytes per (sequence, position) of one layer's indexer: index_head_dim E4M3 codes and
///        index_head_dim / 128 f32 scales.
constexpr std::size_t indexer_cache_bytes_per_token(const ModelArgs& a) {
  return static_cast<std::size_t>(a.index_head_dim + a.index_head_dim / kBlockSize * 4);
}

/// \brief Cache bytes per (sequence, position) of one layer: the bf16 latent and rotated key, and the
///        indexer's FP8 keys with their scales.
constexpr std::size_t mla_cache_bytes_per_token(const ModelArgs& a) {
  return static_cast<std::size_t>(a.kv_lora_rank + a.qk_rope_head_dim) * sizeof(bf16) +
         indexer_cache_bytes_per_token(a);
}

/// \brief Cache bytes of one page of `page_size` positions in every layer of a model with fields `a`.
inline std::size_t cache_bytes_per_page(const ModelArgs& a, std::int64_t page_size) {
  return static_cast<std::size_t>(elements(a.n_layers, page_size, mla_cache_bytes_per_token(a)));
}

/// \brief The default page size: 64 positions, FlashMLA's block size.
inline constexpr std::int64_t kDefaultPageSize = 64;

/// \brief One layer's part of a KvCache: rows are positions (page p holds rows [p P, p P + P)).
/// \tparam Backend backend tag
template <class Backend>
struct LayerCache {
  Tensor<bf16, Backend> latent;               ///< [rows, kv_lora_rank] kv_norm'd latents
  Tensor<bf16, Backend> rope;                 ///< [rows, qk_rope_head_dim] rotated shared keys
  Tensor<std::uint8_t, Backend> index_keys;   ///< [rows, index_head_dim] the indexer's E4M3 keys
  Tensor<float, Backend> index_scales;        ///< [rows, index_head_dim / 128] their f32 scales
};

/// \brief The caches of every layer of a model (this rank's: every rank caches all positions), as a
///        pool of `pages` pages of `page_size` positions.
/// \tparam Backend backend tag whose memory holds the pool
template <class Backend>
class KvCache {
 public:
  /// \brief Largest number of rows (pages x page_size) a pool may have: rows are addressed by 32-bit
  ///        integers in the kernels' block tables and selections.
  static constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();

  /// \brief An empty cache (no pages).
  KvCache() = default;

  /// \brief Allocates `pages` zero-filled pages of `page_size` positions for every layer of a model
  ///        with fields `a`.
  /// \throws Error(invalid_argument) unless pages >= 1, page_size >= 1 and pages x page_size <= kMaxRows
  KvCache(const ModelArgs& a, std::int64_t pages, std::int64_t page_size) : pages_(pages), page_size_(page_size) {
    DSV32_CHECK(pages >= 1 && page_size >= 1, invalid_argument, "KvCache: ", pages, " pages of ", page_size,
                " positions (both must be >= 1)");
    DSV32_CHECK(elements(pages, page_size) <= kMaxRows, invalid_argument, "KvCache: ", pages, " pages of ", page_size,
                " positions exceed the ", kMaxRows, " rows a pool may address");
    const std::int64_t rows = pages * page_size;
    layers_.resize(static_cast<std::size_t>(a.n_layers));
    for (LayerCache<Backend>& l : layers_) {
      l.latent = Tensor<bf16, Backend>(Shape{rows, a.kv_lora_rank});
      l.rope = Tensor<bf16, Backend>(Shape{rows, a.qk_rope_head_dim});
      l.index_keys = Tensor<std::uint8_t, Backend>(Shape{rows, a.index_head_dim});
      l.index_scales = Tensor<float, Backend>(Shape{rows, a.index_head_dim / kBlockSize});
    }
    bytes_ = cache_bytes_per_page(a, page_size) * static_cast<std::size_t>(pages);
  }

  /// \brief Pages in the pool.
  std::int64_t pages() const noexcept { return pages_; }
  /// \brief Positions per page.
  std::int64_t page_size() const noexcept { return page_size_; }
  /// \brief Positions the pool holds: pages() x page_size().
  std::int64_t tokens() const noexcept { return pages_ * page_size_; }
  /// \brief Backend bytes the pool holds.
  std::size_t bytes() const noexcept { return bytes_; }
  /// \brief Whether the pool has no pages.
  bool empty() const noexcept { return pages_ == 0; }
  /// \brief Layer `i`'s caches (unchecked).
  LayerCache<Backend>& layer(int i) noexcept { return layers_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<LayerCache<Backend>> layers_;
  std::int64_t pages_ = 0, page_size_ = 0;
  std::size_t bytes_ = 0;
};

/// \brief What a memory budget buys in cache pages (plan_page_pool()).
struct PagePoolPlan {
  std::int64_t page_size = 0;       ///< positions per page
  std::int64_t pages = 0;           ///< pages that fit in the budget
  std::int64_t tokens = 0;          ///< positions they hold: pages x page_size
  std::size_t bytes_per_page = 0;   ///< every layer's cache of one page
  std::size_t bytes = 0;            ///< pages x bytes_per_page (<= the budget)
};

/// \brief The page pool a budget of `budget_bytes` holds for a model with fields `a` (pages of
///        `page_size` positions, every layer; at most KvCache::kMaxRows positions).
/// \throws Error(invalid_argument) when page_size < 1
inline PagePoolPlan plan_page_pool(const ModelArgs& a, std::size_t budget_bytes, std::int64_t page_size = kDefaultPageSize) {
  DSV32_CHECK(page_size >= 1, invalid_argument, "page pool: page_size must be >= 1, got ", page_size);
  PagePoolPlan p;
  p.page_size = page_size;
  p.bytes_per_page = cache_bytes_per_page(a, page_size);
  p.pages = static_cast<std::int64_t>(budget_bytes / p.bytes_per_page);
  p.pages = std::min<std::int64_t>(p.pages, std::numeric_limits<std::int32_t>::max() / page_size);
  p.tokens = p.pages * page_size;
  p.bytes = static_cast<std::size_t>(p.pages) * p.bytes_per_page;
  return p;
}

/// @}

}  // namespace dsv32
