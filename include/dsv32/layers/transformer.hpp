/// \file
/// \brief Transformer: the whole DeepSeek-V3.2-Exp model — embedding, blocks, final norm, bf16 head (f32 logits) —
///        with KV caches, input validation and weight listing. Its memory plan is in memory_plan.hpp,
///        its random weights in random_init.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/config/tensor_table.hpp"
#include "dsv32/core/format.hpp"
#include "dsv32/layers/block.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"
#include "dsv32/layers/memory_plan.hpp"
#include "dsv32/layers/random_init.hpp"
#include "dsv32/layers/rope.hpp"

namespace dsv32 {

/// \addtogroup layers
/// @{

/// \brief Logits of one forward call, on the host: [batch, positions, vocab] f32.
struct Logits {
  std::int64_t batch = 0;      ///< sequences
  std::int64_t positions = 0;  ///< 1 (the last position) unless every position was requested
  std::int64_t vocab = 0;      ///< vocab_size (all ranks' shards gathered)
  std::vector<float> values;   ///< [batch, positions, vocab] f32

  /// \brief Logits of sequence `b` at returned position `p` (default, or -1: the last one).
  /// \throws Error(invalid_argument) unless 0 <= b < batch and -1 <= p < positions, or if
  ///         `values` does not hold batch x positions x vocab floats.
  std::span<const float> row(std::int64_t b, std::int64_t p = -1) const {
    DSV32_CHECK(b >= 0 && b < batch, invalid_argument, "Logits::row: sequence ", b, " is outside [0, ", batch, ")");
    DSV32_CHECK(p >= -1 && p < positions, invalid_argument, "Logits::row: position ", p, " is outside [0, ", positions,
                ") (or -1 for the last)");
    DSV32_CHECK(vocab > 0 && values.size() == static_cast<std::size_t>(batch * positions * vocab), invalid_argument,
                "Logits::row: ", values.size(), " values do not hold batch ", batch, " x positions ", positions,
                " x vocab ", vocab);
    if (p < 0) p = positions - 1;
    return {values.data() + (b * positions + p) * vocab, static_cast<std::size_t>(vocab)};
  }
  /// \brief Greedy choice for sequence `b` at its last position (first maximum on ties).
  /// \throws Error(invalid_argument) as row().
  std::int32_t argmax(std::int64_t b) const {
    const auto r = row(b);
    return static_cast<std::int32_t>(std::max_element(r.begin(), r.end()) - r.begin());
  }
};

/// \brief Options of one forward call.
struct ForwardOptions {
  bool all_positions = false;           ///< logits at every position of the call, not only the last
  ForwardObserver* observer = nullptr;  ///< watches intermediates (golden replay, debugging)
  /// \brief Run the last block's feed-forward on every position even when only the last position's
  ///        logits are returned. By default (false) it runs on the last position of each sequence
  ///        only, as llama.cpp does: the other rows cannot reach the logits, so the logits are the
  ///        same bit for bit and a prefill does about a third less work on the 671B slice (1/61 on the
  ///        full model). Always on with all_positions or an observer (which see every row).
  bool full_last_block = false;
};

/// \brief One sequence of a ragged forward pass: its tokens, where they sit, where its cache is.
struct SequenceSlice {
  std::span<const std::int32_t> tokens;  ///< this pass's tokens of the sequence (>= 1)
  std::int64_t start_pos = 0;            ///< position of tokens[0]: positions [0, start_pos) must be in its cache
  /// Its block table: the cache pages holding positions [0, start_pos + tokens.size()), in position
  /// order (at least that many pages of the cache's page_size). Pages written by this pass (those
  /// holding the new positions) must belong to no other sequence of the pass.
  std::span<const std::int32_t> pages;
  bool logits = true;  ///< return logits at its last token (or every token, ForwardOptions::all_positions)
  /// Positions below this attend in the reference's prefill arithmetic — keys and values expanded
  /// through wkv_b, as its forward() does for a prompt (FP8 models quantize the latents for that
  /// product) — and the others in its decode arithmetic (wkv_b absorbed into the query and the output).
  /// 0: every position in the decode arithmetic. At most RuntimeOptions::absorbed_prefill_from. A
  /// position's result depends only on which arithmetic it takes and on the tokens before it, never on
  /// how its sequence is split into passes nor on the other sequences of a pass.
  std::int64_t expanded_end = 0;
};

/// \brief One parameter as listed by Transformer::tensors(): checkpoint name, dtype, local shape.
struct TensorEntry {
  std::string name;   ///< checkpoint name, e.g. `layers.0.attn.wq_a.weight`
  DType dtype;        ///< in-memory dtype
  Shape shape;        ///< local shape on this rank
  std::size_t bytes;  ///< bytes once loaded
};

/// \brief The DeepSeek-V3.2-Exp transformer.
///
/// Constructing one allocates no weights (only the RoPE tables): its parameters are the rows of the
/// tensor table for its rank, so even the 671B config can list its tensors and memory plan. Weights
/// are bound by a loader (load_weights(), <dsv32/io/checkpoint.hpp>) or init_random() — into one
/// arena of backend memory, or borrowed in place from mapped files where the backend's memory is host
/// memory; the KV caches and every forward temporary are allocated when the weights are complete, so
/// that a forward call allocates nothing (except one asking for every position's logits). forward()
/// reads nothing back from the backend but its result (the logits) and, per MoE layer, the few
/// integers of its expert dispatch; observers get host copies only when attached.
/// A Transformer is not safe to call from several threads at once (it owns its caches and scratch).
/// \tparam Config  compile-time config (see ConfigDefaults)
/// \tparam Backend backend tag (Cpu, or testing::HostInvisible)
template <class Config, class Backend = Cpu>
class Transformer {
  static_assert(valid_config<Config>);

 public:
  using config_type = Config;    ///< the compile-time config
  using backend_type = Backend;  ///< the backend tag
  using space = space_of<Backend>;  ///< the memory space of its weights, caches and activations

  /// \param options runtime limits and RoPE scalars (validated)
  /// \param parallel this rank's place in a model-parallel group; its communicator must work on
  ///        `Backend`'s memory
  explicit Transformer(const RuntimeOptions& options = {}, const Parallel& parallel = {})
      : options_((options.validate(), options)),
        parallel_((parallel.validate(), check_fp8_split(ModelArgs::of<Config>(), parallel.world_size), parallel)),
        comm_(parallel_.template communicator_for<Backend>()),
        store_(ModelArgs::of<Config>(), parallel_.world_size, parallel_.rank),
        embed_(store_, "embed", parallel_.rank),
        norm_(store_, "norm"),
        head_(store_, "head"),
        rope_((require_memory(plan_memory<Backend>(ModelArgs::of<Config>(), options_, parallel_.world_size, parallel_.rank).rope_tables,
                              "its RoPE tables"),
               RopeTable<Backend>(Config::qk_rope_head_dim, options_))),
        filled_(static_cast<std::size_t>(options_.max_batch_size), 0),
        rect_pages_(static_cast<std::size_t>(options_.max_batch_size)) {
    for (std::size_t b = 0; b < rect_pages_.size(); ++b) rect_pages_[b] = static_cast<std::int32_t>(b);
    layers_.reserve(static_cast<std::size_t>(Config::n_layers));
    for (int i = 0; i < Config::n_layers; ++i) layers_.emplace_back(store_, i, options_, parallel_);
    store_.check_all_used();
  }
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;
  /// \brief Moves the model (its layers keep pointing at the same parameters: they live on the heap).
  Transformer(Transformer&&) noexcept = default;
  /// \brief Replaces this model with `other`'s.
  Transformer& operator=(Transformer&&) noexcept = default;

  /// \brief The runtime options the model was built with.
  const RuntimeOptions& options() const noexcept { return options_; }
  /// \brief This rank's place in the model-parallel group.
  const Parallel& parallel() const noexcept { return parallel_; }
  /// \brief The execution context every kernel call of this model runs in (its synchronization count
  ///        says how often forward() waited for the backend).
  ExecutionContext<Backend>& context() noexcept { return exec_; }

  /// \brief Visits every parameter as f(checkpoint name, Parameter&) in tensor-table order, in the
  ///        reference's converted naming (`embed.weight`, `layers.N.attn.wq_a.weight`, ..., `norm.weight`,
  ///        `head.weight`). Loading, checking, listing and tests all walk this one list.
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(F&& f) {
    for (Parameter<Backend>& p : store_) f(p.name(), p);
  }

  /// \brief Every parameter: name, dtype, local shape, bytes.
  std::vector<TensorEntry> tensors() {
    std::vector<TensorEntry> out;
    visit([&](const std::string& name, Parameter<Backend>& p) { out.push_back({name, p.dtype(), p.shape(), p.bytes()}); });
    return out;
  }

  /// \brief The memory this rank needs for its weights, caches, tables and forward scratch.
  MemoryPlan memory_plan() const { return plan_memory<Backend>(ModelArgs::of<Config>(), options_, parallel_.world_size, parallel_.rank); }
  /// \brief The memory plan of a model with these options, without building one.
  static MemoryPlan memory_plan(const RuntimeOptions& options, const Parallel& parallel = {}) {
    options.validate();
    parallel.validate();
    return plan_memory<Backend>(ModelArgs::of<Config>(), options, parallel.world_size, parallel.rank);
  }

  /// \brief Binds every parameter through `load(name, parameter)` (which must load it or throw, each
  ///        parameter owning its memory), then allocates the caches and scratch. On any error nothing
  ///        stays half-loaded: all parameters are released.
  /// \tparam LoadOne callable as `load(const std::string& name, Parameter<Backend>&)`
  /// \throws whatever `load` throws; Error(state) naming a parameter `load` left unloaded
  template <class LoadOne>
  void load_weights(LoadOne&& load) {
    try {
      release_weights();
      const MemoryPlan plan = memory_plan();  // the loader allocates the weights itself
      require_memory(plan.caches + plan.scratch, "its caches and forward scratch");
      visit([&](const std::string& name, Parameter<Backend>& p) { load(name, p); });
      check_loaded();
    } catch (...) {
      release_weights();
      throw;
    }
    finish_loading();
  }

  /// \brief Binds every parameter into one arena of backend memory (or, on a backend whose memory is
  ///        host memory, in place where `borrow` offers host memory), writing each through a staged
  ///        WeightUploader; then allocates the caches and scratch. On any error nothing stays
  ///        half-loaded.
  /// \tparam Borrow callable as `const void* borrow(const Parameter<Backend>&, std::shared_ptr<const void>& owner)`:
  ///         host memory holding the parameter's bytes to use in place (setting `owner`), or nullptr
  ///         to have it written into the arena; consulted only where Memory<Backend>::host_visible
  /// \tparam Write callable as `write(const Parameter<Backend>&, WeightUploader<Backend>&, void* dst)`:
  ///         writes the parameter's bytes() bytes to backend memory `dst` through the uploader
  /// \param borrow        decides, per parameter, whether it is used in place from host memory
  /// \param write         writes a parameter's bytes into its slice of the arena
  /// \param staging_bytes the uploader's pinned staging size (device backends)
  template <class Borrow, class Write>
  void load_weights(Borrow&& borrow, Write&& write, std::size_t staging_bytes = WeightUploader<Backend>::kDefaultStagingBytes) {
    constexpr std::size_t kAlign = 256;  // every slice of the arena starts on a 256-byte boundary
    auto align = [](std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    try {
      release_weights();
      std::vector<Parameter<Backend>*> copies;
      std::size_t arena_bytes = 0;
      visit([&](const std::string&, Parameter<Backend>& p) {
        if constexpr (Memory<Backend>::host_visible) {
          std::shared_ptr<const void> owner;
          if (const void* host = borrow(static_cast<const Parameter<Backend>&>(p), owner)) {
            p.borrow(host, std::move(owner));
            return;
          }
        }
        copies.push_back(&p);
        arena_bytes += align(p.bytes());
      });
      {
        const MemoryPlan plan = memory_plan();
        require_memory(arena_bytes + plan.caches + plan.scratch, "its weights (" + format_bytes(static_cast<double>(arena_bytes)) +
                       " to copy), caches (" + format_bytes(static_cast<double>(plan.caches)) + ") and forward scratch (" +
                       format_bytes(static_cast<double>(plan.scratch)) + ")");
      }
      arena_.reset_uninitialized(arena_bytes);  // one allocation, no zero-fill: every byte is written next
      WeightUploader<Backend> uploader(exec_, staging_bytes);
      std::size_t offset = 0;
      for (Parameter<Backend>* p : copies) {
        void* dst = arena_.data() + offset;
        offset += align(p->bytes());
        p->bind(dst);
        write(static_cast<const Parameter<Backend>&>(*p), uploader, dst);
      }
      uploader.finish();
      check_loaded();
    } catch (...) {
      release_weights();
      throw;
    }
    finish_loading();
  }

  /// \brief Fills every parameter with seeded random values in the checkpoint's dtypes and ranges
  ///        (the synthetic weights of examples and benchmarks), chosen by each tensor's role: linear
  ///        weights and the head ~ N(0, 1/in) (FP8 ones quantized per 128x128 block with scale
  ///        amax/448, rounded up to a power of two where the config's scale_fmt is ue8m0, as the
  ///        released V3.1 / V3.2 weights are), norms ~ 1 + N(0, 0.01), biases ~ N(0, 0.01) (gate bias
  ///        ~ N(0, 0.25)), embedding ~ N(0, 1).
  ///
  /// Values come from NormalStream: each element depends only on (seed, tensor name, index), so the
  /// fill runs on all threads, a 671B-shaped slice takes seconds, and the result does not depend on
  /// the thread count, the backend or the staging size. On a host-memory backend every tensor is
  /// drawn straight into the arena (no staging copy, each FP8 value drawn once).
  /// \param seed          the seed; each tensor's stream is keyed by (seed, name)
  /// \param staging_bytes the uploader's pinned staging size (device backends), as in load_weights()
  void init_random(std::uint64_t seed, std::size_t staging_bytes = WeightUploader<Backend>::kDefaultStagingBytes) {
    detail::RandomInit<Backend, Config::scale_fmt> init(seed);
    load_weights([](const Parameter<Backend>&, std::shared_ptr<const void>&) -> const void* { return nullptr; },
                 [&](const Parameter<Backend>& p, WeightUploader<Backend>& up, void* dst) { init.write(p, up, dst); },
                 staging_bytes);
  }

  /// \brief Whether every parameter is loaded.
  bool ready() const noexcept { return ready_; }

  /// \brief Forgets every sequence: the next call of each must start at position 0.
  void reset() { std::fill(filled_.begin(), filled_.end(), 0); }

  /// \brief Frees the caches of forward(tokens, batch, start_pos) (max_batch_size x max_seq_len
  ///        positions) and forgets every sequence: for a model whose passes all go through external
  ///        paged caches (the serving engine's). A later forward(tokens, batch, start_pos) allocates
  ///        them again.
  void release_caches() {
    own_cache_ = KvCache<Backend>();
    reset();
  }

  /// \brief The limits the forward scratch is reserved for: the runtime options' (max_batch_size
  ///        sequences of max_tokens_per_call tokens), grown by reserve().
  const ForwardLimits& limits() const noexcept { return limits_; }

  /// \brief Grows the forward scratch so that ragged passes up to `l` (sequences, tokens, page size)
  ///        allocate nothing; the scratch then serves the larger of `l` and the current limits.
  /// \throws Error(state) when the weights are not loaded; Error(out_of_memory) when the backend lacks
  ///         the memory
  void reserve(const ForwardLimits& l) {
    DSV32_CHECK(ready_, state, "reserve: the model's weights are not loaded");
    ForwardLimits grown = ForwardLimits::max(limits_, l);
    grown.world_size = parallel_.world_size;
    reserve_scratch(grown);
  }

  /// \brief Runs the model on `batch` sequences of `tokens.size() / batch` tokens each, placed at
  ///        positions [start_pos, start_pos + seq), like the reference's forward(tokens, start_pos),
  ///        on the model's own caches (one page of max_seq_len positions per sequence).
  ///
  /// A prefill starts at 0; decode steps continue at the next position. Calls are checked before
  /// anything is computed: batch in [1, max_batch_size], start_pos + seq <= max_seq_len, token ids
  /// in [0, vocab_size), no gap after what each sequence has cached. A failed check throws
  /// Error(invalid_argument) and leaves the caches as they were. A call longer than
  /// RuntimeOptions::max_tokens_per_call runs as consecutive passes of that many tokens.
  /// \param tokens    [batch, seq] row-major token ids
  /// \param batch     sequences; tokens.size() must be a multiple of it
  /// \param start_pos position of each sequence's first token in this call
  /// \param opts      all positions' logits or only the last; an observer
  /// \return logits [batch, 1 or seq, vocab_size]
  /// \throws Error(state) when the weights are not loaded
  Logits forward(std::span<const std::int32_t> tokens, std::int64_t batch, std::int64_t start_pos,
                 const ForwardOptions& opts = {}) {
    DSV32_CHECK(ready_, state, "forward: the model's weights are not loaded");
    DSV32_CHECK(batch >= 1 && batch <= options_.max_batch_size, invalid_argument, "forward: batch size ", batch,
                " outside [1, max_batch_size = ", options_.max_batch_size, "]");
    DSV32_CHECK(!tokens.empty(), invalid_argument, "forward: no tokens");
    DSV32_CHECK(tokens.size() % static_cast<std::size_t>(batch) == 0, invalid_argument, "forward: ", tokens.size(),
                " tokens do not split into ", batch, " sequences of equal length");
    const std::int64_t seq = static_cast<std::int64_t>(tokens.size()) / batch;
    DSV32_CHECK(start_pos >= 0, invalid_argument, "forward: start_pos must be >= 0, got ", start_pos);
    DSV32_CHECK(start_pos + seq <= options_.max_seq_len, invalid_argument, "forward: positions [", start_pos, ", ",
                start_pos + seq, ") exceed max_seq_len = ", options_.max_seq_len);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      DSV32_CHECK(tokens[i] >= 0 && tokens[i] < Config::vocab_size, invalid_argument, "forward: token id ", tokens[i],
                  " (sequence ", static_cast<std::int64_t>(i) / seq, ", position ",
                  start_pos + static_cast<std::int64_t>(i) % seq, ") outside the vocabulary [0, ", Config::vocab_size,
                  ")");
    for (std::int64_t b = 0; b < batch; ++b)
      DSV32_CHECK(start_pos <= filled_[b], invalid_argument, "forward: sequence ", b, " starts at position ",
                  start_pos, " but only positions [0, ", filled_[b], ") are cached");
    if (own_cache_.empty()) {
      require_memory(memory_plan().caches, "its caches");
      own_cache_ = KvCache<Backend>(ModelArgs::of<Config>(), options_.max_batch_size, options_.max_seq_len);
    }
    const std::int64_t chunk = options_.tokens_per_call(), positions = opts.all_positions ? seq : 1;
    Logits out{batch, positions, Config::vocab_size, {}};
    if (opts.all_positions) out.values.resize(static_cast<std::size_t>(batch * seq * Config::vocab_size));
    std::vector<SequenceSlice> slices(static_cast<std::size_t>(batch));
    // consecutive passes of `chunk` tokens per sequence; sequence b's cache is page b. A pass of more
    // than one token ending at or before absorbed_prefill_from expands its keys (the reference's prefill).
    for (std::int64_t first = 0; first < seq; first += chunk) {
      const std::int64_t len = std::min(chunk, seq - first), end = start_pos + first + len;
      const std::int64_t expanded = len > 1 && end <= options_.absorbed_prefill_from ? end : 0;
      for (std::int64_t b = 0; b < batch; ++b)
        slices[b] = SequenceSlice{tokens.subspan(static_cast<std::size_t>(b * seq + first), static_cast<std::size_t>(len)),
                                  start_pos + first, std::span<const std::int32_t>(rect_pages_).subspan(static_cast<std::size_t>(b), 1),
                                  true, expanded};
      Logits l = run(slices, own_cache_, opts);
      for (std::int64_t b = 0; b < batch; ++b) filled_[b] = std::max(filled_[b], start_pos + first + len);
      if (!opts.all_positions) {
        out.values = std::move(l.values);
        continue;
      }
      for (std::int64_t b = 0; b < batch; ++b)
        std::copy_n(l.values.begin() + b * len * Config::vocab_size, len * Config::vocab_size,
                    out.values.begin() + (b * seq + first) * Config::vocab_size);
    }
    return out;
  }

  /// \brief forward() on a rectangular batch given as one vector per sequence.
  Logits forward(const std::vector<std::vector<std::int32_t>>& tokens, std::int64_t start_pos,
                 const ForwardOptions& opts = {}) {
    DSV32_CHECK(!tokens.empty(), invalid_argument, "forward: no sequences");
    std::vector<std::int32_t> flat;
    for (std::size_t b = 0; b < tokens.size(); ++b) {
      DSV32_CHECK(tokens[b].size() == tokens[0].size(), invalid_argument, "forward: sequence ", b, " has ",
                  tokens[b].size(), " tokens, sequence 0 has ", tokens[0].size(), " (a call's sequences share one length)");
      flat.insert(flat.end(), tokens[b].begin(), tokens[b].end());
    }
    return forward(flat, static_cast<std::int64_t>(tokens.size()), start_pos, opts);
  }

  /// \brief One ragged pass: every sequence with its own tokens at its own position, packed without
  ///        padding, over a paged cache (FlashAttention's varlen batches, FlashMLA's block tables).
  ///
  /// RoPE, the indexer's top-k, the causal mask and attention work per sequence over its own
  /// context; each token's latent and keys are written into the page of its block table that holds
  /// its position. The pass is checked before anything is computed (a failed check throws
  /// Error(invalid_argument) and leaves the cache as it was): 1 to limits().batch sequences and at most
  /// limits().tokens() tokens in all, each with at least one token, start_pos >= 0, positions below
  /// max_seq_len, ids in the vocabulary, a block table covering its positions with page ids of
  /// `cache`, and no cache row written twice. That positions [0, start_pos) are already in the cache
  /// is the caller's to ensure (the engine's bookkeeping).
  /// \param sequences the pass's sequences, in the order of the logits returned
  /// \param cache     the paged caches it reads and writes
  /// \param opts      every position's logits or only the last; an observer
  /// \return logits [rows, 1, vocab_size]: one row per sequence with `logits` set, at its last token
  ///         (with all_positions: one per token of those sequences), in pass order
  /// \throws Error(state) when the weights are not loaded
  Logits forward(std::span<const SequenceSlice> sequences, KvCache<Backend>& cache, const ForwardOptions& opts = {}) {
    DSV32_CHECK(ready_, state, "forward: the model's weights are not loaded");
    return run(sequences, cache, opts);
  }

 private:
  // Checks a ragged pass and lays out its metadata in the pinned staging buffer; returns the host
  // description of its sequences and the offsets of each array in the metadata.
  struct PassLayout {
    std::vector<PassSequence> sequences;
    std::vector<std::int32_t> logit_rows;
    std::int64_t rows = 0, width = 0, gathered = 0, max_visible = 0;
  };

  PassLayout plan_pass(std::span<const SequenceSlice> seqs, const KvCache<Backend>& cache, const ForwardOptions& opts) const {
    const std::int64_t n = static_cast<std::int64_t>(seqs.size()), P = cache.page_size();
    DSV32_CHECK(n >= 1 && n <= limits_.batch, invalid_argument, "forward: ", n, " sequences in a pass, outside [1, ",
                limits_.batch, "] (max_batch_size, or the limits given to reserve())");
    DSV32_CHECK(!cache.empty(), invalid_argument, "forward: the cache has no pages");
    PassLayout L;
    L.sequences.resize(static_cast<std::size_t>(n));
    std::vector<std::int64_t> written;
    for (std::int64_t b = 0; b < n; ++b) {
      const SequenceSlice& q = seqs[static_cast<std::size_t>(b)];
      const auto len = static_cast<std::int64_t>(q.tokens.size());
      DSV32_CHECK(len >= 1, invalid_argument, "forward: sequence ", b, " has no tokens");
      DSV32_CHECK(q.start_pos >= 0 && q.start_pos + len <= options_.max_seq_len, invalid_argument, "forward: sequence ",
                  b, " covers positions [", q.start_pos, ", ", q.start_pos + len, "), outside [0, max_seq_len = ",
                  options_.max_seq_len, ")");
      for (std::int64_t i = 0; i < len; ++i)
        DSV32_CHECK(q.tokens[i] >= 0 && q.tokens[i] < Config::vocab_size, invalid_argument, "forward: token id ",
                    q.tokens[i], " (sequence ", b, ", position ", q.start_pos + i, ") outside the vocabulary [0, ",
                    Config::vocab_size, ")");
      const std::int64_t end = q.start_pos + len, need = (end + P - 1) / P;
      const std::int32_t* table = q.pages.data();
      DSV32_CHECK(static_cast<std::int64_t>(q.pages.size()) >= need, invalid_argument, "forward: sequence ", b,
                    " reaches position ", end - 1, ", which needs ", need, " pages of ", P, " positions, but its block "
                    "table lists ", q.pages.size());
      for (std::int64_t i = 0; i < need; ++i)
        DSV32_CHECK(table[i] >= 0 && table[i] < cache.pages(), invalid_argument, "forward: sequence ", b,
                    "'s block table entry ", i, " is page ", table[i], ", outside the cache's [0, ", cache.pages(), ")");
      PassSequence& ps = L.sequences[static_cast<std::size_t>(b)];
      ps.row = L.rows;
      ps.tokens = len;
      ps.start_pos = q.start_pos;
      DSV32_CHECK(q.expanded_end >= 0 && q.expanded_end <= options_.absorbed_prefill_from, invalid_argument,
                  "forward: sequence ", b, "'s expanded_end ", q.expanded_end, " is outside [0, absorbed_prefill_from = ",
                  options_.absorbed_prefill_from, "]");
      ps.expanded = std::clamp(q.expanded_end - q.start_pos, std::int64_t{0}, len);
      bool consecutive = true;
      for (std::int64_t i = 1; i < need && consecutive; ++i) consecutive = table[i] == table[0] + i;
      ps.first_page = consecutive ? table[0] : -1;
      if (ps.expanded > 0 && !consecutive) {
        ps.gather = L.gathered;
        L.gathered += ps.expanded_end_pos();
      }
      for (std::int64_t p = q.start_pos; p < end; ++p) written.push_back(table[p / P] * P + p % P);
      L.rows += len;
      L.width = std::max(L.width, need);
      L.max_visible = std::max(L.max_visible, end);
      if (q.logits) {
        if (opts.all_positions)
          for (std::int64_t i = 0; i < len; ++i) L.logit_rows.push_back(static_cast<std::int32_t>(ps.row + i));
        else
          L.logit_rows.push_back(static_cast<std::int32_t>(ps.row + len - 1));
      }
    }
    DSV32_CHECK(L.rows <= limits_.tokens(), invalid_argument, "forward: ", L.rows, " tokens in a pass, more than the ",
                limits_.tokens(), " the scratch holds (max_batch_size x max_tokens_per_call, or the limits given to "
                "reserve())");
    std::sort(written.begin(), written.end());
    const auto dup = std::adjacent_find(written.begin(), written.end());
    DSV32_CHECK(dup == written.end(), invalid_argument, "forward: cache row ", dup == written.end() ? 0 : *dup,
                " (page ", dup == written.end() ? 0 : *dup / P, ") is written twice in one pass (two sequences share a "
                "page they both write, or a block table lists a page twice)");
    return L;
  }

  // One forward pass: every kernel ordered on exec_, one synchronization at the end to read the logits.
  Logits run(std::span<const SequenceSlice> seqs, KvCache<Backend>& cache, const ForwardOptions& opts) {
    const PassLayout L = plan_pass(seqs, cache, opts);
    const std::int64_t T = L.rows, n = static_cast<std::int64_t>(seqs.size()), P = cache.page_size();
    const std::int64_t R = static_cast<std::int64_t>(L.logit_rows.size());
    ForwardScratch<Backend>& s = scratch_;

    // the pass's integers, staged on the host and uploaded at once:
    // [tokens T][positions T][sequence T][slots T][logit rows R][gather G][block table n x width]
    const std::int64_t width = L.width, total = 4 * T + R + L.gathered + n * width;
    if (s.host_meta.size() < static_cast<std::size_t>(total)) s.host_meta.reset(static_cast<std::size_t>(total));
    std::int32_t* m = s.host_meta.data();
    std::int32_t *tok = m, *pos = m + T, *seq = m + 2 * T, *slot = m + 3 * T, *rows = m + 4 * T;
    std::int32_t *gather = rows + R, *table = gather + L.gathered;
    for (std::int64_t b = 0; b < n; ++b) {
      const SequenceSlice& q = seqs[static_cast<std::size_t>(b)];
      const PassSequence& ps = L.sequences[static_cast<std::size_t>(b)];
      const std::int32_t* pages = q.pages.data();
      const std::int64_t need = (ps.end_pos() + P - 1) / P;
      for (std::int64_t i = 0; i < width; ++i) table[b * width + i] = i < need ? pages[i] : pages[0];
      for (std::int64_t i = 0; i < ps.tokens; ++i) {
        const std::int64_t r = ps.row + i, p = ps.start_pos + i;
        tok[r] = q.tokens[static_cast<std::size_t>(i)];
        pos[r] = static_cast<std::int32_t>(p);
        seq[r] = static_cast<std::int32_t>(b);
        slot[r] = static_cast<std::int32_t>(pages[p / P] * P + p % P);
      }
      if (ps.expanded > 0 && ps.first_page < 0)
        for (std::int64_t p = 0; p < ps.expanded_end_pos(); ++p)
          gather[ps.gather + p] = static_cast<std::int32_t>(pages[p / P] * P + p % P);
    }
    std::copy(L.logit_rows.begin(), L.logit_rows.end(), rows);
    s.meta.resize(Shape{total});
    Memory<Backend>::copy_from_host_async(exec_, s.meta.data(), m, static_cast<std::size_t>(total) * sizeof(std::int32_t));
    const VectorView<const std::int32_t, space> meta = s.meta.vec();

    ForwardContext<Backend> ctx;
    ctx.sequences = L.sequences;
    ctx.rows = T;
    ctx.cache = &cache;
    ctx.pages = CachePages<space>{MatrixView<const std::int32_t, space>(meta.data + 4 * T + R + L.gathered, n, width, width),
                                  meta.subview(2 * T, T), meta.subview(T, T), P, L.max_visible};
    ctx.slots = meta.subview(3 * T, T);
    ctx.gather = meta.subview(4 * T + R, L.gathered);
    ctx.parallel = parallel_;
    ctx.comm = comm_;
    ctx.observer = opts.observer;
    ctx.exec = &exec_;
    ctx.reduce = &scratch_.reduce;
    const VectorView<const std::int32_t, space> logit_rows = meta.subview(4 * T, R);
    const bool all_rows = R == T;  // the logit rows are every row, in order

    s.h.resize(Shape{T, Config::dim});
    s.residual.resize(Shape{T, Config::dim});
    embed_.forward(ctx, meta.subview(0, T), s.h.mat());
    if (ctx.observer)
      with_host_view(ctx, MatrixView<const bf16, space>(s.h.mat()),
                     [&](MatrixView<const bf16> h) { ctx.observer->on_embedding(h); });
    // the last block's feed-forward only on the rows that reach the logits (unless watched)
    const bool ffn_on_logit_rows = !opts.full_last_block && !ctx.observer && !all_rows;
    for (std::size_t i = 0; i < layers_.size(); ++i)
      layers_[i].forward(ctx, s.h.mat(), s.residual.mat(), i == 0, rope_, s.blocks,
                         ffn_on_logit_rows && i + 1 == layers_.size() ? logit_rows : VectorView<const std::int32_t, space>());
    norm_.forward(ctx, s.h.mat(), s.residual.mat(), s.h.mat());

    // head in f32 on the logit rows
    Logits out{R, 1, Config::vocab_size, std::vector<float>(static_cast<std::size_t>(R * Config::vocab_size))};
    if (R == 0) {
      Memory<Backend>::synchronize(exec_);
      return out;
    }
    MatrixView<const bf16, space> head_rows = s.h.mat();
    if (!all_rows) {
      s.head_in.resize(Shape{R, Config::dim});
      Kernels<Backend>::gather_rows(exec_, s.h.mat(), logit_rows, s.head_in.mat());
      head_rows = s.head_in.mat();
    }
    const std::int64_t local_vocab = head_.out_features();
    s.logits.resize(Shape{R, local_vocab});
    head_.forward_f32(ctx, head_rows, s.logits.mat());
    if (parallel_.world_size == 1) {
      Memory<Backend>::copy_to_host_async(exec_, out.values.data(), s.logits.data(), out.values.size() * sizeof(float));
      Memory<Backend>::synchronize(exec_);
      return out;
    }
    // all-gather the vocabulary shards on the backend, one copy down, then interleave them per row
    s.gathered.resize(Shape{parallel_.world_size * R * local_vocab});
    comm_->all_gather(exec_, s.logits.vec(), s.gathered.vec());
    std::vector<float> gathered(static_cast<std::size_t>(s.gathered.numel()));
    Memory<Backend>::copy_to_host_async(exec_, gathered.data(), s.gathered.data(), s.gathered.bytes());
    Memory<Backend>::synchronize(exec_);
    for (int r = 0; r < parallel_.world_size; ++r)
      for (std::int64_t i = 0; i < R; ++i)
        std::copy_n(gathered.data() + (r * R + i) * local_vocab, local_vocab,
                    out.values.data() + i * Config::vocab_size + r * local_vocab);
    return out;
  }

  // Refuses to allocate `bytes` of backend memory that the backend does not have available.
  static void require_memory(std::size_t bytes, const std::string& what) {
    const std::size_t available = Memory<Backend>::available_bytes();
    DSV32_CHECK(bytes <= available, out_of_memory, "the model needs ", bytes, " bytes (", format_bytes(static_cast<double>(bytes)),
                ") of ", Backend::name, " memory for ", what, ", but ", available, " bytes (",
                format_bytes(static_cast<double>(available)), ") are available; lower max_batch_size, max_seq_len or "
                "max_tokens_per_call (RuntimeOptions), or split the model over more ranks");
  }

  void check_loaded() {
    visit([&](const std::string& name, Parameter<Backend>& p) {
      DSV32_CHECK(p.loaded(), state, "parameter ", name, " was not loaded");
    });
  }

  // Caches, then every forward temporary at its largest, so that forward() allocates nothing.
  void finish_loading() {
    for (auto& layer : layers_) layer.prepare();
    own_cache_ = KvCache<Backend>(ModelArgs::of<Config>(), options_.max_batch_size, options_.max_seq_len);
    reserve_scratch(ForwardLimits::of(options_, parallel_.world_size));
    reset();
    ready_ = true;
  }

  // Reserves every forward temporary for passes up to `l`.
  void reserve_scratch(const ForwardLimits& l) {
    scratch_.reserve([]<class Buffer>(Buffer& b, std::int64_t n) {
      if constexpr (requires { b.mat(); })
        b.reserve(static_cast<std::size_t>(n));
      else if (b.size() < static_cast<std::size_t>(n))
        b.reset(static_cast<std::size_t>(n));
    }, ModelArgs::of<Config>(), l);
    limits_ = l;
  }

  void release_weights() {
    visit([](const std::string&, Parameter<Backend>& p) { p.release(); });
    arena_ = Buffer<std::byte, Backend>();
    ready_ = false;
  }

  RuntimeOptions options_;
  Parallel parallel_;
  Communicator<Backend>* comm_ = nullptr;
  ParameterStore<Backend> store_;
  Embedding<Backend> embed_;
  std::vector<Block<Config, Backend>> layers_;
  RMSNorm<Backend> norm_;
  Linear<Backend> head_;
  RopeTable<Backend> rope_;
  bool ready_ = false;
  std::vector<std::int64_t> filled_;  // per sequence: positions [0, filled) are cached
  std::vector<std::int32_t> rect_pages_;  // [max_batch_size] page b: sequence b's page in own_cache_
  KvCache<Backend> own_cache_;         // forward(tokens, batch, start_pos)'s caches: a page of max_seq_len per sequence
  ForwardLimits limits_;               // what the scratch is reserved for
  ExecutionContext<Backend> exec_;
  Buffer<std::byte, Backend> arena_;  // the weights that are not borrowed, in one allocation
  ForwardScratch<Backend> scratch_;
};

/// @}

}  // namespace dsv32
