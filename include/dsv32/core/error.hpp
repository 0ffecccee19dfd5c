/// \file
/// \brief The one exception type dsv32 throws, and the checks that raise it.
///
/// Host code reports bad input (malformed files, wrong shapes, out-of-range tokens, a config that
/// disagrees with a checkpoint) by throwing dsv32::Error with a message that names what was
/// expected, what was found, and where (tensor, field, file). Nothing is half-loaded silently.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dsv32 {

/// \defgroup core Core types
/// \brief Errors, dtypes, buffers and the parallelism seam shared by every layer.
/// @{

/// \brief Category of an error, so callers can react without parsing messages
///        (in the spirit of nlohmann/json's exception ids).
enum class ErrorKind {
  invalid_argument,  ///< a call's arguments are out of range (batch, position, token id, shape)
  invalid_config,    ///< a config.json field is missing, mistyped, unknown or disagrees
  invalid_file,      ///< a file is malformed, truncated or holds the wrong tensors
  io,                ///< the operating system refused an operation (open, mmap, write)
  unsupported,       ///< valid input that this build cannot handle (e.g. no CUDA device)
  state,             ///< the object is not ready for the call (e.g. weights not loaded)
  out_of_memory,     ///< a memory plan larger than what the backend's memory has available
  busy,              ///< a queue is full (the serving engine's waiting requests): retry later
};

/// \brief Name of an ErrorKind as printed in messages.
inline const char* to_string(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::invalid_argument: return "invalid_argument";
    case ErrorKind::invalid_config: return "invalid_config";
    case ErrorKind::invalid_file: return "invalid_file";
    case ErrorKind::io: return "io";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::state: return "state";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::busy: return "busy";
  }
  return "unknown";
}

/// \brief The exception thrown by every dsv32 host function.
///
/// `what()` reads `dsv32 [kind]: message`.
class Error : public std::runtime_error {
 public:
  /// \brief An error of category `kind`; `message` should say what was expected, what was found and
  ///        which tensor, field or file.
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error("dsv32 [" + std::string(to_string(kind)) + "]: " + message), kind_(kind),
        message_(message) {}

  /// \brief The category of the failure.
  ErrorKind kind() const noexcept { return kind_; }
  /// \brief The message without the `dsv32 [kind]: ` prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

/// \brief Throws Error(kind, concatenation of args) — the message pieces are streamed.
template <class... Args>
[[noreturn]] void fail(ErrorKind kind, Args&&... args) {
  throw Error(kind, detail::concat(std::forward<Args>(args)...));
}

/// @}

}  // namespace dsv32

/// \brief Throws dsv32::Error(kind, message pieces...) unless `cond` holds.
#define DSV32_CHECK(cond, kind, ...)                              \
  do {                                                            \
    if (!(cond)) ::dsv32::fail(::dsv32::ErrorKind::kind, __VA_ARGS__); \
  } while (0)
