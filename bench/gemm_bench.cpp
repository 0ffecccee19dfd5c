// dsv32-bench-gemm: the CPU backend's linear layers on the 671B model's shapes — BF16 and FP8
// (E4M3 + 128x128 block scales, both accumulation modes) weights, decode (M = 1), batched decode
// (M = 8) and prefill (M = 128), and the bf16 output head at M = 1 and 8 — in GFLOP/s and weight
// GB/s, medians over repetitions.
//   dsv32-bench-gemm [reps] [--subnormal-share P]
// --subnormal-share P: that share of the FP8 weight codes replaced by random subnormal codes (the
// random weights' own share, a Gaussian per block quantized with a fixed scale, is ~1e-4): kernels
// that widen codes through subnormal doubles pay a microcode assist per FMA on Intel cores.
#include <dsv32/dsv32.hpp>

#include "cli.hpp"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"

int main(int argc, char** argv) {
  using namespace dsv32;
  ExecutionContext<Cpu> ctx;
  int reps = 5;
  double subnormal_share = 0.0;
  namespace cli = dsv32::tools;  // the tools' CLI11 setup (tools/cli.hpp)
  CLI::App app("The CPU backend's linear layers on the 671B model's shapes, in GFLOP/s and weight GB/s.",
               "dsv32-bench-gemm");
  cli::setup(app, "usage: dsv32-bench-gemm [reps] [--subnormal-share P]", 24);
  app.add_option("reps", reps, "repetitions per figure, medians reported (default 5)")
      ->type_name("")
      ->check(cli::integer(1, INT32_MAX));
  app.add_option("--subnormal-share", subnormal_share,
                 "that share of the FP8 weight codes replaced by random subnormal codes (default 0)")
      ->option_text("P")
      ->check(cli::expects("a number in [0, 1]", [](const std::string& v) {
        char* end = nullptr;
        const double p = std::strtod(v.c_str(), &end);
        return !v.empty() && *end == '\0' && p >= 0.0 && p <= 1.0;
      }));
  cli::add_help(app);
  cli::parse(app, argc, argv);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  struct Shape2 { const char* name; std::int64_t out, in; };
  const Shape2 shapes[] = {{"wq_a 7168->1536", 1536, 7168}, {"expert w1 7168->2048", 2048, 7168},
                           {"expert w2 2048->7168", 7168, 2048}, {"wo 16384->7168", 7168, 16384}};
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("%-24s %-8s %5s %10s %10s %10s\n", "shape", "weights", "M", "ms", "GFLOP/s", "weight GB/s");
  for (const auto& s : shapes) {
    std::vector<bf16> wb(static_cast<std::size_t>(s.out * s.in));
    std::vector<std::uint8_t> wq(wb.size());
    std::vector<float> scale(static_cast<std::size_t>(((s.out + 127) / 128) * (s.in / 128)), 1.0f / 448.0f);
    for (std::size_t i = 0; i < wb.size(); ++i) {
      const float v = normal(gen) * 0.02f;
      wb[i] = bf16(v);
      wq[i] = encode_e4m3(v * 448.0f * 20.0f);
    }
    if (subnormal_share > 0.0)  // E4M3 subnormals: exponent field 0, mantissa 1..7, either sign
      for (auto& c : wq)
        if (unit(gen) < subnormal_share) c = static_cast<std::uint8_t>((gen() & 0x80u) | (1u + gen() % 7u));
    for (std::int64_t m : {1, 8, 128}) {  // decode, batched decode, prefill
      std::vector<bf16> x(static_cast<std::size_t>(m * s.in)), y(static_cast<std::size_t>(m * s.out));
      for (auto& v : x) v = bf16(normal(gen));
      // bf16, FP8 in the exact (default) accumulation, FP8 in the fast one
      for (int kind = 0; kind < 3; ++kind) {
        const bool fp8 = kind > 0;
        const WeightView<> w = fp8 ? WeightView<>{DType::F8_E4M3, wq.data(), s.out, s.in, scale.data()}
                                 : WeightView<>{DType::BF16, wb.data(), s.out, s.in, nullptr};
        ctx.kernels.fp8 = kind == 2 ? cpu::Fp8Accumulation::fast : cpu::Fp8Accumulation::exact;
        const double ms = bench::median_ms(reps, [&] {
          Kernels<Cpu>::linear(ctx, {x.data(), m, s.in, s.in}, w, ScaleFmt::ue8m0, {y.data(), m, s.out, s.out});
        });
        ctx.kernels.fp8 = cpu::Fp8Accumulation::exact;
        const double flops = 2.0 * m * s.out * s.in, bytes = static_cast<double>(s.out * s.in) * (fp8 ? 1 : 2);
        std::printf("%-24s %-8s %5lld %10.3f %10.2f %10.2f\n", s.name, kind == 0 ? "bf16" : kind == 1 ? "fp8" : "fp8-fast",
                    static_cast<long long>(m), ms, flops / ms / 1e6, bytes / ms / 1e6);
      }
    }
  }
  // The output head (bf16, f32 products: linear_f32), the largest weight of a decode step, on the
  // kernels of every ISA level this CPU has from AVX2 up (VDPBF16PS with AVX512_BF16)
  const std::int64_t vocab = 129280, dim = 7168;
  std::vector<bf16> head(static_cast<std::size_t>(vocab * dim));
  for (auto& v : head) v = bf16(normal(gen) * 0.02f);
  for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512_bf16}) {
    if (cpu::detected_isa() < isa) continue;
    ctx.kernels.max_isa = isa;
    for (std::int64_t m : {1, 8}) {
      std::vector<bf16> x(static_cast<std::size_t>(m * dim));
      std::vector<float> y(static_cast<std::size_t>(m * vocab));
      for (auto& v : x) v = bf16(normal(gen));
      const double ms = bench::median_ms(reps, [&] {
        Kernels<Cpu>::linear_f32(ctx, {x.data(), m, dim, dim}, WeightView<>{DType::BF16, head.data(), vocab, dim, nullptr},
                                 {y.data(), m, vocab, vocab});
      });
      const double flops = 2.0 * m * vocab * dim, bytes = 2.0 * vocab * dim;
      std::printf("%-24s %-8s %5lld %10.3f %10.2f %10.2f\n", "head 7168->129280 f32", std::string(cpu::isa_name(isa)).c_str(),
                  static_cast<long long>(m), ms, flops / ms / 1e6, bytes / ms / 1e6);
    }
    ctx.kernels.max_isa = cpu::KernelOptions{}.max_isa;
  }
  return 0;
}
