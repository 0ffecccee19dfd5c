// Tests of <dsv32/mpi.hpp>, run by ctest under `mpirun -n 2` (tests/parallel/tests.cmake): every rank
// runs every case, in the same order, and every rank checks what it can see.
//  - MpiCommunicator's collectives equal ThreadCommunicator's bit for bit (f32 and bf16 sums, gather,
//    broadcast, the control plane), with sizes that do not divide by the world size, also on a
//    backend whose memory the host cannot read (staged through host copies).
//  - A random bf16 model of two ranks over MPI, from a Hugging Face directory sliced at load time and
//    from converted shards: both ranks' logits are byte-identical, equal to ThreadCommunicator's at the
//    same world size bit for bit, and close to one rank's (the tolerance of tests/io/test_convert.cpp).
//  - Greedy generation through GenerationGroup over 16 steps gives one rank's tokens; rank 0's
//    callback stops every rank.
//  - A rank whose shard is missing or disagrees, shards of another world size, a config that does not
//    divide: every rank throws the same error (run_collectively) instead of waiting forever (the
//    ctest TIMEOUT would catch a hang).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dsv32/io/checkpoint.hpp>
#include <dsv32/io/convert.hpp>
#include <dsv32/mpi.hpp>
#include <dsv32/serving/engine.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/mp_test_support.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;
using dsv32::bf16;
using dsv32::Cpu;
using dsv32::ErrorKind;
using dsv32_test::Call;
using dsv32_test::MpTestBf16Config;
using dsv32_test::runtime_options;

dsv32::MpiCommunicator<>& mpi() {
  static dsv32::MpiCommunicator<> comm;
  return comm;
}

// Rank 0's bytes on every rank.
std::vector<std::byte> from_rank0(std::vector<std::byte> bytes) {
  std::int64_t n = static_cast<std::int64_t>(bytes.size());
  mpi().broadcast_host(std::as_writable_bytes(std::span(&n, 1)), 0);
  bytes.resize(static_cast<std::size_t>(n));
  mpi().broadcast_host(bytes, 0);
  return bytes;
}
std::string from_rank0(const std::string& s) {
  const auto b = from_rank0(std::vector<std::byte>(reinterpret_cast<const std::byte*>(s.data()),
                                                   reinterpret_cast<const std::byte*>(s.data()) + s.size()));
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}
template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  return {p, p + v.size() * sizeof(T)};
}

// Rank r's input of the collective tests: values of very different sizes and signs (and -0), so that
// the order of a sum shows in its last bits.
template <class T>
std::vector<T> rank_values(int rank, std::size_t n) {
  std::mt19937 gen(1000u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float scale = (i % 3 == 0) ? 1e4f : (i % 3 == 1 ? 1.0f : 1e-3f);
    v[i] = T(i % 11 == 5 ? -0.0f : u(gen) * scale);
  }
  return v;
}

// What ThreadCommunicator computes for every rank's rank_values: f32 and bf16 sums, the gather.
template <class T>
std::vector<T> thread_sum(int world, std::size_t n) {
  auto comms = dsv32::ThreadCommunicator<>::group(world);
  std::vector<std::vector<T>> data;
  for (int r = 0; r < world; ++r) data.push_back(rank_values<T>(r, n));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      dsv32::ExecutionContext<Cpu> ctx;
      comms[r].all_reduce_sum(ctx, dsv32::VectorView<T>{data[r].data(), static_cast<std::int64_t>(n)});
    });
  for (auto& t : threads) t.join();
  return data[0];
}

// A model's logits over `calls` (a prefill, then greedy decode steps appended to `calls` when
// `decode_steps` > 0), as bytes.
template <class Model>
std::vector<std::byte> logits_of(Model& m, std::vector<Call>& calls, int decode_steps) {
  std::vector<float> all;
  dsv32::Logits last;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    last = m.forward(calls[i].tokens, 2, calls[i].start);
    all.insert(all.end(), last.values.begin(), last.values.end());
    if (i + 1 == calls.size() && decode_steps > 0) {
      calls.push_back({{last.argmax(0), last.argmax(1)}, calls[i].start + static_cast<std::int64_t>(calls[i].tokens.size() / 2)});
      --decode_steps;
    }
  }
  return bytes_of(all);
}

// The same calls at two ranks as threads of this process.
std::vector<std::byte> thread_logits(const fs::path& checkpoint, const std::vector<Call>& calls) {
  std::vector<std::vector<std::byte>> out(2);
  dsv32_test::on_thread_ranks(2, [&](int r, dsv32::ThreadCommunicator<>& comm) {
    dsv32::Transformer<MpTestBf16Config> m(runtime_options(), dsv32::Parallel::from(comm));
    dsv32::run_collectively(&comm, "loading", [&] { dsv32::load_checkpoint(m, checkpoint); });
    std::vector<Call> c = calls;
    out[r] = logits_of(m, c, 0);
  });
  CHECK(out[0] == out[1]);
  return out[0];
}

// The scratch directory of rank 0, known to every rank (the ranks of this test share a file system).
struct SharedDir {
  std::optional<dsv32::test::TempDir> dir;
  fs::path path;
  explicit SharedDir(const std::string& tag) {
    if (mpi().rank() == 0) dir.emplace(tag);
    path = from_rank0(dir ? dir->path.string() : std::string());
  }
  ~SharedDir() { mpi().all_reduce_min_host(0); }  // nobody reads the files once rank 0 removes them
  fs::path operator/(const std::string& name) const { return path / name; }
};

// A random MpTestBf16Config model as a Hugging Face directory and its converted shards (by rank 0).
struct Checkpoints {
  SharedDir dir{"mpi"};
  fs::path hf = dir / "hf", mp2 = dir / "mp2";
  Checkpoints() {
    dsv32::run_collectively(&mpi(), "writing the checkpoints", [&] {
      if (mpi().rank() != 0) return;
      dsv32_test::write_random_hf_checkpoint<MpTestBf16Config>(hf);
      dsv32::convert_hf_checkpoint(hf, mp2, 2);
    });
  }
};

// Runs `f` on every rank, which must throw the same dsv32::Error everywhere; returns its message.
template <class F>
std::string collective_error(F&& f, ErrorKind kind) {
  const std::string what = dsv32::test::error_of(std::forward<F>(f), kind);
  CHECK(from_rank0(what) == what);  // every rank throws the same
  return what;
}

}  // namespace

TEST_CASE("MpiCommunicator: sums, gathers and broadcasts equal ThreadCommunicator's bit for bit") {
  dsv32::MpiCommunicator<>& comm = mpi();
  const int world = comm.world_size(), rank = comm.rank();
  REQUIRE(world == 2);  // ctest runs mpirun -n 2
  dsv32::ExecutionContext<Cpu> ctx;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    CAPTURE(n);
    auto f = rank_values<float>(rank, n);
    comm.all_reduce_sum(ctx, dsv32::VectorView<float>{f.data(), static_cast<std::int64_t>(n)});
    CHECK(bytes_of(f) == bytes_of(thread_sum<float>(world, n)));
    CHECK(from_rank0(bytes_of(f)) == bytes_of(f));
    auto b = rank_values<bf16>(rank, n);
    comm.all_reduce_sum(ctx, dsv32::VectorView<bf16>{b.data(), static_cast<std::int64_t>(n)});
    CHECK(bytes_of(b) == bytes_of(thread_sum<bf16>(world, n)));

    const auto local = rank_values<float>(rank, n);
    std::vector<float> gathered(n * 2, -1.0f), want = rank_values<float>(0, n);
    const auto other = rank_values<float>(1, n);
    want.insert(want.end(), other.begin(), other.end());
    comm.all_gather(ctx, dsv32::VectorView<const float>{local.data(), static_cast<std::int64_t>(n)},
                    dsv32::VectorView<float>{gathered.data(), static_cast<std::int64_t>(2 * n)});
    CHECK(gathered == want);
  }
  std::vector<std::byte> bytes(5, std::byte(rank + 1));
  comm.broadcast(ctx, dsv32::VectorView<std::byte>{bytes.data(), 5}, 1);
  CHECK(bytes == std::vector<std::byte>(5, std::byte(2)));
  CHECK(comm.all_reduce_min_host(10 - rank) == 9);
  CHECK(comm.stats().collectives > 0);
  CHECK(comm.stats().bytes_sent > 0);

  // Arguments checked before any message, on the rank that passes them.
  std::vector<float> small(3);
  dsv32::test::check_error([&] {
    comm.all_gather(ctx, dsv32::VectorView<const float>{small.data(), 3}, dsv32::VectorView<float>{small.data(), 3});
  }, ErrorKind::invalid_argument, {"all_gather of 3 elements per rank needs an output of 6, got 3"});
  dsv32::test::check_error([&] { comm.broadcast_host(std::as_writable_bytes(std::span(small)), 2); },
                           ErrorKind::invalid_argument, {"broadcast root 2 outside [0, 2)"});
}

TEST_CASE("MpiCommunicator on a backend the host cannot read: staged through host copies, the same bits") {
  using Hidden = dsv32::testing::HostInvisible;
  using Memory = dsv32::Memory<Hidden>;
  dsv32::MpiCommunicator<Hidden> comm;
  dsv32::ExecutionContext<Hidden> ctx;
  constexpr std::size_t n = 1001;
  const auto values = rank_values<float>(comm.rank(), n);
  void* device = Memory::allocate(n * sizeof(float));
  Memory::copy_from_host(device, values.data(), n * sizeof(float));
  using space = dsv32::space_of<Hidden>;
  comm.all_reduce_sum(ctx, dsv32::VectorView<float, space>{static_cast<float*>(device), static_cast<std::int64_t>(n)});
  std::vector<float> back(n);
  Memory::copy_to_host(back.data(), device, n * sizeof(float));
  Memory::deallocate(device);
  CHECK(bytes_of(back) == bytes_of(thread_sum<float>(2, n)));
  CHECK(ctx.synchronizations == 2);  // one after the copy down, one after the copy up
}

TEST_CASE("two ranks over MPI: identical logits on both, ThreadCommunicator's bit for bit, close to one rank") {
  Checkpoints ck;
  // Over MPI, from the Hugging Face directory sliced at load time: a prefill and 6 greedy steps.
  dsv32::Transformer<MpTestBf16Config> model(runtime_options(), dsv32::Parallel::from(mpi()));
  dsv32::run_collectively(&mpi(), "loading", [&] { dsv32::load_checkpoint(model, ck.hf); });
  std::vector<Call> calls = dsv32_test::prefill_calls();
  const std::vector<std::byte> logits = logits_of(model, calls, 6);
  REQUIRE(calls.size() == 7);
  CHECK(from_rank0(logits) == logits);  // byte-identical on both ranks

  // From the converted shards: the same bytes.
  dsv32::Transformer<MpTestBf16Config> converted(runtime_options(), dsv32::Parallel::from(mpi()));
  dsv32::run_collectively(&mpi(), "loading", [&] { dsv32::load_checkpoint(converted, ck.mp2); });
  std::vector<Call> same = calls;
  CHECK(logits_of(converted, same, 0) == logits);

  if (mpi().rank() == 0) {
    // Two ranks as threads of this process: the same bytes.
    CHECK(thread_logits(ck.hf, calls) == logits);
    // One rank: within the tolerance of rank-wise bf16 rounding (tests/io/test_convert.cpp explains
    // it: about 2u of the largest logit measured, 5u allowed), and the same greedy choices.
    dsv32::Transformer<MpTestBf16Config> one(runtime_options());
    dsv32::load_checkpoint(one, ck.hf);
    std::vector<Call> c = calls;
    const std::vector<std::byte> single = logits_of(one, c, 0);
    const std::size_t per_call = 2 * MpTestBf16Config::vocab_size * sizeof(float);
    REQUIRE(single.size() == logits.size());
    double worst = 0;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      CAPTURE(i);
      std::vector<float> a(2 * MpTestBf16Config::vocab_size), b(a.size());
      std::memcpy(a.data(), logits.data() + i * per_call, per_call);
      std::memcpy(b.data(), single.data() + i * per_call, per_call);
      const double err = dsv32_test::relative_error(a, b);
      worst = std::max(worst, err);
      CHECK(err < 2e-2);
      for (int s = 0; s < 2; ++s) {
        const auto row = [&](const std::vector<float>& v) {
          return std::max_element(v.begin() + s * MpTestBf16Config::vocab_size,
                                  v.begin() + (s + 1) * MpTestBf16Config::vocab_size) -
                 (v.begin() + s * MpTestBf16Config::vocab_size);
        };
        CHECK(row(a) == row(b));
      }
    }
    MESSAGE("2 ranks over MPI vs 1 rank, " << calls.size() << " calls: max |logit difference| / max |logit| = " << worst);
  }
}

TEST_CASE("GenerationGroup over MPI: greedy tokens of 16 steps equal one rank's; rank 0's callback stops all") {
  Checkpoints ck;
  dsv32::Transformer<MpTestBf16Config> model(runtime_options(), dsv32::Parallel::from(mpi()));
  dsv32::run_collectively(&mpi(), "loading", [&] { dsv32::load_checkpoint(model, ck.hf); });
  const std::vector<std::vector<std::int32_t>> prompts = {{11, 48, 85, 122, 159}, {7, 300, 2, 41, 99, 17, 256}};
  dsv32::GenerateOptions o;
  o.max_new_tokens = 16;
  o.sampling.temperature = 0;
  dsv32::GenerationGroup group(model);
  if (!group.leader()) {
    group.serve();
    CHECK_FALSE(group.broken());
    return;
  }
  std::vector<std::int32_t> streamed;
  o.on_token = [&](std::size_t b, std::int32_t id) {
    if (b == 0) streamed.push_back(id);
    return true;
  };
  const dsv32::GenerationResult two = group.generate(prompts, o);
  CHECK(streamed == two.sequences[0].tokens);
  dsv32::Transformer<MpTestBf16Config> one_rank(runtime_options());
  dsv32::load_checkpoint(one_rank, ck.hf);
  o.on_token = nullptr;
  const dsv32::GenerationResult one = dsv32::generate(one_rank, prompts, o);
  for (std::size_t b = 0; b < 2; ++b) {
    CAPTURE(b);
    CHECK(two.sequences[b].tokens.size() == 16);
    CHECK(two.sequences[b].tokens == one.sequences[b].tokens);
  }

  // Rank 0's callback ends sequence 0 after 5 tokens: every rank stops it there (else the next
  // forward calls would differ in shape and the ranks would fall out of step).
  int seen = 0;
  o.on_token = [&](std::size_t b, std::int32_t) { return b != 0 || ++seen < 5; };
  const dsv32::GenerationResult stopped = group.generate(prompts, o);
  CHECK(stopped.sequences[0].tokens.size() == 5);
  CHECK(stopped.sequences[0].finish == dsv32::FinishReason::stopped);
  CHECK(stopped.sequences[1].tokens == one.sequences[1].tokens);
  // A callback that throws: every rank stops, rank 0 rethrows, the group stays usable.
  o.on_token = [&](std::size_t, std::int32_t) -> bool { throw std::runtime_error("output closed"); };
  CHECK_THROWS_WITH(group.generate(prompts, o), "output closed");
  CHECK_FALSE(group.broken());
  // Bad arguments are refused before anything is sent.
  dsv32::test::check_error([&] { group.generate({}, o); }, ErrorKind::invalid_argument, {"no prompts"});
  o.on_token = nullptr;
  CHECK(group.generate(prompts, o).sequences[1].tokens == one.sequences[1].tokens);
  group.finish();
}

TEST_CASE("the serving engine over MPI: rank 0 schedules, rank 1 follows; the tokens of one rank") {
  Checkpoints ck;
  dsv32::RuntimeOptions o = runtime_options();
  o.max_seq_len = 64;
  dsv32::EngineOptions eo;
  eo.cache_pages = 12;
  eo.page_size = 8;
  eo.max_running = 3;
  eo.step_tokens = 10;
  std::vector<dsv32::Request> requests;
  for (int i = 0; i < 5; ++i) {
    dsv32::Request r;
    for (int j = 0; j < 3 + 6 * i; ++j) r.prompt.push_back((j * 53 + 17 * i + 5) % 512);
    r.max_new_tokens = 8;
    r.sampling.temperature = 0;  // greedy: two ranks' logits differ from one rank's in rounding only
    requests.push_back(r);
  }
  dsv32::Transformer<MpTestBf16Config> model(o, dsv32::Parallel::from(mpi()));
  dsv32::run_collectively(&mpi(), "loading", [&] { dsv32::load_checkpoint(model, ck.hf); });
  dsv32::Engine engine(model, eo);
  if (mpi().rank() != 0) {
    engine.follow();
    return;
  }
  std::vector<dsv32::RequestHandle> handles;
  for (const auto& r : requests) handles.push_back(engine.submit(r));
  engine.run_until_idle();
  engine.stop();  // rank 1's follow() returns
  dsv32::Transformer<MpTestBf16Config> one_rank(o);
  dsv32::load_checkpoint(one_rank, ck.hf);
  dsv32::Engine alone(one_rank, eo);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    const auto h = alone.submit(requests[i]);
    alone.run_until_idle();
    CHECK(handles[i].wait().tokens.size() == 8);
    CHECK(handles[i].wait().tokens == h.wait().tokens);
  }
}

TEST_CASE("a rank that cannot load makes every rank throw the same error, naming it") {
  Checkpoints ck;
  const fs::path missing = ck.dir / "missing", wrong = ck.dir / "wrong", mp1 = ck.dir / "mp1";
  dsv32::run_collectively(&mpi(), "preparing", [&] {
    if (mpi().rank() != 0) return;
    fs::create_directories(missing);
    fs::copy_file(ck.mp2 / "model0-mp2.safetensors", missing / "model0-mp2.safetensors");
    fs::create_directories(wrong);  // rank 1's shard holds rank 0's experts
    fs::copy_file(ck.mp2 / "model0-mp2.safetensors", wrong / "model0-mp2.safetensors");
    fs::copy_file(ck.mp2 / "model0-mp2.safetensors", wrong / "model1-mp2.safetensors");
    dsv32::convert_hf_checkpoint(ck.hf, mp1, 1);
  });
  dsv32::Transformer<MpTestBf16Config> model(runtime_options(), dsv32::Parallel::from(mpi()));
  auto load = [&](const fs::path& dir) {
    return [&, dir] { dsv32::run_collectively(&mpi(), "loading", [&] { dsv32::load_checkpoint(model, dir); }); };
  };
  std::string what = collective_error(load(missing), ErrorKind::io);
  CHECK(what.find("rank 1 of 2 failed loading: checkpoint directory") != std::string::npos);
  CHECK(what.find("holds neither model1-mp2.safetensors") != std::string::npos);

  what = collective_error(load(wrong), ErrorKind::invalid_file);
  CHECK(what.find("rank 1 of 2 failed loading: file") != std::string::npos);
  CHECK(what.find("unexpected tensor 'layers.1.ffn.experts.0.w1.weight'") != std::string::npos);

  what = collective_error(load(mp1), ErrorKind::io);  // shards of another world size
  CHECK(what.find("rank 0 of 2 failed loading (rank 1 failed too): checkpoint directory") != std::string::npos);
  CHECK(what.find("it has model0-mp1.safetensors") != std::string::npos);

  // A config whose heads do not divide by the world size: refused on every rank when it is built.
  what = collective_error([&] {
    dsv32::run_collectively(&mpi(), "building the model", [&] {
      dsv32::Transformer<dsv32::TinyBf16> tiny(runtime_options(), dsv32::Parallel::from(mpi()));
    });
  }, ErrorKind::invalid_argument);
  CHECK(what.find("n_heads (3) must be divisible by the world size (2)") != std::string::npos);

  // Ranks that read different config.json files: refused on every rank, naming the odd one.
  what = collective_error([&] {
    dsv32::check_same_on_all_ranks(&mpi(), mpi().rank() == 1 ? "{\"dim\": 7168}" : "{\"dim\": 256}", "config.json");
  }, ErrorKind::invalid_config);
  CHECK(what.find("rank 1 of 2 disagrees with rank 0 on config.json") != std::string::npos);

  // After all that, the group still works: a good load and a forward pass.
  dsv32::run_collectively(&mpi(), "loading", [&] { dsv32::load_checkpoint(model, ck.hf); });
  std::vector<Call> calls = dsv32_test::prefill_calls();
  const auto logits = logits_of(model, calls, 0);
  CHECK(from_rank0(logits) == logits);
}

int main(int argc, char** argv) {
  dsv32::MpiSession session(argc, argv);
  int failed = 0;
  {
    doctest::Context context(argc, argv);
    failed = context.run();
    if (context.shouldExit()) return failed;
    // Every rank's verdict: the test fails if any rank failed.
    failed = mpi().all_reduce_min_host(failed == 0 ? 0 : -1) < 0 ? 1 : 0;
  }
  return failed;
}
