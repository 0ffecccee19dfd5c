// Tests of dsv32/io/mmap.hpp: MappedFile maps whole files read-only and reports OS errors as
// ErrorKind::io with the path and the reason.
#include "dsv32/io/mmap.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include "support/test_support.hpp"

using dsv32::test::check_error;
using dsv32::test::TempDir;

namespace {

namespace fs = std::filesystem;


void write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}


}  // namespace

TEST_SUITE("io/mmap") {

TEST_CASE("MappedFile maps a file's bytes and moves ownership") {
  TempDir dir;
  const fs::path p = dir.path / "data.bin";
  const std::string content = "hello, mapped world";
  write_file(p, content);

  dsv32::MappedFile m(p);
  REQUIRE(m.size() == content.size());
  CHECK_FALSE(m.empty());
  CHECK(m.path() == p);
  CHECK(std::memcmp(m.data(), content.data(), content.size()) == 0);
  CHECK(m.bytes().size() == content.size());
  m.advise(dsv32::MappedFile::Advice::will_need);
  m.advise(dsv32::MappedFile::Advice::sequential, 3, 4);
  m.advise(dsv32::MappedFile::Advice::random, 1000);  // past the end: ignored

  const std::byte* data = m.data();
  dsv32::MappedFile moved(std::move(m));
  CHECK(moved.data() == data);
  CHECK(moved.size() == content.size());
  CHECK(m.data() == nullptr);  // NOLINT(bugprone-use-after-move): a moved-from file is empty
  CHECK(m.size() == 0);

  dsv32::MappedFile assigned;
  assigned = std::move(moved);
  CHECK(assigned.data() == data);
  CHECK(std::memcmp(assigned.data(), content.data(), content.size()) == 0);
}

TEST_CASE("MappedFile maps an empty file as nothing") {
  TempDir dir;
  const fs::path p = dir.path / "empty.bin";
  write_file(p, "");
  dsv32::MappedFile m(p);
  CHECK(m.size() == 0);
  CHECK(m.data() == nullptr);
  CHECK(m.empty());
  m.advise(dsv32::MappedFile::Advice::will_need);
}

TEST_CASE("MappedFile reports OS errors as ErrorKind::io with the path and reason") {
  TempDir dir;
  const fs::path missing = dir.path / "missing.bin";
  check_error([&] { dsv32::MappedFile m(missing); }, dsv32::ErrorKind::io,
              {missing.string(), "No such file or directory"});
  check_error([&] { dsv32::MappedFile m(dir.path); }, dsv32::ErrorKind::io, {dir.path.string(), "directory"});

  const fs::path fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  check_error([&] { dsv32::MappedFile m(fifo); }, dsv32::ErrorKind::io, {fifo.string(), "not a regular file"});
}

// Root reads any file, so this case cannot fail there: it says so and checks nothing. ctest runs it
// on its own as dsv32_unit_mmap_permission, which reports SKIP on that message.
TEST_CASE("MappedFile refuses a file it may not read (skipped when run as root)") {
  if (::geteuid() == 0) {
    MESSAGE("SKIPPED: running as root, which may read any file: the permission check was not tested");
    return;
  }
  TempDir dir;
  const fs::path locked = dir.path / "locked.bin";
  write_file(locked, "secret");
  fs::permissions(locked, fs::perms::none);
  check_error([&] { dsv32::MappedFile m(locked); }, dsv32::ErrorKind::io, {locked.string(), "Permission denied"});
}

}  // TEST_SUITE
