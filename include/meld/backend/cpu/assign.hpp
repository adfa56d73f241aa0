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

// The heavy parts below depend only on the element type and the cursor (the lowered tree), not on
// the expression: the same expression on cpu<sync>, cpu<async> or sim compiles its loops once.

// Whether the cursor's operations run on SIMD batches of T, and the cost that sizes parallel work.
template <class C, class T>
inline constexpr bool simd_cursor = simd_capable<decltype(C::tree), T>::value;
template <class C>
inline constexpr int cursor_cost = cost_of<decltype(C::tree)>::value + C::leaf_count;

// Evaluates a cursor (whose leaves are in `table`) into dst, which it does not overlap.
template <class T, class C>
void assign_cursor(T* dst, const shape_t& shape, const strides_t& dst_strides, const C& src,
                   const leaf_table<C::leaf_count>& table) {
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

  using Batch = std::conditional_t<simd_cursor<C, T>, batch_for<T>, void>;
  const index_t chunks = chunk_count(p.size, cursor_cost<C>);
  static_assert(std::is_trivially_copyable_v<C>);
  // Streaming stores only where the driver passes the destination's rows in place.
  const bool dst_rows_contiguous = p.strides[0][p.rank - 1] == index_t(sizeof(T));
  const row_fn fn = dst_rows_contiguous ? assign_row_for<Batch, T, C>(p.size * index_t(sizeof(T)))
                                        : &assign_row<Batch, T, C>;
  run_chunks(p.ref(), p.size, chunks, dst, sizeof(T), fn, &src, sizeof(C));
}

// The flat fast path: dst and every leaf contiguous with one shape, read in place from ptrs[1..]
// (ptrs[0] is dst). Returns false, doing nothing, when a leaf overlaps dst without being dst.
template <class T, class C>
MELD_NOINLINE bool assign_flat(index_t n, char* const* ptrs, const std::size_t* elems,
                               const C& src) {
  constexpr int N = 1 + C::leaf_count;
  const byte_span d{reinterpret_cast<std::uintptr_t>(ptrs[0]),
                    reinterpret_cast<std::uintptr_t>(ptrs[0]) + std::uintptr_t(n) * sizeof(T)};
  for (int i = 1; i < N; ++i) {
    const auto lo = reinterpret_cast<std::uintptr_t>(ptrs[i]);
    if ((ptrs[i] != ptrs[0] || elems[i] != sizeof(T)) &&
        overlaps({lo, lo + std::uintptr_t(n) * elems[i]}, d))
      return false;
  }
  using Batch = std::conditional_t<simd_cursor<C, T>, batch_for<T>, void>;
  const index_t chunks = chunk_count(n, cursor_cost<C>);
  const index_t bytes = n * index_t(sizeof(T));
  if (chunks == 1 && bytes < stream_store_bytes) {
    assign_row<Batch, T, C>(const_cast<C*>(&src), ptrs, 0, n);
    return true;
  }
  const row_fn fn = assign_row_for<Batch, T, C>(bytes);
  if (chunks == 1) {
    fn(const_cast<C*>(&src), ptrs, 0, n);
    return true;
  }
  plan<N> p = flat_plan<N>(n, ptrs, elems);
  p.modes[0] = access::write;
  run_chunks(p.ref(), n, chunks, ptrs[0], sizeof(T), fn, &src, sizeof(C));
  return true;
}

// dst (any layout) = the cursor, through a temporary when a leaf overlaps dst other than element
// for element.
template <class T, class C>
MELD_NOINLINE void assign_planned(T* dst, const shape_t& shape, const strides_t& strides,
                                  const C& src, const leaf_table<C::leaf_count>& table) {
  const leaf_info out{reinterpret_cast<const char*>(dst), shape, strides, sizeof(T)};
  if (!needs_temporary(out, table.leaves, table.count))
    return assign_cursor<T>(dst, shape, strides, src, table);
  tensor<T, cpu<>> tmp(shape, uninitialized);
  assign_cursor<T>(tmp.raw_data(), tmp.shape(), tmp.strides(), src, table);
  using copy_cursor = cursor<leaf_cursor<T>>;
  leaf_table<1> from;
  from.add(tmp.raw_data(), tmp.shape(), tmp.strides());
  assign_cursor<T>(dst, shape, strides, copy_cursor{}, from);
}

template <class View, class E>
void assign(const View& dst, const E& e) {
  using T = typename View::value_type;
  using C = cursor_t<E>;
  constexpr int N = 1 + C::leaf_count;
  const index_t n = dst.size();
  if (n == 0) return;
  T* out = const_cast<T*>(dst.raw_data());

  if (dst.is_contiguous()) {
    char* ptrs[N];
    std::size_t elems[N];
    ptrs[0] = reinterpret_cast<char*>(out);
    elems[0] = sizeof(T);
    int k = 1;
    if (flat_inputs(e, dst.shape(), ptrs, elems, k)) {
      no_table none;
      if (assign_flat<T>(n, ptrs, elems, make_cursor(e, none))) return;
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
  const C src = make_cursor(e, table);
  assign_planned<T>(out, dst.shape(), dst.strides(), src, table);
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
