// Builds against the installed dsv32 package and runs a tiny model end to end.
#include <dsv32/dsv32.hpp>

#include <cstdio>

int main() {
  dsv32::Transformer<dsv32::TinyBf16> model(dsv32::RuntimeOptions{.max_batch_size = 1, .max_seq_len = 16});
  model.init_random(7);
  const dsv32::Logits logits = model.forward({{1, 2, 3}}, 0);
  const int next = logits.argmax(0);
  std::printf("consumer: next token %d of %lld\n", next, static_cast<long long>(logits.vocab));
  return next >= 0 && next < dsv32::TinyBf16::vocab_size ? 0 : 1;
}
