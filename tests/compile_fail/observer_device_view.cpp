// An observer (host code) handed a view of backend memory the host cannot read must not compile:
// observers get host copies (with_host_view).
// expect: a view of one memory space cannot be used as a view of another
#include <dsv32/layers/context.hpp>
#include <dsv32/testing/host_invisible.hpp>

int main() {
  dsv32::Tensor<dsv32::bf16, dsv32::testing::HostInvisible> t(dsv32::Shape{2, 4});
  dsv32::ForwardObserver o;
  o.on_embedding(t.mat());
  return 0;
}
