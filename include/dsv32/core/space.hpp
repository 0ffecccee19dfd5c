/// \file
/// \brief Memory spaces and the two backend traits that core's tensors and communicators reach memory
///        through: Memory<Backend> (allocation and copies) and ExecutionContext<Backend> (stream,
///        handles, workspace), with space_of<Backend>.
///
/// Every backend names its **memory space** (`Memory<Backend>::space`): views of its memory
/// (MatrixView<T, Space>, VectorView<T, Space>, WeightView<Space>) carry that type, so memory of one
/// space cannot be handed to code expecting another — a kernel of another backend, or an observer
/// that reads host memory — without an explicit copy. The host's space is Host; a backend whose
/// memory the host can read directly (Cpu) uses Host as its space (`Memory<Backend>::host_visible`).
///
/// Only the primary templates stand here; the backends, their tags and their specializations are
/// defined above core (backend/backend.hpp and the backends' folders). See docs/backends.md
/// ("Writing a backend").
#pragma once

namespace dsv32 {

/// \defgroup backend Backends
/// \brief Where tensors live and who computes on them.
/// @{

/// \brief The host's memory space: plain pointers the calling thread may dereference.
struct Host {
  static constexpr const char* name = "host";  ///< the space's name in messages
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

/// \brief The memory space of a backend's memory: `Memory<Backend>::space`.
/// \tparam Backend a backend tag
template <class Backend>
using space_of = typename Memory<Backend>::space;

/// @}

}  // namespace dsv32
