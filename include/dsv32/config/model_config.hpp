/// \file
/// \brief Compile-time model configs: the fields of the reference's ModelArgs as `static constexpr`
///        members, their invariants (`static_assert`s naming the field) and parameter counts.
///
/// A config is a struct of static constexpr members. Derive from ConfigDefaults (which holds the
/// reference's ModelArgs defaults) and override what differs:
/// \code
/// struct MyConfig : dsv32::ConfigDefaults {
///   static constexpr std::string_view name = "my-model";
///   static constexpr std::int64_t vocab_size = 32000;
///   static constexpr std::int64_t dim = 1024;
///   // ... every shape field that differs from the defaults
///   static constexpr dsv32::WeightDType dtype = dsv32::WeightDType::fp8;
/// };
/// static_assert(dsv32::valid_config<MyConfig>);   // every invariant, each failing with a message
/// \endcode
/// Serving limits (max_batch_size, max_seq_len) and the RoPE/YaRN scalars are runtime values:
/// see RuntimeOptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv32 {

/// \defgroup config Configs
/// \brief Compile-time model shapes, runtime options, config.json parsing and checking.
/// @{

/// \brief Storage of the model's linear weights (the reference's `dtype`).
enum class WeightDType { bf16, fp8 };
/// \brief Activation scale format of FP8 quantization (the reference's `scale_fmt`).
enum class ScaleFmt {
  none,   ///< scale = amax / 448
  ue8m0,  ///< scale rounded up to a power of two
};
/// \brief Expert scoring function of the MoE gate.
enum class ScoreFunc { softmax, sigmoid };

/// \brief The reference's spelling of a WeightDType: "bf16" or "fp8".
constexpr std::string_view to_string(WeightDType d) noexcept { return d == WeightDType::fp8 ? "fp8" : "bf16"; }
/// \brief "ue8m0" or "none" (the reference's config JSON writes none as null).
constexpr std::string_view to_string(ScaleFmt s) noexcept { return s == ScaleFmt::ue8m0 ? "ue8m0" : "none"; }
/// \brief The reference's spelling of a ScoreFunc: "softmax" or "sigmoid".
constexpr std::string_view to_string(ScoreFunc s) noexcept { return s == ScoreFunc::sigmoid ? "sigmoid" : "softmax"; }

/// \brief FP8 block size: weights carry one scale per 128x128 block, activations one per 1x128.
inline constexpr std::int64_t kBlockSize = 128;

/// \brief The defaults of the reference's `ModelArgs` (shape fields), plus dsv32's two extensions.
///
/// Field names are the reference's (inference/model.py `ModelArgs`, also the keys of its config
/// JSON); where Hugging Face's config.json spells a field differently, the brief says so ("HF").
/// ConfigDefaults itself is not a valid config (q_lora_rank is 0): derive from it and override.
struct ConfigDefaults {
  static constexpr std::string_view name = "custom";        ///< ConfigList::by_name's key; quoted in messages
  static constexpr std::int64_t vocab_size = 102400;        ///< token ids: rows of the embedding and the head
  static constexpr std::int64_t dim = 2048;                 ///< residual stream width (HF `hidden_size`)
  static constexpr std::int64_t inter_dim = 10944;          ///< dense MLP hidden width (HF `intermediate_size`)
  static constexpr std::int64_t moe_inter_dim = 1408;       ///< expert hidden width (HF `moe_intermediate_size`)
  static constexpr std::int64_t n_layers = 27;              ///< blocks, MTP not counted (HF `num_hidden_layers`)
  static constexpr std::int64_t n_dense_layers = 1;         ///< leading dense-MLP blocks (HF `first_k_dense_replace`)
  static constexpr std::int64_t n_heads = 16;               ///< MLA attention heads (HF `num_attention_heads`)
  static constexpr std::int64_t n_routed_experts = 64;      ///< routed experts per MoE layer, split over ranks
  static constexpr std::int64_t n_shared_experts = 2;       ///< run for every token, as one MLP n x moe_inter_dim wide
  static constexpr std::int64_t n_activated_experts = 6;    ///< routed experts per token (HF `num_experts_per_tok`)
  static constexpr std::int64_t n_expert_groups = 1;        ///< routing groups of experts (HF `n_group`)
  static constexpr std::int64_t n_limited_groups = 1;       ///< groups a token's experts come from (HF `topk_group`)
  static constexpr ScoreFunc score_func = ScoreFunc::softmax;  ///< gate logits to scores (HF `scoring_func`)
  static constexpr double route_scale = 1.0;                ///< routed weights' factor (HF `routed_scaling_factor`)
  static constexpr std::int64_t q_lora_rank = 0;            ///< rank of the q latent (MLA, indexer); must be > 0
  static constexpr std::int64_t kv_lora_rank = 512;         ///< rank of the cached key/value latent (C in the kernels)
  static constexpr std::int64_t qk_nope_head_dim = 128;     ///< per-head query/key dims without RoPE
  static constexpr std::int64_t qk_rope_head_dim = 64;      ///< per-head query/key dims with RoPE (even)
  static constexpr std::int64_t v_head_dim = 128;           ///< per-head value dims
  static constexpr std::int64_t index_n_heads = 64;         ///< lightning indexer heads
  static constexpr std::int64_t index_head_dim = 128;       ///< indexer head dims, RoPE on the first qk_rope_head_dim
  static constexpr std::int64_t index_topk = 2048;          ///< cached positions each query attends to
  static constexpr WeightDType dtype = WeightDType::bf16;   ///< linear weights: bf16, or E4M3 + 128x128 block scales
  static constexpr ScaleFmt scale_fmt = ScaleFmt::none;     ///< FP8 activation scales (HF quantization_config's)

  // dsv32's extensions, which the reference decides by other means
  /// \brief Whether the MoE gate has a per-expert f32 correction bias (HF: `topk_method` "noaux_tc").
  ///        Unset means the reference's rule: a bias exactly when dim == 7168.
  static constexpr std::optional<bool> gate_bias = std::nullopt;
  /// \brief Indexer RoPE on interleaved pairs (as first published) instead of (i, i + d/2) pairs (the
  ///        upstream fix).
  static constexpr bool indexer_rope_interleaved = false;
};

/// \brief Values derived from a config's fields.
/// \tparam C a config struct
template <class C>
struct ConfigTraits {
  /// \brief gate_bias with the reference's rule (dim == 7168) applied when unset.
  static constexpr bool has_gate_bias = C::gate_bias.has_value() ? *C::gate_bias : C::dim == 7168;
  static constexpr bool fp8 = C::dtype == WeightDType::fp8;  ///< weights are E4M3 with block scales
  static constexpr std::int64_t qk_head_dim = C::qk_nope_head_dim + C::qk_rope_head_dim;  ///< query/key dims per head
  static constexpr std::int64_t experts_per_group = C::n_routed_experts / C::n_expert_groups;  ///< experts per group
  static constexpr std::int64_t n_moe_layers = C::n_layers - C::n_dense_layers;  ///< blocks with an MoE
};

namespace detail {
constexpr bool is_pow2(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
constexpr bool fp8_ok(bool fp8, std::int64_t in_features) { return !fp8 || in_features % kBlockSize == 0; }
}  // namespace detail

/// \brief Checks every invariant of a config at compile time; each failure names its field.
/// \tparam C a config struct
template <class C>
struct ConfigCheck {
  static_assert(C::vocab_size > 0, "config: vocab_size must be > 0");
  static_assert(C::dim > 0, "config: dim must be > 0");
  static_assert(C::inter_dim > 0, "config: inter_dim must be > 0");
  static_assert(C::moe_inter_dim > 0, "config: moe_inter_dim must be > 0");
  static_assert(C::n_layers > 0, "config: n_layers must be > 0");
  static_assert(C::n_dense_layers >= 0 && C::n_dense_layers <= C::n_layers,
                "config: n_dense_layers must be in [0, n_layers]");
  static_assert(C::n_heads > 0, "config: n_heads must be > 0");
  static_assert(C::n_routed_experts > 0, "config: n_routed_experts must be > 0");
  static_assert(C::n_shared_experts >= 0, "config: n_shared_experts must be >= 0");
  static_assert(C::n_activated_experts > 0 && C::n_activated_experts <= C::n_routed_experts,
                "config: n_activated_experts must be in [1, n_routed_experts]");
  static_assert(C::n_expert_groups > 0, "config: n_expert_groups must be > 0");
  static_assert(C::n_routed_experts % C::n_expert_groups == 0,
                "config: n_routed_experts must be divisible by n_expert_groups");
  static_assert(C::n_limited_groups > 0 && C::n_limited_groups <= C::n_expert_groups,
                "config: n_limited_groups must be in [1, n_expert_groups]");
  static_assert(C::n_activated_experts <=
                    C::n_limited_groups * (C::n_routed_experts / (C::n_expert_groups > 0 ? C::n_expert_groups : 1)),
                "config: n_activated_experts must not exceed the experts in the n_limited_groups chosen groups");
  static_assert(!(ConfigTraits<C>::has_gate_bias && C::n_expert_groups > 1) ||
                    C::n_routed_experts / (C::n_expert_groups > 0 ? C::n_expert_groups : 1) >= 2,
                "config: with gate_bias and n_expert_groups > 1 each group needs >= 2 experts (groups rank by top-2 sum)");
  static_assert(C::route_scale > 0.0, "config: route_scale must be > 0");
  static_assert(C::q_lora_rank > 0, "config: q_lora_rank must be > 0 (V3.2's MLA and indexer read the q latent)");
  static_assert(C::kv_lora_rank > 0, "config: kv_lora_rank must be > 0");
  static_assert(C::qk_nope_head_dim > 0, "config: qk_nope_head_dim must be > 0");
  static_assert(C::qk_rope_head_dim > 0 && C::qk_rope_head_dim % 2 == 0,
                "config: qk_rope_head_dim must be even and > 0 (RoPE rotates pairs)");
  static_assert(C::v_head_dim > 0, "config: v_head_dim must be > 0");
  static_assert(C::index_n_heads > 0, "config: index_n_heads must be > 0");
  static_assert(detail::is_pow2(C::index_head_dim) && C::index_head_dim % kBlockSize == 0,
                "config: index_head_dim must be a power of two and a multiple of 128 (Hadamard transform, FP8 blocks)");
  static_assert(C::qk_rope_head_dim <= C::index_head_dim, "config: qk_rope_head_dim must be <= index_head_dim");
  static_assert(C::index_topk > 0, "config: index_topk must be > 0");
  static_assert(detail::fp8_ok(ConfigTraits<C>::fp8, C::dim), "config: dtype fp8 needs dim to be a multiple of 128");
  static_assert(detail::fp8_ok(ConfigTraits<C>::fp8, C::q_lora_rank),
                "config: dtype fp8 needs q_lora_rank to be a multiple of 128");
  static_assert(detail::fp8_ok(ConfigTraits<C>::fp8, C::kv_lora_rank),
                "config: dtype fp8 needs kv_lora_rank to be a multiple of 128");
  static_assert(detail::fp8_ok(ConfigTraits<C>::fp8, C::n_heads * C::v_head_dim),
                "config: dtype fp8 needs n_heads * v_head_dim to be a multiple of 128");
  static_assert(detail::fp8_ok(ConfigTraits<C>::fp8, C::inter_dim),
                "config: dtype fp8 needs inter_dim to be a multiple of 128");
  static_assert(detail::fp8_ok(ConfigTraits<C>::fp8, C::moe_inter_dim),
                "config: dtype fp8 needs moe_inter_dim to be a multiple of 128");
  static constexpr bool value = true;  ///< true; reached only when every static_assert above holds
};

/// \brief True for a config that satisfies every invariant; a config that does not, fails to compile
///        with a static_assert naming the field.
template <class C>
inline constexpr bool valid_config = ConfigCheck<C>::value;

/// @}

}  // namespace dsv32
