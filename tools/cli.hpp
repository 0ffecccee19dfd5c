// What the command-line tools (and dsv32-demo, dsv32-bench) share about their arguments, on CLI11
// (Debian's libcli11-dev; the CMake target dsv32_cli): the --help layout, the value checks and the
// handling of bad arguments.
//
//   --help:  the usage line(s), the tool's description, its options group by group (each option's
//            value name and description as the tool gives them), then the footer; exit status 0.
//   errors:  "TOOL: MESSAGE" and "(run TOOL --help for usage)" on standard error, exit status 2.
//            A value that fails its check names the option, what it expects and what it got:
//            "--port: expects an integer in [0, 65535], got '70000'"; an unknown argument is
//            "unknown argument '--bogus'", an option at the end without its value "--seed: needs a
//            value", a flag given a value "--quiet: takes no value".
//
// An option given twice keeps its last value (as the hand-written parsers did).
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace dsv32::tools {

/// The --help layout: the tool's usage line(s) first, then its description, positional arguments,
/// options by group, footer.
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string usage) : usage_(std::move(usage)) {}

  std::string make_usage(const CLI::App*, std::string) const override { return usage_ + "\n"; }

  // "  NAME VALUE  description" with the description's lines in a column; a name too long for the
  // column keeps the description's first line beside it, two spaces after.
  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    const std::string name = "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
    const std::string description = make_option_desc(opt);
    const std::size_t width = get_column_width();
    std::string out = name;
    if (!description.empty()) out += name.size() + 2 <= width ? std::string(width - name.size(), ' ') : "  ";
    for (const char c : description) {
      out += c;
      if (c == '\n') out += std::string(width, ' ');
    }
    return out + "\n";
  }

  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    std::string names;  // "-h,--help" -> "-h, --help"
    for (const char c : CLI::Formatter::make_option_name(opt, is_positional)) {
      names += c;
      if (c == ',') names += ' ';
    }
    return names;
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    std::string out = make_usage(app, std::move(name));
    if (!app->get_description().empty()) out += "\n" + app->get_description() + "\n";
    // (CLI11 puts two blank lines between groups: one is kept)
    std::string groups = make_positionals(app) + make_groups(app, mode);
    for (std::size_t at = groups.find("\n\n\n"); at != std::string::npos; at = groups.find("\n\n\n", at)) {
      groups.erase(at, 1);
    }
    out += groups;
    if (!app->get_footer().empty()) out += "\n" + app->get_footer() + "\n";
    return out;
  }

 private:
  std::string usage_;
};

/// Sets up `app` for a tool: the help layout (`usage`: the first lines of --help; option names in a
/// column of `column_width` characters), options in the group "options" unless placed in another,
/// the last value of an option given twice, no value for a flag ("--quiet=1" is an error). The help
/// flag comes last: add_help().
inline void setup(CLI::App& app, std::string usage, std::size_t column_width) {
  auto formatter = std::make_shared<HelpFormatter>(std::move(usage));
  formatter->column_width(column_width);
  formatter->label("Positionals", "arguments");
  app.formatter(formatter);
  app.set_help_flag();  // removed here, added last by add_help() (help lists it after the options)
  app.option_defaults()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->disable_flag_override()
      ->group("options");
}

/// -h, --help (in the group of the options added last, unless `group` names one).
inline CLI::Option* add_help(CLI::App& app, const std::string& description = "print this help",
                             const std::string& group = "") {
  CLI::Option* help = app.set_help_flag("-h,--help", description);
  if (!group.empty()) help->group(group);
  return help;
}

/// An option that sets the std::optional `target` when it is given, its value named `value_name` in
/// --help.
template <class T>
CLI::Option* add_optional(CLI::App& app, const std::string& name, std::optional<T>& target,
                          const std::string& value_name, const std::string& description) {
  return app.add_option_function<T>(name, [&target](const T& value) { target = value; }, description)
      ->option_text(value_name);
}

// ------------------------------------------------------------------ value checks

/// A check of an option's text: `ok(text)` or the message "expects EXPECTED, got 'TEXT'".
inline CLI::Validator expects(std::string expected, std::function<bool(const std::string&)> ok) {
  return CLI::Validator(
      [expected = std::move(expected), ok = std::move(ok)](std::string& text) -> std::string {
        return ok(text) ? std::string() : "expects " + expected + ", got '" + text + "'";
      },
      "");
}

/// `text` as a whole is a decimal integer (an optional '-', then digits) within [lo, hi].
inline bool parse_integer(std::string_view text, std::int64_t lo, std::int64_t hi, std::int64_t& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return !text.empty() && ec == std::errc() && ptr == end && value >= lo && value <= hi;
}

/// An integer in [lo, hi].
inline CLI::Validator integer(std::int64_t lo, std::int64_t hi) {
  return expects("an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                 [lo, hi](const std::string& text) {
                   std::int64_t v = 0;
                   return parse_integer(text, lo, hi, v);
                 });
}

/// A non-negative 64-bit integer (digits only).
inline CLI::Validator unsigned64() {
  return expects("a non-negative 64-bit integer", [](const std::string& text) {
    std::uint64_t v = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    return !text.empty() && ec == std::errc() && ptr == end;
  });
}

/// A number (what std::strtod reads, as a whole: 0.6, 1e-3, ...).
inline CLI::Validator number() {
  return expects("a number", [](const std::string& text) {
    if (text.empty()) return false;
    char* end = nullptr;
    errno = 0;
    (void)std::strtod(text.c_str(), &end);
    return end == text.c_str() + text.size() && errno != ERANGE;
  });
}

/// One of `choices`; the message lists them ("a, b or c").
inline CLI::Validator one_of(std::vector<std::string> choices) {
  std::string list;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  return expects(list, [choices = std::move(choices)](const std::string& text) {
    for (const std::string& c : choices) {
      if (c == text) return true;
    }
    return false;
  });
}

/// --chat-format: the names dsv32::chat_format_from_name() knows.
inline CLI::Validator chat_format() { return one_of({"deepseek-v3.2", "deepseek-v3.2-exp", "deepseek-v3"}); }

/// Not the empty string.
inline CLI::Validator non_empty() {
  return CLI::Validator([](std::string& text) { return text.empty() ? std::string("must not be empty") : std::string(); },
                        "");
}

/// A byte count, `text` as a whole: a positive integer with an optional K, M, G or T suffix (either
/// case; powers of 1024). nullopt when `text` is not one; UINT64_MAX when it is more than that.
inline std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::uint64_t scale = 1;
  if (!text.empty()) {
    const std::string_view units = "KMGT";
    if (const auto u = units.find(static_cast<char>(text.back() & ~0x20)); u != std::string_view::npos) {
      scale = std::uint64_t{1} << (10 * (u + 1));
      text.remove_suffix(1);
    }
  }
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, n);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) return std::nullopt;
  if (ec == std::errc::result_out_of_range || n > UINT64_MAX / scale) return UINT64_MAX;
  if (n == 0) return std::nullopt;
  return n * scale;
}

/// A byte count (parse_bytes(): "4G", "512M", "1048576") of at most `max_bytes` (`max_text`, e.g.
/// "2^60", names it in the message); the option's value becomes the number of bytes (a transform:
/// option->transform(bytes(...)); option->check() would keep the text).
inline CLI::Validator bytes(std::uint64_t max_bytes, const std::string& max_text) {
  return CLI::Validator(
      [max_bytes, max_text](std::string& text) -> std::string {
        const std::optional<std::uint64_t> n = parse_bytes(text);
        if (!n) {
          return "expects a byte count (a positive integer with an optional K, M, G or T suffix, powers of 1024), "
                 "got '" + text + "'";
        }
        if (*n > max_bytes) return "expects at most " + max_text + " bytes, got '" + text + "'";
        text = std::to_string(*n);
        return {};
      },
      "");
}

// ------------------------------------------------------------------ parsing and errors

/// Prints "TOOL: MESSAGE" and the pointer to --help to standard error (when `report`: under MPI only
/// rank 0 does) and exits with status 2.
[[noreturn]] inline void usage_error(std::string_view tool, std::string_view message, bool report = true) {
  if (report) std::cerr << tool << ": " << message << "\n(run " << tool << " --help for usage)\n";
  std::exit(2);
}

/// The message of a parse error, in the tools' words where CLI11's differ.
/// An unknown argument is reported first (CLI11 checks required options before it looks for them).
inline std::string error_message(const CLI::App& app, const CLI::ParseError& e) {
  if (const std::vector<std::string> extras = app.remaining(); !extras.empty()) {
    return "unknown argument '" + extras.front() + "'";
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    static const std::regex missing("(\\S*): [0-9]+ required .* missing");  // (no name: a hidden option)
    static const std::regex flag_value("(\\S+) was given a disallowed flag override");
    const std::string what = e.what();
    if (std::smatch m; std::regex_match(what, m, missing)) {
      return m.length(1) > 0 ? m.str(1) + ": needs a value" : std::string("an option needs a value");
    }
    if (std::smatch m; std::regex_match(what, m, flag_value)) {  // (CLI11 names a flag without its dashes)
      return (m.str(1).starts_with("-") ? "" : "--") + m.str(1) + ": takes no value";
    }
  }
  return e.what();
}

/// Parses the command line into `app`'s options. --help prints the help and exits with status 0; a
/// bad argument exits with status 2 after usage_error() (the message printed when `report`).
inline void parse(CLI::App& app, int argc, const char* const* argv, bool report = true) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    usage_error(app.get_name(), error_message(app, e), report);
  }
}

}  // namespace dsv32::tools
