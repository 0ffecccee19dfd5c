// dsv32-demo: the main example. Builds a tiny DeepSeek-V3.2-Exp model (FP8 weights, MoE, MLA with
// the lightning indexer) with seeded random weights — no downloads — then generates from a prompt
// of token ids with dsv32::generate (greedy by default), streaming the tokens, and prints the
// prefill and per-token times.
//
//   dsv32-demo [--new-tokens N] [--seed S] [--temperature T] [--prompt "id id id ..."]
#include <dsv32/dsv32.hpp>
#include <dsv32/generate/generate.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using Config = dsv32::TinyFp8Ue8m0Yarn;  // the embedded default model

namespace {

constexpr const char* kUsage =
    "usage: dsv32-demo [--new-tokens N] [--seed S] [--temperature T] [--prompt \"id id ...\"]\n"
    "Runs a tiny DeepSeek-V3.2-Exp (%s, vocabulary %lld) with seeded random weights: prefills the\n"
    "prompt, then generates N tokens (default 16; greedy unless --temperature T > 0), printing\n"
    "them as they come and the time per token.\n"
    "  --new-tokens N    tokens to generate (>= 1)\n"
    "  --seed S          seed of the random weights and of sampling (default 2025)\n"
    "  --temperature T   0 = greedy (default), else softmax temperature\n"
    "  --prompt IDS      prompt token ids (default: 1 17 42 99 256 7 311 5)\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "dsv32-demo: %s (see --help)\n", message.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int new_tokens = 16;
  std::uint64_t seed = 2025;
  double temperature = 0.0;
  std::vector<std::int32_t> prompt = {1, 17, 42, 99, 256, 7, 311, 5};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    try {
      std::size_t used = 0;
      if (a == "--help" || a == "-h") {
        std::printf(kUsage, std::string(Config::name).c_str(), static_cast<long long>(Config::vocab_size));
        return 0;
      } else if (a == "--new-tokens") {
        const std::string v = value();
        new_tokens = std::stoi(v, &used);
        if (used != v.size()) throw std::invalid_argument(v);
      } else if (a == "--seed") {
        const std::string v = value();
        seed = std::stoull(v, &used);
        if (used != v.size()) throw std::invalid_argument(v);
      } else if (a == "--temperature") {
        const std::string v = value();
        temperature = std::stod(v, &used);
        if (used != v.size()) throw std::invalid_argument(v);
      } else if (a == "--prompt") {
        prompt = dsv32::parse_token_ids(value(), "--prompt");
      } else {
        usage_error("unknown argument '" + a + "'");
      }
    } catch (const dsv32::Error& e) {  // --prompt
      usage_error(e.what());
    } catch (const std::logic_error&) {  // std::invalid_argument, std::out_of_range
      usage_error("bad value for " + a);
    }
  }
  if (new_tokens < 1 || prompt.empty()) usage_error("need --new-tokens >= 1 and a non-empty --prompt");

  try {
    dsv32::RuntimeOptions options;
    options.max_batch_size = 1;
    options.max_seq_len = static_cast<std::int64_t>(prompt.size()) + new_tokens;
    dsv32::Transformer<Config> model(options);
    model.init_random(seed);
    const dsv32::MemoryPlan plan = model.memory_plan();
    std::printf("model %s: %lld parameters, %s of weights, %s of caches\n", std::string(Config::name).c_str(),
                static_cast<long long>(plan.parameters), dsv32::format_bytes(static_cast<double>(plan.weights)).c_str(),
                dsv32::format_bytes(static_cast<double>(plan.caches)).c_str());

    dsv32::GenerateOptions gen;
    gen.max_new_tokens = new_tokens;
    gen.sampling.temperature = temperature;
    gen.seed = seed;
    gen.on_token = [](std::size_t, std::int32_t id) {
      std::printf(" %d", id);
      std::fflush(stdout);
      return true;
    };
    dsv32::validate_generate_arguments({prompt}, gen, model.options(), Config::vocab_size);  // before printing

    std::printf("prompt:");
    for (auto t : prompt) std::printf(" %d", t);
    std::printf("\ngenerated:");
    const dsv32::GenerationResult r = dsv32::generate(model, {prompt}, gen);
    const dsv32::GenerationStats& s = r.stats;
    std::printf("\nprefill %zu tokens + first token: %.2f ms (%.3f ms/prompt token); decode %lld tokens: %.3f ms/token "
                "(%.1f tokens/s)\n",
                prompt.size(), 1e3 * s.time_to_first_token_s,
                1e3 * s.time_to_first_token_s / static_cast<double>(prompt.size()),
                static_cast<long long>(s.decode_tokens), s.ms_per_step(), s.decode_tokens_per_s());
  } catch (const dsv32::Error& e) {
    std::fprintf(stderr, "dsv32-demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
