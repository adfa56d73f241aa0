// The emulated device's cub::DeviceReduce::Reduce, with CUB's two-call protocol: a call without
// temporary storage reports the bytes it needs; a call with less than that fails with
// cudaErrorInvalidValue. The reduction runs in stream order: partial results of chunks (spread
// over the block pool) in the temporary storage, then their combination in order.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cub {

namespace emu_detail {

// The chunks a reduction of n items is split into.
inline std::size_t chunks_for(long long n) {
  return static_cast<std::size_t>(std::clamp<long long>((n + 4095) / 4096, 1, 64));
}

// Checks the temporary storage of the second call: device memory of the stream's device, inside
// one allocation of at least the bytes the first call asked for.
inline cudaError_t check_temporary(void* temp, std::size_t bytes, std::size_t needed,
                                   cudaStream_t s) {
  if (bytes < needed) return cudaErrorInvalidValue;
  if (meld_emu::device_of(temp) != meld_emu::stream_device(s) ||
      !meld_emu::in_allocation(temp, needed))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace emu_detail

struct DeviceReduce {
  template <class In, class Out, class N, class Op, class T>
  static cudaError_t Reduce(void* temp, std::size_t& temp_bytes, In in, Out out, N num_items, Op op,
                            T init, cudaStream_t s = nullptr) {
    const long long n = static_cast<long long>(num_items);
    const std::size_t chunks = emu_detail::chunks_for(n);
    const std::size_t needed = chunks * sizeof(T);
    if (!temp) {
      temp_bytes = needed;
      return cudaSuccess;
    }
    if (n < 0) return meld_emu::fail(cudaErrorInvalidValue);
    if (const cudaError_t e = emu_detail::check_temporary(temp, temp_bytes, needed, s))
      return meld_emu::fail(e);
    T* partial = static_cast<T*>(temp);
    return meld_emu::fail(meld_emu::enqueue(s, [=] {
      const long long per =
          (n + static_cast<long long>(chunks) - 1) / static_cast<long long>(chunks);
      meld_emu::parallel_for(chunks, [&](std::size_t c) {
        const long long begin = static_cast<long long>(c) * per, end = std::min(n, begin + per);
        T acc = init;
        for (long long i = begin; i < end; ++i) acc = op(acc, in[i]);
        partial[c] = acc;
      });
      T acc = init;
      for (std::size_t c = 0; c < chunks; ++c) acc = op(acc, partial[c]);
      *out = acc;
    }));
  }
};

}  // namespace cub
