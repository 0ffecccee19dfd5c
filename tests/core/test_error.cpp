// Tests of dsv32/core/error.hpp and dsv32/core/parallel.hpp: the exception's kind and message
// format, DSV32_CHECK, and the model-parallel description's validation and splitting.
#include "dsv32/core/error.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/layers/context.hpp"
#include "dsv32/testing/host_invisible.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>
#include "support/test_support.hpp"

using dsv32::test::contains;
using dsv32::test::error_of;

namespace {

using dsv32::Error;
using dsv32::ErrorKind;
using dsv32::Parallel;


struct CountingComm : dsv32::Communicator<dsv32::Cpu> {
  using Ctx = dsv32::ExecutionContext<dsv32::Cpu>;
  int world = 2, me = 1, reduces = 0;
  std::size_t last_n = 0;
  int world_size() const override { return world; }
  int rank() const override { return me; }
  void all_reduce_sum(Ctx&, dsv32::VectorView<float> data) override {
    ++reduces;
    last_n = static_cast<std::size_t>(data.size);
    for (std::int64_t i = 0; i < data.size; ++i) data.data[i] *= 2.0f;  // as if the other rank held the same values
  }
  void all_reduce_sum(Ctx&, dsv32::VectorView<dsv32::bf16>) override {}
  void all_gather(Ctx&, dsv32::VectorView<const float>, dsv32::VectorView<float>) override {}
  void broadcast(Ctx&, dsv32::VectorView<std::byte>, int) override {}
  void broadcast_host(std::span<std::byte>, int) override {}
  std::int64_t all_reduce_min_host(std::int64_t v) override { return v; }
};


}  // namespace

TEST_CASE("Error: kind, to_string and the 'dsv32 [kind]: message' format") {
  const std::pair<ErrorKind, const char*> kinds[] = {
      {ErrorKind::invalid_argument, "invalid_argument"}, {ErrorKind::invalid_config, "invalid_config"},
      {ErrorKind::invalid_file, "invalid_file"},         {ErrorKind::io, "io"},
      {ErrorKind::unsupported, "unsupported"},           {ErrorKind::state, "state"},
      {ErrorKind::out_of_memory, "out_of_memory"}};
  for (const auto& entry : kinds) {
    const ErrorKind kind = entry.first;
    const char* const name = entry.second;  // not a structured binding: CAPTURE's lambda takes it
    CAPTURE(name);
    CHECK(std::string(dsv32::to_string(kind)) == name);
    const Error e(kind, "something went wrong");
    CHECK(e.kind() == kind);
    CHECK(std::string(e.what()) == std::string("dsv32 [") + name + "]: something went wrong");
  }
  // one exception type, catchable as the standard one
  CHECK_THROWS_AS(throw Error(ErrorKind::io, "x"), std::runtime_error);
}

TEST_CASE("fail and DSV32_CHECK stream every message piece") {
  const std::string what = error_of([] { dsv32::fail(ErrorKind::invalid_file, "tensor '", "w", "' has ", 3, " dims, ", 1.5); },
                                    ErrorKind::invalid_file);
  CHECK(what == "dsv32 [invalid_file]: tensor 'w' has 3 dims, 1.5");

  int evaluated = 0;
  auto piece = [&] {
    ++evaluated;
    return "piece";
  };
  DSV32_CHECK(1 + 1 == 2, state, piece());
  CHECK(evaluated == 0);  // the message is built only on failure
  const std::string w2 = error_of([&] { DSV32_CHECK(1 + 1 == 3, state, "value ", 42, " and ", piece()); }, ErrorKind::state);
  CHECK(evaluated == 1);
  CHECK(w2 == "dsv32 [state]: value 42 and piece");
}

TEST_CASE("Parallel: validate names what is wrong") {
  CHECK_NOTHROW(Parallel{}.validate());
  CHECK(contains(error_of([] { Parallel{0, 0, nullptr}.validate(); }, ErrorKind::invalid_argument),
                 "world size must be >= 1, got 0"));
  CHECK(contains(error_of([] { Parallel{2, 2, nullptr}.validate(); }, ErrorKind::invalid_argument),
                 "rank 2 outside [0, 2)"));
  CHECK(contains(error_of([] { Parallel{1, -1, nullptr}.validate(); }, ErrorKind::invalid_argument),
                 "rank -1 outside [0, 1)"));
  CHECK(contains(error_of([] { Parallel{4, 1, nullptr}.validate(); }, ErrorKind::invalid_argument),
                 "world size 4 needs a Communicator"));
  CountingComm comm;
  const Parallel p = Parallel::from(comm);
  CHECK(p.world_size == 2);
  CHECK(p.rank == 1);
  CHECK(p.comm == &comm);
  CHECK_NOTHROW(p.validate());
}

TEST_CASE("Parallel: split divides evenly or names the quantity") {
  const Parallel one{};
  CHECK(one.split(129280, "vocab_size") == 129280);
  const Parallel three{3, 0, nullptr};
  CHECK(three.split(12, "n_heads") == 4);
  const std::string what = error_of([&] { three.split(10, "n_routed_experts"); }, ErrorKind::invalid_argument);
  CHECK(what == "dsv32 [invalid_argument]: n_routed_experts (10) must be divisible by the world size (3)");
}

TEST_CASE("ForwardContext: all_reduce_sum calls the communicator only with more than one rank") {
  std::vector<float> v{1.0f, 2.0f};
  dsv32::ExecutionContext<dsv32::Cpu> exec;
  dsv32::ForwardContext<dsv32::Cpu> one;  // one rank: no communicator needed
  one.exec = &exec;
  one.all_reduce_sum(dsv32::VectorView<float>(v.data(), 2));
  CHECK(v == std::vector<float>{1.0f, 2.0f});
  CountingComm comm;
  dsv32::ForwardContext<dsv32::Cpu> two;
  two.exec = &exec;
  two.parallel = Parallel::from(comm);
  two.comm = two.parallel.communicator_for<dsv32::Cpu>();
  REQUIRE(two.comm == &comm);
  two.all_reduce_sum(dsv32::VectorView<float>(v.data(), 2));
  CHECK(comm.reduces == 1);
  CHECK(comm.last_n == 2);
  CHECK(v == std::vector<float>{2.0f, 4.0f});
}

TEST_CASE("Parallel: a communicator of another memory space than the model's backend is refused, by name") {
  CountingComm comm;  // works on host memory
  const Parallel p = Parallel::from(comm);
  CHECK(std::string(comm.space_name()) == "host");
  CHECK(p.communicator_for<dsv32::Cpu>() == &comm);
  CHECK(Parallel{}.communicator_for<dsv32::testing::HostInvisible>() == nullptr);  // one rank: none needed
  const std::string what =
      error_of([&] { (void)p.communicator_for<dsv32::testing::HostInvisible>(); }, ErrorKind::invalid_argument);
  CHECK(contains(what, "the model runs on backend host-invisible (memory space host-invisible)"));
  CHECK(contains(what, "its communicator works on memory space host"));
}
