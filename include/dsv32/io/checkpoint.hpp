/// \file
/// \brief Loading a Transformer's weights from a checkpoint: a safetensors file or directory in the
///        reference's converted format (`model{rank}-mp{world}.safetensors`), or a Hugging Face
///        checkpoint directory (config.json + sharded safetensors), told apart by their files.
///
/// Tensor sources and the checked load itself are in <dsv32/io/tensor_source.hpp>; Hugging Face
/// names and configs in <dsv32/io/hf_checkpoint.hpp>.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/config/model_args.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/filesystem.hpp"
#include "dsv32/io/convert.hpp"
#include "dsv32/io/hf_checkpoint.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/io/tensor_source.hpp"

namespace dsv32 {

/// \addtogroup io
/// @{

/// \brief The kinds of checkpoint load_checkpoint() reads.
enum class CheckpointLayout {
  file,          ///< one safetensors file in dsv32's (the reference's converted) naming
  converted,     ///< a directory of `model{rank}-mp{world}.safetensors` shards (the reference's convert.py output)
  hugging_face,  ///< a Hugging Face directory: config.json, model.safetensors.index.json + shards, or model.safetensors
};

/// \brief Which layout `path` holds for a model at `rank` of `world` — the rule load_checkpoint() follows.
///
///  1. `path` is a file: CheckpointLayout::file.
///  2. `path` is a directory holding `model{rank}-mp{world}.safetensors`: CheckpointLayout::converted
///     (this wins when a directory holds both layouts).
///  3. `path` is a directory holding `model.safetensors.index.json` or `model.safetensors`:
///     CheckpointLayout::hugging_face.
/// \throws Error(io) when `path` does not exist or the directory holds neither layout; the message
///         says what was looked for and names the converted shards of other world sizes it found.
inline CheckpointLayout detect_checkpoint_layout(const std::filesystem::path& path, int rank = 0, int world = 1) {
  DSV32_CHECK(detail::path_exists(path), io, "checkpoint ", path.string(), " does not exist");
  if (!detail::path_is_directory(path)) return CheckpointLayout::file;
  if (detail::path_exists(path / shard_file_name(rank, world))) return CheckpointLayout::converted;
  if (HfCheckpointSource::detect(path)) return CheckpointLayout::hugging_face;
  std::vector<std::string> others;
  for (const auto& e : detail::directory_entries(path)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("model") && n.find("-mp") != std::string::npos && n.ends_with(".safetensors")) others.push_back(n);
  }
  std::sort(others.begin(), others.end());
  std::string found;
  for (std::size_t i = 0; i < others.size() && i < 4; ++i) found += (i ? ", " : "") + others[i];
  if (others.size() > 4) found += ", ...";
  fail(ErrorKind::io, "checkpoint directory ", path.string(), " holds neither ", shard_file_name(rank, world),
       " (the reference's converted format, for rank ", rank, " of ", world, ") nor ",
       HfCheckpointSource::index_file_name(), " or model.safetensors (a Hugging Face checkpoint)",
       found.empty() ? std::string() : "; it has " + found + " (shards for another world size: load with that world "
                                                             "size, or convert the checkpoint again)");
}

/// \brief Reads a model's config.json in either naming — Hugging Face's (`hidden_size`, ...) or the
///        reference's ModelArgs fields — into ModelArgs. `path` is the file or a directory holding it.
/// \param path a config.json, or a checkpoint directory with one
/// \throws Error(io) if it cannot be read; Error(invalid_config) as parse_hf_config() / ModelArgs::from_json().
inline ModelArgs read_model_config(const std::filesystem::path& path) {
  const bool dir = detail::path_is_directory(path);
  const std::filesystem::path file = dir ? path / "config.json" : path;
  DSV32_CHECK(!dir || detail::path_exists(file), io, "checkpoint directory ", path.string(), " has no config.json");
  const nlohmann::json j = detail::read_json_file(file, ErrorKind::invalid_config);
  return is_hf_config(j) ? parse_hf_config(j, file.string()).args : ModelArgs::from_json(j, file.string());
}

/// \brief Checks a config.json against the compiled config `Config`, whichever naming it uses
///        (Hugging Face's or the reference's ModelArgs fields); every disagreeing field is listed.
/// \tparam Config compile-time config
/// \param path the config.json
/// \throws Error(invalid_config) listing the fields; as read_model_config().
template <class Config>
void check_config_file(const std::filesystem::path& path) {
  read_model_config(path).template check_matches<Config>(path.string());
}

/// \brief Loads a checkpoint into `model`: a file or directory in the reference's converted format,
///        or a Hugging Face checkpoint directory (the rule: detect_checkpoint_layout()).
///
///  - file: a safetensors file in dsv32's naming, loaded as is.
///  - converted directory: `model{rank}-mp{world}.safetensors` for the model's Parallel, and, when
///    present, a `config.json` (the reference's fields, or Hugging Face's) that must agree with the
///    compiled config.
///  - Hugging Face directory: config.json (required, Hugging Face naming; must agree with the
///    compiled config) and the shards of model.safetensors.index.json, names mapped to dsv32's,
///    multi-token-prediction layers skipped (HfCheckpointSource). At world size W > 1 each rank
///    takes its part as the reference's convert.py would split it (HfShardSource): no conversion
///    first, and a rank touches only its own slices of the mapped shards.
///
/// At world size W > 1 every rank calls this for itself; wrap it (with whatever else may fail on
/// one rank only) in run_collectively(), so that a rank that fails makes every rank throw instead
/// of leaving them waiting in their first collective.
/// Every case checks that the tensors are exactly the model's (load_weights()) and borrows weight
/// bytes from the memory-mapped files when it can (LoadOptions::borrow).
/// \tparam Model a Transformer
/// \throws Error(io) for a missing path or file (for a converted directory without this world
///         size's shards, the message names the shards it has); Error(invalid_config) for a
///         disagreeing config (all fields listed); Error(invalid_file) for wrong, missing or extra
///         tensors (listed); Error(invalid_argument) for a Hugging Face checkpoint that cannot be
///         split over the model's ranks (every problem listed).
template <class Model>
void load_checkpoint(Model& model, const std::filesystem::path& path, const LoadOptions& opts = {}) {
  using Config = typename Model::config_type;
  const int rank = model.parallel().rank, world = model.parallel().world_size;
  switch (detect_checkpoint_layout(path, rank, world)) {
    case CheckpointLayout::file:
      load_weights(model, SafetensorsSource(path), opts);
      return;
    case CheckpointLayout::converted: {
      if (detail::path_exists(path / "config.json")) check_config_file<Config>(path / "config.json");
      load_weights(model, SafetensorsSource(path / shard_file_name(rank, world)), opts);
      return;
    }
    case CheckpointLayout::hugging_face: {
      const HfCheckpointSource source(path);
      source.config().args.template check_matches<Config>((path / "config.json").string());
      if (world == 1) load_weights(model, source, opts);
      else load_weights(model, HfShardSource(source, world, rank), opts);
      return;
    }
  }
}

/// @}

}  // namespace dsv32
