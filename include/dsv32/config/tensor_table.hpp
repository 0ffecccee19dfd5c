/// \file
/// \brief The tensor table: every parameter of DeepSeek-V3.2-Exp declared once — its dsv32 and Hugging
///        Face names, role, dtype, shape, model-parallel split and the reduction of its output — and
///        the counts derived from it.
///
/// Everything that needs a model's tensor list reads this table: the layers (which bind their
/// parameters by name from it), param_counts, the memory plan and dsv32-inspect, the Hugging Face
/// name and sharding rules, the converter, load checks and init_random (which picks a distribution
/// by role). It is a constexpr function of ModelArgs, so it serves compiled configs and configs read
/// at run time alike.
///
/// \code
/// dsv32::for_each_tensor(args, [](const dsv32::TensorSpec& t) {
///   std::printf("%s %s %s\n", t.name().c_str(), dsv32::dtype_name(t.dtype).data(), t.local.str().c_str());
/// });
/// \endcode
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dsv32/config/model_args.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/tensor.hpp"

namespace dsv32 {

/// \addtogroup config
/// @{

/// \brief What a tensor is, which decides how it is checked, initialized and counted.
enum class TensorRole {
  weight,     ///< a linear layer's weight matrix [out, in] (BF16 or FP8 E4M3)
  scale,      ///< an FP8 weight's 128x128 block scales [ceil(out/128), ceil(in/128)], f32 (not a parameter)
  norm,       ///< an RMSNorm or LayerNorm weight
  bias,       ///< a LayerNorm bias (the indexer's k_norm)
  gate_bias,  ///< the MoE gate's per-expert selection bias (e_score_correction_bias)
  embedding,  ///< the token embedding table [vocab, dim]
  head,       ///< the output head [vocab, dim]
};

/// \brief The name of a role ("weight", "scale", ...).
constexpr std::string_view to_string(TensorRole r) noexcept {
  switch (r) {
    case TensorRole::weight: return "weight";
    case TensorRole::scale: return "scale";
    case TensorRole::norm: return "norm";
    case TensorRole::bias: return "bias";
    case TensorRole::gate_bias: return "gate_bias";
    case TensorRole::embedding: return "embedding";
    case TensorRole::head: return "head";
  }
  return "?";
}

/// \brief The part of the model a tensor belongs to (for counts and reports).
enum class ModelPart {
  embedding,       ///< embed.weight
  attention,       ///< MLA's projections and norms (the indexer excluded)
  indexer,         ///< the lightning indexer
  layer_norms,     ///< a block's attn_norm and ffn_norm
  dense_ffn,       ///< a dense layer's MLP
  gate,            ///< an MoE layer's gate weight and bias
  routed_experts,  ///< routed experts
  shared_experts,  ///< shared experts
  final_norm,      ///< norm.weight
  head,            ///< head.weight
};

/// \brief How the reference's convert.py distributes a tensor over model-parallel ranks.
enum class ShardKind {
  replicated,  ///< every rank holds the whole tensor
  split,       ///< each rank holds a 1/world slice along TensorSharding::dim
  by_expert,   ///< routed-expert tensors: rank r holds experts [r E / world, (r + 1) E / world) whole
};

/// \brief Where a tensor goes in model-parallel shards.
struct TensorSharding {
  ShardKind kind = ShardKind::replicated;  ///< replicated, split along dim, or by expert
  int dim = -1;  ///< the dimension split (ShardKind::split only); an FP8 `.scale` splits like its weight

  /// \brief Same kind and dimension.
  friend constexpr bool operator==(const TensorSharding&, const TensorSharding&) = default;
};

/// \brief How the outputs of a layer combine across model-parallel ranks.
enum class Reduce {
  none,    ///< local result is final (column-parallel, replicated, or reduced by the enclosing MoE)
  sum,     ///< row-parallel (and the vocabulary-split embedding): partial outputs summed over ranks
  gather,  ///< vocabulary-split head: the ranks' logits concatenated
};

/// \brief How for_each_tensor() enumerates.
enum class TableMode {
  instances,  ///< every tensor of this rank, with its layer and expert indices (TensorSpec::count == 1)
  patterns,   ///< each distinct tensor once, layer/expert as `{L}`/`{E}`; count says how many it stands for
};

/// \brief One row of the tensor table.
struct TensorSpec {
  std::string_view module;     ///< dsv32 module pattern, e.g. `layers.{L}.attn.wq_a`
  std::string_view leaf;       ///< dsv32 leaf: `weight`, `scale` or `bias`
  std::string_view hf_module;  ///< Hugging Face module pattern, e.g. `model.layers.{L}.self_attn.q_a_proj`
  std::string_view hf_leaf;    ///< Hugging Face leaf: `weight`, `weight_scale_inv`, `bias` or `e_score_correction_bias`
  std::int64_t layer = -1;     ///< the layer index, or -1 (no layer, or a pattern)
  std::int64_t expert = -1;    ///< the routed expert index, or -1 (not a routed expert, or a pattern)
  TensorRole role = TensorRole::weight;      ///< what the tensor is
  ModelPart part = ModelPart::attention;     ///< the part of the model it belongs to
  DType dtype = DType::BF16;                 ///< dtype in memory (files may hold BF16 for an F32 norm)
  Shape shape;                               ///< the whole tensor's shape
  Shape local;                               ///< this rank's part of it
  TensorSharding sharding;                   ///< how ranks split it
  Reduce reduce = Reduce::none;              ///< how the outputs of the layer using it combine over ranks
  std::int64_t count = 1;                    ///< TableMode::patterns: tensors this row stands for on this rank

  /// \brief dsv32's name (the reference's converted naming), e.g. `layers.3.attn.wq_a.weight`;
  ///        a pattern (`{L}`, `{E}`) where layer or expert is -1 and the module has them.
  std::string name() const { return expand(module, leaf); }
  /// \brief The Hugging Face name, e.g. `model.layers.3.self_attn.q_a_proj.weight`.
  std::string hf_name() const { return expand(hf_module, hf_leaf); }
  /// \brief Elements of this rank's part.
  constexpr std::int64_t local_numel() const noexcept { return local.numel(); }
  /// \brief Bytes of this rank's part in memory.
  constexpr std::size_t local_bytes() const noexcept {
    return static_cast<std::size_t>(local.numel()) * dtype_size(dtype);
  }
  /// \brief Whether this is a parameter in the published sense (FP8 scales are not).
  constexpr bool counts_as_parameter() const noexcept { return role != TensorRole::scale; }

 private:
  std::string expand(std::string_view module_, std::string_view leaf_) const {
    std::string out;
    for (std::size_t i = 0; i < module_.size();) {
      if (module_.substr(i, 3) == "{L}" && layer >= 0) {
        out += std::to_string(layer);
        i += 3;
      } else if (module_.substr(i, 3) == "{E}" && expert >= 0) {
        out += std::to_string(expert);
        i += 3;
      } else {
        out += module_[i++];
      }
    }
    out += '.';
    out += leaf_;
    return out;
  }
};

namespace detail {

// Emits the table's rows for one rank: splits (checked), local shapes, FP8 scales next to their
// weights, layers and experts enumerated or summarized by TableMode.
template <class F>
class TableWriter {
 public:
  constexpr TableWriter(const ModelArgs& a, F& f, TableMode mode, int world, int rank)
      : a_(a), f_(f), mode_(mode), world_(world), rank_(rank) {}

  // A tensor of the current layer and expert.
  constexpr void tensor(std::string_view module, std::string_view leaf, std::string_view hf_module,
                        std::string_view hf_leaf, TensorRole role, ModelPart part, DType dtype, Shape shape,
                        TensorSharding sharding, Reduce reduce = Reduce::none) {
    Shape local = shape;
    if (sharding.kind == ShardKind::split) local[sharding.dim] = shape[sharding.dim] / world_;
    emit(module, leaf, hf_module, hf_leaf, role, part, dtype, shape, local, sharding, reduce);
  }
  // A linear layer: weight [out, in] and, when FP8, its block scales [ceil(out/128), ceil(in/128)],
  // split alike (each rank's scales are those of its slice, as the old per-rank Linear computed them).
  constexpr void linear(std::string_view module, std::string_view hf_module, ModelPart part, DType dtype,
                        std::int64_t out, std::int64_t in, TensorSharding sharding, Reduce reduce = Reduce::none) {
    tensor(module, "weight", hf_module, "weight", TensorRole::weight, part, dtype, Shape{out, in}, sharding, reduce);
    if (dtype != DType::F8_E4M3) return;
    std::int64_t local_out = out, local_in = in;
    if (sharding.kind == ShardKind::split) (sharding.dim == 0 ? local_out : local_in) /= world_;
    emit(module, "scale", hf_module, "weight_scale_inv", TensorRole::scale, part, DType::F32,
         Shape{blocks(out), blocks(in)}, Shape{blocks(local_out), blocks(local_in)}, sharding, reduce);
  }
  // An RMSNorm weight (f32 in memory; the checkpoints store bf16).
  constexpr void norm(std::string_view module, std::string_view hf_module, ModelPart part, std::int64_t dim) {
    tensor(module, "weight", hf_module, "weight", TensorRole::norm, part, DType::F32, Shape{dim}, {});
  }

  // Calls body(dense) for every layer (or once per kind of layer, with the count, for patterns).
  template <class Body>
  constexpr void layers(Body&& body) {
    const std::int64_t dense = a_.n_dense_layers, moe = a_.n_layers - a_.n_dense_layers;
    if (mode_ == TableMode::patterns) {
      if (dense > 0) with_layer(-1, dense, [&] { body(true); });
      if (moe > 0) with_layer(-1, moe, [&] { body(false); });
      return;
    }
    for (std::int64_t l = 0; l < a_.n_layers; ++l) with_layer(l, 1, [&] { body(l < dense); });
  }
  // Calls body() for every routed expert this rank holds (or once, with the count, for patterns).
  template <class Body>
  constexpr void experts(Body&& body) {
    const std::int64_t local = a_.n_routed_experts / world_, first = rank_ * local;
    const std::int64_t saved = count_;
    if (mode_ == TableMode::patterns) {
      count_ = saved * local;
      body();
    } else {
      for (std::int64_t e = first; e < first + local; ++e) {
        expert_ = e;
        body();
      }
      expert_ = -1;
    }
    count_ = saved;
  }

 private:
  static constexpr std::int64_t blocks(std::int64_t n) { return (n + kBlockSize - 1) / kBlockSize; }
  constexpr void emit(std::string_view module, std::string_view leaf, std::string_view hf_module,
                      std::string_view hf_leaf, TensorRole role, ModelPart part, DType dtype, Shape shape, Shape local,
                      TensorSharding sharding, Reduce reduce) {
    (void)elements(shape[0], shape.rank() > 1 ? shape[1] : 1);  // a shape no machine holds: an error, not a wrap
    TensorSpec t;
    t.module = module;
    t.leaf = leaf;
    t.hf_module = hf_module;
    t.hf_leaf = hf_leaf;
    t.layer = layer_;
    t.expert = expert_;
    t.role = role;
    t.part = part;
    t.dtype = dtype;
    t.shape = shape;
    t.local = local;
    t.sharding = sharding;
    t.reduce = reduce;
    t.count = count_;
    f_(static_cast<const TensorSpec&>(t));
  }
  template <class Body>
  constexpr void with_layer(std::int64_t layer, std::int64_t count, Body&& body) {
    layer_ = layer;
    count_ = count;
    body();
    layer_ = -1;
    count_ = 1;
  }

  const ModelArgs& a_;
  F& f_;
  TableMode mode_;
  int world_, rank_;
  std::int64_t layer_ = -1, expert_ = -1, count_ = 1;
};

// `total / world` with an error naming `what` unless it divides evenly (the model-parallel rule).
constexpr void check_split(std::int64_t total, int world, const char* what) {
  if (total % world != 0)
    fail(ErrorKind::invalid_argument, what, " (", total, ") must be divisible by the world size (", world, ")");
}

}  // namespace detail

/// \brief Calls `f(const TensorSpec&)` for every tensor of rank `rank` of a model of `world` ranks.
///
/// This is the table. Order: the embedding; per layer the attention (wq_a, q_norm, wq_b, wkv_a,
/// kv_norm, wkv_b, wo, then the indexer's wq_b, wk, k_norm, weights_proj), the feed-forward network
/// (a dense MLP's w1, w2, w3, or an MoE's gate, routed experts and shared experts), attn_norm and
/// ffn_norm; then norm and head. FP8 linears list `.scale` after `.weight`.
///
/// Model-parallel splits follow the reference (convert.py): the embedding, wq_b, wkv_b, w1, w3 and
/// the head split their rows, wo and w2 their columns, routed experts go whole to the rank that owns
/// them, everything else (wq_a, wkv_a, norms, the gate, the whole indexer) is replicated.
/// \param a     the model's fields
/// \param f     called as `f(const TensorSpec&)`
/// \param mode  every tensor, or each distinct tensor once with its count
/// \param world ranks of the model-parallel group
/// \param rank  this rank, in [0, world)
/// \throws Error(invalid_argument) naming the quantity when `world` does not divide a split dimension
///         (vocab_size, n_heads, inter_dim, n_routed_experts, n_shared_experts * moe_inter_dim)
template <class F>
constexpr void for_each_tensor(const ModelArgs& a, F&& f, TableMode mode = TableMode::instances, int world = 1,
                               int rank = 0) {
  if (world < 1 || rank < 0 || rank >= world)
    fail(ErrorKind::invalid_argument, "rank ", rank, " of world size ", world, " is not a model-parallel rank");
  const std::int64_t moe_layers = a.n_layers - a.n_dense_layers;
  detail::check_split(a.vocab_size, world, "vocab_size");
  detail::check_split(a.n_heads, world, "n_heads");
  if (a.n_dense_layers > 0) detail::check_split(a.inter_dim, world, "inter_dim");
  if (moe_layers > 0) {
    detail::check_split(a.n_routed_experts, world, "n_routed_experts");
    detail::check_split(a.n_shared_experts * a.moe_inter_dim, world, "n_shared_experts * moe_inter_dim");
  }

  using enum ModelPart;
  const DType lin = a.dtype == WeightDType::fp8 ? DType::F8_E4M3 : DType::BF16;
  const TensorSharding whole{}, rows{ShardKind::split, 0}, cols{ShardKind::split, 1}, expert{ShardKind::by_expert, -1};
  const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  detail::TableWriter<F> w(a, f, mode, world, rank);

  w.tensor("embed", "weight", "model.embed_tokens", "weight", TensorRole::embedding, embedding, DType::BF16,
           Shape{a.vocab_size, a.dim}, rows, Reduce::sum);
  w.layers([&](bool dense) {
    // MLA
    w.linear("layers.{L}.attn.wq_a", "model.layers.{L}.self_attn.q_a_proj", attention, lin, a.q_lora_rank, a.dim, whole);
    w.norm("layers.{L}.attn.q_norm", "model.layers.{L}.self_attn.q_a_layernorm", attention, a.q_lora_rank);
    w.linear("layers.{L}.attn.wq_b", "model.layers.{L}.self_attn.q_b_proj", attention, lin, a.n_heads * qk,
             a.q_lora_rank, rows);
    w.linear("layers.{L}.attn.wkv_a", "model.layers.{L}.self_attn.kv_a_proj_with_mqa", attention, lin,
             a.kv_lora_rank + a.qk_rope_head_dim, a.dim, whole);
    w.norm("layers.{L}.attn.kv_norm", "model.layers.{L}.self_attn.kv_a_layernorm", attention, a.kv_lora_rank);
    w.linear("layers.{L}.attn.wkv_b", "model.layers.{L}.self_attn.kv_b_proj", attention, lin,
             a.n_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, rows);
    w.linear("layers.{L}.attn.wo", "model.layers.{L}.self_attn.o_proj", attention, lin, a.dim,
             a.n_heads * a.v_head_dim, cols, Reduce::sum);
    // the lightning indexer, replicated on every rank
    w.linear("layers.{L}.attn.indexer.wq_b", "model.layers.{L}.self_attn.indexer.wq_b", indexer, lin,
             a.index_n_heads * a.index_head_dim, a.q_lora_rank, whole);
    w.linear("layers.{L}.attn.indexer.wk", "model.layers.{L}.self_attn.indexer.wk", indexer, lin, a.index_head_dim,
             a.dim, whole);
    w.tensor("layers.{L}.attn.indexer.k_norm", "weight", "model.layers.{L}.self_attn.indexer.k_norm", "weight",
             TensorRole::norm, indexer, DType::F32, Shape{a.index_head_dim}, whole);
    w.tensor("layers.{L}.attn.indexer.k_norm", "bias", "model.layers.{L}.self_attn.indexer.k_norm", "bias",
             TensorRole::bias, indexer, DType::F32, Shape{a.index_head_dim}, whole);
    w.linear("layers.{L}.attn.indexer.weights_proj", "model.layers.{L}.self_attn.indexer.weights_proj", indexer,
             DType::BF16, a.index_n_heads, a.dim, whole);
    // feed-forward
    if (dense) {
      w.linear("layers.{L}.ffn.w1", "model.layers.{L}.mlp.gate_proj", dense_ffn, lin, a.inter_dim, a.dim, rows);
      w.linear("layers.{L}.ffn.w2", "model.layers.{L}.mlp.down_proj", dense_ffn, lin, a.dim, a.inter_dim, cols,
               Reduce::sum);
      w.linear("layers.{L}.ffn.w3", "model.layers.{L}.mlp.up_proj", dense_ffn, lin, a.inter_dim, a.dim, rows);
    } else {
      w.linear("layers.{L}.ffn.gate", "model.layers.{L}.mlp.gate", gate, DType::BF16, a.n_routed_experts, a.dim, whole);
      if (a.resolved_gate_bias())
        w.tensor("layers.{L}.ffn.gate", "bias", "model.layers.{L}.mlp.gate", "e_score_correction_bias",
                 TensorRole::gate_bias, gate, DType::F32, Shape{a.n_routed_experts}, whole);
      w.experts([&] {
        w.linear("layers.{L}.ffn.experts.{E}.w1", "model.layers.{L}.mlp.experts.{E}.gate_proj", routed_experts, lin,
                 a.moe_inter_dim, a.dim, expert);
        w.linear("layers.{L}.ffn.experts.{E}.w2", "model.layers.{L}.mlp.experts.{E}.down_proj", routed_experts, lin,
                 a.dim, a.moe_inter_dim, expert);
        w.linear("layers.{L}.ffn.experts.{E}.w3", "model.layers.{L}.mlp.experts.{E}.up_proj", routed_experts, lin,
                 a.moe_inter_dim, a.dim, expert);
      });
      if (a.n_shared_experts > 0) {
        const std::int64_t hidden = a.n_shared_experts * a.moe_inter_dim;
        w.linear("layers.{L}.ffn.shared_experts.w1", "model.layers.{L}.mlp.shared_experts.gate_proj", shared_experts,
                 lin, hidden, a.dim, rows);
        w.linear("layers.{L}.ffn.shared_experts.w2", "model.layers.{L}.mlp.shared_experts.down_proj", shared_experts,
                 lin, a.dim, hidden, cols);
        w.linear("layers.{L}.ffn.shared_experts.w3", "model.layers.{L}.mlp.shared_experts.up_proj", shared_experts,
                 lin, hidden, a.dim, rows);
      }
    }
    w.norm("layers.{L}.attn_norm", "model.layers.{L}.input_layernorm", layer_norms, a.dim);
    w.norm("layers.{L}.ffn_norm", "model.layers.{L}.post_attention_layernorm", layer_norms, a.dim);
  });
  w.norm("norm", "model.norm", final_norm, a.dim);
  w.tensor("head", "weight", "lm_head", "weight", TensorRole::head, head, DType::BF16, Shape{a.vocab_size, a.dim}, rows,
           Reduce::gather);
}

/// \brief Checks that a model split over `world` ranks leaves every rank whole 128x128 blocks of each
///        FP8 weight it splits: a block scale shared by two ranks would be wrong on one of them, and
///        the kernels quantize activations in whole 128-blocks. (The table itself only requires the
///        split sizes to divide, so that shapes and memory can be reported for any world size.)
/// \throws Error(invalid_argument) naming the first tensor that breaks it, as for_each_tensor() for a
///         world size that does not divide.
constexpr void check_fp8_split(const ModelArgs& a, int world) {
  if (world == 1 || a.dtype != WeightDType::fp8) return;
  for_each_tensor(a, [&](const TensorSpec& t) {
    if (t.dtype != DType::F8_E4M3 || t.sharding.kind != ShardKind::split) return;
    const std::int64_t local = t.local[t.sharding.dim];
    if (local % kBlockSize != 0)
      fail(ErrorKind::invalid_argument, t.name(), ": each of the ", world, " ranks would hold ", local,
           t.sharding.dim == 0 ? " rows" : " input columns", " of this FP8 weight, not a whole number of ", kBlockSize,
           "-blocks (choose a world size that leaves every rank whole FP8 blocks)");
  }, TableMode::patterns, world, 0);
}

/// \brief Parameter counts, matching how the released model is counted: every weight, bias and norm of
///        the main model with its indexer; no FP8 scales, no multi-token-prediction layer. Read off
///        the tensor table.
struct ParamCounts {
  std::int64_t embedding = 0;     ///< vocab_size x dim
  std::int64_t head = 0;          ///< vocab_size x dim
  std::int64_t attention = 0;     ///< one layer's MLA with its indexer and the block's two norms
  std::int64_t indexer = 0;       ///< one layer's indexer (included in attention)
  std::int64_t dense_mlp = 0;     ///< one dense layer's MLP
  std::int64_t expert = 0;        ///< one routed expert (a shared expert has as many)
  std::int64_t gate = 0;          ///< one MoE layer's gate (with its bias)
  std::int64_t total = 0;         ///< the whole model
  std::int64_t activated = 0;     ///< what one token touches: all but the unchosen routed experts
};

/// \brief Counts the parameters of a config from the tensor table (patterns, world size 1).
constexpr ParamCounts count_params(const ModelArgs& a) {
  // totals over the whole model by part
  std::int64_t total[static_cast<int>(ModelPart::head) + 1] = {};
  for_each_tensor(a, [&](const TensorSpec& t) {
    if (t.counts_as_parameter()) total[static_cast<int>(t.part)] += t.shape.numel() * t.count;
  }, TableMode::patterns);
  auto of = [&](ModelPart part) { return total[static_cast<int>(part)]; };
  auto per = [](std::int64_t n, std::int64_t count) { return count > 0 ? n / count : 0; };
  const std::int64_t moe_layers = a.n_layers - a.n_dense_layers;
  ParamCounts p;
  p.embedding = of(ModelPart::embedding);
  p.head = of(ModelPart::head);
  p.indexer = per(of(ModelPart::indexer), a.n_layers);
  p.attention = per(of(ModelPart::attention) + of(ModelPart::indexer) + of(ModelPart::layer_norms), a.n_layers);
  p.dense_mlp = per(of(ModelPart::dense_ffn), a.n_dense_layers);
  p.expert = per(of(ModelPart::routed_experts), moe_layers * a.n_routed_experts);
  p.gate = per(of(ModelPart::gate), moe_layers);
  for (std::int64_t n : total) p.total += n;
  p.activated = p.total - of(ModelPart::routed_experts) + moe_layers * a.n_activated_experts * p.expert;
  return p;
}

/// \brief Parameter counts of compile-time config `C`, as a constant expression.
/// \tparam C a compile-time config
template <class C>
inline constexpr ParamCounts param_counts = count_params(ModelArgs::of<C>());

/// @}

}  // namespace dsv32
