// Tests of dsv32/testing/host_invisible.hpp, and through it of the backend seam: memory the host cannot
// read (a deliberate host read crashes; host pointers handed to its kernels are refused), models that
// run on it with the Cpu backend's results bit for bit from both checkpoint layouts, forward() reading
// back nothing but its logits and one offsets array per MoE layer, no backend allocation in decode
// steps, and the memory plan equal to what a loaded model holds.
#include <dsv32/dsv32.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/hf_test_support.hpp"
#include "support/test_support.hpp"

namespace {

using dsv32::Cpu;
using dsv32::TinyFp8Ue8m0Yarn;
using dsv32::testing::HostInvisible;
using HiMemory = dsv32::Memory<HostInvisible>;
using Space = dsv32::testing::HostInvisibleSpace;

using dsv32::test::kGoldenDir;

dsv32::RuntimeOptions options() {
  dsv32::RuntimeOptions o = dsv32::ModelArgs::from_file(kGoldenDir + "tiny_fp8_ue8m0_yarn/config.json").runtime;
  o.max_batch_size = 2;
  return o;
}

// A prefill of two sequences and `steps` greedy decode steps; every call's logits.
template <class Model>
std::vector<std::vector<float>> run(Model& m, int steps) {
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 2 * 7; ++i) prompt.push_back((i * 53 + 5) % static_cast<int>(Model::config_type::vocab_size));
  std::vector<std::vector<float>> out;
  dsv32::Logits l = m.forward(prompt, 2, 0);
  out.push_back(l.values);
  for (int s = 0; s < steps; ++s) {
    const std::vector<std::int32_t> next = {l.argmax(0), l.argmax(1)};
    l = m.forward(next, 2, 7 + s);
    out.push_back(l.values);
  }
  return out;
}

}  // namespace

TEST_CASE("HostInvisible: tagged memory the host cannot read; a deliberate host read crashes") {
  dsv32::Buffer<float, HostInvisible> b(16);
  const auto bits = reinterpret_cast<std::uintptr_t>(b.data());
  CHECK((bits & dsv32::testing::kHostInvisibleTagMask) == dsv32::testing::kHostInvisibleTag);
  // zero-filled at construction, and copies in and out untag
  std::vector<float> back(16, -1.0f);
  HiMemory::copy_to_host(back.data(), b.data(), 64);
  CHECK(back == std::vector<float>(16, 0.0f));
  const std::vector<float> in = {1, 2, 3, 4};
  HiMemory::copy_from_host(b.data() + 4, in.data(), 16);
  HiMemory::copy_to_host(back.data(), b.data(), 64);
  CHECK(std::vector<float>(back.begin() + 4, back.begin() + 8) == in);

  // the host dereferencing a pointer it was handed: the child process dies instead of reading numbers
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // the test framework's crash handler would report the child as a failed run
    std::signal(SIGBUS, SIG_DFL);
    volatile float x = *b.data();  // a non-canonical address: a fault, not a value
    (void)x;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  const bool read_succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  CHECK_FALSE(read_succeeded);
  if (WIFSIGNALED(status)) MESSAGE("host read of HostInvisible memory: killed by signal " << WTERMSIG(status));
  else MESSAGE("host read of HostInvisible memory: exit status " << WEXITSTATUS(status) << " (a sanitizer caught it)");
}

TEST_CASE("HostInvisible: its kernels and copies refuse host memory, naming the mistake") {
  dsv32::ExecutionContext<HostInvisible> ctx;
  std::vector<dsv32::bf16> host(128);
  const std::string what = dsv32::test::error_of(
      [&] { dsv32::Kernels<HostInvisible>::hadamard(ctx, dsv32::MatrixView<dsv32::bf16, Space>(host.data(), 1, 128, 128)); },
      dsv32::ErrorKind::invalid_argument);
  CHECK(dsv32::test::contains(what, "is not HostInvisible memory"));
  CHECK_THROWS_AS(HiMemory::copy_to_host(host.data(), host.data(), 2), dsv32::Error);
  CHECK(dsv32::testing::untag<float>(nullptr) == nullptr);
}

TEST_CASE("HostInvisible: a model from the golden file and from a Hugging Face directory equals the Cpu model bit for bit") {
  dsv32::Transformer<TinyFp8Ue8m0Yarn, Cpu> cpu(options());
  dsv32::load_checkpoint(cpu, kGoldenDir + "tiny_fp8_ue8m0_yarn/model0-mp1.safetensors");
  const auto want = run(cpu, 4);

  dsv32::LoadOptions small;
  small.staging_bytes = 128 << 10;  // tensors larger than a staging half go up in several chunks
  dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> file(options());
  dsv32::load_checkpoint(file, kGoldenDir + "tiny_fp8_ue8m0_yarn/model0-mp1.safetensors", small);
  int borrowed = 0;
  file.visit([&](const std::string&, dsv32::Parameter<HostInvisible>& p) { borrowed += p.borrowed(); });
  CHECK(borrowed == 0);  // nothing of the mapped file is used in place: everything was uploaded
  CHECK(run(file, 4) == want);

  dsv32::test::TempDir tmp("host_invisible_hf");
  dsv32_test::hf_checkpoint_from_golden(kGoldenDir + "tiny_fp8_ue8m0_yarn", tmp / "hf", 3);
  dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> hf(options());
  dsv32::load_checkpoint(hf, tmp / "hf", small);
  CHECK(run(hf, 4) == want);
}

TEST_CASE("forward() synchronizes once per MoE layer and once for its logits, on every backend") {
  constexpr std::uint64_t kMoeLayers = TinyFp8Ue8m0Yarn::n_layers - TinyFp8Ue8m0Yarn::n_dense_layers;
  static_assert(kMoeLayers > 0);
  dsv32::Transformer<TinyFp8Ue8m0Yarn, Cpu> cpu(options());
  dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> hidden(options());
  cpu.init_random(3);
  hidden.init_random(3);
  auto syncs = [](auto& m, auto&& call) {
    const std::uint64_t before = m.context().synchronizations;
    call();
    return m.context().synchronizations - before;
  };
  const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, step = {11, 12};
  for (int b = 0; b < 2; ++b) {
    auto check = [&](auto& m) {
      m.reset();
      CHECK(syncs(m, [&] { m.forward(prompt, 2, 0); }) == kMoeLayers + 1);           // prefill
      for (int s = 0; s < 3; ++s) CHECK(syncs(m, [&] { m.forward(step, 2, 5 + s); }) == kMoeLayers + 1);  // decode
    };
    if (b == 0) check(cpu);
    else check(hidden);
  }
  // an observer costs host copies only on a backend the host cannot read
  dsv32::ForwardObserver watch;
  hidden.reset();
  cpu.reset();
  CHECK(syncs(cpu, [&] { cpu.forward(prompt, 2, 0, {false, &watch}); }) == kMoeLayers + 1);
  CHECK(syncs(hidden, [&] { hidden.forward(prompt, 2, 0, {false, &watch}); }) > kMoeLayers + 1);
  // the same weights give the same logits on both
  hidden.reset();
  cpu.reset();
  CHECK(hidden.forward(prompt, 2, 0).values == cpu.forward(prompt, 2, 0).values);
}

TEST_CASE("init_random: the same weights on every backend, whatever the staging size") {
  // 200,000 bytes of staging: chunks of 100,000 FP8 codes or 50,000 bf16 values, which split the
  // larger tensors mid-row and mid-block (the FP8 scales are then taken before the codes are drawn
  // again chunk by chunk); on the CPU every tensor is drawn at once
  dsv32::Transformer<TinyFp8Ue8m0Yarn, Cpu> cpu(options());
  dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> hidden(options()), whole(options());
  cpu.init_random(9);
  hidden.init_random(9, 200'000);
  whole.init_random(9);
  const std::vector<std::int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  const auto want = cpu.forward(prompt, 2, 0).values;
  CHECK(hidden.forward(prompt, 2, 0).values == want);
  CHECK(whole.forward(prompt, 2, 0).values == want);
}

TEST_CASE("forward() allocates no backend memory: a prefill and 16 decode steps after loading") {
  auto check = [](auto& m, auto allocations) {
    m.init_random(5);
    const std::vector<std::int32_t> prompt = {4, 8, 15, 16, 23, 42, 7, 9};
    const std::uint64_t before = allocations();
    dsv32::Logits l = m.forward(prompt, 2, 0);
    for (int s = 0; s < 16; ++s) l = m.forward(std::vector<std::int32_t>{l.argmax(0), l.argmax(1)}, 2, 4 + s);
    CHECK(allocations() - before == 0);
  };
  dsv32::Transformer<TinyFp8Ue8m0Yarn, Cpu> cpu(options());
  check(cpu, [] { return dsv32::Memory<Cpu>::allocations(); });
  dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> hidden(options());
  check(hidden, [] { return HiMemory::allocations(); });
  // a call longer than max_tokens_per_call runs in passes over the same scratch
  dsv32::RuntimeOptions o = options();
  o.max_tokens_per_call = 3;
  dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> chunked(o);
  check(chunked, [] { return HiMemory::allocations(); });
}

TEST_CASE("the memory plan is what a loaded model holds: weights, caches, RoPE tables and scratch") {
  for (const std::int64_t per_call : {0, 4}) {
    CAPTURE(per_call);
    dsv32::RuntimeOptions o = options();
    o.max_tokens_per_call = per_call;
    const std::uint64_t before = HiMemory::live_bytes();
    {
      dsv32::Transformer<TinyFp8Ue8m0Yarn, HostInvisible> m(o);
      m.init_random(1);
      const dsv32::MemoryPlan plan = m.memory_plan();
      const std::uint64_t held = HiMemory::live_bytes() - before;
      MESSAGE("plan " << plan.total() << " B (weights " << plan.weights << ", caches " << plan.caches << ", rope "
                      << plan.rope_tables << ", scratch " << plan.scratch << "); held " << held << " B");
      CHECK(plan.scratch > 0);
      // the weight arena aligns each tensor to 256 bytes; nothing else differs
      CHECK(held >= plan.total());
      CHECK(held - plan.total() < 256u * static_cast<std::uint64_t>(plan.tensors));
    }
    CHECK(HiMemory::live_bytes() == before);  // and all of it is released with the model
  }
}
