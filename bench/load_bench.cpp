// dsv32-bench-load: peak host memory and time while loading a mid-size checkpoint (the 430M-parameter
// bench-2layer model of dsv32-bench-forward, FP8, ~0.5 GB) into
//   - the CPU backend, borrowing the mapped file's bytes in place (the default),
//   - the CPU backend with borrowing off (every tensor copied into the model's one weight arena),
//   - testing::HostInvisible, a backend the host cannot read (every tensor uploaded through the pinned
//     staging buffer, 64 MiB by default).
// Each load runs in a fresh process; a thread samples /proc/self/status every millisecond for the
// peak anonymous (RssAnon) and file-backed (RssFile: pages of the mapped checkpoint) resident memory.
// "host overhead" is the peak anonymous memory the load added beyond the backend memory it filled (the
// weights it did not borrow, caches, RoPE tables — on HostInvisible that "device" memory is host
// memory too, so it is subtracted): the staging buffer and whatever else loading holds on the host.
//   dsv32-bench-load [staging MiB]      (writes the checkpoint to $TMPDIR once, then measures)
#include <dsv32/dsv32.hpp>
#include <dsv32/io/safetensors.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_configs.hpp"

namespace {

namespace fs = std::filesystem;

// kB fields of /proc/self/status.
long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + key.size());
  return -1;
}

// Samples RssAnon and RssFile (kB) until stopped, keeping their peaks.
class RssSampler {
 public:
  RssSampler() : thread_([this] {
      while (!stop_.load()) {
        anon_ = std::max(anon_.load(), status_kb("RssAnon"));
        file_ = std::max(file_.load(), status_kb("RssFile"));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }) {}
  ~RssSampler() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  double peak_anon_mib() const { return static_cast<double>(anon_.load()) / 1024.0; }
  double peak_file_mib() const { return static_cast<double>(file_.load()) / 1024.0; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> anon_{0}, file_{0};
  std::thread thread_;
};

template <class Backend>
int measure(const fs::path& file, bool borrow, std::size_t staging) {
  using namespace dsv32;
  RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = 1024;
  Transformer<bench::Bench2Layer, Backend> model(o);
  const double anon_before = static_cast<double>(status_kb("RssAnon")) / 1024.0;
  std::uint64_t live_before = 0;
  if constexpr (!Memory<Backend>::host_visible) live_before = Memory<Backend>::live_bytes();
  LoadOptions lo;
  lo.borrow = borrow;
  lo.staging_bytes = staging;
  RssSampler sampler;
  const auto t0 = std::chrono::steady_clock::now();
  load_checkpoint(model, file, lo);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  sampler.stop();
  const double mib = 1 << 20;
  // backend memory the load filled: the weights it did not borrow, the zero-filled caches and the RoPE
  // tables (the forward scratch is reserved but not touched, so it is not resident)
  std::size_t borrowed = 0;
  model.visit([&](const std::string&, Parameter<Backend>& p) { borrowed += p.borrowed() ? p.bytes() : 0; });
  const MemoryPlan plan = model.memory_plan();
  const double backend_mib = static_cast<double>(plan.weights - borrowed + plan.caches + plan.rope_tables) / mib;
  (void)live_before;
  const std::string what = std::string(Backend::name) + (borrow && Memory<Backend>::host_visible ? ", borrowing" : ", copying") +
                           (Memory<Backend>::host_visible ? "" : ", staged " + std::to_string(staging >> 20) + " MiB");
  std::printf("%-36s %8.0f ms %10.1f %10.1f %10.1f %12.1f\n", what.c_str(), ms, sampler.peak_file_mib(),
              sampler.peak_anon_mib() - anon_before, backend_mib, sampler.peak_anon_mib() - anon_before - backend_mib);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv32;
  const fs::path file = fs::temp_directory_path() / "dsv32-bench-load.safetensors";
  if (argc > 2) {  // child: --child MODE STAGING
    const std::string mode = argv[2];
    const std::size_t staging = static_cast<std::size_t>(std::atol(argv[3])) << 20;
    if (mode == "cpu-borrow") return measure<Cpu>(file, true, staging);
    if (mode == "cpu-copy") return measure<Cpu>(file, false, staging);
    return measure<testing::HostInvisible>(file, true, staging);
  }
  const long staging_mib = argc > 1 ? std::atol(argv[1]) : 64;
  if (!fs::exists(file)) {
    std::printf("writing %s ...\n", file.string().c_str());
    std::fflush(stdout);
    RuntimeOptions o;
    o.max_batch_size = 1;
    o.max_seq_len = 16;
    Transformer<bench::Bench2Layer> model(o);
    model.init_random(1);
    SafetensorsWriter w;
    model.visit([&](const std::string& name, Parameter<Cpu>& p) { w.add(name, p.dtype(), p.shape().dims(), p.data(), p.bytes()); });
    w.write(file);
  }
  std::printf("bench-2layer checkpoint: %.1f MiB; peak resident memory in MiB during the load\n",
              static_cast<double>(fs::file_size(file)) / (1 << 20));
  std::printf("%-36s %11s %10s %10s %10s %12s\n", "load", "time", "file pages", "anonymous", "backend", "host overhead");
  std::fflush(stdout);
  for (const char* mode : {"cpu-borrow", "cpu-copy", "host-invisible"}) {
    const std::string cmd = std::string("\"") + argv[0] + "\" --child " + mode + " " + std::to_string(staging_mib);
    if (std::system(cmd.c_str()) != 0) return 1;
  }
  return 0;
}
