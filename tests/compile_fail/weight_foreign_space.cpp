// A CPU matrix product handed a weight in another backend's memory must not compile.
// expect: a view of one memory space cannot be used as a view of another
#include <dsv32/backend/cpu/kernels.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <vector>

int main() {
  std::vector<dsv32::bf16> x(128), y(4);
  const dsv32::WeightView<dsv32::testing::HostInvisibleSpace> w{dsv32::DType::BF16, nullptr, 4, 128, nullptr};
  dsv32::ExecutionContext<dsv32::Cpu> ctx;
  dsv32::Kernels<dsv32::Cpu>::linear(ctx, {x.data(), 1, 128, 128}, w, dsv32::ScaleFmt::none, {y.data(), 1, 4, 4});
  return 0;
}
