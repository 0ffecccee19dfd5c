// The one source file that compiles the CPU kernels (cpu/separate_kernels.hpp) must be built with
// DSV32_CPU_KERNELS_SEPARATE, like every other file of its program: without it, it would hold a
// second definition of cpu::kernel_table().
// expect: define DSV32_CPU_KERNELS_SEPARATE for every source file of the program
#include <dsv32/backend/cpu/separate_kernels.hpp>

int main() { return 0; }
