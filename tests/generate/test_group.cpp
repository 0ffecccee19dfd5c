// Tests of dsv32/generate/group.hpp on two ranks as threads (the MPI suite, tests/parallel, repeats
// them over processes): rank 0's generate() makes the other rank compute the same calls, so the tokens
// are those of both ranks calling dsv32::generate themselves; rank 0's callback stops every rank; bad
// arguments are refused before anything is sent; finish() releases serve().
#include <dsv32/parallel/thread_communicator.hpp>
#include <dsv32/dsv32.hpp>
#include <dsv32/generate/group.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "io/mp_test_support.hpp"
#include "support/test_support.hpp"

namespace {

using Model = dsv32::Transformer<dsv32_test::MpTestBf16Config>;
using Prompts = std::vector<std::vector<std::int32_t>>;

// Runs rank(r, model) for both ranks of a fresh two-rank random model; rethrows a rank's error.
template <class Rank>
void two_ranks(Rank rank) {
  dsv32_test::on_thread_ranks(2, [&](int r, dsv32::ThreadCommunicator<>& comm) {
    Model model(dsv32_test::runtime_options(), dsv32::Parallel::from(comm));
    model.init_random(5);
    rank(r, model);
  });
}

}  // namespace

TEST_CASE("GenerationGroup: rank 0 leads, the other rank follows; tokens as if both called generate()") {
  const Prompts prompts = {{11, 48, 85, 122}, {7, 300, 2, 41, 99}};
  dsv32::GenerateOptions o;
  o.max_new_tokens = 6;
  o.sampling.temperature = 0.8;  // sampled: every rank draws the same streams from the same logits
  o.seed = 3;

  std::vector<std::vector<std::int32_t>> direct;
  two_ranks([&](int r, Model& model) {
    const dsv32::GenerationResult result = dsv32::generate(model, prompts, o);
    if (r == 0) direct = {result.sequences[0].tokens, result.sequences[1].tokens};
  });
  REQUIRE(direct.size() == 2);

  std::vector<std::int32_t> streamed;
  std::vector<dsv32::GenerationResult> led;
  bool follower_broken = true;
  two_ranks([&](int r, Model& model) {
    dsv32::GenerationGroup group(model);
    CHECK(group.leader() == (r == 0));
    if (r != 0) {
      group.serve();
      follower_broken = group.broken();
      return;
    }
    dsv32::GenerateOptions streaming = o;
    streaming.on_token = [&](std::size_t b, std::int32_t id) {
      if (b == 0) streamed.push_back(id);
      return true;
    };
    led.push_back(group.generate(prompts, streaming));
    // Rank 0's callback stops sequence 0 after 2 tokens: both ranks stop it there.
    int seen = 0;
    streaming.on_token = [&](std::size_t b, std::int32_t) { return b != 0 || ++seen < 2; };
    led.push_back(group.generate(prompts, streaming));
    // A throwing callback: every rank stops, rank 0 rethrows, the group stays in step.
    streaming.on_token = [](std::size_t, std::int32_t) -> bool { throw std::runtime_error("output closed"); };
    CHECK_THROWS_WITH(group.generate(prompts, streaming), "output closed");
    CHECK_FALSE(group.broken());
    // Bad arguments: refused on rank 0 before anything is sent.
    dsv32::test::check_error([&] { group.generate({{1, 1000}}, o); }, dsv32::ErrorKind::invalid_argument,
                             {"outside the vocabulary"});
    led.push_back(group.generate(prompts, o));
    group.finish();
    dsv32::test::check_error([&] { group.generate(prompts, o); }, dsv32::ErrorKind::state, {"after finish()"});
  });
  CHECK_FALSE(follower_broken);
  REQUIRE(led.size() == 3);
  CHECK(led[0].sequences[0].tokens == direct[0]);
  CHECK(streamed == direct[0]);
  CHECK(led[0].sequences[1].tokens == direct[1]);
  CHECK(led[1].sequences[0].tokens.size() == 2);
  CHECK(led[1].sequences[0].finish == dsv32::FinishReason::stopped);
  CHECK(led[1].sequences[1].tokens == direct[1]);
  CHECK(led[2].sequences[0].tokens == direct[0]);
}
