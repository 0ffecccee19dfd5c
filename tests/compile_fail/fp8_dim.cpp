// A config with FP8 weights with dim not a multiple of 128 must not compile.
// expect: dtype fp8 needs dim to be a multiple of 128
#include <dsv32/config/model_args.hpp>
#include <dsv32/config/presets.hpp>

struct Bad : dsv32::TinyBf16 {
  static constexpr dsv32::WeightDType dtype = dsv32::WeightDType::fp8;
};
static_assert(dsv32::valid_config<Bad>);
int main() { return 0; }
