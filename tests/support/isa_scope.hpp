// Running a test on every instruction-set level of the CPU kernels this machine has.
#pragma once

#include "dsv32/backend/cpu/gemm.hpp"

#include <vector>

namespace dsv32::test {

/// Every ISA level this CPU runs, from portable up (within the process cap DSV32_CPU_ISA sets).
inline std::vector<cpu::Isa> isas_here() {
  std::vector<cpu::Isa> v{cpu::Isa::portable};
  if (cpu::detected_features().isa >= cpu::Isa::avx2) v.push_back(cpu::Isa::avx2);
  if (cpu::detected_features().isa >= cpu::Isa::avx512) v.push_back(cpu::Isa::avx512);
  if (cpu::detected_features().isa >= cpu::Isa::avx512_bf16) v.push_back(cpu::Isa::avx512_bf16);
  return v;
}

/// The host's kernels capped at `isa`, in FP8 mode `fp8`.
inline cpu::CpuKernels kernels_at(cpu::Isa isa, cpu::Fp8Accumulation fp8 = cpu::Fp8Accumulation::exact) {
  return cpu::resolve({fp8, isa});
}

}  // namespace dsv32::test
