// dsv32/core/filesystem.hpp: file-system queries that fail as dsv32::Error(io), never as
// std::filesystem::filesystem_error, and the readers that ask through them. Found by fuzzing
// (fuzz/regressions/hf_index/shard_name_too_long.json): an index naming a shard whose name is longer
// than NAME_MAX made std::filesystem::exists() throw filesystem_error out of HfCheckpointSource.
#include "dsv32/core/filesystem.hpp"
#include "dsv32/core/json.hpp"
#include "dsv32/io/checkpoint.hpp"
#include "dsv32/io/hf_checkpoint.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using dsv32::ErrorKind;
using dsv32::test::check_error;
using dsv32::test::TempDir;

// A file name of 300 bytes: past NAME_MAX (255) on every Linux file system, so stat() fails with
// ENAMETOOLONG rather than ENOENT.
const std::string kLongName = std::string(300, 'y') + ".safetensors";

void touch(const fs::path& p) { std::ofstream(p) << "x"; }

}  // namespace

TEST_CASE("path_status: files, directories and missing paths answer; a failing query is Error(io)") {
  TempDir tmp("fsq");
  touch(tmp / "file");
  fs::create_directory(tmp / "dir");

  CHECK(dsv32::detail::path_exists(tmp / "file"));
  CHECK(dsv32::detail::path_is_regular_file(tmp / "file"));
  CHECK_FALSE(dsv32::detail::path_is_directory(tmp / "file"));
  CHECK(dsv32::detail::path_is_directory(tmp / "dir"));
  CHECK_FALSE(dsv32::detail::path_is_regular_file(tmp / "dir"));
  // not there: an answer, not an error (ENOENT, and ENOTDIR for a path through a file)
  CHECK_FALSE(dsv32::detail::path_exists(tmp / "absent"));
  CHECK(dsv32::detail::path_status(tmp / "absent").type() == fs::file_type::not_found);
  CHECK_FALSE(dsv32::detail::path_exists(tmp / "file" / "below"));

  // std::filesystem throws here; the helpers fail as dsv32::Error naming the path and the reason
  CHECK_THROWS_AS((void)fs::exists(tmp / kLongName), fs::filesystem_error);
  check_error([&] { (void)dsv32::detail::path_exists(tmp / kLongName); }, ErrorKind::io,
              {"cannot examine ", (tmp / kLongName).string(), "File name too long"});
  fs::create_symlink("loop", tmp / "loop");  // a link to itself
  check_error([&] { (void)dsv32::detail::path_is_directory(tmp / "loop"); }, ErrorKind::io,
              {"cannot examine ", (tmp / "loop").string(), "Too many levels of symbolic links"});
}

TEST_CASE("directory_entries: lists a directory; a missing one or a file is Error(io)") {
  TempDir tmp("fsl");
  touch(tmp / "a");
  touch(tmp / "b");
  fs::create_directory(tmp / "c");
  std::vector<std::string> names;
  for (const auto& e : dsv32::detail::directory_entries(tmp.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"a", "b", "c"});
  CHECK(dsv32::detail::directory_entries(tmp / "c").empty());
  check_error([&] { (void)dsv32::detail::directory_entries(tmp / "absent"); }, ErrorKind::io,
              {"cannot list directory ", (tmp / "absent").string(), "No such file or directory"});
  check_error([&] { (void)dsv32::detail::directory_entries(tmp / "a"); }, ErrorKind::io,
              {"cannot list directory ", (tmp / "a").string(), "Not a directory"});
}

TEST_CASE("the readers of checkpoints and JSON files: a path the system refuses is Error(io)") {
  TempDir tmp("fsr");
  const fs::path too_long = tmp / kLongName;
  fs::create_symlink("loop", tmp / "loop");
  const fs::path loop = tmp / "loop";
  for (const fs::path& p : {too_long, loop}) {
    CAPTURE(p.filename().string().substr(0, 16));
    check_error([&] { (void)dsv32::detect_checkpoint_layout(p); }, ErrorKind::io, {"cannot examine ", p.string()});
    check_error([&] { (void)dsv32::read_model_config(p); }, ErrorKind::io, {"cannot examine ", p.string()});
    check_error([&] { dsv32::HfCheckpointSource source(p); }, ErrorKind::io, {"cannot examine ", p.string()});
    check_error([&] { (void)dsv32::read_json_file_strict(p, ErrorKind::invalid_file); }, ErrorKind::io,
                {"cannot examine ", p.string()});
  }
}
