/// \file
/// \brief Queries of the file system that fail as dsv32::Error, never as std::filesystem_error.
///
/// std::filesystem::exists(), is_directory() and directory_iterator throw filesystem_error when
/// the query itself fails: a file name longer than NAME_MAX (a shard name taken from an index), a
/// directory on the way that may not be searched, a loop of symbolic links. Every reader of files
/// from someone else asks through these instead, so that such a path ends in Error(io) naming the
/// path and the system's reason, as any other unreadable input does.
#pragma once

#include <filesystem>
#include <system_error>
#include <vector>

#include "dsv32/core/error.hpp"

namespace dsv32::detail {

/// What the file system says of `path`, symbolic links followed. A path that does not exist (or
/// whose parent is not a directory) reads as std::filesystem::file_type::not_found.
/// \throws Error(io) when the status cannot be determined, naming the path and the reason.
inline std::filesystem::file_status path_status(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec && status.type() == std::filesystem::file_type::none)
    fail(ErrorKind::io, "cannot examine ", path.string(), ": ", ec.message());
  return status;
}

/// Whether `path` exists. \throws Error(io) as path_status().
inline bool path_exists(const std::filesystem::path& path) { return std::filesystem::exists(path_status(path)); }

/// Whether `path` is a directory (or a link to one). \throws Error(io) as path_status().
inline bool path_is_directory(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path_status(path));
}

/// Whether `path` is a regular file (or a link to one). \throws Error(io) as path_status().
inline bool path_is_regular_file(const std::filesystem::path& path) {
  return std::filesystem::is_regular_file(path_status(path));
}

/// The entries of directory `dir`, in the order the system lists them.
/// \throws Error(io) when it cannot be opened or read, naming the directory and the reason.
inline std::vector<std::filesystem::directory_entry> directory_entries(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::filesystem::directory_entry> entries;
  std::filesystem::directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) entries.push_back(*it);
  if (ec) fail(ErrorKind::io, "cannot list directory ", dir.string(), ": ", ec.message());
  return entries;
}

}  // namespace dsv32::detail
