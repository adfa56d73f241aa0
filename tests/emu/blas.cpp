// The emulated cuBLAS (include/cublas_v2.h).
#include <cublas_v2.h>

#include "handles.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int device = 0;
  if (cudaGetDeviceCount(&device) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  (void)cudaGetDevice(&device);
  *handle = new cublasContext{device, nullptr};
  meld_emu::keep_handle(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  meld_emu::drop_handle(handle);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream && meld_emu::stream_device(stream) != handle->device)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// C = alpha op(A) op(B) + beta C for each batch, column-major, accumulated in Acc. C is not read
// where beta is 0 (BLAS: NaN there does not propagate).
template <class T, class Acc>
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, Acc alpha, const T* A,
          int lda, long long sa, const T* B, int ldb, long long sb, Acc beta, T* C, int ldc,
          long long sc, int batches) {
  meld_emu::parallel_for(
      static_cast<std::size_t>(batches) * static_cast<std::size_t>(n), [&](std::size_t job) {
        const long long b = static_cast<long long>(job) / n, j = static_cast<long long>(job) % n;
        const T* a = A + b * sa;
        const T* bb = B + b * sb;
        T* c = C + b * sc;
        // Each element sums over l in order; A's column runs contiguously when it is not transposed
        // (then a column of C accumulates at once), its row otherwise.
        std::vector<Acc> sum(static_cast<std::size_t>(m), Acc(0));
        if (alpha != Acc(0)) {  // as BLAS: alpha 0 reads no operand
          for (long long l = 0; l < k; ++l) {
            const Acc y = static_cast<Acc>(tb == CUBLAS_OP_N ? bb[l + j * ldb] : bb[j + l * ldb]);
            if (ta == CUBLAS_OP_N)
              for (long long i = 0; i < m; ++i)
                sum[static_cast<std::size_t>(i)] += static_cast<Acc>(a[i + l * lda]) * y;
            else
              for (long long i = 0; i < m; ++i)
                sum[static_cast<std::size_t>(i)] += static_cast<Acc>(a[l + i * lda]) * y;
          }
        }
        for (long long i = 0; i < m; ++i) {
          const Acc s = sum[static_cast<std::size_t>(i)];
          T& out = c[i + j * ldc];
          out =
              static_cast<T>(beta == Acc(0) ? alpha * s : alpha * s + beta * static_cast<Acc>(out));
        }
      });
}

template <class T>
cublasStatus_t enqueue(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, const void* alpha, const void* A, int lda, long long sa,
                       const void* B, int ldb, long long sb, const void* beta, void* C, int ldc,
                       long long sc, int batches) {
  // The scalars are read now (host pointer mode), as float, or double for double products.
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Acc al = *static_cast<const Acc*>(alpha), be = *static_cast<const Acc*>(beta);
  const cudaError_t e = meld_emu::enqueue(h->stream, [=] {
    gemm<T, Acc>(ta, tb, m, n, k, al, static_cast<const T*>(A), lda, sa, static_cast<const T*>(B),
                 ldb, sb, be, static_cast<T*>(C), ldc, sc, batches);
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

bool valid_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T;
}

}  // namespace

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType_t at,
                                          int lda, long long sa, const void* B, cudaDataType_t bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType_t ct, int ldc, long long sc, int batches,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  // cuBLAS's checks: sizes, leading dimensions at least the rows of each stored matrix.
  if (m < 0 || n < 0 || k < 0 || batches < 0 || !valid_op(ta) || !valid_op(tb) || !alpha || !beta ||
      lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (at != bt || at != ct) return CUBLAS_STATUS_NOT_SUPPORTED;
  // The operands on the handle's device, where it runs.
  const int device = meld_emu::stream_device(h->stream);
  if (m && n &&
      ((k && (meld_emu::device_of(A) != device || meld_emu::device_of(B) != device)) ||
       meld_emu::device_of(C) != device))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batches == 0) return CUBLAS_STATUS_SUCCESS;
  switch (at) {
    case CUDA_R_64F:
      if (compute != CUBLAS_COMPUTE_64F) return CUBLAS_STATUS_NOT_SUPPORTED;
      return enqueue<double>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                             batches);
    case CUDA_R_32F:
      if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLAS_STATUS_NOT_SUPPORTED;
      return enqueue<float>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                            batches);
    case CUDA_R_16F:
      if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
      return enqueue<__half>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                             batches);
    case CUDA_R_16BF:
      if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
      return enqueue<__nv_bfloat16>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc,
                                    sc, batches);
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
