/// \file
/// \brief The CUDA umbrella header: everything of <dsv32/dsv32.hpp> plus the CUDA backend
///        (dsv32::Cuda: Memory<Cuda>, ExecutionContext<Cuda>, Kernels<Cuda>), so that
///        `Transformer<Config, dsv32::Cuda>` compiles.
///
/// Include it from a .cu translation unit compiled by nvcc (the kernels are templates and inline code
/// that the including TU instantiates; docs/cuda.md). Link the target dsv32::cuda (CUDA::cudart and
/// CUDA::cublasLt). The host umbrella <dsv32/dsv32.hpp> never includes this header, so CPU-only
/// programs never see a CUDA header.
#pragma once

#if !defined(__CUDACC__)
#error "<dsv32/cuda.hpp> must be compiled by nvcc (a .cu file linked to dsv32::cuda); CPU-only code includes <dsv32/dsv32.hpp>"
#endif

#include "dsv32/dsv32.hpp"
#include "dsv32/backend/cuda/kernels.cuh"
#include "dsv32/backend/cuda/memory.hpp"
