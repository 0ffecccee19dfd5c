/// \file
/// \brief The NCCL umbrella header, of the optional `dsv32::nccl` component: everything of
///        <dsv32/cuda.hpp> plus NcclCommunicator (model parallelism across GPUs, device-memory
///        collectives on the backend's stream), NcclBootstrap and DSV32_NCCL_CHECK.
///
/// Include it from a .cu translation unit compiled by nvcc and link dsv32::nccl (dsv32::cuda + NCCL).
/// Bootstrapping a group of processes over MPI is in <dsv32/parallel/nccl_mpi_bootstrap.hpp> (link dsv32::mpi
/// too); a single process (world size 1) needs no MPI. See docs/parallelism.md.
#pragma once

#if !defined(__CUDACC__)
#error "<dsv32/nccl.hpp> must be compiled by nvcc (a .cu file linked to dsv32::nccl); CPU-only code includes <dsv32/dsv32.hpp>"
#endif

#include "dsv32/cuda.hpp"
#include "dsv32/parallel/nccl_bootstrap.hpp"
#include "dsv32/parallel/nccl_check.hpp"
#include "dsv32/parallel/nccl_communicator.cuh"
