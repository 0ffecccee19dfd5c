/// \file
/// \brief HostStaging: the host copies a communicator that exchanges host memory (threads, MPI) makes
///        of a backend's buffers — none on a backend whose memory the host can read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dsv32/core/space.hpp"

namespace dsv32::detail {

/// Host views of backend buffers for one rank's collectives. On a host-visible backend (Cpu) every
/// view is the buffer itself and nothing is copied; otherwise each collective copies its input down
/// (and synchronizes the rank's context) and its result up, through buffers reused from call to call.
template <class Backend>
class HostStaging {
 public:
  static constexpr bool kHostVisible = Memory<Backend>::host_visible;  ///< no copies at all

  /// A host copy of backend memory `data` (n elements), valid until the next call.
  template <class T>
  T* down(ExecutionContext<Backend>& ctx, T* data, std::int64_t n) {
    if constexpr (kHostVisible) {
      (void)ctx, (void)n;
      return data;
    } else {
      staging_.resize(static_cast<std::size_t>(n) * sizeof(T));
      Memory<Backend>::copy_to_host_async(ctx, staging_.data(), data, staging_.size());
      Memory<Backend>::synchronize(ctx);
      return reinterpret_cast<T*>(staging_.data());
    }
  }
  /// Host memory for an output of n floats (the output itself on a host-visible backend).
  float* out(float* data, std::int64_t n) {
    if constexpr (kHostVisible) {
      (void)n;
      return data;
    } else {
      gathered_.resize(static_cast<std::size_t>(n));
      return gathered_.data();
    }
  }
  /// Writes the host result `host` back to backend memory `data` (nothing on a host-visible backend).
  template <class T>
  void up(ExecutionContext<Backend>& ctx, T* data, const T* host, std::int64_t n) {
    if constexpr (!kHostVisible) {
      Memory<Backend>::copy_from_host_async(ctx, data, host, static_cast<std::size_t>(n) * sizeof(T));
      Memory<Backend>::synchronize(ctx);
    } else {
      (void)ctx, (void)data, (void)host, (void)n;
    }
  }

 private:
  std::vector<std::byte> staging_;  // host copies of backend buffers
  std::vector<float> gathered_;     // all_gather outputs
};

}  // namespace dsv32::detail
