// The benchmarks' shared model config.
#pragma once

#include <dsv32/config/model_config.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv32::bench {

/// 2 layers (1 dense, 1 MoE) with the 671B model's MLA and indexer head dims scaled to dim 2048:
/// 430M parameters, FP8 with ue8m0 scales.
struct Bench2Layer : ConfigDefaults {
  static constexpr std::string_view name = "bench-2layer";
  static constexpr std::int64_t vocab_size = 32768;
  static constexpr std::int64_t dim = 2048;
  static constexpr std::int64_t inter_dim = 5120;
  static constexpr std::int64_t moe_inter_dim = 1024;
  static constexpr std::int64_t n_layers = 2;
  static constexpr std::int64_t n_dense_layers = 1;
  static constexpr std::int64_t n_heads = 16;
  static constexpr std::int64_t n_routed_experts = 32;
  static constexpr std::int64_t n_shared_experts = 1;
  static constexpr std::int64_t n_activated_experts = 8;
  static constexpr std::int64_t n_expert_groups = 8;
  static constexpr std::int64_t n_limited_groups = 4;
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;
  static constexpr double route_scale = 2.5;
  static constexpr std::int64_t q_lora_rank = 1536;
  static constexpr std::int64_t kv_lora_rank = 512;
  static constexpr std::int64_t qk_nope_head_dim = 128;
  static constexpr std::int64_t qk_rope_head_dim = 64;
  static constexpr std::int64_t v_head_dim = 128;
  static constexpr std::int64_t index_n_heads = 64;
  static constexpr std::int64_t index_head_dim = 128;
  static constexpr std::int64_t index_topk = 2048;
  static constexpr WeightDType dtype = WeightDType::fp8;
  static constexpr ScaleFmt scale_fmt = ScaleFmt::ue8m0;
  static constexpr std::optional<bool> gate_bias = true;
};

}  // namespace dsv32::bench
