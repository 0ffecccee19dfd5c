/// \file
/// \brief JSON read and written as Python's `json` module does, for DeepSeek-V3.2's chat encoding
///        (a Python module whose output depends on `json.loads` / `json.dumps` and on Python's
///        truth values).
///
/// - dumps() is `json.dumps(value, ensure_ascii=False)`: `", "` and `": "` separators, keys in
///   their order, non-ASCII kept, only `"`, `\` and control characters escaped, floats in Python's
///   `repr` (`1000.0`, `1e-07`, `1e+16`, `0.0001`).
/// - loads() is `json.loads` on nlohmann::ordered_json (key order kept; a repeated key keeps its
///   first place and its last value, as a Python dict does), refusing what the two would read
///   differently: integers beyond 64 bits (Python keeps them exact), `NaN` / `Infinity` and a
///   leading byte-order mark (nlohmann's parser refuses the first two and skips the third).
/// - truthy() is Python's `bool()` of the loaded value (`null`, `false`, `0`, `""`, `[]`, `{}` are
///   false).
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"

namespace dsv32::python_json {

/// \addtogroup tokenizer
/// @{

/// \brief Deepest nesting of arrays and objects loads() and dumps() accept (Python's own limit is
///        its recursion limit, about 1000).
inline constexpr int max_depth = 256;

/// \brief Appends `s` as a JSON string literal, as `json.dumps(s, ensure_ascii=False)` writes it.
inline void append_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

/// \brief `s` as a JSON string literal (append_string()).
inline std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_string(out, s);
  return out;
}

/// \brief Appends `v` as Python's `repr(float)` (what `json.dumps` writes for a float): the
///        shortest digits that read back to `v`, positional notation for decimal exponents -4 to
///        15 (`0.0001`, `1000000000000000.0`), else scientific with a signed two-digit or longer
///        exponent (`1e-05`, `1.5e+16`); `NaN`, `Infinity`, `-Infinity` as json.dumps writes them.
inline void append_float(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-Infinity" : "Infinity";
    return;
  }
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e(+|-)XX
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (ec != std::errc()) fail(ErrorKind::invalid_argument, "python_json: cannot format the number ", v);
  const std::string_view sci(buf, static_cast<std::size_t>(end - buf));
  std::size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  const std::size_t e = sci.find('e');
  std::string digits;
  for (std::size_t k = i; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  int exponent = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
  const int decpt = exponent + 1;  // digits d1 d2 ... with the decimal point after d_decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {  // Python's repr: positional unless decpt <= -4 or decpt > 16
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= n) {
      out += digits;
      out.append(static_cast<std::size_t>(decpt - n), '0');
      out += ".0";
    } else {
      out += std::string_view(digits).substr(0, static_cast<std::size_t>(decpt));
      out += '.';
      out += std::string_view(digits).substr(static_cast<std::size_t>(decpt));
    }
    return;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += std::string_view(digits).substr(1);
  }
  const int shown = decpt - 1;
  out += shown < 0 ? "e-" : "e+";
  const int magnitude = shown < 0 ? -shown : shown;
  if (magnitude < 10) out += '0';
  out += std::to_string(magnitude);
}

namespace detail {
inline void append_value(std::string& out, const nlohmann::ordered_json& v, int depth) {
  using value_t = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case value_t::null: out += "null"; return;
    case value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case value_t::number_integer: out += std::to_string(v.get<std::int64_t>()); return;
    case value_t::number_unsigned: out += std::to_string(v.get<std::uint64_t>()); return;
    case value_t::number_float: append_float(out, v.get<double>()); return;
    case value_t::string: append_string(out, v.get_ref<const std::string&>()); return;
    case value_t::array:
    case value_t::object: {
      if (depth >= max_depth) fail(ErrorKind::invalid_argument, "JSON nested deeper than ", max_depth, " levels");
      const bool object = v.is_object();
      out += object ? '{' : '[';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        if (object) {
          append_string(out, it.key());
          out += ": ";
        }
        append_value(out, *it, depth + 1);
      }
      out += object ? '}' : ']';
      return;
    }
    default: fail(ErrorKind::invalid_argument, "JSON value of type ", v.type_name(), " has no Python JSON form");
  }
}
}  // namespace detail

/// \brief `json.dumps(v, ensure_ascii=False)`.
/// \throws Error(invalid_argument) for nesting deeper than max_depth or a binary value.
inline std::string dumps(const nlohmann::ordered_json& v) {
  std::string out;
  detail::append_value(out, v, 0);
  return out;
}

/// \brief Python's `bool(v)`: false for null, false, zero, the empty string, array and object.
inline bool truthy(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: return false;
    case nlohmann::ordered_json::value_t::boolean: return v.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer: return v.get<std::int64_t>() != 0;
    case nlohmann::ordered_json::value_t::number_unsigned: return v.get<std::uint64_t>() != 0;
    case nlohmann::ordered_json::value_t::number_float: return v.get<double>() != 0.0;  // NaN is true, as in Python
    case nlohmann::ordered_json::value_t::string: return !v.get_ref<const std::string&>().empty();
    default: return !v.empty();
  }
}

namespace detail {
// nlohmann's DOM builder, refusing integer literals that nlohmann would round to a double and
// nesting deeper than max_depth.
class LoadsHandler {
 public:
  using json = nlohmann::ordered_json;
  explicit LoadsHandler(json& root) : dom_(root, /*allow_exceptions=*/true) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& lexeme) {
    if (lexeme.find_first_of(".eE") == json::string_t::npos) {
      fail(ErrorKind::invalid_argument, "the integer ", lexeme,
           " does not fit 64 bits (Python's json keeps it exact; this implementation would round it)");
    }
    return dom_.number_float(v, lexeme);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    deeper();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) { return dom_.key(k); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    deeper();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);
  }

 private:
  void deeper() {
    if (++depth_ > max_depth) fail(ErrorKind::invalid_argument, "JSON nested deeper than ", max_depth, " levels");
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
};
}  // namespace detail

/// \brief `json.loads(text)` (see the file description for what is refused).
/// \param text UTF-8 JSON text
/// \param what what the text is, the start of error messages (e.g. `tool_calls[0].function.arguments`)
/// \throws Error(invalid_argument) naming `what`: not JSON (with the parser's message), an integer
///         beyond 64 bits, nesting deeper than max_depth, a byte-order mark.
inline nlohmann::ordered_json loads(std::string_view text, const std::string& what) {
  if (text.starts_with("\xEF\xBB\xBF")) {
    fail(ErrorKind::invalid_argument, what, ": not valid JSON: it starts with a UTF-8 byte-order mark");
  }
  nlohmann::ordered_json root;
  detail::LoadsHandler handler(root);
  try {
    nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &handler, nlohmann::ordered_json::input_format_t::json,
                                      /*strict=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(ErrorKind::invalid_argument, what, ": not valid JSON: ", e.what());
  } catch (const Error& e) {
    fail(ErrorKind::invalid_argument, what, ": ", e.message());
  }
  return root;
}

/// @}

}  // namespace dsv32::python_json
