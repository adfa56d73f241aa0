// dst = e on the CPU: one pass over the destination, in the flat fast path (every operand
// contiguous with the destination's shape, read in place) or through a coalesced iteration plan
// whose rows the shared driver (loops.hpp) hands to one SIMD kernel per expression; over
// cache-line-aligned chunks on the thread pool when the work pays for it. Operands that overlap
// the destination other than element for element are evaluated through a temporary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../../tensor/tensor.hpp"
#include "../aliasing.hpp"
#include "../lowering.hpp"
#include "../plan.hpp"
#include "chunks.hpp"
#include "cursor.hpp"
#include "loops.hpp"
#include "lower.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld::detail::cpu_eval {

// Destinations of at least this many bytes are written with non-temporal (streaming) stores
// (loops.hpp, assign_row_stream): no read-for-ownership of each destination line, and the
// operands stay in the caches. Measured with benchmarks/meld_bench (triad/hand_nt vs triad/hand)
// and a size sweep: streaming wins from ~1 MiB of destination on the AVX-512 Xeon (1.2-1.7x from
// 4 MiB up) and by 25-30 % at 10^7 floats on the Zen 3 development machine. 16 MiB is
// conservative: below it a destination may still be read back from a large L3, which streaming
// would forgo.
inline constexpr index_t stream_store_bytes = index_t(16) << 20;

// The row function that writes a destination of `bytes` bytes, contiguous along its rows.
template <class Batch, class T, class C>
row_fn assign_row_for(index_t bytes) {
  if constexpr (!std::is_void_v<Batch>) {
    if constexpr (can_stream<Batch>)
      if (bytes >= stream_store_bytes) return &assign_row_stream<Batch, T, C>;
  }
  (void)bytes;
  return &assign_row<Batch, T, C>;
}

template <class R, class View, class E>
void reduce_axis(const View& dst, const E& e, int axis);  // reduce_axis.hpp

template <class T, class A, class B, class C>
void gemm_into(T alpha, const A& a, const B& b, T beta, const C& c);  // matmul.hpp

// Evaluates a cursor (whose leaves are in `table`) into dst, which it does not overlap.
template <class E, class T, class C, int L>
void assign_cursor(T* dst, const shape_t& shape, const strides_t& dst_strides, C& src,
                   const leaf_table<L>& table) {
  constexpr int N = 1 + C::leaf_count;
  char* base[N];
  std::size_t elem[N];
  strides_t in[N];
  base[0] = reinterpret_cast<char*>(dst);
  elem[0] = sizeof(T);
  in[0] = dst_strides;
  for (int k = 1; k < N; ++k) {
    const leaf_info& leaf = table.leaves[k - 1];
    base[k] = const_cast<char*>(leaf.data);
    elem[k] = leaf.elem;
    in[k] = broadcast_strides(leaf.shape, leaf.strides, shape);
  }
  plan<N> p = make_plan<N>(shape, base, elem, in);
  p.modes[0] = access::write;

  constexpr bool simd = detail::simd_capable<E, T>::value;
  using Batch = std::conditional_t<simd, batch_for<T>, void>;
  const index_t chunks = chunk_count(p.size, detail::cost_of<E>::value + C::leaf_count);
  static_assert(std::is_trivially_copyable_v<C>);
  // Streaming stores only where the driver passes the destination's rows in place.
  const bool dst_rows_contiguous = p.strides[0][p.rank - 1] == index_t(sizeof(T));
  const row_fn fn = dst_rows_contiguous ? assign_row_for<Batch, T, C>(p.size * index_t(sizeof(T)))
                                        : &assign_row<Batch, T, C>;
  run_chunks(p.ref(), p.size, chunks, dst, sizeof(T), fn, &src, sizeof(C));
}

template <class View, class E>
void assign(const View& dst, const E& e) {
  using T = typename View::value_type;
  using C = cursor_t<E>;
  constexpr int N = 1 + C::leaf_count;
  const index_t n = dst.size();
  if (n == 0) return;

  if (dst.is_contiguous()) {
    // The flat fast path: every leaf contiguous with the destination's shape, read in place.
    char* ptrs[N];
    std::size_t elems[N];
    ptrs[0] = reinterpret_cast<char*>(const_cast<T*>(dst.raw_data()));
    elems[0] = sizeof(T);
    int k = 1;
    if (flat_inputs(e, dst.shape(), ptrs, elems, k)) {
      bool clash = false;  // a leaf that overlaps dst without being dst
      const byte_span d{reinterpret_cast<std::uintptr_t>(ptrs[0]),
                        reinterpret_cast<std::uintptr_t>(ptrs[0]) + std::uintptr_t(n) * sizeof(T)};
      for (int i = 1; i < N; ++i) {
        const auto lo = reinterpret_cast<std::uintptr_t>(ptrs[i]);
        clash = clash || ((ptrs[i] != ptrs[0] || elems[i] != sizeof(T)) &&
                          overlaps({lo, lo + std::uintptr_t(n) * elems[i]}, d));
      }
      if (!clash) {
        no_table none;
        C src = make_cursor(e, none);
        constexpr bool simd = detail::simd_capable<E, T>::value;
        using Batch = std::conditional_t<simd, batch_for<T>, void>;
        const index_t chunks = chunk_count(n, detail::cost_of<E>::value + C::leaf_count);
        const index_t bytes = n * index_t(sizeof(T));
        if (chunks == 1 && bytes < stream_store_bytes)
          return assign_row<Batch, T, C>(&src, ptrs, 0, n);
        const row_fn fn = assign_row_for<Batch, T, C>(bytes);
        if (chunks == 1) return fn(&src, ptrs, 0, n);
        plan<N> p = flat_plan<N>(n, ptrs, elems);
        p.modes[0] = access::write;
        return run_chunks(p.ref(), n, chunks, ptrs[0], sizeof(T), fn, &src, sizeof(C));
      }
    }
  }

  // A product or an axis reduction goes straight into the destination when it reads nothing there.
  if constexpr (is_matmul_expr<E>) {
    if (e.shape() == dst.shape() && std::is_same_v<T, typename E::value_type> &&
        !reads_destination(dst, e))
      return gemm_into(T(1), e.lhs(), e.rhs(), T(0), dst);
  }
  if constexpr (is_reduce_expr<E>) {
    if (e.shape() == dst.shape() && !reads_destination(dst, e))
      return reduce_axis<typename E::reducer_type>(dst, e.operand(), e.axis());
  }
  leaf_table<C::leaf_count> table;
  C src = make_cursor(e, table);
  const leaf_info out{reinterpret_cast<const char*>(dst.raw_data()), dst.shape(), dst.strides(),
                      sizeof(T)};
  if (needs_temporary(out, table.leaves, table.count)) {
    tensor<T, cpu<>> tmp(dst.shape(), uninitialized);
    assign_cursor<E>(tmp.raw_data(), tmp.shape(), tmp.strides(), src, table);
    assign(dst, tensor_ref<T, cpu<>>(tmp));
    return;
  }
  assign_cursor<E>(const_cast<T*>(dst.raw_data()), dst.shape(), dst.strides(), src, table);
}

// Fills n contiguous elements, in parallel for large n (first touch by the threads that will use
// the memory).
template <class T>
void fill(T* data, index_t n, T value) {
  const index_t chunks = chunk_count(n, 0);
  if (chunks == 1) {
    std::fill_n(data, n, value);
    return;
  }
  thread_pool::global().parallel_for(chunks, [&](index_t i) {
    const index_t b = chunk_boundary(i, chunks, n, data, sizeof(T));
    const index_t e = chunk_boundary(i + 1, chunks, n, data, sizeof(T));
    std::fill(data + b, data + e, value);
  });
}

}  // namespace meld::detail::cpu_eval

#include "gcc12_warnings.hpp"  // pop
