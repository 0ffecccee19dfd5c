// parse_json_strict / read_json_file_strict: the JSON reader of every file dsv32 is given
// (config.json in both namings, the Hugging Face index, the tokenizer files).
#include "dsv32/config/model_args.hpp"
#include "dsv32/core/json.hpp"
#include "dsv32/io/checkpoint.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "support/test_support.hpp"

using dsv32::ErrorKind;
using dsv32::test::check_error;

TEST_CASE("parse_json_strict: plain JSON parses as nlohmann::json does") {
  const auto j = dsv32::parse_json_strict(R"({"a": [1, 2, {"b": null}], "c": "x"})", "t.json", ErrorKind::invalid_file);
  CHECK(j["a"][2]["b"].is_null());
  CHECK(j["c"] == "x");
  // the same key in different objects is fine
  CHECK(dsv32::parse_json_strict(R"({"a": {"k": 1}, "b": {"k": 2}})", "t.json", ErrorKind::invalid_file)["b"]["k"] == 2);
}

TEST_CASE("parse_json_strict: duplicate keys, deep nesting and bad JSON are errors of the given kind naming the source") {
  check_error([] { (void)dsv32::parse_json_strict(R"({"a": 1, "a": 2})", "t.json", ErrorKind::invalid_config); },
              ErrorKind::invalid_config, {"t.json: key 'a' appears twice in one JSON object"});
  check_error([] { (void)dsv32::parse_json_strict("{\"x\": {\"a\\n\": 1, \"a\\n\": 2}}", "t.json", ErrorKind::invalid_file); },
              ErrorKind::invalid_file, {"key 'a\\x0a' appears twice"});
  check_error([] { (void)dsv32::parse_json_strict(std::string(65, '[') + std::string(65, ']'), "t.json", ErrorKind::invalid_file); },
              ErrorKind::invalid_file, {"t.json: JSON nested deeper than 64 levels"});
  CHECK(dsv32::parse_json_strict(std::string(64, '[') + std::string(64, ']'), "t.json", ErrorKind::invalid_file).is_array());
  // 400,000 levels would take gigabytes as a document; refused as the parser reaches level 64
  check_error([] { (void)dsv32::parse_json_strict(std::string(400000, '['), "t.json", ErrorKind::invalid_file); },
              ErrorKind::invalid_file, {"JSON nested deeper than 64 levels"});
  check_error([] { (void)dsv32::parse_json_strict("{\"a\": ", "t.json", ErrorKind::invalid_argument); },
              ErrorKind::invalid_argument, {"t.json: not valid JSON: "});
  check_error([] { (void)dsv32::parse_json_strict("\"\xff\"", "t.json", ErrorKind::invalid_file); }, ErrorKind::invalid_file,
              {"t.json: not valid JSON: "});
}

TEST_CASE("config.json with a key given twice is refused by both readers (ModelArgs::from_file, read_model_config)") {
  dsv32::test::TempDir dir;
  const auto path = dir / "config.json";
  std::ofstream(path) << R"({"dim": 128, "n_layers": 2, "dim": 256})";
  check_error([&] { (void)dsv32::ModelArgs::from_file(path); }, ErrorKind::invalid_config,
              {path.string(), "key 'dim' appears twice in one JSON object"});
  check_error([&] { (void)dsv32::read_model_config(path); }, ErrorKind::invalid_config,
              {path.string(), "key 'dim' appears twice in one JSON object"});
}
