// embed: dsv32 in a project of your own, found with find_package(dsv32) (see CMakeLists.txt).
//
//   embed                  a model of your own shape (MyConfig) with seeded random weights
//   embed CHECKPOINT_DIR   a checkpoint in the reference's converted format (config.json and
//                          model0-mp1.safetensors), run by whichever compiled config it matches
#include <dsv32/config/registry.hpp>
#include <dsv32/dsv32.hpp>
#include <dsv32/io/checkpoint.hpp>

#include <cstdio>
#include <filesystem>
#include <vector>

// Shapes are compile-time. A model of your own is a struct that starts from ConfigDefaults (the
// reference's ModelArgs defaults) and overrides what differs; shapes that break an invariant
// (e.g. n_activated_experts > n_routed_experts) fail to compile with a message naming the field.
struct MyConfig : dsv32::ConfigDefaults {
  static constexpr std::string_view name = "my-small-moe";
  static constexpr std::int64_t vocab_size = 1000, dim = 128, inter_dim = 256, moe_inter_dim = 64;
  static constexpr std::int64_t n_layers = 2, n_heads = 4, q_lora_rank = 64, kv_lora_rank = 64;
  static constexpr std::int64_t qk_nope_head_dim = 32, qk_rope_head_dim = 16, v_head_dim = 32;
  static constexpr std::int64_t n_routed_experts = 8, n_shared_experts = 1, n_activated_experts = 2;
  static constexpr std::int64_t index_n_heads = 4, index_topk = 8;
};
static_assert(dsv32::valid_config<MyConfig>);

// The configs this program is built for; add dsv32::Config671B to serve the released model.
using Configs = dsv32::ConfigList<MyConfig, dsv32::TinyBf16>;

// Prefills a prompt, then decodes greedily, one token per call.
template <class Config>
void generate(const char* checkpoint, const dsv32::RuntimeOptions& options) {
  dsv32::Transformer<Config> model(options);
  if (checkpoint) dsv32::load_checkpoint(model, checkpoint);
  else model.init_random(/*seed=*/42);
  const std::vector<std::int32_t> prompt = {1, 17, 42, 99, 256};
  dsv32::Logits logits = model.forward(prompt, /*batch=*/1, /*start_pos=*/0);
  std::vector<std::int32_t> out = {logits.argmax(0)};
  for (std::int64_t pos = static_cast<std::int64_t>(prompt.size()); out.size() < 8; ++pos) {
    const std::int32_t last = out.back();
    logits = model.forward(std::span(&last, 1), 1, pos);
    out.push_back(logits.argmax(0));
  }
  std::printf("%.*s:", static_cast<int>(Config::name.size()), Config::name.data());
  for (std::int32_t t : out) std::printf(" %d", t);
  std::printf("\n");
}

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      generate<MyConfig>(nullptr, dsv32::RuntimeOptions{.max_batch_size = 1, .max_seq_len = 64});
      return 0;
    }
    const auto args = dsv32::ModelArgs::from_file(std::filesystem::path(argv[1]) / "config.json");
    dsv32::dispatch_config<Configs>(args, [&]<class C>() { generate<C>(argv[1], args.runtime); });
    return 0;
  } catch (const dsv32::Error& e) {  // bad files, shapes, tokens: one exception type, a clear message
    std::fprintf(stderr, "embed: %s\n", e.what());
    return 1;
  }
}
