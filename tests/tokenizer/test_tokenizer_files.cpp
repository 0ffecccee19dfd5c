// Malformed and unsupported tokenizer files: each is written into a temporary directory and
// loaded; the error must have the right kind and name the file, the field, what was expected and
// what was found.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "dsv32/tokenizer/tokenizer.hpp"
#include "tiny_tokenizer.hpp"

using dsv32::ErrorKind;
using nlohmann::json;

namespace {

std::string load_error(const std::string& tokenizer_text, const std::string& config_text, ErrorKind* kind) {
  tiny::TempDir dir;
  dir.write("tokenizer.json", tokenizer_text);
  dir.write("tokenizer_config.json", config_text);
  try {
    (void)dsv32::Tokenizer::from_directory(dir.path());
  } catch (const dsv32::Error& e) {
    *kind = e.kind();
    return e.what();
  }
  return "no error";
}

/// Loads the tiny tokenizer after `edit` and checks the error.
void check_error(const std::function<void(json& tokenizer, json& config)>& edit, ErrorKind expected_kind,
                 const std::vector<std::string>& fragments) {
  json tokenizer = tiny::tokenizer_json();
  json config = tiny::config_json();
  edit(tokenizer, config);
  ErrorKind kind{};
  const std::string message = load_error(tokenizer.dump(), config.dump(), &kind);
  INFO("message: " << message);
  CHECK(kind == expected_kind);
  for (const auto& fragment : fragments) CHECK(message.find(fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("files: the unmodified tiny tokenizer loads from a directory") {
  tiny::TempDir dir;
  dir.write("tokenizer.json", tiny::tokenizer_json());
  dir.write("tokenizer_config.json", tiny::config_json());
  const auto tok = dsv32::Tokenizer::from_directory(dir.path());
  CHECK(tok.encode("abcd") == std::vector<std::int32_t>{tiny::id_of_merged("abcd")});
  const auto same = dsv32::Tokenizer::from_files(dir.path() / "tokenizer.json", dir.path() / "tokenizer_config.json");
  CHECK(same.vocab_size() == tok.vocab_size());
}

TEST_CASE("files: missing files and invalid JSON") {
  tiny::TempDir dir;
  CHECK_THROWS_WITH_AS((void)dsv32::Tokenizer::from_directory(dir.path()),
                       doctest::Contains("tokenizer.json: no such file"), dsv32::Error);
  // a directory where a file should be: io, not an empty document
  std::filesystem::create_directory(dir.path() / "tokenizer.json");
  CHECK_THROWS_WITH_AS((void)dsv32::Tokenizer::from_directory(dir.path()),
                       doctest::Contains("tokenizer.json: not a regular file"), dsv32::Error);
  std::filesystem::remove(dir.path() / "tokenizer.json");
  ErrorKind kind{};
  const std::string message = load_error("{\"model\": [1, 2,", tiny::config_json().dump(), &kind);
  CHECK(kind == ErrorKind::invalid_file);
  CHECK(message.find("tokenizer.json: not valid JSON") != std::string::npos);
  const std::string config_message = load_error(tiny::tokenizer_json().dump(), "not json", &kind);
  CHECK(kind == ErrorKind::invalid_file);
  CHECK(config_message.find("tokenizer_config.json: not valid JSON") != std::string::npos);
  load_error("[1, 2]", "{}", &kind);
  CHECK(kind == ErrorKind::invalid_file);
}

TEST_CASE("files: model section") {
  check_error([](json& t, json&) { t.erase("model"); }, ErrorKind::invalid_file,
              {"tokenizer.json: top level: missing field \"model\""});
  check_error([](json& t, json&) { t["model"].erase("vocab"); }, ErrorKind::invalid_file,
              {"model: missing field \"vocab\""});
  check_error([](json& t, json&) { t["model"].erase("merges"); }, ErrorKind::invalid_file,
              {"model: missing field \"merges\""});
  check_error([](json& t, json&) { t["model"]["vocab"] = json::array(); }, ErrorKind::invalid_file,
              {"model.vocab: expected an object mapping token text to id, found array"});
  check_error([](json& t, json&) { t["model"]["vocab"]["abd"] = "x"; }, ErrorKind::invalid_file,
              {"model.vocab[\"abd\"]: expected a token id", "found string \"x\""});
  check_error([](json& t, json&) { t["model"]["vocab"]["abd"] = -4; }, ErrorKind::invalid_file,
              {"model.vocab[\"abd\"]: expected a token id", "found number -4"});
  check_error([](json& t, json&) { t["model"]["vocab"]["abd"] = 0; }, ErrorKind::invalid_file,
              {"model.vocab: id 0 is given to both"});
  check_error([](json& t, json&) { t["model"]["vocab"]["abd"] = 2000000000; }, ErrorKind::invalid_file,
              {"token ids are too sparse: the largest is 2000000000 for 273 tokens"});
  check_error([](json& t, json&) { t["model"]["merges"] = json{{"a", "b"}}; }, ErrorKind::invalid_file,
              {"model.merges: expected an array, found object"});
  check_error([](json& t, json&) { t["model"]["merges"].push_back("q r"); }, ErrorKind::invalid_file,
              {"tokenizer.json: model.merges[10]: merged token \"qr\" is not in model.vocab"});
  check_error([](json& t, json&) { t["model"]["merges"][0] = "b ☃"; }, ErrorKind::invalid_file,
              {"model.merges[0]: right token \"☃\" is not in model.vocab"});
  check_error([](json& t, json&) { t["model"]["merges"][1] = "ab"; }, ErrorKind::invalid_file,
              {"model.merges[1]: expected \"left right\"", "found string \"ab\""});
  check_error([](json& t, json&) { t["model"]["merges"][1] = 7; }, ErrorKind::invalid_file,
              {"model.merges[1]: expected a merge", "found number 7"});
  check_error([](json& t, json&) { t["model"]["vocab"].erase("Ġ"); }, ErrorKind::invalid_file,
              {"model.vocab lacks the byte-level token \"Ġ\" for byte 0x20"});
  check_error([](json& t, json&) { t["model"]["type"] = "WordPiece"; }, ErrorKind::unsupported,
              {"model.type", "model type \"WordPiece\" is not supported"});
  check_error([](json& t, json&) { t["model"]["dropout"] = 0.1; }, ErrorKind::unsupported, {"model.dropout"});
  check_error([](json& t, json&) { t["model"]["continuing_subword_prefix"] = "##"; }, ErrorKind::unsupported,
              {"model.continuing_subword_prefix"});
  check_error([](json& t, json&) { t["model"]["ignore_merges"] = "yes"; }, ErrorKind::invalid_file,
              {"model.ignore_merges: expected true or false, found string \"yes\""});
  check_error([](json& t, json&) { t["model"]["unk_token"] = "<unk>"; }, ErrorKind::invalid_file,
              {"model.unk_token: unk_token \"<unk>\" is not in model.vocab"});
}

TEST_CASE("files: merges written as arrays load like strings") {
  json t = tiny::tokenizer_json();
  for (auto& merge : t["model"]["merges"]) {
    const std::string s = merge.get<std::string>();
    merge = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  const auto tok = dsv32::Tokenizer::from_json(t, tiny::config_json());
  CHECK(tok.encode("abcd") == std::vector<std::int32_t>{tiny::id_of_merged("abcd")});
}

TEST_CASE("files: pipeline components") {
  check_error([](json& t, json&) { t["normalizer"] = json{{"type", "NFC"}}; }, ErrorKind::unsupported,
              {"normalizer", "normalizer type \"NFC\" is not supported"});
  check_error([](json& t, json&) { t["pre_tokenizer"] = json{{"type", "Metaspace"}}; }, ErrorKind::unsupported,
              {"pre-tokenizer type \"Metaspace\" is not supported"});
  check_error([](json& t, json&) { t["pre_tokenizer"] = nullptr; }, ErrorKind::unsupported,
              {"pre_tokenizer: no pre_tokenizer"});
  check_error([](json& t, json&) { t["pre_tokenizer"]["pretokenizers"].erase(2); }, ErrorKind::unsupported,
              {"no ByteLevel pre-tokenizer"});
  check_error([](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
              ErrorKind::unsupported,
              {"pre_tokenizer.pretokenizers[0]: Split behavior \"Removed\" is not supported"});
  check_error([](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = json{{"Regex", "\\w+"}}; },
              ErrorKind::unsupported, {"pre_tokenizer.pretokenizers[0].pattern.Regex: regex \\w/\\W is not supported"});
  check_error([](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = json{{"Regex", "(a"}}; },
              ErrorKind::invalid_file, {"pretokenizers[0].pattern.Regex: invalid regex (a", "missing closing parenthesis"});
  check_error([](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = json{{"Regex", "[a[b]]"}}; },
              ErrorKind::unsupported, {"nested classes"});
  check_error([](json& t, json&) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = json{{"Glob", "*"}}; },
              ErrorKind::invalid_file, {"pattern: expected an object with a \"Regex\" or \"String\" field"});
  check_error([](json& t, json&) { t["decoder"] = json{{"type", "WordPiece"}}; }, ErrorKind::unsupported,
              {"decoder: decoder type \"WordPiece\" is not supported"});
  check_error([](json& t, json&) { t["post_processor"] = json{{"type", "TemplateProcessing"}}; },
              ErrorKind::unsupported, {"post_processor type \"TemplateProcessing\""});
  check_error([](json& t, json&) { t["truncation"] = json{{"max_length", 5}}; }, ErrorKind::unsupported,
              {"truncation: is not supported"});
}

TEST_CASE("files: added tokens") {
  check_error([](json& t, json&) { t["added_tokens"][0]["id"] = 300; }, ErrorKind::invalid_file,
              {"added_tokens[0]: token \"<s>\" has id 300, but the reference implementation assigns it id 267"});
  check_error([](json& t, json&) { t["added_tokens"][0]["id"] = 5; }, ErrorKind::invalid_file,
              {"added_tokens[0]: token \"<s>\" has id 5"});
  check_error([](json& t, json&) { t["added_tokens"][1]["content"] = "<s>"; }, ErrorKind::invalid_file,
              {"added_tokens[1]: token \"<s>\" is already added_tokens[0]"});
  check_error([](json& t, json&) { t["added_tokens"][1]["content"] = ""; }, ErrorKind::invalid_file,
              {"added_tokens[1].content: expected a non-empty string"});
  check_error([](json& t, json&) { t["added_tokens"][1].erase("content"); }, ErrorKind::invalid_file,
              {"added_tokens[1]: missing field \"content\""});
  check_error([](json& t, json&) { t["added_tokens"][1]["special"] = 1; }, ErrorKind::invalid_file,
              {"added_tokens[1].special: expected true or false, found number 1"});
  check_error([](json& t, json&) { t["added_tokens"] = json::object(); }, ErrorKind::invalid_file,
              {"added_tokens: expected an array, found object"});
  // A token of model.vocab may be an added token, with its vocabulary id.
  json t = tiny::tokenizer_json();
  t["added_tokens"].push_back(json{{"id", 'a'}, {"content", "a"}, {"special", true}});
  const auto tok = dsv32::Tokenizer::from_json(t, tiny::config_json());
  CHECK(tok.is_special('a'));
  CHECK(tok.decode(std::vector<std::int32_t>{'a', 'b'}, true) == "b");
}

TEST_CASE("files: tokenizer_config.json") {
  check_error([](json&, json& c) { c["bos_token"] = "<nope>"; }, ErrorKind::invalid_file,
              {"tokenizer_config.json: bos_token: \"<nope>\" is not a token of"});
  check_error([](json&, json& c) { c["eos_token"] = 3; }, ErrorKind::invalid_file,
              {"tokenizer_config.json: eos_token: expected null, a string or an AddedToken object, found number 3"});
  check_error([](json&, json& c) { c["add_bos_token"] = "yes"; }, ErrorKind::invalid_file,
              {"tokenizer_config.json: add_bos_token: expected true or false"});
  check_error([](json&, json& c) { c["bos_token"] = nullptr; }, ErrorKind::invalid_file,
              {"add_bos_token is true but there is no bos_token"});
  check_error([](json&, json& c) { c["bos_token"] = json{{"__type", "AddedToken"}}; }, ErrorKind::invalid_file,
              {"bos_token: missing field \"content\""});
  check_error([](json&, json& c) { c["chat_template"] = 5; }, ErrorKind::invalid_file,
              {"chat_template: expected a string or a list of named templates"});
  check_error([](json&, json& c) { c = json::array(); }, ErrorKind::invalid_file,
              {"tokenizer_config.json: top level: expected an object, found array"});
}
