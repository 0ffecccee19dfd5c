/// \file
/// \brief Config presets: the released DeepSeek-V3.2-Exp (671B) and the tiny configs of the golden scenarios.
#pragma once

#include "dsv32/config/model_config.hpp"

namespace dsv32 {

/// \addtogroup config
/// @{

/// \brief DeepSeek-V3.2-Exp as released (inference/config_671B_v3.2.json): 671,877,944,064 parameters,
///        38,403,822,336 activated per token. Gate bias on; indexer RoPE on (i, i + d/2) pairs (upstream fix).
struct Config671B : ConfigDefaults {
  static constexpr std::string_view name = "deepseek-v3.2-exp-671b";
  static constexpr std::int64_t vocab_size = 129280;
  static constexpr std::int64_t dim = 7168;
  static constexpr std::int64_t inter_dim = 18432;
  static constexpr std::int64_t moe_inter_dim = 2048;
  static constexpr std::int64_t n_layers = 61;
  static constexpr std::int64_t n_dense_layers = 3;
  static constexpr std::int64_t n_heads = 128;
  static constexpr std::int64_t n_routed_experts = 256;
  static constexpr std::int64_t n_shared_experts = 1;
  static constexpr std::int64_t n_activated_experts = 8;
  static constexpr std::int64_t n_expert_groups = 8;
  static constexpr std::int64_t n_limited_groups = 4;
  static constexpr double route_scale = 2.5;
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;
  static constexpr std::int64_t q_lora_rank = 1536;
  static constexpr std::int64_t kv_lora_rank = 512;
  static constexpr std::int64_t qk_nope_head_dim = 128;
  static constexpr std::int64_t qk_rope_head_dim = 64;
  static constexpr std::int64_t v_head_dim = 128;
  static constexpr WeightDType dtype = WeightDType::fp8;
  static constexpr ScaleFmt scale_fmt = ScaleFmt::ue8m0;
  static constexpr std::int64_t index_n_heads = 64;
  static constexpr std::int64_t index_head_dim = 128;
  static constexpr std::int64_t index_topk = 2048;
  static constexpr std::optional<bool> gate_bias = true;
  static constexpr bool indexer_rope_interleaved = false;
};

/// \brief Shape shared by the two tiny bf16 golden scenarios (vocab 300, dim 96, 3 layers, 8 experts).
struct TinyBf16 : ConfigDefaults {
  static constexpr std::string_view name = "tiny_bf16";
  static constexpr std::int64_t vocab_size = 300;
  static constexpr std::int64_t dim = 96;
  static constexpr std::int64_t inter_dim = 160;
  static constexpr std::int64_t moe_inter_dim = 48;
  static constexpr std::int64_t n_layers = 3;
  static constexpr std::int64_t n_dense_layers = 1;
  static constexpr std::int64_t n_heads = 3;
  static constexpr std::int64_t n_routed_experts = 8;
  static constexpr std::int64_t n_shared_experts = 2;
  static constexpr std::int64_t n_activated_experts = 3;
  static constexpr std::int64_t n_expert_groups = 2;
  static constexpr std::int64_t n_limited_groups = 1;
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;
  static constexpr double route_scale = 1.5;
  static constexpr std::int64_t q_lora_rank = 64;
  static constexpr std::int64_t kv_lora_rank = 32;
  static constexpr std::int64_t qk_nope_head_dim = 16;
  static constexpr std::int64_t qk_rope_head_dim = 8;
  static constexpr std::int64_t v_head_dim = 24;
  static constexpr std::int64_t index_n_heads = 8;
  static constexpr std::int64_t index_head_dim = 128;
  static constexpr std::int64_t index_topk = 5;
  static constexpr WeightDType dtype = WeightDType::bf16;
  static constexpr ScaleFmt scale_fmt = ScaleFmt::none;
  static constexpr std::optional<bool> gate_bias = true;
  static constexpr bool indexer_rope_interleaved = false;
};

/// \brief Golden scenario `tiny_bf16_rope_interleaved`: TinyBf16 with the indexer RoPE as first published.
struct TinyBf16RopeInterleaved : TinyBf16 {
  static constexpr std::string_view name = "tiny_bf16_rope_interleaved";
  static constexpr bool indexer_rope_interleaved = true;
};

/// \brief Shape shared by the two tiny FP8 golden scenarios (vocab 512, dim 256, 16 experts in 4 groups).
struct TinyFp8Base : ConfigDefaults {
  static constexpr std::int64_t vocab_size = 512;
  static constexpr std::int64_t dim = 256;
  static constexpr std::int64_t inter_dim = 512;
  static constexpr std::int64_t moe_inter_dim = 128;
  static constexpr std::int64_t n_layers = 3;
  static constexpr std::int64_t n_dense_layers = 1;
  static constexpr std::int64_t n_heads = 4;
  static constexpr std::int64_t n_routed_experts = 16;
  static constexpr std::int64_t n_shared_experts = 1;
  static constexpr std::int64_t n_activated_experts = 4;
  static constexpr std::int64_t n_expert_groups = 4;
  static constexpr std::int64_t n_limited_groups = 2;
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;
  static constexpr double route_scale = 2.5;
  static constexpr std::int64_t q_lora_rank = 128;
  static constexpr std::int64_t kv_lora_rank = 128;
  static constexpr std::int64_t qk_nope_head_dim = 32;
  static constexpr std::int64_t qk_rope_head_dim = 16;
  static constexpr std::int64_t v_head_dim = 32;
  static constexpr std::int64_t index_n_heads = 8;
  static constexpr std::int64_t index_head_dim = 128;
  static constexpr std::int64_t index_topk = 6;
  static constexpr WeightDType dtype = WeightDType::fp8;
};

/// \brief Golden scenario `tiny_fp8_ue8m0_yarn`: FP8 weights, power-of-two activation scales, gate bias.
///        (Its YaRN is a runtime matter: max_seq_len 64 > original_seq_len 32 in its config.json.)
struct TinyFp8Ue8m0Yarn : TinyFp8Base {
  static constexpr std::string_view name = "tiny_fp8_ue8m0_yarn";
  static constexpr ScaleFmt scale_fmt = ScaleFmt::ue8m0;
  static constexpr std::optional<bool> gate_bias = true;
};

/// \brief Golden scenario `tiny_fp8_plain_scale`: FP8 weights, activation scale amax/448, no gate bias.
struct TinyFp8PlainScale : TinyFp8Base {
  static constexpr std::string_view name = "tiny_fp8_plain_scale";
  static constexpr ScaleFmt scale_fmt = ScaleFmt::none;
  static constexpr std::optional<bool> gate_bias = false;
};

static_assert(valid_config<Config671B> && valid_config<TinyBf16> && valid_config<TinyBf16RopeInterleaved> &&
              valid_config<TinyFp8Ue8m0Yarn> && valid_config<TinyFp8PlainScale>);

/// @}

}  // namespace dsv32
