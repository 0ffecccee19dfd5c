/// \file
/// \brief Backend tags and the third trait every backend specializes, Kernels<Backend> (the operations
///        the layers call), beside Memory<Backend> and ExecutionContext<Backend> (core/space.hpp).
///
/// A backend is an empty tag type (CUTLASS style). Layer templates take it as a parameter and reach
/// memory only through Memory<Backend> and computation only through Kernels<Backend>, passing the
/// model's ExecutionContext<Backend> to every call, so a new backend plugs in without touching the
/// layers. An unspecialized backend fails at compile time with a message that says so.
///
/// The memory spaces (Host, `Memory<Backend>::space`) and the memory and context traits stand in core,
/// below everything that holds backend memory (core/space.hpp). See docs/backends.md ("Writing a backend").
#pragma once

#include "dsv32/core/space.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

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

/// \brief The computational kernels of a backend (see backend/cpu/kernels.hpp for the list).
/// \tparam Backend a backend tag
template <class Backend>
struct Kernels {
  static_assert(detail::dependent_false<Backend>,
                "dsv32: no Kernels<Backend> specialization for this backend (include its header: "
                "<dsv32/cuda.hpp> for Cuda, <dsv32/testing/host_invisible.hpp> for testing::HostInvisible)");
};

/// @}

}  // namespace dsv32
