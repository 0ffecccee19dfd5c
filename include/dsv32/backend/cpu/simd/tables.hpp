/// \file
/// \brief CPU: every ISA's kernel table (gemm_portable.hpp, gemm_avx2.hpp, gemm_avx512.hpp) and the
///        choice among them, simd::ops_for(). This is the heavy part of the CPU backend to compile
///        (all of its SIMD kernels, every ISA); cpu/separate_kernels.hpp compiles it once per program.
#pragma once

#include <array>

#include "dsv32/backend/cpu/simd/gemm_avx2.hpp"
#include "dsv32/backend/cpu/simd/gemm_avx512.hpp"
#include "dsv32/backend/cpu/simd/gemm_ops.hpp"
#include "dsv32/backend/cpu/simd/gemm_portable.hpp"
#include "dsv32/backend/cpu/simd/isa.hpp"

namespace dsv32::cpu::simd {

/// \brief The kernel table of feature set `f` (CpuFeatures), built from it alone: every entry
///        that the kernel plan (cpu/kernel_plan.hpp) can choose for `f` is set (checked for every
///        feature set by tests/backend/test_cpu_plan.cpp). A level this build has no kernels for (x86
///        levels elsewhere) gives the portable table. Only run kernels of a table whose features the
///        host has (at most detected_features()).
inline GemmOps make_table(const CpuFeatures& f) {
#if defined(DSV32_CPU_X86)
  switch (f.isa) {
    case Isa::avx512_bf16:
    case Isa::avx512: return avx512_table(f);
    case Isa::avx2: return avx2_table();
    default: break;
  }
#endif
  return portable_table();
}

/// \brief make_table(capped(f, f.isa)), built once per feature set and kept for the process.
inline const GemmOps& ops_for(const CpuFeatures& f) {
  static const std::array<GemmOps, kCpuFeatureSets> tables = [] {
    std::array<GemmOps, kCpuFeatureSets> t{};
    for (int i = 0; i < kCpuFeatureSets; ++i) {
      const CpuFeatures g{static_cast<Isa>(i / 8), (i & 4) != 0, (i & 2) != 0, (i & 1) != 0};
      t[i] = make_table(capped(g, g.isa));
    }
    return t;
  }();
  return tables[feature_index(capped(f, f.isa))];
}

}  // namespace dsv32::cpu::simd
