// Test support for checkpoints: temporary directories and Hugging Face checkpoints written at test
// time (from the golden scenarios' files or from a model's parameters), sharded with an index.
#pragma once

#include <dsv32/io/hf_checkpoint.hpp>
#include <dsv32/core/numeric.hpp>
#include <dsv32/io/safetensors.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "support/temp_dir.hpp"


namespace dsv32_test {

using dsv32::test::TempDir;

namespace fs = std::filesystem;


// One tensor to write, owning its bytes.
struct HfTensor {
  std::string name;
  dsv32::DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

inline void write_json(const fs::path& p, const nlohmann::json& j) { write_text(p, j.dump(2) + "\n"); }

inline nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

inline std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

// Writes `tensors` as a Hugging Face checkpoint in `dir`: `n_shards` shard files (tensors dealt out
// round-robin in name order, so every shard mixes layers) with model.safetensors.index.json, or a
// single model.safetensors without index when n_shards is 0; plus `config` as config.json.
inline void write_hf_checkpoint(const fs::path& dir, std::vector<HfTensor> tensors, const nlohmann::json& config,
                                int n_shards) {
  fs::create_directories(dir);
  std::sort(tensors.begin(), tensors.end(), [](const HfTensor& a, const HfTensor& b) { return a.name < b.name; });
  write_json(dir / "config.json", config);
  if (n_shards == 0) {
    dsv32::SafetensorsWriter w;
    for (const auto& t : tensors) w.add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
    w.write(dir / "model.safetensors");
    return;
  }
  std::vector<dsv32::SafetensorsWriter> writers(static_cast<std::size_t>(n_shards));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const int s = static_cast<int>(i % static_cast<std::size_t>(n_shards));
    writers[static_cast<std::size_t>(s)].add(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
    index["weight_map"][t.name] = shard_name(s, n_shards);
    total += t.bytes.size();
  }
  index["metadata"]["total_size"] = total;
  for (int s = 0; s < n_shards; ++s) writers[static_cast<std::size_t>(s)].write(dir / shard_name(s, n_shards));
  write_json(dir / dsv32::HfCheckpointSource::index_file_name(), index);
}

// The tensors of a safetensors file in dsv32's naming, renamed to Hugging Face's.
inline std::vector<HfTensor> hf_tensors_from_file(const fs::path& file) {
  const auto f = dsv32::SafetensorsFile::open(file);
  std::vector<HfTensor> out;
  for (const auto& t : f->tensors()) {
    HfTensor h{dsv32::hf_name_from_dsv32(t.name), t.dtype, t.shape, std::vector<std::byte>(t.bytes())};
    t.copy_to(h.bytes.data());
    out.push_back(std::move(h));
  }
  return out;
}

// The Hugging Face tensors of a model's parameters (all loaded, host memory). F32 norm weights and norm
// biases are stored as bf16, as in the released checkpoint; scales and the gate bias as f32.
template <class Model>
std::vector<HfTensor> hf_tensors_from_model(Model& model) {
  std::vector<HfTensor> out;
  model.visit([&](const std::string& name, auto& p) {
    const auto dims = p.shape().dims();
    HfTensor h{dsv32::hf_name_from_dsv32(name), p.dtype(), dims, {}};
    const bool narrow = p.dtype() == dsv32::DType::F32 &&
                        (p.role() == dsv32::TensorRole::norm || p.role() == dsv32::TensorRole::bias);
    if (narrow) {
      h.dtype = dsv32::DType::BF16;
      const float* v = p.template as<float>();
      h.bytes.resize(static_cast<std::size_t>(p.numel()) * 2);
      for (std::int64_t i = 0; i < p.numel(); ++i) {
        const dsv32::bf16 b(v[i]);
        std::memcpy(h.bytes.data() + 2 * i, &b, 2);
      }
    } else {
      h.bytes.resize(p.bytes());
      std::memcpy(h.bytes.data(), p.data(), p.bytes());
    }
    out.push_back(std::move(h));
  });
  return out;
}

// A tensor of a multi-token-prediction layer (`model.layers.<layer>.<rest>`), bf16 zeros.
inline HfTensor mtp_tensor(std::int64_t layer, const std::string& rest, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return {"model.layers." + std::to_string(layer) + "." + rest, dsv32::DType::BF16, std::move(shape),
          std::vector<std::byte>(static_cast<std::size_t>(n) * 2)};
}

// Writes the golden scenario `scenario_dir` as a Hugging Face checkpoint in `dir` (`n_shards` shards,
// `extra` tensors added) and returns the scenario's ModelArgs (with its serving limits).
inline dsv32::ModelArgs hf_checkpoint_from_golden(const fs::path& scenario_dir, const fs::path& dir, int n_shards,
                                                  std::vector<HfTensor> extra = {}) {
  const dsv32::ModelArgs args = dsv32::ModelArgs::from_file(scenario_dir / "config.json");
  auto tensors = hf_tensors_from_file(scenario_dir / "model0-mp1.safetensors");
  for (auto& t : extra) tensors.push_back(std::move(t));
  write_hf_checkpoint(dir, std::move(tensors), dsv32::to_hf_config(args), n_shards);
  return args;
}

}  // namespace dsv32_test
