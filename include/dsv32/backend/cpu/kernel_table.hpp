/// \file
/// \brief CPU: the SIMD kernel table of a feature set, kernel_table(): the products (gemm.hpp),
///        activation quantization (quant.hpp) and attention (attention.hpp) all reach the ISA
///        kernels through it (via CpuKernels::ops(), cpu/kernel_plan.hpp).
///
/// Without `DSV32_CPU_KERNELS_SEPARATE` it includes every ISA's kernels (simd/tables.hpp); with it,
/// it only declares simd::compiled_ops(), which one source file of the program defines
/// (cpu/separate_kernels.hpp documents it).
#pragma once

#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/isa.hpp"
#if !defined(DSV32_CPU_KERNELS_SEPARATE)
#include "dsv32/backend/cpu/simd/tables.hpp"
#endif

#if defined(DSV32_CPU_KERNELS_SEPARATE)
namespace dsv32::cpu::simd {
// simd::ops_for(), defined by the one source file of the program that includes
// cpu/separate_kernels.hpp (which documents it)
const GemmOps& compiled_ops(const CpuFeatures& f);
}  // namespace dsv32::cpu::simd
#endif

namespace dsv32::cpu {

/// \brief The kernel table of feature set `f`: simd::ops_for(f), or where the program defines
///        DSV32_CPU_KERNELS_SEPARATE the same table compiled in one of its source files
///        (cpu/separate_kernels.hpp). The products and attention reach it through
///        CpuKernels::ops() (cpu/kernel_plan.hpp).
inline const simd::GemmOps& kernel_table(const CpuFeatures& f) {
#if defined(DSV32_CPU_KERNELS_SEPARATE)
  return simd::compiled_ops(f);
#else
  return simd::ops_for(f);
#endif
}

}  // namespace dsv32::cpu
