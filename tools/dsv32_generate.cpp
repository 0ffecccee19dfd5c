// dsv32-generate: generate tokens (or text, with the tokenizer) from a checkpoint directory or from
// an embedded tiny model with random weights, through dsv32::generate — see --help.
//
// Structure: arguments -> an Engine (one compiled config chosen with dispatch_config from the
// checkpoint's config.json, or the embedded default) -> one of three modes: token ids, text, chat.
// Only the Engine is a template; everything else is compiled once.
#include <dsv32/dsv32.hpp>
#include <dsv32/config/registry.hpp>
#include <dsv32/generate/generate.hpp>
#include <dsv32/io/checkpoint.hpp>

#if defined(DSV32_GENERATE_WITH_TOKENIZER)
#include <dsv32/tokenizer.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

using Tokens = std::vector<std::int32_t>;

// The embedded default model: the shape of the golden FP8 scenarios at dim 128, with the released
// model's vocabulary (129280) so that the DeepSeek-V3 tokenizer's ids all fit and text and chat
// modes work out of the box. Random weights: 97 MiB, about 1 s to initialize and a few ms per
// token on one core. (A smaller vocabulary would be faster but could not run text modes.)
struct EmbeddedDefault : dsv32::TinyFp8Ue8m0Yarn {
  static constexpr std::string_view name = "embedded-default (tiny FP8, vocab 129280, random weights)";
  static constexpr std::int64_t vocab_size = 129280;
  static constexpr std::int64_t dim = 128;
};
constexpr std::uint64_t kEmbeddedWeightSeed = 2025;
constexpr std::int64_t kEmbeddedMaxSeqLen = 4096;
const Tokens kDefaultPrompt = {1, 17, 42, 99, 256, 7, 311, 5};

constexpr std::string_view kUsage = R"(usage: dsv32-generate [--checkpoint DIR] [input] [options]

Generates with DeepSeek-V3.2-Exp through dsv32::generate: greedy or sampled (temperature, top-k,
top-p), batched, streamed. With no arguments it runs an embedded tiny model (random weights, the
released model's vocabulary) on a built-in prompt of token ids.

model:
  --checkpoint DIR     checkpoint directory: config.json plus model0-mp1.safetensors (the
                       reference's converted format) or a Hugging Face directory (when this build
                       has the Hugging Face loader); the compiled config matching config.json is
                       used. Alias: --ckpt-path. Default: the embedded tiny model.
  --max-seq-len N      cache length (default: config.json's max_seq_len; embedded: 4096)

input, as token ids (default mode):
  --prompt-ids "IDS"   one prompt of token ids separated by spaces or commas; "-" reads them from
                       standard input
  --batch-file FILE    one prompt per line (blank lines skipped); "-" reads standard input.
                       Lines are token ids, or text with --text
  (none)               the built-in prompt 1 17 42 99 256 7 311 5

input, as text (builds with the tokenizer component only):
  --tokenizer DIR      directory with tokenizer.json and tokenizer_config.json (default: the
                       checkpoint directory when it holds tokenizer.json, else the tokenizer
                       vendored in the dsv32 source tree, if present)
  --prompt "TEXT"      one text prompt; the completion is printed as text, streamed
  --text               --batch-file lines are text prompts
  --raw                encode text prompts as they are (with bos) instead of as a user message
                       of the chat template (the default, as the reference's generate.py does)
  --chat               interactive chat as the reference's generate.py --interactive: reads lines
                       after a ">>> " prompt, "/clear" forgets the conversation, "/exit" or end of
                       input quits; replies are streamed and kept in the conversation
  Text modes need a model whose vocab_size covers the tokenizer's ids.

generation:
  --max-new-tokens N   most tokens generated per prompt (default 100)
  --temperature T      0 = greedy; default 0.6 (the reference's default)
  --top-k K            keep the K most probable tokens (default 0 = all)
  --top-p P            nucleus sampling, P in (0, 1] (default 1 = all)
  --seed S             seed of the sampling streams (default 0): prompt b uses stream b; chat
                       turn t uses seed S + t
  --eos-id ID|none     token that ends a completion (default: the tokenizer's eos in text and
                       chat modes; none for token ids)

output:
  Token ids: one line per prompt with its completion's ids (streamed for a single prompt).
  Text: the completion (streamed for a single prompt; "Prompt:"/"Completion:" pairs for a batch).
  Standard error: the model loaded, then time to first token and decode tokens/s of each run.
  --quiet              no model or timing lines on standard error
  --help               this help

Exit status: 0 on success, 1 when loading or generating fails, 2 for bad arguments.

examples:
  dsv32-generate
  dsv32-generate --checkpoint tests/data/golden/tiny_bf16 --prompt-ids "97 260 130" --temperature 0
  echo "1 2 3" | dsv32-generate --checkpoint DIR --prompt-ids - --max-new-tokens 8
  dsv32-generate --checkpoint /models/DeepSeek-V3.2-Exp --prompt "Why is the sky blue?"
  dsv32-generate --chat --tokenizer tests/data/tokenizer/deepseek_v3 --max-new-tokens 20
)";

// ------------------------------------------------------------------ arguments

struct Arguments {
  std::optional<fs::path> checkpoint;
  std::optional<std::int64_t> max_seq_len;
  std::optional<std::string> prompt_ids;  // "-" = stdin
  std::optional<std::string> batch_file;  // "-" = stdin
  std::optional<fs::path> tokenizer;
  std::optional<std::string> prompt_text;
  bool text = false, raw = false, chat = false, quiet = false;
  dsv32::GenerateOptions gen;
  bool eos_given = false;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "dsv32-generate: " << message << "\n(run dsv32-generate --help for usage)\n";
  std::exit(2);
}

std::int64_t parse_int(const std::string& flag, const std::string& s, std::int64_t lo, std::int64_t hi) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < lo || v > hi)
    usage_error(flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + s +
                "'");
  return v;
}

double parse_double(const std::string& flag, const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) usage_error(flag + " expects a number, got '" + s + "'");
  return v;
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments a;
  a.gen.sampling.temperature = 0.6;
  constexpr std::int64_t kMaxInt = 1LL << 40;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--checkpoint" || arg == "--ckpt-path") {
      a.checkpoint = value();
    } else if (arg == "--max-seq-len") {
      a.max_seq_len = parse_int(arg, value(), 1, kMaxInt);
    } else if (arg == "--prompt-ids") {
      a.prompt_ids = value();
    } else if (arg == "--batch-file") {
      a.batch_file = value();
    } else if (arg == "--tokenizer") {
      a.tokenizer = value();
    } else if (arg == "--prompt") {
      a.prompt_text = value();
    } else if (arg == "--text") {
      a.text = true;
    } else if (arg == "--raw") {
      a.raw = true;
    } else if (arg == "--chat" || arg == "--interactive") {
      a.chat = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (arg == "--max-new-tokens") {
      a.gen.max_new_tokens = parse_int(arg, value(), 0, kMaxInt);
    } else if (arg == "--temperature") {
      a.gen.sampling.temperature = parse_double(arg, value());
    } else if (arg == "--top-k") {
      a.gen.sampling.top_k = parse_int(arg, value(), 0, kMaxInt);
    } else if (arg == "--top-p") {
      a.gen.sampling.top_p = parse_double(arg, value());
    } else if (arg == "--seed") {
      const std::string s = value();
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
        usage_error("--seed expects a non-negative integer, got '" + s + "'");
      try {
        a.gen.seed = std::stoull(s);
      } catch (const std::exception&) {
        usage_error("--seed expects a 64-bit integer, got '" + s + "'");
      }
    } else if (arg == "--eos-id") {
      const std::string s = value();
      a.eos_given = true;
      if (s != "none") a.gen.eos_id = static_cast<std::int32_t>(parse_int(arg, s, 0, INT32_MAX));
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  try {
    a.gen.sampling.validate();
  } catch (const dsv32::Error& e) {
    usage_error(std::string(e.what()).substr(std::string_view("dsv32 [invalid_argument]: ").size()));
  }
  const int inputs = a.prompt_ids.has_value() + a.batch_file.has_value() + a.prompt_text.has_value() + a.chat;
  if (inputs > 1) usage_error("give one input: --prompt-ids, --batch-file, --prompt or --chat");
  if (a.text && !a.batch_file) usage_error("--text applies to --batch-file");
  if (a.raw && !(a.prompt_text || a.text)) usage_error("--raw applies to text prompts (--prompt, --batch-file --text)");
  if (a.prompt_ids && a.batch_file && *a.prompt_ids == "-" && *a.batch_file == "-")
    usage_error("standard input can be read once");
#if !defined(DSV32_GENERATE_WITH_TOKENIZER)
  if (a.prompt_text || a.text || a.chat || a.tokenizer)
    usage_error("text input (--prompt, --text, --chat, --tokenizer) needs the tokenizer component, which this build "
                "of dsv32-generate does not have (configure with PCRE2 and DSV32_BUILD_TOKENIZER=ON)");
#endif
  return a;
}

// Token ids written as text: dsv32::parse_token_ids() (decimal ids separated by spaces or commas).
Tokens parse_ids(const std::string& line, const std::string& where) { return dsv32::parse_token_ids(line, where); }

std::string read_all(std::istream& in) {
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Non-blank lines of a file ("-": standard input).
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) throw std::runtime_error("cannot open batch file " + path);
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) throw std::runtime_error((path == "-" ? std::string("standard input") : path) + " holds no prompt");
  return lines;
}

// ------------------------------------------------------------------ the model behind a virtual seam

class Engine {
 public:
  virtual ~Engine() = default;
  virtual dsv32::GenerationResult generate(const std::vector<Tokens>& prompts, const dsv32::GenerateOptions& o) = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t max_seq_len() const = 0;
};

template <class Config>
class ModelEngine final : public Engine {
 public:
  ModelEngine(const dsv32::RuntimeOptions& runtime, const std::optional<fs::path>& checkpoint, bool quiet)
      : model_(runtime) {
    const auto t0 = std::chrono::steady_clock::now();
    if (checkpoint) dsv32::load_checkpoint(model_, *checkpoint);
    else model_.init_random(kEmbeddedWeightSeed);
    if (quiet) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const dsv32::MemoryPlan plan = model_.memory_plan();
    std::fprintf(stderr, "model %s: %lld parameters, %s of weights, %s of caches (batch %lld x %lld positions); %s in %.2f s\n",
                 std::string(Config::name).c_str(), static_cast<long long>(plan.parameters),
                 dsv32::format_bytes(static_cast<double>(plan.weights)).c_str(),
                 dsv32::format_bytes(static_cast<double>(plan.caches)).c_str(),
                 static_cast<long long>(runtime.max_batch_size), static_cast<long long>(runtime.max_seq_len),
                 checkpoint ? "loaded" : "random weights", s);
  }
  dsv32::GenerationResult generate(const std::vector<Tokens>& prompts, const dsv32::GenerateOptions& o) override {
    return dsv32::generate(model_, prompts, o);
  }
  std::int64_t vocab_size() const override { return Config::vocab_size; }
  std::int64_t max_seq_len() const override { return model_.options().max_seq_len; }

 private:
  dsv32::Transformer<Config> model_;
};

// The one place that reads a checkpoint directory's config.json: the reference's ModelArgs fields,
// or Hugging Face's when the build has their parser (<dsv32/io/hf_checkpoint.hpp>).
dsv32::ModelArgs read_checkpoint_args(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw dsv32::Error(dsv32::ErrorKind::io, "checkpoint directory " + dir.string() + " does not exist");
  return dsv32::read_model_config(dir);  // the reference's ModelArgs fields or Hugging Face's
}

std::unique_ptr<Engine> make_engine(const Arguments& a, std::int64_t batch) {
  if (!a.checkpoint) {
    dsv32::RuntimeOptions runtime;
    runtime.max_batch_size = std::max<std::int64_t>(1, batch);
    runtime.max_seq_len = a.max_seq_len.value_or(kEmbeddedMaxSeqLen);
    return std::make_unique<ModelEngine<EmbeddedDefault>>(runtime, std::nullopt, a.quiet);
  }
  dsv32::ModelArgs args = read_checkpoint_args(*a.checkpoint);
  if (a.max_seq_len) args.runtime.max_seq_len = *a.max_seq_len;
  // Caches for the prompts at hand only; more prompts than config.json allows fail in generate().
  if (batch <= args.runtime.max_batch_size) args.runtime.max_batch_size = std::max<std::int64_t>(1, batch);
  args.runtime.validate();
  std::unique_ptr<Engine> engine;
  dsv32::dispatch_config<dsv32::Presets>(
      args, [&]<class C>() { engine = std::make_unique<ModelEngine<C>>(args.runtime, a.checkpoint, a.quiet); },
      (*a.checkpoint / "config.json").string());
  return engine;
}

// ------------------------------------------------------------------ output

void print_stats(const dsv32::GenerationResult& r, bool quiet) {
  if (quiet) return;
  const auto& s = r.stats;
  std::fprintf(stderr,
               "%zu prompt(s), %lld prompt tokens, %lld generated: time to first token %.2f ms; decode %lld tokens in "
               "%.2f ms = %.1f tokens/s (%.2f ms/step)\n",
               r.sequences.size(), static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated_tokens),
               1e3 * s.time_to_first_token_s, static_cast<long long>(s.decode_tokens), 1e3 * s.decode_s,
               s.decode_tokens_per_s(), s.ms_per_step());
}

int run_ids(const Arguments& a) {
  std::vector<Tokens> prompts;
  if (a.batch_file) {
    for (const auto& line : read_lines(*a.batch_file)) prompts.push_back(parse_ids(line, "batch file line"));
  } else if (a.prompt_ids) {
    prompts.push_back(*a.prompt_ids == "-" ? parse_ids(read_all(std::cin), "standard input")
                                           : parse_ids(*a.prompt_ids, "--prompt-ids"));
  } else {
    prompts.push_back(kDefaultPrompt);
  }
  for (const auto& p : prompts)
    if (p.empty()) throw std::runtime_error("a prompt holds no token ids");
  auto engine = make_engine(a, static_cast<std::int64_t>(prompts.size()));
  dsv32::GenerateOptions o = a.gen;
  const bool stream = prompts.size() == 1;
  bool first = true;
  if (stream)
    o.on_token = [&](std::size_t, std::int32_t id) {
      std::printf(first ? "%d" : " %d", id);
      std::fflush(stdout);
      first = false;
      return true;
    };
  const auto r = engine->generate(prompts, o);
  for (const auto& seq : r.sequences) {
    if (!stream)
      for (std::size_t i = 0; i < seq.tokens.size(); ++i) std::printf(i ? " %d" : "%d", seq.tokens[i]);
    std::printf("\n");
  }
  std::fflush(stdout);
  print_stats(r, a.quiet);
  return 0;
}

#if defined(DSV32_GENERATE_WITH_TOKENIZER)

bool text_mode(const Arguments& a) { return a.prompt_text || a.text || a.chat; }

fs::path tokenizer_dir(const Arguments& a) {
  if (a.tokenizer) return *a.tokenizer;
  if (a.checkpoint && fs::exists(*a.checkpoint / "tokenizer.json")) return *a.checkpoint;
#if defined(DSV32_GENERATE_DEFAULT_TOKENIZER)
  if (fs::exists(fs::path(DSV32_GENERATE_DEFAULT_TOKENIZER) / "tokenizer.json")) return DSV32_GENERATE_DEFAULT_TOKENIZER;
#endif
  throw std::runtime_error(a.checkpoint ? "no tokenizer: " + a.checkpoint->string() +
                                              " has no tokenizer.json; pass --tokenizer DIR"
                                        : std::string("no tokenizer: pass --tokenizer DIR"));
}

// Text of one token for streaming. An id the tokenizer lacks (the model's vocabulary has padding
// rows past the tokenizer's, which random weights do produce) prints as U+FFFD, and standard error
// says so: the text alone would not show that the model chose a token with no text.
std::string piece(dsv32::StreamDecoder& stream, const dsv32::Tokenizer& tok, std::int32_t id) {
  if (tok.contains(id)) return stream.push(id);
  std::cerr << "dsv32-generate: the model generated token id " << id << ", which is outside the tokenizer's "
            << "vocabulary [0, " << tok.vocab_size() << ") or has no token there; shown as U+FFFD\n";
  return stream.finish() + "\xEF\xBF\xBD";
}

int run_text(const Arguments& a) {
  const fs::path dir = tokenizer_dir(a);
  const dsv32::Tokenizer tok = dsv32::Tokenizer::from_directory(dir);
  std::vector<std::string> texts;
  if (a.prompt_text) texts.push_back(*a.prompt_text);
  else if (a.batch_file) texts = read_lines(*a.batch_file);
  // Checked before loading: a checkpoint can take long to load.
  const std::int64_t vocab = a.checkpoint ? read_checkpoint_args(*a.checkpoint).vocab_size : EmbeddedDefault::vocab_size;
  if (static_cast<std::int64_t>(tok.vocab_size()) > vocab)
    throw std::runtime_error("the tokenizer in " + dir.string() + " has " + std::to_string(tok.vocab_size()) +
                             " token ids but the model's vocab_size is " + std::to_string(vocab) +
                             ": text modes need a model whose vocabulary covers the tokenizer (use --prompt-ids "
                             "with this model)");
  auto engine = make_engine(a, a.chat ? 1 : static_cast<std::int64_t>(texts.size()));
  dsv32::GenerateOptions o = a.gen;
  if (!a.eos_given) o.eos_id = tok.eos_id();
  auto encode = [&](const std::vector<dsv32::ChatMessage>& messages) {
    return a.raw ? tok.encode(messages.back().content, /*add_special_tokens=*/true)
                 : tok.encode_chat(messages, /*add_generation_prompt=*/true);
  };

  if (!a.chat) {
    std::vector<Tokens> prompts;
    for (const auto& t : texts) prompts.push_back(encode({{"user", t}}));
    const bool stream = prompts.size() == 1;
    auto decoder = tok.stream_decoder(/*skip_special_tokens=*/true);
    if (stream)
      o.on_token = [&](std::size_t, std::int32_t id) {
        std::cout << piece(decoder, tok, id) << std::flush;
        return true;
      };
    const auto r = engine->generate(prompts, o);
    if (stream) {
      std::cout << decoder.finish() << '\n';
    } else {
      for (std::size_t b = 0; b < texts.size(); ++b) {
        std::string completion;
        for (std::int32_t id : r.sequences[b].tokens) completion += piece(decoder, tok, id);
        completion += decoder.finish();
        std::cout << "Prompt: " << texts[b] << "\nCompletion: " << completion << "\n\n";
      }
    }
    std::cout << std::flush;
    print_stats(r, a.quiet);
    return 0;
  }

  // Chat, as generate.py --interactive: the whole conversation is the prompt of each turn.
  std::vector<dsv32::ChatMessage> history;
  auto decoder = tok.stream_decoder(/*skip_special_tokens=*/true);
  std::string reply;
  std::uint64_t turn = 0;
  o.on_token = [&](std::size_t, std::int32_t id) {
    const std::string s = piece(decoder, tok, id);
    reply += s;
    std::cout << s << std::flush;
    return true;
  };
  for (std::string line;;) {
    std::cout << ">>> " << std::flush;
    if (!std::getline(std::cin, line)) {
      std::cout << '\n';
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit") break;
    if (line == "/clear") {
      history.clear();
      continue;
    }
    history.push_back({"user", line});
    const Tokens prompt = encode(history);
    if (static_cast<std::int64_t>(prompt.size()) >= engine->max_seq_len()) {
      std::cerr << "dsv32-generate: the conversation (" << prompt.size() << " tokens) fills max_seq_len = "
                << engine->max_seq_len() << "; /clear it or raise --max-seq-len\n";
      history.pop_back();
      continue;
    }
    reply.clear();
    o.seed = a.gen.seed + turn++;  // a fresh stream each turn, as the reference's RNG moves on
    const auto r = engine->generate({prompt}, o);
    const std::string tail = decoder.finish();
    reply += tail;
    std::cout << tail << '\n' << std::flush;
    print_stats(r, a.quiet);
    history.push_back({"assistant", reply});
  }
  return 0;
}

#endif  // DSV32_GENERATE_WITH_TOKENIZER

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse_arguments(argc, argv);
  try {
#if defined(DSV32_GENERATE_WITH_TOKENIZER)
    if (text_mode(args)) return run_text(args);
#endif
    return run_ids(args);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "dsv32-generate: " << e.what() << '\n';
    return 1;
  }
}
