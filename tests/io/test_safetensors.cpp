// Tests of dsv32/io/safetensors.hpp: writer/reader round trips, typed access, and the reader's
// refusal of every malformed file (including a deterministic fuzz of the header).
#include "dsv32/io/safetensors.hpp"

#include "dsv32/core/numeric.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::check_error;
using dsv32::test::TempDir;

namespace {

namespace fs = std::filesystem;
using dsv32::DType;
using dsv32::ErrorKind;
using dsv32::SafetensorsFile;
using dsv32::SafetensorsWriter;


void write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// A safetensors file from a header text and a data section; `length` overrides the header
// length field (default: the header's size).
std::string raw_file(std::string_view header, std::string_view data = {}, std::optional<std::uint64_t> length = {}) {
  const std::uint64_t n = length.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return out;
}


// Writes the raw bytes to a file and checks that opening it fails with invalid_file naming the
// file and each of `parts`.
void check_invalid(const TempDir& dir, std::string_view bytes, std::vector<std::string> parts) {
  const fs::path p = dir / "bad.safetensors";
  write_file(p, bytes);
  parts.push_back(p.string() + ": ");
  check_error([&] { SafetensorsFile::open(p); }, ErrorKind::invalid_file, parts);
}

std::uint16_t bf16_bits(float x) {  // exact for the values used here
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

// A small valid file written by SafetensorsWriter: one tensor of each kind the model uses.
struct Sample {
  std::vector<float> w;            // F32 [2, 3]
  std::vector<std::uint16_t> b;    // BF16 [2, 3, 4]
  std::vector<float> b_values;     // what b holds, as float
  std::vector<std::uint8_t> q;     // F8_E4M3 [5]
  std::int64_t s = -42;            // I64 scalar []
  std::vector<std::int64_t> e;     // I64 [0, 3]

  Sample() {
    for (int i = 0; i < 6; ++i) w.push_back(0.5f * static_cast<float>(i) - 1.0f);
    for (int i = 0; i < 24; ++i) {
      b_values.push_back(static_cast<float>(i - 12) * 0.25f);
      b.push_back(bf16_bits(b_values.back()));
    }
    q = {0x00, 0x38, 0x40, 0xC8, 0x7E};
  }

  void add_to(SafetensorsWriter& writer) const {
    writer.add("w", DType::F32, {2, 3}, w.data(), w.size() * sizeof(float));
    writer.add("b", DType::BF16, {2, 3, 4}, b.data(), b.size() * 2);
    writer.add("q", DType::F8_E4M3, {5}, q.data(), q.size());
    writer.add("s", DType::I64, {}, &s, sizeof s);
    writer.add("e", DType::I64, {0, 3}, nullptr, 0);
    writer.add_metadata("format", "pt");
    writer.add_metadata("note", "h\xc3\xa9llo");
  }

  void write(const fs::path& p) const {
    SafetensorsWriter writer;
    add_to(writer);
    writer.write(p);
  }
};

const char* kValidEntry = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";

}  // namespace

TEST_SUITE("io/safetensors") {

TEST_CASE("writer and reader round-trip F32, BF16, F8_E4M3, I64, scalar, empty tensors and metadata") {
  TempDir dir;
  const fs::path p = dir / "sample.safetensors";
  const Sample sample;
  sample.write(p);
  CHECK(dir.entries() == 1);  // no temporary file left behind

  auto file = SafetensorsFile::open(p);
  CHECK(file->path() == p);
  CHECK(file->data_offset() % 8 == 0);
  CHECK(file->data_size() == 24 + 48 + 5 + 8);
  CHECK(file->metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "h\xc3\xa9llo"}});

  // Data is stored contiguously in name order, so offset order is name order.
  const auto& ts = file->tensors();
  REQUIRE(ts.size() == 5);
  std::vector<std::string> names;
  for (const auto& t : ts) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"b", "e", "q", "s", "w"});
  for (std::size_t i = 1; i < ts.size(); ++i) CHECK(ts[i].begin == ts[i - 1].end);

  const dsv32::TensorInfo& w = file->at("w");
  CHECK(w.dtype == DType::F32);
  CHECK(w.shape == std::vector<std::int64_t>{2, 3});
  CHECK(w.shape_str() == "[2, 3]");
  CHECK(w.numel() == 6);
  CHECK(w.bytes() == 24);
  std::vector<float> wf(6);
  w.read_as_f32(std::span<float>(wf));
  CHECK(wf == sample.w);
  std::vector<float> wc(6);
  w.copy_to(wc.data());
  CHECK(wc == sample.w);
  w.expect(DType::F32, {2, 3});
  check_error([&] { w.expect(DType::BF16, {3, 2}); }, ErrorKind::invalid_file,
              {p.string(), "'w'", "is F32 [2, 3], expected BF16 [3, 2]"});
  check_error([&] { w.read_as_f32(std::span<float>(wf.data(), 5)); }, ErrorKind::invalid_argument, {"'w'", "6 elements"});

  const dsv32::TensorInfo* b = file->find("b");
  REQUIRE(b != nullptr);
  CHECK(b->shape_str() == "[2, 3, 4]");
  CHECK(b->rank() == 3);
  const auto bits = b->as<std::uint16_t>();  // offset 0: aligned
  CHECK(std::vector<std::uint16_t>(bits.begin(), bits.end()) == sample.b);
  std::vector<float> bf(24);
  b->read_as_f32(bf.data());
  CHECK(bf == sample.b_values);
  const std::span<const dsv32::bf16> typed = b->as<dsv32::bf16>();
  REQUIRE(typed.size() == 24);
  CHECK(static_cast<float>(typed[23]) == sample.b_values[23]);
  check_error([&] { b->as<float>(); }, ErrorKind::invalid_file, {"'b'", "BF16"});

  const dsv32::TensorInfo& q = file->at("q");
  CHECK(q.dtype == DType::F8_E4M3);
  const auto codes = q.as<std::uint8_t>();
  CHECK(std::vector<std::uint8_t>(codes.begin(), codes.end()) == sample.q);
  check_error([&] { q.read_as_f32(bf.data()); }, ErrorKind::invalid_file, {"'q'", "F8_E4M3", "F32 or BF16"});
  CHECK(q.as<std::byte>().size() == 5);

  const dsv32::TensorInfo& s = file->at("s");
  CHECK(s.shape.empty());
  CHECK(s.shape_str() == "[]");
  CHECK(s.numel() == 1);
  std::int64_t sv = 0;
  s.copy_to(&sv);
  CHECK(sv == -42);

  const dsv32::TensorInfo& e = file->at("e");
  CHECK(e.numel() == 0);
  CHECK(e.bytes() == 0);
  CHECK(e.as<std::int64_t>().empty());

  CHECK(file->find("missing") == nullptr);
  CHECK(file->find("") == nullptr);
  check_error([&] { file->at("missing"); }, ErrorKind::invalid_file, {p.string(), "'missing'"});
}

TEST_CASE("as<T> refuses misaligned data while copy_to and read_as_f32 still read it") {
  TempDir dir;
  // Pad the header so the data section starts at an odd file offset (the mapping is page-aligned).
  std::string header = std::string("{\"w\":{") + kValidEntry + "},\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]}}";
  while ((8 + header.size()) % 8 != 1) header += ' ';
  const float values[2] = {1.5f, -2.25f};
  const std::uint16_t halves[3] = {bf16_bits(1.0f), bf16_bits(-3.5f), bf16_bits(0.125f)};
  std::string data(reinterpret_cast<const char*>(values), 8);
  data.append(reinterpret_cast<const char*>(halves), 6);
  const fs::path p = dir / "odd.safetensors";
  write_file(p, raw_file(header, data));

  auto file = SafetensorsFile::open(p);
  const auto& w = file->at("w");
  check_error([&] { w.as<float>(); }, ErrorKind::unsupported, {"'w'", "misaligned", "copy_to"});
  float out[2] = {};
  w.copy_to(out);
  CHECK(out[0] == 1.5f);
  CHECK(out[1] == -2.25f);
  w.read_as_f32(out);
  CHECK(out[1] == -2.25f);

  const auto& h = file->at("h");
  check_error([&] { h.as<std::uint16_t>(); }, ErrorKind::unsupported, {"'h'"});
  float hf[3] = {};
  h.read_as_f32(hf);
  CHECK(hf[0] == 1.0f);
  CHECK(hf[1] == -3.5f);
  CHECK(hf[2] == 0.125f);
  CHECK(h.as<std::byte>().size() == 6);  // bytes are never misaligned
}

TEST_CASE("aligned F32 data is viewed in place, and keep_alive() holds the mapping") {
  TempDir dir;
  const fs::path p = dir / "f32.safetensors";
  std::vector<float> v(100);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  {
    SafetensorsWriter writer;
    writer.add("x", DType::F32, {10, 10}, v.data(), v.size() * 4);
    writer.write(p);
  }
  auto file = SafetensorsFile::open(p);
  std::shared_ptr<const void> owner = file->keep_alive();
  const dsv32::TensorInfo* x = file->find("x");
  const std::span<const float> view = x->as<float>();
  file.reset();  // the owner alone keeps the file mapped
  REQUIRE(view.size() == 100);
  CHECK(std::vector<float>(view.begin(), view.end()) == v);
  CHECK(x->name == "x");
}

TEST_CASE("writer streams producers, writes empty files and leaves nothing behind on failure") {
  TempDir dir;
  const fs::path p = dir / "stream.safetensors";
  std::vector<std::int32_t> big(1000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::int32_t>(i * 7919 % 1000);
  {
    SafetensorsWriter writer;
    writer.add("big", DType::I32, {1000}, [&](const SafetensorsWriter::Sink& sink) {
      const auto* bytes = reinterpret_cast<const char*>(big.data());
      for (std::size_t off = 0; off < 4000; off += 7) sink(bytes + off, std::min<std::size_t>(7, 4000 - off));
    });
    writer.add("small", DType::U8, {3}, [](const SafetensorsWriter::Sink& sink) {
      const std::uint8_t x[3] = {1, 2, 3};
      sink(x, 3);
    });
    CHECK(writer.size() == 2);
    CHECK(writer.data_bytes() == 4003);
    writer.write(p);
  }
  auto file = SafetensorsFile::open(p);
  const auto& t = file->at("big");
  CHECK(t.dtype == DType::I32);
  std::vector<std::int32_t> back(1000);
  t.copy_to(back.data());
  CHECK(back == big);
  CHECK(file->at("small").as<std::uint8_t>()[2] == 3);

  // Raw layout: little-endian length, header padded with spaces to a multiple of 8.
  const std::string bytes = read_file(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes[8] == '{');
  CHECK(bytes.size() == 8 + n + 4003);

  // An empty writer writes a valid empty file.
  const fs::path empty = dir / "empty.safetensors";
  SafetensorsWriter().write(empty);
  CHECK(SafetensorsFile::open(empty)->tensors().empty());
  CHECK(read_file(empty).size() == 16);

  // Failures keep the previous file intact and remove the temporary file.
  const std::string before = read_file(p);
  const std::size_t entries = dir.entries();
  {
    SafetensorsWriter writer;
    writer.add("a", DType::F32, {2}, [](const SafetensorsWriter::Sink& sink) {
      const float x = 1.0f;
      sink(&x, 4);  // 4 of 8 bytes
    });
    check_error([&] { writer.write(p); }, ErrorKind::invalid_argument, {"'a'", "passed 4 bytes, expected 8"});
  }
  {
    SafetensorsWriter writer;
    writer.add("a", DType::F32, {1}, [](const SafetensorsWriter::Sink& sink) {
      const double x = 1.0;
      sink(&x, 8);
    });
    check_error([&] { writer.write(p); }, ErrorKind::invalid_argument, {"'a'", "more than its 4 bytes"});
  }
  {
    SafetensorsWriter writer;
    writer.add("a", DType::F32, {1}, [](const SafetensorsWriter::Sink&) { throw std::runtime_error("converter failed"); });
    CHECK_THROWS_WITH_AS(writer.write(p), "converter failed", std::runtime_error);
  }
  CHECK(read_file(p) == before);
  CHECK(dir.entries() == entries);

  const fs::path nowhere = dir / "no" / "such" / "dir" / "x.safetensors";
  check_error([&] { SafetensorsWriter().write(nowhere); }, ErrorKind::io, {nowhere.string(), "No such file or directory"});
}

TEST_CASE("writer handles tensors larger than its write buffer") {
  TempDir dir;
  const fs::path p = dir / "large.safetensors";
  std::vector<std::uint8_t> big(std::size_t{5} << 20);  // larger than the writer's 4 MiB buffer
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 31 + (i >> 12));
  SafetensorsWriter writer;
  writer.add("a_small", DType::U8, {3}, big.data(), 3);
  writer.add("b_big", DType::U8, {static_cast<std::int64_t>(big.size())}, big.data(), big.size());
  writer.add("c_chunks", DType::U8, {static_cast<std::int64_t>(big.size())}, [&](const SafetensorsWriter::Sink& sink) {
    const std::size_t chunk = std::size_t{3} << 20;
    for (std::size_t off = 0; off < big.size(); off += chunk) sink(big.data() + off, std::min(chunk, big.size() - off));
  });
  writer.write(p);
  auto file = SafetensorsFile::open(p);
  for (const char* name : {"b_big", "c_chunks"}) {
    const auto bytes = file->at(name).as<std::uint8_t>();
    CHECK(std::equal(bytes.begin(), bytes.end(), big.begin(), big.end()));
  }
  CHECK(file->at("a_small").as<std::uint8_t>()[2] == big[2]);
}

TEST_CASE("writer rejects bad tensors and metadata") {
  SafetensorsWriter writer;
  const float x[4] = {};
  writer.add("w", DType::F32, {4}, x, 16);
  check_error([&] { writer.add("w", DType::F32, {4}, x, 16); }, ErrorKind::invalid_argument, {"'w'", "already"});
  check_error([&] { writer.add("v", DType::F32, {2, 3}, x, 16); }, ErrorKind::invalid_argument,
              {"'v'", "F32 [2, 3] needs 24 bytes but 16"});
  check_error([&] { writer.add("v", DType::F32, {4}, nullptr, 16); }, ErrorKind::invalid_argument, {"'v'", "null"});
  check_error([&] { writer.add("__metadata__", DType::F32, {4}, x, 16); }, ErrorKind::invalid_argument, {"reserved"});
  check_error([&] { writer.add("n", DType::F32, {-1}, x, 0); }, ErrorKind::invalid_argument, {"'n'", "[-1]"});
  check_error([&] { writer.add("o", DType::BF16, {std::int64_t{1} << 62, 4}, x, 0); }, ErrorKind::invalid_argument, {"'o'"});
  check_error([&] { writer.add("bad\xff", DType::F32, {4}, x, 16); }, ErrorKind::invalid_argument, {"UTF-8"});
  check_error([&] { writer.add("p", DType::F32, {4}, SafetensorsWriter::Producer{}); }, ErrorKind::invalid_argument,
              {"'p'", "empty producer"});
  writer.add_metadata("k", "v");
  check_error([&] { writer.add_metadata("k", "v2"); }, ErrorKind::invalid_argument, {"'k'", "already"});
  check_error([&] { writer.add_metadata("k2", "\xc0\x80"); }, ErrorKind::invalid_argument, {"UTF-8"});
  CHECK(writer.size() == 1);  // failed adds leave nothing behind
}

TEST_CASE("open reports missing files as io and non-safetensors sizes as invalid_file") {
  TempDir dir;
  check_error([&] { SafetensorsFile::open(dir / "missing.safetensors"); }, ErrorKind::io,
              {"missing.safetensors", "No such file or directory"});
  check_invalid(dir, "", {"0 bytes", "too short"});
  check_invalid(dir, "abcde", {"5 bytes", "too short"});
  check_invalid(dir, raw_file("{}", "", 100), {"says 100 bytes but only 2 bytes follow", "truncated"});
  check_invalid(dir, raw_file("{}", "", ~std::uint64_t{0}), {"18446744073709551615", "100000000"});
  check_invalid(dir, raw_file("{}", "", 100'000'001), {"100000001", "more than the 100000000"});
}

TEST_CASE("open rejects headers that are not a JSON object") {
  TempDir dir;
  check_invalid(dir, raw_file("{not json}"), {"not valid UTF-8 JSON"});
  check_invalid(dir, raw_file(""), {"0-byte header is not valid"});
  check_invalid(dir, raw_file(std::string("{}\0\0\0\0\0\0", 8)), {"NUL byte at offset 2"});  // NUL padding
  check_invalid(dir, raw_file(std::string("{}\0{\"x\":1}", 10)), {"NUL byte"});  // nlohmann would stop at the NUL
  check_invalid(dir, raw_file("{\"w\xff\":{}}"), {"not valid UTF-8 JSON"});
  check_invalid(dir, raw_file("[]"), {"header is a JSON array", "expected an object"});
  check_invalid(dir, raw_file("42"), {"header is a JSON number"});
  check_invalid(dir, raw_file(std::string(100, '[') + std::string(100, ']')), {"deeper than 16"});
  check_invalid(dir, raw_file("{\"w\":{\"a\":" + std::string(40, '[') + std::string(40, ']') + "}}"), {"deeper than 16"});

  // Space padding is part of the format.
  const fs::path p = dir / "padded.safetensors";
  write_file(p, raw_file("{}      "));
  CHECK(SafetensorsFile::open(p)->tensors().empty());
}

TEST_CASE("open rejects malformed tensor entries, naming the tensor") {
  TempDir dir;
  const std::string data8(8, '\0');
  auto entry = [&](const std::string& body) { return raw_file("{\"w\":" + body + "}", data8); };
  check_invalid(dir, entry("[1,2]"), {"tensor 'w'", "entry is a JSON array", "expected an object"});
  check_invalid(dir, entry("\"F32\""), {"tensor 'w'", "entry is a JSON string"});
  check_invalid(dir, entry(R"({"shape":[2],"data_offsets":[0,8]})"), {"tensor 'w'", "no \"dtype\""});
  check_invalid(dir, entry(R"({"dtype":"F32","data_offsets":[0,8]})"), {"tensor 'w'", "no \"shape\""});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2]})"), {"tensor 'w'", "no \"data_offsets\""});
  check_invalid(dir, entry(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})"), {"tensor 'w'", "dtype is a JSON number"});
  check_invalid(dir, entry(R"({"dtype":"F8_E5M2","shape":[8],"data_offsets":[0,8]})"),
                {"tensor 'w'", "unknown dtype 'F8_E5M2'", "BF16"});
  check_invalid(dir, entry(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), {"unknown dtype 'f32'"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"), {"tensor 'w'", "shape is a JSON string"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), {"tensor 'w'", "shape[0] is 2.0"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[1,-2],"data_offsets":[0,8]})"), {"tensor 'w'", "shape[1] is -2"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[true],"data_offsets":[0,8]})"), {"shape[0] is true"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]})"),
                {"shape[0] is 9223372036854775808", "below 2^63"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), {"tensor 'w'", "two non-negative integers"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"), {"two non-negative integers"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,7]})"), {"data_offsets is [-1,7]"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2],"data_offsets":["0","8"]})"), {"two non-negative integers"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2],"data_offsets":{"begin":0}})"), {"two non-negative integers"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), {"tensor 'w'", "[8, 0] end before"});
  check_invalid(dir, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1})"),
                {"tensor 'w'", "unexpected field 'extra'"});
  // Control characters in names are escaped in messages.
  check_invalid(dir, raw_file("{\"a\\u0001\":[]}"), {"tensor 'a\\x01'"});
}

TEST_CASE("open rejects byte sizes that disagree with dtype and shape, or overflow") {
  TempDir dir;
  check_invalid(dir, raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
                {"tensor 'w'", "F32 [3] needs 12 bytes but data_offsets [0, 8] span 8"});
  check_invalid(dir, raw_file(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", std::string(4, '\0')),
                {"tensor 'w'", "BF16 [2, 2] needs 8 bytes"});
  // 2^32 * 2^32 elements overflow int64 (and uint64).
  check_invalid(dir, raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                {"tensor 'w'", "shape [4294967296, 4294967296]", "overflows"});
  // 2^61 elements fit, but 2^61 * 4 bytes do not.
  check_invalid(dir, raw_file(R"({"w":{"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,0]}})"),
                {"tensor 'w'", "overflows"});
  // A product that wraps to a small number must not pass: 2^33 * 2^31 * 2 = 2^65 -> 0 mod 2^64.
  check_invalid(dir, raw_file(R"({"w":{"dtype":"U8","shape":[8589934592,2147483648,2],"data_offsets":[0,0]}})"),
                {"tensor 'w'", "overflows"});
  // A zero dimension makes the tensor empty however large the others are.
  const fs::path p = dir / "zero.safetensors";
  write_file(p, raw_file(R"({"z":{"dtype":"F32","shape":[4294967296,0,4294967296],"data_offsets":[0,0]}})"));
  CHECK(SafetensorsFile::open(p)->at("z").numel() == 0);
}

TEST_CASE("open rejects tensors past the end of the file (truncation)") {
  TempDir dir;
  check_invalid(dir, raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')),
                {"tensor 'w'", "data section, which holds 8 bytes", "truncated"});

  const fs::path p = dir / "full.safetensors";
  Sample().write(p);
  const std::string full = read_file(p);
  for (std::size_t cut : {std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
    CAPTURE(cut);
    // The last tensor in name order, 'w' (24 bytes), loses its tail.
    check_invalid(dir, full.substr(0, full.size() - cut),
                  {"tensor 'w'", "promises at least " + std::to_string(full.size()), "it has " + std::to_string(full.size() - cut),
                   "truncated"});
  }
  check_invalid(dir, full.substr(0, 20), {"truncated"});  // cut inside the header
  check_invalid(dir, full.substr(0, 7), {"too short"});
}

TEST_CASE("open rejects overlapping tensors, holes and trailing bytes") {
  TempDir dir;
  const std::string data12(12, '\0');
  check_invalid(dir,
                raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         data12),
                {"tensors 'a'", "'b'", "overlap"});
  check_invalid(dir,
                raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         std::string(8, '\0')),
                {"'a'", "'b'", "overlap"});
  // An empty tensor placed inside another one.
  check_invalid(dir,
                raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                         std::string(8, '\0')),
                {"'a'", "'e'", "overlap"});
  check_invalid(dir,
                raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                         data12),
                {"bytes [4, 8)", "hole between 'a' and 'b'"});
  check_invalid(dir, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
                {"bytes [0, 4)", "hole before 'a'"});
  check_invalid(dir, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0')),
                {"holds 8 bytes", "only the first 4", "4 trailing bytes after 'a'"});
  check_invalid(dir, raw_file("{}", "xyz"), {"holds 3 bytes", "3 trailing bytes"});

  // Empty tensors at tensor boundaries (and at the end) are fine, and tensors may be listed in any order.
  const fs::path p = dir / "ok.safetensors";
  write_file(p, raw_file(R"({"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("y":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                         R"("x":{"dtype":"I8","shape":[0,5],"data_offsets":[4,4]},)"
                         R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                         R"("q":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}})",
                         std::string(8, '\0')));
  auto file = SafetensorsFile::open(p);
  std::vector<std::string> order;
  for (const auto& t : file->tensors()) order.push_back(t.name);
  CHECK(order == std::vector<std::string>{"z", "x", "y", "a", "q"});
  CHECK(file->find("y") != nullptr);
}

TEST_CASE("open rejects duplicate keys that nlohmann::json would silently merge") {
  TempDir dir;
  const std::string data8(8, '\0');
  const std::string e = std::string("{") + kValidEntry + "}";
  check_invalid(dir, raw_file("{\"w\":" + e + ",\"w\":" + e + "}", data8), {"tensor 'w' appears twice"});
  check_invalid(dir, raw_file(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8),
                {"key 'dtype' appears twice inside the header entry 'w'"});
  check_invalid(dir, raw_file("{\"__metadata__\":{},\"w\":" + e + ",\"__metadata__\":{}}", data8),
                {"two \"__metadata__\""});
  check_invalid(dir, raw_file(R"({"__metadata__":{"k":"a","k":"b"}})"), {"'k' appears twice", "'__metadata__'"});
}

TEST_CASE("open checks __metadata__") {
  TempDir dir;
  check_invalid(dir, raw_file(R"({"__metadata__":[1,2]})"), {"\"__metadata__\" is a JSON array", "object of string values"});
  check_invalid(dir, raw_file(R"({"__metadata__":"x"})"), {"\"__metadata__\" is a JSON string"});
  check_invalid(dir, raw_file(R"({"__metadata__":{"k":1}})"), {"entry 'k' is a JSON number", "expected a string"});
  check_invalid(dir, raw_file(R"({"__metadata__":{"k":{"x":"y"}}})"), {"entry 'k' is a JSON object"});
  const fs::path p = dir / "meta.safetensors";
  write_file(p, raw_file(R"({"__metadata__":{}})"));
  CHECK(SafetensorsFile::open(p)->metadata().empty());
}

TEST_CASE("fuzz: corrupting the length field and header never crashes and never yields out-of-bounds tensors") {
  TempDir dir;
  const fs::path base_path = dir / "base.safetensors";
  Sample().write(base_path);
  const std::string base = read_file(base_path);
  auto base_file = SafetensorsFile::open(base_path);
  const std::size_t header_end = static_cast<std::size_t>(base_file->data_offset());
  base_file.reset();

  static constexpr char kJsonChars[] = "{}[]\":,0123456789-+eE. \\ufFIBU_";
  std::mt19937 rng(20250929);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const fs::path p = dir / "fuzz.safetensors";
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string bytes = base;
    switch (iter % 5) {
      case 0:  // random bytes anywhere in the length field or header
        for (std::size_t k = 1 + pick(4); k > 0; --k) bytes[pick(header_end)] = static_cast<char>(rng() & 0xff);
        break;
      case 1:  // JSON punctuation and digits in the header
        for (std::size_t k = 1 + pick(3); k > 0; --k) bytes[8 + pick(header_end - 8)] = kJsonChars[pick(sizeof kJsonChars - 1)];
        break;
      case 2:  // one bit of the length field
      {
        const std::size_t at = pick(8);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << pick(8)));
      }
        break;
      case 3: {  // insert or erase a header character, keeping the length field consistent
        const std::size_t at = 8 + pick(header_end - 8);
        std::uint64_t n = header_end - 8;
        if (rng() & 1) {
          bytes.insert(at, 1, kJsonChars[pick(sizeof kJsonChars - 1)]);
          ++n;
        } else {
          bytes.erase(at, 1);
          --n;
        }
        for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
        break;
      }
      case 4:  // truncation anywhere
        bytes.resize(pick(bytes.size()));
        break;
    }
    write_file(p, bytes);
    try {
      auto file = SafetensorsFile::open(p);
      ++opened;
      const std::byte* lo = file->mapping().data() + file->data_offset();
      const std::byte* hi = file->mapping().data() + file->mapping().size();
      std::uint64_t covered = 0;
      unsigned sum = 0;
      for (const auto& t : file->tensors()) {
        REQUIRE(t.data >= lo);
        REQUIRE(t.data + t.bytes() <= hi);
        REQUIRE(t.bytes() == static_cast<std::size_t>(t.numel()) * dsv32::dtype_size(t.dtype));
        for (std::byte b : t.raw()) sum += static_cast<unsigned>(b);  // touch every byte
        covered += t.bytes();
      }
      CHECK(covered == file->data_size());
      (void)sum;
    } catch (const dsv32::Error& e) {
      ++rejected;
      const bool expected_kind = e.kind() == ErrorKind::invalid_file;
      CHECK_MESSAGE(expected_kind, e.what());
    }
  }
  INFO("fuzz: ", opened, " corrupted files opened, ", rejected, " rejected");
  CHECK(rejected > 0);
  CHECK(opened > 0);  // harmless edits (spaces, metadata text) must still open
}

}  // TEST_SUITE
