// Shared by the model-parallel tests (tests/io/test_convert.cpp, tests/parallel/test_mpi.cpp): configs
// that split over two ranks, a random model of them written as a Hugging Face checkpoint, the calls
// both sides make, and the relative error the comparisons with one rank use.
#pragma once

#include <dsv32/parallel/thread_communicator.hpp>
#include <dsv32/dsv32.hpp>
#include <dsv32/io/hf_checkpoint.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "io/hf_test_support.hpp"

namespace dsv32_test {

// A config whose every split keeps whole 128-blocks at world size 2 (the golden configs cannot be split:
// TinyBf16 has 3 heads, the FP8 ones single-block scale rows): per rank 2 heads, wq_b and wkv_b 256
// rows, wo and w2 128 input columns, dense inter 128, shared-expert inter 128, 4 experts, vocab 256.
struct MpTestConfig : dsv32::ConfigDefaults {
  static constexpr std::string_view name = "mp_test_fp8";
  static constexpr std::int64_t vocab_size = 512;
  static constexpr std::int64_t dim = 256;
  static constexpr std::int64_t inter_dim = 256;
  static constexpr std::int64_t moe_inter_dim = 128;
  static constexpr std::int64_t n_layers = 2;
  static constexpr std::int64_t n_dense_layers = 1;
  static constexpr std::int64_t n_heads = 4;
  static constexpr std::int64_t n_routed_experts = 8;
  static constexpr std::int64_t n_shared_experts = 2;
  static constexpr std::int64_t n_activated_experts = 2;
  static constexpr std::int64_t n_expert_groups = 4;
  static constexpr std::int64_t n_limited_groups = 2;
  static constexpr dsv32::ScoreFunc score_func = dsv32::ScoreFunc::sigmoid;
  static constexpr double route_scale = 2.5;
  static constexpr std::int64_t q_lora_rank = 128;
  static constexpr std::int64_t kv_lora_rank = 128;
  static constexpr std::int64_t qk_nope_head_dim = 64;
  static constexpr std::int64_t qk_rope_head_dim = 64;
  static constexpr std::int64_t v_head_dim = 64;
  static constexpr std::int64_t index_n_heads = 4;
  static constexpr std::int64_t index_head_dim = 128;
  static constexpr std::int64_t index_topk = 8;
  static constexpr dsv32::WeightDType dtype = dsv32::WeightDType::fp8;
  static constexpr dsv32::ScaleFmt scale_fmt = dsv32::ScaleFmt::ue8m0;
  static constexpr std::optional<bool> gate_bias = true;
};

// The same shapes with bf16 weights and no discrete choice left to rounding, for the numerical
// comparison: every token uses all 8 experts (weighted by the gate) and the indexer keeps every
// position (index_topk = max_seq_len), so a last-bit difference cannot flip an expert or a position
// and the comparison measures rounding alone (see the test below).
struct MpTestBf16Config : MpTestConfig {
  static constexpr std::string_view name = "mp_test_bf16";
  static constexpr std::int64_t n_activated_experts = 8;
  static constexpr std::int64_t n_limited_groups = 4;
  static constexpr std::int64_t index_topk = 32;
  static constexpr dsv32::WeightDType dtype = dsv32::WeightDType::bf16;
  static constexpr dsv32::ScaleFmt scale_fmt = dsv32::ScaleFmt::none;
};

inline dsv32::RuntimeOptions runtime_options() {
  dsv32::RuntimeOptions o;
  o.max_batch_size = 2;
  o.max_seq_len = 32;
  return o;
}

// A random model of `Config` as a 3-shard Hugging Face checkpoint, with an MTP layer and tokenizer files.
template <class Config>
inline void write_random_hf_checkpoint(const fs::path& dir) {
  dsv32::Transformer<Config> m(runtime_options());
  m.init_random(2024);
  auto tensors = dsv32_test::hf_tensors_from_model(m);
  tensors.push_back(dsv32_test::mtp_tensor(2, "eh_proj.weight", {256, 512}));
  tensors.push_back(dsv32_test::mtp_tensor(2, "mlp.experts.3.gate_proj.weight", {128, 256}));
  dsv32::ModelArgs args = dsv32::ModelArgs::of<Config>();
  args.runtime = runtime_options();
  dsv32_test::write_hf_checkpoint(dir, std::move(tensors), dsv32::to_hf_config(args, 1), 3);
  dsv32_test::write_text(dir / "tokenizer.json", "{\"model\": {}}\n");
  dsv32_test::write_text(dir / "tokenizer_config.json", "{}\n");
  dsv32_test::write_text(dir / "README.md", "not copied\n");
}

// One forward call of two sequences.
struct Call {
  std::vector<std::int32_t> tokens;
  std::int64_t start = 0;
};

// Runs body(rank, communicator) for `world` ranks as threads of one ThreadCommunicator group. A rank
// that throws aborts the group (so that no rank waits for it forever); its exception is rethrown here.
template <class Backend = dsv32::Cpu, class Body>
void on_thread_ranks(int world, Body body) {
  auto comms = dsv32::ThreadCommunicator<Backend>::group(world);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, comms[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        comms[static_cast<std::size_t>(r)].abort();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The calls of a comparison: a prefill of two sequences of 12 tokens (start 0).
inline std::vector<Call> prefill_calls() {
  std::vector<Call> calls = {{{}, 0}};
  for (int i = 0; i < 2 * 12; ++i) calls[0].tokens.push_back((i * 37 + 11) % 512);
  return calls;
}

// max |a - b| / max |b|
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return err / scale;
}

}  // namespace dsv32_test
