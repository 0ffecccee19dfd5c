// Running a test on every instruction-set level of the CPU kernels this machine has.
#pragma once

#include "dsv32/backend/cpu/gemm.hpp"

#include <vector>

namespace dsv32::test {

/// Every ISA level this CPU runs, from portable up.
inline std::vector<cpu::Isa> isas_here() {
  std::vector<cpu::Isa> v{cpu::Isa::portable};
  if (cpu::detected_isa() >= cpu::Isa::avx2) v.push_back(cpu::Isa::avx2);
  if (cpu::detected_isa() >= cpu::Isa::avx512) v.push_back(cpu::Isa::avx512);
  if (cpu::detected_isa() >= cpu::Isa::avx512_bf16) v.push_back(cpu::Isa::avx512_bf16);
  return v;
}

/// Caps the kernels' ISA for a scope.
struct IsaScope {
  cpu::Isa previous;
  explicit IsaScope(cpu::Isa isa) : previous(cpu::set_isa(isa)) {}
  ~IsaScope() { cpu::set_isa(previous); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

}  // namespace dsv32::test
