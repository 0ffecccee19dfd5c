/// \file
/// \brief The byte-level BPE model: vocabulary, merge ranks, the merge loop and a bounded word
///        cache.
///
/// A piece of raw bytes starts as one symbol per byte (the vocabulary id of that byte's
/// byte-level character, see byte_level.hpp), then the adjacent pair with the lowest merge rank
/// is merged — leftmost first among equal ranks — until no adjacent pair has a merge. The loop is
/// the one of the reference implementation (`Word::merge_all`): a min-heap of candidate merges
/// keyed by (rank, position), stale entries skipped when the pair at that position no longer
/// produces the same token. Results for short pieces are cached per thread, since natural text
/// repeats its words.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dsv32/core/error.hpp"
#include "dsv32/tokenizer/byte_level.hpp"

namespace dsv32::bpe {

/// \addtogroup tokenizer
/// @{

/// \brief Hash for heterogeneous (`std::string_view`) lookup in string-keyed unordered maps.
struct StringHash {
  using is_transparent = void;  ///< enables lookup by `std::string_view`

  /// \brief Hash of the characters of `s`.
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

/// \brief Token text -> id, with lookup by `std::string_view`.
using Vocabulary = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

/// \brief One merge rule as written in `model.merges`: the left and right token texts.
using MergeRule = std::pair<std::string, std::string>;

/// \brief Open-addressing map from a pair of token ids to (rank, merged id).
///
/// The merge loop looks pairs up more often than anything else; a flat table with linear probing
/// is several times faster than `std::unordered_map` here.
class MergeTable {
 public:
  /// \brief A merge: its rank (position in `model.merges`) and the id it produces.
  struct Merge {
    std::uint32_t rank;   ///< position of the rule in `model.merges`; lower merges first
    std::int32_t new_id;  ///< id of the merged token
  };

  /// \param expected_size number of merges that will be inserted
  explicit MergeTable(std::size_t expected_size = 0) {
    std::size_t capacity = 16;
    while (capacity < expected_size * 2) capacity *= 2;
    slots_.assign(capacity, Slot{empty_key, {0, 0}});
    mask_ = capacity - 1;
  }

  /// \brief Inserts, or overwrites an earlier merge of the same pair (the later rule wins, as in
  ///        the reference implementation, which collects the rules into a hash map).
  void insert_or_assign(std::int32_t left, std::int32_t right, Merge merge) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    Slot& slot = probe(key(left, right));
    if (slot.key == empty_key) ++size_;
    slot = Slot{key(left, right), merge};
  }

  /// \brief The merge of the pair (left, right), or nullptr.
  const Merge* find(std::int32_t left, std::int32_t right) const noexcept {
    const std::uint64_t k = key(left, right);
    for (std::size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == k) return &slot.merge;
      if (slot.key == empty_key) return nullptr;
    }
  }

  /// \brief Number of distinct pairs.
  std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    std::uint64_t key;
    Merge merge;
  };
  static constexpr std::uint64_t empty_key = ~std::uint64_t{0};  // ids are < 2^31: never a real key

  static std::uint64_t key(std::int32_t left, std::int32_t right) noexcept {
    return (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
  }
  static std::size_t hash(std::uint64_t k) noexcept {  // murmur3 finaliser
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  Slot& probe(std::uint64_t k) noexcept {
    for (std::size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == k || slots_[i].key == empty_key) return slots_[i];
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{empty_key, {0, 0}});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key != empty_key) probe(s.key) = s;
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

/// \brief A bounded cache from piece bytes to token ids: a direct-mapped table of one-cache-line
///        entries, filled without allocating.
///
/// Pieces longer than max_piece bytes, or that merge into more than max_ids tokens, are not cached
/// (they are rare and long, so merging dominates anyway). A new entry replaces whatever was in its
/// slot, which keeps recent words. A WordCache is not thread-safe: BpeModel gives each thread its
/// own (see BpeModel::tokenize), so encoding never takes a lock.
class WordCache {
 public:
  static constexpr std::size_t max_piece = 22;  ///< longest cached piece, in bytes
  static constexpr std::size_t max_ids = 8;     ///< most ids a cached piece may merge into

  /// \param capacity number of entries, rounded up to a power of two (at least 1)
  explicit WordCache(std::size_t capacity) {
    std::size_t n = 1;
    while (n < capacity) n *= 2;
    entries_.assign(n, Entry{});
    mask_ = n - 1;
  }

  /// \brief Hash of a piece of at most max_piece bytes.
  static std::uint64_t hash(std::string_view piece) noexcept {
    std::uint64_t words[3] = {0, 0, 0};
    std::memcpy(words, piece.data(), std::min(piece.size(), sizeof words));
    std::uint64_t h = piece.size() * 0x9E3779B97F4A7C15ULL;
    for (std::uint64_t w : words) {
      h ^= w;
      h *= 0xff51afd7ed558ccdULL;
      h ^= h >> 32;
    }
    return h | 1;  // 0 marks an empty entry
  }

  /// \brief Appends the ids cached for `piece` (hashed as `h`) to `out`; false when absent.
  bool lookup(std::string_view piece, std::uint64_t h, std::vector<std::int32_t>& out) const {
    const Entry& e = entries_[(h >> 20) & mask_];
    if (e.hash != h || e.piece_size != piece.size() || std::memcmp(e.piece, piece.data(), piece.size()) != 0) {
      return false;
    }
    out.insert(out.end(), e.ids, e.ids + e.id_count);
    return true;
  }

  /// \brief Remembers the ids of `piece` (hashed as `h`) if it is small enough.
  void insert(std::string_view piece, std::uint64_t h, std::span<const std::int32_t> ids) noexcept {
    if (piece.size() > max_piece || ids.size() > max_ids) return;
    Entry& e = entries_[(h >> 20) & mask_];
    e.hash = h;
    e.piece_size = static_cast<std::uint8_t>(piece.size());
    e.id_count = static_cast<std::uint8_t>(ids.size());
    std::memcpy(e.piece, piece.data(), piece.size());
    std::copy(ids.begin(), ids.end(), e.ids);
  }

  /// \brief Number of entries.
  std::size_t capacity() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    std::uint64_t hash = 0;
    std::uint8_t piece_size = 0;
    std::uint8_t id_count = 0;
    char piece[max_piece] = {};
    std::int32_t ids[max_ids] = {};
  };
  static_assert(sizeof(Entry) == 64, "one entry per cache line");

  std::vector<Entry> entries_;
  std::size_t mask_ = 0;
};

namespace detail {
/// Distinct id of every BpeModel ever constructed, so that a thread's caches never serve a
/// model that merely reuses the address of a destroyed one.
inline std::atomic<std::uint64_t> next_bpe_model_id{1};
}  // namespace detail

/// \brief Byte-level BPE over a vocabulary and ranked merges.
class BpeModel {
 public:
  /// \brief Settings of the model that are not vocabulary or merges.
  struct Options {
    bool ignore_merges = false;         ///< `model.ignore_merges`: a piece that is a vocabulary
                                        ///< token is emitted whole, before any merging
    std::size_t cache_capacity = 16384; ///< entries of each thread's word cache (0 disables it)
  };

  /// \param vocab   token text (byte-level form) -> id
  /// \param merges  merge rules in rank order
  /// \param options see Options
  /// \param where   file name used in error messages
  /// \throws Error(invalid_file) when a merge names a token (or produces one) that is not in the
  ///         vocabulary, or a byte-level character is missing from the vocabulary.
  BpeModel(Vocabulary vocab, const std::vector<MergeRule>& merges, Options options, std::string_view where)
      : vocab_(std::move(vocab)), merges_(merges.size()), options_(options), id_(detail::next_bpe_model_id++) {
    for (unsigned b = 0; b < 256; ++b) {
      std::string symbol;
      utf8::append_code_point(symbol, byte_to_unicode(static_cast<std::uint8_t>(b)));
      const auto it = vocab_.find(symbol);
      if (it == vocab_.end()) {
        fail(ErrorKind::invalid_file, where, ": model.vocab lacks the byte-level token \"", symbol,
             "\" for byte 0x", hex_byte(b), "; a byte-level BPE vocabulary must hold all 256 (unk and byte "
             "fallback are not supported)");
      }
      byte_ids_[b] = it->second;
    }
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [left, right] = merges[rank];
      const std::int32_t left_id = id_of(left, where, rank, "left token");
      const std::int32_t right_id = id_of(right, where, rank, "right token");
      const std::int32_t new_id = id_of(left + right, where, rank, "merged token");
      merges_.insert_or_assign(left_id, right_id, {static_cast<std::uint32_t>(rank), new_id});
    }
  }

  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  /// \brief Appends the token ids of one pre-tokenized piece of raw bytes to `out`.
  void tokenize(std::string_view piece, std::vector<std::int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
      out.push_back(byte_ids_[static_cast<std::uint8_t>(piece[0])]);
      return;
    }
    if (options_.ignore_merges) {
      const auto it = vocab_.find(byte_level_encode(piece));
      if (it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    WordCache* cache = piece.size() <= WordCache::max_piece ? thread_cache() : nullptr;
    if (cache == nullptr) {
      merge(piece, out);
      return;
    }
    const std::uint64_t h = WordCache::hash(piece);
    if (cache->lookup(piece, h, out)) return;
    const std::size_t first = out.size();
    merge(piece, out);
    cache->insert(piece, h, std::span<const std::int32_t>(out).subspan(first));
  }

  /// \brief The id of a token given in byte-level form, if it is in the vocabulary.
  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }

  /// \brief The vocabulary (byte-level token text -> id).
  const Vocabulary& vocabulary() const noexcept { return vocab_; }

  /// \brief The merge table.
  const MergeTable& merges() const noexcept { return merges_; }

  /// \brief Vocabulary id of the byte-level character of byte `b`.
  std::int32_t byte_id(std::uint8_t b) const noexcept { return byte_ids_[b]; }

  /// \brief The options the model was built with.
  const Options& options() const noexcept { return options_; }

  /// \brief Appends the ids of one piece, merged without the cache.
  void merge(std::string_view piece, std::vector<std::int32_t>& out) const {
    if (piece.size() <= scan_merge_limit) {
      merge_by_scan(piece, out);
    } else {
      merge_by_heap(piece, out);
    }
  }

  /// \brief Pieces up to this many bytes are merged by merge_by_scan(), longer ones by
  ///        merge_by_heap(). Both give the same ids; the scan is faster for short pieces, the
  ///        heap keeps long ones (whitespace runs, CJK runs) from going quadratic.
  static constexpr std::size_t scan_merge_limit = 128;

  /// \brief The merge loop of the reference implementation (see the file description): a heap of
  ///        candidate merges keyed by (rank, position), stale entries skipped. O(n log n).
  void merge_by_heap(std::string_view piece, std::vector<std::int32_t>& out) const {
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Candidate> heap;
    symbols.clear();
    heap.clear();
    const auto n = static_cast<std::int32_t>(piece.size());
    for (std::int32_t i = 0; i < n; ++i) {
      symbols.push_back({byte_ids_[static_cast<std::uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, 1});
    }
    auto push_candidate = [&](std::int32_t pos) {
      const Symbol& s = symbols[pos];
      if (s.next < 0) return;
      if (const MergeTable::Merge* m = merges_.find(s.id, symbols[s.next].id)) {
        heap.push_back({m->rank, pos, m->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) push_candidate(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& current = symbols[top.pos];
      if (current.len == 0 || current.next < 0) continue;
      const Symbol right = symbols[current.next];
      const MergeTable::Merge* m = merges_.find(current.id, right.id);
      if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
      symbols[current.next].len = 0;
      current.id = top.new_id;
      current.len += right.len;
      current.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (current.prev >= 0) push_candidate(current.prev);
      push_candidate(top.pos);
    }
    for (const Symbol& s : symbols) {
      if (s.len > 0) out.push_back(s.id);
    }
  }

  /// \brief Repeatedly merges the adjacent pair of lowest (rank, position). O(n^2), no heap.
  ///
  /// Gives the ids of merge_by_heap(): the heap's top valid entry is always the live pair of
  /// lowest (rank, position), because every live pair was pushed when it formed, and a stale
  /// entry never passes the heap's check — a pair at a position only changes by growing its byte
  /// span, so it can never again produce the same token (same text, same length).
  void merge_by_scan(std::string_view piece, std::vector<std::int32_t>& out) const {
    constexpr std::uint32_t no_merge = ~std::uint32_t{0};
    thread_local std::vector<std::int32_t> ids;
    thread_local std::vector<MergeTable::Merge> pair;  // pair[i]: merge of (ids[i], ids[i + 1])
    const std::size_t n = piece.size();
    ids.resize(n);
    pair.resize(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = byte_ids_[static_cast<std::uint8_t>(piece[i])];
    auto lookup = [&](std::size_t i) {
      const MergeTable::Merge* m = merges_.find(ids[i], ids[i + 1]);
      pair[i] = m != nullptr ? *m : MergeTable::Merge{no_merge, 0};
    };
    for (std::size_t i = 0; i + 1 < n; ++i) lookup(i);
    std::size_t size = n;
    while (size > 1) {
      std::size_t best = 0;
      for (std::size_t i = 1; i + 1 < size; ++i) {
        if (pair[i].rank < pair[best].rank) best = i;
      }
      if (pair[best].rank == no_merge) break;
      ids[best] = pair[best].new_id;
      --size;
      for (std::size_t i = best + 1; i < size; ++i) {
        ids[i] = ids[i + 1];
        pair[i] = pair[i + 1];
      }
      if (best + 1 < size) lookup(best);
      if (best > 0) lookup(best - 1);
    }
    out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(size));
  }

 private:
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;  // index of the previous live symbol, -1 at the start
    std::int32_t next;  // index of the next live symbol, -1 at the end
    std::int32_t len;   // bytes covered; 0 once merged into its left neighbour
  };
  struct Candidate {
    std::uint32_t rank;
    std::int32_t pos;
    std::int32_t new_id;
    // Min-heap order on (rank, pos): std::push_heap builds a max-heap, so compare reversed.
    friend bool operator<(const Candidate& a, const Candidate& b) noexcept {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
  };

  // This thread's cache for this model, or nullptr when caching is off. Each thread keeps the
  // caches of the few models it used last; an encoder never waits for another thread.
  WordCache* thread_cache() const {
    if (options_.cache_capacity == 0) return nullptr;
    struct Slot {
      std::uint64_t model = 0;
      std::uint64_t last_use = 0;
      std::unique_ptr<WordCache> cache;
    };
    thread_local std::array<Slot, 4> slots;
    thread_local std::uint64_t clock = 0;
    ++clock;
    Slot* victim = &slots[0];
    for (Slot& slot : slots) {
      if (slot.model == id_) {
        slot.last_use = clock;
        return slot.cache.get();
      }
      if (slot.last_use < victim->last_use) victim = &slot;
    }
    victim->cache = std::make_unique<WordCache>(options_.cache_capacity);
    victim->model = id_;
    victim->last_use = clock;
    return victim->cache.get();
  }

  std::int32_t id_of(const std::string& token, std::string_view where, std::size_t rank, const char* role) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      fail(ErrorKind::invalid_file, where, ": model.merges[", rank, "]: ", role, " \"", token,
           "\" is not in model.vocab");
    }
    return it->second;
  }

  static std::string hex_byte(unsigned b) {
    static constexpr char digits[] = "0123456789ABCDEF";
    return {digits[b >> 4], digits[b & 15]};
  }

  Vocabulary vocab_;
  std::array<std::int32_t, 256> byte_ids_{};
  MergeTable merges_;
  Options options_;
  std::uint64_t id_;
};

/// @}

}  // namespace dsv32::bpe
