/// \file
/// \brief Converting a Hugging Face checkpoint into the reference's model-parallel shards
///        (`model{rank}-mp{world}.safetensors`), exactly as the reference's convert.py lays them out,
///        streaming every tensor so that memory stays bounded whatever the checkpoint's size.
///
/// \code
/// dsv32::convert_hf_checkpoint("DeepSeek-V3.2-Exp", "dsv32-mp8", 8, [](const dsv32::ConvertProgress& p) {
///   std::cerr << p.file.filename().string() << ": " << p.tensors_done << "/" << p.tensors_total << "\n";
/// });
/// // rank r of 8 then loads its shard: load_checkpoint(model, "dsv32-mp8") with Parallel{8, r, &comm}
/// \endcode
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/config/model_args.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/filesystem.hpp"
#include "dsv32/io/hf_checkpoint.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/io/tensor_source.hpp"

namespace dsv32 {

/// \addtogroup io
/// @{

/// \brief One tensor of a model-parallel shard: where its bytes come from and which part it takes.
struct ShardTensor {
  std::string name;                 ///< dsv32 name (the reference's converted naming)
  const TensorInfo* source = nullptr;  ///< the whole tensor in the Hugging Face shard (Hugging Face name)
  TensorSharding sharding;          ///< how it is distributed
  std::vector<std::int64_t> shape;  ///< its shape in this rank's file
  std::uint64_t bytes = 0;          ///< its size in this rank's file

  /// \brief Where rank `rank`'s part of the source's bytes lies (split tensors: the rank's slice).
  TensorBytes slice_of(int rank, int world) const {
    if (sharding.kind != ShardKind::split) return TensorBytes::whole(source->data, source->bytes());
    return TensorBytes::slice(source->data, source->shape, dtype_size(source->dtype),
                              static_cast<std::size_t>(sharding.dim), rank, world);
  }
};

/// \brief What each rank's file of a conversion holds: `ranks[r]` lists the tensors of
///        `model{r}-mp{world}.safetensors`, sorted by name (the file's order).
struct ShardPlan {
  int world = 1;                                ///< ranks (files)
  std::vector<std::vector<ShardTensor>> ranks;  ///< [world] each rank's tensors, sorted by name

  /// \brief Bytes of tensor data in rank r's file.
  std::uint64_t bytes(int r) const {
    std::uint64_t n = 0;
    for (const ShardTensor& t : ranks[static_cast<std::size_t>(r)]) n += t.bytes;
    return n;
  }
};

/// \brief Plans the split of a Hugging Face checkpoint over `world` ranks, as convert.py does it
///        (see tensor_sharding()), checking everything before a byte is written.
///
/// Checks, all reported together: world >= 1; `n_experts`, when given (convert.py's --n-experts),
/// equals the config's n_routed_experts; the sizes the model splits (vocab_size, n_heads, inter_dim,
/// n_routed_experts, n_shared_experts x moe_inter_dim) divide by world; every split tensor's dimension
/// divides by world (its `.scale` too) and, for FP8 weights, leaves each rank whole 128-blocks (else
/// a rank's slice would share a block scale with its neighbour's: convert.py would write it, but the
/// weights would be wrong); every routed expert's index is below n_routed_experts.
/// \throws Error(invalid_argument) listing every problem (up to 20).
inline ShardPlan plan_model_parallel_shards(const HfCheckpointSource& source, int world,
                                            std::optional<std::int64_t> n_experts = std::nullopt) {
  DSV32_CHECK(world >= 1, invalid_argument, "model-parallel world size must be >= 1, got ", world);
  const ModelArgs& a = source.config().args;
  std::vector<std::string> problems;
  auto problem = [&](auto&&... pieces) { problems.push_back(detail::concat(pieces...)); };
  if (n_experts && *n_experts != a.n_routed_experts)
    problem("--n-experts is ", *n_experts, " but config.json has n_routed_experts = ", a.n_routed_experts);
  const std::pair<const char*, std::int64_t> split_sizes[] = {
      {"vocab_size", a.vocab_size},
      {"n_heads", a.n_heads},
      {"inter_dim", a.inter_dim},
      {"n_routed_experts", a.n_routed_experts},
      {"n_shared_experts * moe_inter_dim", a.n_shared_experts * a.moe_inter_dim}};
  for (const auto& [what, size] : split_sizes)
    if (size % world != 0) problem(what, " (", size, ") is not divisible by the world size ", world);
  const std::int64_t experts_per_rank = a.n_routed_experts / world;

  ShardPlan plan;
  plan.world = world;
  plan.ranks.resize(static_cast<std::size_t>(world));
  for (const std::string& name : source.names()) {
    const TensorInfo& t = *source.find(name);
    const TensorNameMatch m = match_dsv32_name(name);
    const std::string where = "tensor '" + name + "' (" + source.origin(name) + ", shape " + t.shape_str() + ")";
    ShardTensor st{name, &t, m.sharding, t.shape, t.bytes()};
    switch (m.sharding.kind) {
      case ShardKind::replicated:
        for (auto& r : plan.ranks) r.push_back(st);
        break;
      case ShardKind::by_expert:
        if (m.expert >= a.n_routed_experts) {
          problem(where, ": expert ", m.expert, " >= n_routed_experts (", a.n_routed_experts, ")");
        } else if (experts_per_rank > 0 && a.n_routed_experts % world == 0) {
          plan.ranks[static_cast<std::size_t>(m.expert / experts_per_rank)].push_back(st);
        }
        break;
      case ShardKind::split: {
        const int d = m.sharding.dim;
        if (static_cast<int>(t.rank()) <= d) {
          problem(where, ": has no dimension ", d, " to split");
          break;
        }
        if (t.shape[static_cast<std::size_t>(d)] % world != 0) {
          problem(where, ": dimension ", d, " (", t.shape[static_cast<std::size_t>(d)],
                  ") is not divisible by the world size ", world);
          break;
        }
        const std::int64_t local = t.shape[static_cast<std::size_t>(d)] / world;
        const bool fp8_weight = t.dtype == DType::F8_E4M3;  // its block scales are F32
        if (fp8_weight && local % kBlockSize != 0) {
          problem(where, ": each rank's ", local, " along dimension ", d, " is not a whole number of ", kBlockSize,
                  "-blocks, so ranks would share FP8 block scales");
          break;
        }
        st.shape[static_cast<std::size_t>(d)] = local;
        st.bytes = t.bytes() / static_cast<std::uint64_t>(world);
        for (auto& r : plan.ranks) r.push_back(st);
        break;
      }
    }
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "cannot split " << source.describe() << " over " << world << " ranks: " << problems.size() << " problem(s):";
    for (std::size_t i = 0; i < problems.size() && i < 20; ++i) os << "\n  " << problems[i];
    if (problems.size() > 20) os << "\n  ... and " << problems.size() - 20 << " more";
    fail(ErrorKind::invalid_argument, os.str());
  }
  for (auto& r : plan.ranks)
    std::sort(r.begin(), r.end(), [](const ShardTensor& x, const ShardTensor& y) { return x.name < y.name; });
  return plan;
}

/// \brief Rank `rank`'s part of a Hugging Face checkpoint for a model of `world` ranks, served from
///        the mapped shards at load time: what `model{rank}-mp{world}.safetensors` would hold after
///        convert_hf_checkpoint(), without writing it.
///
/// Tensors are split as plan_model_parallel_shards() plans them (the reference's convert.py), which
/// checks the whole split first: a world size that does not divide a split dimension, or an FP8
/// split that would not leave each rank whole 128-blocks, is refused with every problem listed.
/// Replicated tensors and row slices (dimension 0: embed, wq_b, wkv_b, w1, w3, head) are contiguous
/// in the mapping and are borrowed in place where the backend's memory is host memory; column slices
/// (dimension 1: wo, w2 and their block scales, which split along the same dimension in 128-blocks)
/// are gathered run by run into the model's memory (TensorSource::bytes_of()). Routed experts of
/// other ranks are not served at all. So a rank reads only its own bytes: the mapping of every
/// shard costs address space, and only the pages of this rank's slices are ever touched.
/// The HfCheckpointSource must outlive this object.
class HfShardSource : public TensorSource {
 public:
  /// \brief Plans the split of `source` over `world` ranks and keeps rank `rank`'s part.
  /// \throws Error(invalid_argument) for a rank outside [0, world) or a split that does not divide
  ///         (every problem listed, as plan_model_parallel_shards()).
  HfShardSource(const HfCheckpointSource& source, int world, int rank) : source_(source), world_(world), rank_(rank) {
    DSV32_CHECK(rank >= 0 && rank < world, invalid_argument, "rank ", rank, " outside [0, ", world, ")");
    ShardPlan plan = plan_model_parallel_shards(source, world);
    for (ShardTensor& t : plan.ranks[static_cast<std::size_t>(rank)]) {
      TensorInfo local = *t.source;
      local.shape = t.shape;
      const TensorBytes b = t.slice_of(rank, world);
      local.data = b.data;
      local.begin = t.source->begin + static_cast<std::uint64_t>(b.data - t.source->data);
      local.end = local.begin + b.bytes();
      const std::string name = t.name;
      const auto it = tensors_.emplace(name, Entry{std::move(t), std::move(local), b}).first;
      by_info_.emplace(&it->second.local, &it->second);  // map nodes do not move
    }
  }

  /// \brief Rank `rank`'s part of the tensor called `name` (its shape is the local one).
  const TensorInfo* find(const std::string& name) const override {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second.local;
  }
  std::shared_ptr<const void> owner_of(const TensorInfo& t) const override {
    return source_.owner_of(*entry_of(t).whole.source);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, e] : tensors_) out.push_back(name);
    return out;
  }
  std::string describe() const override {
    return detail::concat("rank ", rank_, " of ", world_, " of ", source_.describe());
  }
  std::string origin(const std::string& name) const override { return source_.origin(name); }
  TensorBytes bytes_of(const TensorInfo& t) const override { return entry_of(t).bytes; }

 private:
  struct Entry {
    ShardTensor whole;   // the tensor in the checkpoint and its split
    TensorInfo local;    // this rank's part, as the loader sees it
    TensorBytes bytes;   // where that part lies in the mapping
  };
  const Entry& entry_of(const TensorInfo& t) const {
    const auto it = by_info_.find(&t);
    DSV32_CHECK(it != by_info_.end(), invalid_argument, "HfShardSource: tensor ", detail::quoted(t.name),
                " does not come from this source");
    return *it->second;
  }

  const HfCheckpointSource& source_;
  int world_, rank_;
  std::map<std::string, Entry> tensors_;  // by dsv32 name
  std::unordered_map<const TensorInfo*, const Entry*> by_info_;
};

/// \brief Where a conversion stands, reported after each tensor written.
struct ConvertProgress {
  int rank = 0;                    ///< the rank whose file is being written
  int world = 1;                   ///< ranks (files) in the conversion
  std::filesystem::path file;      ///< that file
  std::string_view tensor;         ///< the tensor just written (dsv32 name)
  std::size_t tensors_done = 0;    ///< tensors written to this file so far
  std::size_t tensors_total = 0;   ///< tensors in this file
  std::uint64_t bytes_done = 0;    ///< tensor bytes written to this file so far
  std::uint64_t bytes_total = 0;   ///< tensor bytes of this file
};

/// \brief Receives ConvertProgress reports (called on the converting thread).
using ConvertProgressFn = std::function<void(const ConvertProgress&)>;

/// \brief Options of convert_hf_checkpoint().
struct ConvertOptions {
  /// convert.py's --n-experts; when given it must equal the config's n_routed_experts.
  std::optional<std::int64_t> n_experts;
  /// Copy the files whose names contain "token" (tokenizer.json, tokenizer_config.json, ...), as convert.py does.
  bool copy_tokenizer_files = true;
  /// Write a config.json in the reference's ModelArgs naming (see to_reference_config()).
  bool write_config = true;
};

/// \brief What convert_hf_checkpoint() wrote.
struct ConvertResult {
  std::vector<std::filesystem::path> shards;  ///< model{r}-mp{world}.safetensors, by rank
  std::vector<std::size_t> tensors;           ///< tensors per shard
  std::vector<std::uint64_t> bytes;           ///< tensor bytes per shard
  std::vector<std::filesystem::path> copied;  ///< tokenizer files copied
  std::filesystem::path config;               ///< the config.json written (empty if none)
  std::size_t skipped = 0;                    ///< multi-token-prediction tensors left out
};

/// \brief Splits the Hugging Face checkpoint in `hf_dir` into `world` model-parallel shards in
///        `out_dir`, laid out exactly as the reference's convert.py writes them.
///
/// Each rank's file `model{r}-mp{world}.safetensors` holds, under dsv32's names (convert.py's):
/// the replicated tensors whole; the split ones' r-th slice along their dimension (embed, wq_b,
/// wkv_b, w1, w3, head along 0; wo, w2 along 1; FP8 scales like their weights; shared experts split
/// like an MLP); the routed experts [r E / world, (r + 1) E / world) whole and no others; no
/// multi-token-prediction tensor. Dtypes are kept (FP8 weights, f32 scales, bf16 norms). Then the
/// tokenizer files are copied and a config.json in the reference's naming is written.
///
/// Everything is checked first (plan_model_parallel_shards()): a split that does not divide fails
/// before anything is written. Files are written one at a time, each tensor streamed from the mapped
/// input into the output (SafetensorsWriter producers): memory use stays at a few MB whatever the
/// checkpoint's size (the page cache holds what was read). Each file is written under a temporary
/// name and renamed when complete, so an interrupted conversion never leaves a truncated shard.
/// \param hf_dir   the Hugging Face checkpoint directory (config.json and *.safetensors)
/// \param out_dir  where the shards go; created if missing; existing shards are replaced
/// \param world    model-parallel ranks, one file each
/// \param progress called after every tensor written (may be empty)
/// \param options  expert count check, tokenizer copy, config.json
/// \throws Error(invalid_argument) for a world size that does not divide (every problem listed) or
///         `out_dir` being `hf_dir`; as HfCheckpointSource for a bad checkpoint; Error(io) if a file
///         cannot be written.
inline ConvertResult convert_hf_checkpoint(const std::filesystem::path& hf_dir, const std::filesystem::path& out_dir,
                                           int world, const ConvertProgressFn& progress = {},
                                           const ConvertOptions& options = {}) {
  namespace fs = std::filesystem;
  const HfCheckpointSource source(hf_dir);
  const ShardPlan plan = plan_model_parallel_shards(source, world, options.n_experts);
  std::error_code ec;
  const bool out_exists = detail::path_exists(out_dir);
  DSV32_CHECK(!out_exists || !fs::equivalent(hf_dir, out_dir, ec), invalid_argument,
              "the output directory ", out_dir.string(), " is the input checkpoint directory; choose another");
  DSV32_CHECK(!out_exists || detail::path_is_directory(out_dir), io, "output path ", out_dir.string(),
              " exists and is not a directory");
  fs::create_directories(out_dir, ec);
  DSV32_CHECK(!ec, io, "cannot create the output directory ", out_dir.string(), ": ", ec.message());

  ConvertResult result;
  result.skipped = source.skipped().size();
  for (int r = 0; r < world; ++r) {
    const auto& tensors = plan.ranks[static_cast<std::size_t>(r)];
    ConvertProgress p;
    p.rank = r;
    p.world = world;
    p.file = out_dir / shard_file_name(r, world);
    p.tensors_total = tensors.size();
    p.bytes_total = plan.bytes(r);
    SafetensorsWriter writer;
    for (const ShardTensor& t : tensors) {
      writer.add(t.name, t.source->dtype, t.shape, [&, r](const SafetensorsWriter::Sink& sink) {
        const TensorInfo& in = *t.source;
        if (t.sharding.kind != ShardKind::split) {
          sink(in.data, in.bytes());
        } else {  // the r-th slice along its dimension: runs of contiguous bytes
          const TensorBytes b = t.slice_of(r, world);
          for (std::uint64_t run = 0; run < b.runs; ++run) sink(b.data + run * b.stride, b.run_bytes);
        }
        ++p.tensors_done;
        p.bytes_done += t.bytes;
        p.tensor = t.name;
        if (progress) progress(p);
      });
    }
    writer.write(p.file);
    result.shards.push_back(p.file);
    result.tensors.push_back(tensors.size());
    result.bytes.push_back(p.bytes_total);
  }

  if (options.write_config) {
    result.config = out_dir / "config.json";
    const std::string text = to_reference_config(source.config().args).dump(2) + "\n";
    detail::AtomicFileWriter out(result.config);
    out.write(text.data(), text.size());
    out.commit();
  }
  if (options.copy_tokenizer_files) {
    std::vector<fs::path> files;
    for (const auto& e : detail::directory_entries(hf_dir))
      if (detail::path_is_regular_file(e.path()) && e.path().filename().string().find("token") != std::string::npos)
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      const fs::path to = out_dir / f.filename();
      fs::copy_file(f, to, fs::copy_options::overwrite_existing, ec);
      DSV32_CHECK(!ec, io, "cannot copy ", f.string(), " to ", to.string(), ": ", ec.message());
      result.copied.push_back(to);
    }
  }
  return result;
}

/// @}

}  // namespace dsv32
