/// \file
/// \brief CPU: a model's choices for its kernels — the FP8 accumulation mode and a cap on the
///        instruction-set level — held by its execution context (ExecutionContext<Cpu>::kernels),
///        so that two models in one process may differ. cpu/kernel_plan.hpp turns them into kernels.
#pragma once

#include "dsv32/backend/cpu/simd/isa.hpp"

namespace dsv32::cpu {

/// \addtogroup backend
/// @{

/// \brief How FP8 matrix products sum the E4M3 products of each 128-wide block.
enum class Fp8Accumulation {
  exact,  ///< exactly (as the reference's arithmetic defines it): the default
  fast,   ///< in f32 (rounded partial sums) on bf16 dot products (VDPBF16PS where the CPU has it), in
          ///< the documented orders of simd/gemm_ops.hpp: the row order for products of at most 4
          ///< rows (decode at batch 1 to 4), the panel order for more
};

/// \brief One model's kernel options (ExecutionContext<Cpu>::kernels): set them on
///        `model.context().kernels` before a forward pass. Every ISA level gives the same bits; the
///        FP8 mode changes them (within the golden tolerance, docs/performance.md).
struct KernelOptions {
  Fp8Accumulation fp8 = Fp8Accumulation::exact;  ///< the FP8 products' block sums
  Isa max_isa = Isa::avx512_bf16;  ///< the highest level the kernels may use (the host's best if above it)
};

/// @}

}  // namespace dsv32::cpu
