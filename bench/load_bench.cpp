// dsv32-bench-load: peak host memory and time while loading a mid-size checkpoint (the 430M-parameter
// bench-2layer model of dsv32-bench-forward, FP8, ~0.5 GB) into
//   - the CPU backend, borrowing the mapped file's bytes in place (the default),
//   - the CPU backend with borrowing off (every tensor copied into the model's one weight arena),
//   - testing::HostInvisible, a backend the host cannot read (every tensor uploaded through the pinned
//     staging buffer, 64 MiB by default).
// Each load runs in a fresh process, so its peak resident memory (VmHWM) is its own. The "host
// overhead" column is the peak minus the mapped file and minus the backend's own memory (the arena,
// caches and scratch: on HostInvisible that "device" memory is host memory too, so it is subtracted).
//   dsv32-bench-load [staging MiB]      (writes the checkpoint to $TMPDIR once, then measures)
#include <dsv32/dsv32.hpp>
#include <dsv32/io/safetensors.hpp>
#include <dsv32/testing/host_invisible.hpp>

#include <chrono>
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

template <class Backend>
int measure(const fs::path& file, bool borrow, std::size_t staging) {
  using namespace dsv32;
  RuntimeOptions o;
  o.max_batch_size = 1;
  o.max_seq_len = 1024;
  Transformer<bench::Bench2Layer, Backend> model(o);
  const long rss_before = status_kb("VmRSS");
  std::uint64_t live_before = 0;
  if constexpr (!Memory<Backend>::host_visible) live_before = Memory<Backend>::live_bytes();
  LoadOptions lo;
  lo.borrow = borrow;
  lo.staging_bytes = staging;
  const auto t0 = std::chrono::steady_clock::now();
  load_checkpoint(model, file, lo);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const MemoryPlan plan = model.memory_plan();
  const double mib = 1 << 20;
  const double file_mib = static_cast<double>(fs::file_size(file)) / mib;
  // backend memory the model holds: everything but the weights it borrows from the file
  std::size_t borrowed = 0;
  model.visit([&](const std::string&, Parameter<Backend>& p) { borrowed += p.borrowed() ? p.bytes() : 0; });
  double backend_mib = static_cast<double>(plan.total() - borrowed) / mib;
  if constexpr (!Memory<Backend>::host_visible)
    backend_mib = static_cast<double>(Memory<Backend>::live_bytes() - live_before) / mib;
  const double peak = static_cast<double>(status_kb("VmHWM")) / 1024.0, before = rss_before / 1024.0;
  std::printf("%-34s %8.0f ms %9.1f %9.1f %9.1f %9.1f %12.1f\n",
              (std::string(Backend::name) + (borrow ? ", borrowing" : ", copying") +
               (Memory<Backend>::host_visible ? "" : ", staged " + std::to_string(staging >> 20) + " MiB"))
                  .c_str(),
              ms, before, peak, file_mib, backend_mib, peak - before - file_mib - backend_mib);
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
    RuntimeOptions o;
    o.max_batch_size = 1;
    o.max_seq_len = 16;
    Transformer<bench::Bench2Layer> model(o);
    model.init_random(1);
    SafetensorsWriter w;
    model.visit([&](const std::string& name, Parameter<Cpu>& p) { w.add(name, p.dtype(), p.shape().dims(), p.data(), p.bytes()); });
    w.write(file);
  }
  std::printf("bench-2layer checkpoint: %.1f MiB; RSS in MiB\n", static_cast<double>(fs::file_size(file)) / (1 << 20));
  std::printf("%-34s %11s %9s %9s %9s %9s %12s\n", "load", "time", "before", "peak", "file", "backend", "host overhead");
  for (const char* mode : {"cpu-borrow", "cpu-copy", "host-invisible"}) {
    const std::string cmd = std::string("\"") + argv[0] + "\" --child " + mode + " " + std::to_string(staging_mib);
    if (std::system(cmd.c_str()) != 0) return 1;
  }
  return 0;
}
