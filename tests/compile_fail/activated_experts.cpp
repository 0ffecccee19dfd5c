// A config with more activated experts than the limited groups hold must not compile.
// expect: n_activated_experts must not exceed the experts in the n_limited_groups
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr std::int64_t n_activated_experts = 5;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
