// dsv32-tokenize: encode text to token ids, decode ids to text, render a chat or parse a reply in
// one of DeepSeek's chat formats, with DeepSeek's tokenizer files (tokenizer.json +
// tokenizer_config.json) — see --help.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/tokenizer.hpp"

#include "cli.hpp"

namespace {

constexpr std::string_view kUsage =
    "usage: dsv32-tokenize [--tokenizer DIR] [--chat-format NAME] [MODE] [--text TEXT]";

constexpr std::string_view kDescription =
    R"(Reads TEXT (or standard input) and writes the result to standard output. With no mode it encodes
the text and prints the token ids as a JSON array.)";

constexpr std::string_view kFooter = R"(Ids are printed as one JSON array followed by a newline; text is printed exactly, with no newline
added; a parsed message as one line of JSON (as Python's json.dumps writes it) and a newline.
Errors go to standard error, with exit status 1 (2 for bad arguments).)";

struct Arguments {
  std::optional<std::string> tokenizer_dir;
  std::optional<std::string> text;
  std::optional<dsv32::ChatFormat> chat_format;
  std::optional<bool> thinking;  // --thinking-mode
  bool decode = false;
  bool chat = false;
  bool parse = false;
  bool add_special = false;
  bool skip_special = false;
  bool ids = false;
};

[[noreturn]] void usage_error(const std::string& message) { dsv32::tools::usage_error("dsv32-tokenize", message); }

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  CLI::App app(std::string(kDescription), "dsv32-tokenize");
  dsv32::tools::setup(app, std::string(kUsage), 19);
  app.footer(std::string(kFooter));
  // modes (none: encode)
  app.add_flag("--decode", args.decode, "the input is a JSON array of token ids; prints their text")->group("modes");
  app.add_flag("--chat", args.chat,
               "the input is a conversation; prints the prompt rendered in the chat format\n"
               "(with --ids, its token ids). DeepSeek-V3.2: a JSON object {\"messages\": [...],\n"
               "\"thinking_mode\": \"chat\"|\"thinking\", \"drop_thinking\": true|false}; messages\n"
               "{\"role\": \"system\"|\"developer\"|\"user\"|\"assistant\"|\"tool\", \"content\": \"...\",\n"
               "\"reasoning_content\": \"...\", \"tool_calls\": [...], \"tools\": [...],\n"
               "\"response_format\": {...}}, as the model's encoding_dsv32.py reads them.\n"
               "DeepSeek-V3.2-Exp and V3: {\"messages\": [...], \"add_generation_prompt\":\n"
               "true|false, \"thinking\": true|false}; messages {\"role\": \"system\"|\"user\"|\n"
               "\"assistant\"|\"tool\", \"content\": \"...\"}; an assistant message may add\n"
               "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"...\", \"arguments\":\n"
               "\"<JSON text>\"}}, ...] (its content may then be null) and \"prefix\": true")
      ->group("modes");
  app.add_flag("--parse", args.parse,
               "the input is a completion (the model's output after the prompt; with --ids,\n"
               "a JSON array of its token ids); prints the assistant message as JSON\n"
               "{\"role\", \"content\", \"reasoning_content\", \"tool_calls\"}. A completion that\n"
               "breaks the format is an error")
      ->group("modes");
  // options
  dsv32::tools::add_optional(app, "--tokenizer", args.tokenizer_dir, "DIR",
                             "directory holding tokenizer.json and tokenizer_config.json (default: the\n"
                             "environment variable DSV32_TOKENIZER_DIR, else the DeepSeek-V3.2-Exp\n"
                             "tokenizer vendored in the dsv32 source tree, when present)");
  app.add_option_function<std::string>(
         "--chat-format", [&](const std::string& name) { args.chat_format = dsv32::chat_format_from_name(name); },
         "deepseek-v3.2, deepseek-v3.2-exp or deepseek-v3 (default: the tokenizer's:\n"
         "its chat_template's model, DeepSeek-V3.2 when tokenizer_config.json has no\n"
         "template or an encoding/ folder is beside it). DeepSeek-V3.2-Speciale uses\n"
         "deepseek-v3.2 in thinking mode")
      ->option_text("NAME")
      ->check(dsv32::tools::chat_format());
  app.add_option_function<std::string>(
         "--thinking-mode", [&](const std::string& mode) { args.thinking = mode == "thinking"; },
         "parse: whether the prompt ended in thinking mode (default chat)")
      ->option_text("chat|thinking")
      ->check(dsv32::tools::one_of({"chat", "thinking"}));
  dsv32::tools::add_optional(app, "--text", args.text, "TEXT", "use TEXT as input instead of standard input");
  app.add_flag("--add-special", args.add_special, "encode: prepend bos as tokenizer_config.json's add_bos_token says");
  app.add_flag("--skip-special", args.skip_special, "decode: leave out special tokens (bos, eos, ...)");
  app.add_flag("--ids", args.ids,
               "chat: print the prompt's token ids (JSON array) instead of its text;\n"
               "parse: the input is token ids");
  dsv32::tools::add_help(app);
  dsv32::tools::parse(app, argc, argv);
  if (args.decode + args.chat + args.parse > 1) usage_error("--decode, --chat and --parse exclude each other");
  if (args.skip_special && !args.decode) usage_error("--skip-special applies to --decode only");
  if (args.ids && !args.chat && !args.parse) usage_error("--ids applies to --chat and --parse only");
  if (args.add_special && (args.decode || args.chat || args.parse)) usage_error("--add-special applies to encoding only");
  if (args.thinking && !args.parse) usage_error("--thinking-mode applies to --parse (a --chat request says its own)");
  if (args.chat_format && !args.chat && !args.parse) usage_error("--chat-format applies to --chat and --parse only");
  if (!args.tokenizer_dir) {
    if (const char* env = std::getenv("DSV32_TOKENIZER_DIR"); env != nullptr && *env != '\0') {
      args.tokenizer_dir = env;
#if defined(DSV32_TOKENIZE_DEFAULT_TOKENIZER)
    } else if (std::filesystem::exists(std::filesystem::path(DSV32_TOKENIZE_DEFAULT_TOKENIZER) / "tokenizer.json")) {
      args.tokenizer_dir = DSV32_TOKENIZE_DEFAULT_TOKENIZER;
#endif
    } else {
      usage_error("no tokenizer: pass --tokenizer DIR (a directory with tokenizer.json and "
                  "tokenizer_config.json) or set DSV32_TOKENIZER_DIR");
    }
  }
  return args;
}

std::string read_input(const Arguments& args) {
  if (args.text) return *args.text;
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) throw dsv32::Error(dsv32::ErrorKind::io, "cannot read standard input");
  return input;
}

nlohmann::json parse_json_input(const std::string& input, const char* what) {
  try {
    return nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {  // syntax errors, and numbers past double's range
    dsv32::fail(dsv32::ErrorKind::invalid_argument, "input is not valid JSON (expected ", what, "): ", e.what());
  }
}

std::vector<std::int32_t> parse_ids(const nlohmann::json& j) {
  if (!j.is_array()) {
    dsv32::fail(dsv32::ErrorKind::invalid_argument, "expected a JSON array of token ids, found ", j.type_name());
  }
  std::vector<std::int32_t> ids;
  ids.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& v = j[i];
    const bool in_range = v.is_number_integer() && (v.is_number_unsigned() ? v.get<std::uint64_t>() <= INT32_MAX
                                                                          : v.get<std::int64_t>() >= INT32_MIN &&
                                                                                v.get<std::int64_t>() <= INT32_MAX);
    if (!in_range) {
      dsv32::fail(dsv32::ErrorKind::invalid_argument, "element ", i, " of the id array is not a 32-bit integer: ",
                  v.dump());
    }
    ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
  }
  return ids;
}

void print_ids(const std::vector<std::int32_t>& ids) { std::cout << nlohmann::json(ids).dump() << '\n'; }

constexpr dsv32::ChatTemplateKind template_kind(dsv32::ChatFormat format) {
  return format == dsv32::ChatFormat::deepseek_v3 ? dsv32::ChatTemplateKind::deepseek_v3
                                                  : dsv32::ChatTemplateKind::deepseek_v3_2_exp;
}

// --chat, DeepSeek-V3's and V3.2-Exp's templates: the file's own template, or the one named.
std::string render_template_chat(const dsv32::Tokenizer& tokenizer, const Arguments& args, const std::string& input) {
  const nlohmann::json request = parse_json_input(input, "a chat object");
  if (!request.is_object()) {
    dsv32::fail(dsv32::ErrorKind::invalid_argument,
                "expected a JSON object {\"messages\": [...], \"add_generation_prompt\": ...}, found ",
                request.type_name());
  }
  const auto messages = request.find("messages");
  if (messages == request.end()) dsv32::fail(dsv32::ErrorKind::invalid_argument, "missing field \"messages\"");
  dsv32::ChatTemplateOptions options;
  for (const auto& [name, flag] : {std::pair<const char*, bool*>{"add_generation_prompt", &options.add_generation_prompt},
                                   std::pair<const char*, bool*>{"thinking", &options.thinking}}) {
    if (const auto value = request.find(name); value != request.end()) {
      if (!value->is_boolean()) {
        dsv32::fail(dsv32::ErrorKind::invalid_argument, "\"", name, "\" must be true or false, found ", value->dump());
      }
      *flag = value->get<bool>();
    }
  }
  for (const auto& [key, value] : request.items()) {
    if (key != "messages" && key != "add_generation_prompt" && key != "thinking") {
      dsv32::fail(dsv32::ErrorKind::invalid_argument, "unknown field \"", key,
                  "\" (expected \"messages\", \"add_generation_prompt\", \"thinking\")");
    }
  }
  const std::vector<dsv32::ChatMessage> parsed = dsv32::chat_messages_from_json(*messages);
  if (args.chat_format) {
    const dsv32::ChatTemplate named(template_kind(*args.chat_format), tokenizer.chat_template().bos_token());
    return named.render(parsed, options);
  }
  return tokenizer.apply_chat_template(parsed, options);
}

// --parse: the completion (text, or ids decoded with the special tokens) in the chat format.
dsv32::ChatOutput parse_completion(const dsv32::Tokenizer& tokenizer, dsv32::ChatFormat format, const Arguments& args,
                                   const std::string& input) {
  const bool thinking = args.thinking.value_or(false);
  if (format == dsv32::ChatFormat::deepseek_v3_2) {
    if (args.ids) {
      return dsv32::deepseek_v3_2::parse_completion(tokenizer, parse_ids(parse_json_input(input, "an array of token ids")),
                                                    thinking);
    }
    return dsv32::deepseek_v3_2::parse_completion(input, thinking);
  }
  const auto start = thinking ? dsv32::ChatOutputState::reasoning : dsv32::ChatOutputState::content;
  dsv32::ChatOutputParser parser(tokenizer, format, start);
  if (args.ids) {
    for (const std::int32_t id : parse_ids(parse_json_input(input, "an array of token ids"))) (void)parser.push(id);
  } else {
    (void)parser.push_text(input);
  }
  (void)parser.finish();
  return parser.output();
}

int run(const Arguments& args) {
  const auto tokenizer = dsv32::Tokenizer::from_directory(*args.tokenizer_dir);
  const std::string input = read_input(args);
  if (args.decode) {
    std::cout << tokenizer.decode(parse_ids(parse_json_input(input, "an array of token ids")), args.skip_special);
  } else if (args.chat || args.parse) {
    // The format: named, else the tokenizer's (none for an unknown template: apply_chat_template
    // then says why it refuses it).
    const std::optional<dsv32::ChatFormat> format = args.chat_format ? args.chat_format : tokenizer.chat_format();
    if (args.parse) {
      const dsv32::ChatOutput reply =
          parse_completion(tokenizer, format.value_or(dsv32::ChatFormat::deepseek_v3_2_exp), args, input);
      std::cout << dsv32::python_json::dumps(dsv32::deepseek_v3_2::message_json(reply)) << '\n';
    } else {
      std::string prompt;
      if (format == dsv32::ChatFormat::deepseek_v3_2) {
        const auto request = dsv32::deepseek_v3_2::request_from_json(dsv32::python_json::loads(input, "input"));
        prompt = dsv32::deepseek_v3_2::encode_messages(request.messages, request.options);
      } else {
        prompt = render_template_chat(tokenizer, args, input);
      }
      if (args.ids) {
        print_ids(tokenizer.encode(prompt));
      } else {
        std::cout << prompt;
      }
    }
  } else {
    print_ids(tokenizer.encode(input, args.add_special));
  }
  std::cout.flush();
  if (!std::cout) throw dsv32::Error(dsv32::ErrorKind::io, "cannot write to standard output");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse_arguments(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "dsv32-tokenize: " << e.what() << '\n';
    return 1;
  }
}
