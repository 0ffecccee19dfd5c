// dsv32-demo: the main example. Builds a tiny DeepSeek-V3.2-Exp model (FP8 weights, MoE, MLA with
// the lightning indexer) with seeded random weights — no downloads — then generates from a prompt
// of token ids with dsv32::generate (greedy by default), streaming the tokens, and prints the
// prefill and per-token times.
//
//   dsv32-demo [--new-tokens N] [--seed S] [--temperature T] [--prompt "id id id ..."]
#include <dsv32/dsv32.hpp>
#include <dsv32/generate/generate.hpp>

#include "cli.hpp"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using Config = dsv32::TinyFp8Ue8m0Yarn;  // the embedded default model

int main(int argc, char** argv) {
  int new_tokens = 16;
  std::uint64_t seed = 2025;
  double temperature = 0.0;
  std::vector<std::int32_t> prompt = {1, 17, 42, 99, 256, 7, 311, 5};
  namespace cli = dsv32::tools;  // the tools' CLI11 setup (tools/cli.hpp)
  CLI::App app("Runs a tiny DeepSeek-V3.2-Exp (" + std::string(Config::name) + ", vocabulary " +
                   std::to_string(Config::vocab_size) +
                   ") with seeded random weights: prefills the\n"
                   "prompt, then generates N tokens (default 16; greedy unless --temperature T > 0), printing\n"
                   "them as they come and the time per token.",
               "dsv32-demo");
  cli::setup(app, "usage: dsv32-demo [--new-tokens N] [--seed S] [--temperature T] [--prompt \"id id ...\"]", 20);
  app.add_option("--new-tokens", new_tokens, "tokens to generate (>= 1)")
      ->option_text("N")
      ->check(cli::integer(1, INT32_MAX));
  app.add_option("--seed", seed, "seed of the random weights and of sampling (default 2025)")
      ->option_text("S")
      ->check(cli::unsigned64());
  app.add_option("--temperature", temperature, "0 = greedy (default), else softmax temperature")
      ->option_text("T")
      ->check(cli::number());
  app.add_option_function<std::string>(
         "--prompt",
         [&](const std::string& ids) {
           try {
             prompt = dsv32::parse_token_ids(ids, "--prompt");
           } catch (const dsv32::Error& e) {
             throw CLI::ValidationError(e.what());
           }
         },
         "prompt token ids (default: 1 17 42 99 256 7 311 5)")
      ->option_text("IDS");
  cli::add_help(app);
  cli::parse(app, argc, argv);
  if (prompt.empty()) cli::usage_error("dsv32-demo", "need a non-empty --prompt");

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
