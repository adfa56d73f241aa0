// CUDA streams for meld: one non-blocking stream per device by default, per-thread overrides.
#pragma once

#include "platform.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda.hpp"

namespace meld {

namespace detail {

// A CUDA stream on a device; destroyed after the work on it has run.
struct cuda_stream_state {
  int device = 0;
  cudaStream_t handle = nullptr;
  explicit cuda_stream_state(int dev) : device(dev) {
    cuda_device_guard g(dev);
    MELD_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
  }
  ~cuda_stream_state() {
    if (handle) {
      (void)cudaStreamSynchronize(handle);
      (void)cudaStreamDestroy(handle);
    }
  }
  cuda_stream_state(const cuda_stream_state&) = delete;
  cuda_stream_state& operator=(const cuda_stream_state&) = delete;
};

}  // namespace detail

class cuda_stream {
 public:
  // A new stream on the current device (or the given one).
  cuda_stream() : state_(std::make_shared<detail::cuda_stream_state>(detail::require_device())) {}
  explicit cuda_stream(int device) : state_(std::make_shared<detail::cuda_stream_state>(device)) {}

  cudaStream_t handle() const { return state_->handle; }
  int device() const { return state_->device; }
  const std::shared_ptr<detail::cuda_stream_state>& state() const { return state_; }

  // Waits until the stream's work has run; throws cuda_error if it failed.
  void synchronize() const { MELD_CUDA_CHECK(cudaStreamSynchronize(state_->handle)); }

  // The stream that new CUDA tensors of this thread use: the innermost cuda_stream_guard's,
  // else the default stream of the current device.
  static cuda_stream& current();
  static cuda_stream& default_stream(int device);

 private:
  std::shared_ptr<detail::cuda_stream_state> state_;
};

namespace detail {
inline thread_local cuda_stream* current_cuda_stream = nullptr;
}

inline cuda_stream& cuda_stream::default_stream(int device) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<cuda_stream>> streams;
  std::lock_guard lock(mutex);
  if (static_cast<int>(streams.size()) <= device)
    streams.resize(static_cast<std::size_t>(device) + 1);
  if (!streams[device]) streams[device] = std::make_unique<cuda_stream>(device);
  return *streams[device];
}

inline cuda_stream& cuda_stream::current() {
  if (detail::current_cuda_stream) return *detail::current_cuda_stream;
  return default_stream(detail::require_device());
}

class cuda_stream_guard {
 public:
  explicit cuda_stream_guard(cuda_stream& s) : saved_(detail::current_cuda_stream) {
    detail::current_cuda_stream = &s;
  }
  ~cuda_stream_guard() { detail::current_cuda_stream = saved_; }
  cuda_stream_guard(const cuda_stream_guard&) = delete;
  cuda_stream_guard& operator=(const cuda_stream_guard&) = delete;

 private:
  cuda_stream* saved_;
};

}  // namespace meld
