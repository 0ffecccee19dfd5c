// The control of the memory-space compile-fail tests: the same calls with matching spaces compile —
// each backend's kernels on its own views, and observers on host copies made by with_host_view().
#include <dsv32/backend/cpu/kernels.hpp>
#include <dsv32/layers/context.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <vector>

int main() {
  using dsv32::testing::HostInvisible;
  dsv32::Tensor<dsv32::bf16, HostInvisible> t(dsv32::Shape{1, 128});
  dsv32::ExecutionContext<HostInvisible> exec;
  dsv32::Kernels<HostInvisible>::hadamard(exec, t.mat());
  std::vector<dsv32::bf16> host(128);
  dsv32::ExecutionContext<dsv32::Cpu> cpu;
  dsv32::Kernels<dsv32::Cpu>::hadamard(cpu, {host.data(), 1, 128, 128});
  dsv32::ForwardContext<HostInvisible> ctx;
  ctx.exec = &exec;
  dsv32::ForwardObserver o;
  dsv32::with_host_view(ctx, t.mat(), [&](dsv32::MatrixView<const dsv32::bf16> h) { o.on_embedding(h); });
  return 0;
}
