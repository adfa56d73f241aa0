// The one place of the CUDA backend that knows what compiles it: nvcc for a GPU, or the host
// compiler against the emulated device of meld's tests (MELD_CUDA_EMU: tests/emu supplies the CUDA
// runtime's headers and runs kernels on host threads). Everything else in backend/cuda writes CUDA
// as usual (__global__, blockIdx, threadIdx, ...) and launches through launch.hpp.
#pragma once

#include <cuda_runtime.h>  // the toolkit's under nvcc; tests/emu/include's under MELD_CUDA_EMU

#include <utility>

// MELD_CUDA_KERNELS: the kernels and device functions are compiled in this translation unit.
#if defined(__CUDACC__) || defined(MELD_CUDA_EMU)
#define MELD_CUDA_KERNELS 1
#endif

namespace meld::detail::cuda_eval {

// Enqueues kernel(args...) on stream s over `grid` blocks of `block` threads. Errors are left for
// cudaGetLastError, as with <<<...>>>.
template <class... Params, class... Args>
void start_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s,
                  Args&&... args) {
#if defined(__CUDACC__)
  kernel<<<grid, block, 0, s>>>(std::forward<Args>(args)...);
#elif defined(MELD_CUDA_EMU)
  meld_emu::launch(kernel, grid, block, s, std::forward<Args>(args)...);
#else
  // A host-compiled file that includes the backend (nccl_comm.hpp in a .cpp) launches nothing.
  static_assert(sizeof...(Args) != sizeof...(Args),
                "meld: CUDA kernels launch from files nvcc compiles (or the emulated device's)");
#endif
}

}  // namespace meld::detail::cuda_eval
