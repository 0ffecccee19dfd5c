// A CPU kernel handed a view of another backend's memory (which the host cannot read) must not compile.
// expect: a view of one memory space cannot be used as a view of another
#include <dsv32/backend/cpu/kernels.hpp>
#include <dsv32/testing/host_invisible.hpp>

int main() {
  dsv32::Tensor<dsv32::bf16, dsv32::testing::HostInvisible> t(dsv32::Shape{1, 128});
  dsv32::ExecutionContext<dsv32::Cpu> ctx;
  dsv32::Kernels<dsv32::Cpu>::hadamard(ctx, t.mat());
  return 0;
}
