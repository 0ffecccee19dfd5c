/// \file
/// \brief ModelArgs: a config as runtime values, read from a config.json in the reference's format
///        and checked against a compile-time config.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/config/model_config.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/json.hpp"

namespace dsv32 {

/// \addtogroup config
/// @{

/// \brief Every field of the reference's `ModelArgs` (plus gate_bias and indexer_rope_interleaved) as
///        runtime values. Absent config.json fields keep the reference's defaults.
struct ModelArgs {
  RuntimeOptions runtime;                                                  ///< serving limits and RoPE/YaRN scalars
  std::int64_t vocab_size = ConfigDefaults::vocab_size;                    ///< \copydoc ConfigDefaults::vocab_size
  std::int64_t dim = ConfigDefaults::dim;                                  ///< \copydoc ConfigDefaults::dim
  std::int64_t inter_dim = ConfigDefaults::inter_dim;                      ///< \copydoc ConfigDefaults::inter_dim
  std::int64_t moe_inter_dim = ConfigDefaults::moe_inter_dim;              ///< \copydoc ConfigDefaults::moe_inter_dim
  std::int64_t n_layers = ConfigDefaults::n_layers;                        ///< \copydoc ConfigDefaults::n_layers
  std::int64_t n_dense_layers = ConfigDefaults::n_dense_layers;            ///< \copydoc ConfigDefaults::n_dense_layers
  std::int64_t n_heads = ConfigDefaults::n_heads;                          ///< \copydoc ConfigDefaults::n_heads
  std::int64_t n_routed_experts = ConfigDefaults::n_routed_experts;        ///< \copydoc ConfigDefaults::n_routed_experts
  std::int64_t n_shared_experts = ConfigDefaults::n_shared_experts;        ///< \copydoc ConfigDefaults::n_shared_experts
  std::int64_t n_activated_experts = ConfigDefaults::n_activated_experts;  ///< \copydoc ConfigDefaults::n_activated_experts
  std::int64_t n_expert_groups = ConfigDefaults::n_expert_groups;          ///< \copydoc ConfigDefaults::n_expert_groups
  std::int64_t n_limited_groups = ConfigDefaults::n_limited_groups;        ///< \copydoc ConfigDefaults::n_limited_groups
  ScoreFunc score_func = ConfigDefaults::score_func;                       ///< \copydoc ConfigDefaults::score_func
  double route_scale = ConfigDefaults::route_scale;                        ///< \copydoc ConfigDefaults::route_scale
  std::int64_t q_lora_rank = ConfigDefaults::q_lora_rank;                  ///< \copydoc ConfigDefaults::q_lora_rank
  std::int64_t kv_lora_rank = ConfigDefaults::kv_lora_rank;                ///< \copydoc ConfigDefaults::kv_lora_rank
  std::int64_t qk_nope_head_dim = ConfigDefaults::qk_nope_head_dim;        ///< \copydoc ConfigDefaults::qk_nope_head_dim
  std::int64_t qk_rope_head_dim = ConfigDefaults::qk_rope_head_dim;        ///< \copydoc ConfigDefaults::qk_rope_head_dim
  std::int64_t v_head_dim = ConfigDefaults::v_head_dim;                    ///< \copydoc ConfigDefaults::v_head_dim
  std::int64_t index_n_heads = ConfigDefaults::index_n_heads;              ///< \copydoc ConfigDefaults::index_n_heads
  std::int64_t index_head_dim = ConfigDefaults::index_head_dim;            ///< \copydoc ConfigDefaults::index_head_dim
  std::int64_t index_topk = ConfigDefaults::index_topk;                    ///< \copydoc ConfigDefaults::index_topk
  WeightDType dtype = ConfigDefaults::dtype;                               ///< \copydoc ConfigDefaults::dtype
  ScaleFmt scale_fmt = ConfigDefaults::scale_fmt;                          ///< \copydoc ConfigDefaults::scale_fmt
  std::optional<bool> gate_bias;                                           ///< \copydoc ConfigDefaults::gate_bias
  bool indexer_rope_interleaved = false;                                   ///< \copydoc ConfigDefaults::indexer_rope_interleaved

  /// \brief gate_bias with the reference's rule applied when unset.
  constexpr bool resolved_gate_bias() const noexcept { return gate_bias.value_or(dim == 7168); }

  /// \brief The shape fields of compile-time config `C` (runtime options keep their defaults).
  /// \tparam C a compile-time config (see ConfigDefaults)
  template <class C>
  static constexpr ModelArgs of() {
    static_assert(valid_config<C>);
    ModelArgs a;
    a.vocab_size = C::vocab_size;
    a.dim = C::dim;
    a.inter_dim = C::inter_dim;
    a.moe_inter_dim = C::moe_inter_dim;
    a.n_layers = C::n_layers;
    a.n_dense_layers = C::n_dense_layers;
    a.n_heads = C::n_heads;
    a.n_routed_experts = C::n_routed_experts;
    a.n_shared_experts = C::n_shared_experts;
    a.n_activated_experts = C::n_activated_experts;
    a.n_expert_groups = C::n_expert_groups;
    a.n_limited_groups = C::n_limited_groups;
    a.score_func = C::score_func;
    a.route_scale = C::route_scale;
    a.q_lora_rank = C::q_lora_rank;
    a.kv_lora_rank = C::kv_lora_rank;
    a.qk_nope_head_dim = C::qk_nope_head_dim;
    a.qk_rope_head_dim = C::qk_rope_head_dim;
    a.v_head_dim = C::v_head_dim;
    a.index_n_heads = C::index_n_heads;
    a.index_head_dim = C::index_head_dim;
    a.index_topk = C::index_topk;
    a.dtype = C::dtype;
    a.scale_fmt = C::scale_fmt;
    a.gate_bias = ConfigTraits<C>::has_gate_bias;
    a.indexer_rope_interleaved = C::indexer_rope_interleaved;
    return a;
  }

  /// \brief Largest value validate() accepts for any shape field (16,777,216; the released model's
  ///        largest is vocab_size 129,280). Products of a few fields then stay inside 64 bits.
  static constexpr std::int64_t kMaxShapeField = std::int64_t{1} << 24;
  /// \brief Most parameters validate() accepts (2^50, about 1.1e15: 1,700 times the released
  ///        model), so that count_params() and the memory plan compute without overflow.
  static constexpr double kMaxParameters = 1125899906842624.0;

  /// \brief An upper bound of count_params(a).total computed in floating point, so that it cannot
  ///        overflow whatever the fields hold: every product count_params() forms is at most this.
  static constexpr double parameter_bound(const ModelArgs& a) noexcept {
    auto d = [](std::int64_t v) { return std::fabs(static_cast<double>(v)); };  // -INT64_MIN overflows
    const double dim = d(a.dim), layers = d(a.n_layers), heads = d(a.n_heads), q = d(a.q_lora_rank);
    const double kv = d(a.kv_lora_rank), nope = d(a.qk_nope_head_dim), rope = d(a.qk_rope_head_dim);
    const double v = d(a.v_head_dim), ih = d(a.index_n_heads), id = d(a.index_head_dim);
    const double indexer = q * ih * id + dim * id + 2 * id + dim * ih;
    const double attention = dim * q + q + q * heads * (nope + rope) + dim * (kv + rope) + kv + kv * heads * (nope + v) +
                             heads * v * dim + indexer + 2 * dim;
    const double expert = 3 * dim * d(a.moe_inter_dim);
    const double moe = d(a.n_routed_experts) * dim + d(a.n_routed_experts) +
                       (d(a.n_routed_experts) + d(a.n_shared_experts) + d(a.n_activated_experts)) * expert;
    return 2 * d(a.vocab_size) * dim + dim + layers * (attention + 3 * dim * d(a.inter_dim) + moe);
  }

  /// \brief Throws an Error naming the first invariant a runtime config violates (the runtime twin of
  ///        ConfigCheck, for configs read from files rather than compiled in), or a field beyond the
  ///        limits above (kMaxShapeField, kMaxParameters).
  void validate(const std::string& source = "config") const {
    auto need = [&](bool ok, const char* what) { DSV32_CHECK(ok, invalid_config, source, ": ", what); };
    // `self` rather than `*this` inside the lambda's decltype: nvcc's front end (CUDA 13) mistranslates
    // the latter when a .cu file includes this header
    const ModelArgs& self = *this;
    visit_fields([&](const char* key, auto... member) {
      if constexpr (sizeof...(member) == 1) {
        if constexpr (std::is_same_v<std::decay_t<decltype(field(self, member...))>, std::int64_t>) {
          const std::int64_t value = field(self, member...);
          DSV32_CHECK(value <= kMaxShapeField, invalid_config, source, ": ", key, " is ", value, ", more than the ",
                      kMaxShapeField, " dsv32 accepts for a shape field");
        }
      }
    });
    DSV32_CHECK(parameter_bound(*this) <= kMaxParameters, invalid_config, source, ": the config describes about ",
                parameter_bound(*this), " parameters, more than the ", kMaxParameters, " dsv32 accepts");
    need(vocab_size > 0 && dim > 0 && inter_dim > 0 && moe_inter_dim > 0 && n_layers > 0 && n_heads > 0,
         "vocab_size, dim, inter_dim, moe_inter_dim, n_layers and n_heads must be > 0");
    need(n_dense_layers >= 0 && n_dense_layers <= n_layers, "n_dense_layers must be in [0, n_layers]");
    need(n_routed_experts > 0 && n_shared_experts >= 0, "n_routed_experts must be > 0, n_shared_experts >= 0");
    need(n_activated_experts > 0 && n_activated_experts <= n_routed_experts,
         "n_activated_experts must be in [1, n_routed_experts]");
    need(n_expert_groups > 0 && n_routed_experts % n_expert_groups == 0,
         "n_routed_experts must be divisible by n_expert_groups");
    need(n_limited_groups > 0 && n_limited_groups <= n_expert_groups, "n_limited_groups must be in [1, n_expert_groups]");
    need(n_activated_experts <= n_limited_groups * (n_routed_experts / n_expert_groups),
         "n_activated_experts must not exceed the experts in the n_limited_groups chosen groups");
    need(!(resolved_gate_bias() && n_expert_groups > 1) || n_routed_experts / n_expert_groups >= 2,
         "with gate_bias and n_expert_groups > 1 each group needs >= 2 experts");
    need(route_scale > 0, "route_scale must be > 0");
    need(q_lora_rank > 0 && kv_lora_rank > 0, "q_lora_rank and kv_lora_rank must be > 0");
    need(qk_nope_head_dim > 0 && v_head_dim > 0, "qk_nope_head_dim and v_head_dim must be > 0");
    need(qk_rope_head_dim > 0 && qk_rope_head_dim % 2 == 0, "qk_rope_head_dim must be even and > 0");
    need(index_n_heads > 0 && index_topk > 0, "index_n_heads and index_topk must be > 0");
    need(detail::is_pow2(index_head_dim) && index_head_dim % kBlockSize == 0,
         "index_head_dim must be a power of two and a multiple of 128");
    need(qk_rope_head_dim <= index_head_dim, "qk_rope_head_dim must be <= index_head_dim");
    if (dtype == WeightDType::fp8) {
      need(dim % kBlockSize == 0 && q_lora_rank % kBlockSize == 0 && kv_lora_rank % kBlockSize == 0 &&
               (n_heads * v_head_dim) % kBlockSize == 0 && inter_dim % kBlockSize == 0 &&
               moe_inter_dim % kBlockSize == 0,
           "dtype fp8 needs dim, q_lora_rank, kv_lora_rank, n_heads * v_head_dim, inter_dim and moe_inter_dim "
           "to be multiples of 128");
    }
    runtime.validate(source);
  }

  /// \brief Calls `v` once per field with its config.json key and how to reach it: a shape field as
  ///        `v(key, &ModelArgs::field)`, a runtime option as `v(key, &ModelArgs::runtime,
  ///        &RuntimeOptions::field)`. Shape fields are thus the calls with one member pointer.
  /// \tparam Visitor a generic callable, e.g. `[](const char* key, auto... member) { ... }`
  template <class Visitor>
  static void visit_fields(Visitor&& v) {
    v("max_batch_size", &ModelArgs::runtime, &RuntimeOptions::max_batch_size);
    v("max_seq_len", &ModelArgs::runtime, &RuntimeOptions::max_seq_len);
    v("original_seq_len", &ModelArgs::runtime, &RuntimeOptions::original_seq_len);
    v("rope_theta", &ModelArgs::runtime, &RuntimeOptions::rope_theta);
    v("rope_factor", &ModelArgs::runtime, &RuntimeOptions::rope_factor);
    v("beta_fast", &ModelArgs::runtime, &RuntimeOptions::beta_fast);
    v("beta_slow", &ModelArgs::runtime, &RuntimeOptions::beta_slow);
    v("mscale", &ModelArgs::runtime, &RuntimeOptions::mscale);
    v("vocab_size", &ModelArgs::vocab_size);
    v("dim", &ModelArgs::dim);
    v("inter_dim", &ModelArgs::inter_dim);
    v("moe_inter_dim", &ModelArgs::moe_inter_dim);
    v("n_layers", &ModelArgs::n_layers);
    v("n_dense_layers", &ModelArgs::n_dense_layers);
    v("n_heads", &ModelArgs::n_heads);
    v("n_routed_experts", &ModelArgs::n_routed_experts);
    v("n_shared_experts", &ModelArgs::n_shared_experts);
    v("n_activated_experts", &ModelArgs::n_activated_experts);
    v("n_expert_groups", &ModelArgs::n_expert_groups);
    v("n_limited_groups", &ModelArgs::n_limited_groups);
    v("score_func", &ModelArgs::score_func);
    v("route_scale", &ModelArgs::route_scale);
    v("q_lora_rank", &ModelArgs::q_lora_rank);
    v("kv_lora_rank", &ModelArgs::kv_lora_rank);
    v("qk_nope_head_dim", &ModelArgs::qk_nope_head_dim);
    v("qk_rope_head_dim", &ModelArgs::qk_rope_head_dim);
    v("v_head_dim", &ModelArgs::v_head_dim);
    v("index_n_heads", &ModelArgs::index_n_heads);
    v("index_head_dim", &ModelArgs::index_head_dim);
    v("index_topk", &ModelArgs::index_topk);
    v("dtype", &ModelArgs::dtype);
    v("scale_fmt", &ModelArgs::scale_fmt);
    v("gate_bias", &ModelArgs::gate_bias);
    v("indexer_rope_interleaved", &ModelArgs::indexer_rope_interleaved);
  }

  /// \brief Parses a config.json object. Absent fields keep the reference's defaults; unknown keys,
  ///        wrong types and invalid values throw an Error naming the field and `source`.
  static ModelArgs from_json(const nlohmann::json& j, const std::string& source = "config.json") {
    DSV32_CHECK(j.is_object(), invalid_config, source, ": expected a JSON object, found ", j.type_name());
    ModelArgs a;
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      visit_fields([&](const char* key, auto... member) {
        if (it.key() != key) return;
        known = true;
        parse_value(it.value(), field(a, member...), source, key);
      });
      DSV32_CHECK(known, invalid_config, source, ": unknown key \"", it.key(), "\"");
    }
    a.runtime.validate(source);
    return a;
  }

  /// \brief Reads and parses a config.json file (strictly: a key given twice or nesting deeper than
  ///        kMaxJsonDepth is an error, see parse_json_strict()).
  /// \throws Error(io) if it cannot be read; Error(invalid_config) as from_json() or for bad JSON.
  static ModelArgs from_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    DSV32_CHECK(in.good(), io, "cannot open config file ", path.string());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    return from_json(parse_json_strict(text, path.string(), ErrorKind::invalid_config), path.string());
  }

  /// \brief The fields (shape fields, not runtime options) whose values differ from config `C`,
  ///        each as "field: config.json has X, the compiled config has Y".
  /// \tparam C a compile-time config (see ConfigDefaults)
  template <class C>
  std::vector<std::string> mismatches() const {
    const ModelArgs want = of<C>();
    std::vector<std::string> out;
    visit_fields([&](const char* key, auto... member) {
      if constexpr (sizeof...(member) == 1) {
        const auto& mine = field(*this, member...);
        const auto& theirs = field(want, member...);
        bool differs;
        if constexpr (std::is_same_v<std::decay_t<decltype(mine)>, std::optional<bool>>)
          differs = resolved_gate_bias() != want.resolved_gate_bias();
        else
          differs = !(mine == theirs);
        if (differs) {
          std::ostringstream os;
          os << key << ": config.json has " << show(*this, mine) << ", the compiled config (" << C::name
             << ") has " << show(want, theirs);
          out.push_back(os.str());
        }
      }
    });
    return out;
  }

  /// \brief Throws an Error listing every shape field that differs from config `C`.
  /// \tparam C a compile-time config (see ConfigDefaults)
  template <class C>
  void check_matches(const std::string& source = "config.json") const {
    const auto diffs = mismatches<C>();
    if (diffs.empty()) return;
    std::ostringstream os;
    os << source << " disagrees with the compiled config " << C::name << " in " << diffs.size() << " field(s):";
    for (const auto& d : diffs) os << "\n  " << d;
    fail(ErrorKind::invalid_config, os.str());
  }

  /// \brief The fields as a config.json object in the reference's format.
  nlohmann::json to_json() const {
    nlohmann::json j = nlohmann::json::object();
    visit_fields([&](const char* key, auto... member) { j[key] = to_json_value(field(*this, member...)); });
    if (!gate_bias) j.erase("gate_bias");
    return j;
  }

 private:
  template <class M>
  static auto& field(ModelArgs& a, M ModelArgs::*m) { return a.*m; }
  template <class M>
  static const auto& field(const ModelArgs& a, M ModelArgs::*m) { return a.*m; }
  template <class M>
  static auto& field(ModelArgs& a, RuntimeOptions ModelArgs::*r, M RuntimeOptions::*m) { return (a.*r).*m; }
  template <class M>
  static const auto& field(const ModelArgs& a, RuntimeOptions ModelArgs::*r, M RuntimeOptions::*m) {
    return (a.*r).*m;
  }

  [[noreturn]] static void wrong_type(const nlohmann::json& v, const std::string& source, const char* key,
                                      const char* expected) {
    fail(ErrorKind::invalid_config, source, ": field \"", key, "\" must be ", expected, ", found ", v.type_name(),
         " ", v.dump());
  }
  static void parse_value(const nlohmann::json& v, std::int64_t& out, const std::string& src, const char* key) {
    if (!v.is_number_integer()) wrong_type(v, src, key, "an integer");
    // an unsigned value past INT64_MAX would wrap to a negative one: refused as out of range
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t{INT64_MAX})
      wrong_type(v, src, key, "an integer below 2^63");
    out = v.get<std::int64_t>();
  }
  static void parse_value(const nlohmann::json& v, double& out, const std::string& src, const char* key) {
    if (!v.is_number()) wrong_type(v, src, key, "a number");
    out = v.get<double>();
  }
  static void parse_value(const nlohmann::json& v, bool& out, const std::string& src, const char* key) {
    if (!v.is_boolean()) wrong_type(v, src, key, "true or false");
    out = v.get<bool>();
  }
  static void parse_value(const nlohmann::json& v, std::optional<bool>& out, const std::string& src, const char* key) {
    if (v.is_null()) { out.reset(); return; }
    if (!v.is_boolean()) wrong_type(v, src, key, "true, false or null");
    out = v.get<bool>();
  }
  static void parse_value(const nlohmann::json& v, ScoreFunc& out, const std::string& src, const char* key) {
    if (v == "softmax") out = ScoreFunc::softmax;
    else if (v == "sigmoid") out = ScoreFunc::sigmoid;
    else wrong_type(v, src, key, "\"softmax\" or \"sigmoid\"");
  }
  static void parse_value(const nlohmann::json& v, WeightDType& out, const std::string& src, const char* key) {
    if (v == "bf16") out = WeightDType::bf16;
    else if (v == "fp8") out = WeightDType::fp8;
    else wrong_type(v, src, key, "\"bf16\" or \"fp8\"");
  }
  static void parse_value(const nlohmann::json& v, ScaleFmt& out, const std::string& src, const char* key) {
    if (v.is_null()) out = ScaleFmt::none;
    else if (v == "ue8m0") out = ScaleFmt::ue8m0;
    else wrong_type(v, src, key, "null or \"ue8m0\"");
  }

  static nlohmann::json to_json_value(std::int64_t v) { return v; }
  static nlohmann::json to_json_value(double v) { return v; }
  static nlohmann::json to_json_value(bool v) { return v; }
  static nlohmann::json to_json_value(const std::optional<bool>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }
  static nlohmann::json to_json_value(ScoreFunc v) { return std::string(to_string(v)); }
  static nlohmann::json to_json_value(WeightDType v) { return std::string(to_string(v)); }
  static nlohmann::json to_json_value(ScaleFmt v) {
    return v == ScaleFmt::ue8m0 ? nlohmann::json("ue8m0") : nlohmann::json();
  }

  template <class T>
  static std::string show(const ModelArgs& a, const T& v) {
    if constexpr (std::is_same_v<T, std::optional<bool>>) {
      return a.resolved_gate_bias() ? "true" : "false";
    } else {
      return to_json_value(v).dump();
    }
  }
};

/// @}

}  // namespace dsv32
