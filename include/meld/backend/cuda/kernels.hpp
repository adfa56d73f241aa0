// The device side of the CUDA backend: the inputs of lowered expression trees (device leaves and
// scalars: plain, device-copyable structs), how kernels read them, and the kernels. The nodes
// above the inputs are the expression's own map_expr nodes (expr/map.hpp), evaluated with
// expr/walk.hpp's evaluate() and the same functors the CPU uses.
#pragma once

#include "platform.hpp"

#include <cstdint>
#include <type_traits>

#include "../../core/config.hpp"
#include "../../core/element_type.hpp"
#include "../../expr/functors.hpp"
#include "../../expr/reduce.hpp"
#include "../../expr/walk.hpp"

// #pragma unroll for device code (the host compiler does not know it).
#if defined(__CUDA_ARCH__)
#define MELD_UNROLL _Pragma("unroll")
#else
#define MELD_UNROLL
#endif

namespace meld::detail::cuda_eval {

// The iteration space of a kernel: the (coalesced) shape.
struct launch_shape {
  int rank = 1;
  index_t shape[max_rank] = {1};
};

// Element offsets of linear position i (row-major over `s`) for a leaf with strides `st`.
// The loop runs over every possible axis, unrolled, so that the shape and strides are indexed by
// constants and stay in registers (indexed by the run-time rank, nvcc places them on the stack).
MELD_HD inline index_t offset_of(index_t i, const launch_shape& s, const index_t* st) {
  index_t off = 0;
  MELD_UNROLL
  for (int d = max_rank - 1; d >= 0; --d) {
    if (d < s.rank) {
      off += (i % s.shape[d]) * st[d];
      i /= s.shape[d];
    }
  }
  return off;
}

template <class T, int V>
struct alignas(sizeof(T) * V) vec {
  T v[V];
};

// The strides of a written operand.
struct dstrides {
  index_t st[max_rank];
};

// ---- inputs of device trees ---------------------------------------------------------------------

// A leaf over elements stored as S, read as the compute type (float for half and bfloat16), with
// the plan's strides (in elements).
template <class S>
struct dleaf {
  using value_type = typename compute_type<S>::type;
  const S* p;
  index_t st[max_rank];
};

template <class T>
struct dscalar {
  using value_type = T;
  T value;
};

// V consecutive values of a leaf, loaded at once.
template <class T, int V>
struct dvalues {
  using value_type = T;
  T v[V];
};

// ---- reading inputs -----------------------------------------------------------------------------

// The value at position i when every leaf is contiguous with the iteration shape.
struct flat_at {
  index_t i;
  template <class S>
  MELD_HD typename dleaf<S>::value_type operator()(const dleaf<S>& l) const {
    return static_cast<typename dleaf<S>::value_type>(l.p[i]);
  }
  template <class T>
  MELD_HD T operator()(const dscalar<T>& s) const {
    return s.value;
  }
};

// The value at linear position i of shape s, each leaf addressed through its strides. The shape is
// held by value: a reference into a kernel's parameters makes nvcc copy them to the stack (a
// CUB reduction over such an iterator spilled 376 bytes per thread and ran at 1/20 of bandwidth).
struct strided_at {
  index_t i;
  launch_shape s;
  template <class S>
  MELD_HD typename dleaf<S>::value_type operator()(const dleaf<S>& l) const {
    return static_cast<typename dleaf<S>::value_type>(l.p[offset_of(i, s, l.st)]);
  }
  template <class T>
  MELD_HD T operator()(const dscalar<T>& s_) const {
    return s_.value;
  }
};

// Loads V consecutive values from position i with one aligned vector load per leaf (lower() turns
// each leaf into dvalues; scalars stay).
template <int V>
struct gather_at {
  index_t i;
  template <class S>
  MELD_HD auto operator()(const dleaf<S>& l) const {
    using T = typename dleaf<S>::value_type;
    const vec<S, V> x = *reinterpret_cast<const vec<S, V>*>(l.p + i);
    dvalues<T, V> out;
    MELD_UNROLL
    for (int j = 0; j < V; ++j) out.v[j] = static_cast<T>(x.v[j]);
    return out;
  }
  template <class T>
  MELD_HD dscalar<T> operator()(const dscalar<T>& s) const {
    return s;
  }
};

// Lane j of gathered values.
struct lane_at {
  int j;
  template <class T, int V>
  MELD_HD T operator()(const dvalues<T, V>& d) const {
    return d.v[j];
  }
  template <class T>
  MELD_HD T operator()(const dscalar<T>& s) const {
    return s.value;
  }
};

// Evaluates a device tree at a linear position (for CUB iterators): Flat when every leaf is
// contiguous with the iteration shape. Two types rather than a run-time branch, so that each
// kernel carries one addressing path.
template <class D, bool Flat>
struct evaluate_at {
  D expr;
  launch_shape shape;
  MELD_HD value_t<D> operator()(index_t i) const {
    if constexpr (Flat)
      return evaluate(expr, flat_at{i});
    else
      return evaluate(expr, strided_at{i, shape});
  }
};

// The same, converted to the accumulator type A.
template <class At, class A>
struct evaluate_as {
  At at;
  MELD_HD A operator()(index_t i) const { return static_cast<A>(at(i)); }
};

// ---- kernels ------------------------------------------------------------------------------------

#if defined(MELD_CUDA_KERNELS)

// Contiguous operands of one shape: V elements per thread with vector loads and stores, then a
// scalar tail; a grid-stride loop over all of it.
template <int V, class T, class D>
__global__ void assign_flat(T* __restrict__ out, D expr, index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  const index_t groups = n / V;
  for (index_t g = index_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const auto loaded = lower(expr, gather_at<V>{g * V});
    vec<T, V> y;
    MELD_UNROLL
    for (int j = 0; j < V; ++j) y.v[j] = static_cast<T>(evaluate(loaded, lane_at{j}));
    *reinterpret_cast<vec<T, V>*>(out + g * V) = y;
  }
  for (index_t i = groups * V + index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<T>(evaluate(expr, flat_at{i}));
}

// Any strides and broadcasting: each position's offsets from its multi-index.
template <class T, class D>
__global__ void assign_strided(T* __restrict__ out, launch_shape shape, dstrides out_layout, D expr,
                               index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[offset_of(i, shape, out_layout.st)] = static_cast<T>(evaluate(expr, strided_at{i, shape}));
}

// The first pass of a full reduction over contiguous operands: thread t folds its grid-stride
// share of the elements, V at a time with vector loads (V accumulators: no chain of dependent
// adds across a vector), into partials[t]; a reduction over the partials finishes it.
template <int V, class A, class Fold, class D>
__global__ void fold_flat(A* __restrict__ partials, D expr, index_t n) {
  const index_t first = index_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  const index_t groups = n / V;
  A acc[V];
  MELD_UNROLL
  for (int j = 0; j < V; ++j) acc[j] = Fold::template identity<A>();
  for (index_t g = first; g < groups; g += stride) {
    const auto loaded = lower(expr, gather_at<V>{g * V});
    MELD_UNROLL
    for (int j = 0; j < V; ++j)
      acc[j] = Fold{}(acc[j], static_cast<A>(evaluate(loaded, lane_at{j})));
  }
  for (index_t i = groups * V + first; i < n; i += stride)
    acc[0] = Fold{}(acc[0], static_cast<A>(evaluate(expr, flat_at{i})));
  MELD_UNROLL
  for (int j = 1; j < V; ++j) acc[0] = Fold{}(acc[0], acc[j]);
  partials[first] = acc[0];
}

// The same over any strides and broadcasting.
template <class A, class Fold, class D>
__global__ void fold_strided(A* __restrict__ partials, launch_shape shape, D expr, index_t n) {
  const index_t first = index_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  A acc = Fold::template identity<A>();
  for (index_t i = first; i < n; i += stride)
    acc = Fold{}(acc, static_cast<A>(evaluate(expr, strided_at{i, shape})));
  partials[first] = acc;
}

template <class T>
__global__ void fill_kernel(T* __restrict__ out, T value, index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = value;
}

template <class T, class G>
__global__ void generate_kernel(T* __restrict__ out, G g, index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<T>(g(i));
}

// Writes the result of segment m (an axis reduction into a contiguous buffer) into a strided
// destination, dividing by `divide` (for mean) when it is nonzero. (var's moments write their M2.)
template <class T, class S>
__global__ void scatter_segments(T* __restrict__ out, launch_shape shape, dstrides layout,
                                 const S* __restrict__ in, index_t n, index_t divide) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    auto v = fold_result(in[i]);
    if (divide) v = v / static_cast<decltype(v)>(divide);
    out[offset_of(i, shape, layout.st)] = static_cast<T>(v);
  }
}

// A strided matrix operand of gemm_kernel (row, column and batch strides in elements), and the
// layout of its output.
template <class T>
struct gemm_operand {
  const T* p;
  index_t rs, cs, bs;
};
struct gemm_layout {
  index_t rs, cs, bs;
};

// c = alpha a b + beta c for element types cuBLAS has no product of (integers): one thread per
// element of c, which sums its row of a times its column of b in order. As BLAS: a and b are not
// read where alpha is 0, c not where beta is 0. (c does not overlap a or b: the caller copies.)
template <class T>
__global__ void gemm_kernel(T alpha, gemm_operand<T> a, gemm_operand<T> b, T beta,
                            T* __restrict__ c, gemm_layout cl, index_t batches, index_t m,
                            index_t n, index_t k) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < batches * m * n;
       i += stride) {
    const index_t batch = i / (m * n), row = i / n % m, col = i % n;
    T sum = T(0);
    if (alpha != T(0))
      for (index_t l = 0; l < k; ++l)
        sum +=
            a.p[batch * a.bs + row * a.rs + l * a.cs] * b.p[batch * b.bs + l * b.rs + col * b.cs];
    T& out = c[batch * cl.bs + row * cl.rs + col * cl.cs];
    out = beta == T(0) ? T(alpha * sum) : T(alpha * sum + beta * out);
  }
}

// The indices of (value, index) pairs.
template <class Pair>
__global__ void copy_indices(const Pair* __restrict__ in, index_t* __restrict__ out, index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = in[i].index;
}

#endif

}  // namespace meld::detail::cuda_eval
