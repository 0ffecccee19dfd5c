// Tokenizer files from someone else: what fuzzing found (fuzz/regressions/tokenizer_files/) and the
// limits that keep loading bounded — JSON nesting, duplicate keys, documents built in memory.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "dsv32/tokenizer/tokenizer.hpp"
#include "tiny_tokenizer.hpp"

using dsv32::ErrorKind;
using nlohmann::json;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Loads tokenizer.json = `tokenizer` and tokenizer_config.json = `config` from files; returns the
// error message (a failed check if it loads).
std::string load_error(const std::string& tokenizer, const std::string& config, ErrorKind kind) {
  tiny::TempDir dir;
  write_text(dir.path() / "tokenizer.json", tokenizer);
  write_text(dir.path() / "tokenizer_config.json", config);
  try {
    (void)dsv32::Tokenizer::from_directory(dir.path());
  } catch (const dsv32::Error& e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  FAIL("the tokenizer loaded");
  return {};
}

std::string nested(const std::string& open, const std::string& close, int depth, const std::string& inner = "") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

}  // namespace

TEST_CASE("hostile tokenizer files: deeply nested normalizer Sequences (fuzz regression: stack overflow)") {
  // fuzz_tokenizer_files: 20,000 nested Sequences (720 KB) overflowed the stack of check_normalizer's
  // recursion; the reader now refuses nesting deeper than 64 levels before anything walks the document.
  const std::string kept = read_text(DSV32_FUZZ_REGRESSIONS "/tokenizer_files/normalizer_sequences_nested_70_deep.json");
  const std::string message = load_error(kept, "{}", ErrorKind::invalid_file);
  CHECK(message.find("tokenizer.json: JSON nested deeper than 64 levels") != std::string::npos);
  const std::string deep = "{\"normalizer\": " + nested("{\"type\":\"Sequence\",\"normalizers\":[", "]}", 20000) + "}";
  CHECK(load_error(deep, "{}", ErrorKind::invalid_file).find("JSON nested deeper than 64 levels") != std::string::npos);
  // the same nesting in tokenizer_config.json, and plain arrays
  CHECK(load_error(tiny::tokenizer_json().dump(), nested("[", "]", 100000), ErrorKind::invalid_file)
            .find("tokenizer_config.json: JSON nested deeper than 64 levels") != std::string::npos);
}

TEST_CASE("hostile tokenizer files: a document built in memory cannot nest Sequences without bound") {
  json j = tiny::tokenizer_json();
  json normalizer = json{{"type", "Sequence"}, {"normalizers", json::array()}};
  for (int i = 0; i < 200; ++i) normalizer = json{{"type", "Sequence"}, {"normalizers", json::array({normalizer})}};
  j["normalizer"] = normalizer;
  CHECK_THROWS_WITH_AS((void)dsv32::Tokenizer::from_json(j, tiny::config_json()),
                       doctest::Contains("normalizer Sequences nested deeper than 64 levels"), dsv32::Error);
  json k = tiny::tokenizer_json();
  json pre = k["pre_tokenizer"];
  for (int i = 0; i < 200; ++i) pre = json{{"type", "Sequence"}, {"pretokenizers", json::array({pre})}};
  k["pre_tokenizer"] = pre;
  CHECK_THROWS_WITH_AS((void)dsv32::Tokenizer::from_json(k, tiny::config_json()),
                       doctest::Contains("pre_tokenizer Sequences nested deeper than 64 levels"), dsv32::Error);
}

TEST_CASE("hostile tokenizer files: a key given twice is refused, not silently resolved") {
  // Two ids for one token text: nlohmann::json alone would keep one of them.
  std::string text = tiny::tokenizer_json().dump();
  const std::string vocab = "\"vocab\":{";
  const auto at = text.find(vocab);
  REQUIRE(at != std::string::npos);
  text.insert(at + vocab.size(), "\"abd\":5,");
  const std::string message = load_error(text, tiny::config_json().dump(), ErrorKind::invalid_file);
  CHECK(message.find("tokenizer.json: key 'abd' appears twice in one JSON object") != std::string::npos);
  CHECK(load_error(tiny::tokenizer_json().dump(), R"({"add_bos_token": true, "add_bos_token": false})",
                   ErrorKind::invalid_file)
            .find("tokenizer_config.json: key 'add_bos_token' appears twice") != std::string::npos);
}
