/// \file
/// \brief Build time: the CPU backend's SIMD kernels compiled once per program instead of once per
///        source file. Include this header in exactly one source file of the program.
///
/// The library is header-only, so every source file that includes the CPU backend (dsv32.hpp does)
/// compiles all of its kernels, every ISA level's: about 12 s of GCC -O3 per source file, 28 s of
/// clang with AddressSanitizer, on the 2-core hosts of docs/performance.md. A program with several
/// such source files can compile them once:
/// - define `DSV32_CPU_KERNELS_SEPARATE` for every source file of the program (`-D`, or
///   `target_compile_definitions`): cpu/kernel_table.hpp then only declares simd::compiled_ops() and includes
///   no kernel. All of them, not some: cpu::kernel_table() is an inline function whose body depends on
///   the macro, and one program must see one definition of it;
/// - include this header in exactly one of them, which defines it (built without the macro, that file
///   fails to compile with an `#error` saying so: it would hold the other definition of kernel_table()).
///
/// The kernels are the same code either way, compiled with the same flags, so the results are the
/// same bits; calls reach the kernel table through one function call instead of an inline one (each
/// call of a product or attention kernel, not each element). A program that defines the macro and
/// includes this header nowhere fails to link, naming `dsv32::cpu::simd::compiled_ops`. In this
/// repository's CMake build, the target `dsv32::cpu_kernels` (a static library of this header) does
/// both, for the tests, tools and benchmarks; the examples stay header-only.
#pragma once

#if !defined(DSV32_CPU_KERNELS_SEPARATE)
#error "dsv32/backend/cpu/separate_kernels.hpp: define DSV32_CPU_KERNELS_SEPARATE for every source file of the program, this one included"
#endif

#include "dsv32/backend/cpu/simd/tables.hpp"

namespace dsv32::cpu::simd {

/// \brief ops_for(), compiled in this one source file: the kernel table that cpu::kernel_table()
///        returns in the source files built with DSV32_CPU_KERNELS_SEPARATE.
const GemmOps& compiled_ops(const CpuFeatures& f) { return ops_for(f); }

}  // namespace dsv32::cpu::simd
