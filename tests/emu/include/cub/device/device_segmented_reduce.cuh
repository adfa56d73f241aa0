// The emulated device's cub::DeviceSegmentedReduce::Reduce, with CUB's two-call protocol (see
// device_reduce.cuh): each segment [begin[i], end[i]) reduced in order from init, the segments
// spread over the block pool, in stream order. The temporary storage holds the segment count.
#pragma once

#include "device_reduce.cuh"

namespace cub {

struct DeviceSegmentedReduce {
  template <class In, class Out, class N, class Begin, class End, class Op, class T>
  static cudaError_t Reduce(void* temp, std::size_t& temp_bytes, In in, Out out, N num_segments,
                            Begin begin, End end, Op op, T init, cudaStream_t s = nullptr) {
    const std::size_t needed = 256;
    if (!temp) {
      temp_bytes = needed;
      return cudaSuccess;
    }
    const long long segments = static_cast<long long>(num_segments);
    if (segments < 0) return meld_emu::fail(cudaErrorInvalidValue);
    if (const cudaError_t e = emu_detail::check_temporary(temp, temp_bytes, needed, s))
      return meld_emu::fail(e);
    auto* count = static_cast<long long*>(temp);
    return meld_emu::fail(meld_emu::enqueue(s, [=] {
      *count = segments;
      meld_emu::parallel_for(static_cast<std::size_t>(*count), [&](std::size_t i) {
        const auto b = begin[static_cast<std::ptrdiff_t>(i)],
                   e = end[static_cast<std::ptrdiff_t>(i)];
        T acc = init;
        for (auto j = b; j < e; ++j) acc = op(acc, in[static_cast<std::ptrdiff_t>(j)]);
        out[i] = acc;
      });
    }));
  }
};

}  // namespace cub
