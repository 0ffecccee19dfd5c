// embed: dsv32 in a project of your own, found with find_package(dsv32) (see CMakeLists.txt).
//
//   embed                              a model of your own shape (MyConfig), seeded random weights
//   embed CHECKPOINT_DIR               a checkpoint (reference format or Hugging Face), run by
//                                      whichever compiled config its config.json matches
//   embed [CHECKPOINT_DIR] --tokenizer DIR "text"
//                                      text in (chat template), streamed text out (needs dsv32::tokenizer)
//   embed [CHECKPOINT_DIR] --serve     the serving engine: three requests submitted while it runs on its
//                                      own thread, streamed, one of them cancelled midway
//   mpirun -n 2 embed [...]            the same, the model split over 2 processes (needs dsv32::mpi):
//                                      rank 0 reads the input and prints, every rank computes
#include <dsv32/dsv32.hpp>
#if EMBED_WITH_TOKENIZER
#include <dsv32/tokenizer.hpp>
#endif
#if EMBED_WITH_MPI
#include <dsv32/mpi.hpp>
#endif

#include <dsv32/serving/engine.hpp>

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

// Shapes are compile-time. A model of your own is a struct that starts from ConfigDefaults (the
// reference's ModelArgs defaults) and overrides what differs; shapes that break an invariant
// (e.g. n_activated_experts > n_routed_experts) fail to compile with a message naming the field.
// This one is tiny but keeps DeepSeek's vocabulary, so the real tokenizer's ids fit.
struct MyConfig : dsv32::ConfigDefaults {
  static constexpr std::string_view name = "my-small-moe";
  static constexpr std::int64_t vocab_size = 129280, dim = 128, inter_dim = 256, moe_inter_dim = 64;
  static constexpr std::int64_t n_layers = 2, n_heads = 4, q_lora_rank = 64, kv_lora_rank = 64;
  static constexpr std::int64_t qk_nope_head_dim = 32, qk_rope_head_dim = 16, v_head_dim = 32;
  static constexpr std::int64_t n_routed_experts = 8, n_shared_experts = 1, n_activated_experts = 2;
  static constexpr std::int64_t index_n_heads = 4, index_topk = 8;
};
static_assert(dsv32::valid_config<MyConfig>);

// The configs this program is built for; add dsv32::Config671B to serve the released model.
using Configs = dsv32::ConfigList<MyConfig, dsv32::TinyBf16>;

struct Request {
  std::optional<std::filesystem::path> checkpoint, tokenizer;
  std::string text;
  bool serve = false;
  dsv32::CommunicatorBase* comm = nullptr;  // the ranks under mpirun (null: this process alone)
};

// Continuous batching: an Engine over the model, a page pool of cache memory, requests submitted from
// this thread while the engine's own thread runs them together; each streams its tokens, and one that
// would run long is cancelled once it has streamed three.
template <class Model>
void serve(Model& model, dsv32::CommunicatorBase* comm) {
  dsv32::EngineOptions eo;
  eo.cache_bytes = std::size_t{64} << 20;  // the page pool: 64 MiB of cache pages (16 positions each)
  eo.page_size = 16;
  dsv32::Engine engine(model, eo);
  if (comm && comm->rank() != 0) return engine.follow();  // the other ranks run rank 0's steps
  engine.start();
  std::mutex mu;
  std::condition_variable cv;
  int streamed_by_long = 0;
  std::vector<dsv32::RequestHandle> handles;
  for (int i = 0; i < 3; ++i) {
    dsv32::Request r;
    r.prompt = {1, 17, 42, 99, 256 + i};
    r.max_new_tokens = i == 1 ? 200 : 8;  // request 1 would run long
    r.sampling.temperature = 0;          // greedy; set temperature, top_p, top_k and seed to sample
    r.on_token = [&, i](const dsv32::TokenEvent&) {  // on the engine's thread, as each token comes
      std::lock_guard<std::mutex> lock(mu);
      if (i == 1) ++streamed_by_long;
      cv.notify_all();
      return true;  // false would end this request here
    };
    handles.push_back(engine.submit(std::move(r)));
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return streamed_by_long >= 3; });
  }
  engine.cancel(handles[1]);  // it ends at the engine's next step; its pages go back to the pool
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const dsv32::RequestResult& r = handles[i].wait();
    std::printf("request %zu: %zu tokens, %s, first token after %.1f ms:", i, r.tokens.size(), dsv32::to_string(r.finish),
                1e3 * r.stats.ttft_s);
    for (const std::int32_t t : r.tokens) std::printf(" %d", t);
    std::printf("\n");
  }
  engine.stop();
  const dsv32::EngineStats st = engine.stats();
  std::printf("engine: %lld steps, %lld of %lld pages in use after the run\n", static_cast<long long>(st.steps),
              static_cast<long long>(st.pages_used), static_cast<long long>(st.pages));
}

template <class Config>
void run(const Request& req, const dsv32::RuntimeOptions& options) {
  // Each rank holds its part of the model; a rank that fails to load makes every rank throw.
  dsv32::Transformer<Config> model(options, req.comm ? dsv32::Parallel::from(*req.comm) : dsv32::Parallel{});
  dsv32::run_collectively(req.comm, "loading", [&] {
    if (req.checkpoint) dsv32::load_checkpoint(model, *req.checkpoint);
    else model.init_random(/*seed=*/42);
  });
  if (req.serve) return serve(model, req.comm);
  // Rank 0 reads the input and prints; the other ranks compute rank 0's generate() calls.
  dsv32::GenerationGroup group(model);
  if (!group.leader()) return group.serve();

  std::vector<std::int32_t> prompt = {1, 17, 42, 99, 256};
  dsv32::GenerateOptions opts;
  opts.max_new_tokens = 8;  // greedy (temperature 0) unless you set opts.sampling
  opts.sampling.temperature = 0;
#if EMBED_WITH_TOKENIZER
  std::optional<dsv32::Tokenizer> tok;
  std::optional<dsv32::StreamDecoder> stream;
  if (req.tokenizer) {
    tok = dsv32::Tokenizer::from_directory(*req.tokenizer);
    const std::vector<dsv32::ChatMessage> chat = {{"user", req.text}};
    prompt = tok->encode_chat(chat, /*add_generation_prompt=*/true);
    opts.eos_id = tok->eos_id();
    stream = tok->stream_decoder(/*skip_special_tokens=*/true);
  }
#endif
  std::printf("%.*s:", static_cast<int>(Config::name.size()), Config::name.data());
  opts.on_token = [&](std::size_t, std::int32_t id) {  // streamed as each token is produced
#if EMBED_WITH_TOKENIZER
    if (stream) {
      std::printf("%s", (tok->contains(id) ? stream->push(id) : std::string("\xEF\xBF\xBD")).c_str());
      return true;
    }
#endif
    std::printf(" %d", id);
    return true;
  };
  const dsv32::GenerationResult r = group.generate({prompt}, opts);
  std::printf("\n%zu prompt tokens, %lld generated, %.1f tokens/s\n", prompt.size(),
              static_cast<long long>(r.stats.generated_tokens), r.stats.decode_tokens_per_s());
}

int main(int argc, char** argv) {
  Request req;
#if EMBED_WITH_MPI
  std::optional<dsv32::MpiSession> mpi;          // under mpirun: MPI_Init ... MPI_Finalize
  std::optional<dsv32::MpiCommunicator<>> comm;  // one rank per process
  if (dsv32::MpiSession::launched_by_mpi()) {
    mpi.emplace(argc, argv);
    if (mpi->world_size() > 1) req.comm = &comm.emplace();
  }
#endif
  const bool rank0 = req.comm == nullptr || req.comm->rank() == 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 2 < argc) {
      req.tokenizer = argv[++i];
      req.text = argv[++i];
    } else if (a == "--serve") {
      req.serve = true;
    } else if (a.rfind("--", 0) != 0 && !req.checkpoint) {
      req.checkpoint = a;
    } else {
      std::fprintf(stderr, "usage: embed [CHECKPOINT_DIR] [--tokenizer DIR \"text\" | --serve]\n");
      return 2;
    }
  }
#if !EMBED_WITH_TOKENIZER
  if (req.tokenizer) {
    std::fprintf(stderr, "embed: built without dsv32::tokenizer; text needs it\n");
    return 2;
  }
#endif
  try {
    if (!req.checkpoint) {
      run<MyConfig>(req, dsv32::RuntimeOptions{.max_batch_size = 1, .max_seq_len = 256});
      return 0;
    }
    dsv32::ModelArgs args;  // config.json, reference or Hugging Face naming; every rank reads its own
    dsv32::run_collectively(req.comm, "reading config.json", [&] { args = dsv32::read_model_config(*req.checkpoint); });
    dsv32::dispatch_config<Configs>(args, [&]<class C>() { run<C>(req, args.runtime); });
    return 0;
  } catch (const dsv32::Error& e) {  // bad files, shapes, tokens: one exception type, a clear message
    if (rank0) std::fprintf(stderr, "embed: %s\n", e.what());  // every rank has it: rank 0 says it
    return 1;
  }
}
