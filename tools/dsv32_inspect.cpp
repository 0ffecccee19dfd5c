// dsv32-inspect: what a DeepSeek-V3.2-Exp config costs — its shapes, parameter counts, weight bytes
// per dtype, KV and indexer cache bytes per token and the memory plan for a batch and sequence
// length — and whether a checkpoint holds exactly the tensors that config needs.
//
//   dsv32-inspect --preset NAME | --config FILE [--batch B] [--seq-len L] [--tokens-per-call N] [--cache-budget SIZE]
//                 [--page-size P] [--world-size W] [--json]
//   dsv32-inspect --checkpoint PATH [--preset NAME | --config FILE] [--world-size W] [--limit N | --all] [--json]
//   dsv32-inspect --list-presets
//
// Nothing is allocated: every figure comes from the library's tensor table (dsv32::for_each_tensor)
// and memory plan (dsv32::plan_memory), which serve any config, compiled or read from a file.
//
// Exit status: 0 success; 1 the checkpoint does not hold exactly the config's tensors; 2 an error
// (bad arguments, an unreadable or invalid file, a config no compiled config matches).
#include <dsv32/core/filesystem.hpp>
#include <dsv32/config/registry.hpp>
#include <dsv32/dsv32.hpp>
#include <dsv32/io/checkpoint.hpp>

// Hugging Face checkpoints and config.json files (HfCheckpointSource, read_hf_config).
#include <dsv32/io/hf_checkpoint.hpp>

#include "cli.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::ModelArgs;
using dsv32::Presets;
using dsv32::RuntimeOptions;
using Json = nlohmann::ordered_json;

constexpr const char* kUsage = R"(usage:
  dsv32-inspect (--preset NAME | --config FILE) [--batch B] [--seq-len L] [--tokens-per-call N]
                [--cache-budget SIZE] [--page-size P] [--world-size W] [--json]
  dsv32-inspect --checkpoint PATH [--preset NAME | --config FILE] [--world-size W] [--limit N | --all] [--json]
  dsv32-inspect --list-presets [--json])";

constexpr const char* kDescription = R"(Describes a DeepSeek-V3.2-Exp config without allocating its weights: shape fields, parameter
counts (total, activated per token, per component), weight bytes per dtype, KV and indexer cache
bytes per token, and the memory plan (weights + caches + RoPE tables + forward scratch) of one
model-parallel rank.
With --checkpoint, checks that a checkpoint holds exactly the config's tensors instead.)";

constexpr const char* kFooter = "Exit status: 0 success; 1 the checkpoint does not hold exactly the config's tensors; 2 an error.";

/// Bad command-line arguments (exit 2, with a pointer to --help).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void usage_error(Args&&... args) {
  throw UsageError(dsv32::detail::concat(std::forward<Args>(args)...));
}

// ------------------------------------------------------------------------------------------ arguments

struct Args {
  std::string preset, config, checkpoint;
  std::optional<std::int64_t> batch, seq_len, tokens_per_call;
  std::size_t cache_budget = 0;
  std::int64_t page_size = dsv32::kDefaultPageSize;
  std::optional<int> world_size;
  std::size_t limit = 10;
  bool all = false, json = false, list_presets = false;
};

// Limits keep every product below (cache bytes, table bytes) representable; no real deployment nears them.
constexpr std::int64_t kMaxBatch = std::int64_t{1} << 24;
constexpr std::int64_t kMaxSeqLen = 0x7fffffff;  // positions are 32-bit
constexpr std::int64_t kMaxWorld = 1 << 16;

Args parse_args(int argc, char** argv) {
  namespace cli = dsv32::tools;
  Args a;
  CLI::App app(kDescription, "dsv32-inspect");
  cli::setup(app, kUsage, 22);
  app.footer(kFooter);
  const auto count = [](std::int64_t lo, std::int64_t hi, auto& target, const char* name, const char* text,
                        const char* description, CLI::App& to) {
    return to.add_option_function<std::int64_t>(name, [&target](std::int64_t v) { target = v; }, description)
        ->option_text(text)
        ->check(cli::integer(lo, hi));
  };
  app.add_option("--preset", a.preset, "a config compiled into dsv32 (see --list-presets)")->option_text("NAME");
  app.add_option("--config", a.config,
                 "a config.json (the reference's ModelArgs fields, or Hugging Face's); the\n"
                 "compiled config it matches, if any, is named")
      ->option_text("FILE");
  count(1, kMaxBatch, a.batch, "--batch", "B",
        "max_batch_size the caches are sized for (default: the config.json's, else 8)", app);
  count(1, kMaxSeqLen, a.seq_len, "--seq-len", "L",
        "max_seq_len the caches and RoPE tables are sized for (default: the config.json's,\n"
        "else 16384)",
        app);
  count(1, kMaxSeqLen, a.tokens_per_call, "--tokens-per-call", "N",
        "max_tokens_per_call: tokens per sequence one forward pass computes (longer\n"
        "prompts run in passes); sizes the forward scratch (default: max_seq_len)",
        app);
  app.add_option("--cache-budget", a.cache_budget,
                 "the serving engine's page pool for this many bytes of cache (a number with an\n"
                 "optional K, M, G or T suffix, powers of 1024): pages, positions and bytes")
      ->option_text("SIZE")
      ->transform(cli::bytes(std::uint64_t{1} << 60, "2^60"));
  count(1, std::int64_t{1} << 20, a.page_size, "--page-size", "P", "positions per page of that pool (default 64)", app);
  count(1, kMaxWorld, a.world_size, "--world-size", "W",
        "model-parallel ranks; figures are per rank (default 1; with --checkpoint: the\n"
        "world size of the model{rank}-mp{world}.safetensors files found; for a Hugging\n"
        "Face directory, each rank's slice as loading at world size W takes it)",
        app);
  app.add_option("--checkpoint", a.checkpoint,
                 "a checkpoint directory in the reference's converted format (config.json and\n"
                 "model{rank}-mp{world}.safetensors), or one .safetensors file),\n"
                 "or a Hugging Face checkpoint directory (config.json, model.safetensors[.index.json]);\n"
                 "reports the tensors present, missing, extra, and those with the wrong dtype\n"
                 "or shape, compared with the tensor table of its config.json (or the config given)")
      ->option_text("PATH");
  count(0, 1 << 30, a.limit, "--limit", "N", "names listed per list with --checkpoint (default 10)", app);
  app.add_flag("--all", a.all, "list every name");
  app.add_flag("--json", a.json, "print one JSON object instead of text");
  app.add_flag("--list-presets", a.list_presets, "list the compiled configs");
  cli::add_help(app, "this text");
  cli::parse(app, argc, argv);
  if (a.list_presets) return a;
  if (!a.preset.empty() && !a.config.empty()) usage_error("give --preset or --config, not both");
  if (a.checkpoint.empty() && a.preset.empty() && a.config.empty())
    usage_error("nothing to inspect: give --preset NAME, --config FILE or --checkpoint PATH");
  if (!a.checkpoint.empty() && (a.batch || a.seq_len || a.tokens_per_call || a.cache_budget))
    usage_error("--batch, --seq-len, --tokens-per-call and --cache-budget size the memory plan; with --checkpoint no "
                "plan is printed");
  return a;
}

// ------------------------------------------------------------------------------------------ helpers

/// 671877944064 -> "671,877,944,064".
std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}


template <class... Configs>
std::vector<std::string> names_of(const dsv32::ConfigList<Configs...>*) {
  return {std::string(Configs::name)...};
}
/// The compiled presets, in registry order.
std::vector<std::string> preset_names() { return names_of(static_cast<const Presets*>(nullptr)); }

/// Runs `f.template operator()<C>()` with the compiled preset called `name` (which must exist).
template <class F>
void with_preset(const std::string& name, F&& f) {
  if (!Presets::by_name(name, f)) dsv32::fail(ErrorKind::invalid_argument, "no compiled config named ", name);
}

// ------------------------------------------------------------------------------------------ config

/// The config to inspect: its fields, where it came from, and the compiled config it matches.
struct ResolvedConfig {
  ModelArgs args;
  std::string source;    ///< "preset NAME" or the config.json path
  std::string compiled;  ///< the matching compiled config's name; empty when none matches
  bool hf_naming = false;  ///< read from a config.json in Hugging Face's naming
};

ResolvedConfig resolve_preset(const std::string& name) {
  ResolvedConfig r;
  const bool found = Presets::by_name(name, [&]<class C>() { r.args = ModelArgs::template of<C>(); });
  if (!found) {
    std::string valid;
    for (const std::string& n : preset_names()) valid += "\n  " + n;
    usage_error("unknown preset '", name, "'; the compiled presets are:", valid);
  }
  r.source = "preset " + name;
  r.compiled = name;
  return r;
}

/// Whether a parsed config.json uses Hugging Face's field names (hidden_size, num_hidden_layers, ...)
/// rather than the reference's ModelArgs names.
bool hf_naming(const nlohmann::json& j) {
  return dsv32::is_hf_config(j);
}

/// Reads a config.json in either naming: the reference's ModelArgs fields, or Hugging Face's.
ResolvedConfig resolve_config_file(const fs::path& path) {
  const fs::file_status status = dsv32::detail::path_status(path);
  DSV32_CHECK(fs::exists(status), io, "cannot read config file ", path.string(), ": no such file");
  DSV32_CHECK(!fs::is_directory(status), io, "cannot read config file ", path.string(), ": it is a directory");
  ResolvedConfig r;
  std::ifstream in(path);
  const nlohmann::json peek = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (hf_naming(peek)) {
    r.args = dsv32::read_hf_config(path).args;
    r.hf_naming = true;
  } else {
    r.args = ModelArgs::from_file(path);
  }
  r.args.validate(path.string());
  r.source = path.string();
  Presets::matching(r.args, [&]<class C>() { r.compiled = std::string(C::name); });
  return r;
}

// ------------------------------------------------------------------------------------------ weights

/// What a weight tensor is, for the bytes-per-dtype table.
enum class WeightKind { fp8, block_scale, bf16, f32 };
constexpr std::array kWeightKinds = {WeightKind::fp8, WeightKind::block_scale, WeightKind::bf16, WeightKind::f32};

const char* kind_key(WeightKind k) {
  switch (k) {
    case WeightKind::fp8: return "fp8_weights";
    case WeightKind::block_scale: return "f32_block_scales";
    case WeightKind::bf16: return "bf16";
    case WeightKind::f32: return "f32";
  }
  return "?";
}
const char* kind_label(WeightKind k) {
  switch (k) {
    case WeightKind::fp8: return "F8_E4M3 weights";
    case WeightKind::block_scale: return "F32 block scales (1 per 128x128)";
    case WeightKind::bf16: return "BF16 weights";
    case WeightKind::f32: return "F32 norms and biases";
  }
  return "?";
}
DType kind_dtype(WeightKind k) {
  switch (k) {
    case WeightKind::fp8: return DType::F8_E4M3;
    case WeightKind::bf16: return DType::BF16;
    default: return DType::F32;
  }
}

/// Weights of one rank by kind.
struct RankWeights {
  struct Totals {
    std::int64_t tensors = 0;
    std::uint64_t bytes = 0;
  };
  std::array<Totals, kWeightKinds.size()> by_kind{};
  std::int64_t parameters = 0;  ///< elements on this rank, FP8 scales excluded

  /// Adds `copies` tensors of `numel` elements each.
  void add(WeightKind kind, std::int64_t numel, std::int64_t copies = 1) {
    Totals& t = by_kind[static_cast<std::size_t>(kind)];
    t.tensors += copies;
    t.bytes += static_cast<std::uint64_t>(numel * copies) * dsv32::dtype_size(kind_dtype(kind));
    if (kind != WeightKind::block_scale) parameters += numel * copies;
  }
  /// Adds a row of the tensor table (count tensors of its local shape).
  void add(const dsv32::TensorSpec& t) {
    switch (t.dtype) {
      case DType::F8_E4M3: return add(WeightKind::fp8, t.local_numel(), t.count);
      case DType::BF16: return add(WeightKind::bf16, t.local_numel(), t.count);
      case DType::F32:
        return add(t.role == dsv32::TensorRole::scale ? WeightKind::block_scale : WeightKind::f32, t.local_numel(), t.count);
      default:
        dsv32::fail(ErrorKind::unsupported, "tensor ", t.name(), " has dtype ", dsv32::dtype_name(t.dtype),
                    ", which dsv32-inspect does not classify");
    }
  }
  std::uint64_t bytes() const {
    std::uint64_t n = 0;
    for (const Totals& t : by_kind) n += t.bytes;
    return n;
  }
  std::int64_t tensors() const {
    std::int64_t n = 0;
    for (const Totals& t : by_kind) n += t.tensors;
    return n;
  }
};

/// Cache bytes per (sequence, position).
struct CacheBytes {
  std::uint64_t mla = 0;      ///< one layer: kv_lora_rank latent + qk_rope_head_dim key, bf16
  std::uint64_t indexer = 0;  ///< one layer: index_head_dim FP8 codes + index_head_dim / 128 f32 scales
  std::uint64_t per_layer() const { return mla + indexer; }
};

/// Everything the config report prints.
struct ConfigReport {
  ResolvedConfig config;
  dsv32::ParamCounts params;
  RankWeights weights;
  CacheBytes cache;
  RuntimeOptions options;
  int world_size = 1;
  dsv32::MemoryPlan plan;
};

ConfigReport inspect_config(const ResolvedConfig& config, const Args& args) {
  ConfigReport r;
  r.config = config;
  r.options = config.args.runtime;
  if (args.batch) r.options.max_batch_size = *args.batch;
  if (args.seq_len) r.options.max_seq_len = *args.seq_len;
  if (args.tokens_per_call) r.options.max_tokens_per_call = *args.tokens_per_call;
  r.options.validate();
  r.world_size = args.world_size.value_or(1);
  const ModelArgs& a = config.args;
  r.params = dsv32::count_params(a);
  dsv32::for_each_tensor(a, [&](const dsv32::TensorSpec& t) { r.weights.add(t); }, dsv32::TableMode::patterns,
                         r.world_size, 0);
  r.cache.indexer = dsv32::indexer_cache_bytes_per_token(a);
  r.cache.mla = dsv32::mla_cache_bytes_per_token(a) - r.cache.indexer;
  r.plan = dsv32::plan_memory(a, r.options, r.world_size, 0, args.cache_budget, args.page_size);
  return r;
}

// ------------------------------------------------------------------------------------------ checkpoint

/// A tensor the checkpoint lacks, has in excess, or has with the wrong dtype or shape.
struct TensorNote {
  std::string name;
  std::string expected;  ///< "BF16 [64, 96]"; empty for an extra tensor
  std::string found;     ///< empty for a missing tensor
  std::string alias;     ///< its name in the checkpoint's own naming (Hugging Face), when that differs
};

TensorNote note(std::string name, std::string expected, std::string found) {
  TensorNote n;
  n.name = std::move(name);
  n.expected = std::move(expected);
  n.found = std::move(found);
  return n;
}

/// The check of one model-parallel shard.
struct ShardCheck {
  int rank = 0;
  std::string file;
  std::string status = "ok";  ///< ok, absent, unreadable
  std::string error;
  std::int64_t expected = 0;
  std::vector<std::string> present;  ///< found, whether or not its dtype and shape are right
  std::uint64_t present_bytes = 0;
  std::vector<TensorNote> missing, extra, mismatched;
};

struct CheckpointReport {
  std::string path, format;
  ResolvedConfig config;
  std::vector<std::string> config_notes;  ///< where the given config and the checkpoint's config.json disagree
  int world_size = 1;
  std::vector<ShardCheck> shards;
  std::vector<std::string> skipped;  ///< Hugging Face multi-token-prediction tensors, which dsv32 does not load

  template <class Get>
  std::int64_t sum(Get get) const {
    std::int64_t n = 0;
    for (const ShardCheck& s : shards) n += static_cast<std::int64_t>(get(s));
    return n;
  }
  bool complete() const {
    for (const ShardCheck& s : shards)
      if (s.status != "ok" || !s.missing.empty() || !s.extra.empty() || !s.mismatched.empty()) return false;
    return true;
  }
};

std::string describe(DType dtype, const std::vector<std::int64_t>& shape) {
  return std::string(dsv32::dtype_name(dtype)) + ' ' + dsv32::detail::shape_string(shape);
}

/// Compares `source` (null when the shard's file is absent or unreadable) with what rank `s.rank` of a
/// model with fields `a` loads — the rows of the tensor table — collecting instead of throwing.
void check_shard(const ModelArgs& a, const dsv32::TensorSource* source, int world, ShardCheck& s) {
  std::set<std::string> expected;
  dsv32::for_each_tensor(a, [&](const dsv32::TensorSpec& spec) {
    const dsv32::Parameter<dsv32::Cpu> p(spec);  // binds nothing: only its dtype rules are asked
    const std::string& name = p.name();
    expected.insert(name);
    ++s.expected;
    const std::vector<std::int64_t> want = p.shape().dims();
    const dsv32::TensorInfo* t = source ? source->find(name) : nullptr;
    if (!t) {
      s.missing.push_back(note(name, describe(p.dtype(), want), ""));
      return;
    }
    s.present.push_back(name);
    s.present_bytes += t->bytes();
    if (!p.accepts(t->dtype) || t->shape != want) {
      std::string expect = describe(p.dtype(), want);
      if (p.dtype() == DType::F32) expect += " (or BF16)";
      s.mismatched.push_back(note(name, expect, describe(t->dtype, t->shape)));
    }
  }, dsv32::TableMode::instances, world, s.rank);
  if (!source) return;
  for (const std::string& name : source->names())
    if (!expected.count(name)) {
      const dsv32::TensorInfo* t = source->find(name);
      s.extra.push_back(note(name, "", t ? describe(t->dtype, t->shape) : ""));
    }
}

/// Whether `dir` holds a Hugging Face checkpoint: its index or model.safetensors (load_checkpoint()'s rule,
/// after the reference's shards).
bool is_hf_directory(const fs::path& dir) {
  return dsv32::HfCheckpointSource::detect(dir);
}

/// The world sizes of the model{rank}-mp{world}.safetensors files in `dir`.
std::set<int> shard_world_sizes(const fs::path& dir) {
  static const std::regex pattern(R"(model(\d+)-mp(\d+)\.safetensors)");
  std::set<int> worlds;
  for (const fs::directory_entry& e : dsv32::detail::directory_entries(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern) && m[2].length() <= 6) worlds.insert(std::stoi(m[2].str()));
  }
  return worlds;
}

/// Checks one shard file against rank `rank` of a model with fields `a`.
ShardCheck check_file(const ModelArgs& a, const fs::path& file, int world, int rank) {
  ShardCheck s;
  s.rank = rank;
  s.file = file.string();
  std::optional<dsv32::SafetensorsSource> source;
  if (!dsv32::detail::path_exists(file)) {
    s.status = "absent";
  } else {
    try {
      source.emplace(file);
    } catch (const dsv32::Error& e) {
      s.status = "unreadable";
      s.error = e.what();
    }
  }
  check_shard(a, source ? &*source : nullptr, world, s);
  return s;
}

CheckpointReport inspect_checkpoint(const Args& args) {
  CheckpointReport r;
  const fs::path path = args.checkpoint;
  r.path = path.string();
  const fs::file_status status = dsv32::detail::path_status(path);
  DSV32_CHECK(fs::exists(status), io, "cannot read checkpoint ", path.string(), ": no such file or directory");
  const bool dir = fs::is_directory(status);
  const fs::path home = dir ? path : path.parent_path();
  // The layout, by load_checkpoint()'s rule: the reference's shards win over a Hugging Face layout.
  const std::set<int> worlds = dir ? shard_world_sizes(path) : std::set<int>{};
  const bool hf = dir && worlds.empty() && is_hf_directory(path);

  // The config: given on the command line, else the checkpoint's config.json.
  const fs::path config_json = home / "config.json";
  if (!args.preset.empty() || !args.config.empty()) {
    r.config = !args.preset.empty() ? resolve_preset(args.preset) : resolve_config_file(args.config);
    if (dsv32::detail::path_exists(config_json) && !r.config.compiled.empty()) {
      try {
        const ModelArgs theirs = resolve_config_file(config_json).args;
        with_preset(r.config.compiled, [&]<class C>() { r.config_notes = theirs.template mismatches<C>(); });
      } catch (const dsv32::Error& e) {
        r.config_notes.push_back(std::string("unreadable: ") + e.what());
      }
    }
  } else {
    if (!dsv32::detail::path_exists(config_json))
      usage_error(home.string(), " has no config.json: name the checkpoint's config with --preset or --config");
    r.config = resolve_config_file(config_json);
  }

  if (hf) {
    // Whole tensors; at world size W each rank's slice as load_checkpoint() takes it (HfShardSource:
    // the reference's split rules), checked against that rank's rows of the tensor table.
    r.format = "Hugging Face";
    r.world_size = args.world_size.value_or(1);
    std::optional<dsv32::HfCheckpointSource> source;
    std::string source_error;
    try {
      source.emplace(path);
      r.skipped = source->skipped();
    } catch (const dsv32::Error& e) {  // an inconsistent index or shard: every rank's tensors count missing
      source_error = e.what();
    }
    for (int rank = 0; rank < r.world_size; ++rank) {
      ShardCheck s;
      s.rank = rank;
      s.file = path.string();
      try {
        if (!source) dsv32::fail(dsv32::ErrorKind::invalid_file, source_error);
        if (r.world_size == 1) {
          check_shard(r.config.args, &*source, 1, s);
        } else {
          const dsv32::HfShardSource slice(*source, r.world_size, rank);
          check_shard(r.config.args, &slice, r.world_size, s);
        }
        for (TensorNote& n : s.missing) n.alias = dsv32::hf_name_from_dsv32(n.name);
      } catch (const dsv32::Error& e) {  // unreadable, or a split the world size does not divide
        s = ShardCheck{};
        s.rank = rank;
        s.file = path.string();
        s.status = "unreadable";
        s.error = e.what();
        check_shard(r.config.args, nullptr, r.world_size, s);
      }
      r.shards.push_back(std::move(s));
    }
    return r;
  }
  r.format = "reference";
  if (!dir) {  // one file: its rank and world from the reference's file name, else rank 0 of 1
    static const std::regex pattern(R"(model(\d+)-mp(\d+)\.safetensors)");
    std::smatch m;
    const std::string name = path.filename().string();
    int rank = 0;
    if (std::regex_match(name, m, pattern) && m[1].length() <= 6 && m[2].length() <= 6) {
      rank = std::stoi(m[1].str());
      r.world_size = std::stoi(m[2].str());
      if (args.world_size && *args.world_size != r.world_size)
        usage_error(name, " is a shard of world size ", r.world_size, ", not ", *args.world_size);
    } else {
      r.world_size = args.world_size.value_or(1);  // an unnamed file: rank 0 of the world size given
    }
    DSV32_CHECK(rank < r.world_size, invalid_argument, name, ": rank ", rank, " outside world size ", r.world_size);
    r.shards.push_back(check_file(r.config.args, path, r.world_size, rank));
    return r;
  }
  if (args.world_size) {
    r.world_size = *args.world_size;
  } else if (worlds.size() == 1) {
    r.world_size = *worlds.begin();
  } else if (worlds.empty()) {
    dsv32::fail(ErrorKind::invalid_file, path.string(), " holds no model{rank}-mp{world}.safetensors file (the "
                "reference's converted format) nor model.safetensors.index.json or model.safetensors (Hugging Face)");
  } else {
    std::string list;
    for (int w : worlds) list += (list.empty() ? "" : ", ") + std::to_string(w);
    usage_error(path.string(), " holds shards for world sizes ", list, "; choose one with --world-size");
  }
  for (int rank = 0; rank < r.world_size; ++rank)
    r.shards.push_back(
        check_file(r.config.args, path / dsv32::shard_file_name(rank, r.world_size), r.world_size, rank));
  return r;
}

// ------------------------------------------------------------------------------------------ output

/// The shape fields (not the runtime options) as a JSON object, gate_bias resolved.
Json shape_json(const ModelArgs& a) {
  const nlohmann::json all = a.to_json();
  Json out = Json::object();
  ModelArgs::visit_fields([&](const char* key, auto... member) {
    if constexpr (sizeof...(member) == 1) {
      if (std::string_view(key) == "gate_bias") out[key] = a.resolved_gate_bias();
      else out[key] = all.at(key);
    }
  });
  return out;
}

Json runtime_json(const RuntimeOptions& o) {
  return Json{{"max_batch_size", o.max_batch_size}, {"max_seq_len", o.max_seq_len},
              {"original_seq_len", o.original_seq_len}, {"rope_theta", o.rope_theta},
              {"rope_factor", o.rope_factor}, {"beta_fast", o.beta_fast}, {"beta_slow", o.beta_slow},
              {"mscale", o.mscale}, {"yarn", o.yarn()}};
}

Json config_json(const ResolvedConfig& c) {
  return Json{{"source", c.source},
              {"naming", c.hf_naming ? "Hugging Face" : "reference"},
              {"compiled", c.compiled.empty() ? Json() : Json(c.compiled)}};
}

Json to_json(const ConfigReport& r) {
  const ModelArgs& a = r.config.args;
  const dsv32::ParamCounts& p = r.params;
  const std::int64_t moe_layers = a.n_layers - a.n_dense_layers;
  Json j;
  j["config"] = config_json(r.config);
  j["shape"] = shape_json(a);
  j["parameters"] = Json{{"total", p.total},
                         {"activated", p.activated},
                         {"embedding", p.embedding},
                         {"head", p.head},
                         {"final_norm", a.dim},
                         {"attention_per_layer", p.attention},
                         {"indexer_per_layer", p.indexer},
                         {"dense_mlp_per_layer", p.dense_mlp},
                         {"expert", p.expert},
                         {"gate_per_moe_layer", p.gate},
                         {"layers", a.n_layers},
                         {"dense_layers", a.n_dense_layers},
                         {"moe_layers", moe_layers}};
  Json kinds = Json::array();
  for (WeightKind k : kWeightKinds) {
    const auto& t = r.weights.by_kind[static_cast<std::size_t>(k)];
    kinds.push_back(Json{{"kind", kind_key(k)}, {"dtype", dsv32::dtype_name(kind_dtype(k))},
                         {"tensors", t.tensors}, {"bytes", t.bytes}});
  }
  j["weights"] = Json{{"source", "tensor table"},
                      {"world_size", r.world_size},
                      {"rank", 0},
                      {"tensors", r.weights.tensors()},
                      {"parameters", r.weights.parameters},
                      {"bytes", r.weights.bytes()},
                      {"by_kind", kinds}};
  j["cache_bytes_per_token"] = Json{{"mla_per_layer", r.cache.mla},
                                    {"indexer_per_layer", r.cache.indexer},
                                    {"per_layer", r.cache.per_layer()},
                                    {"all_layers", r.cache.per_layer() * static_cast<std::uint64_t>(a.n_layers)}};
  j["memory_plan"] = Json{{"batch", r.options.max_batch_size},
                          {"seq_len", r.options.max_seq_len},
                          {"tokens_per_call", r.options.tokens_per_call()},
                          {"world_size", r.world_size},
                          {"weights", r.plan.weights},
                          {"caches", r.plan.caches},
                          {"rope_tables", r.plan.rope_tables},
                          {"scratch", r.plan.scratch},
                          {"total", r.plan.total()}};
  if (r.plan.pool.pages > 0)
    j["page_pool"] = Json{{"page_size", r.plan.pool.page_size},
                          {"pages", r.plan.pool.pages},
                          {"tokens", r.plan.pool.tokens},
                          {"bytes_per_page", r.plan.pool.bytes_per_page},
                          {"bytes", r.plan.pool.bytes}};
  j["runtime"] = runtime_json(r.options);
  return j;
}

/// Rows of cells printed as columns: the label left-aligned, the value right-aligned, the rest
/// (units, notes) left-aligned.
class Table {
 public:
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void row(std::string label, std::string value, std::string note = {}) {
    row({std::move(label), std::move(value), std::move(note)});
  }
  /// A byte count: "1,234,567 B" then "1.18 MiB", then the note.
  void bytes(std::string label, std::uint64_t n, std::string note = {}) {
    row({std::move(label), grouped(n) + " B", n >= 1024 ? dsv32::format_bytes(static_cast<double>(n)) : "",
         std::move(note)});
  }
  void print(std::ostream& os) const {
    std::vector<std::size_t> width;
    for (const auto& r : rows_)
      for (std::size_t c = 0; c < r.size(); ++c) {
        if (width.size() <= c) width.push_back(0);
        width[c] = std::max(width[c], r[c].size());
      }
    for (const auto& r : rows_) {
      std::string line = "  ";
      for (std::size_t c = 0; c < r.size(); ++c) {
        const std::string pad(width[c] - r[c].size(), ' ');
        line += c == 1 ? pad + r[c] : r[c] + pad;
        line += "  ";
      }
      line.erase(line.find_last_not_of(' ') + 1);
      os << line << '\n';
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// "3 layers", "1 layer".
std::string count_of(std::int64_t n, const std::string& noun) {
  return std::to_string(n) + ' ' + noun + (n == 1 ? "" : "s");
}

void print_text(std::ostream& os, const ConfigReport& r) {
  const ModelArgs& a = r.config.args;
  const dsv32::ParamCounts& p = r.params;
  const std::int64_t moe_layers = a.n_layers - a.n_dense_layers;
  os << "config: " << r.config.source << (r.config.hf_naming ? ", Hugging Face naming" : "");
  if (!r.config.compiled.empty()) os << " (compiled config " << r.config.compiled << ")";
  else os << " (matches no compiled config)";
  os << "\n\nShape\n";
  Table shape;
  const Json fields = shape_json(a);
  for (const auto& [key, value] : fields.items())
    shape.row(key, value.is_string() ? value.get<std::string>() : value.dump());
  shape.print(os);

  auto g = [](std::int64_t n) { return grouped(static_cast<std::uint64_t>(n)); };
  os << "\nParameters (weights, biases and norms; FP8 scales excluded)\n";
  Table params;
  params.row("total", g(p.total));
  params.row("activated per token", g(p.activated),
             std::to_string(a.n_activated_experts) + " of " + std::to_string(a.n_routed_experts) + " routed experts");
  params.row("embedding", g(p.embedding), "vocab_size x dim");
  params.row("head", g(p.head), "vocab_size x dim");
  params.row("final norm", g(a.dim));
  params.row("attention, per layer", g(p.attention),
             "MLA with its indexer and the block's 2 norms; x " + count_of(a.n_layers, "layer") + " = " +
                 g(p.attention * a.n_layers));
  params.row("  of which indexer", g(p.indexer), "x " + std::to_string(a.n_layers) + " = " + g(p.indexer * a.n_layers));
  params.row("dense MLP, per layer", g(p.dense_mlp),
             "x " + count_of(a.n_dense_layers, "dense layer") + " = " + g(p.dense_mlp * a.n_dense_layers));
  params.row("expert (routed or shared)", g(p.expert),
             "x " + std::to_string(a.n_routed_experts + a.n_shared_experts) + " per MoE layer x " +
                 std::to_string(moe_layers) + " = " + g(p.expert * (a.n_routed_experts + a.n_shared_experts) * moe_layers));
  params.row("gate, per MoE layer", g(p.gate), "x " + std::to_string(moe_layers) + " = " + g(p.gate * moe_layers));
  params.print(os);

  os << "\nWeights by dtype (the tensor table"
     << (r.world_size > 1 ? ", one rank of " + std::to_string(r.world_size) : std::string()) << ")\n";
  Table weights;
  for (WeightKind k : kWeightKinds) {
    const auto& t = r.weights.by_kind[static_cast<std::size_t>(k)];
    if (t.tensors) weights.bytes(kind_label(k), t.bytes, g(t.tensors) + " tensors");
  }
  weights.bytes("total", r.weights.bytes(),
              g(r.weights.tensors()) + " tensors, " + g(r.weights.parameters) + " parameters");
  weights.print(os);

  os << "\nCache bytes per token (one sequence, one position)\n";
  Table cache;
  cache.row("MLA latent + rope key, bf16", grouped(r.cache.mla) + " B",
            "(kv_lora_rank " + std::to_string(a.kv_lora_rank) + " + qk_rope_head_dim " +
                std::to_string(a.qk_rope_head_dim) + ") x 2 B");
  cache.row("indexer keys, FP8 + scales", grouped(r.cache.indexer) + " B",
            "index_head_dim " + std::to_string(a.index_head_dim) + " x 1 B + " +
                count_of(a.index_head_dim / dsv32::kBlockSize, "f32 scale") + " x 4 B");
  cache.row("per layer", grouped(r.cache.per_layer()) + " B");
  cache.bytes("all " + count_of(a.n_layers, "layer"), r.cache.per_layer() * static_cast<std::uint64_t>(a.n_layers));
  cache.print(os);

  os << "\nMemory plan (batch " << r.options.max_batch_size << ", seq_len " << r.options.max_seq_len;
  if (r.world_size > 1) os << ", per rank of world size " << r.world_size;
  os << ")\n";
  Table plan;
  plan.bytes("weights", r.plan.weights);
  plan.bytes("KV + indexer caches", r.plan.caches,
           std::to_string(r.options.max_batch_size) + " x " + std::to_string(r.options.max_seq_len) + " tokens");
  plan.bytes("RoPE tables", r.plan.rope_tables, r.options.yarn() ? "YaRN on" : "");
  plan.bytes("forward scratch", r.plan.scratch,
             std::to_string(r.options.max_batch_size) + " x " + std::to_string(r.options.tokens_per_call()) +
                 " tokens per pass");
  plan.bytes("total", r.plan.total());
  plan.print(os);
  if (r.plan.pool.pages == 0) return;
  os << "\nServing engine's page pool (pages of " << r.plan.pool.page_size << " positions, every layer)\n";
  Table pool;
  pool.row("pages", grouped(static_cast<std::uint64_t>(r.plan.pool.pages)));
  pool.row("positions", grouped(static_cast<std::uint64_t>(r.plan.pool.tokens)),
           "= " + std::to_string(r.plan.pool.tokens / std::max<std::int64_t>(1, r.options.max_seq_len)) +
               " sequences of max_seq_len, or any mix of lengths");
  pool.bytes("per page", r.plan.pool.bytes_per_page);
  pool.bytes("pool", r.plan.pool.bytes, "instead of the caches above");
  pool.print(os);
}

/// The first `limit` of `notes` under "title (count):"; `count` defaults to notes.size().
void print_names(std::ostream& os, const char* title, const std::vector<TensorNote>& notes, std::size_t limit,
                 std::optional<std::size_t> count = {}) {
  const std::size_t n = count.value_or(notes.size());
  if (n == 0 || limit == 0) return;
  os << "  " << title << " (" << n << "):\n";
  for (std::size_t i = 0; i < notes.size() && i < limit; ++i) {
    const TensorNote& n = notes[i];
    os << "    " << n.name;
    if (!n.found.empty() && !n.expected.empty()) os << ": has " << n.found << ", expected " << n.expected;
    else if (!n.expected.empty()) os << " (expected " << n.expected << ")";
    else if (!n.found.empty()) os << " (" << n.found << ")";
    if (!n.alias.empty()) os << ", stored as " << n.alias;
    os << '\n';
  }
  if (n > limit) os << "    ... and " << n - limit << " more (--all lists every one)\n";
}

Json notes_json(const std::vector<TensorNote>& notes, std::size_t limit) {
  Json out = Json::array();
  for (std::size_t i = 0; i < notes.size() && i < limit; ++i) {
    Json n{{"name", notes[i].name}};
    if (!notes[i].expected.empty()) n["expected"] = notes[i].expected;
    if (!notes[i].found.empty()) n["found"] = notes[i].found;
    if (!notes[i].alias.empty()) n["stored_as"] = notes[i].alias;
    out.push_back(std::move(n));
  }
  return out;
}

Json to_json(const CheckpointReport& r, std::size_t limit) {
  Json shards = Json::array();
  for (const ShardCheck& s : r.shards) {
    Json present = Json::array();
    for (std::size_t i = 0; i < s.present.size() && i < limit; ++i) present.push_back(s.present[i]);
    Json j{{"rank", s.rank}, {"file", s.file}, {"status", s.status}};
    if (!s.error.empty()) j["error"] = s.error;
    j["expected"] = s.expected;
    j["present"] = s.present.size();
    j["present_bytes"] = s.present_bytes;
    j["missing"] = s.missing.size();
    j["extra"] = s.extra.size();
    j["mismatched"] = s.mismatched.size();
    j["present_names"] = present;
    j["missing_tensors"] = notes_json(s.missing, limit);
    j["extra_tensors"] = notes_json(s.extra, limit);
    j["mismatched_tensors"] = notes_json(s.mismatched, limit);
    j["truncated"] = std::max({s.present.size(), s.missing.size(), s.extra.size(), s.mismatched.size()}) > limit;
    shards.push_back(std::move(j));
  }
  Json j;
  j["checkpoint"] = r.path;
  j["format"] = r.format;
  j["config"] = config_json(r.config);
  j["config_json_disagrees"] = r.config_notes;
  j["world_size"] = r.world_size;
  if (r.format == "Hugging Face") {
    Json skipped = Json::array();
    for (std::size_t i = 0; i < r.skipped.size() && i < limit; ++i) skipped.push_back(r.skipped[i]);
    j["skipped_mtp"] = r.skipped.size();
    j["skipped_mtp_names"] = skipped;
  }
  j["expected"] = r.sum([](const ShardCheck& s) { return s.expected; });
  j["present"] = r.sum([](const ShardCheck& s) { return s.present.size(); });
  j["missing"] = r.sum([](const ShardCheck& s) { return s.missing.size(); });
  j["extra"] = r.sum([](const ShardCheck& s) { return s.extra.size(); });
  j["mismatched"] = r.sum([](const ShardCheck& s) { return s.mismatched.size(); });
  j["complete"] = r.complete();
  j["shards"] = shards;
  return j;
}

void print_text(std::ostream& os, const CheckpointReport& r, std::size_t limit) {
  os << "checkpoint: " << r.path << " (" << r.format << " format, world size " << r.world_size << ")\n";
  os << "config: " << r.config.source << (r.config.hf_naming ? ", Hugging Face naming" : "")
     << (r.config.compiled.empty() ? " (matches no compiled config)" : " (compiled config " + r.config.compiled + ")")
     << "\n";
  if (!r.skipped.empty())
    os << "skipped: " << r.skipped.size() << " multi-token-prediction tensors (dsv32 does not load them)\n";
  if (!r.config_notes.empty()) {
    os << "warning: the checkpoint's config.json disagrees with the config given:\n";
    for (const std::string& n : r.config_notes) os << "  " << n << '\n';
  }
  for (const ShardCheck& s : r.shards) {
    if (r.format == "Hugging Face" && r.world_size == 1) os << "\ntensors of " << s.file << " (dsv32 names)";
    else if (r.format == "Hugging Face") os << "\nslice of " << s.file << " (rank " << s.rank << " of " << r.world_size << ", dsv32 names)";
    else os << "\nshard " << s.file << " (rank " << s.rank << ")";
    if (s.status == "absent") os << ": absent";
    if (s.status == "unreadable") os << ": unreadable: " << s.error;
    os << '\n';
    Table t;
    t.row("expected tensors", grouped(static_cast<std::uint64_t>(s.expected)));
    t.row("present", grouped(s.present.size()), s.present.size() == static_cast<std::size_t>(s.expected) ? "(all)" : "");
    t.row("missing", grouped(s.missing.size()));
    t.row("extra", grouped(s.extra.size()));
    t.row("wrong dtype or shape", grouped(s.mismatched.size()));
    t.bytes("bytes present", s.present_bytes);
    t.print(os);
    print_names(os, "missing", s.missing, limit);
    print_names(os, "extra", s.extra, limit);
    print_names(os, "wrong dtype or shape", s.mismatched, limit);
    std::vector<TensorNote> present;
    for (std::size_t i = 0; i < s.present.size() && i < limit; ++i) present.push_back(note(s.present[i], "", ""));
    print_names(os, "present", present, limit, s.present.size());
  }
  const auto n = [&](auto get) { return grouped(static_cast<std::uint64_t>(r.sum(get))); };
  os << "\ntensors: " << n([](const ShardCheck& s) { return s.expected; }) << " expected, "
     << n([](const ShardCheck& s) { return s.present.size(); }) << " present, "
     << n([](const ShardCheck& s) { return s.missing.size(); }) << " missing, "
     << n([](const ShardCheck& s) { return s.extra.size(); }) << " extra, "
     << n([](const ShardCheck& s) { return s.mismatched.size(); }) << " with the wrong dtype or shape\n";
  os << (r.complete() ? "result: complete — every tensor present with its dtype and shape, nothing extra\n"
                      : "result: INCOMPLETE — dsv32 would refuse to load this checkpoint\n");
}

int list_presets(bool json) {
  Json out = Json::array();
  Table t;
  for (const std::string& name : preset_names()) {
    with_preset(name, [&]<class C>() {
      const dsv32::ParamCounts& p = dsv32::param_counts<C>;
      const char* dtype = dsv32::ConfigTraits<C>::fp8 ? "fp8" : "bf16";
      out.push_back(Json{{"name", name}, {"dtype", dtype}, {"n_layers", C::n_layers}, {"dim", C::dim},
                         {"total_parameters", p.total}, {"activated_parameters", p.activated}});
      t.row(name, grouped(static_cast<std::uint64_t>(p.total)) + " parameters",
            std::string(dtype) + ", " + std::to_string(C::n_layers) + " layers, dim " + std::to_string(C::dim));
    });
  }
  if (json) std::cout << out.dump(2) << '\n';
  else t.print(std::cout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
    if (args.list_presets) return list_presets(args.json);
    const std::size_t limit = args.all ? std::numeric_limits<std::size_t>::max() : args.limit;
    if (!args.checkpoint.empty()) {
      const CheckpointReport r = inspect_checkpoint(args);
      if (args.json) std::cout << to_json(r, limit).dump(2) << '\n';
      else print_text(std::cout, r, limit);
      return r.complete() ? 0 : 1;
    }
    const ResolvedConfig config = !args.preset.empty() ? resolve_preset(args.preset) : resolve_config_file(args.config);
    const ConfigReport r = inspect_config(config, args);
    if (args.json) std::cout << to_json(r).dump(2) << '\n';
    else print_text(std::cout, r);
    return 0;
  } catch (const UsageError& e) {
    dsv32::tools::usage_error("dsv32-inspect", e.what());
  } catch (const dsv32::Error& e) {
    std::cerr << "dsv32-inspect: " << e.what() << '\n';
  } catch (const std::exception& e) {
    std::cerr << "dsv32-inspect: unexpected error: " << e.what() << '\n';
  }
  return 2;
}
