// nccl_comm: a communicator over GPUs through NCCL, one rank per GPU, on a CUDA stream. Needs
// CUDA and NCCL (MELD_ENABLE_NCCL, which needs MELD_ENABLE_CUDA).
//
//   meld::mpi_comm host;                                  // one process per GPU, under mpirun
//   meld::nccl_comm gpus(host, /*device=*/local_rank);     // rank 0's NCCL id goes over MPI
//   gpus.allreduce(std::span<float>(device_ptr, n));       // enqueued on gpus.stream(), waited
//   auto r = gpus.allreduce_async(grads);  ...;  r.wait(); // or keep enqueuing on the stream
//
// Buffers are meld::tensors (and contiguous views) of the CUDA backend, or spans over device
// memory (the caller vouches for them). Collectives are enqueued on the communicator's stream (one
// it creates, or the caller's). For tensors, events order it: the collective starts after the
// work queued on the tensor (on any stream), and later meld work on the tensor waits for the
// collective, on the GPU, without the host waiting; wait() on a request blocks the host until the
// collective has completed.
//
// Never a hang: the NCCL communicator is non-blocking (ncclConfig_t::blocking = 0). Every wait
// polls cudaEventQuery and ncclCommGetAsyncError against the timeout (default 10 minutes): an
// NCCL error throws comm_error with NCCL's message; a timeout aborts the communicator
// (ncclCommAbort, which also stops its kernels) and throws comm_error naming the collective. NCCL
// cannot say which peer is missing: with debug mode on, the descriptions of every collective
// are exchanged first (an NCCL allgather), so that a mismatch is named. The destructor never
// blocks: it finalizes under a deadline and aborts otherwise.
#pragma once

#include <nccl.h>

#include "../backend/cuda/platform.hpp"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "collectives.hpp"
#include "communicator.hpp"

#include "../backend/cuda/memory.hpp"

namespace meld {

class nccl_comm;

/// nccl_comm moves tensors of the CUDA backend in place (comm_buffer::order: their cuda_access).
template <class Policy>
inline constexpr bool device_comm_backend<cuda<Policy>> = true;

namespace detail::distributed {

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return ncclInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return ncclInt64;
  else
    return ncclUint8;
}

inline ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return ncclSum;
    case reduce_op::max:
      return ncclMax;
    case reduce_op::min:
      return ncclMin;
  }
  return ncclSum;
}

}  // namespace detail::distributed

// The handle of an asynchronous NCCL collective: an event recorded after it on the stream.
class nccl_request {
 public:
  nccl_request() = default;
  void wait() const;
  bool ready() const { return !event_ || cudaEventQuery(event_.get()) == cudaSuccess; }

 private:
  friend class nccl_comm;
  struct destroy_event {
    void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
  };
  nccl_comm* comm_ = nullptr;
  std::shared_ptr<CUevent_st> event_;
  detail::distributed::call_info call_;
};

class nccl_comm : public collectives<nccl_comm, comm_memory::device> {
 public:
  using request = nccl_request;

  // Rank `rank` of `nranks`, all of which call this with the same id (from ncclGetUniqueId on
  // one of them). stream: where collectives run (nullptr: a new non-blocking stream).
  nccl_comm(int nranks, int rank, const ncclUniqueId& id, int device, cudaStream_t stream = nullptr,
            const comm_options& options = {})
      : opts_(detail::distributed::resolve(options, std::chrono::minutes(10), 0)) {
    init(nranks, rank, id, device, stream);
  }

  // Bootstrapped over a host communicator (mpi_comm across processes and machines, or any
  // other): rank 0 creates the NCCL id and broadcasts it; ranks and size are the host's.
  template <communicator Host>
  nccl_comm(Host& host, int device, cudaStream_t stream = nullptr, const comm_options& options = {})
      : opts_(detail::distributed::resolve(options, std::chrono::minutes(10), 0)) {
    ncclUniqueId id{};
    if (host.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<std::int64_t> words((sizeof(id) + 7) / 8);
    std::memcpy(words.data(), &id, sizeof(id));
    host.broadcast(std::span<std::int64_t>(words), 0);
    std::memcpy(&id, words.data(), sizeof(id));
    init(host.size(), host.rank(), id, device, stream);
  }

  // A communicator of one rank (one GPU).
  static std::unique_ptr<nccl_comm> single(int device, cudaStream_t stream = nullptr,
                                           const comm_options& options = {}) {
    ncclUniqueId id{};
    if (ncclGetUniqueId(&id) != ncclSuccess)
      throw comm_error(comm_error::reason::backend, "nccl_comm: ncclGetUniqueId failed");
    return std::make_unique<nccl_comm>(1, 0, id, device, stream, options);
  }

  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;

  // Never blocks for long: finalizes under a deadline (pending work included), else aborts.
  ~nccl_comm() {
    if (comm_) {
      bool clean = !failed_;
      if (clean) {
        const ncclResult_t f = ncclCommFinalize(comm_);
        clean = f == ncclSuccess || f == ncclInProgress;
      }
      if (clean) {
        const auto deadline = clock::now() + std::min<std::chrono::milliseconds>(
                                                 opts_.timeout, std::chrono::seconds(10));
        ncclResult_t state = ncclInProgress;
        while (clock::now() < deadline) {
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        clean = state == ncclSuccess;
      }
      if (clean)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    // Device memory is freed only after a clean finalize: cudaFree waits for the device.
    if (scratch_ && !failed_) cudaFree(scratch_);
    if (own_stream_ && stream_) cudaStreamDestroy(stream_);  // returns at once
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::uint64_t next_sequence() const { return seq_ + 1; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t native() const { return comm_; }
  int device() const { return device_; }

  // The collectives (allreduce, broadcast, reduce_scatter, allgather, barrier and their _async
  // forms) are collectives<nccl_comm, comm_memory::device>'s: see collectives.hpp. They take
  // std::spans over device memory; the blocking forms wait for the request.

  // Aborts the NCCL communicator (its kernels stop; peers then fail or time out).
  void abort(const std::string& reason) {
    if (!failed_) {
      failed_ = true;
      failure_ = detail::cat("rank ", rank_, " aborted: ", reason);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

 private:
  friend class nccl_request;
  friend class collectives<nccl_comm, comm_memory::device>;
  using clock = std::chrono::steady_clock;
  static constexpr const char* comm_name = "nccl_comm";

  // ---- the collectives, enqueued on the stream (async: the front end waits when it is false)

  template <class T>
  nccl_request allreduce_impl(comm_buffer<T> buf, reduce_op op, bool) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::allreduce,
                                                        static_cast<std::int64_t>(buf.size()), op);
    const ordered o(stream_, nullptr, buf.order());
    return enqueue(call, [&] {
      return ncclAllReduce(buf.data(), buf.data(), buf.size(), detail::distributed::nccl_type<T>(),
                           detail::distributed::nccl_op(op), comm_, stream_);
    });
  }

  template <class T>
  nccl_request broadcast_impl(comm_buffer<T> buf, int root, bool) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::broadcast,
                                                        static_cast<std::int64_t>(buf.size()),
                                                        reduce_op::sum, root);
    const ordered o(stream_, nullptr, buf.order());
    return enqueue(call, [&] {
      return ncclBroadcast(buf.data(), buf.data(), buf.size(), detail::distributed::nccl_type<T>(),
                           root, comm_, stream_);
    });
  }

  template <class T>
  nccl_request reduce_scatter_impl(comm_buffer<const T> in, comm_buffer<T> out, reduce_op op,
                                   bool) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::reduce_scatter,
                                                        static_cast<std::int64_t>(out.size()), op);
    const ordered o(stream_, in.order(), out.order());
    return enqueue(call, [&] {
      return ncclReduceScatter(in.data(), out.data(), out.size(),
                               detail::distributed::nccl_type<T>(),
                               detail::distributed::nccl_op(op), comm_, stream_);
    });
  }

  template <class T>
  nccl_request allgather_impl(comm_buffer<const T> in, comm_buffer<T> out, bool) {
    const auto call = detail::distributed::make_call<T>(++seq_, collective_kind::allgather,
                                                        static_cast<std::int64_t>(in.size()));
    const ordered o(stream_, in.order(), out.order());
    return enqueue(call, [&] {
      return ncclAllGather(in.data(), out.data(), in.size(), detail::distributed::nccl_type<T>(),
                           comm_, stream_);
    });
  }

  // Orders a collective on the communicator's stream around meld's work on the tensors it reads
  // and writes (their cuda_access, from comm_buffer::order; null for spans): the stream first
  // waits for their queued work, and once the collective is enqueued it is recorded as their last
  // read or write, so that later work waits for it on the GPU.
  class ordered {
   public:
    ordered(cudaStream_t s, void* read, void* written)
        : s_(s),
          read_(static_cast<detail::cuda_access*>(read)),
          written_(static_cast<detail::cuda_access*>(written)) {
      if (read_) read_->before(s_, false);
      if (written_) written_->before(s_, true);
    }
    ~ordered() {
      if (read_) read_->after(s_, false);
      if (written_) written_->after(s_, true);
    }
    ordered(const ordered&) = delete;
    ordered& operator=(const ordered&) = delete;

   private:
    cudaStream_t s_;
    detail::cuda_access* read_;
    detail::cuda_access* written_;
  };

  // An allreduce of one integer in device scratch memory.
  nccl_request barrier_impl(bool) {
    const auto call =
        detail::distributed::make_call<std::uint8_t>(++seq_, collective_kind::barrier, 0);
    return enqueue(call, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
    });
  }

  // ---- setup, errors, waiting

  void init(int nranks, int rank, const ncclUniqueId& id, int device, cudaStream_t stream) {
    if (nranks < 1 || rank < 0 || rank >= nranks)
      throw std::invalid_argument(detail::cat("nccl_comm: rank ", rank, " of ", nranks));
    rank_ = rank;
    size_ = nranks;
    device_ = device;
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    if (stream) {
      stream_ = stream;
    } else {
      check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      own_stream_ = true;
    }
    // Scratch: the barrier's integer, then one description per rank for debug mode.
    check_cuda(cudaMalloc(&scratch_, header_offset + sizeof(detail::distributed::call_info) *
                                                         static_cast<std::size_t>(nranks)),
               "cudaMalloc");
    check_cuda(cudaMemset(scratch_, 0, header_offset), "cudaMemset");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns; progress is polled (never a hang)
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, nranks, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommInitRankConfig");
    const auto call = detail::distributed::make_call<std::uint8_t>(0, collective_kind::barrier, 0);
    settle(call, "ncclCommInitRankConfig (not every rank joined)");
  }

  static void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw comm_error(comm_error::reason::backend,
                       detail::cat("nccl_comm: ", what, " failed: ", cudaGetErrorString(e)));
  }
  void check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    const std::string msg =
        detail::cat("meld::nccl_comm rank ", rank_, ": ", what, " failed: ", ncclGetErrorString(r));
    fail_and_abort(msg);
    throw comm_error(comm_error::reason::backend, msg);
  }

  void fail_and_abort(const std::string& msg) {
    failed_ = true;
    failure_ = msg;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // Waits (polling, under the timeout) until the non-blocking communicator's last call is done.
  void settle(const detail::distributed::call_info& call, const char* what) {
    const auto start = clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) check(r, "ncclCommGetAsyncError");
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) check(state, what);
      if (clock::now() - start > opts_.timeout) timed_out(call, what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  [[noreturn]] void timed_out(const detail::distributed::call_info& call, const char* what) {
    const std::string msg = detail::cat(
        "meld::nccl_comm rank ", rank_, ": ", call.str(), " timed out after ",
        detail::distributed::seconds_str(opts_.timeout), " (", what,
        "); the NCCL communicator was aborted. NCCL does not report which rank is missing: a "
        "peer may have died, stalled or called a different collective (debug mode compares the "
        "collectives)");
    fail_and_abort(msg);
    throw comm_error(comm_error::reason::timeout, msg);
  }

  void check_usable(const detail::distributed::call_info& call) const {
    if (failed_)
      throw comm_error(comm_error::reason::aborted,
                       detail::cat("meld::nccl_comm rank ", rank_, ": ", call.str(),
                                   " refused: the communicator failed: ", failure_));
  }

  template <class Launch>
  nccl_request enqueue(const detail::distributed::call_info& call, Launch launch) {
    check_usable(call);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    if (opts_.debug) compare_calls(call);
    check(launch(), name_of(call.kind));
    settle(call, name_of(call.kind));
    nccl_request req;
    req.comm_ = this;
    req.call_ = call;
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    req.event_ = std::shared_ptr<CUevent_st>(e, nccl_request::destroy_event{});
    check_cuda(cudaEventRecord(e, stream_), "cudaEventRecord");
    return req;
  }

  // Debug mode: every rank's description, gathered with NCCL, compared before the collective.
  void compare_calls(const detail::distributed::call_info& call) {
    using detail::distributed::call_info;
    auto* dev = static_cast<unsigned char*>(scratch_) + header_offset;
    std::vector<call_info> all(static_cast<std::size_t>(size_));
    const std::size_t bytes = sizeof(call_info);
    check_cuda(cudaMemcpyAsync(dev + bytes * static_cast<std::size_t>(rank_), &call, bytes,
                               cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync");
    check(ncclAllGather(dev + bytes * static_cast<std::size_t>(rank_), dev, bytes, ncclUint8, comm_,
                        stream_),
          "ncclAllGather (debug descriptions)");
    settle(call, "the debug-mode exchange of descriptions");
    check_cuda(
        cudaMemcpyAsync(all.data(), dev, bytes * all.size(), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync");
    wait_stream(call, "the debug-mode exchange of descriptions");
    bool same = true;
    for (const auto& c : all) same = same && c == call;
    if (same) return;
    std::string msg =
        detail::cat("meld::nccl_comm: ranks called different collectives at #", call.seq, ":");
    for (int q = 0; q < size_; ++q)
      msg += detail::cat(q ? ";" : "", " rank ", q, " called ",
                         all[static_cast<std::size_t>(q)].str());
    fail_and_abort(msg);
    throw comm_error(comm_error::reason::mismatch, msg);
  }

  void wait_stream(const detail::distributed::call_info& call, const char* what) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    std::unique_ptr<CUevent_st, nccl_request::destroy_event> owner(e);
    check_cuda(cudaEventRecord(e, stream_), "cudaEventRecord");
    wait_event(e, call, what);
  }

  // Polls an event and the communicator's asynchronous error under the timeout.
  void wait_event(cudaEvent_t e, const detail::distributed::call_info& call, const char* what) {
    const auto start = clock::now();
    for (int round = 0;; ++round) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) check_cuda(q, "cudaEventQuery");
      check_usable(call);
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress)
        check(state, what);
      if (clock::now() - start > opts_.timeout) timed_out(call, what);
      if (round > 100) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  static constexpr std::size_t header_offset = 256;

  detail::distributed::resolved_options opts_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  void* scratch_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
  std::uint64_t seq_ = 0;
  bool failed_ = false;
  std::string failure_;
};

inline void nccl_request::wait() const {
  if (!event_) return;
  comm_->wait_event(event_.get(), call_, name_of(call_.kind));
}

static_assert(communicator<nccl_comm>);

}  // namespace meld
