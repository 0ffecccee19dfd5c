// The control for the compile-fail tests: a valid user config compiles, and so does a Transformer of it.
#include <dsv32/dsv32.hpp>

struct Good : dsv32::TinyBf16 {
  static constexpr std::int64_t n_expert_groups = 4;
  static constexpr std::int64_t n_limited_groups = 2;
};
static_assert(dsv32::valid_config<Good>);
int main() {
  dsv32::Transformer<Good> model(dsv32::RuntimeOptions{.max_batch_size = 1, .max_seq_len = 8});
  return model.tensors().empty() ? 1 : 0;
}
