// CUDA transfers: host to device through a pinned staging buffer (the host returns once the data
// is staged; the copy runs in stream order), device to host (waits for the device), and device to
// device, across devices too.
//
// A part of executor.hpp, which includes it once executor<cuda<P>> is declared: include that.
#pragma once

#include "platform.hpp"

#include <cstring>

#include "pinned.hpp"

namespace meld {

template <class Policy>
template <class Dst, class T>
void executor<cuda<Policy>>::copy_from_host(const Dst& dst, const T* src) {
  using detail::cuda_eval::pinned_pool;
  const std::size_t bytes = static_cast<std::size_t>(dst.size()) * sizeof(T);
  if (bytes == 0) return;
  detail::trace_scope traced("copy from host", "cuda", {"elements", dst.size()});
  auto& access = dst.storage_ptr()->access();
  cuda_device_guard guard(access.device());
  cudaStream_t s = access.home()->handle;
  access.before(s, true);
  void* staging = pinned_pool::get().acquire(bytes);
  std::memcpy(staging, src, bytes);
  MELD_CUDA_CHECK(
      cudaMemcpyAsync(const_cast<T*>(dst.raw_data()), staging, bytes, cudaMemcpyHostToDevice, s));
  pinned_pool::get().release_after(staging, s);
  access.after(s, true);
  finish(s);
}

template <class Policy>
template <class T, class Src>
void executor<cuda<Policy>>::copy_to_host(T* dst, const Src& src) {
  using detail::cuda_eval::pinned_pool;
  const std::size_t bytes = static_cast<std::size_t>(src.size()) * sizeof(T);
  if (bytes == 0) return;
  detail::trace_scope traced("copy to host", "cuda", {"elements", src.size()});
  auto& access = src.storage_ptr()->access();
  cuda_device_guard guard(access.device());
  cudaStream_t s = access.home()->handle;
  access.before(s, false);
  void* staging = pinned_pool::get().acquire(bytes);
  MELD_CUDA_CHECK(cudaMemcpyAsync(staging, src.raw_data(), bytes, cudaMemcpyDeviceToHost, s));
  access.after(s, false);
  MELD_CUDA_CHECK(cudaStreamSynchronize(s));
  std::memcpy(dst, staging, bytes);
  pinned_pool::get().release_after(staging, s);
}

template <class Policy>
template <class Dst, class Src>
void executor<cuda<Policy>>::copy(const Dst& dst, const Src& src) {
  using T = typename Dst::value_type;
  const std::size_t bytes = static_cast<std::size_t>(dst.size()) * sizeof(T);
  if (bytes == 0) return;
  detail::trace_scope traced("copy device to device", "cuda", {"elements", dst.size()});
  auto& access = dst.storage_ptr()->access();
  auto& from = src.storage_ptr()->access();
  cuda_device_guard guard(access.device());
  cudaStream_t s = access.home()->handle;
  access.before(s, true);
  from.before(s, false);
  MELD_CUDA_CHECK(cudaMemcpyPeerAsync(const_cast<T*>(dst.raw_data()), access.device(),
                                      src.raw_data(), from.device(), bytes, s));
  from.after(s, false);
  access.after(s, true);
  finish(s);
}

}  // namespace meld
