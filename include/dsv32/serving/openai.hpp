/// \file
/// \brief The OpenAI-compatible API without the HTTP: requests read and checked (chat messages,
///        tools, generation parameters; an OpenAI-style error naming the field otherwise), chat
///        prompts rendered in DeepSeek's formats with the request's tools, responses and
///        server-sent-event chunks assembled, stop strings matched across tokens.
///
/// dsv32-server (tools/dsv32_server.cpp) puts HTTP, the tokenizer and the Engine around these
/// pieces, as llama-server and vLLM keep HTTP at the edge; docs/serving.md lists every endpoint,
/// field, limit and error. Everything here is plain data in, plain data out, so that the unit tests
/// (tests/server/test_openai.cpp) check it without a socket or a model.
///
/// Requests are read as OpenAI's API reads them, with three rules of its own: a field this server
/// does not know is refused (400, `unknown_parameter`), as OpenAI refuses one; a field that would
/// change the result but is not implemented (`n` > 1, penalties, `logit_bias`, forced tool choice,
/// JSON modes) is refused (400, `unsupported_parameter`) instead of ignored; a field whose value is
/// `null` counts as absent.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/error.hpp"
#include "dsv32/generate/sampling.hpp"
#include "dsv32/tokenizer/chat_format.hpp"
#include "dsv32/tokenizer/chat_reply.hpp"
#include "dsv32/tokenizer/chat_template.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_encoding.hpp"
#include "dsv32/tokenizer/python_json.hpp"
#include "dsv32/tokenizer/utf8.hpp"

/// \brief The OpenAI-compatible API's protocol (dsv32-server).
namespace dsv32::openai {

/// \addtogroup serving
/// @{

/// \brief JSON as requests are read and responses written: objects keep their key order (the
///        V3.2 encoding prints tools in the order given).
using Json = nlohmann::ordered_json;

/// \brief An API error: the HTTP status and OpenAI's error object
///        `{"error": {"message", "type", "param", "code"}}`. A dsv32::Error (kind invalid_argument
///        for 4xx, busy for 429, state for 5xx), so that one catch handles every failure.
class ApiError : public Error {
 public:
  /// \param status  the HTTP status (400, 401, 404, 405, 413, 429, 500, 503)
  /// \param type    the error object's `type`, e.g. `invalid_request_error`
  /// \param message what was expected and what was found
  /// \param param   the request field at fault, e.g. `messages[2].role` ("" for none: null)
  /// \param code    a machine-readable reason, e.g. `context_length_exceeded` ("" for none: null)
  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : Error(kind_of(status), message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  /// \brief The HTTP status.
  int status() const noexcept { return status_; }
  /// \brief The error object's `type`.
  const std::string& type() const noexcept { return type_; }
  /// \brief The request field at fault ("" for none).
  const std::string& param() const noexcept { return param_; }
  /// \brief The machine-readable reason ("" for none).
  const std::string& code() const noexcept { return code_; }

  /// \brief `{"error": {"message", "type", "param", "code"}}` (param and code null when empty).
  Json body() const {
    Json error;
    error["message"] = message();
    error["type"] = type_;
    error["param"] = param_.empty() ? Json(nullptr) : Json(param_);
    error["code"] = code_.empty() ? Json(nullptr) : Json(code_);
    return Json{{"error", std::move(error)}};
  }

 private:
  static ErrorKind kind_of(int status) noexcept {
    if (status == 429) return ErrorKind::busy;
    return status >= 500 ? ErrorKind::state : ErrorKind::invalid_argument;
  }
  int status_;
  std::string type_, param_, code_;
};

/// \brief A 400 `invalid_request_error`.
/// \param message what was expected and what was found
/// \param param   the field at fault
/// \param code    the reason, e.g. `invalid_value`
inline ApiError invalid_request(const std::string& message, std::string param = {}, std::string code = "invalid_value") {
  return ApiError(400, "invalid_request_error", message, std::move(param), std::move(code));
}

/// \brief A 400 for a field (or value) that would change the result but is not implemented.
/// \param param the field
/// \param why   what is supported instead
inline ApiError unsupported(const std::string& param, const std::string& why) {
  return ApiError(400, "invalid_request_error", "'" + param + "' is not supported by this server: " + why, param,
                  "unsupported_parameter");
}

/// \brief JSON text of `j` on one line; text that is not UTF-8 (which this library never produces,
///        but a hostile tokenizer file could) is replaced by U+FFFD rather than thrown.
inline std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

/// \brief One server-sent event carrying `j`: `data: {...}` and a blank line.
inline std::string sse_event(const Json& j) { return "data: " + dump(j) + "\n\n"; }

/// \brief The event that ends every stream.
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

/// \brief What a request asks of the generation, common to both endpoints.
struct GenerationParams {
  /// Most completion tokens (`max_tokens` / `max_completion_tokens`); nullopt: up to the model's
  /// context (the server's choice: what is left of max_seq_len).
  std::optional<std::int64_t> max_tokens;
  SamplingOptions sampling{};            ///< `temperature` (default 1), `top_p`, `top_k` (-1 or 0: off)
  std::optional<std::uint64_t> seed;     ///< `seed`; nullopt: the server draws one
  std::vector<std::string> stop;         ///< `stop` strings (the text before the first match is returned)
  std::vector<std::int32_t> stop_token_ids;  ///< `stop_token_ids` (vLLM's): token ids that end the completion
  std::int64_t logprobs = -1;            ///< -1: none; 0: the chosen token's; n: also the n most likely (<= 20)
  bool stream = false;                   ///< `stream`: server-sent events
  bool include_usage = false;            ///< `stream_options.include_usage`: a last chunk with the usage
  bool tokens_as_ids = false;            ///< `return_tokens_as_token_ids` (vLLM's): log-probabilities name tokens `token_id:N`
};

/// \brief A chat completion request (`POST /v1/chat/completions`), read and checked.
struct ChatRequest {
  std::string model;                 ///< `model`
  std::vector<ChatMessage> messages; ///< `messages`, as the chat formats take them
  Json tools;                        ///< `tools` (OpenAI form), null when none
  bool tool_choice_none = false;     ///< `tool_choice: "none"`: the tools are left out of the prompt
  bool thinking = false;             ///< `chat_template_kwargs.thinking`: the reply starts with reasoning
  GenerationParams params;           ///< generation parameters
};

/// \brief A completion request (`POST /v1/completions`), read and checked.
struct CompletionRequest {
  std::string model;                      ///< `model`
  std::optional<std::string> prompt_text; ///< `prompt` given as text (encoded with the tokenizer's bos)
  std::vector<std::int32_t> prompt_ids;   ///< `prompt` given as token ids (when prompt_text is empty)
  GenerationParams params;                ///< generation parameters (`max_tokens` defaults to 16, as OpenAI's)
};

namespace detail {

inline std::string json_type(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return v.type_name();
  }
}

[[noreturn]] inline void wrong_type(const std::string& param, const char* expected, const Json& v) {
  throw invalid_request("'" + param + "': expected " + expected + ", got " + json_type(v), param, "invalid_type");
}

inline bool get_bool(const Json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

inline std::int64_t get_int(const Json& v, const std::string& param, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer()) wrong_type(param, "an integer", v);
  const bool too_big = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi);
  const std::int64_t x = too_big ? hi : v.get<std::int64_t>();
  if (too_big || x < lo || x > hi) {
    throw invalid_request("'" + param + "' must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + v.dump(),
                          param);
  }
  return x;
}

inline double get_number(const Json& v, const std::string& param) {
  if (!v.is_number()) wrong_type(param, "a number", v);
  return v.get<double>();
}

inline const std::string& get_string(const Json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get_ref<const std::string&>();
}

// A field that must keep its neutral value (`value`) because what it changes is not implemented.
inline void require_number(const Json& v, const std::string& param, double value, const char* why) {
  if (get_number(v, param) != value) throw unsupported(param, why);
}

inline std::string index_param(const std::string& base, std::size_t i) { return base + "[" + std::to_string(i) + "]"; }

// The fields both endpoints share; false when `key` is not one of them.
inline bool read_generation_field(const std::string& key, const Json& v, GenerationParams& p, std::int64_t vocab_size,
                                  bool& has_stream_options) {
  constexpr std::int64_t kMaxTokens = std::int64_t{1} << 31;
  if (key == "max_tokens" || key == "max_completion_tokens") {
    const std::int64_t n = get_int(v, key, 1, kMaxTokens);
    if (p.max_tokens && *p.max_tokens != n) {
      throw invalid_request("'max_tokens' and 'max_completion_tokens' disagree (" + std::to_string(*p.max_tokens) +
                                " and " + std::to_string(n) + "); give one",
                            key);
    }
    p.max_tokens = n;
  } else if (key == "temperature") {
    p.sampling.temperature = get_number(v, key);
    if (!std::isfinite(p.sampling.temperature) || p.sampling.temperature < 0) {
      throw invalid_request("'temperature' must be a finite number >= 0 (0: greedy), got " + v.dump(), key);
    }
  } else if (key == "top_p") {
    p.sampling.top_p = get_number(v, key);
    if (!(p.sampling.top_p > 0.0 && p.sampling.top_p <= 1.0)) {
      throw invalid_request("'top_p' must be in (0, 1], got " + v.dump(), key);
    }
  } else if (key == "top_k") {
    const std::int64_t k = get_int(v, key, -1, std::numeric_limits<std::int32_t>::max());
    p.sampling.top_k = k < 0 ? 0 : k;
  } else if (key == "seed") {
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    p.seed = v.is_number_unsigned() ? v.get<std::uint64_t>() : static_cast<std::uint64_t>(v.get<std::int64_t>());
  } else if (key == "stop") {
    std::vector<std::string> stops;
    if (v.is_string()) {
      stops.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (std::size_t i = 0; i < v.size(); ++i) stops.push_back(get_string(v[i], index_param(key, i)));
    } else {
      wrong_type(key, "a string or an array of strings", v);
    }
    if (stops.size() > 16) throw invalid_request("'stop' holds " + std::to_string(stops.size()) + " strings, at most 16", key);
    for (const auto& s : stops) {
      if (s.empty()) throw invalid_request("'stop' strings must not be empty", key);
    }
    p.stop = std::move(stops);
  } else if (key == "stop_token_ids") {
    if (!v.is_array()) wrong_type(key, "an array of token ids", v);
    p.stop_token_ids.clear();
    for (std::size_t i = 0; i < v.size(); ++i) {
      p.stop_token_ids.push_back(static_cast<std::int32_t>(get_int(v[i], index_param(key, i), 0, vocab_size - 1)));
    }
  } else if (key == "stream") {
    p.stream = get_bool(v, key);
  } else if (key == "stream_options") {
    if (!v.is_object()) wrong_type(key, "an object", v);
    has_stream_options = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string param = key + "." + it.key();
      if (it->is_null()) continue;
      if (it.key() == "include_usage") {
        p.include_usage = get_bool(*it, param);
      } else if (it.key() == "continuous_usage_stats") {
        if (get_bool(*it, param)) throw unsupported(param, "the usage comes in the last chunk (include_usage)");
      } else {
        throw invalid_request("unknown field '" + param + "' (expected 'include_usage')", param, "unknown_parameter");
      }
    }
  } else if (key == "n") {
    if (get_int(v, key, 1, kMaxTokens) != 1) throw unsupported(key, "one choice per request (n = 1); send several requests");
  } else if (key == "frequency_penalty" || key == "presence_penalty" || key == "min_p") {
    require_number(v, key, 0.0, "no penalties or min_p sampling (0 only)");
  } else if (key == "repetition_penalty") {
    require_number(v, key, 1.0, "no repetition penalty (1 only)");
  } else if (key == "logit_bias") {
    if (!v.is_object()) wrong_type(key, "an object", v);
    if (!v.empty()) throw unsupported(key, "no logit bias (an empty object only)");
  } else if (key == "return_tokens_as_token_ids") {
    p.tokens_as_ids = get_bool(v, key);
  } else if (key == "user" || key == "service_tier" || key == "prompt_cache_key" || key == "safety_identifier") {
    (void)get_string(v, key);  // accepted, no effect on the result
  } else if (key == "metadata") {
    if (!v.is_object()) wrong_type(key, "an object", v);
  } else if (key == "store") {
    (void)get_bool(v, key);
  } else {
    return false;
  }
  return true;
}

[[noreturn]] inline void unknown_field(const std::string& key) {
  throw invalid_request("unrecognized request argument supplied: '" + key + "'", key, "unknown_parameter");
}

inline void check_stream_options(const GenerationParams& p, bool has_stream_options) {
  if (has_stream_options && !p.stream) {
    throw invalid_request("'stream_options' is only allowed with 'stream': true", "stream_options");
  }
}

// A message's `content`: a string, or text parts joined with "\n" (as vLLM joins them).
inline std::string message_content(const Json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) wrong_type(param, "a string or an array of content parts", v);
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string part = index_param(param, i);
    const Json& p = v[i];
    if (!p.is_object()) wrong_type(part, "a content part {\"type\": \"text\", \"text\": ...}", p);
    const auto type = p.find("type");
    if (type == p.end() || !type->is_string()) wrong_type(part + ".type", "a string", type == p.end() ? Json() : *type);
    if (*type != "text") {
      throw unsupported(part + ".type", "text content parts only (this model reads text), got " + type->dump());
    }
    const auto text = p.find("text");
    if (text == p.end()) throw invalid_request("'" + part + ".text' is missing", part + ".text", "missing_required_parameter");
    if (i > 0) out += '\n';
    out += get_string(*text, part + ".text");
  }
  return out;
}

inline std::vector<ChatMessage> read_messages(const Json& v) {
  if (!v.is_array()) wrong_type("messages", "an array of messages", v);
  if (v.empty()) throw invalid_request("'messages' must hold at least one message", "messages");
  std::vector<ChatMessage> out;
  out.reserve(v.size());
  // the calls of the last assistant message, and how many of them tool messages answered
  std::vector<std::string> call_ids;
  std::size_t answered = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string base = index_param("messages", i);
    const Json& m = v[i];
    if (!m.is_object()) wrong_type(base, "a message object", m);
    ChatMessage msg;
    const auto role = m.find("role");
    if (role == m.end()) throw invalid_request("'" + base + ".role' is missing", base + ".role", "missing_required_parameter");
    msg.role = get_string(*role, base + ".role");
    if (msg.role != "system" && msg.role != "developer" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      throw invalid_request("'" + base + ".role' is \"" + msg.role +
                                "\"; expected \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"",
                            base + ".role");
    }
    const bool assistant = msg.role == "assistant";
    std::optional<std::string> tool_call_id;
    bool has_content = false;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& key = it.key();
      const std::string param = base + "." + key;
      const Json& f = *it;
      if (key == "role") continue;
      if (key == "content") {
        if (f.is_null()) {
          if (!assistant) throw invalid_request("'" + param + "' is null; only an assistant message may have no content", param);
          continue;
        }
        msg.content = message_content(f, param);
        has_content = true;
      } else if (f.is_null()) {
        continue;  // refusal, audio, function_call... sent back as null by clients
      } else if (key == "name") {
        (void)get_string(f, param);  // the formats have no names; no effect
      } else if (key == "reasoning_content") {
        if (!assistant) throw invalid_request("'" + param + "' belongs to assistant messages", param);
        msg.reasoning_content = get_string(f, param);
      } else if (key == "tool_calls") {
        if (!assistant) throw invalid_request("'" + param + "': only assistant messages make tool calls", param);
        if (!f.is_array()) wrong_type(param, "an array of tool calls", f);
        call_ids.clear();
        answered = 0;
        for (std::size_t c = 0; c < f.size(); ++c) {
          const std::string cp = index_param(param, c);
          const Json& call = f[c];
          if (!call.is_object()) wrong_type(cp, "{\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", call);
          std::string id;
          ToolCall parsed;
          bool has_function = false;
          for (auto ct = call.begin(); ct != call.end(); ++ct) {
            if (ct->is_null()) continue;
            if (ct.key() == "id") {
              id = get_string(*ct, cp + ".id");
            } else if (ct.key() == "type") {
              if (get_string(*ct, cp + ".type") != "function") {
                throw invalid_request("'" + cp + ".type' must be \"function\", got " + ct->dump(), cp + ".type");
              }
            } else if (ct.key() == "function") {
              const Json& fn = *ct;
              if (!fn.is_object()) wrong_type(cp + ".function", "an object {\"name\", \"arguments\"}", fn);
              for (const char* field : {"name", "arguments"}) {
                const auto x = fn.find(field);
                const std::string fp = cp + ".function." + field;
                if (x == fn.end()) throw invalid_request("'" + fp + "' is missing", fp, "missing_required_parameter");
                (std::string_view(field) == "name" ? parsed.name : parsed.arguments) = get_string(*x, fp);
              }
              has_function = true;
            } else {
              throw invalid_request("unknown field '" + cp + "." + ct.key() + "'", cp + "." + ct.key(), "unknown_parameter");
            }
          }
          if (!has_function) throw invalid_request("'" + cp + ".function' is missing", cp + ".function", "missing_required_parameter");
          call_ids.push_back(id);
          msg.tool_calls.push_back(std::move(parsed));
        }
      } else if (key == "tool_call_id") {
        if (msg.role != "tool") throw invalid_request("'" + param + "' belongs to tool messages", param);
        tool_call_id = get_string(f, param);
      } else if (key == "prefix") {
        if (get_bool(f, param)) throw unsupported(param, "no prefix completion; end the conversation with a user or tool message");
      } else if (key == "function_call" || key == "audio") {
        throw unsupported(param, key == "audio" ? "text only" : "the tools API ('tool_calls')");
      }
      // other keys (refusal, annotations, ...) carry nothing the formats print
    }
    if (!has_content && !assistant) {
      throw invalid_request("'" + base + ".content' is missing", base + ".content", "missing_required_parameter");
    }
    if (msg.role == "tool") {
      // Both formats answer calls in order: the k-th tool message after an assistant message is the
      // result of its k-th call. A result that names another call would be attributed wrongly.
      if (tool_call_id && answered < call_ids.size() && !call_ids[answered].empty() && *tool_call_id != call_ids[answered]) {
        throw invalid_request("'" + base + ".tool_call_id' is \"" + *tool_call_id + "\" but results answer the calls in "
                                  "order: this one answers call " + std::to_string(answered) + ", \"" +
                                  call_ids[answered] + "\"",
                              base + ".tool_call_id");
      }
      ++answered;
    } else if (msg.tool_calls.empty()) {
      call_ids.clear();
      answered = 0;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

inline Json read_tools(const Json& v) {
  if (!v.is_array()) wrong_type("tools", "an array of tools", v);
  for (std::size_t t = 0; t < v.size(); ++t) {
    const std::string base = index_param("tools", t);
    const Json& tool = v[t];
    if (!tool.is_object()) wrong_type(base, "{\"type\": \"function\", \"function\": {\"name\", ...}}", tool);
    const auto type = tool.find("type");
    if (type == tool.end() || !type->is_string() || *type != "function") {
      throw invalid_request("'" + base + ".type' must be \"function\"", base + ".type");
    }
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) {
      throw invalid_request("'" + base + ".function' must be an object {\"name\", \"description\", \"parameters\"}",
                            base + ".function");
    }
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      throw invalid_request("'" + base + ".function.name' must be a non-empty string", base + ".function.name");
    }
    if (const auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string()) {
      wrong_type(base + ".function.description", "a string", *d);
    }
    if (const auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object()) {
      wrong_type(base + ".function.parameters", "a JSON Schema object", *p);
    }
    if (const auto s = fn->find("strict"); s != fn->end() && !s->is_null() && get_bool(*s, base + ".function.strict")) {
      throw unsupported(base + ".function.strict", "no constrained decoding (strict: false only)");
    }
  }
  return v;
}

}  // namespace detail

/// \brief Reads a chat completion request (see docs/serving.md for every field).
/// \param body       the parsed request body
/// \param vocab_size the model's vocabulary (bounds `stop_token_ids`)
/// \throws ApiError (400) naming the field: not an object, a missing `model` or `messages`, a field
///         of the wrong type or out of range, an unknown field, one this server does not implement.
///         The roles' order is the chat format's to check (render_chat_prompt()).
inline ChatRequest parse_chat_request(const Json& body, std::int64_t vocab_size) {
  if (!body.is_object()) {
    throw invalid_request("the request body must be a JSON object, got " + detail::json_type(body), "", "invalid_type");
  }
  ChatRequest r;
  bool has_model = false, has_messages = false, has_stream_options = false, logprobs = false;
  std::optional<std::int64_t> top_logprobs;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = *it;
    if (v.is_null()) continue;
    if (key == "model") {
      r.model = detail::get_string(v, key);
      has_model = true;
    } else if (key == "messages") {
      r.messages = detail::read_messages(v);
      has_messages = true;
    } else if (key == "tools") {
      r.tools = detail::read_tools(v);
      if (r.tools.empty()) r.tools = nullptr;
    } else if (key == "tool_choice") {
      if (v.is_string() && (v == "auto" || v == "none")) {
        r.tool_choice_none = v == "none";
      } else if (v.is_string() && v == "required") {
        throw unsupported(key, "\"auto\" or \"none\" (no constrained decoding to force a call)");
      } else if (v.is_object()) {
        throw unsupported(key, "\"auto\" or \"none\" (no constrained decoding to force a named call)");
      } else {
        throw invalid_request("'tool_choice' must be \"auto\" or \"none\", got " + v.dump(), key);
      }
    } else if (key == "parallel_tool_calls") {
      if (!detail::get_bool(v, key)) throw unsupported(key, "the model may make several calls (true only)");
    } else if (key == "chat_template_kwargs") {
      if (!v.is_object()) detail::wrong_type(key, "an object", v);
      for (auto kw = v.begin(); kw != v.end(); ++kw) {
        const std::string param = key + "." + kw.key();
        if (kw->is_null()) continue;
        if (kw.key() == "thinking") {
          r.thinking = detail::get_bool(*kw, param);
        } else {
          throw invalid_request("unknown chat template argument '" + param + "' (DeepSeek's formats take 'thinking')",
                                param, "unknown_parameter");
        }
      }
    } else if (key == "logprobs") {
      logprobs = detail::get_bool(v, key);
    } else if (key == "top_logprobs") {
      top_logprobs = detail::get_int(v, key, 0, 20);
    } else if (key == "response_format") {
      if (!v.is_object()) detail::wrong_type(key, "an object", v);
      const auto type = v.find("type");
      if (type == v.end() || !type->is_string()) detail::wrong_type(key + ".type", "a string", type == v.end() ? Json() : *type);
      if (*type != "text") throw unsupported(key, "{\"type\": \"text\"} only (no JSON mode or schema)");
    } else if (key == "reasoning_effort" || key == "functions" || key == "function_call" || key == "modalities" ||
               key == "audio" || key == "prediction" || key == "web_search_options" || key == "verbosity") {
      throw unsupported(key, key == "reasoning_effort" ? "thinking on or off (chat_template_kwargs.thinking)"
                             : key == "functions" || key == "function_call" ? "the tools API (tools, tool_choice)"
                                                                            : "text generation only");
    } else if (!detail::read_generation_field(key, v, r.params, vocab_size, has_stream_options)) {
      detail::unknown_field(key);
    }
  }
  if (!has_model) throw invalid_request("'model' is missing", "model", "missing_required_parameter");
  if (!has_messages) throw invalid_request("'messages' is missing", "messages", "missing_required_parameter");
  if (top_logprobs && !logprobs) throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (logprobs) r.params.logprobs = top_logprobs.value_or(0);
  detail::check_stream_options(r.params, has_stream_options);
  return r;
}

/// \brief Reads a completion request (see docs/serving.md for every field).
/// \param body       the parsed request body
/// \param vocab_size the model's vocabulary (bounds prompt ids and `stop_token_ids`)
/// \throws ApiError (400) naming the field, as parse_chat_request(); also for several prompts (one per
///         request), an empty prompt, prompt ids outside the vocabulary, `echo`, `suffix`, `best_of` > 1.
inline CompletionRequest parse_completion_request(const Json& body, std::int64_t vocab_size) {
  if (!body.is_object()) {
    throw invalid_request("the request body must be a JSON object, got " + detail::json_type(body), "", "invalid_type");
  }
  CompletionRequest r;
  bool has_model = false, has_prompt = false, has_stream_options = false;
  auto read_ids = [&](const Json& ids) {
    std::vector<std::int32_t> out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const Json& x = ids[i];
      if (!x.is_number_integer()) detail::wrong_type(detail::index_param("prompt", i), "a token id", x);
      const bool neg = !x.is_number_unsigned() && x.get<std::int64_t>() < 0;
      if (neg || x.get<std::uint64_t>() >= static_cast<std::uint64_t>(vocab_size)) {
        throw invalid_request("'prompt' token " + std::to_string(i) + " is " + x.dump() +
                                  ", outside the model's vocabulary [0, " + std::to_string(vocab_size) + ")",
                              "prompt");
      }
      out.push_back(static_cast<std::int32_t>(x.get<std::int64_t>()));
    }
    return out;
  };
  r.params.max_tokens = 16;
  bool max_tokens_given = false;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = *it;
    if (v.is_null()) continue;
    if (key == "model") {
      r.model = detail::get_string(v, key);
      has_model = true;
    } else if (key == "prompt") {
      has_prompt = true;
      if (v.is_string()) {
        r.prompt_text = v.get<std::string>();
      } else if (v.is_array() && !v.empty() && (v[0].is_string() || v[0].is_array())) {
        if (v.size() != 1) throw unsupported(key, "one prompt per request (send several requests)");
        if (v[0].is_string()) r.prompt_text = v[0].get<std::string>();
        else r.prompt_ids = read_ids(v[0]);
      } else if (v.is_array()) {
        r.prompt_ids = read_ids(v);
      } else {
        detail::wrong_type(key, "a string or an array of token ids", v);
      }
      if ((r.prompt_text && r.prompt_text->empty()) || (!r.prompt_text && r.prompt_ids.empty())) {
        throw invalid_request("'prompt' is empty", key);
      }
    } else if (key == "logprobs") {
      r.params.logprobs = detail::get_int(v, key, 0, 20);
    } else if (key == "echo") {
      if (detail::get_bool(v, key)) throw unsupported(key, "the completion only (echo: false)");
    } else if (key == "suffix") {
      if (!detail::get_string(v, key).empty()) throw unsupported(key, "no insertion (an empty suffix only)");
    } else if (key == "best_of") {
      if (detail::get_int(v, key, 1, 1 << 20) != 1) throw unsupported(key, "one candidate per request (best_of = 1)");
    } else {
      if (key == "max_tokens" || key == "max_completion_tokens") {
        if (!max_tokens_given) r.params.max_tokens.reset();
        max_tokens_given = true;
      }
      if (!detail::read_generation_field(key, v, r.params, vocab_size, has_stream_options)) detail::unknown_field(key);
    }
  }
  if (!has_model) throw invalid_request("'model' is missing", "model", "missing_required_parameter");
  if (!has_prompt) throw invalid_request("'prompt' is missing", "prompt", "missing_required_parameter");
  detail::check_stream_options(r.params, has_stream_options);
  return r;
}

/// \brief DeepSeek-V3.1's and V3.2-Exp's tool block for the system prompt, as their model cards give
///        it (their chat templates print no tools): per tool its name, description and parameters
///        (Python's `json.dumps`), then the call format.
/// \param tools OpenAI-style tools (`[{"type": "function", "function": {...}}]`)
inline std::string v3_2_exp_tools_block(const Json& tools) {
  std::string out = "## Tools\nYou have access to the following tools:\n";
  for (const Json& tool : tools) {
    const Json& fn = tool.at("function");
    out += "\n### " + fn.at("name").get<std::string>() + "\nDescription: ";
    if (const auto d = fn.find("description"); d != fn.end() && d->is_string()) out += d->get<std::string>();
    const auto p = fn.find("parameters");
    out += "\n\nParameters: " + python_json::dumps(p != fn.end() && !p->is_null() ? *p : Json::object()) + "\n";
  }
  out += "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n";
  out += std::string(chat_tokens::tool_calls_begin) + std::string(chat_tokens::tool_call_begin) + "tool_call_name" +
         std::string(chat_tokens::tool_sep) + "tool_call_arguments" + std::string(chat_tokens::tool_call_end) +
         "{{additional_tool_calls}}" + std::string(chat_tokens::tool_calls_end) + "\n\n";
  out += "Where:\n\n- `tool_call_name` must be an exact match to one of the available tools\n"
         "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
         "- For multiple tool calls, chain them directly without separators or spaces\n";
  return out;
}

/// \brief The prompt text of a chat request in `format`: DeepSeek-V3.2-Exp's (and V3's) chat
///        template with the generation prompt, or DeepSeek-V3.2's encoding; the request's tools
///        (unless tool_choice is "none") in the system prompt the way each format expects them —
///        V3.2-Exp's tool block appended to the last system message (or a new first one), V3.2's
///        `tools` field on the first message when it is a system message (or on a new one).
/// \param request   the request, as parse_chat_request() read it
/// \param format    the chat format
/// \param bos_token the text of the tokenizer's bos token (the templates print it)
/// \throws ApiError (400, param `messages`) for what the format refuses: a role it does not have
///         (`developer` outside V3.2), a tool message that answers no call, too many results, an
///         assistant turn V3.2 cannot print, a conversation V3.2 cannot continue (it ends with an
///         assistant message), thinking mode in DeepSeek-V3's format.
inline std::string render_chat_prompt(const ChatRequest& request, ChatFormat format, const std::string& bos_token) {
  std::vector<ChatMessage> messages = request.messages;
  const bool tools = !request.tools.is_null() && !request.tool_choice_none;
  try {
    if (format == ChatFormat::deepseek_v3_2) {
      if (tools) {
        if (messages.empty() || messages.front().role != "system") messages.insert(messages.begin(), ChatMessage{"system", ""});
        messages.front().tools = request.tools;
      }
      const std::string& last = messages.back().role;
      if (last != "user" && last != "developer" && last != "tool") {
        throw invalid_request("DeepSeek-V3.2's encoding continues a conversation after a user, developer or tool message; "
                                  "the last message is a \"" + last + "\" message",
                              "messages");
      }
      // drop_thinking = false: the same prompt as true (reasoning before the last user message is never
      // printed), except that a developer message there is printed where the module would fail
      return deepseek_v3_2::encode_messages(messages, {.thinking = request.thinking, .drop_thinking = false});
    }
    if (tools) {
      if (format == ChatFormat::deepseek_v3) throw unsupported("tools", "tool calls need DeepSeek-V3.2-Exp's or V3.2's format");
      const std::string block = v3_2_exp_tools_block(request.tools);
      auto last_system = std::find_if(messages.rbegin(), messages.rend(), [](const ChatMessage& m) { return m.role == "system"; });
      if (last_system == messages.rend()) {
        messages.insert(messages.begin(), ChatMessage{"system", block});
      } else {
        last_system->content += (last_system->content.empty() ? "" : "\n\n") + block;
      }
    }
    const ChatTemplate tmpl(format == ChatFormat::deepseek_v3 ? ChatTemplateKind::deepseek_v3 : ChatTemplateKind::deepseek_v3_2_exp,
                            bos_token);
    return tmpl.render(messages, ChatTemplateOptions{.add_generation_prompt = true, .thinking = request.thinking});
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw invalid_request(std::string(to_string(format)) + " format: " + e.message(), "messages");
  }
}

/// \brief One completion token's log-probability, as the API reports it.
struct TokenLogprob {
  /// \brief One of the most likely tokens.
  struct Alternative {
    std::int32_t id = 0;   ///< its id
    std::string bytes;     ///< its bytes
    float logprob = 0.0f;  ///< its log-probability
  };
  std::int32_t id = 0;     ///< the token's id
  std::string bytes;       ///< the token's bytes (a byte-level token may hold part of a UTF-8 character)
  float logprob = 0.0f;    ///< its log-probability
  std::vector<Alternative> top;  ///< the most likely tokens, most likely first
};

/// \brief Token counts of a request (`usage`).
struct Usage {
  std::int64_t prompt_tokens = 0;      ///< the prompt's tokens
  std::int64_t completion_tokens = 0;  ///< the completion's tokens (an eos or stop id that ended it not counted)
  std::int64_t cached_tokens = 0;      ///< prompt tokens taken from the prefix cache

  /// \brief `{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}`.
  Json json() const {
    return Json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", Json{{"cached_tokens", cached_tokens}}}};
  }
};

namespace detail {

// Text that is valid UTF-8 (a token's bytes may end inside a character): bad bytes become U+FFFD.
inline std::string lossy(const std::string& bytes) { return utf8::is_valid(bytes) ? bytes : utf8::decode_lossy(bytes); }

inline Json byte_values(const std::string& bytes) {
  Json out = Json::array();
  for (const char c : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

// How a token is named in log-probabilities: its text, or `token_id:N` (return_tokens_as_token_ids).
inline std::string token_name(std::int32_t id, const std::string& bytes, bool as_id) {
  return as_id ? "token_id:" + std::to_string(id) : lossy(bytes);
}

}  // namespace detail

/// \brief A chat completion's `finish_reason`: `stop`, `length` or `tool_calls`.
/// \param ended_by_model the model ended the reply (eos, a stop id or a stop string)
/// \param length         the completion hit max_tokens or the context
/// \param tool_calls     the reply holds tool calls
inline std::string_view chat_finish_reason(bool ended_by_model, bool length, bool tool_calls) {
  if (length) return "length";
  return ended_by_model && tool_calls ? "tool_calls" : "stop";
}

/// \brief Assembles one chat completion: the SSE chunks of a stream as its parts arrive, and the
///        whole response (`chat.completion`) from the same parts, so that a stream's deltas add up
///        to the response.
class ChatCompletionBuilder {
 public:
  /// \param id       the completion's id (`chatcmpl-...`); tool calls get `call_<id suffix>_<n>`
  /// \param created  Unix time of the request
  /// \param model    the served model name
  /// \param logprobs whether the request asked for log-probabilities
  /// \param tokens_as_ids name tokens `token_id:N` in log-probabilities
  ChatCompletionBuilder(std::string id, std::int64_t created, std::string model, bool logprobs, bool tokens_as_ids = false)
      : id_(std::move(id)), created_(created), model_(std::move(model)), logprobs_(logprobs), as_ids_(tokens_as_ids) {}

  /// \brief The stream's first chunk: the assistant role and empty content.
  std::string role_chunk() { return sse_event(chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr)); }

  /// \brief Adds what the parser separated from some tokens, and those tokens' log-probabilities;
  ///        returns its chunk ("" when there is nothing to send yet: log-probabilities wait for text).
  /// \param delta    reasoning, content and completed tool calls
  /// \param logprobs the tokens' log-probabilities (empty without logprobs)
  std::string add(const ChatOutputDelta& delta, const std::vector<TokenLogprob>& logprobs) {
    for (const TokenLogprob& t : logprobs) pending_logprobs_.push_back(logprob_json(t));
    if (delta.empty()) return {};
    Json d = Json::object();
    if (!delta.reasoning.empty()) {
      reasoning_ += delta.reasoning;
      d["reasoning_content"] = delta.reasoning;
    }
    if (!delta.content.empty()) {
      content_ += delta.content;
      d["content"] = delta.content;
    }
    if (!delta.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCall& c : delta.tool_calls) {
        Json call = tool_call_json(c, calls_.size());
        call = Json{{"index", calls_.size()}, {"id", call["id"]}, {"type", "function"}, {"function", call["function"]}};
        calls.push_back(std::move(call));
        calls_.push_back(c);
      }
      d["tool_calls"] = std::move(calls);
    }
    return sse_event(chunk(std::move(d), nullptr));
  }

  /// \brief The chunk that ends the choice: an empty delta, `finish_reason` and `stop_reason` (the stop
  ///        string or id that ended it, else null), with log-probabilities not sent yet.
  /// \param finish_reason `stop`, `length` or `tool_calls`
  /// \param stop_reason   the matched stop string or stop token id, or null
  std::string finish_chunk(std::string_view finish_reason, const Json& stop_reason) {
    Json c = chunk(Json::object(), std::string(finish_reason));
    c["choices"][0]["stop_reason"] = stop_reason;
    return sse_event(c);
  }

  /// \brief The chunk with the usage (`stream_options.include_usage`): no choices, as OpenAI sends it.
  /// \param usage the request's token counts
  std::string usage_chunk(const Usage& usage) const {
    Json c = header("chat.completion.chunk");
    c["choices"] = Json::array();
    c["usage"] = usage.json();
    return sse_event(c);
  }

  /// \brief The whole response (`chat.completion`) from everything added.
  /// \param finish_reason `stop`, `length` or `tool_calls`
  /// \param stop_reason   the matched stop string or stop token id, or null
  /// \param usage         the request's token counts
  Json response(std::string_view finish_reason, const Json& stop_reason, const Usage& usage) const {
    Json message{{"role", "assistant"},
                 {"content", content_.empty() && !calls_.empty() ? Json(nullptr) : Json(content_)},
                 {"reasoning_content", reasoning_.empty() ? Json(nullptr) : Json(reasoning_)}};
    if (!calls_.empty()) {
      Json calls = Json::array();
      for (std::size_t i = 0; i < calls_.size(); ++i) calls.push_back(tool_call_json(calls_[i], i));
      message["tool_calls"] = std::move(calls);
    }
    Json choice{{"index", 0}, {"message", std::move(message)}, {"logprobs", nullptr}};
    if (logprobs_) choice["logprobs"] = Json{{"content", all_logprobs_}};
    choice["finish_reason"] = std::string(finish_reason);
    choice["stop_reason"] = stop_reason;
    Json r = header("chat.completion");
    r["choices"] = Json::array({std::move(choice)});
    r["usage"] = usage.json();
    return r;
  }

  /// \brief Whether tool calls were added.
  bool has_tool_calls() const noexcept { return !calls_.empty(); }

 private:
  Json header(const char* object) const {
    return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
  }

  Json chunk(Json delta, const Json& finish_reason) {
    Json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
    if (logprobs_ && !pending_logprobs_.empty()) {
      choice["logprobs"] = Json{{"content", pending_logprobs_}};
      for (auto& l : pending_logprobs_) all_logprobs_.push_back(std::move(l));
      pending_logprobs_ = Json::array();
    }
    Json c = header("chat.completion.chunk");
    c["choices"] = Json::array({std::move(choice)});
    return c;
  }

  Json chunk(Json delta, std::nullptr_t) { return chunk(std::move(delta), Json(nullptr)); }

  Json tool_call_json(const ToolCall& c, std::size_t index) const {
    const std::size_t dash = id_.find('-');
    const std::string suffix = dash == std::string::npos ? id_ : id_.substr(dash + 1);
    return Json{{"id", "call_" + suffix + "_" + std::to_string(index)},
                {"type", "function"},
                {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}};
  }

  Json logprob_json(const TokenLogprob& t) const {
    Json top = Json::array();
    for (const auto& a : t.top) {
      top.push_back(Json{{"token", detail::token_name(a.id, a.bytes, as_ids_)}, {"logprob", a.logprob},
                         {"bytes", detail::byte_values(a.bytes)}});
    }
    return Json{{"token", detail::token_name(t.id, t.bytes, as_ids_)}, {"logprob", t.logprob},
                {"bytes", detail::byte_values(t.bytes)}, {"top_logprobs", std::move(top)}};
  }

  std::string id_;
  std::int64_t created_;
  std::string model_;
  bool logprobs_, as_ids_;
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
  Json pending_logprobs_ = Json::array(), all_logprobs_ = Json::array();
};

/// \brief Assembles one text completion (`text_completion`): a chunk per token event streamed, and
///        the whole response from the same parts.
class CompletionBuilder {
 public:
  /// \param id       the completion's id (`cmpl-...`)
  /// \param created  Unix time of the request
  /// \param model    the served model name
  /// \param logprobs whether the request asked for log-probabilities
  /// \param tokens_as_ids name tokens `token_id:N` in log-probabilities
  CompletionBuilder(std::string id, std::int64_t created, std::string model, bool logprobs, bool tokens_as_ids = false)
      : id_(std::move(id)), created_(created), model_(std::move(model)), logprobs_(logprobs), as_ids_(tokens_as_ids) {}

  /// \brief Adds the text some tokens released and their log-probabilities; returns the chunk (sent
  ///        even when the text is empty, one per token, so that clients can time tokens).
  /// \param text     completion text
  /// \param logprobs the tokens' log-probabilities (empty without logprobs)
  std::string add(const std::string& text, const std::vector<TokenLogprob>& logprobs) {
    Json lp = logprobs_json(logprobs);
    text_ += text;
    return sse_event(chunk(text, std::move(lp), nullptr));
  }

  /// \brief The last chunk: empty text, `finish_reason` and `stop_reason`.
  /// \param finish_reason `stop` or `length`
  /// \param stop_reason   the matched stop string or stop token id, or null
  std::string finish_chunk(std::string_view finish_reason, const Json& stop_reason) const {
    Json c = chunk("", nullptr, std::string(finish_reason));
    c["choices"][0]["stop_reason"] = stop_reason;
    return sse_event(c);
  }

  /// \brief The chunk with the usage and no choices.
  /// \param usage the request's token counts
  std::string usage_chunk(const Usage& usage) const {
    Json c = header();
    c["choices"] = Json::array();
    c["usage"] = usage.json();
    return sse_event(c);
  }

  /// \brief The whole response from everything added.
  /// \param finish_reason `stop` or `length`
  /// \param stop_reason   the matched stop string or stop token id, or null
  /// \param usage         the request's token counts
  Json response(std::string_view finish_reason, const Json& stop_reason, const Usage& usage) const {
    Json choice{{"index", 0}, {"text", text_}, {"logprobs", logprobs_ ? all_ : Json(nullptr)},
                {"finish_reason", std::string(finish_reason)}, {"stop_reason", stop_reason}};
    Json r = header();
    r["choices"] = Json::array({std::move(choice)});
    r["usage"] = usage.json();
    return r;
  }

 private:
  Json header() const { return Json{{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}}; }

  Json chunk(const std::string& text, Json logprobs, const Json& finish_reason) const {
    Json c = header();
    c["choices"] = Json::array({Json{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)},
                                     {"finish_reason", finish_reason}}});
    return c;
  }

  // OpenAI's legacy form: tokens, token_logprobs, top_logprobs (token -> logprob), text_offset.
  Json logprobs_json(const std::vector<TokenLogprob>& logprobs) {
    Json lp{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
            {"text_offset", Json::array()}};
    if (!logprobs_) return nullptr;
    for (const TokenLogprob& t : logprobs) {
      const std::string token = detail::token_name(t.id, t.bytes, as_ids_);
      lp["tokens"].push_back(token);
      lp["token_logprobs"].push_back(t.logprob);
      Json top = Json::object();
      for (const auto& a : t.top) top[detail::token_name(a.id, a.bytes, as_ids_)] = a.logprob;
      lp["top_logprobs"].push_back(t.top.empty() ? Json(nullptr) : std::move(top));
      lp["text_offset"].push_back(offset_);
      offset_ += detail::lossy(t.bytes).size();
      for (const char* f : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) all_[f].push_back(lp[f].back());
    }
    return lp;
  }

  std::string id_;
  std::int64_t created_;
  std::string model_;
  bool logprobs_, as_ids_;
  std::string text_;
  std::size_t offset_ = 0;
  Json all_{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
            {"text_offset", Json::array()}};
};

/// \brief Finds stop strings in text that arrives in pieces: releases the text before the first
///        match and holds back a tail that could still become one.
///
/// Text goes in as the tokens decode (whole UTF-8 characters); what comes out is the same text up to
/// the first stop string, never a byte of a stop string, and never later than needed: only the
/// longest tail that begins some stop string waits for the next piece.
class StopStrings {
 public:
  /// \param stops the stop strings (none: everything passes at once)
  explicit StopStrings(std::vector<std::string> stops = {}) : stops_(std::move(stops)) {}

  /// \brief The outcome of a piece of text.
  struct Result {
    std::string text;                  ///< the text released
    std::optional<std::size_t> match;  ///< the index of the stop string found, if one was
  };

  /// \brief Adds a piece of text. After a match, further pieces release nothing.
  /// \param piece the next text of the completion
  Result push(std::string_view piece) {
    Result r;
    if (matched_) return r;
    held_ += piece;
    std::size_t first = std::string::npos;
    for (std::size_t s = 0; s < stops_.size(); ++s) {
      const std::size_t at = held_.find(stops_[s]);
      if (at != std::string::npos && (at < first || (at == first && !r.match))) {
        first = at;
        r.match = s;
      }
    }
    if (r.match) {
      r.text = held_.substr(0, first);
      held_.clear();
      matched_ = true;
      return r;
    }
    std::size_t keep = 0;  // the longest tail that is a proper prefix of a stop string
    for (const std::string& s : stops_) {
      for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
      }
    }
    r.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return r;
  }

  /// \brief Ends the text: releases what was held back (nothing after a match).
  std::string flush() {
    std::string out;
    out.swap(held_);
    return matched_ ? std::string() : out;
  }

  /// \brief Whether a stop string was found.
  bool matched() const noexcept { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

/// @}

}  // namespace dsv32::openai
