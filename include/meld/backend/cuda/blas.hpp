// Matrix products on CUDA through cuBLAS: one handle per (device, stream), created once; strided
// operands mapped onto cuBLAS's column-major conventions without copies where the layout allows.
#pragma once

#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <utility>

#include "cuda.hpp"

namespace meld {

namespace detail {

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

}  // namespace detail

#define MELD_CUBLAS_CHECK(call)                                                              \
  do {                                                                                       \
    const cublasStatus_t meld_status_ = (call);                                              \
    if (meld_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      throw ::meld::cuda_error(                                                              \
          ::meld::detail::cat(#call,                                                         \
                              " failed: ", ::meld::detail::cublas_status_name(meld_status_), \
                              " at ", __FILE__, ":", __LINE__),                              \
          static_cast<int>(meld_status_));                                                   \
  } while (0)

namespace detail {

// The cuBLAS handle of a stream (handles are per device; cuBLAS binds one to one stream at a time).
inline cublasHandle_t cublas_handle(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, cublasHandle_t> handles;
  std::lock_guard lock(mutex);
  auto& h = handles[{device, stream}];
  if (!h) {
    cuda_device_guard g(device);
    MELD_CUBLAS_CHECK(cublasCreate(&h));
    MELD_CUBLAS_CHECK(cublasSetStream(h, stream));
  }
  return h;
}

// Whether cuBLAS multiplies matrices of T (else: meld's gemm_kernel).
template <class T>
inline constexpr bool has_cublas_type = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                        std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <class T>
constexpr cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>)
    return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>)
    return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, half>)
    return CUDA_R_16F;
  else
    return CUDA_R_16BF;
}

// Whether float products may use TF32 tensor cores (see meld::cuda_allow_tf32).
inline bool& allow_tf32() {
  static bool allow = false;
  return allow;
}

// A matrix as cuBLAS sees it: column-major with a leading dimension, maybe transposed.
struct blas_operand {
  cublasOperation_t op;
  int ld;
  bool ok;  // the strides fit (else the caller copies the operand first)
};

// For row-major C = A B, cuBLAS computes C^T = B^T A^T in column-major terms. An operand with rows
// of unit stride (row-major) is, in memory, its own transpose in column-major: no transpose flag.
inline blas_operand as_column_major_transposed(index_t rows, index_t cols, index_t rs, index_t cs) {
  if (cs == 1 || cols == 1)
    return {CUBLAS_OP_N, static_cast<int>(std::max<index_t>({rs, cols, 1})), true};
  if (rs == 1 || rows == 1)
    return {CUBLAS_OP_T, static_cast<int>(std::max<index_t>({cs, rows, 1})), true};
  return {CUBLAS_OP_N, 0, false};
}

}  // namespace detail

// Allows float matrix products to use TF32 tensor cores (faster, ~10-bit mantissa products).
inline void cuda_allow_tf32(bool allow) {
  detail::allow_tf32() = allow;
}

}  // namespace meld
