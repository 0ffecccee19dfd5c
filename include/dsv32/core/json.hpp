/// \file
/// \brief Strict JSON reading for files that come from elsewhere (config.json, the Hugging Face
///        index, tokenizer.json, tokenizer_config.json): no key twice in one object, nesting
///        bounded, and every failure a dsv32::Error naming the file.
///
/// nlohmann::json alone would keep one of two duplicate keys silently, and accepts nesting as
/// deep as memory allows (a 1 MB file of `[[[[...` is 500,000 levels, and code that walks the
/// document recursively would overflow its stack).
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/core/filesystem.hpp"

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief Deepest nesting of objects and arrays parse_json_strict() accepts by default (the files
///        dsv32 reads nest at most 6 deep).
inline constexpr int kMaxJsonDepth = 64;

namespace detail {

/// Members of every object in `root`, counted without recursion.
inline std::size_t count_object_members(const nlohmann::json& root) {
  std::size_t n = 0;
  std::vector<const nlohmann::json*> stack{&root};
  while (!stack.empty()) {
    const nlohmann::json* j = stack.back();
    stack.pop_back();
    if (j->is_object()) n += j->size();
    if (j->is_structured())
      for (const auto& v : *j)
        if (v.is_structured()) stack.push_back(&v);
  }
  return n;
}

/// A key quoted for a message: control bytes escaped, shortened.
inline std::string quoted_key(const std::string& key) {
  std::string shown = "'";
  for (std::size_t i = 0; i < key.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      shown += "\\x";
      shown += hex[c >> 4];
      shown += hex[c & 15];
    } else {
      shown += static_cast<char>(c);
    }
  }
  if (key.size() > 80) shown += "...";
  return shown + "'";
}

}  // namespace detail

/// \brief Parses JSON text, refusing a key repeated in one object and nesting deeper than `max_depth`.
///
/// Cost: as nlohmann::json::parse plus one walk of the document. The parse counts keys; a document
/// holding fewer object members than keys was given a key twice, and only then is the text parsed
/// again, tracking each object's keys, to name the duplicate.
/// \param text      the JSON text (UTF-8)
/// \param source    what the text is (a file name), the start of every message
/// \param kind      the ErrorKind of the errors (invalid_config for config.json, invalid_file for
///                  other files, invalid_argument for input given directly)
/// \param max_depth deepest nesting accepted
/// \throws Error(kind) naming `source` and the problem: not JSON (with the parser's position), a
///         duplicate key (named), or too deep.
inline nlohmann::json parse_json_strict(std::string_view text, const std::string& source, ErrorKind kind,
                                        int max_depth = kMaxJsonDepth) {
  using nlohmann::json;
  std::size_t keys = 0;
  const json::parser_callback_t count = [&](int depth, json::parse_event_t event, json&) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      if (depth >= max_depth) fail(kind, source, ": JSON nested deeper than ", max_depth, " levels");
    } else if (event == json::parse_event_t::key) {
      ++keys;
    }
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(), count, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    fail(kind, source, ": not valid JSON: ", e.what());
  }
  if (detail::count_object_members(parsed) == keys) return parsed;

  std::vector<std::unordered_set<std::string>> open_objects;
  const json::parser_callback_t find_duplicate = [&](int, json::parse_event_t event, json& value) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::key) {
      const auto& key = value.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second)
        fail(kind, source, ": key ", detail::quoted_key(key), " appears twice in one JSON object");
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    }
    return true;
  };
  const json again = json::parse(text.begin(), text.end(), find_duplicate, true, false);  // throws at the duplicate
  (void)again;
  fail(kind, source, ": a key appears twice in one JSON object");
}

/// \brief Reads and parses a JSON file with parse_json_strict().
/// \throws Error(io) if the file is missing, not a regular file or unreadable; as parse_json_strict().
inline nlohmann::json read_json_file_strict(const std::filesystem::path& path, ErrorKind kind,
                                            int max_depth = kMaxJsonDepth) {
  const std::filesystem::file_status status = detail::path_status(path);
  DSV32_CHECK(std::filesystem::is_regular_file(status), io, "cannot read ", path.string(), ": ",
              std::filesystem::exists(status) ? "not a regular file" : "no such file");
  std::ifstream in(path, std::ios::binary);
  DSV32_CHECK(in.good(), io, "cannot open ", path.string());
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  DSV32_CHECK(!in.bad(), io, "cannot read ", path.string());
  return parse_json_strict(text, path.string(), kind, max_depth);
}

/// @}

}  // namespace dsv32
