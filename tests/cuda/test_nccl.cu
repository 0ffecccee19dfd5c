// NcclCommunicator on a device, at world size 1 (the lent GPU machine has one GPU; no MPI needed: the
// group is made with NcclBootstrap::single()). Every path of the collectives runs — the grouped
// send/receive (empty at W = 1), the rank-order sum kernel, the in-place all-gather, the control
// plane — and is checked against closed forms; a Transformer<TinyBf16, Cuda> handed the communicator
// gives the logits of one without, bit for bit. What W > 1 would add (the sends and receives between
// ranks) needs two GPUs and has not run.
//
// Without a CUDA device every case prints "SKIPPED: no CUDA device" and ctest reports the test skipped
// (SKIP_REGULAR_EXPRESSION, tests/cuda/tests.cmake); the case that needs no device (the constructor's
// error without one) still runs.
#include <doctest/doctest.h>

#include <dsv32/nccl.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using dsv32::bf16;
using dsv32::Cuda;
using Mem = dsv32::Memory<Cuda>;
using Ctx = dsv32::ExecutionContext<Cuda>;
using Space = dsv32::cuda::DeviceSpace;

bool device() {
  static const bool present = [] {
    const bool d = dsv32::cuda::device_available();
    if (!d)
      std::fprintf(stderr,
                   "dsv32_nccl_tests: SKIPPED: no CUDA device (cudaGetDeviceCount reports none): NcclCommunicator's "
                   "collectives and the Transformer on NCCL were NOT run\n");
    return d;
  }();
  return present;
}

#define DSV32_REQUIRE_DEVICE()                  \
  do {                                          \
    if (!device()) {                            \
      std::printf("SKIPPED: no CUDA device\n"); \
      return;                                   \
    }                                           \
  } while (0)

// Device memory holding a host vector.
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(const std::vector<T>& h) : p(static_cast<T*>(Mem::allocate(h.size() * sizeof(T)))), n(h.size()) {
    Mem::copy_from_host(p, h.data(), n * sizeof(T));
  }
  explicit Dev(std::size_t count) : Dev(std::vector<T>(count)) {}
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { Mem::deallocate(p); }
  std::vector<T> host(Ctx& ctx) const {
    Mem::synchronize(ctx);
    std::vector<T> h(n);
    Mem::copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }
  dsv32::VectorView<T, Space> vec() const { return {p, static_cast<std::int64_t>(n)}; }
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("NCCL W=1: all-reduce (f32, bf16), all-gather, broadcast and the control plane in closed form") {
  DSV32_REQUIRE_DEVICE();
  dsv32::NcclCommunicator comm;  // rank 0 of 1, the current device
  Ctx ctx;
  REQUIRE(comm.world_size() == 1);
  REQUIRE(comm.rank() == 0);
  CHECK(comm.device() == ctx.device());
  CHECK(std::string(comm.space_name()) == Space::name);
  CHECK(comm.handle() != nullptr);

  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
    CAPTURE(n);
    // f32: the sum of one rank's values from +0 is the value, except that -0 becomes +0 (as on the host).
    std::vector<float> x(n), want(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = i % 5 == 0 ? -0.0f : 0.37f * static_cast<float>(i) - 100.25f;
    for (std::size_t i = 0; i < n; ++i) want[i] = 0.0f + x[i];
    Dev<float> d(x);
    comm.all_reduce_sum(ctx, d.vec());
    const std::vector<float> got = d.host(ctx);
    CHECK(same_bits(got, want));
    if (n > 0) CHECK_FALSE(std::signbit(got[0]));

    // bf16: widened, summed from +0, rounded once: the same bf16 values.
    std::vector<bf16> y(n), ywant(n);
    for (std::size_t i = 0; i < n; ++i) y[i] = bf16(static_cast<float>(i % 97) * 0.125f - 6.0f);
    for (std::size_t i = 0; i < n; ++i) ywant[i] = bf16(0.0f + static_cast<float>(y[i]));
    Dev<bf16> dy(y);
    comm.all_reduce_sum(ctx, dy.vec());
    CHECK(same_bits(dy.host(ctx), ywant));

    // all-gather of one rank: a copy.
    Dev<float> out(n);
    comm.all_gather(ctx, dsv32::VectorView<const float, Space>(d.p, static_cast<std::int64_t>(n)), out.vec());
    CHECK(same_bits(out.host(ctx), want));

    // broadcast from rank 0: unchanged bytes.
    std::vector<std::byte> bytes(n);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>(i * 31 + 7);
    Dev<std::byte> db(bytes);
    comm.broadcast(ctx, db.vec(), 0);
    CHECK(same_bits(db.host(ctx), bytes));
  }

  // Control plane.
  CHECK(comm.all_reduce_min_host(42) == 42);
  CHECK(comm.all_reduce_min_host(-7) == -7);
  std::vector<std::byte> message((3u << 20) + 5);  // more than one piece of the control buffer
  for (std::size_t i = 0; i < message.size(); ++i) message[i] = static_cast<std::byte>(i % 251);
  const std::vector<std::byte> sent = message;
  comm.broadcast_host(message, 0);
  CHECK(message == sent);
  dsv32::run_collectively(&comm, "a step", [] {});

  // Wrong arguments: refused, and the communicator stays usable.
  Dev<float> four(std::vector<float>(4, 1.0f)), three(3);
  CHECK_THROWS_WITH_AS(comm.all_gather(ctx, dsv32::VectorView<const float, Space>(four.p, 4), three.vec()),
                       doctest::Contains("needs an output of 4, got 3"), dsv32::Error);
  CHECK_THROWS_WITH_AS(comm.broadcast(ctx, dsv32::VectorView<std::byte, Space>(nullptr, 0), 1),
                       doctest::Contains("broadcast root 1 outside [0, 1)"), dsv32::Error);
  CHECK_FALSE(comm.broken());

  // reserve(): an all-reduce of that size then allocates nothing.
  comm.reserve(1 << 16);
  CHECK(comm.scratch_bytes() >= 2 * (std::size_t{1} << 16) * sizeof(float));
  Dev<float> big(std::vector<float>(1 << 16, 0.5f));
  const std::uint64_t allocations = Mem::allocations();
  comm.all_reduce_sum(ctx, big.vec());
  CHECK(Mem::allocations() == allocations);
  CHECK(big.host(ctx) == std::vector<float>(1 << 16, 0.5f));

  // abort(): every later collective refuses.
  comm.abort();
  CHECK(comm.broken());
  CHECK_THROWS_WITH_AS(comm.all_reduce_sum(ctx, four.vec()), doctest::Contains("unusable after an earlier failure"),
                       dsv32::Error);
}

TEST_CASE("NCCL W=1: Transformer<TinyBf16, Cuda> with the communicator gives the logits of one without") {
  DSV32_REQUIRE_DEVICE();
  using C = dsv32::TinyBf16;
  dsv32::RuntimeOptions options;
  options.max_batch_size = 2;
  options.max_seq_len = 32;
  dsv32::NcclCommunicator comm;
  dsv32::Transformer<C, Cuda> alone(options);
  dsv32::Transformer<C, Cuda> grouped(options, dsv32::Parallel::from(comm));
  alone.init_random(5);
  grouped.init_random(5);
  const std::vector<std::int32_t> prompt = {4, 8, 15, 16, 23, 42, 7, 9};
  dsv32::Logits a = alone.forward(prompt, 2, 0);
  dsv32::Logits g = grouped.forward(prompt, 2, 0);
  CHECK(same_bits(a.values, g.values));
  for (int s = 0; s < 8; ++s) {
    const std::vector<std::int32_t> next = {a.argmax(0), a.argmax(1)};
    a = alone.forward(next, 2, 4 + s);
    g = grouped.forward(next, 2, 4 + s);
    CAPTURE(s);
    CHECK(same_bits(a.values, g.values));
  }
}

TEST_CASE("NCCL without a device: the constructor says so") {
  if (device()) return;
  std::printf("SKIPPED: no CUDA device (checking the constructor's error without one)\n");
  try {
    dsv32::NcclCommunicator comm;
    FAIL("a communicator without a device");
  } catch (const dsv32::Error& e) {
    CAPTURE(e.what());
    CHECK(e.kind() == dsv32::ErrorKind::unsupported);
  }
}
