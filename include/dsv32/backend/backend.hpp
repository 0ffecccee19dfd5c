/// \file
/// \brief Backend tags, memory spaces, and the three traits every backend specializes:
///        Memory<Backend> (allocation and copies), ExecutionContext<Backend> (stream, handles, workspace) and
///        Kernels<Backend> (the operations the layers call).
///
/// A backend is an empty tag type (CUTLASS style). Layer templates take it as a parameter and reach
/// memory only through Memory<Backend> and computation only through Kernels<Backend>, passing the
/// model's ExecutionContext<Backend> to every call, so a new backend plugs in without touching the
/// layers. An unspecialized backend fails at compile time with a message that says so.
///
/// Every backend names its **memory space** (`Memory<Backend>::space`): views of its memory
/// (MatrixView<T, Space>, VectorView<T, Space>, WeightView<Space>) carry that type, so memory of one
/// space cannot be handed to code expecting another — a kernel of another backend, or an observer
/// that reads host memory — without an explicit copy. The host's space is Host; a backend whose
/// memory the host can read directly (Cpu) uses Host as its space (`Memory<Backend>::host_visible`).
/// See docs/backends.md ("Writing a backend").
#pragma once

#include <cstddef>
#include <type_traits>

namespace dsv32 {

/// \defgroup backend Backends
/// \brief Where tensors live and who computes on them.
/// @{

/// \brief The host's memory space: plain pointers the calling thread may dereference.
struct Host {
  static constexpr const char* name = "host";  ///< the space's name in messages
};

/// \brief The CPU backend: host memory, Eigen and OpenMP.
struct Cpu {
  static constexpr const char* name = "cpu";  ///< the backend's name in messages and tool output
};

/// \brief The CUDA backend tag (cuBLASLt plus dsv32's kernels): Memory<Cuda>, ExecutionContext<Cuda> and
///        Kernels<Cuda> are specialized in <dsv32/cuda.hpp>, which a .cu file compiled by nvcc includes
///        (docs/cuda.md); the host umbrella <dsv32/dsv32.hpp> does not, so there Transformer<C, Cuda>
///        fails with the unspecialized traits' message.
struct Cuda {
  static constexpr const char* name = "cuda";  ///< the backend's name in messages and tool output
};

namespace detail {
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

/// \brief Memory traits of a backend: its memory space, allocation, synchronous and asynchronous
///        copies, pinned host buffers and synchronization (see Memory<Cpu> for the full list).
/// \tparam Backend a backend tag
template <class Backend>
struct Memory {
  static_assert(detail::dependent_false<Backend>,
                "dsv32: no Memory<Backend> specialization for this backend (include its header: "
                "<dsv32/cuda.hpp> for Cuda, <dsv32/testing/host_invisible.hpp> for testing::HostInvisible)");
};

/// \brief What every kernel call of a backend runs in: a stream, library handles and a workspace for
///        backends that have them; for the CPU only the counter of host synchronizations.
/// \tparam Backend a backend tag
template <class Backend>
struct ExecutionContext {
  static_assert(detail::dependent_false<Backend>,
                "dsv32: no ExecutionContext<Backend> specialization for this backend (include its header)");
};

/// \brief The computational kernels of a backend (see backend/cpu/kernels.hpp for the list).
/// \tparam Backend a backend tag
template <class Backend>
struct Kernels {
  static_assert(detail::dependent_false<Backend>,
                "dsv32: no Kernels<Backend> specialization for this backend (include its header: "
                "<dsv32/cuda.hpp> for Cuda, <dsv32/testing/host_invisible.hpp> for testing::HostInvisible)");
};

/// \brief The memory space of a backend's memory: `Memory<Backend>::space`.
/// \tparam Backend a backend tag
template <class Backend>
using space_of = typename Memory<Backend>::space;

/// @}

}  // namespace dsv32
