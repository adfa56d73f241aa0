// The emulated CUDA device: the subset of the CUDA runtime API that meld calls, for the host
// compiler (meld's tests build the CUDA backend with it: MELD_CUDA_EMU, backend/cuda/platform.hpp).
// Test support, not a backend: it exists so that meld's own device code (kernels, launches,
// streams, events, stream-ordered memory, copies) runs in CI, under the sanitizers.
//
// What it keeps of CUDA's semantics, where a mistake in meld would show:
//   - several devices (MELD_EMU_DEVICES, default 4), the current one per host thread; device
//     memory in a per-device address range that is PROT_NONE except while work of that device runs
//     (a host read of device memory faults, and the fault report names the device);
//   - cudaMemcpy* kinds checked against where the pointers live, device ranges against their
//     allocations;
//   - each stream a worker thread of its own (work on two streams really is concurrent: a missing
//     cudaStreamWaitEvent is a data race ThreadSanitizer reports); events, cudaStreamWaitEvent,
//     cudaEventQuery's cudaErrorNotReady, the legacy default stream's ordering;
//   - cudaMallocAsync / cudaFreeAsync in stream order: a block is reused only after its stream has
//     reached the free, and from then on it holds garbage (all bytes 0xFF: NaN) and is poisoned for
//     AddressSanitizer, as is a red zone after every block;
//   - kernels over the whole grid, blocks spread over a pool of host threads, each (block, thread)
//     in turn with blockIdx / threadIdx / blockDim / gridDim set; launch limits checked as CUDA
//     checks them (cudaErrorInvalidConfiguration), the stream's device against the current one.
// Kernels that use __shared__ memory, __syncthreads() or warp functions are not supported (meld's
// kernels are grid-stride loops without them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// Device code compiles as host code.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

// ---- types and constants ------------------------------------------------------------------------

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
};

enum cudaMemPoolAttr {
  cudaMemPoolAttrReleaseThreshold = 4,
};

struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
typedef CUmemPoolHandle_st* cudaMemPool_t;

inline constexpr unsigned cudaStreamDefault = 0;
inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDefault = 0;
inline constexpr unsigned cudaEventDisableTiming = 2;

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The indices of the (block, thread) a kernel body runs as: per host thread, set by the emulator
// before each call.
inline thread_local uint3 blockIdx = {0, 0, 0};
inline thread_local uint3 threadIdx = {0, 0, 0};
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

// ---- the runtime API ----------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

cudaError_t cudaMalloc(void** p, std::size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, std::size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
cudaError_t cudaMallocHost(void** p, std::size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                std::size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t s = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

typedef void (*cudaHostFn_t)(void* data);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);

// The typed overloads of cuda_runtime.h (C++ only).
template <class T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <class T>
cudaError_t cudaMallocAsync(T** p, std::size_t bytes, cudaStream_t s) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), bytes, s);
}
template <class T>
cudaError_t cudaMallocHost(T** p, std::size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}

// ---- what the stand-ins for the vendor libraries and the launches build on
// -----------------------

namespace meld_emu {

// Where a pointer lives: the device whose memory holds it, or -1 (host memory).
int device_of(const void* p);
// Whether [p, p + bytes) lies inside one live allocation of device memory.
bool in_allocation(const void* p, std::size_t bytes);
// The device of a stream (the legacy default stream: the current device's).
int stream_device(cudaStream_t s);
// Sets the calling thread's last error to e (unless it is cudaSuccess) and returns it.
cudaError_t fail(cudaError_t e);
// Enqueues `work` on stream s: it runs on the stream's worker thread, in stream order, with the
// stream's device memory accessible.
cudaError_t enqueue(cudaStream_t s, std::function<void()> work);
// Runs body(i) for every i in [0, count), spread over the block pool; returns when all are done.
// Called from work on a stream.
void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body);
// Runs `thread_body` once per (block, thread) of the grid, with the index variables set.
void run_grid(dim3 grid, dim3 block, const std::function<void()>& thread_body);
// Checks a launch configuration and stream as cudaLaunchKernel does.
cudaError_t check_launch(dim3 grid, dim3 block, cudaStream_t s);

// kernel<<<grid, block, 0, s>>>(args...): the arguments are copied at the launch, as CUDA copies
// them into the launch's parameter buffer.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
  if (fail(check_launch(grid, block, s)) != cudaSuccess) return;
  std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  fail(enqueue(s, [kernel, params, grid, block] {
    run_grid(grid, block, [&] { std::apply(kernel, params); });
  }));
}

}  // namespace meld_emu
