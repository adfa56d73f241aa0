// How every meld kernel is launched: the grid for a grid-stride loop over a number of work items,
// the launch, and the check of the launch, in one place.
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

#include "cuda.hpp"
#include "platform.hpp"

namespace meld::detail::cuda_eval {

// Threads per block of every meld kernel (grid-stride loops: any size works; 256 lets a
// multiprocessor hold 8 blocks).
inline constexpr unsigned threads_per_block = 256;

// Blocks for a grid-stride loop over `items` work items: enough to fill the device (32 blocks per
// multiprocessor), no more. Device properties are read once per device.
inline unsigned grid_for(index_t items, int device) {
  static std::mutex mutex;
  static std::vector<int> sms;
  int count;
  {
    std::lock_guard lock(mutex);
    if (static_cast<int>(sms.size()) <= device) sms.resize(static_cast<std::size_t>(device) + 1, 0);
    if (!sms[device])
      MELD_CUDA_CHECK(cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device));
    count = sms[device];
  }
  const index_t wanted = (items + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(std::clamp<index_t>(wanted, 1, index_t(count) * 32));
}

// Runs kernel(args...) on stream s over `grid` blocks of threads_per_block threads; a launch the
// runtime refuses throws cuda_error naming `what`.
template <class... Params, class... Args>
void launch_grid(const char* what, void (*kernel)(Params...), unsigned grid, cudaStream_t s,
                 Args&&... args) {
  start_kernel(kernel, dim3(grid), dim3(threads_per_block), s, std::forward<Args>(args)...);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
}

// Runs kernel(args...) on stream s of `device` as a grid-stride loop over `items` work items.
template <class... Params, class... Args>
void launch(const char* what, void (*kernel)(Params...), index_t items, int device, cudaStream_t s,
            Args&&... args) {
  launch_grid(what, kernel, grid_for(items, device), s, std::forward<Args>(args)...);
}

}  // namespace meld::detail::cuda_eval
