// Tests of dsv32/core/thread_communicator.hpp: the collectives' results, their deterministic summation
// order, size mismatches reported on every rank, and abort() releasing waiting ranks.
#include <dsv32/core/thread_communicator.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

using dsv32::ThreadCommunicator;

// Runs body(rank) on `world` threads; returns each rank's exception (or null).
template <class Body>
std::vector<std::exception_ptr> run_ranks(std::vector<ThreadCommunicator>& comms, Body body) {
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
      comms[static_cast<std::size_t>(r)].all_reduce_sum(v.data(), v.size());
      std::vector<float> local = {static_cast<float>(r), static_cast<float>(10 * r)}, out(6);
      comms[static_cast<std::size_t>(r)].all_gather(local.data(), local.size(), out.data());
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
    comms[static_cast<std::size_t>(r)].all_reduce_sum(&v, 1);
    got[static_cast<std::size_t>(r)] = v;
  });
  CHECK(got == std::vector<float>{0.0f, 0.0f, 0.0f});
}

TEST_CASE("thread communicator: different sizes throw on every rank; abort releases waiting ranks") {
  auto comms = ThreadCommunicator::group(2);
  const auto errors = run_ranks(comms, [&](int r) {
    std::vector<float> v(static_cast<std::size_t>(4 + r));
    comms[static_cast<std::size_t>(r)].all_reduce_sum(v.data(), v.size());
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
    group[0].all_reduce_sum(&v, 1);
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

}  // namespace
