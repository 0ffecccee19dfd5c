// dsv32-demo-cuda: the main example on the GPU. The same tiny DeepSeek-V3.2-Exp model as dsv32-demo
// (FP8 weights, MoE, MLA with the lightning indexer, seeded random weights) as
// Transformer<Config, dsv32::Cuda>: weights and caches in device memory, every kernel on the model's
// stream, greedy generation of a few tokens from a prompt of token ids, checked against the CPU.
//
// How the CUDA backend is built: this .cu file is the translation unit that instantiates the
// backend's kernels (they are templates and inline code in <dsv32/cuda.hpp>); CMake links it to
// dsv32::cuda (CUDA::cudart and CUDA::cublasLt) and compiles it for CMAKE_CUDA_ARCHITECTURES (90a).
//
//   dsv32-demo-cuda [new_tokens]
#include <dsv32/cuda.hpp>
#include <dsv32/generate/generate.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

using Config = dsv32::TinyFp8Ue8m0Yarn;

int main(int argc, char** argv) {
  const int new_tokens = argc > 1 ? std::max(1, std::atoi(argv[1])) : 16;
  if (!dsv32::cuda::device_available()) {
    std::printf("dsv32-demo-cuda: SKIPPED: no CUDA device\n");
    return 0;
  }
  try {
    const std::vector<std::int32_t> prompt = {1, 17, 42, 99, 256, 7, 311, 5};
    dsv32::RuntimeOptions options;
    options.max_batch_size = 1;
    options.max_seq_len = static_cast<std::int64_t>(prompt.size()) + new_tokens;
    dsv32::GenerateOptions gen;
    gen.max_new_tokens = new_tokens;

    dsv32::Transformer<Config, dsv32::Cuda> gpu(options);  // device memory, the model's stream and cuBLASLt handle
    gpu.init_random(2025);
    const auto on_gpu = dsv32::generate(gpu, {prompt}, gen);
    dsv32::Transformer<Config> cpu(options);
    cpu.init_random(2025);
    const auto on_cpu = dsv32::generate(cpu, {prompt}, gen);

    std::printf("generated on cuda:");
    for (auto t : on_gpu.sequences[0].tokens) std::printf(" %d", t);
    std::printf("\ngenerated on cpu: ");
    for (auto t : on_cpu.sequences[0].tokens) std::printf(" %d", t);
    std::printf("\ncuda: %.3f ms/token; cpu: %.3f ms/token; tokens %s\n", on_gpu.stats.ms_per_step(),
                on_cpu.stats.ms_per_step(),
                on_gpu.sequences[0].tokens == on_cpu.sequences[0].tokens ? "identical" : "differ (near-tied logits)");
    return 0;
  } catch (const dsv32::Error& e) {
    std::fprintf(stderr, "dsv32-demo-cuda: %s\n", e.what());
    return 1;
  }
}
