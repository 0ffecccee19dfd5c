// Fuzz target: a whole safetensors file (length field, JSON header and data section), opened with
// SafetensorsFile::open() and then read as a loader would: every tensor's bytes, its values as f32
// where the dtype allows, typed views, lookups by name. Whatever open() accepts must keep its
// promises (byte ranges inside the data section and tiling it, byte counts = numel x dtype size,
// unique names), checked here.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include <dsv32/io/safetensors.hpp>

#include "fuzz_support.hpp"

namespace {

template <class T>
void try_view(const dsv32::TensorInfo& t) {
  if (!dsv32::viewable_as<T>(t.dtype)) return;
  dsv32::fuzz::accepts([&] {  // a misaligned tensor is refused with Error(unsupported)
    const auto span = t.as<T>();
    FUZZ_CHECK(span.size() == static_cast<std::size_t>(t.numel()) || t.bytes() == 0);
    volatile T sink{};
    for (const T& v : span) sink = v;
    (void)sink;
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dsv32;
  const auto path = fuzz::scratch().write("input.safetensors", fuzz::as_text(data, size));
  std::shared_ptr<const SafetensorsFile> file;
  if (!fuzz::accepts([&] { file = SafetensorsFile::open(path); })) return 0;

  FUZZ_CHECK(file->mapping().size() == size);
  FUZZ_CHECK(file->data_offset() + file->data_size() == size);
  const std::byte* section = file->mapping().data() + file->data_offset();
  std::uint64_t covered = 0;
  std::set<std::string> names;
  unsigned checksum = 0;
  for (const TensorInfo& t : file->tensors()) {
    FUZZ_CHECK(names.insert(t.name).second);
    FUZZ_CHECK(t.begin == covered && t.end >= t.begin && t.end <= file->data_size());
    covered = t.end;
    FUZZ_CHECK(t.data == section + t.begin);
    FUZZ_CHECK(t.bytes() == static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
    FUZZ_CHECK(file->find(t.name) == &t);
    FUZZ_CHECK(&file->at(t.name) == &t);
    for (std::byte b : t.raw()) checksum += static_cast<unsigned>(b);
    std::vector<std::byte> copy(t.bytes());
    t.copy_to(copy.data());
    FUZZ_CHECK(t.bytes() == 0 || std::memcmp(copy.data(), t.data, t.bytes()) == 0);
    if (t.dtype == DType::F32 || t.dtype == DType::BF16) {
      std::vector<float> values(static_cast<std::size_t>(t.numel()));
      t.read_as_f32(std::span<float>(values));
    } else {
      // refused before touching the destination
      FUZZ_CHECK(!fuzz::accepts([&] { t.read_as_f32(static_cast<float*>(nullptr)); }));
    }
    try_view<float>(t);
    try_view<double>(t);
    try_view<std::int64_t>(t);
    try_view<std::int32_t>(t);
    try_view<std::int16_t>(t);
    try_view<std::int8_t>(t);
    try_view<std::uint16_t>(t);
    try_view<std::uint8_t>(t);
    fuzz::accepts([&] { t.expect(DType::BF16, {2, 2}); });
  }
  FUZZ_CHECK(covered == file->data_size());
  FUZZ_CHECK(file->find("\x01no such tensor") == nullptr);
  for (const auto& [key, value] : file->metadata()) checksum += static_cast<unsigned>(key.size() + value.size());
  volatile unsigned sink = checksum;
  (void)sink;
  return 0;
}
