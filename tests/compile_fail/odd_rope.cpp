// A config with an odd qk_rope_head_dim must not compile.
// expect: qk_rope_head_dim must be even
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr std::int64_t qk_rope_head_dim = 7;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
