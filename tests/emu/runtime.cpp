// The emulated CUDA runtime (include/cuda_runtime.h says what it keeps of CUDA's semantics).
#include <cuda_runtime.h>

#include "handles.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MELD_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MELD_EMU_ASAN 1
#endif
#endif
#if defined(MELD_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#define MELD_EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define MELD_EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define MELD_EMU_POISON(p, n) ((void)(p), (void)(n))
#define MELD_EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace meld_emu {
namespace {

constexpr int max_devices = 16;
constexpr std::size_t alignment = 256;  // cudaMalloc's
constexpr std::size_t red_zone = 256;   // after every block: poisoned, never handed out
constexpr int multiprocessors = 2;      // small, so that grid-stride loops do loop

std::size_t setting(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  std::size_t scale = 1;
  if (end && (*end == 'M' || *end == 'm')) scale = std::size_t(1) << 20;
  if (end && (*end == 'G' || *end == 'g')) scale = std::size_t(1) << 30;
  return static_cast<std::size_t>(v) * scale;
}

int device_count() {
  static const int n = static_cast<int>(
      std::clamp<std::size_t>(setting("MELD_EMU_DEVICES", 4), 0, std::size_t(max_devices)));
  return n;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

// ---- device memory ------------------------------------------------------------------------------

// One device's address range: PROT_NONE while no work of the device runs (the host cannot read it),
// read-write while some does; blocks best fit, 256-byte aligned, each followed by a red zone.
class arena {
 public:
  arena(int device, std::size_t capacity) : device_(device) {
    for (; capacity >= (std::size_t(1) << 24); capacity /= 2) {
      void* p =
          ::mmap(nullptr, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) continue;
      base_ = static_cast<char*>(p);
      capacity_ = capacity;
      free_by_offset_[0] = capacity;
      free_by_size_.insert({capacity, 0});
      return;
    }
    std::fprintf(stderr, "meld emu: cannot reserve address space for device %d\n", device);
    std::abort();
  }

  bool contains(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + capacity_;
  }
  char* base() const { return base_; }
  std::size_t capacity() const { return capacity_; }

  void* allocate(std::size_t bytes) {
    if (bytes > capacity_) return nullptr;
    const std::size_t size = (bytes + red_zone + alignment - 1) / alignment * alignment;
    std::lock_guard lock(mutex_);
    auto fit = free_by_size_.lower_bound({size, 0});
    if (fit == free_by_size_.end()) return nullptr;
    const std::size_t offset = fit->second, block = fit->first;
    take_free(offset, block);
    if (block > size) put_free(offset + size, block - size);
    live_[offset] = {bytes, size};
    used_ += size;
    char* p = base_ + offset;
    MELD_EMU_UNPOISON(p, bytes);
    MELD_EMU_POISON(p + bytes, size - bytes);
    return p;
  }

  // The host-order half of a free: the block may no longer be used by later calls. Returns its
  // size (0: p is not a live block).
  std::size_t retire(void* p) {
    std::lock_guard lock(mutex_);
    auto it = live_.find(static_cast<std::size_t>(static_cast<char*>(p) - base_));
    if (it == live_.end()) return 0;
    const std::size_t size = it->second.size;
    live_.erase(it);
    return size;
  }
  // The stream-order half: the block holds garbage and returns to the free blocks. Called with the
  // device open.
  void reclaim(void* p, std::size_t size) {
    MELD_EMU_UNPOISON(p, size);
    std::memset(p, 0xFF, size);
    MELD_EMU_POISON(p, size);
    std::lock_guard lock(mutex_);
    used_ -= size;
    put_free(static_cast<std::size_t>(static_cast<char*>(p) - base_), size);
  }

  bool in_allocation(const void* p, std::size_t bytes) {
    const std::size_t offset = static_cast<std::size_t>(static_cast<const char*>(p) - base_);
    std::lock_guard lock(mutex_);
    auto it = live_.upper_bound(offset);
    if (it == live_.begin()) return false;
    --it;
    return offset + bytes <= it->first + it->second.bytes;
  }
  std::size_t free_bytes() {
    std::lock_guard lock(mutex_);
    return capacity_ - used_;
  }

  // Work of the device runs: the range is readable and writable until the last of it ends.
  void open() {
    std::lock_guard lock(access_mutex_);
    if (open_++ == 0) ::mprotect(base_, capacity_, PROT_READ | PROT_WRITE);
  }
  void close() {
    std::lock_guard lock(access_mutex_);
    if (--open_ == 0) ::mprotect(base_, capacity_, PROT_NONE);
  }
  int device() const { return device_; }

 private:
  struct block {
    std::size_t bytes, size;
  };
  void take_free(std::size_t offset, std::size_t size) {
    free_by_offset_.erase(offset);
    free_by_size_.erase({size, offset});
  }
  void put_free(std::size_t offset, std::size_t size) {
    auto next = free_by_offset_.find(offset + size);
    if (next != free_by_offset_.end()) {
      size += next->second;
      take_free(next->first, next->second);
    }
    auto prev = free_by_offset_.lower_bound(offset);
    if (prev != free_by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        take_free(prev->first, prev->second);
      }
    }
    free_by_offset_[offset] = size;
    free_by_size_.insert({size, offset});
  }

  int device_;
  char* base_ = nullptr;
  std::size_t capacity_ = 0, used_ = 0;
  std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_by_offset_;
  std::set<std::pair<std::size_t, std::size_t>> free_by_size_;
  std::map<std::size_t, block> live_;
  std::mutex access_mutex_;
  int open_ = 0;
};

std::atomic<arena*> arenas[max_devices] = {};

void install_fault_report();

arena& arena_of(int device) {
  static std::mutex mutex;
  arena* a = arenas[device].load(std::memory_order_acquire);
  if (a) return *a;
  std::lock_guard lock(mutex);
  a = arenas[device].load(std::memory_order_relaxed);
  if (!a) {
    install_fault_report();
    a = new arena(device, setting("MELD_EMU_MEMORY", std::size_t(2) << 30));
    arenas[device].store(a, std::memory_order_release);
  }
  return *a;
}

arena* arena_holding(const void* p) {
  for (int d = 0; d < max_devices; ++d) {
    arena* a = arenas[d].load(std::memory_order_acquire);
    if (a && a->contains(p)) return a;
  }
  return nullptr;
}

// A host access to device memory faults (SIGSEGV): say which device's memory it was, then die of
// the signal as before. Installed only where nothing else handles SIGSEGV (not under the
// sanitizers, whose reports give the address).
struct sigaction previous_action;
void on_fault(int signal, siginfo_t* info, void* context) {
  if (arena* a = arena_holding(info->si_addr)) {
    char text[200];
    const int n = std::snprintf(text, sizeof text,
                                "meld emu: the host touched memory of emulated CUDA device %d at "
                                "%p: device memory is read only by kernels and copies\n",
                                a->device(), info->si_addr);
    if (n > 0) (void)!::write(2, text, static_cast<std::size_t>(n));
  }
  ::sigaction(signal, &previous_action, nullptr);
  (void)context;
}
void install_fault_report() {
  struct sigaction current {};
  ::sigaction(SIGSEGV, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) return;
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &previous_action);
}

// Opens the memory of a device for the work of a stream, for a scope.
class device_open {
 public:
  explicit device_open(int device) : a_(&arena_of(device)) { a_->open(); }
  ~device_open() { a_->close(); }
  device_open(const device_open&) = delete;
  device_open& operator=(const device_open&) = delete;

 private:
  arena* a_;
};

std::mutex pinned_mutex;
std::map<const char*, std::size_t>& pinned() {
  static auto* blocks = new std::map<const char*, std::size_t>;
  return *blocks;
}

// ---- the block pool -----------------------------------------------------------------------------

// Helper threads that run the blocks of grids (and the loops of the library stand-ins) with the
// stream worker that launched them.
class block_pool {
 public:
  static block_pool& get() {
    static auto* pool = new block_pool;  // never destroyed: its threads outlive main()
    return *pool;
  }
  void run(std::size_t count, const std::function<void(std::size_t)>& body) {
    if (count == 0) return;
    auto j = std::make_shared<job>();
    j->count = count;
    j->body = &body;
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(j);
    }
    wake_.notify_all();
    work_on(*j);
    std::unique_lock lock(j->mutex);
    j->finished.wait(lock, [&] { return j->done == j->count; });
  }

 private:
  struct job {
    std::size_t count = 0;
    const std::function<void(std::size_t)>* body = nullptr;
    std::atomic<std::size_t> next{0};
    std::mutex mutex;
    std::condition_variable finished;
    std::size_t done = 0;
  };
  block_pool() {
    const unsigned n = std::clamp(std::thread::hardware_concurrency(), 2u, 8u);
    for (unsigned i = 0; i < n; ++i) std::thread([this] { serve(); }).detach();
  }
  static void work_on(job& j) {
    std::size_t finished_here = 0;
    for (std::size_t i; (i = j.next.fetch_add(1)) < j.count; ++finished_here) (*j.body)(i);
    if (finished_here == 0) return;
    std::lock_guard lock(j.mutex);
    j.done += finished_here;
    if (j.done == j.count) j.finished.notify_all();
  }
  void serve() {
    for (;;) {
      std::shared_ptr<job> j;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return !jobs_.empty(); });
        j = jobs_.front();
        if (j->next.load() >= j->count) {
          jobs_.pop_front();
          continue;
        }
      }
      work_on(*j);
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<job>> jobs_;
};

}  // namespace
}  // namespace meld_emu

// ---- streams and events -------------------------------------------------------------------------

// The queue of a stream: work runs in order on its worker thread. Outlives the stream's handle
// while events recorded on it exist.
struct stream_queue {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> work;
  std::uint64_t enqueued = 0, completed = 0;
  bool stopping = false, stopped = false;

  void wait_for(std::uint64_t target) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return completed >= target; });
  }
  bool reached(std::uint64_t target) {
    std::lock_guard lock(mutex);
    return completed >= target;
  }
  void serve() {
    for (;;) {
      std::function<void()> next;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stopping || !work.empty(); });
        if (work.empty()) {
          stopped = true;
          changed.notify_all();
          return;
        }
        next = std::move(work.front());
        work.pop_front();
      }
      {
        meld_emu::device_open open(device);
        meld_emu::current_device = device;
        next();
      }
      std::lock_guard lock(mutex);
      ++completed;
      changed.notify_all();
    }
  }
};

struct CUstream_st {
  std::shared_ptr<stream_queue> queue;
  bool blocking = true;  // orders with the legacy default stream
  bool legacy = false;
};

struct CUevent_st {
  int device = 0;
  std::mutex mutex;
  std::shared_ptr<stream_queue> queue;  // of the last record; none: complete
  std::uint64_t target = 0;
};

struct CUmemPoolHandle_st {
  int device = 0;
};

namespace meld_emu {
namespace {

std::shared_ptr<stream_queue> start_queue(int device) {
  auto q = std::make_shared<stream_queue>();
  q->device = device;
  std::thread([q] { q->serve(); }).detach();
  return q;
}

// The streams of each device that order with its legacy default stream, and that stream.
struct device_streams {
  std::mutex mutex;
  std::vector<CUstream_st*> blocking;
  CUstream_st* legacy = nullptr;
};
device_streams& streams_of(int device) {
  static auto* all = new device_streams[max_devices];
  return all[device];
}

CUstream_st* legacy_stream(int device) {
  device_streams& d = streams_of(device);
  std::lock_guard lock(d.mutex);
  if (!d.legacy) {
    d.legacy = new CUstream_st;
    d.legacy->queue = start_queue(device);
    d.legacy->legacy = true;
  }
  return d.legacy;
}

CUstream_st* resolve(cudaStream_t s) {
  return s ? s : legacy_stream(current_device);
}

// Appends work to a queue; returns its position (the count a wait for it needs).
std::uint64_t push(stream_queue& q, std::function<void()> work) {
  std::lock_guard lock(q.mutex);
  q.work.push_back(std::move(work));
  q.changed.notify_all();
  return ++q.enqueued;
}

std::uint64_t position(stream_queue& q) {
  std::lock_guard lock(q.mutex);
  return q.enqueued;
}

}  // namespace

int device_of(const void* p) {
  const arena* a = arena_holding(p);
  return a ? a->device() : -1;
}

bool in_allocation(const void* p, std::size_t bytes) {
  arena* a = arena_holding(p);
  return a && a->in_allocation(p, bytes);
}

int stream_device(cudaStream_t s) {
  return resolve(s)->queue->device;
}

namespace {
std::mutex handles_mutex;
std::set<const void*>& handles() {
  static auto* live = new std::set<const void*>;
  return *live;
}
}  // namespace

void keep_handle(const void* h) {
  std::lock_guard lock(handles_mutex);
  handles().insert(h);
}

void drop_handle(const void* h) {
  std::lock_guard lock(handles_mutex);
  handles().erase(h);
}

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> work) {
  CUstream_st* st = resolve(s);
  // The legacy default stream waits for the blocking streams of its device and they for it.
  if (st->legacy || st->blocking) {
    device_streams& d = streams_of(st->queue->device);
    std::vector<std::pair<std::shared_ptr<stream_queue>, std::uint64_t>> before;
    {
      std::lock_guard lock(d.mutex);
      if (st->legacy) {
        for (CUstream_st* b : d.blocking) before.push_back({b->queue, position(*b->queue)});
      } else if (d.legacy) {
        before.push_back({d.legacy->queue, position(*d.legacy->queue)});
      }
    }
    for (auto& [q, target] : before)
      if (target) push(*st->queue, [q = q, target = target] { q->wait_for(target); });
  }
  push(*st->queue, std::move(work));
  return cudaSuccess;
}

void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body) {
  block_pool::get().run(count, body);
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& thread_body) {
  const std::size_t blocks = std::size_t(grid.x) * grid.y * grid.z;
  parallel_for(blocks, [&](std::size_t b) {
    gridDim = grid;
    blockDim = block;
    blockIdx = {unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                unsigned(b / (std::size_t(grid.x) * grid.y))};
    for (unsigned z = 0; z < block.z; ++z)
      for (unsigned y = 0; y < block.y; ++y)
        for (unsigned x = 0; x < block.x; ++x) {
          threadIdx = {x, y, z};
          thread_body();
        }
  });
}

cudaError_t check_launch(dim3 grid, dim3 block, cudaStream_t s) {
  if (device_count() == 0) return cudaErrorNoDevice;
  // As cudaLaunchKernel: at most 1,024 threads a block (z at most 64), grid x below 2^31, y and z
  // at most 65,535, no dimension 0.
  const std::size_t threads = std::size_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535)
    return cudaErrorInvalidConfiguration;
  // A stream belongs to one device: launching on it from another is an error.
  if (s && s->queue->device != current_device) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;
}

}  // namespace meld_emu

using meld_emu::current_device;
using meld_emu::fail;

// ---- devices and errors -------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = meld_emu::device_count();
  return *count ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= meld_emu::device_count()) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= meld_emu::device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = meld_emu::multiprocessors;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = meld_emu::last_error;
  meld_emu::last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  return meld_emu::last_error;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaDeviceSynchronize() {
  meld_emu::device_streams& d = meld_emu::streams_of(current_device);
  std::vector<std::pair<std::shared_ptr<stream_queue>, std::uint64_t>> all;
  {
    std::lock_guard lock(d.mutex);
    for (CUstream_st* s : d.blocking) all.push_back({s->queue, meld_emu::position(*s->queue)});
  }
  CUstream_st* legacy = meld_emu::legacy_stream(current_device);
  all.push_back({legacy->queue, meld_emu::position(*legacy->queue)});
  for (auto& [q, target] : all) q->wait_for(target);
  return cudaSuccess;
}

// ---- memory -------------------------------------------------------------------------------------

cudaError_t cudaMallocAsync(void** p, std::size_t bytes, cudaStream_t s) {
  if (!p) return fail(cudaErrorInvalidValue);
  const int device = meld_emu::stream_device(s);
  *p = meld_emu::arena_of(device).allocate(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  if (!p) return fail(cudaErrorInvalidValue);
  *p = meld_emu::arena_of(current_device).allocate(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (!p) return cudaSuccess;
  meld_emu::arena* a = meld_emu::arena_holding(p);
  const std::size_t size = a ? a->retire(p) : 0;
  if (!size) return fail(cudaErrorInvalidValue);  // not a block of device memory
  return meld_emu::enqueue(s, [a, p, size] {
    meld_emu::device_open open(a->device());
    a->reclaim(p, size);
  });
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  meld_emu::arena* a = meld_emu::arena_holding(p);
  if (!a) return fail(cudaErrorInvalidValue);
  const int saved = current_device;
  current_device = a->device();
  (void)cudaDeviceSynchronize();  // as CUDA's: waits for the device
  current_device = saved;
  const std::size_t size = a->retire(p);
  if (!size) return fail(cudaErrorInvalidValue);
  meld_emu::device_open open(a->device());
  a->reclaim(p, size);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, std::size_t bytes) {
  if (!p) return fail(cudaErrorInvalidValue);
  *p = std::aligned_alloc(4096, (std::max<std::size_t>(bytes, 1) + 4095) / 4096 * 4096);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(meld_emu::pinned_mutex);
  meld_emu::pinned()[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard lock(meld_emu::pinned_mutex);
    if (!meld_emu::pinned().erase(static_cast<const char*>(p))) return fail(cudaErrorInvalidValue);
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  meld_emu::arena& a = meld_emu::arena_of(current_device);
  *free = a.free_bytes();
  *total = a.capacity();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= meld_emu::device_count()) return fail(cudaErrorInvalidDevice);
  static auto* pools = new CUmemPoolHandle_st[meld_emu::max_devices];
  pools[device].device = device;
  *pool = &pools[device];
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  // The emulated pools always keep freed blocks (the release threshold meld raises).
  if (!pool || !value || attr != cudaMemPoolAttrReleaseThreshold)
    return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

// ---- copies -------------------------------------------------------------------------------------

namespace meld_emu {
namespace {

// Whether [p, p + bytes) is where `kind` says: device memory inside one allocation, or host memory.
bool where_expected(const void* p, std::size_t bytes, bool device) {
  if (!device) return device_of(p) < 0;
  return in_allocation(p, bytes);
}

cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  bool dst_device, src_device;
  switch (kind) {
    case cudaMemcpyHostToHost:
      dst_device = src_device = false;
      break;
    case cudaMemcpyHostToDevice:
      dst_device = true, src_device = false;
      break;
    case cudaMemcpyDeviceToHost:
      dst_device = false, src_device = true;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_device = src_device = true;
      break;
    case cudaMemcpyDefault:
      dst_device = device_of(dst) >= 0;
      src_device = device_of(src) >= 0;
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  if (!where_expected(dst, bytes, dst_device) || !where_expected(src, bytes, src_device))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

void copy_on_stream_devices(void* dst, const void* src, std::size_t bytes) {
  // The stream's device is open; a peer's memory is opened too.
  const int d = device_of(dst), s = device_of(src);
  std::unique_ptr<device_open> open_dst, open_src;
  if (d >= 0 && d != current_device) open_dst = std::make_unique<device_open>(d);
  if (s >= 0 && s != current_device && s != d) open_src = std::make_unique<device_open>(s);
  std::memcpy(dst, src, bytes);
}

}  // namespace
}  // namespace meld_emu

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = meld_emu::check_copy(dst, src, bytes, kind)) return fail(e);
  return meld_emu::enqueue(
      s, [dst, src, bytes] { meld_emu::copy_on_stream_devices(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr)) return e;
  return cudaStreamSynchronize(nullptr);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                std::size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  const int n = meld_emu::device_count();
  if (dst_device < 0 || dst_device >= n || src_device < 0 || src_device >= n)
    return fail(cudaErrorInvalidDevice);
  if (meld_emu::device_of(dst) != dst_device || meld_emu::device_of(src) != src_device ||
      !meld_emu::in_allocation(dst, bytes) || !meld_emu::in_allocation(src, bytes))
    return fail(cudaErrorInvalidValue);
  return meld_emu::enqueue(
      s, [dst, src, bytes] { meld_emu::copy_on_stream_devices(dst, src, bytes); });
}

cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (!meld_emu::in_allocation(p, bytes)) return fail(cudaErrorInvalidValue);
  return meld_emu::enqueue(s, [p, value, bytes] { std::memset(p, value, bytes); });
}

cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
  if (const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr)) return e;
  return cudaStreamSynchronize(nullptr);
}

// ---- streams ------------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  if (!s) return fail(cudaErrorInvalidValue);
  if (meld_emu::device_count() == 0) return fail(cudaErrorNoDevice);
  auto* st = new CUstream_st;
  st->queue = meld_emu::start_queue(current_device);
  st->blocking = !(flags & cudaStreamNonBlocking);
  if (st->blocking) {
    meld_emu::device_streams& d = meld_emu::streams_of(current_device);
    std::lock_guard lock(d.mutex);
    d.blocking.push_back(st);
  }
  meld_emu::keep_handle(st);
  *s = st;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s || s->legacy) return fail(cudaErrorInvalidResourceHandle);
  if (s->blocking) {
    meld_emu::device_streams& d = meld_emu::streams_of(s->queue->device);
    std::lock_guard lock(d.mutex);
    d.blocking.erase(std::find(d.blocking.begin(), d.blocking.end(), s));
  }
  // As CUDA: the work already enqueued still runs; the worker ends after it.
  {
    std::unique_lock lock(s->queue->mutex);
    s->queue->stopping = true;
    s->queue->changed.notify_all();
    s->queue->changed.wait(lock, [&] { return s->queue->stopped; });
  }
  meld_emu::drop_handle(s);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  CUstream_st* st = meld_emu::resolve(s);
  st->queue->wait_for(meld_emu::position(*st->queue));
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  CUstream_st* st = meld_emu::resolve(s);
  return st->queue->reached(meld_emu::position(*st->queue)) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  if (!e || flags != 0) return fail(cudaErrorInvalidValue);
  std::shared_ptr<stream_queue> q;
  std::uint64_t target;
  {
    std::lock_guard lock(e->mutex);
    q = e->queue;
    target = e->target;
  }
  if (!q) return cudaSuccess;  // never recorded: nothing to wait for
  return meld_emu::enqueue(s, [q, target] { q->wait_for(target); });
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  if (!fn) return fail(cudaErrorInvalidValue);
  return meld_emu::enqueue(s, [fn, data] { fn(data); });
}

// ---- events -------------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  if (!e || (flags & ~3u)) return fail(cudaErrorInvalidValue);
  *e = new CUevent_st;
  (*e)->device = current_device;
  meld_emu::keep_handle(*e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  meld_emu::drop_handle(e);
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  CUstream_st* st = meld_emu::resolve(s);
  // As CUDA: an event is recorded only on streams of the device it was created on.
  if (st->queue->device != e->device) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(e->mutex);
  e->queue = st->queue;
  e->target = meld_emu::position(*st->queue);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<stream_queue> q;
  std::uint64_t target;
  {
    std::lock_guard lock(e->mutex);
    q = e->queue;
    target = e->target;
  }
  // (cudaErrorNotReady is a state, not an error: it does not become the last error.)
  return !q || q->reached(target) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<stream_queue> q;
  std::uint64_t target;
  {
    std::lock_guard lock(e->mutex);
    q = e->queue;
    target = e->target;
  }
  if (q) q->wait_for(target);
  return cudaSuccess;
}
