/// \file
/// \brief Transformer: the whole DeepSeek-V3.2-Exp model — embedding, blocks, final norm, f32 head —
///        with KV caches, input validation, weight listing and the memory plan.
#pragma once

#include <algorithm>
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
#include "dsv32/core/random.hpp"
#include "dsv32/layers/block.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/layers/linear.hpp"
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

  /// \brief Logits of sequence `b` at returned position `p` (default: the last one).
  std::span<const float> row(std::int64_t b, std::int64_t p = -1) const {
    if (p < 0) p = positions - 1;
    return {values.data() + (b * positions + p) * vocab, static_cast<std::size_t>(vocab)};
  }
  /// \brief Greedy choice for sequence `b` at its last position (first maximum on ties).
  std::int32_t argmax(std::int64_t b) const {
    const auto r = row(b);
    return static_cast<std::int32_t>(std::max_element(r.begin(), r.end()) - r.begin());
  }
};

/// \brief Options of one forward call.
struct ForwardOptions {
  bool all_positions = false;           ///< logits at every position of the call, not only the last
  ForwardObserver* observer = nullptr;  ///< watches intermediates (golden replay, debugging)
};

/// \brief One parameter as listed by Transformer::tensors(): checkpoint name, dtype, local shape.
struct TensorEntry {
  std::string name;   ///< checkpoint name, e.g. `layers.0.attn.wq_a.weight`
  DType dtype;        ///< in-memory dtype
  Shape shape;        ///< local shape on this rank
  std::size_t bytes;  ///< bytes once loaded
};

/// \brief Memory a model needs on this rank, computed without allocating it.
struct MemoryPlan {
  std::map<DType, std::size_t> weight_bytes;  ///< by in-memory dtype
  std::size_t weights = 0;                    ///< all parameters (FP8 scales included)
  std::int64_t parameters = 0;                ///< parameter elements on this rank (scales excluded)
  std::size_t cache_bytes_per_token = 0;      ///< all layers, one sequence, one position
  std::size_t caches = 0;                     ///< max_batch_size x max_seq_len x the above
  std::size_t rope_tables = 0;                ///< the cos/sin tables

  /// \brief weights + caches + rope_tables (scratch, which grows with the call size, not included).
  std::size_t total() const noexcept { return weights + caches + rope_tables; }
};

/// \brief "12.3 GiB"-style byte count.
inline std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(u ? 2 : 0);
  os << bytes << ' ' << units[u];
  return os.str();
}

/// \brief The DeepSeek-V3.2-Exp transformer.
///
/// Constructing one allocates no weights (only the RoPE tables), so even the 671B config can list its
/// tensors and memory plan. Weights are bound by a loader (see load_weights / <dsv32/io/checkpoint.hpp>)
/// or init_random(); KV caches are allocated when the weights are complete.
/// A Transformer is not safe to call from several threads at once (it owns its caches and scratch).
/// \tparam Config  compile-time config (see ConfigDefaults)
/// \tparam Backend backend tag (Cpu, the only backend this release implements)
template <class Config, class Backend = Cpu>
class Transformer {
  static_assert(valid_config<Config>);

 public:
  using config_type = Config;    ///< the compile-time config
  using backend_type = Backend;  ///< the backend tag

  /// \param options runtime limits and RoPE scalars (validated)
  /// \param parallel this rank's place in a model-parallel group
  explicit Transformer(const RuntimeOptions& options = {}, const Parallel& parallel = {})
      : options_((options.validate(), options)),
        parallel_((parallel.validate(), parallel)),
        embed_(Config::vocab_size, Config::dim, parallel_),
        norm_(Config::dim),
        head_(Config::dim, parallel_.split(Config::vocab_size, "vocab_size"), DType::F32),
        rope_(Config::qk_rope_head_dim, options_),
        filled_(static_cast<std::size_t>(options_.max_batch_size), 0) {
    layers_.reserve(static_cast<std::size_t>(Config::n_layers));
    for (int i = 0; i < Config::n_layers; ++i) layers_.emplace_back(i, options_, parallel_);
  }

  /// \brief The runtime options the model was built with.
  const RuntimeOptions& options() const noexcept { return options_; }
  /// \brief This rank's place in the model-parallel group.
  const Parallel& parallel() const noexcept { return parallel_; }

  /// \brief Visits every parameter as f(checkpoint name, Parameter&), in the reference's converted
  ///        naming (`embed.weight`, `layers.N.attn.wq_a.weight`, ..., `norm.weight`, `head.weight`).
  ///        Loading, checking, listing and tests all walk this one list.
  /// \tparam F callable as `f(const std::string&, Parameter<Backend>&)`
  template <class F>
  void visit(F&& f) {
    embed_.visit("embed.", f);
    for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].visit("layers." + std::to_string(i) + ".", f);
    norm_.visit("norm.", f);
    head_.visit("head.", f);
  }

  /// \brief Every parameter: name, dtype, local shape, bytes.
  std::vector<TensorEntry> tensors() {
    std::vector<TensorEntry> out;
    visit([&](const std::string& name, Parameter<Backend>& p) { out.push_back({name, p.dtype(), p.shape(), p.bytes()}); });
    return out;
  }

  /// \brief The memory this rank needs for its weights, caches and tables.
  MemoryPlan memory_plan() {
    MemoryPlan m;
    visit([&](const std::string& name, Parameter<Backend>& p) {
      m.weight_bytes[p.dtype()] += p.bytes();
      m.weights += p.bytes();
      if (!name.ends_with(".scale")) m.parameters += p.numel();
    });
    m.cache_bytes_per_token = static_cast<std::size_t>(Config::n_layers) * MLA<Config, Backend>::cache_bytes_per_token;
    m.caches = m.cache_bytes_per_token * static_cast<std::size_t>(options_.max_batch_size * options_.max_seq_len);
    m.rope_tables = rope_.bytes();
    return m;
  }
  /// \brief The memory plan of a model with these options, without keeping one.
  static MemoryPlan memory_plan(const RuntimeOptions& options, const Parallel& parallel = {}) {
    Transformer t(options, parallel);
    return t.memory_plan();
  }

  /// \brief Binds every parameter through `load(name, parameter)` (which must load it or throw), then
  ///        allocates the caches. On any error nothing stays half-loaded: all parameters are released.
  /// \tparam LoadOne callable as `load(const std::string& name, Parameter<Backend>&)`
  /// \throws whatever `load` throws; Error(state) naming a parameter `load` left unloaded
  template <class LoadOne>
  void load_weights(LoadOne&& load) {
    try {
      visit([&](const std::string& name, Parameter<Backend>& p) { load(name, p); });
      visit([&](const std::string& name, Parameter<Backend>& p) {
        DSV32_CHECK(p.loaded(), state, "parameter ", name, " was not loaded");
      });
    } catch (...) {
      release_weights();
      throw;
    }
    finish_loading();
  }

  /// \brief Fills every parameter with seeded random values in the checkpoint's dtypes and ranges
  ///        (the synthetic weights of examples and benchmarks): linears ~ N(0, 1/in) (FP8 ones
  ///        quantized per 128x128 block with scale amax/448), norms ~ 1 + N(0, 0.01), biases ~ N(0, 0.01)
  ///        (gate bias ~ N(0, 0.25)), embedding ~ N(0, 1).
  ///
  /// Values come from counter_normal(): each element depends only on (seed, tensor name, index), so
  /// the fill runs on all threads, a 671B-shaped slice takes seconds, and the result does not depend
  /// on the thread count. No tensor is staged in a second full-size host copy.
  void init_random(std::uint64_t seed) {
    std::unordered_map<std::string, Parameter<Backend>*> params;
    visit([&](const std::string& name, Parameter<Backend>& p) { params[name] = &p; });
    load_weights([&](const std::string& name, Parameter<Backend>& p) {
      if (p.loaded()) return;  // scales are filled with their weights
      const std::uint64_t key = mix64(fnv1a64(name) ^ mix64(seed));
      const Shape& s = p.shape();
      if (p.dtype() == DType::F8_E4M3) {
        fill_fp8(p, *params.at(name.substr(0, name.size() - 6) + "scale"), key);
      } else if (name.ends_with("norm.weight")) {
        fill_normal(p, key, 1.0f, 0.1f);
      } else if (name.ends_with(".bias")) {
        fill_normal(p, key, 0.0f, name.ends_with("gate.bias") ? 0.5f : 0.1f);
      } else if (name == "embed.weight") {
        fill_normal(p, key, 0.0f, 1.0f);
      } else {
        fill_normal(p, key, 0.0f, 1.0f / std::sqrt(static_cast<float>(s[s.rank() - 1])));
      }
    });
  }

  /// \brief Whether every parameter is loaded.
  bool ready() const noexcept { return ready_; }

  /// \brief Forgets every sequence: the next call of each must start at position 0.
  void reset() { std::fill(filled_.begin(), filled_.end(), 0); }

  /// \brief Runs the model on `batch` sequences of `tokens.size() / batch` tokens each, placed at
  ///        positions [start_pos, start_pos + seq), like the reference's forward(tokens, start_pos).
  ///
  /// A prefill starts at 0; decode steps continue at the next position. Calls are checked before
  /// anything is computed: batch in [1, max_batch_size], start_pos + seq <= max_seq_len, token ids
  /// in [0, vocab_size), no gap after what each sequence has cached. A failed check throws
  /// Error(invalid_argument) and leaves the caches as they were.
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
    return run(tokens, batch, seq, start_pos, opts);
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

 private:
  Logits run(std::span<const std::int32_t> tokens, std::int64_t batch, std::int64_t seq, std::int64_t start_pos,
             const ForwardOptions& opts) {
    ForwardContext ctx;
    ctx.batch = batch;
    ctx.seq = seq;
    ctx.start_pos = start_pos;
    ctx.parallel = parallel_;
    ctx.observer = opts.observer;
    const std::int64_t T = batch * seq;
    h_.resize(Shape{T, Config::dim});
    residual_.resize(Shape{T, Config::dim});
    token_buf_.resize(Shape{T});
    Memory<Backend>::copy_from_host(token_buf_.data(), tokens.data(), tokens.size_bytes());
    embed_.forward(ctx, token_buf_.data(), T, h_.mat());
    if (ctx.observer) ctx.observer->on_embedding(h_.mat());
    for (std::size_t i = 0; i < layers_.size(); ++i)
      layers_[i].forward(ctx, h_.mat(), residual_.mat(), i == 0, rope_, scratch_);
    norm_.forward(h_.mat(), residual_.mat(), h_.mat());
    for (std::int64_t b = 0; b < batch; ++b) filled_[b] = std::max(filled_[b], start_pos + seq);

    // head in f32 on the last position of each sequence (or all of them)
    const std::int64_t positions = opts.all_positions ? seq : 1;
    MatrixView<bf16> rows = h_.mat();
    if (!opts.all_positions) {
      last_.resize(Shape{batch, Config::dim});
      for (std::int64_t b = 0; b < batch; ++b)
        Memory<Backend>::copy(last_.data() + b * Config::dim, h_.data() + (b * seq + seq - 1) * Config::dim,
                              Config::dim * sizeof(bf16));
      rows = last_.mat();
    }
    const std::int64_t local_vocab = head_.out_features(), R = batch * positions;
    logits_.resize(Shape{R, local_vocab});
    head_.forward_f32(rows, logits_.mat());
    Logits out{batch, positions, Config::vocab_size, std::vector<float>(static_cast<std::size_t>(R * Config::vocab_size))};
    if (parallel_.world_size == 1) {
      Memory<Backend>::copy_to_host(out.values.data(), logits_.data(), out.values.size() * sizeof(float));
    } else {  // all-gather the vocabulary shards, then interleave them per row
      std::vector<float> gathered(out.values.size()), local(static_cast<std::size_t>(R * local_vocab));
      Memory<Backend>::copy_to_host(local.data(), logits_.data(), local.size() * sizeof(float));
      parallel_.comm->all_gather(local.data(), local.size(), gathered.data());
      for (int r = 0; r < parallel_.world_size; ++r)
        for (std::int64_t i = 0; i < R; ++i)
          std::copy_n(gathered.data() + (r * R + i) * local_vocab, local_vocab,
                      out.values.data() + i * Config::vocab_size + r * local_vocab);
    }
    return out;
  }

  void finish_loading() {
    for (auto& layer : layers_) layer.allocate_caches(options_);
    reset();
    ready_ = true;
  }

  void release_weights() {
    visit([](const std::string&, Parameter<Backend>& p) { p.release(); });
    ready_ = false;
  }

  // Writable host-side destination of a freshly allocated parameter, filled chunk by chunk through
  // Memory<Backend>::copy_from_host (so no full-size staging copy ever exists).
  static std::byte* allocate_for_fill(Parameter<Backend>& p) {
    p.allocate();
    return const_cast<std::byte*>(static_cast<const std::byte*>(p.data()));
  }

  // mean + sd * N(0, 1), element i of stream `key`, converted to the parameter's dtype (F32 or BF16).
  static void fill_normal(Parameter<Backend>& p, std::uint64_t key, float mean, float sd) {
    DSV32_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::BF16, unsupported, "init_random: a ",
                dtype_name(p.dtype()), " parameter");
    const std::int64_t n = p.numel(), chunk = std::int64_t{1} << 16, elem = dtype_size(p.dtype());
    std::byte* dst = allocate_for_fill(p);
    parallel_for_each((n + chunk - 1) / chunk, [&](std::int64_t c) {
      const std::int64_t i0 = c * chunk, len = std::min(chunk, n - i0);
      const NormalStream normal(key);
      std::vector<float> v(static_cast<std::size_t>(len));
      for (std::int64_t i = 0; i < len; ++i) v[i] = mean + sd * normal(static_cast<std::uint64_t>(i0 + i));
      if (p.dtype() == DType::BF16) {
        std::vector<bf16> b(v.begin(), v.end());
        Memory<Backend>::copy_from_host(dst + i0 * elem, b.data(), static_cast<std::size_t>(len * elem));
      } else {
        Memory<Backend>::copy_from_host(dst + i0 * elem, v.data(), static_cast<std::size_t>(len * elem));
      }
    });
  }

  // N(0, 1/k) values quantized per 128x128 block with scale max(amax / 448, 1e-12); one 128-row
  // block of the weight (and its row of scales) per parallel iteration.
  static void fill_fp8(Parameter<Backend>& weight, Parameter<Backend>& scale, std::uint64_t key) {
    const std::int64_t n = weight.shape()[0], k = weight.shape()[1];
    const std::int64_t nb = (n + kBlockSize - 1) / kBlockSize, kb = (k + kBlockSize - 1) / kBlockSize;
    const float sd = 1.0f / std::sqrt(static_cast<float>(k));
    std::byte* codes = allocate_for_fill(weight);
    std::byte* scales = allocate_for_fill(scale);
    parallel_for_each(nb, [&](std::int64_t b) {
      const std::int64_t r0 = b * kBlockSize, rows = std::min(kBlockSize, n - r0);
      const NormalStream normal(key);
      std::vector<float> w(static_cast<std::size_t>(rows * k)), s(static_cast<std::size_t>(kb), 0.0f);
      for (std::int64_t i = 0; i < rows * k; ++i) w[i] = sd * normal(static_cast<std::uint64_t>(r0 * k + i));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < k; ++c) s[c / kBlockSize] = std::max(s[c / kBlockSize], std::fabs(w[r * k + c]));
      for (float& v : s) v = std::max(v / kE4m3Max, 1e-12f);
      std::vector<std::uint8_t> q(w.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c0 = 0; c0 < k; c0 += kBlockSize) {
          const float sb = s[c0 / kBlockSize];
          for (std::int64_t c = c0; c < std::min(k, c0 + kBlockSize); ++c) q[r * k + c] = encode_e4m3(w[r * k + c] / sb);
        }
      Memory<Backend>::copy_from_host(codes + r0 * k, q.data(), q.size());
      Memory<Backend>::copy_from_host(scales + b * kb * static_cast<std::int64_t>(sizeof(float)), s.data(),
                                      s.size() * sizeof(float));
    });
  }

  RuntimeOptions options_;
  Parallel parallel_;
  Embedding<Backend> embed_;
  std::vector<Block<Config, Backend>> layers_;
  RMSNorm<Backend> norm_;
  Linear<Backend> head_;
  RopeTable<Backend> rope_;
  bool ready_ = false;
  std::vector<std::int64_t> filled_;  // per sequence: positions [0, filled) are cached

  typename Block<Config, Backend>::Scratch scratch_;
  Tensor<bf16, Backend> h_, residual_, last_;
  Tensor<std::int32_t, Backend> token_buf_;
  Tensor<float, Backend> logits_;
};

/// @}

}  // namespace dsv32
