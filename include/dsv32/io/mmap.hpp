/// \file
/// \brief A whole file mapped read-only into memory (POSIX mmap), owned by an RAII handle.
///
/// Checkpoints are read through a mapping rather than read() into buffers: the model borrows
/// weight memory straight from the page cache, and only the pages it touches are ever read.
///
/// The mapping reflects the file on disk. If another process truncates the file while it is
/// mapped, touching the lost pages raises SIGBUS; checkpoints must not be rewritten in place
/// while a model reads them (SafetensorsWriter replaces files by rename, which is safe).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup io
/// @{

/// \brief A read-only mapping of a whole regular file; move-only.
///
/// An empty file is valid: data() is nullptr and size() is 0. Every failure (missing file,
/// permission, a directory or other non-regular file, mmap refusing) throws
/// Error(ErrorKind::io) with the path and the operating system's reason.
class MappedFile {
 public:
  /// \brief Access patterns forwarded to madvise(); hints only.
  enum class Advice {
    normal,      ///< MADV_NORMAL
    sequential,  ///< MADV_SEQUENTIAL: read ahead aggressively, drop pages soon after use
    random,      ///< MADV_RANDOM: no read-ahead
    will_need,   ///< MADV_WILLNEED: start reading the range into the page cache now
    dont_need,   ///< MADV_DONTNEED: the range may be dropped (it is re-read from disk if touched)
  };

  /// \brief No file: data() is nullptr, size() is 0.
  MappedFile() noexcept = default;

  /// \brief Maps `path` read-only.
  /// \throws Error(ErrorKind::io) if the file cannot be opened, is not a regular file, or cannot be mapped.
  explicit MappedFile(std::filesystem::path path) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO must not hang us
    if (fd < 0) fail_errno("cannot open");
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};  // the mapping outlives the descriptor

    struct stat st {};
    if (::fstat(fd, &st) != 0) fail_errno("cannot stat");
    if (S_ISDIR(st.st_mode)) fail(ErrorKind::io, "cannot map '", path_.string(), "': it is a directory, not a file");
    if (!S_ISREG(st.st_mode)) fail(ErrorKind::io, "cannot map '", path_.string(), "': not a regular file");
    if (st.st_size <= 0) return;
    if (static_cast<std::uintmax_t>(st.st_size) > std::numeric_limits<std::size_t>::max())
      fail(ErrorKind::io, "cannot map '", path_.string(), "': ", st.st_size, " bytes exceed the address space");

    const auto size = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) fail_errno("cannot mmap");
    data_ = static_cast<const std::byte*>(p);
    size_ = size;
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  /// \brief Takes over `o`'s mapping; `o` is left empty.
  MappedFile(MappedFile&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}
  /// \brief Unmaps this file and takes over `o`'s mapping; `o` is left empty.
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      unmap();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  /// \brief Unmaps the file; pointers into it dangle afterwards.
  ~MappedFile() { unmap(); }

  /// \brief First byte of the file; nullptr for an empty file.
  const std::byte* data() const noexcept { return data_; }
  /// \brief Size of the file in bytes.
  std::size_t size() const noexcept { return size_; }
  /// \brief Whether the file is empty (or nothing is mapped).
  bool empty() const noexcept { return size_ == 0; }
  /// \brief The whole file as bytes.
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  /// \brief The path the file was opened with.
  const std::filesystem::path& path() const noexcept { return path_; }

  /// \brief Passes an access-pattern hint for bytes [offset, offset + length) to the kernel.
  ///
  /// Best effort: the range is clipped to the file and widened to whole pages; failures are
  /// ignored because a hint never changes what is read.
  void advise(Advice advice, std::size_t offset = 0,
              std::size_t length = std::numeric_limits<std::size_t>::max()) const noexcept {
    if (!data_ || offset >= size_) return;
    length = std::min(length, size_ - offset);
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t first = page ? offset / page * page : offset;
    int how = MADV_NORMAL;
    switch (advice) {
      case Advice::normal: how = MADV_NORMAL; break;
      case Advice::sequential: how = MADV_SEQUENTIAL; break;
      case Advice::random: how = MADV_RANDOM; break;
      case Advice::will_need: how = MADV_WILLNEED; break;
      case Advice::dont_need: how = MADV_DONTNEED; break;
    }
    // madvise takes a non-const pointer; the advice kinds above never write to the mapping.
    ::madvise(const_cast<std::byte*>(data_) + first, offset + length - first, how);
  }

 private:
  [[noreturn]] void fail_errno(const char* what) const {
    const int err = errno;
    fail(ErrorKind::io, what, " '", path_.string(), "': ", std::generic_category().message(err));
  }
  void unmap() noexcept {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::filesystem::path path_;
};

/// @}

}  // namespace dsv32
