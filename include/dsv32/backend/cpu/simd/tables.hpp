/// \file
/// \brief CPU: every ISA's kernel table (gemm_portable.hpp, gemm_avx2.hpp, gemm_avx512.hpp) and the
///        choice among them, simd::ops_for(). This is the heavy part of the CPU backend to compile
///        (all of its SIMD kernels, every ISA); cpu/separate_kernels.hpp compiles it once per program.
#pragma once

#include "dsv32/backend/cpu/simd/gemm_avx2.hpp"
#include "dsv32/backend/cpu/simd/gemm_avx512.hpp"
#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/gemm_portable.hpp"
#include "dsv32/backend/cpu/simd/isa.hpp"

namespace dsv32::cpu::simd {

/// \brief The kernel table of ISA level `isa`, which the CPU must have (at most detected_isa():
///        active_isa() is). A level this build has no kernels for (x86 levels elsewhere) gives the
///        portable table.
inline const GemmOps& ops_for(Isa isa) {
#if defined(DSV32_CPU_X86)
  switch (isa) {
    case Isa::avx512_bf16: return avx512_bf16_ops();
    case Isa::avx512: return avx512_ops();
    case Isa::avx2: return avx2_ops();
    default: break;
  }
#else
  (void)isa;
#endif
  return portable_ops();
}

}  // namespace dsv32::cpu::simd
