// dsv32-bench-forward: end-to-end CPU prefill and decode of a mid-size DeepSeek-V3.2-style model
// (FP8 weights, the 671B model's head and attention dimensions, fewer layers and experts) with
// random weights: prefill tokens/s and decode ms/token at several context lengths, medians.
//   dsv32-bench-forward [reps]
#include <dsv32/dsv32.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_configs.hpp"
#include "bench_util.hpp"

using BenchConfig = dsv32::bench::Bench2Layer;

int main(int argc, char** argv) {
  using namespace dsv32;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 3;
  RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = 4096 + 8;
  Transformer<BenchConfig> model(o);
  model.init_random(1);
  const MemoryPlan plan = model.memory_plan();
  std::printf("model %s: %.1fM parameters, %s weights\n", std::string(BenchConfig::name).c_str(),
              static_cast<double>(plan.parameters) / 1e6, format_bytes(static_cast<double>(plan.weights)).c_str());
  for (std::int64_t len : {128, 1024, 4096}) {
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(len));
    for (std::int64_t i = 0; i < len; ++i) prompt[i] = static_cast<std::int32_t>((i * 7919) % BenchConfig::vocab_size);
    const double prefill = bench::median_ms(reps, [&] { model.forward(prompt, 1, 0); });
    std::int32_t tok = 1;
    const double decode = bench::median_ms(reps * 4, [&] {
      model.forward(std::span<const std::int32_t>(&tok, 1), 1, len);  // one step at position len
    });
    std::printf("context %5lld: prefill %9.1f ms (%7.1f tokens/s) | decode %8.2f ms/token\n",
                static_cast<long long>(len), prefill, static_cast<double>(len) / prefill * 1e3, decode);
  }
  return 0;
}
