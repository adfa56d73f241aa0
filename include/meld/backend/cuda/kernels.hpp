// The device side of the CUDA backend: expression trees as plain device-copyable structs (pointers,
// strides, scalars and the same functors the CPU uses), and the kernels that evaluate them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../../core/config.hpp"
#include "../../expr/functors.hpp"
#include "half.hpp"

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
MELD_HD inline index_t offset_of(index_t i, const launch_shape& s, const index_t* st) {
  index_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    off += (i % s.shape[d]) * st[d];
    i /= s.shape[d];
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

// ---- device expression nodes
// --------------------------------------------------------------------- flat(i): the value at
// position i when every leaf is contiguous with the iteration shape; at(i, s): the value at linear
// position i of shape s, leaves addressed through their strides; gather<V>(i, out): V consecutive
// values from position i, with aligned vector loads.

// A leaf over elements stored as S, read as the compute type (float for half and bfloat16).
template <class S>
struct dleaf {
  using value_type = typename compute_type<S>::type;
  const S* p;
  index_t st[max_rank];
  MELD_HD value_type flat(index_t i) const { return static_cast<value_type>(p[i]); }
  MELD_HD value_type at(index_t i, const launch_shape& s) const {
    return static_cast<value_type>(p[offset_of(i, s, st)]);
  }
  template <int V>
  MELD_HD void gather(index_t i, value_type (&out)[V]) const {
    const vec<S, V> x = *reinterpret_cast<const vec<S, V>*>(p + i);
    MELD_UNROLL
    for (int j = 0; j < V; ++j) out[j] = static_cast<value_type>(x.v[j]);
  }
};

template <class T>
struct dscalar {
  using value_type = T;
  T value;
  MELD_HD T flat(index_t) const { return value; }
  MELD_HD T at(index_t, const launch_shape&) const { return value; }
  template <int V>
  MELD_HD void gather(index_t, T (&out)[V]) const {
    MELD_UNROLL
    for (int j = 0; j < V; ++j) out[j] = value;
  }
};

template <class Op, class A>
struct dunary {
  using value_type =
      std::remove_cvref_t<decltype(std::declval<Op>()(std::declval<typename A::value_type>()))>;
  Op op;
  A a;
  MELD_HD value_type flat(index_t i) const { return op(a.flat(i)); }
  MELD_HD value_type at(index_t i, const launch_shape& s) const { return op(a.at(i, s)); }
  template <int V>
  MELD_HD void gather(index_t i, value_type (&out)[V]) const {
    typename A::value_type x[V];
    a.template gather<V>(i, x);
    MELD_UNROLL
    for (int j = 0; j < V; ++j) out[j] = op(x[j]);
  }
};

template <class Op, class A, class B>
struct dbinary {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>(), std::declval<typename B::value_type>()))>;
  Op op;
  A a;
  B b;
  MELD_HD value_type flat(index_t i) const { return op(a.flat(i), b.flat(i)); }
  MELD_HD value_type at(index_t i, const launch_shape& s) const {
    return op(a.at(i, s), b.at(i, s));
  }
  template <int V>
  MELD_HD void gather(index_t i, value_type (&out)[V]) const {
    typename A::value_type x[V];
    typename B::value_type y[V];
    a.template gather<V>(i, x);
    b.template gather<V>(i, y);
    MELD_UNROLL
    for (int j = 0; j < V; ++j) out[j] = op(x[j], y[j]);
  }
};

template <class Op, class A, class B, class C>
struct dternary {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>(), std::declval<typename B::value_type>(),
      std::declval<typename C::value_type>()))>;
  Op op;
  A a;
  B b;
  C c;
  MELD_HD value_type flat(index_t i) const { return op(a.flat(i), b.flat(i), c.flat(i)); }
  MELD_HD value_type at(index_t i, const launch_shape& s) const {
    return op(a.at(i, s), b.at(i, s), c.at(i, s));
  }
  template <int V>
  MELD_HD void gather(index_t i, value_type (&out)[V]) const {
    typename A::value_type x[V];
    typename B::value_type y[V];
    typename C::value_type z[V];
    a.template gather<V>(i, x);
    b.template gather<V>(i, y);
    c.template gather<V>(i, z);
    MELD_UNROLL
    for (int j = 0; j < V; ++j) out[j] = op(x[j], y[j], z[j]);
  }
};

// Evaluates a device expression at a linear position (for CUB iterators).
template <class D>
struct evaluate_at {
  D expr;
  launch_shape shape;
  bool flat;
  MELD_HD typename D::value_type operator()(index_t i) const {
    return flat ? expr.flat(i) : expr.at(i, shape);
  }
};

// The same, converted to the accumulator type A.
template <class D, class A>
struct evaluate_as {
  evaluate_at<D> at;
  MELD_HD A operator()(index_t i) const { return static_cast<A>(at(i)); }
};

// ---- kernels ------------------------------------------------------------------------------------

#if defined(__CUDACC__)

// Contiguous operands of one shape: V elements per thread with vector loads and stores, then a
// scalar tail; a grid-stride loop over all of it.
template <int V, class T, class D>
__global__ void assign_flat(T* __restrict__ out, D expr, index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  const index_t groups = n / V;
  for (index_t g = index_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    typename D::value_type x[V];
    expr.template gather<V>(g * V, x);
    vec<T, V> y;
    MELD_UNROLL
    for (int j = 0; j < V; ++j) y.v[j] = static_cast<T>(x[j]);
    *reinterpret_cast<vec<T, V>*>(out + g * V) = y;
  }
  for (index_t i = groups * V + index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<T>(expr.flat(i));
}

// Any strides and broadcasting: each position's offsets from its multi-index.
template <class T, class D>
__global__ void assign_strided(T* __restrict__ out, launch_shape shape, dstrides out_layout, D expr,
                               index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[offset_of(i, shape, out_layout.st)] = static_cast<T>(expr.at(i, shape));
}

template <class T>
__global__ void fill_kernel(T* __restrict__ out, T value, index_t n) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = value;
}

// Writes the result of segment m (an axis reduction into a contiguous buffer) into a strided
// destination, dividing by `divide` (for mean) when it is nonzero.
template <class T, class S>
__global__ void scatter_segments(T* __restrict__ out, launch_shape shape, dstrides layout,
                                 const S* __restrict__ in, index_t n, index_t divide) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    auto v = in[i];
    if (divide) v = v / static_cast<S>(divide);
    out[offset_of(i, shape, layout.st)] = static_cast<T>(v);
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
