// A config with index_head_dim not a power of two multiple of 128 must not compile.
// expect: index_head_dim must be a power of two and a multiple of 128
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr std::int64_t index_head_dim = 192;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
