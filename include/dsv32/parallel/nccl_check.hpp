/// \file
/// \brief Checking NCCL calls: DSV32_NCCL_CHECK throws dsv32::Error naming the failed statement, the
///        file and line, the result's enumerator, ncclGetErrorString's text and NCCL's last error message.
///
/// Host header of the optional NCCL component (nccl.h, which includes the CUDA runtime's headers; link
/// dsv32::nccl): reached through <dsv32/nccl.hpp>, never from <dsv32/dsv32.hpp> or <dsv32/cuda.hpp>. A
/// host compiler compiles it too.
#pragma once

#include <nccl.h>

#include <string>

#include "dsv32/core/error.hpp"

namespace dsv32::nccl {

/// \addtogroup cuda
/// @{

/// \brief The enumerator's name of an NCCL result ("ncclInvalidArgument"); "ncclResult_t(?)" for a
///        value this header does not know (a newer NCCL's).
inline const char* result_name(ncclResult_t result) noexcept {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult_t(?)";
  }
}

/// \brief The ErrorKind of a failed NCCL call: invalid_argument for a wrong argument or call order
///        (ncclInvalidArgument, ncclInvalidUsage), io for the system or a peer (ncclSystemError: sockets,
///        shared memory; ncclRemoteError: another rank failed or went away), state otherwise (a CUDA
///        error inside NCCL, an internal error, and ncclInProgress, which a blocking communicator —
///        the only kind dsv32 makes — never returns).
inline ErrorKind error_kind(ncclResult_t result) noexcept {
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return ErrorKind::invalid_argument;
    case ncclSystemError:
    case ncclRemoteError: return ErrorKind::io;
    default: return ErrorKind::state;
  }
}

/// \brief The message of a failed NCCL call: the statement, where, the result's name and
///        ncclGetErrorString's text, and NCCL's last error message (ncclGetLastError) when it has one.
inline std::string nccl_error_message(ncclResult_t result, const char* statement, const char* file, int line) {
  std::string message = ::dsv32::detail::concat(statement, " failed at ", file, ":", line, ": ", result_name(result),
                                                " (", ncclGetErrorString(result), ")");
  // NCCL's detail for the calling thread (the library keeps the last message per thread; the
  // communicator argument is not used to look it up).
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') message += ::dsv32::detail::concat(": ", last);
  return message;
}

/// \brief Throws Error(error_kind(result)) with nccl_error_message() unless `result` is ncclSuccess.
inline void check_nccl(ncclResult_t result, const char* statement, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw Error(error_kind(result), nccl_error_message(result, statement, file, line));
}

/// @}

}  // namespace dsv32::nccl

/// \brief Runs an NCCL call and throws dsv32::Error naming it, the file and line, the result's name,
///        ncclGetErrorString's text and NCCL's last error message when it does not return ncclSuccess.
#define DSV32_NCCL_CHECK(statement) ::dsv32::nccl::check_nccl((statement), #statement, __FILE__, __LINE__)
