// Fuzz target: parse_token_ids(), the token-id text of dsv32-generate (--prompt-ids, batch files)
// and dsv32-demo (--prompt). Accepted text must give ids in [0, 2^31 - 1] that print back to text
// parsing to the same ids; refused text must be refused with an Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <dsv32/generate/token_ids.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  std::vector<std::int32_t> ids;
  if (!fuzz::accepts([&] { ids = parse_token_ids(fuzz::as_text(data, size), "fuzz input"); })) return 0;
  std::string printed;
  for (std::int32_t id : ids) {
    FUZZ_CHECK(id >= 0);
    printed += std::to_string(id) + ",";
  }
  FUZZ_CHECK(parse_token_ids(printed) == ids);
  return 0;
}
