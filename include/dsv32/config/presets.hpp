/// \file
/// \brief Config presets: the released DeepSeek-V3.2-Exp (671B), its two-layer slice, the tiny configs
///        of the golden scenarios and the demo model.
///
/// A preset's members override the fields of the same name in its base (ConfigDefaults or another
/// preset); each member's documentation is that of the ConfigDefaults field.
#pragma once

#include "dsv32/config/model_config.hpp"

namespace dsv32 {

/// \addtogroup config
/// @{

/// \brief DeepSeek-V3.2-Exp as released (inference/config_671B_v3.2.json): 671,877,944,064 parameters,
///        38,403,822,336 activated per token. Gate bias on; indexer RoPE on (i, i + d/2) pairs (upstream fix).
struct Config671B : ConfigDefaults {
  static constexpr std::string_view name = "deepseek-v3.2-exp-671b";  ///< \copydoc ConfigDefaults::name
  static constexpr std::int64_t vocab_size = 129280;                  ///< \copydoc ConfigDefaults::vocab_size
  static constexpr std::int64_t dim = 7168;                           ///< \copydoc ConfigDefaults::dim
  static constexpr std::int64_t inter_dim = 18432;                    ///< \copydoc ConfigDefaults::inter_dim
  static constexpr std::int64_t moe_inter_dim = 2048;                 ///< \copydoc ConfigDefaults::moe_inter_dim
  static constexpr std::int64_t n_layers = 61;                        ///< \copydoc ConfigDefaults::n_layers
  static constexpr std::int64_t n_dense_layers = 3;                   ///< \copydoc ConfigDefaults::n_dense_layers
  static constexpr std::int64_t n_heads = 128;                        ///< \copydoc ConfigDefaults::n_heads
  static constexpr std::int64_t n_routed_experts = 256;               ///< \copydoc ConfigDefaults::n_routed_experts
  static constexpr std::int64_t n_shared_experts = 1;                 ///< \copydoc ConfigDefaults::n_shared_experts
  static constexpr std::int64_t n_activated_experts = 8;              ///< \copydoc ConfigDefaults::n_activated_experts
  static constexpr std::int64_t n_expert_groups = 8;                  ///< \copydoc ConfigDefaults::n_expert_groups
  static constexpr std::int64_t n_limited_groups = 4;                 ///< \copydoc ConfigDefaults::n_limited_groups
  static constexpr double route_scale = 2.5;                          ///< \copydoc ConfigDefaults::route_scale
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;         ///< \copydoc ConfigDefaults::score_func
  static constexpr std::int64_t q_lora_rank = 1536;                   ///< \copydoc ConfigDefaults::q_lora_rank
  static constexpr std::int64_t kv_lora_rank = 512;                   ///< \copydoc ConfigDefaults::kv_lora_rank
  static constexpr std::int64_t qk_nope_head_dim = 128;               ///< \copydoc ConfigDefaults::qk_nope_head_dim
  static constexpr std::int64_t qk_rope_head_dim = 64;                ///< \copydoc ConfigDefaults::qk_rope_head_dim
  static constexpr std::int64_t v_head_dim = 128;                     ///< \copydoc ConfigDefaults::v_head_dim
  static constexpr WeightDType dtype = WeightDType::fp8;              ///< \copydoc ConfigDefaults::dtype
  static constexpr ScaleFmt scale_fmt = ScaleFmt::ue8m0;              ///< \copydoc ConfigDefaults::scale_fmt
  static constexpr std::int64_t index_n_heads = 64;                   ///< \copydoc ConfigDefaults::index_n_heads
  static constexpr std::int64_t index_head_dim = 128;                 ///< \copydoc ConfigDefaults::index_head_dim
  static constexpr std::int64_t index_topk = 2048;                    ///< \copydoc ConfigDefaults::index_topk
  static constexpr std::optional<bool> gate_bias = true;              ///< \copydoc ConfigDefaults::gate_bias
  static constexpr bool indexer_rope_interleaved = false;             ///< \copydoc ConfigDefaults::indexer_rope_interleaved
};

/// \brief The 671B model's dimensions in two layers — layer 0 dense, layer 1 MoE with 32 routed experts
///        in 8 groups (4 kept), 8 active, 1 shared — FP8 E4M3 with ue8m0 activation scales: the
///        benchmarks' "671B slice" (dsv32-bench, dsv32-server --random-weights), whose per-layer costs
///        are the released model's.
struct Slice671BFp8 : Config671B {
  static constexpr std::string_view name = "deepseek-v3.2-671b-slice-fp8";  ///< \copydoc ConfigDefaults::name
  static constexpr std::int64_t n_layers = 2;                               ///< \copydoc ConfigDefaults::n_layers
  static constexpr std::int64_t n_dense_layers = 1;                         ///< \copydoc ConfigDefaults::n_dense_layers
  static constexpr std::int64_t n_routed_experts = 32;                      ///< \copydoc ConfigDefaults::n_routed_experts
};

/// \brief The 671B slice with bf16 weights.
struct Slice671BBf16 : Slice671BFp8 {
  static constexpr std::string_view name = "deepseek-v3.2-671b-slice-bf16";  ///< \copydoc ConfigDefaults::name
  static constexpr WeightDType dtype = WeightDType::bf16;                    ///< \copydoc ConfigDefaults::dtype
};

/// \brief Golden scenario `tiny_bf16` (vocab 300, dim 96, 3 layers, 8 experts in 2 groups), and the base of
///        TinyBf16RopeInterleaved.
struct TinyBf16 : ConfigDefaults {
  static constexpr std::string_view name = "tiny_bf16";        ///< \copydoc ConfigDefaults::name
  static constexpr std::int64_t vocab_size = 300;              ///< \copydoc ConfigDefaults::vocab_size
  static constexpr std::int64_t dim = 96;                      ///< \copydoc ConfigDefaults::dim
  static constexpr std::int64_t inter_dim = 160;               ///< \copydoc ConfigDefaults::inter_dim
  static constexpr std::int64_t moe_inter_dim = 48;            ///< \copydoc ConfigDefaults::moe_inter_dim
  static constexpr std::int64_t n_layers = 3;                  ///< \copydoc ConfigDefaults::n_layers
  static constexpr std::int64_t n_dense_layers = 1;            ///< \copydoc ConfigDefaults::n_dense_layers
  static constexpr std::int64_t n_heads = 3;                   ///< \copydoc ConfigDefaults::n_heads
  static constexpr std::int64_t n_routed_experts = 8;          ///< \copydoc ConfigDefaults::n_routed_experts
  static constexpr std::int64_t n_shared_experts = 2;          ///< \copydoc ConfigDefaults::n_shared_experts
  static constexpr std::int64_t n_activated_experts = 3;       ///< \copydoc ConfigDefaults::n_activated_experts
  static constexpr std::int64_t n_expert_groups = 2;           ///< \copydoc ConfigDefaults::n_expert_groups
  static constexpr std::int64_t n_limited_groups = 1;          ///< \copydoc ConfigDefaults::n_limited_groups
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;  ///< \copydoc ConfigDefaults::score_func
  static constexpr double route_scale = 1.5;                   ///< \copydoc ConfigDefaults::route_scale
  static constexpr std::int64_t q_lora_rank = 64;              ///< \copydoc ConfigDefaults::q_lora_rank
  static constexpr std::int64_t kv_lora_rank = 32;             ///< \copydoc ConfigDefaults::kv_lora_rank
  static constexpr std::int64_t qk_nope_head_dim = 16;         ///< \copydoc ConfigDefaults::qk_nope_head_dim
  static constexpr std::int64_t qk_rope_head_dim = 8;          ///< \copydoc ConfigDefaults::qk_rope_head_dim
  static constexpr std::int64_t v_head_dim = 24;               ///< \copydoc ConfigDefaults::v_head_dim
  static constexpr std::int64_t index_n_heads = 8;             ///< \copydoc ConfigDefaults::index_n_heads
  static constexpr std::int64_t index_head_dim = 128;          ///< \copydoc ConfigDefaults::index_head_dim
  static constexpr std::int64_t index_topk = 5;                ///< \copydoc ConfigDefaults::index_topk
  static constexpr WeightDType dtype = WeightDType::bf16;      ///< \copydoc ConfigDefaults::dtype
  static constexpr ScaleFmt scale_fmt = ScaleFmt::none;        ///< \copydoc ConfigDefaults::scale_fmt
  static constexpr std::optional<bool> gate_bias = true;       ///< \copydoc ConfigDefaults::gate_bias
  static constexpr bool indexer_rope_interleaved = false;      ///< \copydoc ConfigDefaults::indexer_rope_interleaved
};

/// \brief Golden scenario `tiny_bf16_rope_interleaved`: TinyBf16 with the indexer RoPE as first published.
struct TinyBf16RopeInterleaved : TinyBf16 {
  static constexpr std::string_view name = "tiny_bf16_rope_interleaved";  ///< \copydoc ConfigDefaults::name
  static constexpr bool indexer_rope_interleaved = true;                  ///< \copydoc ConfigDefaults::indexer_rope_interleaved
};

/// \brief Shape shared by the two tiny FP8 golden scenarios (vocab 512, dim 256, 16 experts in 4 groups).
struct TinyFp8Base : ConfigDefaults {
  static constexpr std::int64_t vocab_size = 512;              ///< \copydoc ConfigDefaults::vocab_size
  static constexpr std::int64_t dim = 256;                     ///< \copydoc ConfigDefaults::dim
  static constexpr std::int64_t inter_dim = 512;               ///< \copydoc ConfigDefaults::inter_dim
  static constexpr std::int64_t moe_inter_dim = 128;           ///< \copydoc ConfigDefaults::moe_inter_dim
  static constexpr std::int64_t n_layers = 3;                  ///< \copydoc ConfigDefaults::n_layers
  static constexpr std::int64_t n_dense_layers = 1;            ///< \copydoc ConfigDefaults::n_dense_layers
  static constexpr std::int64_t n_heads = 4;                   ///< \copydoc ConfigDefaults::n_heads
  static constexpr std::int64_t n_routed_experts = 16;         ///< \copydoc ConfigDefaults::n_routed_experts
  static constexpr std::int64_t n_shared_experts = 1;          ///< \copydoc ConfigDefaults::n_shared_experts
  static constexpr std::int64_t n_activated_experts = 4;       ///< \copydoc ConfigDefaults::n_activated_experts
  static constexpr std::int64_t n_expert_groups = 4;           ///< \copydoc ConfigDefaults::n_expert_groups
  static constexpr std::int64_t n_limited_groups = 2;          ///< \copydoc ConfigDefaults::n_limited_groups
  static constexpr ScoreFunc score_func = ScoreFunc::sigmoid;  ///< \copydoc ConfigDefaults::score_func
  static constexpr double route_scale = 2.5;                   ///< \copydoc ConfigDefaults::route_scale
  static constexpr std::int64_t q_lora_rank = 128;             ///< \copydoc ConfigDefaults::q_lora_rank
  static constexpr std::int64_t kv_lora_rank = 128;            ///< \copydoc ConfigDefaults::kv_lora_rank
  static constexpr std::int64_t qk_nope_head_dim = 32;         ///< \copydoc ConfigDefaults::qk_nope_head_dim
  static constexpr std::int64_t qk_rope_head_dim = 16;         ///< \copydoc ConfigDefaults::qk_rope_head_dim
  static constexpr std::int64_t v_head_dim = 32;               ///< \copydoc ConfigDefaults::v_head_dim
  static constexpr std::int64_t index_n_heads = 8;             ///< \copydoc ConfigDefaults::index_n_heads
  static constexpr std::int64_t index_head_dim = 128;          ///< \copydoc ConfigDefaults::index_head_dim
  static constexpr std::int64_t index_topk = 6;                ///< \copydoc ConfigDefaults::index_topk
  static constexpr WeightDType dtype = WeightDType::fp8;       ///< \copydoc ConfigDefaults::dtype
};

/// \brief Golden scenario `tiny_fp8_ue8m0_yarn`: FP8 weights, power-of-two activation scales, gate bias.
///        (Its YaRN is a runtime matter: max_seq_len 64 > original_seq_len 32 in its config.json.)
struct TinyFp8Ue8m0Yarn : TinyFp8Base {
  static constexpr std::string_view name = "tiny_fp8_ue8m0_yarn";  ///< \copydoc ConfigDefaults::name
  static constexpr ScaleFmt scale_fmt = ScaleFmt::ue8m0;           ///< \copydoc ConfigDefaults::scale_fmt
  static constexpr std::optional<bool> gate_bias = true;           ///< \copydoc ConfigDefaults::gate_bias
};

/// \brief The demo model (dsv32-server's default, with seeded random weights): the shape of the tiny
///        FP8 golden scenarios at dim 128 with the released model's vocabulary (129280), so that every
///        id of DeepSeek's tokenizers fits and text and chat work out of the box; 66 MiB of weights, a
///        few ms per token on one core.
struct DemoFp8 : TinyFp8Ue8m0Yarn {
  static constexpr std::string_view name = "demo-fp8";        ///< \copydoc ConfigDefaults::name
  static constexpr std::int64_t vocab_size = 129280;          ///< \copydoc ConfigDefaults::vocab_size
  static constexpr std::int64_t dim = 128;                    ///< \copydoc ConfigDefaults::dim
};

/// \brief Golden scenario `tiny_fp8_plain_scale`: FP8 weights, activation scale amax/448, no gate bias.
struct TinyFp8PlainScale : TinyFp8Base {
  static constexpr std::string_view name = "tiny_fp8_plain_scale";  ///< \copydoc ConfigDefaults::name
  static constexpr ScaleFmt scale_fmt = ScaleFmt::none;             ///< \copydoc ConfigDefaults::scale_fmt
  static constexpr std::optional<bool> gate_bias = false;           ///< \copydoc ConfigDefaults::gate_bias
};

static_assert(valid_config<Config671B> && valid_config<Slice671BFp8> && valid_config<Slice671BBf16> && valid_config<TinyBf16> && valid_config<TinyBf16RopeInterleaved> &&
              valid_config<TinyFp8Ue8m0Yarn> && valid_config<TinyFp8PlainScale>);

/// @}

}  // namespace dsv32
