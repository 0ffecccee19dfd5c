// A config with more dense layers than layers must not compile.
// expect: n_dense_layers must be in
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr std::int64_t n_dense_layers = 4;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
