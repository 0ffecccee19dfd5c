// dsv32-generate: generate tokens (or text, with the tokenizer) from a checkpoint directory or from
// an embedded tiny model with random weights, through dsv32::generate — see --help.
//
// Structure: arguments -> an Engine (one compiled config chosen with dispatch_config from the
// checkpoint's config.json, or the embedded default) -> one of three modes: token ids, text, chat.
// Only the Engine is a template; everything else is compiled once.
//
// Model parallelism: under `mpirun -n W` (builds with dsv32::mpi) every process is a rank; with
// `--world-size W` the ranks are threads of this process. Either way rank 0 runs the mode (reads the
// input, prints) and the other ranks follow (follow()): they learn the batch size from rank 0, load
// their part of the model and compute every generate() call rank 0 makes (GenerationGroup). Loading
// is agreed on (run_collectively), so a rank that fails makes every rank exit with rank 0's one message.
#include <dsv32/dsv32.hpp>
#include <dsv32/core/filesystem.hpp>
#include <dsv32/config/registry.hpp>
#include <dsv32/generate/generate.hpp>
#include <dsv32/generate/group.hpp>
#include <dsv32/io/checkpoint.hpp>

#if defined(DSV32_GENERATE_WITH_MPI)
#include <dsv32/mpi.hpp>
#endif

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
#include <thread>
#include <vector>

#if !defined(_WIN32)
#include <unistd.h>
#endif

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace fs = std::filesystem;

namespace {

using Tokens = std::vector<std::int32_t>;

// The embedded default model: dsv32-server's demo model (DemoFp8: the shape of the golden FP8
// scenarios at dim 128, with the released model's vocabulary, 129280, so that the DeepSeek
// tokenizers' ids all fit and text and chat modes work out of the box). Random weights: about 1 s
// to initialize and a few ms per token on one core. (A smaller vocabulary would be faster but could
// not run text modes.)
struct EmbeddedDefault : dsv32::DemoFp8 {
  static constexpr std::string_view name = "embedded-default (tiny FP8, vocab 129280, random weights)";
};
// The embedded model over 2 ranks (--world-size 2, mpirun -n 2): 16 heads and two shared experts, so
// that each rank holds whole FP8 blocks (EmbeddedDefault's 4 heads cannot split). Its random weights
// differ from one rank's anyway (each rank draws its own part), so nothing is lost by the other shape.
struct EmbeddedSplit : EmbeddedDefault {
  static constexpr std::string_view name = "embedded-default over ranks (tiny FP8, 16 heads, vocab 129280, random weights)";
  static constexpr std::int64_t n_heads = 16;
  static constexpr std::int64_t n_shared_experts = 2;
};
constexpr std::uint64_t kEmbeddedWeightSeed = 2025;
constexpr std::int64_t kEmbeddedMaxSeqLen = 4096;
const Tokens kDefaultPrompt = {1, 17, 42, 99, 256, 7, 311, 5};

constexpr std::string_view kUsage = "usage: dsv32-generate [--checkpoint DIR] [input] [options]";

constexpr std::string_view kDescription = R"(Generates with DeepSeek-V3.2-Exp through dsv32::generate: greedy or sampled (temperature, top-k,
top-p), batched, streamed. With no arguments it runs an embedded tiny model (random weights, the
released model's vocabulary) on a built-in prompt of token ids. Text modes need a model whose
vocab_size covers the tokenizer's ids.)";

constexpr std::string_view kFooter = R"(what is printed:
  Token ids: one line per prompt with its completion's ids (streamed for a single prompt).
  Text: the completion (streamed for a single prompt; "Prompt:"/"Completion:" pairs for a batch).
  Tool calls parsed from a chat-template reply are printed as JSON lines, one per call:
  {"function":{"arguments":"...","name":"..."},"type":"function"}.
  Standard error: the model loaded, then time to first token and decode tokens/s of each run.

Exit status: 0 on success, 1 when loading or generating fails, 2 for bad arguments.

examples:
  dsv32-generate
  dsv32-generate --checkpoint tests/data/golden/tiny_bf16 --prompt-ids "97 260 130" --temperature 0
  echo "1 2 3" | dsv32-generate --checkpoint DIR --prompt-ids - --max-new-tokens 8
  dsv32-generate --checkpoint /models/DeepSeek-V3.2-Exp --prompt "Why is the sky blue?"
  dsv32-generate --chat --thinking --max-new-tokens 20
  dsv32-generate --chat --tokenizer tests/data/tokenizer/deepseek_v3 --max-new-tokens 20)";

// ------------------------------------------------------------------ arguments

struct Arguments {
  std::optional<fs::path> checkpoint;
  std::optional<std::int64_t> max_seq_len;
  std::optional<std::string> prompt_ids;  // "-" = stdin
  std::optional<std::string> batch_file;  // "-" = stdin
  std::optional<fs::path> tokenizer;
  std::optional<std::string> prompt_text;
  std::optional<fs::path> replay_ids;
  std::optional<std::string> chat_format;  // --chat-format, checked where the tokenizer is
  bool text = false, raw = false, chat = false, thinking = false, quiet = false, fp8_fast = false;
  dsv32::GenerateOptions gen;
  bool eos_given = false;
  int world_size = 1;  // --world-size: ranks as threads
};

int g_process_rank = 0;  // this process's MPI rank (0 without MPI): only rank 0 prints

[[noreturn]] void usage_error(const std::string& message) {
  dsv32::tools::usage_error("dsv32-generate", message, g_process_rank == 0);
}

Arguments parse_arguments(int argc, char** argv) {
  namespace cli = dsv32::tools;
  Arguments a;
  a.gen.sampling.temperature = 0.6;
  constexpr std::int64_t kMaxInt = 1LL << 40;
  CLI::App app(std::string(kDescription), "dsv32-generate");
  cli::setup(app, std::string(kUsage), 23);
  app.footer(std::string(kFooter));

  app.option_defaults()->group("model");
  cli::add_optional(app, "--checkpoint,--ckpt-path", a.checkpoint, "DIR",
                    "checkpoint directory: config.json plus model0-mp1.safetensors (the\n"
                    "reference's converted format) or a Hugging Face directory (when this build\n"
                    "has the Hugging Face loader); the compiled config matching config.json is\n"
                    "used. Default: the embedded tiny model.");
  cli::add_optional(app, "--max-seq-len", a.max_seq_len, "N",
                    "cache length (default: config.json's max_seq_len; embedded: 4096)")
      ->check(cli::integer(1, kMaxInt));
  app.add_option("--world-size", a.world_size,
                 "split the model over W ranks running as threads of this process\n"
                 "(ThreadCommunicator): the checkpoint's model{r}-mpW.safetensors shards, or\n"
                 "a Hugging Face directory sliced at load time. The embedded model then has\n"
                 "16 heads (to split) and other random weights. Under mpirun (builds with MPI) each\n"
                 "process is a rank instead: mpirun -n W dsv32-generate ... (see\n"
                 "docs/parallelism.md); rank 0 reads the input and prints")
      ->option_text("W")
      ->check(cli::integer(1, 1024));

  app.option_defaults()->group("input, as token ids (default mode; with none, the built-in prompt 1 17 42 99 256 7 311 5)");
  cli::add_optional(app, "--prompt-ids", a.prompt_ids, "\"IDS\"",
                    "one prompt of token ids separated by spaces or commas; \"-\" reads them from\n"
                    "standard input");
  cli::add_optional(app, "--batch-file", a.batch_file, "FILE",
                    "one prompt per line (blank lines skipped); \"-\" reads standard input.\n"
                    "Lines are token ids, or text with --text");

  app.option_defaults()->group("input, as text (builds with the tokenizer component only)");
  cli::add_optional(app, "--tokenizer", a.tokenizer, "DIR",
                    "directory with tokenizer.json and tokenizer_config.json (default: the\n"
                    "checkpoint directory when it holds tokenizer.json, else DeepSeek-V3.2-Exp's\n"
                    "tokenizer vendored in the dsv32 source tree, if present)");
  cli::add_optional(app, "--chat-format", a.chat_format, "NAME",
                    "deepseek-v3.2, deepseek-v3.2-exp or deepseek-v3: how prompts are rendered and\n"
                    "replies parsed (default: the tokenizer's; DeepSeek-V3.2's when its\n"
                    "tokenizer_config.json has no chat template or an encoding/ folder is beside\n"
                    "it). DeepSeek-V3.2's replies carry DSML tool calls; V3.2-Speciale is\n"
                    "deepseek-v3.2 with --thinking")
      ->check(cli::chat_format());
  cli::add_optional(app, "--prompt", a.prompt_text, "\"TEXT\"", "one text prompt; the completion is printed as text, streamed");
  app.add_flag("--text", a.text, "--batch-file lines are text prompts");
  app.add_flag("--raw", a.raw,
               "encode text prompts as they are (with bos) instead of as a user message\n"
               "of the chat template (the default, as the reference's generate.py does)");
  app.add_flag("--chat,--interactive", a.chat,
               "interactive chat as the reference's generate.py --interactive: reads lines\n"
               "after a \">>> \" prompt, \"/clear\" forgets the conversation, \"/exit\" or end of\n"
               "input quits; replies are streamed and kept in the conversation.\n"
               "\"/tool TEXT\" answers the tool calls of the last reply with TEXT (a tool\n"
               "message) and generates what follows (DeepSeek-V3.2: one /tool line per\n"
               "call; the model answers after the last)");
  app.add_flag("--thinking", a.thinking,
               "thinking mode of DeepSeek-V3.2-Exp's and V3.2's chat formats (--prompt, --chat,\n"
               "--batch-file --text): the reply starts with reasoning, shown apart from the\n"
               "answer (dimmed on a terminal, else between <think> and </think>); the\n"
               "conversation keeps the answer (DeepSeek-V3.2: and the reasoning of the turns\n"
               "since the last user message, as its encoding prints them)");
  cli::add_optional(app, "--replay-ids", a.replay_ids, "FILE",
                    "no model: each generation \"produces\" the token ids of the next line of FILE\n"
                    "(one line per prompt and turn; eos ends it early). For tests and demos of\n"
                    "the text display");

  app.option_defaults()->group("generation");
  app.add_option("--max-new-tokens", a.gen.max_new_tokens, "most tokens generated per prompt (default 100)")
      ->option_text("N")
      ->check(cli::integer(0, kMaxInt));
  app.add_option("--temperature", a.gen.sampling.temperature, "0 = greedy; default 0.6 (the reference's default)")
      ->option_text("T")
      ->check(cli::number());
  app.add_option("--top-k", a.gen.sampling.top_k, "keep the K most probable tokens (default 0 = all)")
      ->option_text("K")
      ->check(cli::integer(0, kMaxInt));
  app.add_option("--top-p", a.gen.sampling.top_p, "nucleus sampling, P in (0, 1] (default 1 = all)")
      ->option_text("P")
      ->check(cli::number());
  app.add_option("--seed", a.gen.seed,
                 "seed of the sampling streams (default 0): prompt b uses stream b; chat\n"
                 "turn t uses seed S + t")
      ->option_text("S")
      ->check(cli::unsigned64());
  app.add_option_function<std::string>(
         "--eos-id",
         [&](const std::string& id) {
           a.eos_given = true;
           a.gen.eos_id = id == "none" ? std::nullopt : std::optional<std::int32_t>(std::stoi(id));
         },
         "token that ends a completion (default: the tokenizer's eos in text and\n"
         "chat modes; none for token ids)")
      ->option_text("ID|none")
      ->check(cli::expects("an integer in [0, 2147483647] or none", [](const std::string& id) {
        std::int64_t v = 0;
        return id == "none" || cli::parse_integer(id, 0, INT32_MAX, v);
      }));
  app.add_flag("--fp8-fast", a.fp8_fast,
               "FP8 checkpoints: sum each 128-wide block of FP8 products in f32 on bf16\n"
               "dot products (cpu::Fp8Accumulation::fast: faster prefill and decode on\n"
               "AVX-512 hosts; logits within the documented tolerance of the default, exact\n"
               "arithmetic; see docs/performance.md)");

  app.option_defaults()->group("output");
  app.add_flag("--quiet", a.quiet, "no model or timing lines on standard error");
  cli::add_help(app, "this help");
  cli::parse(app, argc, argv, g_process_rank == 0);
  try {
    a.gen.sampling.validate();
  } catch (const dsv32::Error& e) {
    usage_error(std::string(e.what()).substr(std::string_view("dsv32 [invalid_argument]: ").size()));
  }
  const int inputs = a.prompt_ids.has_value() + a.batch_file.has_value() + a.prompt_text.has_value() + a.chat;
  if (inputs > 1) usage_error("give one input: --prompt-ids, --batch-file, --prompt or --chat");
  if (a.text && !a.batch_file) usage_error("--text applies to --batch-file");
  if (a.raw && !(a.prompt_text || a.text)) usage_error("--raw applies to text prompts (--prompt, --batch-file --text)");
  if (a.thinking && (a.raw || !(a.prompt_text || a.text || a.chat)))
    usage_error("--thinking applies to chat-template prompts (--prompt, --chat, --batch-file --text), not --raw");
  if (a.chat_format && (a.raw || !(a.prompt_text || a.text || a.chat)))
    usage_error("--chat-format applies to chat-template prompts (--prompt, --chat, --batch-file --text), not --raw");
  if (a.replay_ids && a.checkpoint) usage_error("--replay-ids replaces the model: give it or --checkpoint");
  if (a.replay_ids && a.world_size > 1) usage_error("--replay-ids replaces the model: it runs on one rank");
  if (a.prompt_ids && a.batch_file && *a.prompt_ids == "-" && *a.batch_file == "-")
    usage_error("standard input can be read once");
#if !defined(DSV32_GENERATE_WITH_TOKENIZER)
  if (a.prompt_text || a.text || a.chat || a.tokenizer || a.thinking || a.chat_format)
    usage_error("text input (--prompt, --text, --chat, --tokenizer, --thinking, --chat-format) needs the tokenizer "
                "component, which this build of dsv32-generate does not have (configure with PCRE2 and "
                "DSV32_BUILD_TOKENIZER=ON)");
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

// This rank's place: the group's communicator (null with one rank), and what the other ranks were
// told so far, so that a failure on rank 0 releases them (main()).
struct Ranks {
  dsv32::CommunicatorBase* comm = nullptr;
  bool started = false;  // rank 0 sent the batch size: the other ranks are loading or serving
  bool broken = false;   // a generate() failed with the ranks out of step: only ending the group helps

  int rank() const { return comm ? comm->rank() : 0; }
  dsv32::Parallel parallel() const { return comm ? dsv32::Parallel::from(*comm) : dsv32::Parallel{}; }
  // Rank 0 tells the others the batch size, or -1: nothing to run.
  void send_batch(std::int64_t batch) {
    if (!comm) return;
    comm->broadcast_host(std::as_writable_bytes(std::span(&batch, 1)), 0);
    started = true;
  }
  std::int64_t receive_batch() {
    std::int64_t batch = -1;
    comm->broadcast_host(std::as_writable_bytes(std::span(&batch, 1)), 0);
    return batch;
  }
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual dsv32::GenerationResult generate(const std::vector<Tokens>& prompts, const dsv32::GenerateOptions& o) = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::int64_t max_seq_len() const = 0;
  // Ranks other than 0: compute rank 0's generate() calls until it is done.
  virtual void serve() {}
};

template <class Config>
class ModelEngine final : public Engine {
 public:
  ModelEngine(const dsv32::RuntimeOptions& runtime, const dsv32::cpu::KernelOptions& kernels,
              const std::optional<fs::path>& checkpoint, bool quiet, Ranks& ranks)
      : model_(runtime, ranks.parallel()), group_(model_), ranks_(ranks) {
    model_.context().kernels = kernels;
    const auto t0 = std::chrono::steady_clock::now();
    if (checkpoint) dsv32::load_checkpoint(model_, *checkpoint);
    else model_.init_random(kEmbeddedWeightSeed);
    if (quiet || ranks.rank() != 0) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const dsv32::MemoryPlan plan = model_.memory_plan();
    std::fprintf(stderr, "model %s: %lld parameters, %s of weights, %s of caches (batch %lld x %lld positions); %s in %.2f s\n",
                 std::string(Config::name).c_str(), static_cast<long long>(plan.parameters),
                 dsv32::format_bytes(static_cast<double>(plan.weights)).c_str(),
                 dsv32::format_bytes(static_cast<double>(plan.caches)).c_str(),
                 static_cast<long long>(runtime.max_batch_size), static_cast<long long>(runtime.max_seq_len),
                 checkpoint ? "loaded" : "random weights", s);
    if (model_.parallel().world_size > 1)
      std::fprintf(stderr, "model parallel: %d ranks, each holding 1/%d of the split weights\n",
                   model_.parallel().world_size, model_.parallel().world_size);
  }
  dsv32::GenerationResult generate(const std::vector<Tokens>& prompts, const dsv32::GenerateOptions& o) override {
    try {
      return group_.generate(prompts, o);
    } catch (...) {
      ranks_.broken = group_.broken();
      throw;
    }
  }
  void serve() override {
    try {
      group_.serve();
    } catch (...) {
      ranks_.broken = group_.broken();
      throw;
    }
  }
  std::int64_t vocab_size() const override { return Config::vocab_size; }
  std::int64_t max_seq_len() const override { return model_.options().max_seq_len; }

 private:
  dsv32::Transformer<Config> model_;
  dsv32::GenerationGroup<dsv32::Transformer<Config>> group_;
  Ranks& ranks_;
};

// --replay-ids: no model; each sequence of each generate() call "produces" the ids of the next line
// of a file, through the same callbacks and stopping rules (eos, max_new_tokens) as generate().
class ReplayEngine final : public Engine {
 public:
  ReplayEngine(const fs::path& file, std::int64_t max_seq_len) : file_(file.string()), max_seq_len_(max_seq_len) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot open replay file " + file_);
    for (std::string line; std::getline(in, line);) lines_.push_back(parse_ids(line, file_ + " line " + std::to_string(lines_.size() + 1)));
  }
  dsv32::GenerationResult generate(const std::vector<Tokens>& prompts, const dsv32::GenerateOptions& o) override {
    dsv32::GenerationResult r;
    r.sequences.resize(prompts.size());
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      if (next_ == lines_.size())
        throw std::runtime_error("replay file " + file_ + " has no line left for reply " + std::to_string(next_ + 1));
      r.stats.prompt_tokens += static_cast<std::int64_t>(prompts[b].size());
      dsv32::SequenceResult& seq = r.sequences[b];
      for (std::int32_t id : lines_[next_]) {
        if (static_cast<std::int64_t>(seq.tokens.size()) == o.max_new_tokens) break;
        if (o.eos_id && id == *o.eos_id) {
          seq.finish = dsv32::FinishReason::eos;
          break;
        }
        seq.tokens.push_back(id);
        if (o.on_token && !o.on_token(b, id)) {
          seq.finish = dsv32::FinishReason::stopped;
          break;
        }
      }
      r.stats.generated_tokens += static_cast<std::int64_t>(seq.tokens.size());
      ++next_;
    }
    return r;
  }
  std::int64_t vocab_size() const override { return EmbeddedDefault::vocab_size; }
  std::int64_t max_seq_len() const override { return max_seq_len_; }

 private:
  std::string file_;
  std::vector<Tokens> lines_;
  std::size_t next_ = 0;
  std::int64_t max_seq_len_;
};

// The one place that reads a checkpoint directory's config.json: the reference's ModelArgs fields,
// or Hugging Face's when the build has their parser (<dsv32/io/hf_checkpoint.hpp>).
dsv32::ModelArgs read_checkpoint_args(const fs::path& dir) {
  if (!dsv32::detail::path_is_directory(dir)) throw dsv32::Error(dsv32::ErrorKind::io, "checkpoint directory " + dir.string() + " does not exist");
  return dsv32::read_model_config(dir);  // the reference's ModelArgs fields or Hugging Face's
}

// The model's config: config.json's, with the caches sized for `batch` prompts.
dsv32::ModelArgs checkpoint_args(const Arguments& a, std::int64_t batch) {
  dsv32::ModelArgs args = read_checkpoint_args(*a.checkpoint);
  if (a.max_seq_len) args.runtime.max_seq_len = *a.max_seq_len;
  // Caches for the prompts at hand only; more prompts than config.json allows fail in generate().
  if (batch <= args.runtime.max_batch_size) args.runtime.max_batch_size = std::max<std::int64_t>(1, batch);
  args.runtime.validate();
  return args;
}

// This rank's engine (every rank makes the same one, for its part of the model).
std::unique_ptr<Engine> make_rank_engine(const Arguments& a, const dsv32::ModelArgs& args, std::int64_t batch,
                                         Ranks& ranks) {
  dsv32::cpu::KernelOptions kernels;
  if (a.fp8_fast) kernels.fp8 = dsv32::cpu::Fp8Accumulation::fast;
  if (!a.checkpoint) {
    dsv32::RuntimeOptions runtime;
    runtime.max_batch_size = std::max<std::int64_t>(1, batch);
    runtime.max_seq_len = a.max_seq_len.value_or(kEmbeddedMaxSeqLen);
    if (ranks.parallel().world_size > 1)
      return std::make_unique<ModelEngine<EmbeddedSplit>>(runtime, kernels, std::nullopt, a.quiet, ranks);
    return std::make_unique<ModelEngine<EmbeddedDefault>>(runtime, kernels, std::nullopt, a.quiet, ranks);
  }
  std::unique_ptr<Engine> engine;
  dsv32::dispatch_config<dsv32::Presets>(
      args, [&]<class C>() { engine = std::make_unique<ModelEngine<C>>(args.runtime, kernels, a.checkpoint, a.quiet, ranks); },
      (*a.checkpoint / "config.json").string());
  return engine;
}

// Every rank: reads its config.json, checks that all ranks read the same, builds and loads its part —
// each step agreed on, so that a rank that fails makes every rank throw the same error.
std::unique_ptr<Engine> start_rank_engine(const Arguments& a, std::int64_t batch, Ranks& ranks) {
  dsv32::ModelArgs args;
  if (a.checkpoint) {
    dsv32::run_collectively(ranks.comm, "reading the model's config", [&] { args = checkpoint_args(a, batch); });
    dsv32::check_same_on_all_ranks(ranks.comm,
                                   dsv32::to_reference_config(args).dump() + " " +
                                       std::to_string(args.runtime.max_batch_size) + " " +
                                       std::to_string(args.runtime.max_seq_len),
                                   "the checkpoint's config.json");
  }
  std::unique_ptr<Engine> engine;
  dsv32::run_collectively(ranks.comm, "loading the model", [&] { engine = make_rank_engine(a, args, batch, ranks); });
  return engine;
}

// Rank 0: starts the other ranks (they learn the batch size), then starts its own part with them.
std::unique_ptr<Engine> make_engine(const Arguments& a, std::int64_t batch, Ranks& ranks) {
  if (a.replay_ids) return std::make_unique<ReplayEngine>(*a.replay_ids, a.max_seq_len.value_or(kEmbeddedMaxSeqLen));
  ranks.send_batch(batch);
  return start_rank_engine(a, batch, ranks);
}

// Ranks other than 0: wait for rank 0's batch size, load, then compute rank 0's generate() calls.
// Returns the exit status; errors agreed on with rank 0 are rank 0's to print.
int follow(const Arguments& a, Ranks& ranks) {
  const std::int64_t batch = ranks.receive_batch();
  if (batch < 0) return 1;  // rank 0 failed before starting the model (and says why)
  std::unique_ptr<Engine> engine;
  try {
    engine = start_rank_engine(a, batch, ranks);
  } catch (const dsv32::Error&) {
    return 1;
  }
  engine->serve();
  return 0;
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

int run_ids(const Arguments& a, Ranks& ranks) {
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
  auto engine = make_engine(a, static_cast<std::int64_t>(prompts.size()), ranks);
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
  if (a.checkpoint && dsv32::detail::path_exists(*a.checkpoint / "tokenizer.json")) return *a.checkpoint;
#if defined(DSV32_GENERATE_DEFAULT_TOKENIZER)
  if (fs::exists(fs::path(DSV32_GENERATE_DEFAULT_TOKENIZER) / "tokenizer.json")) return DSV32_GENERATE_DEFAULT_TOKENIZER;
#endif
  throw std::runtime_error(a.checkpoint ? "no tokenizer: " + a.checkpoint->string() +
                                              " has no tokenizer.json; pass --tokenizer DIR"
                                        : std::string("no tokenizer: pass --tokenizer DIR"));
}

// Whether reasoning is dimmed (standard output is a terminal and NO_COLOR is not set) rather than
// marked with <think> ... </think>.
bool dim_reasoning() {
#if defined(_WIN32)
  return false;
#else
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) == 1 && (no_color == nullptr || *no_color == '\0');
#endif
}

// Prints one reply as its tokens arrive. A chat-template reply goes through ChatOutputParser (in the
// chat format): the reasoning apart from the answer (dimmed, or between <think> and </think>), each
// tool call as a JSON line; a reply that breaks DeepSeek's output format is shown as generated from
// there on, with a warning on standard error. A
// --raw reply is plain decoded text. Ids the tokenizer lacks (a model's padding rows of the
// vocabulary, which random weights do produce) print as U+FFFD, and standard error names the first
// such id of each reply: the text alone would not show that the model chose a token with no text.
class ReplyPrinter {
 public:
  ReplyPrinter(const dsv32::Tokenizer& tok, dsv32::ChatFormat format, std::ostream& out, bool dim)
      : tok_(tok), out_(out), parser_(tok, format, dsv32::ChatOutputState::content),
        plain_(tok.stream_decoder(/*skip_special_tokens=*/true)), dim_(dim) {}

  // A new reply to `prompt` (the rendered chat template), or a --raw reply (nullopt).
  void start(const std::optional<std::string>& prompt) {
    structured_ = prompt.has_value();
    parser_.reset(prompt ? dsv32::ChatOutputParser::start_state(*prompt) : dsv32::ChatOutputState::content);
    plain_.reset();
    plain_text_.clear();
    in_reasoning_ = false;
    warned_ = false;
    warned_malformed_ = false;
    last_ = '\0';
  }

  void push(std::int32_t id) {
    if (!tok_.contains(id) && !warned_) {
      warned_ = true;
      std::cout << std::flush;
      std::cerr << "dsv32-generate: the model generated token id " << id << ", which is outside the tokenizer's "
                << "vocabulary [0, " << tok_.vocab_size() << ") or has no token there; shown as U+FFFD\n";
    }
    if (structured_) {
      try {
        show(tok_.contains(id) ? parser_.push(id) : parser_.push_text(dsv32::utf8::replacement_character));
        warn_malformed();
        return;
      } catch (const dsv32::Error& e) {
        std::cout << std::flush;
        std::cerr << "\ndsv32-generate: " << e.what() << "; the rest of the reply is shown as generated\n";
        close_reasoning();
        structured_ = false;
      }
    }
    show_plain(tok_.contains(id) ? plain_.push(id) : plain_.finish() + std::string(dsv32::utf8::replacement_character));
  }

  void finish() {
    if (structured_) {
      try {
        show(parser_.finish());
        warn_malformed();
      } catch (const dsv32::Error& e) {
        std::cout << std::flush;
        std::cerr << "\ndsv32-generate: " << e.what() << '\n';
      }
    }
    show_plain(plain_.finish());
    close_reasoning();
    if (last_ != '\n') emit("\n");
    out_ << std::flush;
  }

  // The reply as the conversation keeps it: the answer and the tool calls, not the reasoning.
  dsv32::ChatMessage message() const {
    dsv32::ChatMessage m = parser_.output().message();
    m.content += plain_text_;
    return m;
  }

 private:
  void emit(std::string_view s) {
    if (s.empty()) return;
    out_ << s;
    last_ = s.back();
  }
  void show(const dsv32::ChatOutputDelta& d) {
    if (!d.reasoning.empty()) {
      if (!in_reasoning_) {
        if (dim_) out_ << "\x1b[2m";
        else emit("<think>");
        in_reasoning_ = true;
      }
      emit(d.reasoning);
    }
    if (!d.content.empty() || !d.tool_calls.empty()) close_reasoning();
    emit(d.content);
    for (const dsv32::ToolCall& call : d.tool_calls) {
      if (last_ != '\n' && last_ != '\0') emit("\n");
      emit(nlohmann::json(call).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    }
    out_ << std::flush;
  }
  // DeepSeek-V3.2's parser does not throw: it hands a reply that broke the format back as content,
  // which show() prints as it comes.
  void warn_malformed() {
    if (warned_malformed_ || parser_.state() != dsv32::ChatOutputState::malformed) return;
    warned_malformed_ = true;
    std::cout << std::flush;
    std::cerr << "\ndsv32-generate: " << parser_.malformed_reason() << "; the rest of the reply is shown as generated\n";
  }
  void show_plain(const std::string& s) {
    plain_text_ += s;
    emit(s);
    out_ << std::flush;
  }
  void close_reasoning() {
    if (!in_reasoning_) return;
    in_reasoning_ = false;
    if (dim_) {
      out_ << "\x1b[0m";
      if (last_ != '\n') emit("\n");
    } else {
      emit("</think>\n");
    }
  }

  const dsv32::Tokenizer& tok_;
  std::ostream& out_;
  dsv32::ChatOutputParser parser_;
  dsv32::StreamDecoder plain_;
  std::string plain_text_;  // text shown unparsed (--raw, or after the format broke)
  bool dim_;
  bool structured_ = true;
  bool in_reasoning_ = false;
  bool warned_ = false;  // an id outside the vocabulary was reported for this reply
  bool warned_malformed_ = false;  // a DeepSeek-V3.2 reply that broke the format was reported
  char last_ = '\0';  // the last character shown ('\0': none yet)
};

int run_text(const Arguments& a, Ranks& ranks) {
  const fs::path dir = tokenizer_dir(a);
  const dsv32::Tokenizer tok = dsv32::Tokenizer::from_directory(dir);
  // The chat format: named, else the tokenizer's. Without either (an unknown template), prompts go
  // through apply_chat_template, which says why it refuses the template.
  std::optional<dsv32::ChatFormat> format = tok.chat_format();
  if (a.chat_format) format = dsv32::chat_format_from_name(*a.chat_format);  // checked by parse_arguments
  if (a.thinking && format == dsv32::ChatFormat::deepseek_v3)
    throw std::runtime_error("--thinking: the chat format of the tokenizer in " + dir.string() +
                             " (DeepSeek-V3's) has no thinking mode; DeepSeek-V3.2-Exp's and V3.2's have");
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
  auto engine = make_engine(a, a.chat ? 1 : static_cast<std::int64_t>(texts.size()), ranks);
  dsv32::GenerateOptions o = a.gen;
  if (!a.eos_given) o.eos_id = tok.eos_id();
  // The prompt's ids, and its text when it is rendered by the chat template (not --raw).
  struct Prompt {
    Tokens ids;
    std::optional<std::string> text;
  };
  auto make_prompt = [&](const std::vector<dsv32::ChatMessage>& messages) -> Prompt {
    if (a.raw) return {tok.encode(messages.back().content, /*add_special_tokens=*/true), std::nullopt};
    std::string text;
    if (format == dsv32::ChatFormat::deepseek_v3_2) {
      text = dsv32::deepseek_v3_2::encode_messages(messages, {.thinking = a.thinking});
    } else if (a.chat_format) {
      const auto kind = format == dsv32::ChatFormat::deepseek_v3 ? dsv32::ChatTemplateKind::deepseek_v3
                                                                : dsv32::ChatTemplateKind::deepseek_v3_2_exp;
      text = dsv32::ChatTemplate(kind, tok.chat_template().bos_token())
                 .render(messages, {.add_generation_prompt = true, .thinking = a.thinking});
    } else {
      text = tok.apply_chat_template(messages, {.add_generation_prompt = true, .thinking = a.thinking});
    }
    Tokens ids = tok.encode(text);
    return {std::move(ids), std::move(text)};
  };
  const bool dim = dim_reasoning();
  const dsv32::ChatFormat reply_format = format.value_or(dsv32::ChatFormat::deepseek_v3_2_exp);

  if (!a.chat) {
    std::vector<Prompt> prompts;
    std::vector<Tokens> prompt_ids;
    for (const auto& t : texts) {
      prompts.push_back(make_prompt({{"user", t}}));
      prompt_ids.push_back(prompts.back().ids);
    }
    if (prompts.size() == 1) {
      ReplyPrinter printer(tok, reply_format, std::cout, dim);
      printer.start(prompts[0].text);
      o.on_token = [&](std::size_t, std::int32_t id) {
        printer.push(id);
        return true;
      };
      const auto r = engine->generate(prompt_ids, o);
      printer.finish();
      print_stats(r, a.quiet);
      return 0;
    }
    const auto r = engine->generate(prompt_ids, o);
    for (std::size_t b = 0; b < texts.size(); ++b) {
      std::ostringstream completion;
      ReplyPrinter printer(tok, reply_format, completion, /*dim=*/false);
      printer.start(prompts[b].text);
      for (std::int32_t id : r.sequences[b].tokens) printer.push(id);
      printer.finish();
      std::cout << "Prompt: " << texts[b] << "\nCompletion: " << completion.str() << '\n';
    }
    std::cout << std::flush;
    print_stats(r, a.quiet);
    return 0;
  }

  // Chat, as generate.py --interactive: the whole conversation is the prompt of each turn.
  std::vector<dsv32::ChatMessage> history;
  ReplyPrinter printer(tok, reply_format, std::cout, dim);
  std::uint64_t turn = 0;
  o.on_token = [&](std::size_t, std::int32_t id) {
    printer.push(id);
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
    if (line.starts_with("/tool ") || line == "/tool") {
      history.push_back({"tool", line.size() > 6 ? line.substr(6) : std::string()});
      // DeepSeek-V3.2 groups the results of one reply's calls: the model answers after the last.
      if (format == dsv32::ChatFormat::deepseek_v3_2) {
        std::size_t results = 0;
        while (results < history.size() && history[history.size() - 1 - results].role == "tool") ++results;
        const std::size_t caller = history.size() - results;  // one past the message answered
        if (caller > 0 && history[caller - 1].role == "assistant" && results < history[caller - 1].tool_calls.size()) {
          continue;
        }
      }
    } else {
      history.push_back({"user", line});
    }
    Prompt prompt;
    try {
      prompt = make_prompt(history);
    } catch (const dsv32::Error& e) {  // e.g. a tool output with no tool call before it (V3.2: or more than calls)
      std::cerr << "dsv32-generate: " << e.what() << '\n';
      history.pop_back();
      continue;
    }
    if (static_cast<std::int64_t>(prompt.ids.size()) >= engine->max_seq_len()) {
      std::cerr << "dsv32-generate: the conversation (" << prompt.ids.size() << " tokens) fills max_seq_len = "
                << engine->max_seq_len() << "; /clear it or raise --max-seq-len\n";
      history.pop_back();
      continue;
    }
    printer.start(prompt.text);
    o.seed = a.gen.seed + turn++;  // a fresh stream each turn, as the reference's RNG moves on
    const auto r = engine->generate({prompt.ids}, o);
    printer.finish();
    print_stats(r, a.quiet);
    history.push_back(printer.message());
  }
  return 0;
}

#endif  // DSV32_GENERATE_WITH_TOKENIZER


// Rank 0: the mode. On failure it prints the error and releases the other ranks: those not started
// yet learn there is nothing to run; a group out of step is ended with `end_group`.
template <class EndGroup>
int lead(const Arguments& a, Ranks& ranks, EndGroup&& end_group) {
  try {
#if defined(DSV32_GENERATE_WITH_TOKENIZER)
    if (text_mode(a)) return run_text(a, ranks);
#endif
    return run_ids(a, ranks);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "dsv32-generate: " << e.what() << '\n';
    if (ranks.comm && !ranks.started) ranks.send_batch(-1);
    if (ranks.broken) end_group();
    return 1;
  }
}

// Ranks as threads of this process (--world-size W).
int run_threads(const Arguments& a) {
  auto comms = dsv32::ThreadCommunicator<>::group(a.world_size);
  std::vector<Ranks> ranks(static_cast<std::size_t>(a.world_size));
  std::vector<std::thread> followers;
  for (int r = 1; r < a.world_size; ++r)
    followers.emplace_back([&, r] {
      Ranks& me = ranks[static_cast<std::size_t>(r)];
      me.comm = &comms[static_cast<std::size_t>(r)];
      try {
        follow(a, me);
      } catch (const std::exception& e) {
        if (!comms[0].aborted()) std::cerr << "dsv32-generate: rank " << r << ": " << e.what() << '\n';
        comms[static_cast<std::size_t>(r)].abort();  // rank 0 and the others must not wait for this one
      }
    });
  ranks[0].comm = &comms[0];
  const int status = lead(a, ranks[0], [&] { comms[0].abort(); });
  for (auto& t : followers) t.join();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(DSV32_GENERATE_WITH_MPI)
  // Under mpirun every process is a rank; run alone, the tool does not touch MPI.
  std::optional<dsv32::MpiSession> mpi;
  std::optional<dsv32::MpiCommunicator<>> comm;
  if (dsv32::MpiSession::launched_by_mpi()) {
    try {
      mpi.emplace(argc, argv);
      g_process_rank = mpi->rank();
      if (mpi->world_size() > 1) comm.emplace();
    } catch (const std::exception& e) {
      std::cerr << "dsv32-generate: " << e.what() << '\n';
      return 1;
    }
  }
#endif
  const Arguments args = parse_arguments(argc, argv);
#if defined(DSV32_GENERATE_WITH_MPI)
  if (comm) {
    if (args.world_size > 1) usage_error("--world-size runs ranks as threads; under mpirun each process is a rank");
    if (args.replay_ids) usage_error("--replay-ids replaces the model: it runs on one rank");
    Ranks ranks{&*comm};
    if (comm->rank() == 0) return lead(args, ranks, [] { dsv32::MpiSession::abort(1); });
    try {
      return follow(args, ranks);
    } catch (const std::exception& e) {  // this rank alone failed, out of step with the others
      std::cerr << "dsv32-generate: rank " << comm->rank() << ": " << e.what() << '\n';
      dsv32::MpiSession::abort(1);
    }
  }
#endif
  if (args.world_size > 1) return run_threads(args);
  Ranks alone;
  return lead(args, alone, [] {});
}
