// dst = e on the CPU: one pass over the destination, in the flat fast path (every operand
// contiguous with the destination's shape, read in place) or through a coalesced iteration plan
// whose rows the shared driver (loops.hpp) hands to one SIMD kernel per expression; over
// cache-line-aligned chunks on the thread pool when the work pays for it (the first such
// assignment of a program checks its instruction sets: isa_warning.hpp). Operands that overlap
// the destination other than element for element are evaluated through a temporary.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../../core/gcc12_warnings.hpp"
#include "../../tensor/tensor.hpp"
#include "../aliasing.hpp"
#include "../lowering.hpp"
#include "../plan.hpp"
#include "chunks.hpp"
#include "cursor.hpp"
#include "isa_warning.hpp"
#include "loops.hpp"
#include "lower.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// Destinations of at least this many bytes are written with non-temporal (streaming) stores
// (loops.hpp, assign_row_stream): no read-for-ownership of each destination line, and the
// operands stay in the caches. Measured with benchmarks/meld_bench (triad/hand_nt vs triad/hand)
// and a size sweep: streaming wins from ~1 MiB of destination on the AVX-512 Xeon (1.2-1.7x from
// 4 MiB up) and by 25-30 % at 10^7 floats on the Zen 3 development machine. 16 MiB is
// conservative: below it a destination may still be read back from a large L3, which streaming
// would forgo.
inline constexpr index_t stream_store_bytes = index_t(16) << 20;

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

// The batch in which a kernel writing T evaluates cursor C: batches of T's compute type (float for
// bfloat16 and half, rounded as it is stored), or void for the scalar loop (mixed element types).
template <class C, class T>
using assign_batch_t =
    std::conditional_t<simd_cursor<C, compute_t<T>>, batch_for<compute_t<T>>, void>;
// Whether rows of T are written from batches of their own type (so may be streamed).
template <class Batch, class T>
inline constexpr bool streams = [] {
  if constexpr (std::is_void_v<Batch>)
    return false;
  else
    return std::is_same_v<typename Batch::value_type, T> && can_stream<Batch>;
}();

// The row function that writes a destination of `bytes` bytes, contiguous along its rows.
template <class Batch, class T, class C>
row_fn assign_row_for(index_t bytes) {
  if constexpr (streams<Batch, T>)
    if (bytes >= stream_store_bytes) return &assign_row_stream<Batch, T, C>;
  (void)bytes;
  return &assign_row<Batch, T, C>;
}

// What the planned path needs of an expression: its row kernels (the plain one, and one with
// streaming stores or null) and its cursor, type-erased.
struct planned_source {
  row_fn row;
  row_fn stream;
  const void* ctx;
  std::size_t ctx_bytes;
  int cost;
};

// The row function of a plain copy of elements of ctx's size (*static_cast<const index_t*>(ctx)
// bytes each): the planned path passes contiguous rows.
inline void copy_row(void* ctx, char* const* rows, index_t, index_t n) {
  std::memcpy(rows[0], rows[1], std::size_t(n * *static_cast<const index_t*>(ctx)));
}

// Evaluates src (whose leaves are leaves[0 .. count)) into dst (elements of `elem` bytes), which it
// does not overlap. Not a template: the planning, chunking and the choice of kernel are compiled
// once, whatever the expression. Cold (optimized for size): it is bookkeeping around the row
// kernels, which keep their optimization, and most programs take the flat path; at -O3 the
// planned path was a third of the code a one-expression program compiles.
[[gnu::cold]] void assign_cursor(char* dst, std::size_t elem, const shape_t& shape,
                                 const strides_t& dst_strides, const planned_source& src,
                                 const leaf_info* leaves, int count);

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
  using Batch = assign_batch_t<C, T>;
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
  check_compiled_isa();
  plan<N> p = flat_plan<N>(n, ptrs, elems);
  p.modes[0] = access::write;
  run_chunks(p.ref(), n, chunks, ptrs[0], sizeof(T), fn, &src, sizeof(C));
  return true;
}

// dst (any layout, elements of `elem` bytes) = src, through a temporary when a leaf overlaps dst
// other than element for element. Not a template, and cold, like assign_cursor.
[[gnu::cold]] void assign_planned(char* dst, std::size_t elem, const shape_t& shape,
                                  const strides_t& strides, const planned_source& src,
                                  const leaf_info* leaves, int count);

// The typed part of the planned path: the cursor's row kernels.
template <class T, class C>
void assign_planned(T* dst, const shape_t& shape, const strides_t& strides, const C& src,
                    const leaf_table<C::leaf_count>& table) {
  static_assert(std::is_trivially_copyable_v<C>);
  using Batch = assign_batch_t<C, T>;
  row_fn stream = nullptr;
  if constexpr (streams<Batch, T>) stream = &assign_row_stream<Batch, T, C>;
  if (chunk_count(shape.product(), cursor_cost<C>) > 1) check_compiled_isa();
  const planned_source s{&assign_row<Batch, T, C>, stream, &src, sizeof(C), cursor_cost<C>};
  assign_planned(reinterpret_cast<char*>(dst), sizeof(T), shape, strides, s, table.leaves,
                 table.count);
}

// The planned path of assign below, out of line: most assignments take the flat path, and the
// cursor with its table of leaves is sizeable code per expression. Not cold: GCC would then
// optimize the row kernels whose addresses only this path takes (the streaming one) for size.
template <class View, class E>
MELD_NOINLINE void assign_planned(const View& dst, const E& e) {
  using T = typename View::value_type;
  leaf_table<cursor_t<E>::leaf_count> table;
  const cursor_t<E> src = make_cursor(e, table);
  assign_planned<T>(const_cast<T*>(dst.raw_data()), dst.shape(), dst.strides(), src, table);
}

template <class View, class E>
void assign_expression(const View& dst, const E& e) {
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
  if constexpr (is_reduce_expr<E> && std::is_same_v<T, typename E::value_type>) {
    if (e.shape() == dst.shape() && !reads_destination(dst, e))
      return reduce_axis<typename E::reducer_type>(dst, e.operand(), e.axis());
  }
  assign_planned(dst, e);
}

// Whether E is cast<T>(x) of an x that computes in float, T being bfloat16 or half: stored into T,
// the cast is the store's own rounding, so x is stored instead (one rounding of each lane where
// the cast's batch form and the store would round twice: 1.7x the time of a store in cache).
template <class E, class T, class = void>
inline constexpr bool is_float16_cast_of_float = false;
template <class E, class T>
inline constexpr bool is_float16_cast_of_float<E, T, std::void_t<typename E::operation>> =
    is_float16<T>&& std::is_same_v<typename E::operation, ops::cast_op<T>>&& std::is_same_v<
        compute_t<
            value_t<std::remove_cvref_t<decltype(std::declval<const E&>().template operand<0>())>>>,
        float>;

template <class View, class E>
void assign(const View& dst, const E& e) {
  using T = typename View::value_type;
  if constexpr (is_float16_cast_of_float<E, T>) {
    return assign(dst, e.template operand<0>());
  } else {
    assign_expression(dst, e);
  }
}

// ---- several destinations in one pass -----------------------------------------------------------

// One expression of assign_each's pass: its row kernel, its cursor, and the base pointers of its
// destination and leaves with their element sizes (count of each).
struct each_part {
  row_fn row;
  const void* ctx;
  char* const* ptrs;
  const std::size_t* elems;
  int count;
};

// Elements of every expression a block: the operands of a block stay in L1/L2 (a 5-input backward
// with its 5 gradients and g: 11 x 8 KiB) while each expression in turn reads them.
inline constexpr index_t each_block = 2048;

// Elements [begin, end) of every part, block by block; `rows` holds the most pointers of a part.
// Not a template: compiled once.
inline void assign_each_range(const each_part* parts, int count, index_t begin, index_t end,
                              char** rows) {
  for (index_t b = begin; b < end; b += each_block) {
    const index_t n = std::min(each_block, end - b);
    for (int i = 0; i < count; ++i) {
      const each_part& p = parts[i];
      for (int k = 0; k < p.count; ++k) rows[k] = p.ptrs[k] + b * static_cast<index_t>(p.elems[k]);
      p.row(const_cast<void*>(p.ctx), rows, 0, n);
    }
  }
}

// The element type of a destination (a tensor or view, or a reference to one).
template <class View>
using value_of = typename std::remove_cvref_t<View>::value_type;

// The flat pass of assign_each: every destination contiguous with one shape, every leaf
// contiguous with it, and no leaf or destination overlapping a destination other than element for
// element (an expression may read any destination, its own or another's, at the index it writes,
// and two may write the same destination: the block order then gives what one assignment after
// another gives). Returns false, doing nothing, otherwise.
template <class... Views, class... Es, std::size_t... I>
bool assign_each_flat(const std::tuple<Views...>& dsts, const std::tuple<Es...>& es,
                      std::index_sequence<I...>) {
  constexpr int count = sizeof...(I);
  const auto& first = std::get<0>(dsts);
  const shape_t& shape = first.shape();
  const index_t n = first.size();
  if (!((std::get<I>(dsts).is_contiguous() && std::get<I>(dsts).shape() == shape) && ...))
    return false;
  std::tuple<std::array<char*, 1 + cursor_t<Es>::leaf_count>...> ptrs;
  std::tuple<std::array<std::size_t, 1 + cursor_t<Es>::leaf_count>...> elems;
  auto gather = [&](const auto& dst, const auto& e, auto& p, auto& el) {
    using T = value_of<decltype(dst)>;
    p[0] = reinterpret_cast<char*>(const_cast<T*>(dst.raw_data()));
    el[0] = sizeof(T);
    int k = 1;
    return flat_inputs(e, shape, p.data(), el.data(), k);
  };
  if (!(gather(std::get<I>(dsts), std::get<I>(es), std::get<I>(ptrs), std::get<I>(elems)) && ...))
    return false;
  // Each pointer of every part against each destination.
  const std::uintptr_t dst_at[] = {reinterpret_cast<std::uintptr_t>(std::get<I>(ptrs)[0])...};
  const std::size_t dst_elem[] = {std::get<I>(elems)[0]...};
  auto clear = [&](const auto& p, const auto& el, int self) {
    for (std::size_t k = 0; k < p.size(); ++k) {
      const auto lo = reinterpret_cast<std::uintptr_t>(p[k]);
      const byte_span span{lo, lo + std::uintptr_t(n) * el[k]};
      for (int j = 0; j < count; ++j) {
        if (k == 0 && j == self) continue;  // the part's own destination
        const bool element_for_element = lo == dst_at[j] && el[k] == dst_elem[j];
        if (!element_for_element &&
            overlaps(span, byte_span{dst_at[j], dst_at[j] + std::uintptr_t(n) * dst_elem[j]}))
          return false;
      }
    }
    return true;
  };
  if (!(clear(std::get<I>(ptrs), std::get<I>(elems), int(I)) && ...)) return false;
  if (n == 0) return true;
  no_table none;
  const std::tuple<cursor_t<Es>...> cursors{make_cursor(std::get<I>(es), none)...};
  const each_part parts[] = {each_part{
      &assign_row<assign_batch_t<cursor_t<Es>, value_of<Views>>, value_of<Views>, cursor_t<Es>>,
      &std::get<I>(cursors), std::get<I>(ptrs).data(), std::get<I>(elems).data(),
      1 + cursor_t<Es>::leaf_count}...};
  constexpr std::size_t most = std::max({std::size_t(1 + cursor_t<Es>::leaf_count)...});
  const index_t chunks = chunk_count(n, (cursor_cost<cursor_t<Es>> + ...));
  if (chunks == 1) {
    std::array<char*, most> rows;
    assign_each_range(parts, count, 0, n, rows.data());
    return true;
  }
  check_compiled_isa();
  const void* base = std::get<0>(ptrs)[0];
  const std::size_t elem = std::get<0>(elems)[0];
  thread_pool::global().parallel_for(chunks, [&](index_t c) {
    std::array<char*, most> rows;
    assign_each_range(parts, count, chunk_boundary(c, chunks, n, base, elem),
                      chunk_boundary(c + 1, chunks, n, base, elem), rows.data());
  });
  return true;
}

// dsts[i] = es[i] for every i, as one assignment after another gives: in one pass over blocks of
// the elements where every destination and operand is contiguous with one shape (so each operand
// is read from memory once, however many expressions read it: the fused backward of an
// elementwise expression writes every input's gradient so), else one assignment after another.
template <class... Views, class... Es>
void assign_each(const std::tuple<Views...>& dsts, const std::tuple<Es...>& es) {
  static_assert(sizeof...(Views) == sizeof...(Es) && sizeof...(Es) > 0,
                "assign_each: one expression per destination");
  if (assign_each_flat(dsts, es, std::index_sequence_for<Es...>{})) return;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (assign(std::get<I>(dsts), std::get<I>(es)), ...);
  }
  (std::index_sequence_for<Es...>{});
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
#if defined(MELD_COMPILED_RUNTIME)
extern template void fill(float*, index_t, float);  // in the runtime library
extern template void fill(double*, index_t, double);
#endif

}  // namespace meld::detail::cpu_eval

#if MELD_RUNTIME_DEFINITIONS
#include "assign-inl.hpp"
#endif

MELD_GCC12_WARNINGS_ON
