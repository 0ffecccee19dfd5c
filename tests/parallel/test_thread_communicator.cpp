// Tests of dsv32/parallel/thread_communicator.hpp: the collectives' results, their deterministic summation
// order, size mismatches reported on every rank, and abort() releasing waiting ranks.
#include <dsv32/parallel/thread_communicator.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using ThreadCommunicator = dsv32::ThreadCommunicator<dsv32::Cpu>;
using dsv32::VectorView;
dsv32::ExecutionContext<dsv32::Cpu> exec;  // one per rank in a model; these collectives ignore it on the CPU

// Runs body(rank) on `world` threads; returns each rank's exception (or null).
template <class Comm, class Body>
std::vector<std::exception_ptr> run_ranks(std::vector<Comm>& comms, Body body) {
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST_CASE("thread communicator: all_reduce_sum and all_gather over 3 ranks, repeatedly") {
  auto comms = ThreadCommunicator::group(3);
  REQUIRE(comms.size() == 3);
  CHECK(comms[2].rank() == 2);
  CHECK(comms[0].world_size() == 3);
  std::vector<std::vector<float>> sums(3), gathered(3);
  const auto errors = run_ranks(comms, [&](int r) {
    for (int round = 0; round < 50; ++round) {  // back-to-back calls reuse the barrier safely
      std::vector<float> v(7);  // 7 elements over 3 ranks: chunks of 3, 3, 1
      for (int i = 0; i < 7; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(100 * r + i + round);
      comms[static_cast<std::size_t>(r)].all_reduce_sum(exec, VectorView<float>(v.data(), static_cast<std::int64_t>(v.size())));
      std::vector<float> local = {static_cast<float>(r), static_cast<float>(10 * r)}, out(6);
      comms[static_cast<std::size_t>(r)].all_gather(exec, VectorView<const float>(local.data(), 2), VectorView<float>(out.data(), 6));
      if (round == 49) {
        sums[static_cast<std::size_t>(r)] = v;
        gathered[static_cast<std::size_t>(r)] = out;
      }
    }
  });
  for (const auto& e : errors) CHECK(e == nullptr);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 7; ++i) CHECK(sums[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] == 300 + 3 * (i + 49));
    CHECK(gathered[static_cast<std::size_t>(r)] == std::vector<float>{0, 0, 1, 10, 2, 20});
  }
}

TEST_CASE("thread communicator: the sum is taken in rank order, identically on every rank") {
  // 1 + 1e8 - 1e8 in f32 depends on the order: rank order (((0 + 1) + 1e8) + -1e8) gives 0.
  auto comms = ThreadCommunicator::group(3);
  const float values[3] = {1.0f, 1e8f, -1e8f};
  std::vector<float> got(3, -1.0f);
  run_ranks(comms, [&](int r) {
    float v = values[r];
    comms[static_cast<std::size_t>(r)].all_reduce_sum(exec, VectorView<float>(&v, 1));
    got[static_cast<std::size_t>(r)] = v;
  });
  CHECK(got == std::vector<float>{0.0f, 0.0f, 0.0f});
}

TEST_CASE("thread communicator: different sizes throw on every rank; abort releases waiting ranks") {
  auto comms = ThreadCommunicator::group(2);
  const auto errors = run_ranks(comms, [&](int r) {
    std::vector<float> v(static_cast<std::size_t>(4 + r));
    comms[static_cast<std::size_t>(r)].all_reduce_sum(exec, VectorView<float>(v.data(), static_cast<std::int64_t>(v.size())));
  });
  for (const auto& e : errors) {
    REQUIRE(e != nullptr);
    try {
      std::rethrow_exception(e);
    } catch (const dsv32::Error& err) {
      CHECK(err.kind() == dsv32::ErrorKind::invalid_argument);
      CHECK(std::string(err.what()).find("passed") != std::string::npos);
    }
  }

  auto group = ThreadCommunicator::group(2);
  const auto aborted = run_ranks(group, [&](int r) {
    if (r == 1) {  // rank 1 fails before its collective and tells the group
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      group[1].abort();
      throw std::runtime_error("rank 1 failed");
    }
    float v = 1;
    group[0].all_reduce_sum(exec, VectorView<float>(&v, 1));
  });
  REQUIRE(aborted[0] != nullptr);
  try {
    std::rethrow_exception(aborted[0]);
  } catch (const dsv32::Error& err) {
    CHECK(err.kind() == dsv32::ErrorKind::state);
  }
  CHECK(group[0].aborted());
  CHECK_THROWS_AS(ThreadCommunicator::group(0), dsv32::Error);
}

TEST_CASE("thread communicator: bf16 sums are taken in f32 and rounded once; broadcast copies the root's bytes") {
  auto comms = ThreadCommunicator::group(3);
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7 is a bf16 value, but summing in bf16 pairwise would round the tie 1 + 2^-8 to 1
  const float parts[3] = {1.0f, 0x1p-8f, 0x1p-8f};
  std::vector<float> got(3);
  std::vector<std::vector<unsigned char>> bytes(3);
  const auto errors = run_ranks(comms, [&](int r) {
    dsv32::bf16 v(parts[r]);
    comms[static_cast<std::size_t>(r)].all_reduce_sum(exec, VectorView<dsv32::bf16>(&v, 1));
    got[static_cast<std::size_t>(r)] = static_cast<float>(v);
    std::vector<unsigned char> b(5, static_cast<unsigned char>(r));
    comms[static_cast<std::size_t>(r)].broadcast(exec, VectorView<std::byte>(reinterpret_cast<std::byte*>(b.data()), 5), 2);
    bytes[static_cast<std::size_t>(r)] = b;
  });
  for (const auto& e : errors) CHECK(e == nullptr);
  for (int r = 0; r < 3; ++r) {
    CHECK(got[static_cast<std::size_t>(r)] == 1.0f + 0x1p-7f);
    CHECK(bytes[static_cast<std::size_t>(r)] == std::vector<unsigned char>(5, 2));
  }
}

TEST_CASE("thread communicator on a backend the host cannot read: staged through host copies, same results") {
  using dsv32::testing::HostInvisible;
  using Mem = dsv32::Memory<HostInvisible>;
  auto comms = dsv32::ThreadCommunicator<HostInvisible>::group(2);
  std::vector<std::vector<float>> sums(2), gathered(2);
  std::vector<std::uint64_t> syncs(2);
  const auto errors = run_ranks(comms, [&](int r) {
    dsv32::ExecutionContext<HostInvisible> ctx;
    dsv32::Buffer<float, HostInvisible> data(3), out(6);  // backend memory: tagged, unreadable on the host
    const std::vector<float> mine = {1.0f + r, 10.0f * r, -2.0f};
    Mem::copy_from_host(data.data(), mine.data(), 12);
    comms[static_cast<std::size_t>(r)].all_reduce_sum(ctx, dsv32::VectorView<float, dsv32::testing::HostInvisibleSpace>(data.data(), 3));
    comms[static_cast<std::size_t>(r)].all_gather(
        ctx, dsv32::VectorView<const float, dsv32::testing::HostInvisibleSpace>(data.data(), 3),
        dsv32::VectorView<float, dsv32::testing::HostInvisibleSpace>(out.data(), 6));
    sums[static_cast<std::size_t>(r)].resize(3);
    gathered[static_cast<std::size_t>(r)].resize(6);
    Mem::copy_to_host(sums[static_cast<std::size_t>(r)].data(), data.data(), 12);
    Mem::copy_to_host(gathered[static_cast<std::size_t>(r)].data(), out.data(), 24);
    syncs[static_cast<std::size_t>(r)] = ctx.synchronizations;
  });
  for (const auto& e : errors) CHECK(e == nullptr);
  for (int r = 0; r < 2; ++r) {
    CHECK(sums[static_cast<std::size_t>(r)] == std::vector<float>{3.0f, 10.0f, -4.0f});
    CHECK(gathered[static_cast<std::size_t>(r)] == std::vector<float>{3.0f, 10.0f, -4.0f, 3.0f, 10.0f, -4.0f});
    CHECK(syncs[static_cast<std::size_t>(r)] == 4);  // each collective: one copy down, one up
  }
}

}  // namespace

TEST_CASE("control plane: broadcast_host, all_reduce_min_host, run_collectively and check_same_on_all_ranks") {
  auto comms = ThreadCommunicator::group(3);
  std::vector<std::string> messages(3);
  std::vector<dsv32::ErrorKind> kinds(3);
  std::vector<std::int64_t> minima(3);
  std::vector<std::vector<int>> received(3);
  const auto errors = run_ranks(comms, [&](int r) {
    std::vector<int> data = {r, r, r};
    comms[r].broadcast_host(std::as_writable_bytes(std::span(data)), 2);
    received[r] = data;
    minima[r] = comms[r].all_reduce_min_host(10 - r);
    // Rank 1 fails with a dsv32::Error, rank 2 with another exception: every rank throws rank 1's.
    try {
      dsv32::run_collectively(&comms[r], "loading", [&] {
        if (r == 1) dsv32::fail(dsv32::ErrorKind::io, "no shard here");
        if (r == 2) throw std::runtime_error("something else");
      });
    } catch (const dsv32::Error& e) {
      messages[r] = e.what();
      kinds[r] = e.kind();
    }
    dsv32::run_collectively(&comms[r], "nothing", [] {});  // all succeed: nobody throws
    dsv32::check_same_on_all_ranks(&comms[r], "same", "a value");
    dsv32::check_same_on_all_ranks(&comms[r], r == 2 ? "other" : "same", "the config");
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(received[r] == std::vector<int>{2, 2, 2});
    CHECK(minima[r] == 8);
    CHECK(kinds[r] == dsv32::ErrorKind::io);
    CHECK(messages[r] == "dsv32 [io]: rank 1 of 3 failed loading (rank 2 failed too): no shard here");
    REQUIRE(errors[r]);
    try {
      std::rethrow_exception(errors[r]);
    } catch (const dsv32::Error& e) {
      CHECK(e.kind() == dsv32::ErrorKind::invalid_config);
      CHECK(std::string(e.what()) ==
            "dsv32 [invalid_config]: rank 2 of 3 disagrees with rank 0 on the config (every rank must run the same model)");
    }
  }
  // One rank: the step runs and its error passes unchanged.
  CHECK_THROWS_WITH(dsv32::run_collectively(nullptr, "x", [] { throw std::runtime_error("plain"); }), "plain");
}
