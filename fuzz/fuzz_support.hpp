// Shared by the libFuzzer targets in fuzz/: a scratch directory on a RAM disk for the entry points
// that read files, and the rule every target enforces — bad input may only ever produce a
// dsv32::Error with a message; anything else (another exception, a crash, a sanitizer report, a
// broken invariant checked with FUZZ_CHECK) is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <dsv32/core/error.hpp>

namespace dsv32::fuzz {

/// Aborts (a libFuzzer crash, with the input saved) when `cond` is false.
#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

/// The bytes of a fuzz input as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A directory private to this process (on /dev/shm when there is one, so writing an input per
/// execution costs no disk I/O), removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm")
                                                      : std::filesystem::temp_directory_path();
    path_ = base / ("dsv32_fuzz_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

  /// Writes `text` to `name` inside the directory (replacing it) and returns its path.
  std::filesystem::path write(const std::string& name, std::string_view text) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", p.c_str());
      std::abort();
    }
    return p;
  }

 private:
  std::filesystem::path path_;
};

/// The process's scratch directory.
inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

/// Runs `f`; a dsv32::Error is the accepted outcome of bad input (its message must say something),
/// everything else escapes and is reported by libFuzzer. Returns whether `f` completed.
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const dsv32::Error& e) {
    const std::string prefix = std::string("dsv32 [") + dsv32::to_string(e.kind()) + "]: ";
    const std::string_view what = e.what();
    FUZZ_CHECK(what.starts_with(prefix) && what.size() > prefix.size() + 8);  // says what went wrong
    return false;
  }
}

}  // namespace dsv32::fuzz
