// The emulated NCCL (include/nccl.h).
#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

// One collective of a clique: the buffers each rank brought, and how far the ranks are.
struct round {
  std::vector<const void*> send;
  int arrived = 0, computed = 0, left = 0;
};

// The ranks of one unique id.
struct clique {
  int nranks = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> devices;  // per rank; -1 until it joined
  int joined = 0;
  bool aborted = false;
  std::map<std::uint64_t, round> rounds;

  // Waits until pred() or an abort; false on an abort.
  template <class P>
  bool wait(std::unique_lock<std::mutex>& lock, P pred) {
    changed.wait(lock, [&] { return aborted || pred(); });
    return !aborted;
  }
};

std::mutex registry_mutex;
std::map<std::string, std::shared_ptr<clique>>& registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<clique>>;
  return *r;
}

std::size_t size_of(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

template <class T>
void combine(T* acc, const T* x, std::size_t n, ncclRedOp_t op) {
  for (std::size_t i = 0; i < n; ++i) {
    switch (op) {
      case ncclSum:
      case ncclAvg:
        acc[i] = static_cast<T>(acc[i] + x[i]);
        break;
      case ncclProd:
        acc[i] = static_cast<T>(acc[i] * x[i]);
        break;
      case ncclMax:
        acc[i] = std::max(acc[i], x[i]);
        break;
      case ncclMin:
        acc[i] = std::min(acc[i], x[i]);
        break;
    }
  }
}

template <class T>
void divide(T* acc, std::size_t n, int by) {
  for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(by));
}

// acc = op over the ranks' blocks (rank order).
void reduce_into(std::vector<char>& acc, const std::vector<const void*>& blocks, std::size_t offset,
                 std::size_t count, ncclDataType_t type, ncclRedOp_t op) {
  const std::size_t bytes = count * size_of(type);
  acc.assign(static_cast<const char*>(blocks[0]) + offset,
             static_cast<const char*>(blocks[0]) + offset + bytes);
  for (std::size_t q = 1; q < blocks.size(); ++q) {
    const char* x = static_cast<const char*>(blocks[q]) + offset;
    switch (type) {
      case ncclInt8:
        combine(reinterpret_cast<std::int8_t*>(acc.data()), reinterpret_cast<const std::int8_t*>(x),
                count, op);
        break;
      case ncclUint8:
        combine(reinterpret_cast<std::uint8_t*>(acc.data()),
                reinterpret_cast<const std::uint8_t*>(x), count, op);
        break;
      case ncclInt32:
        combine(reinterpret_cast<std::int32_t*>(acc.data()),
                reinterpret_cast<const std::int32_t*>(x), count, op);
        break;
      case ncclUint32:
        combine(reinterpret_cast<std::uint32_t*>(acc.data()),
                reinterpret_cast<const std::uint32_t*>(x), count, op);
        break;
      case ncclInt64:
        combine(reinterpret_cast<std::int64_t*>(acc.data()),
                reinterpret_cast<const std::int64_t*>(x), count, op);
        break;
      case ncclUint64:
        combine(reinterpret_cast<std::uint64_t*>(acc.data()),
                reinterpret_cast<const std::uint64_t*>(x), count, op);
        break;
      case ncclFloat32:
        combine(reinterpret_cast<float*>(acc.data()), reinterpret_cast<const float*>(x), count, op);
        break;
      case ncclFloat64:
        combine(reinterpret_cast<double*>(acc.data()), reinterpret_cast<const double*>(x), count,
                op);
        break;
      case ncclFloat16: {
        auto* a = reinterpret_cast<__half*>(acc.data());
        const auto* b = reinterpret_cast<const __half*>(x);
        for (std::size_t i = 0; i < count; ++i) {
          float v = static_cast<float>(a[i]);
          combine(&v, std::array<float, 1>{static_cast<float>(b[i])}.data(), 1, op);
          a[i] = v;
        }
        break;
      }
    }
  }
  if (op != ncclAvg) return;
  const int n = static_cast<int>(blocks.size());
  switch (type) {
    case ncclFloat32:
      divide(reinterpret_cast<float*>(acc.data()), count, n);
      break;
    case ncclFloat64:
      divide(reinterpret_cast<double*>(acc.data()), count, n);
      break;
    default:
      break;  // refused at the call
  }
}

}  // namespace

struct ncclComm {
  std::shared_ptr<clique> group;
  int rank = 0, device = 0;
  bool blocking = true;
  std::uint64_t seq = 0;
  // Shared with the rank's enqueued collectives, which may still run after an abort freed it.
  std::shared_ptr<std::atomic<int>> async_error = std::make_shared<std::atomic<int>>(ncclSuccess);
};

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  static std::atomic<std::uint64_t> next{1};
  std::memset(id->internal, 0, sizeof id->internal);
  const std::uint64_t n = next.fetch_add(1);
  std::memcpy(id->internal, "meld-emu", 8);
  std::memcpy(id->internal + 8, &n, sizeof n);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return ncclUnhandledCudaError;
  std::shared_ptr<clique> c;
  {
    std::lock_guard lock(registry_mutex);
    auto& entry = registry()[std::string(id.internal, sizeof id.internal)];
    if (!entry) {
      entry = std::make_shared<clique>();
      entry->nranks = nranks;
      entry->devices.assign(static_cast<std::size_t>(nranks), -1);
    }
    c = entry;
  }
  auto* self = new ncclComm;
  self->group = c;
  self->rank = rank;
  self->device = device;
  self->blocking = !config || config->blocking != 0;
  bool last = false;
  {
    std::lock_guard lock(c->mutex);
    // As NCCL: one rank per GPU, each rank once, every rank with the same count.
    const bool duplicate = c->nranks != nranks || c->devices[static_cast<std::size_t>(rank)] >= 0 ||
                           std::count(c->devices.begin(), c->devices.end(), device) > 0;
    if (duplicate) {
      delete self;
      return ncclInvalidUsage;
    }
    c->devices[static_cast<std::size_t>(rank)] = device;
    last = ++c->joined == c->nranks;
    c->changed.notify_all();
  }
  if (last) {
    // An id serves one communicator.
    std::lock_guard lock(registry_mutex);
    registry().erase(std::string(id.internal, sizeof id.internal));
  }
  *comm = self;
  if (!self->blocking) return ncclInProgress;  // ncclCommGetAsyncError says when all joined
  std::unique_lock lock(c->mutex);
  if (!c->wait(lock, [&] { return c->joined == c->nranks; })) return ncclRemoteError;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || !state) return ncclInvalidArgument;
  const int e = comm->async_error->load();
  if (e != ncclSuccess) {
    *state = static_cast<ncclResult_t>(e);
    return ncclSuccess;
  }
  std::lock_guard lock(comm->group->mutex);
  *state = comm->group->aborted                        ? ncclRemoteError
           : comm->group->joined < comm->group->nranks ? ncclInProgress
                                                       : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  // The collectives enqueued before run in stream order; nothing else is in flight.
  return comm ? ncclSuccess : ncclInvalidArgument;
}

namespace {
void leave(ncclComm_t comm, bool abort) {
  if (abort) {
    // Its peers' collectives end (failed) instead of waiting forever: they see a remote error.
    std::lock_guard lock(comm->group->mutex);
    comm->group->aborted = true;
    comm->group->changed.notify_all();
  }
  delete comm;
}
}  // namespace

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  leave(comm, false);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  leave(comm, true);
  return ncclSuccess;
}

namespace {

enum class kind { allreduce, broadcast, reduce_scatter, allgather };

// Checks a collective's arguments as NCCL does and enqueues it on the rank's stream.
ncclResult_t collective(kind k, const void* send, void* recv, std::size_t count,
                        ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  if (!comm) return ncclInvalidArgument;
  const std::size_t elem = size_of(type);
  if (!elem || op < ncclSum || op > ncclAvg) return ncclInvalidArgument;
  if (op == ncclAvg && type != ncclFloat32 && type != ncclFloat64) return ncclInvalidArgument;
  const std::shared_ptr<clique> c = comm->group;
  const int n = c->nranks, rank = comm->rank;
  if (k == kind::broadcast && (root < 0 || root >= n)) return ncclInvalidArgument;
  // The buffers: device memory of the rank's device, as large as the collective reads or writes.
  const std::size_t send_bytes = count * elem * (k == kind::reduce_scatter ? std::size_t(n) : 1);
  const std::size_t recv_bytes = count * elem * (k == kind::allgather ? std::size_t(n) : 1);
  if (count) {
    const bool reads = k != kind::broadcast || rank == root;
    if ((reads && (meld_emu::device_of(send) != comm->device ||
                   !meld_emu::in_allocation(send, send_bytes))) ||
        meld_emu::device_of(recv) != comm->device || !meld_emu::in_allocation(recv, recv_bytes))
      return ncclInvalidArgument;
  }
  if (meld_emu::stream_device(stream) != comm->device) return ncclInvalidUsage;
  if (comm->async_error->load() != ncclSuccess) return ncclInvalidUsage;
  const std::uint64_t seq = ++comm->seq;
  const std::shared_ptr<std::atomic<int>> error = comm->async_error;
  const cudaError_t e = meld_emu::enqueue(stream, [=] {
    std::unique_lock lock(c->mutex);
    round& r = c->rounds[seq];
    if (r.send.empty()) r.send.assign(static_cast<std::size_t>(n), nullptr);
    r.send[static_cast<std::size_t>(rank)] = send;
    ++r.arrived;
    c->changed.notify_all();
    if (!c->wait(lock, [&] { return r.arrived == n; })) {
      error->store(ncclRemoteError);
      return;
    }
    lock.unlock();
    // Every rank's buffer is readable now (each rank's device is open while it waits here).
    std::vector<char> result;
    switch (k) {
      case kind::allreduce:
        reduce_into(result, r.send, 0, count, type, op);
        break;
      case kind::reduce_scatter:
        reduce_into(result, r.send, static_cast<std::size_t>(rank) * count * elem, count, type, op);
        break;
      case kind::broadcast: {
        const char* from = static_cast<const char*>(r.send[static_cast<std::size_t>(root)]);
        result.assign(from, from + count * elem);
        break;
      }
      case kind::allgather:
        result.resize(recv_bytes);
        for (int q = 0; q < n; ++q)
          if (count)
            std::memcpy(result.data() + static_cast<std::size_t>(q) * count * elem,
                        r.send[static_cast<std::size_t>(q)], count * elem);
        break;
    }
    lock.lock();
    ++r.computed;
    c->changed.notify_all();
    // Writes wait until every rank has read (in-place collectives read what others write).
    if (!c->wait(lock, [&] { return r.computed == n; })) {
      error->store(ncclRemoteError);
      return;
    }
    if (++r.left == n) c->rounds.erase(seq);
    lock.unlock();
    if (!result.empty()) std::memcpy(recv, result.data(), result.size());
  });
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

}  // namespace

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective(kind::allreduce, send, recv, count, type, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(kind::broadcast, send, recv, count, type, ncclSum, root, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recvcount,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return collective(kind::reduce_scatter, send, recv, recvcount, type, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(kind::allgather, send, recv, sendcount, type, ncclSum, 0, comm, stream);
}
