// dsv32-demo: the main example. Builds a tiny DeepSeek-V3.2-Exp model (FP8 weights, MoE, MLA with
// the lightning indexer) with seeded random weights — no downloads — then prefills a prompt of
// token ids, decodes greedily, and prints the tokens and the time per token.
//
//   dsv32-demo [--new-tokens N] [--seed S] [--prompt "id id id ..."]
#include <dsv32/dsv32.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

using Config = dsv32::TinyFp8Ue8m0Yarn;  // the embedded default model

int main(int argc, char** argv) {
  int new_tokens = 16;
  std::uint64_t seed = 2025;
  std::vector<std::int32_t> prompt = {1, 17, 42, 99, 256, 7, 311, 5};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dsv32-demo: %s needs a value (see --help)\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--help" || a == "-h") {
        std::printf("usage: dsv32-demo [--new-tokens N] [--seed S] [--prompt \"id id ...\"]\n"
                    "Runs a tiny DeepSeek-V3.2-Exp (%s) with seeded random weights: prefill, then greedy decode.\n",
                    std::string(Config::name).c_str());
        return 0;
      } else if (a == "--new-tokens") {
        new_tokens = std::stoi(value());
      } else if (a == "--seed") {
        seed = std::stoull(value());
      } else if (a == "--prompt") {
        std::istringstream in(value());
        prompt.clear();
        for (std::int32_t id; in >> id;) prompt.push_back(id);
      } else {
        std::fprintf(stderr, "dsv32-demo: unknown argument '%s' (see --help)\n", a.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "dsv32-demo: bad value for %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (new_tokens < 1 || prompt.empty()) {
    std::fprintf(stderr, "dsv32-demo: need --new-tokens >= 1 and a non-empty --prompt\n");
    return 2;
  }

  try {
    dsv32::RuntimeOptions options;
    options.max_batch_size = 1;
    options.max_seq_len = static_cast<std::int64_t>(prompt.size()) + new_tokens;
    dsv32::Transformer<Config> model(options);
    model.init_random(seed);
    const dsv32::MemoryPlan plan = model.memory_plan();
    std::printf("model %s: %lld parameters, %s of weights, %s of caches\n", std::string(Config::name).c_str(),
                static_cast<long long>(plan.parameters), dsv32::format_bytes(plan.weights).c_str(),
                dsv32::format_bytes(plan.caches).c_str());

    using clock = std::chrono::steady_clock;
    std::vector<std::int32_t> out;
    auto t0 = clock::now();
    dsv32::Logits logits = model.forward(prompt, 1, 0);
    const double prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    out.push_back(logits.argmax(0));
    t0 = clock::now();
    for (int i = 1; i < new_tokens; ++i) {
      const std::int32_t last = out.back();
      logits = model.forward(std::span<const std::int32_t>(&last, 1), 1,
                             static_cast<std::int64_t>(prompt.size()) + i - 1);
      out.push_back(logits.argmax(0));
    }
    const double decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

    std::printf("prompt:");
    for (auto t : prompt) std::printf(" %d", t);
    std::printf("\ngenerated:");
    for (auto t : out) std::printf(" %d", t);
    std::printf("\nprefill %zu tokens: %.2f ms (%.3f ms/token); decode %d tokens: %.3f ms/token\n", prompt.size(),
                prefill_ms, prefill_ms / static_cast<double>(prompt.size()), new_tokens - 1,
                new_tokens > 1 ? decode_ms / (new_tokens - 1) : 0.0);
  } catch (const dsv32::Error& e) {
    std::fprintf(stderr, "dsv32-demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
