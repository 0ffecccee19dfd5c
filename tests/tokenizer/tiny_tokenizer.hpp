// A tiny hand-made tokenizer.json for closed-form tests, and helpers shared by the test files.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dsv32/tokenizer/byte_level.hpp"

namespace tiny {

/// Settings that vary between the tests.
struct Spec {
  bool ignore_merges = false;
  bool add_prefix_space = false;
  bool use_regex = false;
};

/// Vocabulary: ids 0..255 are the byte-level characters of bytes 0..255 (so id == byte value),
/// then the merged tokens below (256..265) and "abd" (266). Added tokens follow: 267.. .
inline const std::vector<std::pair<std::string, std::string>>& merge_rules() {
  static const std::vector<std::pair<std::string, std::string>> rules = {
      {"b", "c"},     // 0
      {"a", "b"},     // 1
      {"bc", "d"},    // 2
      {"a", "bcd"},   // 3
      {"a", "a"},     // 4
      {"aa", "aa"},   // 5
      {"Ġ", "a"},     // 6
      {"x", "y"},     // 7
      {"y", "z"},     // 8
      {"xy", "z"},    // 9
  };
  return rules;
}

inline std::int32_t id_of_merged(const std::string& token) {
  const auto& rules = merge_rules();
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].first + rules[i].second == token) return static_cast<std::int32_t>(256 + i);
  }
  if (token == "abd") return 256 + static_cast<std::int32_t>(rules.size());
  return -1;
}

// Ids of the added tokens.
inline constexpr int bos = 267, eos = 268, single_word = 269, strip = 270, angles = 271, bos_x = 272;

inline nlohmann::json tokenizer_json(const Spec& spec = {}) {
  using nlohmann::json;
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) {
    vocab[dsv32::bpe::byte_level_encode(std::string(1, char(b)))] = b;
  }
  json merges = json::array();
  for (const auto& [l, r] : merge_rules()) {
    vocab[l + r] = id_of_merged(l + r);
    merges.push_back(l + " " + r);
  }
  vocab["abd"] = id_of_merged("abd");  // in the vocabulary, but no merge produces it

  auto added = [](int id, const char* content, bool special, bool normalized, bool word, bool lstrip,
                  bool rstrip) {
    return json{{"id", id},         {"content", content}, {"single_word", word}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
  };
  json added_tokens = json::array({
      added(bos, "<s>", true, false, false, false, false),
      added(eos, "</s>", true, false, false, false, false),
      added(single_word, "[W]", false, true, true, false, false),  // single_word
      added(strip, "<m>", false, false, false, true, true),        // lstrip + rstrip
      added(angles, "<<", false, true, false, false, false),       // normalized: second pass
      added(bos_x, "<s>x", false, true, false, false, false),      // longer, but the raw pass runs first
  });

  auto split = [](json pattern) {
    return json{{"type", "Split"}, {"pattern", pattern}, {"behavior", "Isolated"}, {"invert", false}};
  };
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               json::array({split(json{{"Regex", "\\p{N}{1,3}"}}), split(json{{"String", "--"}}),
                            json{{"type", "ByteLevel"},
                                 {"add_prefix_space", spec.add_prefix_space},
                                 {"trim_offsets", true},
                                 {"use_regex", spec.use_regex}}})}};
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer", pre},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", spec.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

inline nlohmann::json config_json() {
  return nlohmann::json{{"add_bos_token", true},
                        {"add_eos_token", false},
                        {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}},
                        {"eos_token", "</s>"},
                        {"pad_token", nullptr}};
}

/// A fresh directory under the system temp directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dsv32_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  void write(const std::string& name, const nlohmann::json& j) const { write(name, j.dump()); }

 private:
  std::filesystem::path path_;
};

}  // namespace tiny
