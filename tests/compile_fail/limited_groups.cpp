// A config with n_limited_groups > n_expert_groups must not compile.
// expect: n_limited_groups must be in
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr std::int64_t n_limited_groups = 3;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
