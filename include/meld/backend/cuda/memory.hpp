// Device memory for CUDA tensors: stream-ordered allocation from the device's memory pool (whose
// release threshold is raised, so that freed blocks are reused instead of returned to the driver:
// temporaries cost no synchronization), and the ordering state of each storage.
#pragma once

#include "platform.hpp"

#include <cstdint>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "cuda.hpp"
#include "stream.hpp"

namespace meld {

namespace detail {

// Raises the release threshold of a device's default pool once.
inline void prepare_pool(int device) {
  static std::mutex mutex;
  static std::vector<bool> done;
  std::lock_guard lock(mutex);
  if (static_cast<int>(done.size()) <= device) done.resize(static_cast<std::size_t>(device) + 1);
  if (done[device]) return;
  cudaMemPool_t pool;
  MELD_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  MELD_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  done[device] = true;
}

// How work on CUDA streams is ordered around one storage: the event of its last write and the
// events of reads since, one per stream. Work on another stream waits on them on the GPU
// (cudaStreamWaitEvent); the host waits only when it reads the memory back.
class cuda_access {
 public:
  cuda_access() : home_(cuda_stream::current().state()) {}
  ~cuda_access() {
    if (write_.event) (void)cudaEventDestroy(write_.event);
    for (auto& r : reads_) (void)cudaEventDestroy(r.event);
  }
  cuda_access(const cuda_access&) = delete;
  cuda_access& operator=(const cuda_access&) = delete;

  const std::shared_ptr<cuda_stream_state>& home() const { return home_; }
  int device() const { return home_->device; }

  // Before work on stream s reads (or writes) the memory: s waits for the other streams' work.
  void before(cudaStream_t s, bool write) {
    std::lock_guard lock(mutex_);
    if (write_.event && write_.stream != s)
      MELD_CUDA_CHECK(cudaStreamWaitEvent(s, write_.event, 0));
    if (write)
      for (auto& r : reads_)
        if (r.stream != s) MELD_CUDA_CHECK(cudaStreamWaitEvent(s, r.event, 0));
  }
  // After work on stream s has been enqueued: record it.
  void after(cudaStream_t s, bool write) {
    std::lock_guard lock(mutex_);
    if (write) {
      record(write_, s);
      for (auto& r : reads_) (void)cudaEventDestroy(r.event);
      reads_.clear();
    } else {
      for (auto& r : reads_)
        if (r.stream == s) return record(r, s);
      reads_.push_back({});
      record(reads_.back(), s);
    }
  }
  // Before the host reads the memory (or overwrites it): wait for the GPU.
  void wait_host(bool write) {
    std::lock_guard lock(mutex_);
    if (write_.event) MELD_CUDA_CHECK(cudaEventSynchronize(write_.event));
    if (write)
      for (auto& r : reads_) MELD_CUDA_CHECK(cudaEventSynchronize(r.event));
  }
  // Frees the memory in stream order on the home stream, after every stream that used it.
  void release(void* p) {
    cudaStream_t home = home_->handle;
    if (write_.event && write_.stream != home) (void)cudaStreamWaitEvent(home, write_.event, 0);
    for (auto& r : reads_)
      if (r.stream != home) (void)cudaStreamWaitEvent(home, r.event, 0);
    (void)cudaFreeAsync(p, home);
  }

 private:
  struct mark {
    cudaStream_t stream = nullptr;
    cudaEvent_t event = nullptr;
  };
  static void record(mark& m, cudaStream_t s) {
    if (!m.event) MELD_CUDA_CHECK(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming));
    MELD_CUDA_CHECK(cudaEventRecord(m.event, s));
    m.stream = s;
  }
  std::mutex mutex_;
  std::shared_ptr<cuda_stream_state> home_;
  mark write_;
  std::vector<mark> reads_;
};

}  // namespace detail

template <class Policy>
struct access_tracking<cuda<Policy>> {
  using type = detail::cuda_access;
};

template <class Policy>
struct memory<cuda<Policy>> {
  // Allocates on the current stream of the current device (where the new storage is bound).
  static void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const int device = detail::require_device();
    detail::prepare_pool(device);
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes, cuda_stream::current().handle());
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      std::size_t free = 0, total = 0;
      (void)cudaMemGetInfo(&free, &total);
      throw allocation_error(detail::cat("meld::cuda: cannot allocate ", bytes, " bytes on device ",
                                         device, ": ", free, " bytes free of ", total));
    }
    MELD_CUDA_CHECK(e);
    return p;
  }
  static void deallocate(void* p, std::size_t, detail::cuda_access& access) noexcept {
    if (p) access.release(p);
  }
  static int device_count() { return cuda_device_count(); }
  // The CUDA runtime's current device of this thread (0 where there is none).
  static int current_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return device;
  }
  static void set_current_device(int device) {
    const int count = device_count();
    if (device < 0 || device >= count)
      throw cuda_error(
          detail::cat("meld::cuda: device ", device, " does not exist (", count, " CUDA devices)"),
          static_cast<int>(cudaErrorInvalidDevice));
    MELD_CUDA_CHECK(cudaSetDevice(device));
  }
};

}  // namespace meld
