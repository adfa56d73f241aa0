// The CUDA backend tag, error checking and devices. Include through <meld/meld.hpp> in a file
// compiled by nvcc with MELD_ENABLE_CUDA defined (the CMake option MELD_ENABLE_CUDA does that).
#pragma once

#include "platform.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "../../core/error.hpp"
#include "../policy.hpp"
#include "nvtx.hpp"

namespace meld {

// Tensors in the memory of a CUDA device, evaluated by one fused kernel per assignment on a CUDA
// stream. cuda<sync> waits for each operation; cuda<async> enqueues it and returns.
template <class Policy = sync>
struct cuda {
  using policy = Policy;
  static constexpr const char* name = "cuda";
  static constexpr bool host_accessible = false;  // elements are read through meld::to<cpu<>>
};

// A failed CUDA, cuBLAS or CUB call: names the call, the error, and where it was made.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

namespace detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw cuda_error(cat(call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") at ",
                       file, ":", line),
                   static_cast<int>(e));
}

}  // namespace detail

#define MELD_CUDA_CHECK(call)                                              \
  do {                                                                     \
    const cudaError_t meld_status_ = (call);                               \
    if (meld_status_ != cudaSuccess)                                       \
      ::meld::detail::throw_cuda(meld_status_, #call, __FILE__, __LINE__); \
  } while (0)

// Number of CUDA devices; 0 when there is no device or no driver (no error).
inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" status
    return 0;
  }
  return n;
}

namespace detail {

// Throws a clear error when no device can be used; returns the current device ordinal.
inline int require_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    throw cuda_error(cat("meld::cuda: no CUDA device is available (cudaGetDeviceCount: ",
                         e == cudaSuccess ? "0 devices" : cudaGetErrorString(e), ")"),
                     static_cast<int>(e));
  }
  int device = 0;
  MELD_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace detail

// Selects the device for the current thread within a scope.
class cuda_device_guard {
 public:
  explicit cuda_device_guard(int device) {
    MELD_CUDA_CHECK(cudaGetDevice(&saved_));
    MELD_CUDA_CHECK(cudaSetDevice(device));
  }
  ~cuda_device_guard() { (void)cudaSetDevice(saved_); }
  cuda_device_guard(const cuda_device_guard&) = delete;
  cuda_device_guard& operator=(const cuda_device_guard&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace meld
