/// \file
/// \brief Backend tags and the memory traits every backend provides.
///
/// A backend is an empty tag type (CUTLASS style). Layer templates take it as a parameter and
/// reach memory only through Memory<Backend> and computation only through Kernels<Backend>
/// (declared here, specialized in `backend/<name>/`), so a new backend plugs in without touching
/// the layers. An unspecialized backend fails at compile time with a message that says so.
#pragma once

#include <cstddef>
#include <type_traits>

namespace dsv32 {

/// \defgroup backend Backends
/// \brief Where tensors live and who computes on them.
/// @{

/// \brief The CPU backend: host memory, Eigen and OpenMP.
struct Cpu {
  static constexpr const char* name = "cpu";  ///< the backend's name in messages and tool output
};

/// \brief The CUDA backend tag (cuBLASLt plus dsv32's kernels). Reserved: this release specializes
///        Memory and Kernels for Cpu only, so Transformer<C, Cuda> does not compile yet.
struct Cuda {
  static constexpr const char* name = "cuda";  ///< the backend's name in messages and tool output
};

namespace detail {
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace detail

/// \brief Memory traits of a backend: allocate, free, fill with zeros, copy to and from the host.
/// \tparam Backend a backend tag
template <class Backend>
struct Memory {
  static_assert(detail::dependent_false<Backend>,
                "dsv32: no Memory<Backend> specialization for this backend (include its header; this release implements Cpu)");
};

/// \brief The computational kernels of a backend (see backend/cpu/kernels.hpp for the list).
/// \tparam Backend a backend tag
template <class Backend>
struct Kernels {
  static_assert(detail::dependent_false<Backend>,
                "dsv32: no Kernels<Backend> specialization for this backend (include its header; this release implements Cpu)");
};

/// @}

}  // namespace dsv32
