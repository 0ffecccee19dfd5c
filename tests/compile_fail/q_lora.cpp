// A config with no q latent must not compile.
// expect: q_lora_rank must be > 0
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr std::int64_t q_lora_rank = 0;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
