// Page-locked host buffers for transfers, reused: a transfer stages through one so that
// cudaMemcpyAsync is truly asynchronous; a buffer returns to the pool once the copy that used it
// has completed.
#pragma once

#include "platform.hpp"

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <vector>

#include "cuda.hpp"

namespace meld::detail::cuda_eval {

class pinned_pool {
 public:
  static pinned_pool& get() {
    static pinned_pool p;
    return p;
  }
  void* acquire(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    reap();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->bytes >= bytes) {
        void* p = it->ptr;
        free_.erase(it);
        return p;
      }
    void* p = nullptr;
    MELD_CUDA_CHECK(cudaMallocHost(&p, std::max<std::size_t>(bytes, 4096)));
    sizes_.push_back({p, std::max<std::size_t>(bytes, 4096)});
    return p;
  }
  // Returns the buffer once the work enqueued so far on `stream` (the copy) has completed.
  void release_after(void* p, cudaStream_t stream) {
    cudaEvent_t e;
    MELD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MELD_CUDA_CHECK(cudaEventRecord(e, stream));
    std::lock_guard lock(mutex_);
    pending_.push_back({p, e});
  }

 private:
  struct block {
    void* ptr;
    std::size_t bytes;
  };
  struct pending {
    void* ptr;
    cudaEvent_t done;
  };
  void reap() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (cudaEventQuery(it->done) == cudaSuccess) {
        (void)cudaEventDestroy(it->done);
        for (const block& b : sizes_)
          if (b.ptr == it->ptr) free_.push_back(b);
        it = pending_.erase(it);
      } else {
        (void)cudaGetLastError();  // cudaErrorNotReady is not an error
        ++it;
      }
    }
  }
  std::mutex mutex_;
  std::vector<block> sizes_, free_;
  std::vector<pending> pending_;
};

}  // namespace meld::detail::cuda_eval
