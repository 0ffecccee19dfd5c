/// \file
/// \brief NcclCommunicator: model parallelism across GPUs over NCCL — a Communicator<Cuda> whose
///        collectives read and write device memory, ordered on the CUDA backend's stream.
///
/// \code
/// // one process, one GPU (world size 1: no MPI needed)
/// dsv32::NcclCommunicator comm;                                  // NcclBootstrap::single()
/// // W processes, one GPU each (<dsv32/parallel/nccl_mpi_bootstrap.hpp>, link dsv32::mpi too)
/// dsv32::NcclCommunicator comm(dsv32::nccl_bootstrap_over_mpi(mpi), dsv32::mpi_local_rank());
/// dsv32::Transformer<MyConfig, dsv32::Cuda> model(options, dsv32::Parallel::from(comm));
/// \endcode
///
/// **Numerics: the sums are dsv32's, not NCCL's.** NCCL's own ncclAllReduce(ncclSum) does not fix the
/// order in which it adds the ranks' values (it depends on the algorithm — ring or tree —, the protocol,
/// the number of channels, hence on the topology and the message size), so its results could differ
/// from ThreadCommunicator's and MpiCommunicator's in the last bits, and between runs on other machines.
/// NcclCommunicator does not use it. Each all_reduce_sum is the scheme MpiCommunicator uses: a
/// reduce-scatter done with grouped ncclSend / ncclRecv (rank r receives every rank's r-th chunk), a
/// kernel that adds the W copies of the chunk **in rank order 0, 1, ..., W - 1 in f32 starting from +0**,
/// and an ncclAllGather of the summed chunks. Results are therefore bit-identical to ThreadCommunicator's
/// and MpiCommunicator's at the same W (and the same on every rank, run after run); each rank sends
/// 2 (W - 1) / W of the buffer, as a ring all-reduce does. bf16 buffers travel as bf16 (ncclBfloat16),
/// are widened exactly, summed in f32 as above and rounded to bf16 once, as the other communicators do
/// (the reference sums bf16 in bf16; dsv32's contract, Communicator::all_reduce_sum, is the f32 sum).
/// all_gather and broadcast move bytes and are exact whatever NCCL's algorithm.
///
/// **What was run.** This communicator was written and compiled without a GPU; its test
/// (tests/cuda/test_nccl.cu) runs at world size 1 on a device, and the MPI bootstrap is tested over
/// MPI on the host (docs/parallelism.md says what has and has not run).
///
/// Needs nvcc (it defines a kernel): include <dsv32/nccl.hpp> from a .cu file and link dsv32::nccl.
#pragma once

#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>

#include "dsv32/backend/cuda/launch.cuh"
#include "dsv32/backend/cuda/memory.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/parallel/nccl_bootstrap.hpp"
#include "dsv32/parallel/nccl_check.hpp"

namespace dsv32 {

namespace nccl {

/// \addtogroup cuda
/// @{

/// \brief A value as the rank-order sum reads it (f32: itself; bf16 bits: widened exactly).
__device__ inline float widen(float v) { return v; }
/// \brief A value as the rank-order sum reads it (f32: itself; bf16 bits: widened exactly).
__device__ inline float widen(cuda::bf16_bits v) { return cuda::bf16_to_float(v); }
/// \brief Stores the f32 sum as `T` (f32: itself; bf16 bits: rounded to nearest even, once).
template <class T>
__device__ inline T narrow(float v) {
  if constexpr (sizeof(T) == sizeof(float)) return v;
  else return cuda::float_to_bf16(v);
}

/// \brief `out[i] = sum over r = 0, 1, ..., world - 1 of chunks[r * stride + i]`, added in that order in
///        f32 starting from +0 (so a sum of -0s is +0, as on the host), for i in [0, n).
/// \tparam T float or cuda::bf16_bits
template <class T>
__global__ void sum_chunks_in_rank_order(const T* chunks, std::int64_t stride, int world, std::int64_t n, T* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < world; ++r) sum += widen(chunks[r * stride + i]);
    out[i] = narrow<T>(sum);
  }
}

/// \brief Ends an NCCL group (ncclGroupStart) when it goes out of scope, also when an error unwinds it.
class GroupScope {
 public:
  /// \brief ncclGroupStart.
  GroupScope() { DSV32_NCCL_CHECK(ncclGroupStart()); }
  GroupScope(const GroupScope&) = delete;
  GroupScope& operator=(const GroupScope&) = delete;
  /// \brief ncclGroupEnd, unless end() ran (its result is lost here: the error already unwinding wins).
  ~GroupScope() {
    if (open_) (void)ncclGroupEnd();
  }
  /// \brief ncclGroupEnd: launches the group's operations.
  /// \throws Error naming ncclGroupEnd when one of them could not be launched
  void end() {
    open_ = false;
    DSV32_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

/// @}

}  // namespace nccl

/// \addtogroup cuda
/// @{

/// \brief A Communicator<Cuda> over NCCL: one rank per GPU, ranks in one process or many, on one host or
///        many. Collectives take device memory and are ordered on the caller's ExecutionContext<Cuda>
///        stream (they return before the data has moved, as every kernel of the backend does).
///
/// One GPU per rank: the constructor makes `device` current (or takes the current one) and binds the
/// NCCL communicator to it; a context of another device is refused. The model's ExecutionContext
/// (a Transformer makes its own on the current device) must be on that device: construct the
/// communicator first, or pick the device yourself (cudaSetDevice, CUDA_VISIBLE_DEVICES).
///
/// The control plane (broadcast_host(), all_reduce_min_host(), which run_collectively() and
/// GenerationGroup use between forward passes) goes over NCCL too, on the communicator's own stream,
/// through a small device buffer: each call synchronizes that stream.
///
/// all_reduce_sum needs device scratch of about twice the buffer (received chunks, gathered sums): it is
/// allocated by the first all-reduce that needs more than there is (a device synchronization, then
/// cudaMalloc), so call reserve() with the largest all-reduce (e.g. max_batch_size * max_seq_len * dim
/// f32 elements) before forward() if the first pass must not allocate. The scratch is shared by the
/// collectives: issue them on one stream (one context) at a time.
///
/// Errors: every NCCL and CUDA call is checked and throws dsv32::Error naming it (DSV32_NCCL_CHECK). A
/// collective that fails leaves the communicator unusable (its later collectives throw Error(state)),
/// and its destructor then aborts the NCCL communicator (ncclCommAbort) instead of destroying it
/// collectively; so does a destructor that runs while an exception unwinds, since the other ranks may
/// not take part. A rank that fails between collectives leaves the others waiting in their next one,
/// as with NCCL itself: agree on the outcome of fallible steps with run_collectively() first.
///
/// Not copyable, not movable; it must outlive the models using it. One thread at a time may use it.
class NcclCommunicator : public Communicator<Cuda> {
  using space = space_of<Cuda>;

 public:
  /// \brief A group of one rank on `device` (default: the current device), with a fresh unique id: the
  ///        single-process convenience, which needs neither MPI nor a second GPU.
  /// \throws as the constructor below
  explicit NcclCommunicator(int device = -1) : NcclCommunicator(NcclBootstrap::single(), device) {}

  /// \brief This process's rank of the NCCL group `bootstrap` describes, on `device` (default: the
  ///        current device), which it makes current. ncclCommInitRank blocks until every rank of the
  ///        group has joined.
  /// \param bootstrap the group's unique id (the same on every rank), this rank and the world size
  /// \param device    the CUDA device of this rank (-1: the current one); one device per rank
  /// \throws Error(invalid_argument) for a bootstrap out of range; Error(unsupported) without a CUDA
  ///         device; Error naming the NCCL or CUDA call that failed otherwise
  explicit NcclCommunicator(const NcclBootstrap& bootstrap, int device = -1)
      : world_(bootstrap.world_size), rank_(bootstrap.rank) {
    bootstrap.validate();
    int count = 0;
    DSV32_CUDA_CHECK(cudaGetDeviceCount(&count));
    DSV32_CHECK(count > 0, unsupported, "NcclCommunicator: no CUDA device present");
    if (device >= 0) DSV32_CUDA_CHECK(cudaSetDevice(device));
    DSV32_CUDA_CHECK(cudaGetDevice(&device_));
    ncclComm_t c = nullptr;
    const ncclResult_t init = ncclCommInitRank(&c, world_, bootstrap.id, rank_);
    comm_.reset(c);  // owned, and aborted on release, from here on: also if the init failed half-way
    DSV32_NCCL_CHECK(init);
    control_stream_ = cuda::make_stream();
    control_ = cuda::DeviceBuffer(kControlBytes);
    comm_.abort_on_release = false;  // a healthy communicator: released collectively (ncclCommDestroy)
    uncaught_ = std::uncaught_exceptions();
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  /// \brief Releases the NCCL communicator: ncclCommDestroy when healthy, ncclCommAbort after a failed
  ///        collective, abort() or during stack unwinding (the other ranks may not be destroying theirs).
  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > uncaught_) comm_.abort_on_release = true;
  }

  int world_size() const override { return world_; }
  int rank() const override { return rank_; }
  /// \brief The CUDA device this rank runs on.
  int device() const noexcept { return device_; }
  /// \brief The NCCL communicator (owned: do not destroy it), e.g. for collectives of the caller's own.
  ncclComm_t handle() const noexcept { return comm_.get(); }
  /// \brief Whether a collective failed or abort() was called: the communicator is then unusable.
  bool broken() const noexcept { return comm_.abort_on_release; }
  /// \brief Aborts the NCCL communicator now (ncclCommAbort: its pending operations on this rank stop)
  ///        and makes every later collective throw Error(state). Other ranks are not told: their
  ///        pending collectives fail or hang as NCCL decides (see NCCL_TIMEOUT-style settings of your
  ///        launcher); use it when this rank is about to exit anyway.
  void abort() noexcept {
    comm_.abort_on_release = true;
    comm_.reset(nullptr);
  }

  /// \brief Makes sure all_reduce_sum of up to `elements` f32 elements (or bf16 ones) allocates no
  ///        device memory.
  /// \throws Error naming cudaMalloc when the allocation fails
  void reserve(std::int64_t elements) { scratch_for(elements, sizeof(float)); }
  /// \brief Bytes of device scratch held for all_reduce_sum.
  std::size_t scratch_bytes() const noexcept { return scratch_.bytes(); }

  /// \brief Element-wise f32 sum of every rank's `data` in rank order, on every rank (see the file's
  ///        comment: a reduce-scatter, a rank-order sum kernel, an all-gather).
  /// \throws Error(invalid_argument) for a context on another device; Error naming the call that failed
  void all_reduce_sum(ExecutionContext<Cuda>& ctx, VectorView<float, space> data) override {
    check_context(ctx);
    guarded([&] { reduce(ctx, data.data, data.size, ncclFloat32); });
  }
  /// \brief Element-wise sum of every rank's bf16 `data`: exchanged as bf16, widened to f32, summed in
  ///        rank order, rounded to bf16 once.
  /// \throws as the f32 overload
  void all_reduce_sum(ExecutionContext<Cuda>& ctx, VectorView<bf16, space> data) override {
    check_context(ctx);
    guarded([&] { reduce(ctx, reinterpret_cast<cuda::bf16_bits*>(data.data), data.size, ncclBfloat16); });
  }
  /// \brief Concatenates every rank's `local` in rank order into `out` (ncclAllGather).
  /// \throws Error(invalid_argument) unless `out` is world_size() times `local`, or for a context on
  ///         another device; Error naming the call that failed
  void all_gather(ExecutionContext<Cuda>& ctx, VectorView<const float, space> local,
                  VectorView<float, space> out) override {
    DSV32_CHECK(out.size == local.size * world_, invalid_argument, "NcclCommunicator: all_gather of ", local.size,
                " elements per rank needs an output of ", local.size * world_, ", got ", out.size);
    check_context(ctx);
    guarded([&] {
      if (local.size == 0) return;
      DSV32_NCCL_CHECK(ncclAllGather(local.data, out.data, static_cast<std::size_t>(local.size), ncclFloat32,
                                     comm_.get(), ctx.stream()));
    });
  }
  /// \brief Copies rank `root`'s `data` into every rank's `data` (ncclBroadcast, in place).
  /// \throws Error(invalid_argument) for a root outside the group or a context on another device; Error
  ///         naming the call that failed
  void broadcast(ExecutionContext<Cuda>& ctx, VectorView<std::byte, space> data, int root) override {
    check_root(root);
    check_context(ctx);
    guarded([&] {
      if (data.size == 0) return;
      DSV32_NCCL_CHECK(ncclBroadcast(data.data, data.data, static_cast<std::size_t>(data.size), ncclUint8, root,
                                     comm_.get(), ctx.stream()));
    });
  }

  /// \brief Control plane: copies rank `root`'s host bytes into every rank's `data`, through the
  ///        communicator's device buffer in pieces, on its own stream; returns when they are there.
  /// \throws Error(invalid_argument) for a root outside the group; Error naming the call that failed
  void broadcast_host(std::span<std::byte> data, int root) override {
    check_root(root);
    guarded([&] {
      cudaStream_t s = control_stream_.get();
      for (std::size_t first = 0; first < data.size(); first += kControlBytes) {
        const std::size_t n = std::min(kControlBytes, data.size() - first);
        if (rank_ == root)
          DSV32_CUDA_CHECK(cudaMemcpyAsync(control_.data(), data.data() + first, n, cudaMemcpyHostToDevice, s));
        DSV32_NCCL_CHECK(ncclBroadcast(control_.data(), control_.data(), n, ncclUint8, root, comm_.get(), s));
        if (rank_ != root)
          DSV32_CUDA_CHECK(cudaMemcpyAsync(data.data() + first, control_.data(), n, cudaMemcpyDeviceToHost, s));
        DSV32_CUDA_CHECK(cudaStreamSynchronize(s));
      }
    });
  }
  /// \brief Control plane: the minimum of every rank's `value` (ncclAllReduce with ncclMin on ncclInt64:
  ///        exact, whatever the order), on every rank.
  /// \throws Error naming the call that failed
  std::int64_t all_reduce_min_host(std::int64_t value) override {
    std::int64_t m = value;
    guarded([&] {
      cudaStream_t s = control_stream_.get();
      auto* d = static_cast<std::int64_t*>(control_.data());
      DSV32_CUDA_CHECK(cudaMemcpyAsync(d, &value, sizeof value, cudaMemcpyHostToDevice, s));
      DSV32_NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt64, ncclMin, comm_.get(), s));
      DSV32_CUDA_CHECK(cudaMemcpyAsync(&m, d, sizeof m, cudaMemcpyDeviceToHost, s));
      DSV32_CUDA_CHECK(cudaStreamSynchronize(s));
    });
    return m;
  }

 private:
  static constexpr std::size_t kControlBytes = std::size_t{1} << 20;  // control-plane pieces

  // The owned ncclComm_t: ncclCommDestroy when released healthy, ncclCommAbort otherwise (from its
  // creation until the constructor finishes, and after a failure).
  struct OwnedComm {
    OwnedComm() = default;
    OwnedComm(const OwnedComm&) = delete;
    OwnedComm& operator=(const OwnedComm&) = delete;
    ~OwnedComm() { reset(nullptr); }
    ncclComm_t get() const noexcept { return comm; }
    void reset(ncclComm_t c) noexcept {
      if (comm != nullptr) (void)(abort_on_release ? ncclCommAbort(comm) : ncclCommDestroy(comm));
      comm = c;
    }
    ncclComm_t comm = nullptr;
    bool abort_on_release = true;
  };

  // Runs one collective's calls; a failure marks the communicator broken (later calls throw
  // Error(state), the destructor aborts) and propagates.
  template <class Body>
  void guarded(Body&& body) {
    DSV32_CHECK(!broken(), state, "NcclCommunicator (rank ", rank_, " of ", world_,
                "): unusable after an earlier failure or abort()");
    try {
      body();
    } catch (...) {
      comm_.abort_on_release = true;
      throw;
    }
  }

  void check_root(int root) const {
    DSV32_CHECK(root >= 0 && root < world_, invalid_argument, "NcclCommunicator: broadcast root ", root,
                " outside [0, ", world_, ")");
  }
  void check_context(const ExecutionContext<Cuda>& ctx) const {
    DSV32_CHECK(ctx.device() == device_, invalid_argument, "NcclCommunicator: rank ", rank_, " runs on CUDA device ",
                device_, " but the execution context is on device ", ctx.device(), " (one device per rank)");
  }

  // Device scratch for an all-reduce of `elements` of `size` bytes: [world, chunk] received chunks and
  // [world, chunk] gathered sums. Grows (after a device synchronization: earlier collectives may still
  // read the old one) but never shrinks.
  void* scratch_for(std::int64_t elements, std::size_t size) {
    const std::int64_t chunk = (elements + world_ - 1) / world_;
    const std::size_t bytes = 2 * static_cast<std::size_t>(world_) * static_cast<std::size_t>(chunk) * size;
    if (bytes > scratch_.bytes()) {
      DSV32_CUDA_CHECK(cudaDeviceSynchronize());
      scratch_ = cuda::DeviceBuffer();
      scratch_ = cuda::DeviceBuffer(bytes);
    }
    return scratch_.data();
  }

  // The in-place sum of every rank's `data` (T = float or bf16 bits, sent as `type`), MpiCommunicator's
  // scheme on the device: rank r receives the r-th chunk of every rank's buffer and sums it in rank
  // order, then the summed chunks are gathered everywhere.
  template <class T>
  void reduce(ExecutionContext<Cuda>& ctx, T* data, std::int64_t n, ncclDataType_t type) {
    if (n == 0) return;
    const std::int64_t world = world_, chunk = (n + world - 1) / world;
    auto first = [&](std::int64_t r) { return std::min(n, r * chunk); };
    auto count = [&](std::int64_t r) { return static_cast<std::size_t>(std::min(n, (r + 1) * chunk) - first(r)); };
    T* received = static_cast<T*>(scratch_for(n, sizeof(T)));  // [world, chunk]: rank r's copy of my chunk
    T* gathered = received + world * chunk;                       // [world, chunk]: rank r's summed chunk
    const std::size_t mine = count(rank_);
    cudaStream_t s = ctx.stream();
    {
      nccl::GroupScope group;
      for (int peer = 0; peer < world_; ++peer) {
        if (peer == rank_) continue;
        if (count(peer) > 0) DSV32_NCCL_CHECK(ncclSend(data + first(peer), count(peer), type, peer, comm_.get(), s));
        if (mine > 0) DSV32_NCCL_CHECK(ncclRecv(received + peer * chunk, mine, type, peer, comm_.get(), s));
      }
      group.end();
    }
    if (mine > 0) {
      DSV32_CUDA_CHECK(cudaMemcpyAsync(received + rank_ * chunk, data + first(rank_), mine * sizeof(T),
                                       cudaMemcpyDeviceToDevice, s));
      const auto m = static_cast<std::int64_t>(mine);
      nccl::sum_chunks_in_rank_order<T><<<cuda::grid_for(m), 256, 0, s>>>(received, chunk, world_, m,
                                                                          gathered + rank_ * chunk);
      DSV32_CUDA_CHECK_LAUNCH("sum_chunks_in_rank_order");
    }
    // In place: rank r's chunk is at gathered + r * chunk (a short last chunk sends a few unused values).
    DSV32_NCCL_CHECK(ncclAllGather(gathered + rank_ * chunk, gathered, static_cast<std::size_t>(chunk), type,
                                   comm_.get(), s));
    DSV32_CUDA_CHECK(cudaMemcpyAsync(data, gathered, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, s));
  }

  int world_ = 1, rank_ = 0, device_ = 0;
  int uncaught_ = 0;
  OwnedComm comm_;
  cuda::Stream control_stream_;     // the control plane's stream
  cuda::DeviceBuffer control_;      // [kControlBytes] the control plane's device buffer
  cuda::DeviceBuffer scratch_;      // all_reduce_sum's received chunks and gathered sums
};

/// @}

}  // namespace dsv32
