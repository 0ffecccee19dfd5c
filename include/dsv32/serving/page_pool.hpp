/// \file
/// \brief PagePool: the bookkeeping of a paged KV cache — which pages are free, which are held by how
///        many sequences, and which full pages are kept for prefix reuse (vLLM's block pool).
///
/// Pages are ids into a KvCache's pool. A page is *used* while at least one sequence holds it
/// (refcount > 0), *cached* once released if it is full and registered under its prefix key (kept
/// for a later request with the same prefix, evicted least recently released first when pages run
/// out), and *free* otherwise. The prefix key of a full page chains the key of the page before it
/// with the page's own tokens, so one key names a whole prefix: a request looks up its prompt page by
/// page and shares every page that matches (SGLang's radix tree and vLLM's hash chain say the same).
/// Keys are 64-bit hashes; a lookup also compares the page's tokens and its parent key, so that a hash
/// collision can only miss, never return another prefix's page.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \defgroup serving Serving
/// \brief Continuous batching over a paged cache: the page pool, the engine.
/// @{

/// \brief Free, used and cached pages of a paged cache, with the prefix cache's keys.
///
/// Not thread-safe: the engine's scheduler owns it.
class PagePool {
 public:
  /// \brief The key of the empty prefix (the parent of a sequence's first page).
  static constexpr std::uint64_t kRootKey = 0x9E3779B97F4A7C15ull;

  /// \brief A pool of `pages` pages of `page_size` positions, all free.
  /// \param pages          pages in the pool (the KvCache's)
  /// \param page_size      positions per page
  /// \param prefix_caching keep released full pages for reuse (false: they are freed at once)
  /// \throws Error(invalid_argument) unless pages >= 1 and page_size >= 1
  PagePool(std::int64_t pages, std::int64_t page_size, bool prefix_caching = true)
      : page_size_(page_size), caching_(prefix_caching), pages_(static_cast<std::size_t>(pages > 0 ? pages : 0)) {
    DSV32_CHECK(pages >= 1 && page_size >= 1, invalid_argument, "PagePool: ", pages, " pages of ", page_size,
                " positions (both must be >= 1)");
    free_.reserve(pages_.size());
    for (std::int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<std::int32_t>(p));  // page 0 first
  }

  /// \brief Pages in the pool.
  std::int64_t pages() const noexcept { return static_cast<std::int64_t>(pages_.size()); }
  /// \brief Positions per page.
  std::int64_t page_size() const noexcept { return page_size_; }
  /// \brief Pages held by at least one sequence.
  std::int64_t used_pages() const noexcept { return used_; }
  /// \brief Released full pages kept for prefix reuse (evictable).
  std::int64_t cached_pages() const noexcept { return static_cast<std::int64_t>(lru_.size()); }
  /// \brief Pages neither used nor cached.
  std::int64_t free_pages() const noexcept { return static_cast<std::int64_t>(free_.size()); }
  /// \brief Pages allocate() can hand out now: free and cached ones.
  std::int64_t available_pages() const noexcept { return free_pages() + cached_pages(); }
  /// \brief Whether released full pages are kept for reuse.
  bool prefix_caching() const noexcept { return caching_; }
  /// \brief How many sequences hold page `page` (unchecked id).
  std::int32_t refcount(std::int32_t page) const noexcept { return pages_[static_cast<std::size_t>(page)].refs; }

  /// \brief A page for one sequence (refcount 1): a free page, else the least recently released cached
  ///        one (its prefix key forgotten); none when every page is used.
  std::optional<std::int32_t> allocate() {
    std::int32_t p;
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    } else if (!lru_.empty()) {
      p = lru_.front();
      lru_.pop_front();
      forget(p);
    } else {
      return std::nullopt;
    }
    Page& page = pages_[static_cast<std::size_t>(p)];
    page.refs = 1;
    ++used_;
    return p;
  }

  /// \brief Drops one sequence's hold on `page`; at zero the page is cached if it carries a prefix key,
  ///        freed otherwise.
  /// \throws Error(state) for a page id outside the pool or a page nobody holds
  void release(std::int32_t page) {
    check_id(page);
    Page& p = pages_[static_cast<std::size_t>(page)];
    DSV32_CHECK(p.refs > 0, state, "PagePool: page ", page, " released but not held");
    if (--p.refs > 0) return;
    --used_;
    if (p.registered && caching_) {
      p.lru = lru_.insert(lru_.end(), page);
    } else {
      forget(page);
      free_.push_back(page);
    }
  }

  /// \brief The prefix key of a page holding `tokens`, computed as `tag` says, after the prefix keyed `parent`.
  static std::uint64_t page_key(std::uint64_t parent, std::span<const std::int32_t> tokens, std::uint32_t tag = 0) noexcept {
    std::uint64_t h = (parent ^ 0xD6E8FEB86659FD93ull) + tag * 0xA24BAED4963EE407ull;
    for (const std::int32_t t : tokens) {
      h ^= static_cast<std::uint32_t>(t);
      h *= 0x100000001B3ull;
      h ^= h >> 29;
    }
    h ^= static_cast<std::uint64_t>(tokens.size()) * 0x9E3779B97F4A7C15ull;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
  }

  /// \brief The longest run of cached or used pages that hold `tokens` from position 0, page by page,
  ///        each computed as its tag says (full pages only, at most `max_pages`): each is held once more
  ///        by the caller (refcount +1) and listed in order. With prefix caching off: none.
  /// \param tokens    the prefix to look up (its partial last page is ignored)
  /// \param max_pages the most pages to share
  /// \param tag       tag(i): the tag page i must carry (how the caller would compute its positions)
  template <class Tag>
  std::vector<std::int32_t> match(std::span<const std::int32_t> tokens, std::int64_t max_pages, Tag&& tag) {
    std::vector<std::int32_t> out;
    if (!caching_) return out;
    std::uint64_t key = kRootKey;
    const std::int64_t full = static_cast<std::int64_t>(tokens.size()) / page_size_;
    for (std::int64_t i = 0; i < std::min(full, max_pages); ++i) {
      const auto page_tokens = tokens.subspan(static_cast<std::size_t>(i * page_size_), static_cast<std::size_t>(page_size_));
      const std::uint32_t t = tag(i);
      const std::uint64_t next = page_key(key, page_tokens, t);
      const auto it = index_.find(next);
      if (it == index_.end()) break;
      const Page& p = pages_[static_cast<std::size_t>(it->second)];
      if (p.parent != key || p.tag != t ||
          !std::equal(p.tokens.begin(), p.tokens.end(), page_tokens.begin(), page_tokens.end()))
        break;
      hold(it->second);
      out.push_back(it->second);
      key = next;
    }
    return out;
  }
  /// \brief match() of pages tagged 0.
  std::vector<std::int32_t> match(std::span<const std::int32_t> tokens, std::int64_t max_pages) {
    return match(tokens, max_pages, [](std::int64_t) { return std::uint32_t{0}; });
  }

  /// \brief Registers full page `page` (held by the caller) as holding `tokens`, computed as `tag` says,
  ///        after the prefix keyed `parent`, unless a page with that key exists already; returns the key,
  ///        the parent of the sequence's next page. With prefix caching off nothing is registered.
  /// \throws Error(invalid_argument) unless tokens has page_size() entries; Error(state) for a page not held
  std::uint64_t register_page(std::int32_t page, std::uint64_t parent, std::span<const std::int32_t> tokens,
                              std::uint32_t tag = 0) {
    check_id(page);
    DSV32_CHECK(static_cast<std::int64_t>(tokens.size()) == page_size_, invalid_argument, "PagePool: a full page holds ",
                page_size_, " tokens, got ", tokens.size());
    Page& p = pages_[static_cast<std::size_t>(page)];
    DSV32_CHECK(p.refs > 0, state, "PagePool: page ", page, " registered but not held");
    const std::uint64_t key = page_key(parent, tokens, tag);
    if (!caching_ || p.registered || index_.count(key)) return key;
    p.registered = true;
    p.key = key;
    p.parent = parent;
    p.tag = tag;
    p.tokens.assign(tokens.begin(), tokens.end());
    index_.emplace(key, page);
    return key;
  }

 private:
  struct Page {
    std::int32_t refs = 0;
    bool registered = false;
    std::uint64_t key = 0, parent = 0;
    std::uint32_t tag = 0;
    std::vector<std::int32_t> tokens;      // a registered page's tokens, compared on lookup
    std::list<std::int32_t>::iterator lru;  // its place in lru_ while cached
  };

  void check_id(std::int32_t page) const {
    DSV32_CHECK(page >= 0 && page < pages(), state, "PagePool: page ", page, " outside [0, ", pages(), ")");
  }
  // One more hold on a page found by match(): a cached page leaves the LRU list.
  void hold(std::int32_t page) {
    Page& p = pages_[static_cast<std::size_t>(page)];
    if (p.refs++ == 0) {
      lru_.erase(p.lru);
      ++used_;
    }
  }
  // Drops a page's prefix key.
  void forget(std::int32_t page) {
    Page& p = pages_[static_cast<std::size_t>(page)];
    if (p.registered) index_.erase(p.key);
    p.registered = false;
    p.tokens.clear();
  }

  std::int64_t page_size_;
  bool caching_;
  std::vector<Page> pages_;
  std::vector<std::int32_t> free_;                       // free page ids (a stack)
  std::list<std::int32_t> lru_;                          // cached pages, least recently released first
  std::unordered_map<std::uint64_t, std::int32_t> index_;  // prefix key -> registered page
  std::int64_t used_ = 0;
};

/// @}

}  // namespace dsv32
