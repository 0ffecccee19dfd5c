/// \file
/// \brief Checking CUDA runtime and cuBLASLt calls: DSV32_CUDA_CHECK, DSV32_CUBLAS_CHECK and
///        DSV32_CUDA_CHECK_LAUNCH throw dsv32::Error naming the failed statement, the file and line,
///        and the library's error name and string.
///
/// Host header of the CUDA backend (it includes the CUDA runtime and cuBLASLt headers): reached only
/// through <dsv32/cuda.hpp>, never from the host umbrella <dsv32/dsv32.hpp>.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "dsv32/core/error.hpp"

namespace dsv32::cuda {

/// \addtogroup cuda
/// @{

/// \brief The message of a failed CUDA runtime call: the statement, where, and the error's name and string.
inline std::string cuda_error_message(cudaError_t status, const char* statement, const char* file, int line) {
  return ::dsv32::detail::concat(statement, " failed at ", file, ":", line, ": ", cudaGetErrorName(status), " (",
                        cudaGetErrorString(status), ")");
}

/// \brief Throws Error(unsupported) when no device is present or the driver is missing or too old,
///        Error(state) otherwise, unless `status` is cudaSuccess. Clears the runtime's last error.
inline void check_cuda(cudaError_t status, const char* statement, const char* file, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // a sticky error stays; any other is consumed so the next check starts clean
  const bool no_device = status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
                         status == cudaErrorInvalidDevice;
  throw Error(no_device ? ErrorKind::unsupported : ErrorKind::state, cuda_error_message(status, statement, file, line));
}

/// \brief Throws Error(state) naming the statement, where, and cuBLAS's status name and string,
///        unless `status` is CUBLAS_STATUS_SUCCESS.
inline void check_cublas(cublasStatus_t status, const char* statement, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(ErrorKind::state, ::dsv32::detail::concat(statement, " failed at ", file, ":", line, ": ", cublasLtGetStatusName(status),
                                               " (", cublasLtGetStatusString(status), ")"));
}

/// @}

}  // namespace dsv32::cuda

/// \brief Runs a CUDA runtime call and throws dsv32::Error naming it, the file and line, and the CUDA
///        error's name and string when it fails.
#define DSV32_CUDA_CHECK(statement) ::dsv32::cuda::check_cuda((statement), #statement, __FILE__, __LINE__)

/// \brief Runs a cuBLAS / cuBLASLt call and throws dsv32::Error naming it, the file and line, and the
///        status's name and string when it fails.
#define DSV32_CUBLAS_CHECK(statement) ::dsv32::cuda::check_cublas((statement), #statement, __FILE__, __LINE__)

/// \brief After a kernel launch `name<<<...>>>(...)`: throws dsv32::Error naming the kernel, the file
///        and line, and the CUDA error when the launch failed (bad configuration, no kernel image for
///        the device).
#define DSV32_CUDA_CHECK_LAUNCH(name) \
  ::dsv32::cuda::check_cuda(cudaGetLastError(), "launch of kernel " name, __FILE__, __LINE__)
