/// \file
/// \brief Hugging Face checkpoints of DeepSeek-V3.2-Exp: `config.json` in Hugging Face naming, the
///        tensor name mapping Hugging Face <-> dsv32 (the reference's converted naming), and
///        HfCheckpointSource, which serves a sharded checkpoint directory to load_weights() straight
///        from its memory-mapped shards.
///
/// A Hugging Face checkpoint directory holds `config.json`, `model.safetensors.index.json` (whose
/// `weight_map` names the shard of every tensor) and the shards, or a single `model.safetensors`
/// without an index. Tensor names map as the reference's `convert.py` renames them
/// (`model.layers.0.self_attn.q_a_proj.weight_scale_inv` -> `layers.0.attn.wq_a.scale`); tensors of
/// the multi-token-prediction layers (`model.layers.N` with N >= num_hidden_layers) are skipped, as
/// inference does not use them. See docs/checkpoints.md for the full table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/config/model_args.hpp"
#include "dsv32/config/tensor_table.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/filesystem.hpp"
#include "dsv32/core/json.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/io/tensor_source.hpp"

namespace dsv32 {

/// \addtogroup io
/// @{

namespace detail {

/// Reads a JSON file strictly (read_json_file_strict(): no duplicate key, nesting at most 64 deep);
/// a file that cannot be opened throws Error(io), a malformed one Error(`malformed`) naming the file.
inline nlohmann::json read_json_file(const std::filesystem::path& path, ErrorKind malformed) {
  return read_json_file_strict(path, malformed);
}

// Reads the fields of a Hugging Face config object, remembering which keys were read so that the
// rest can be reported as ignored. Messages name the field with its path ("rope_scaling.factor").
class HfJsonReader {
 public:
  HfJsonReader(const nlohmann::json& j, std::string source, std::string prefix = {})
      : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // The value of `key` (marked as read), or nullptr when absent or JSON null.
  const nlohmann::json* get(const char* key) {
    read_.insert(key);
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  const nlohmann::json& required(const char* key, const char* maps_to) {
    const auto* v = get(key);
    if (!v) {
      const bool present = j_.contains(key);
      fail(ErrorKind::invalid_config, source_, ": ", present ? "field \"" : "missing field \"", field(key),
           present ? "\" is null" : "\"", maps_to ? std::string(" (dsv32's ") + maps_to + ")" : std::string(),
           "; a Hugging Face DeepSeek-V3.2 config.json names every shape field");
    }
    return *v;
  }
  std::int64_t integer(const char* key, const char* maps_to) { return as_integer(required(key, maps_to), key); }
  std::optional<std::int64_t> opt_integer(const char* key) {
    const auto* v = get(key);
    return v ? std::optional(as_integer(*v, key)) : std::nullopt;
  }
  double number(const char* key, const char* maps_to) { return as_number(required(key, maps_to), key); }
  std::optional<double> opt_number(const char* key) {
    const auto* v = get(key);
    return v ? std::optional(as_number(*v, key)) : std::nullopt;
  }
  std::string string(const char* key, const char* maps_to) { return as_string(required(key, maps_to), key); }
  std::optional<std::string> opt_string(const char* key) {
    const auto* v = get(key);
    return v ? std::optional(as_string(*v, key)) : std::nullopt;
  }
  std::optional<bool> opt_bool(const char* key) {
    const auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong_type(*v, key, "true or false");
    return v->get<bool>();
  }
  // A key dsv32 knows and that does not affect inference; its type is checked by `ok`.
  template <class Pred>
  void accept(const char* key, Pred ok, const char* expected) {
    if (const auto* v = get(key); v && !ok(*v)) wrong_type(*v, key, expected);
  }
  // Throws Error(unsupported) unless `ok`: `key` has a value that would change the model.
  template <class... Why>
  void require(bool ok, const char* key, const nlohmann::json& value, Why&&... why) const {
    if (!ok)
      fail(ErrorKind::unsupported, source_, ": \"", field(key), "\" is ", json_excerpt(value), "; ",
           std::forward<Why>(why)...);
  }
  [[noreturn]] void wrong_type(const nlohmann::json& v, const char* key, const char* expected) const {
    fail(ErrorKind::invalid_config, source_, ": field \"", field(key), "\" must be ", expected, ", found ",
         v.type_name(), " ", json_excerpt(v));
  }
  // Keys of the object that no call above read, sorted.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!read_.count(it.key())) out.push_back(prefix_ + it.key());
    return out;
  }
  std::string field(const char* key) const { return prefix_ + key; }
  const std::string& source() const noexcept { return source_; }

  std::int64_t as_integer(const nlohmann::json& v, const char* key) const {
    if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t{INT64_MAX}))
      return v.get<std::int64_t>();  // an unsigned value past INT64_MAX would wrap: refused below
    if (v.is_number_float()) {  // 32.0 is an integer written as a float (Python's json writes such values)
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
    }
    wrong_type(v, key, "an integer");
  }
  double as_number(const nlohmann::json& v, const char* key) const {
    if (!v.is_number()) wrong_type(v, key, "a number");
    return v.get<double>();
  }
  std::string as_string(const nlohmann::json& v, const char* key) const {
    if (!v.is_string()) wrong_type(v, key, "a string");
    return v.get<std::string>();
  }

 private:
  const nlohmann::json& j_;
  std::string source_, prefix_;
  std::set<std::string> read_;
};

}  // namespace detail

/// \brief A Hugging Face `config.json` read into dsv32's terms.
struct HfConfig {
  /// The model's shape fields and its RoPE/YaRN scalars. The serving limits (max_batch_size,
  /// max_seq_len) keep ModelArgs' defaults: they are the caller's choice, not the checkpoint's.
  ModelArgs args;
  /// `num_nextn_predict_layers`: multi-token-prediction layers stored after the main layers (skipped).
  std::int64_t num_nextn_predict_layers = 0;
  /// `max_position_embeddings`, informational (the context the model was trained to reach).
  std::optional<std::int64_t> max_position_embeddings;
  /// `model_type` ("deepseek_v32"), informational.
  std::string model_type;
  /// Keys dsv32 does not know, ignored (Hugging Face configs grow keys; tools can print these).
  std::vector<std::string> ignored_keys;
};

/// \brief Whether a parsed config.json is in Hugging Face naming (`hidden_size`, `num_hidden_layers`,
///        `model_type`, `architectures`) rather than the reference's ModelArgs naming (`dim`, `n_layers`).
inline bool is_hf_config(const nlohmann::json& j) {
  return j.is_object() && (j.contains("hidden_size") || j.contains("num_hidden_layers") || j.contains("model_type") ||
                           j.contains("architectures"));
}

/// \brief Reads a Hugging Face config.json object into ModelArgs.
///
/// Field mapping: hidden_size -> dim, intermediate_size -> inter_dim, moe_intermediate_size ->
/// moe_inter_dim, num_hidden_layers -> n_layers, first_k_dense_replace -> n_dense_layers,
/// num_attention_heads -> n_heads, num_experts_per_tok -> n_activated_experts, n_group ->
/// n_expert_groups, topk_group -> n_limited_groups, routed_scaling_factor -> route_scale, scoring_func
/// -> score_func; n_routed_experts, n_shared_experts, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
/// qk_rope_head_dim, v_head_dim, index_n_heads, index_head_dim, index_topk and vocab_size keep their
/// names. Every one of these is required. rope_theta (default 10000) -> rope_theta; rope_scaling
/// (type "yarn") factor -> rope_factor, original_max_position_embeddings -> original_seq_len,
/// beta_fast, beta_slow, mscale_all_dim -> mscale (the reference's mscale is the softmax correction,
/// which Hugging Face calls mscale_all_dim; absent means 0, no correction, as in Hugging Face's
/// modeling code). No rope_scaling means plain RoPE: rope_factor 1, which makes YaRN a no-op.
/// quantization_config (quant_method "fp8", fmt "e4m3", weight_block_size [128, 128],
/// activation_scheme "dynamic") -> dtype fp8 with its scale_fmt; absent -> bf16. topk_method
/// "noaux_tc" -> gate_bias true (the `e_score_correction_bias` tensors); "group_limited_greedy",
/// "greedy" or absent -> no gate bias ("greedy", Hugging Face's default, ignores expert groups, which
/// matches the reference only when topk_group == n_group or n_group == 1).
///
/// Keys that do not affect inference are accepted (architectures, model_type, torch_dtype, token
/// ids, num_key_value_heads, use_cache, ...); where a value would change the model it is checked:
/// tie_word_embeddings true, hidden_act other than "silu", attention_bias true, moe_layer_freq != 1,
/// rms_norm_eps != 1e-6, rope_interleave false, norm_topk_prob disagreeing with the scoring function,
/// unsupported quantization or RoPE scaling each throw Error(unsupported) naming the field and value.
/// Keys dsv32 does not know are ignored and listed in HfConfig::ignored_keys.
/// \param j      the parsed config.json
/// \param source name of the file, for messages
/// \throws Error(invalid_config) for a missing or mistyped field (named) or a config that breaks
///         an invariant; Error(unsupported) as above.
inline HfConfig parse_hf_config(const nlohmann::json& j, const std::string& source = "config.json") {
  DSV32_CHECK(j.is_object(), invalid_config, source, ": expected a JSON object, found ", j.type_name());
  detail::HfJsonReader r(j, source);
  HfConfig c;
  ModelArgs& a = c.args;
  a.dim = r.integer("hidden_size", "dim");
  a.inter_dim = r.integer("intermediate_size", "inter_dim");
  a.moe_inter_dim = r.integer("moe_intermediate_size", "moe_inter_dim");
  a.n_layers = r.integer("num_hidden_layers", "n_layers");
  a.n_dense_layers = r.integer("first_k_dense_replace", "n_dense_layers");
  a.n_heads = r.integer("num_attention_heads", "n_heads");
  a.n_routed_experts = r.integer("n_routed_experts", "n_routed_experts");
  a.n_shared_experts = r.integer("n_shared_experts", "n_shared_experts");
  a.n_activated_experts = r.integer("num_experts_per_tok", "n_activated_experts");
  a.n_expert_groups = r.integer("n_group", "n_expert_groups");
  a.n_limited_groups = r.integer("topk_group", "n_limited_groups");
  a.route_scale = r.number("routed_scaling_factor", "route_scale");
  {
    const nlohmann::json& v = r.required("scoring_func", "score_func");
    const std::string s = r.as_string(v, "scoring_func");
    r.require(s == "sigmoid" || s == "softmax", "scoring_func", v, "dsv32 implements \"sigmoid\" and \"softmax\"");
    a.score_func = s == "sigmoid" ? ScoreFunc::sigmoid : ScoreFunc::softmax;
  }
  if (const auto* v = r.get("q_lora_rank"); !v && j.contains("q_lora_rank"))
    fail(ErrorKind::unsupported, source, ": \"q_lora_rank\" is null (queries without a low-rank projection); "
         "DeepSeek-V3.2's MLA and indexer read the query latent, so q_lora_rank must be > 0");
  a.q_lora_rank = r.integer("q_lora_rank", "q_lora_rank");
  a.kv_lora_rank = r.integer("kv_lora_rank", "kv_lora_rank");
  a.qk_nope_head_dim = r.integer("qk_nope_head_dim", "qk_nope_head_dim");
  a.qk_rope_head_dim = r.integer("qk_rope_head_dim", "qk_rope_head_dim");
  a.v_head_dim = r.integer("v_head_dim", "v_head_dim");
  a.index_n_heads = r.integer("index_n_heads", "index_n_heads");
  a.index_head_dim = r.integer("index_head_dim", "index_head_dim");
  a.index_topk = r.integer("index_topk", "index_topk");
  a.vocab_size = r.integer("vocab_size", "vocab_size");
  a.indexer_rope_interleaved = false;  // Hugging Face configs describe the released model: the fixed indexer RoPE

  // MoE routing.
  {
    const auto method = r.opt_string("topk_method");
    const std::string m = method.value_or("greedy");
    const auto* v = r.get("topk_method");
    r.require(m == "noaux_tc" || m == "group_limited_greedy" || m == "greedy", "topk_method",
              v ? *v : nlohmann::json(m), "dsv32 implements \"noaux_tc\" (with e_score_correction_bias), "
              "\"group_limited_greedy\" and \"greedy\"");
    if (m == "greedy" && a.n_expert_groups > 1 && a.n_limited_groups < a.n_expert_groups)
      fail(ErrorKind::unsupported, source, ": topk_method ", method ? "\"greedy\"" : "absent (Hugging Face's \"greedy\")",
           " ignores expert groups, but n_group = ", a.n_expert_groups, " and topk_group = ", a.n_limited_groups,
           " limit them (the reference always limits groups; use \"group_limited_greedy\" or \"noaux_tc\")");
    a.gate_bias = m == "noaux_tc";
  }
  if (const auto norm = r.opt_bool("norm_topk_prob"); norm && a.n_activated_experts > 1) {
    const bool want = a.score_func == ScoreFunc::sigmoid;
    r.require(*norm == want, "norm_topk_prob", *norm, "the reference renormalizes the chosen experts' weights exactly "
              "when scoring_func is \"sigmoid\", so norm_topk_prob must be ", want ? "true" : "false",
              " with scoring_func \"", to_string(a.score_func), "\"");
  }
  if (const auto freq = r.opt_integer("moe_layer_freq"))
    r.require(*freq == 1, "moe_layer_freq", *freq, "dsv32 makes every layer after first_k_dense_replace an MoE layer "
              "(moe_layer_freq 1)");

  // Values that would change the model.
  if (const auto act = r.opt_string("hidden_act"))
    r.require(*act == "silu", "hidden_act", *act, "dsv32's MLPs use SiLU");
  if (const auto tie = r.opt_bool("tie_word_embeddings"))
    r.require(!*tie, "tie_word_embeddings", *tie, "dsv32 has separate embedding and head weights");
  if (const auto bias = r.opt_bool("attention_bias"))
    r.require(!*bias, "attention_bias", *bias, "dsv32's attention projections have no bias");
  if (const auto eps = r.opt_number("rms_norm_eps"))
    r.require(std::fabs(*eps - 1e-6) <= 1e-12, "rms_norm_eps", *eps, "dsv32's RMSNorms use eps 1e-6");
  if (const auto interleave = r.opt_bool("rope_interleave"))
    r.require(*interleave, "rope_interleave", *interleave, "the reference's MLA rotates interleaved pairs");

  // RoPE.
  a.runtime.rope_theta = r.opt_number("rope_theta").value_or(10000.0);
  if (const auto* rs = r.get("rope_scaling")) {
    if (!rs->is_object()) r.wrong_type(*rs, "rope_scaling", "an object or null");
    detail::HfJsonReader s(*rs, source, "rope_scaling.");
    const auto type = s.opt_string("type"), rope_type = s.opt_string("rope_type");
    DSV32_CHECK(type || rope_type, invalid_config, source, ": rope_scaling has neither \"type\" nor \"rope_type\"");
    if (type) s.require(*type == "yarn", "type", *type, "dsv32 implements YaRN scaling only");
    if (rope_type) s.require(*rope_type == "yarn", "rope_type", *rope_type, "dsv32 implements YaRN scaling only");
    a.runtime.rope_factor = s.number("factor", "rope_factor");
    a.runtime.original_seq_len = s.opt_integer("original_max_position_embeddings").value_or(4096);
    a.runtime.beta_fast = s.opt_integer("beta_fast").value_or(32);
    a.runtime.beta_slow = s.opt_integer("beta_slow").value_or(1);
    const double mscale = s.opt_number("mscale").value_or(1.0);
    const double mscale_all_dim = s.opt_number("mscale_all_dim").value_or(0.0);
    // Hugging Face scales cos/sin by yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim);
    // the reference does not, which is the same exactly when the two agree (or no scaling applies).
    if (a.runtime.rope_factor > 1.0 && mscale != mscale_all_dim)
      fail(ErrorKind::unsupported, source, ": rope_scaling.mscale (", mscale, ") differs from mscale_all_dim (",
           mscale_all_dim, "): the reference applies only the softmax correction (mscale_all_dim), not the extra "
           "cos/sin scaling their ratio implies");
    a.runtime.mscale = mscale_all_dim;
    if (const auto unknown = s.unread(); !unknown.empty())
      fail(ErrorKind::unsupported, source, ": ", unknown.front(), " is not a YaRN parameter dsv32 knows (it reads "
           "type, rope_type, factor, original_max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim)");
  } else {
    a.runtime.rope_factor = 1.0;  // plain RoPE: YaRN with factor 1 changes no frequency and no scale
  }

  // Quantization.
  if (const auto* q = r.get("quantization_config")) {
    if (!q->is_object()) r.wrong_type(*q, "quantization_config", "an object or null");
    detail::HfJsonReader s(*q, source, "quantization_config.");
    const std::string method = s.string("quant_method", nullptr);
    s.require(method == "fp8", "quant_method", method, "dsv32 reads FP8 checkpoints (quant_method \"fp8\") or "
              "unquantized ones (no quantization_config)");
    if (const auto fmt = s.opt_string("fmt"))
      s.require(*fmt == "e4m3", "fmt", *fmt, "dsv32's FP8 weights are E4M3");
    if (const auto scheme = s.opt_string("activation_scheme"))
      s.require(*scheme == "dynamic", "activation_scheme", *scheme, "dsv32 quantizes activations dynamically, "
                "per 128-element block");
    if (const auto* block = s.get("weight_block_size")) {
      const bool ok = block->is_array() && block->size() == 2 && (*block)[0].is_number_integer() &&
                      (*block)[1].is_number_integer();
      if (!ok) s.wrong_type(*block, "weight_block_size", "an array of two integers");
      s.require((*block)[0] == kBlockSize && (*block)[1] == kBlockSize, "weight_block_size", *block,
                "dsv32's FP8 weights carry one scale per 128 x 128 block");
    }
    if (const auto* fmt = s.get("scale_fmt")) {
      const std::string f = s.as_string(*fmt, "scale_fmt");
      s.require(f == "ue8m0", "scale_fmt", f, "dsv32 knows \"ue8m0\" (power-of-two scales) or null (amax / 448)");
      a.scale_fmt = ScaleFmt::ue8m0;
    } else {
      a.scale_fmt = ScaleFmt::none;
    }
    if (const auto* skip = s.get("modules_to_not_convert"))
      s.require(skip->is_array() && skip->empty(), "modules_to_not_convert", *skip,
                "dsv32 quantizes the same linears as the released checkpoint");
    if (const auto unknown = s.unread(); !unknown.empty())
      fail(ErrorKind::unsupported, source, ": ", unknown.front(), " is not a quantization parameter dsv32 knows; "
           "it might change how the weights are stored");
    a.dtype = WeightDType::fp8;
  } else {
    a.dtype = WeightDType::bf16;
    a.scale_fmt = ScaleFmt::none;
  }

  // Informational keys.
  c.max_position_embeddings = r.opt_integer("max_position_embeddings");
  c.num_nextn_predict_layers = r.opt_integer("num_nextn_predict_layers").value_or(0);
  DSV32_CHECK(c.num_nextn_predict_layers >= 0, invalid_config, source, ": num_nextn_predict_layers must be >= 0");
  c.model_type = r.opt_string("model_type").value_or("");
  const auto is_int = [](const nlohmann::json& v) { return v.is_number_integer(); };
  const auto is_num = [](const nlohmann::json& v) { return v.is_number(); };
  const auto is_str = [](const nlohmann::json& v) { return v.is_string(); };
  const auto is_bool = [](const nlohmann::json& v) { return v.is_boolean(); };
  const auto is_token_id = [](const nlohmann::json& v) {
    if (v.is_number_integer()) return true;
    if (!v.is_array()) return false;
    return std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_number_integer(); });
  };
  r.accept("architectures", [](const nlohmann::json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_string(); });
  }, "an array of strings");
  r.accept("auto_map", [](const nlohmann::json& v) { return v.is_object(); }, "an object");
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    r.accept(k, is_token_id, "an integer or an array of integers");
  for (const char* k : {"num_key_value_heads", "ep_size", "pretraining_tp", "head_dim"}) r.accept(k, is_int, "an integer");
  for (const char* k : {"attention_dropout", "initializer_range", "aux_loss_alpha"}) r.accept(k, is_num, "a number");
  for (const char* k : {"torch_dtype", "dtype", "transformers_version", "_name_or_path"})
    r.accept(k, is_str, "a string");
  for (const char* k : {"use_cache", "seq_aux"}) r.accept(k, is_bool, "true or false");
  c.ignored_keys = r.unread();

  a.validate(source);
  return c;
}

/// \brief Reads a Hugging Face config.json file (see parse_hf_config()).
/// \throws Error(io) if it cannot be read; Error(invalid_config) if it is not JSON; as parse_hf_config().
inline HfConfig read_hf_config(const std::filesystem::path& path) {
  return parse_hf_config(detail::read_json_file(path, ErrorKind::invalid_config), path.string());
}

/// \brief The Hugging Face config.json of a model: the inverse of parse_hf_config() (for writing
///        checkpoints, e.g. test checkpoints or a model with random weights).
///
/// Serving limits are not written; `max_position_embeddings` is original_seq_len x rope_factor.
/// \param a the model's fields (runtime options give the rope_scaling block)
/// \param num_nextn_predict_layers written as is (the writer stores those layers' tensors, if any)
/// \throws Error(unsupported) for what Hugging Face configs cannot say (indexer_rope_interleaved).
inline nlohmann::json to_hf_config(const ModelArgs& a, std::int64_t num_nextn_predict_layers = 0) {
  DSV32_CHECK(!a.indexer_rope_interleaved, unsupported, "a Hugging Face config.json cannot express "
              "indexer_rope_interleaved (the indexer RoPE as first published)");
  const auto& o = a.runtime;
  nlohmann::json j = {
      {"architectures", nlohmann::json::array({"DeepseekV32ForCausalLM"})},
      {"model_type", "deepseek_v32"},
      {"attention_bias", false},
      {"first_k_dense_replace", a.n_dense_layers},
      {"hidden_act", "silu"},
      {"hidden_size", a.dim},
      {"index_head_dim", a.index_head_dim},
      {"index_n_heads", a.index_n_heads},
      {"index_topk", a.index_topk},
      {"intermediate_size", a.inter_dim},
      {"kv_lora_rank", a.kv_lora_rank},
      {"max_position_embeddings", static_cast<std::int64_t>(std::llround(o.original_seq_len * o.rope_factor))},
      {"moe_intermediate_size", a.moe_inter_dim},
      {"moe_layer_freq", 1},
      {"n_group", a.n_expert_groups},
      {"n_routed_experts", a.n_routed_experts},
      {"n_shared_experts", a.n_shared_experts},
      {"norm_topk_prob", a.score_func == ScoreFunc::sigmoid},
      {"num_attention_heads", a.n_heads},
      {"num_experts_per_tok", a.n_activated_experts},
      {"num_hidden_layers", a.n_layers},
      {"num_key_value_heads", a.n_heads},
      {"num_nextn_predict_layers", num_nextn_predict_layers},
      {"q_lora_rank", a.q_lora_rank},
      {"qk_nope_head_dim", a.qk_nope_head_dim},
      {"qk_rope_head_dim", a.qk_rope_head_dim},
      {"rms_norm_eps", 1e-6},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", o.rope_factor},
        {"original_max_position_embeddings", o.original_seq_len},
        {"beta_fast", o.beta_fast},
        {"beta_slow", o.beta_slow},
        {"mscale", o.mscale},
        {"mscale_all_dim", o.mscale}}},
      {"rope_theta", o.rope_theta},
      {"routed_scaling_factor", a.route_scale},
      {"scoring_func", std::string(to_string(a.score_func))},
      {"tie_word_embeddings", false},
      {"topk_group", a.n_limited_groups},
      {"topk_method", a.resolved_gate_bias() ? "noaux_tc" : "group_limited_greedy"},
      {"torch_dtype", "bfloat16"},
      {"v_head_dim", a.v_head_dim},
      {"vocab_size", a.vocab_size},
  };
  if (a.dtype == WeightDType::fp8) {
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {kBlockSize, kBlockSize}}};
    j["quantization_config"]["scale_fmt"] = a.scale_fmt == ScaleFmt::ue8m0 ? nlohmann::json("ue8m0") : nlohmann::json();
  }
  return j;
}

/// \brief The config.json the reference's generate.py reads (its ModelArgs fields) for a model.
///
/// Written next to converted shards. Serving limits are left out (the reference's defaults apply);
/// dsv32's gate_bias is written only where it differs from the reference's rule (a bias exactly when
/// dim == 7168), and indexer_rope_interleaved only when set: the reference would refuse either key.
inline nlohmann::json to_reference_config(const ModelArgs& a) {
  nlohmann::json j = a.to_json();
  j.erase("max_batch_size");
  j.erase("max_seq_len");
  if (a.resolved_gate_bias() == (a.dim == 7168)) j.erase("gate_bias");
  else j["gate_bias"] = a.resolved_gate_bias();
  if (!a.indexer_rope_interleaved) j.erase("indexer_rope_interleaved");
  return j;
}

/// \brief A tensor name resolved by the name table: the other naming, the layer and expert indices
///        it carries (-1 if none) and its sharding.
struct TensorNameMatch {
  std::string name;          ///< the name in the other naming (dsv32's for a Hugging Face name, and back)
  std::int64_t layer = -1;   ///< the layer index in the name, or -1
  std::int64_t expert = -1;  ///< the routed expert index in the name, or -1
  TensorSharding sharding;   ///< how convert.py distributes the tensor over ranks
};

namespace detail {

// One row of the name table. `{L}` stands for a layer index, `{E}` for a routed expert's.
struct NameRule {
  std::vector<std::string> hf, dsv32;  // dot-separated segments
  TensorSharding sharding;
};

inline std::vector<std::string> split_name(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '.') {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// A canonical decimal index: digits, no leading zero, at most 9 digits.
inline bool parse_index(std::string_view s, std::int64_t& v) {
  if (s.empty() || s.size() > 9 || (s.size() > 1 && s[0] == '0')) return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return true;
}

// The name rules, read off the tensor table (config/tensor_table.hpp): every distinct tensor's
// Hugging Face and dsv32 name patterns (`{L}` a layer, `{E}` a routed expert) with its sharding. The
// table is walked in pattern mode for a config that has every kind of tensor (dense and MoE layers,
// FP8 scales, a gate bias, shared experts), so the rules cover any DeepSeek-V3.2 checkpoint.
inline const std::vector<NameRule>& name_rules() {
  static const std::vector<NameRule> rules = [] {
    ModelArgs every_kind;  // the reference's defaults, made to hold every kind of tensor
    every_kind.n_layers = 2;
    every_kind.n_dense_layers = 1;
    every_kind.n_shared_experts = 1;
    every_kind.dtype = WeightDType::fp8;
    every_kind.gate_bias = true;
    std::vector<NameRule> r;
    std::set<std::string> seen;  // dense and MoE layers share their attention's rows
    for_each_tensor(every_kind, [&](const TensorSpec& t) {
      if (seen.insert(t.name()).second) r.push_back({split_name(t.hf_name()), split_name(t.name()), t.sharding});
    }, TableMode::patterns);
    return r;
  }();
  return rules;
}

inline constexpr const char* kNoCounterpart =
    " has no dsv32 counterpart: it matches none of the Hugging Face DeepSeek-V3.2 tensor names (see the name table "
    "in docs/checkpoints.md)";

// Maps `name` from one side of the table (`from`: the hf or dsv32 member) to the other.
inline std::optional<TensorNameMatch> match_name(std::string_view name, bool from_hf) {
  const std::vector<std::string> segs = split_name(name);
  for (const NameRule& rule : name_rules()) {
    const auto& pattern = from_hf ? rule.hf : rule.dsv32;
    if (pattern.size() != segs.size()) continue;
    TensorNameMatch m;
    bool ok = true;
    for (std::size_t i = 0; i < segs.size() && ok; ++i) {
      if (pattern[i] == "{L}") ok = parse_index(segs[i], m.layer);
      else if (pattern[i] == "{E}") ok = parse_index(segs[i], m.expert);
      else ok = pattern[i] == segs[i];
    }
    if (!ok) continue;
    std::string out;
    for (const std::string& p : from_hf ? rule.dsv32 : rule.hf) {
      if (!out.empty()) out += '.';
      out += p == "{L}" ? std::to_string(m.layer) : p == "{E}" ? std::to_string(m.expert) : p;
    }
    m.name = std::move(out);
    m.sharding = rule.sharding;
    return m;
  }
  return std::nullopt;
}

}  // namespace detail

/// \brief Whether a Hugging Face tensor belongs to a multi-token-prediction layer
///        (`model.layers.N.*` with N >= n_layers), which inference skips.
inline bool is_mtp_tensor(std::string_view hf_name, std::int64_t n_layers) {
  constexpr std::string_view prefix = "model.layers.";
  if (!hf_name.starts_with(prefix)) return false;
  const std::string_view rest = hf_name.substr(prefix.size());
  const std::size_t dot = rest.find('.');
  std::int64_t layer = 0;
  return dot != std::string_view::npos && detail::parse_index(rest.substr(0, dot), layer) && layer >= n_layers;
}

/// \brief The dsv32 name of a Hugging Face tensor, as convert.py renames it (`model.` stripped,
///        self_attn -> attn, mlp -> ffn, weight_scale_inv -> scale, e_score_correction_bias -> bias,
///        embed_tokens -> embed, q_a_proj -> wq_a, ..., lm_head -> head), with its layer, expert and
///        sharding; std::nullopt for a tensor of a multi-token-prediction layer (skipped).
/// \param hf_name  the tensor's Hugging Face name, e.g. `model.layers.3.self_attn.q_a_proj.weight`
/// \param n_layers the model's num_hidden_layers
/// \throws Error(invalid_file) naming the tensor if the name maps to nothing.
inline std::optional<TensorNameMatch> match_hf_name(std::string_view hf_name, std::int64_t n_layers) {
  if (is_mtp_tensor(hf_name, n_layers)) return std::nullopt;
  auto m = detail::match_name(hf_name, true);
  if (!m) fail(ErrorKind::invalid_file, "tensor ", detail::quoted(hf_name), detail::kNoCounterpart);
  return m;
}

/// \brief The dsv32 name of a Hugging Face tensor (see match_hf_name()); std::nullopt for a tensor of
///        a multi-token-prediction layer.
/// \throws Error(invalid_file) naming the tensor if the name maps to nothing.
inline std::optional<std::string> dsv32_name_from_hf(std::string_view hf_name, std::int64_t n_layers) {
  auto m = match_hf_name(hf_name, n_layers);
  return m ? std::optional(std::move(m->name)) : std::nullopt;
}

/// \brief The Hugging Face name of a dsv32 tensor (the inverse of dsv32_name_from_hf()), with its
///        layer, expert and sharding.
/// \throws Error(invalid_argument) naming the tensor if no Hugging Face tensor has that name.
inline TensorNameMatch match_dsv32_name(std::string_view name) {
  auto m = detail::match_name(name, false);
  if (!m) fail(ErrorKind::invalid_argument, "tensor ", detail::quoted(name), " has no Hugging Face counterpart");
  return *m;
}

/// \brief The Hugging Face name of a dsv32 tensor (`layers.0.attn.wq_a.scale` ->
///        `model.layers.0.self_attn.q_a_proj.weight_scale_inv`).
/// \throws Error(invalid_argument) naming the tensor if no Hugging Face tensor has that name.
inline std::string hf_name_from_dsv32(std::string_view name) { return match_dsv32_name(name).name; }

/// \brief How convert.py distributes the dsv32 tensor `name` over model-parallel ranks: embed, wq_b,
///        wkv_b, w1, w3 and head split along dimension 0, wo and w2 along dimension 1 (their FP8
///        scales alike), routed experts partitioned by rank, everything else (norms, gate, wq_a,
///        wkv_a, the whole indexer) replicated.
/// \throws Error(invalid_argument) naming the tensor if it is not a dsv32 tensor name.
inline TensorSharding tensor_sharding(std::string_view name) { return match_dsv32_name(name).sharding; }

/// \brief The tensors of a Hugging Face checkpoint directory, under dsv32's names, borrowed from the
///        memory-mapped shards.
///
/// Layout: `config.json` (Hugging Face naming, read by read_hf_config()) and either
/// `model.safetensors.index.json`, whose `weight_map` names the shard of every tensor, with the
/// shards it names, or a single `model.safetensors`. Shard files not named by the index are not read.
///
/// Memory: every shard is mapped read-only (SafetensorsFile::open); a mapping costs address space,
/// not memory, until its pages are touched. load_weights() binds each parameter whose file dtype is
/// its own straight to the mapping (Parameter::borrow, with the shard as owner) — FP8 and bf16
/// linears, which are nearly all the bytes — so loading adds only the small converted tensors
/// (bf16 norms widened to f32, the f32 head) to the model's own size, and the page cache holds the
/// weights. The shards stay mapped while a parameter borrows from them, even after the source is gone.
///
/// Construction checks the directory (and throws, naming file and tensor): config.json present and
/// valid; the index valid JSON with a `weight_map` object of tensor -> plain file name; every shard it
/// names present and a valid safetensors file; every tensor the index names held by the shard it
/// names; no tensor held by two shards; no tensor in a shard that the index does not name (a loader
/// that follows the index would silently ignore it, so the checkpoint is inconsistent); every name
/// mapping to a dsv32 name. Tensors of the multi-token-prediction layers are skipped (skipped()).
/// Whether the tensors are the ones a model expects is load_weights()'s check.
class HfCheckpointSource : public TensorSource {
 public:
  /// \brief Opens, maps and checks the checkpoint in `dir`.
  /// \throws Error(io) for a missing directory, config.json or shard; Error(invalid_file) for a
  ///         malformed index or shard, or inconsistent tensors; as read_hf_config() for the config.
  explicit HfCheckpointSource(const std::filesystem::path& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    const fs::file_status status = detail::path_status(dir);
    DSV32_CHECK(fs::is_directory(status), io, "Hugging Face checkpoint directory ", dir.string(),
                fs::exists(status) ? " is not a directory" : " does not exist");
    const fs::path config_path = dir / "config.json";
    DSV32_CHECK(detail::path_exists(config_path), io, "Hugging Face checkpoint directory ", dir.string(),
                " has no config.json");
    config_ = read_hf_config(config_path);
    const fs::path index_path = dir / index_file_name();
    if (detail::path_exists(index_path)) {
      open_indexed(index_path);
    } else {
      const fs::path single = dir / "model.safetensors";
      DSV32_CHECK(detail::path_exists(single), io, "Hugging Face checkpoint directory ", dir.string(), " has neither ",
                  index_file_name(), " nor model.safetensors");
      shards_.push_back(SafetensorsFile::open(single));
    }
    map_names();
  }

  /// \brief The index file name: `model.safetensors.index.json`.
  static constexpr const char* index_file_name() noexcept { return "model.safetensors.index.json"; }
  /// \brief Whether `dir` looks like a Hugging Face checkpoint: it has the index or model.safetensors.
  static bool detect(const std::filesystem::path& dir) {
    return detail::path_exists(dir / index_file_name()) || detail::path_exists(dir / "model.safetensors");
  }

  /// \brief The checkpoint's config.json, read.
  const HfConfig& config() const noexcept { return config_; }
  /// \brief The checkpoint directory.
  const std::filesystem::path& directory() const noexcept { return dir_; }
  /// \brief The shard files, mapped (sorted by file name).
  const std::vector<std::shared_ptr<const SafetensorsFile>>& shards() const noexcept { return shards_; }
  /// \brief Hugging Face names of the skipped multi-token-prediction tensors, sorted.
  const std::vector<std::string>& skipped() const noexcept { return skipped_; }
  /// \brief The Hugging Face name of dsv32 tensor `name`, or an empty string if the source lacks it.
  std::string hf_name(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? std::string() : it->second.info->name;
  }
  /// \brief The shard holding dsv32 tensor `name`, or nullptr.
  const SafetensorsFile* shard_of(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : shards_[it->second.shard].get();
  }

  /// \brief The tensor called `name` in dsv32's naming; its TensorInfo carries the Hugging Face name.
  const TensorInfo* find(const std::string& name) const override {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second.info;
  }
  /// \brief The shard that holds `t` (keeps its mapping alive).
  std::shared_ptr<const void> owner_of(const TensorInfo& t) const override {
    const auto it = shard_by_info_.find(&t);
    DSV32_CHECK(it != shard_by_info_.end(), invalid_argument, "HfCheckpointSource::owner_of: tensor ",
                detail::quoted(t.name), " does not come from this source");
    return shards_[it->second]->keep_alive();
  }
  /// \brief Every tensor under dsv32's names (skipped tensors excluded), sorted.
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, e] : tensors_) out.push_back(name);
    return out;
  }
  std::string describe() const override { return "Hugging Face checkpoint directory " + dir_.string(); }
  /// \brief "model.layers.0.self_attn.q_a_proj.weight in model-00001-of-00003.safetensors".
  std::string origin(const std::string& name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return {};
    return it->second.info->name + " in " + shards_[it->second.shard]->path().filename().string();
  }

 private:
  struct Entry {
    const TensorInfo* info = nullptr;
    std::size_t shard = 0;
  };

  void open_indexed(const std::filesystem::path& index_path) {
    const std::string where = index_path.string();
    const nlohmann::json index = detail::read_json_file(index_path, ErrorKind::invalid_file);
    DSV32_CHECK(index.is_object(), invalid_file, where, ": expected a JSON object, found ", index.type_name());
    const auto wm = index.find("weight_map");
    DSV32_CHECK(wm != index.end() && wm->is_object(), invalid_file, where, ": ",
                wm == index.end() ? "no \"weight_map\"" : "\"weight_map\" is not an object",
                " (expected {\"tensor name\": \"shard file name\", ...})");
    std::map<std::string, std::string> weight_map;   // tensor -> shard file
    std::map<std::string, std::string> a_tensor_of;  // shard file -> one tensor it should hold (for messages)
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      DSV32_CHECK(it->is_string(), invalid_file, where, ": weight_map[", detail::quoted(it.key()), "] is ",
                  detail::json_excerpt(*it), ", expected a shard file name");
      const std::string file = it->get<std::string>();
      const bool plain = !file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos &&
                         file.find('\\') == std::string::npos && file.find('\0') == std::string::npos;
      DSV32_CHECK(plain, invalid_file, where, ": weight_map[", detail::quoted(it.key()), "] is ", detail::quoted(file),
                  ", expected the name of a file in the checkpoint directory");
      weight_map.emplace(it.key(), file);
      a_tensor_of.emplace(file, it.key());
    }
    DSV32_CHECK(!weight_map.empty(), invalid_file, where, ": the weight_map is empty");
    std::map<std::string, std::size_t> shard_index;
    for (const auto& [file, tensor] : a_tensor_of) {
      const std::filesystem::path p = dir_ / file;
      DSV32_CHECK(detail::path_exists(p), io, where, " names shard ", detail::quoted(file), " (for tensor ",
                  detail::quoted(tensor), " and others), which is missing from ", dir_.string());
      shard_index.emplace(file, shards_.size());
      shards_.push_back(SafetensorsFile::open(p));
    }
    // No tensor in two shards; every tensor of a shard named by the index for that shard.
    std::map<std::string, std::string> seen;  // tensor -> shard file holding it
    for (const auto& [file, i] : shard_index)
      for (const TensorInfo& t : shards_[i]->tensors()) {
        const auto [it, fresh] = seen.emplace(t.name, file);
        DSV32_CHECK(fresh, invalid_file, describe(), ": tensor ", detail::quoted(t.name), " is held by two shards, ",
                    it->second, " and ", file);
      }
    for (const auto& [tensor, file] : seen) {
      const auto named = weight_map.find(tensor);
      DSV32_CHECK(named != weight_map.end(), invalid_file, where, ": tensor ", detail::quoted(tensor), " is in shard ",
                  file, " but the weight_map does not name it (an index-following loader would skip it)");
    }
    for (const auto& [tensor, file] : weight_map) {
      const auto held = seen.find(tensor);
      if (held == seen.end())
        fail(ErrorKind::invalid_file, where, ": the weight_map puts tensor ", detail::quoted(tensor), " in ", file,
             ", which does not hold it (nor does any other shard)");
      DSV32_CHECK(held->second == file, invalid_file, where, ": the weight_map puts tensor ", detail::quoted(tensor),
                  " in ", file, ", but it is in ", held->second);
    }
  }

  void map_names() {
    for (std::size_t s = 0; s < shards_.size(); ++s)
      for (const TensorInfo& t : shards_[s]->tensors()) {
        if (is_mtp_tensor(t.name, config_.args.n_layers)) {
          skipped_.push_back(t.name);
          continue;
        }
        const auto m = detail::match_name(t.name, true);
        if (!m) fail(ErrorKind::invalid_file, t.where(), detail::kNoCounterpart);
        tensors_.emplace(m->name, Entry{&t, s});
        shard_by_info_.emplace(&t, s);
      }
    std::sort(skipped_.begin(), skipped_.end());
  }

  std::filesystem::path dir_;
  HfConfig config_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, Entry> tensors_;  // by dsv32 name
  std::unordered_map<const TensorInfo*, std::size_t> shard_by_info_;
  std::vector<std::string> skipped_;
};

/// @}

}  // namespace dsv32
