// The CPU executor: evaluates expressions into views and reduces them, with xsimd on every core.
//
//   assign       one pass over the destination: a coalesced iteration plan, one contiguous SIMD
//                kernel per expression (scalar for mixed element types; the shared driver packs
//                strided and broadcast rows), over cache-line-aligned chunks on the thread pool
//                when the work pays for it.
//   reduce       blocked pairwise reduction over fixed superblocks (the same bits for any thread
//                count).
//   reduce_axis  along one axis: per output along a contiguous axis, else output-major.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "../../expr/matmul.hpp"
#include "../../expr/nodes.hpp"
#include "../../expr/reduce.hpp"
#include "../../tensor/tensor.hpp"
#include "cpu.hpp"
#include "cursor.hpp"
#include "gemm.hpp"
#include "loops.hpp"
#include "memory.hpp"
#include "plan.hpp"
#include "thread_pool.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld {

namespace detail::cpu_eval {

// Work (elements x operation cost) below which an evaluation stays on the calling thread.
// Measured with benchmarks/bench_threshold.cpp on the 2-core development machine: waking the pool
// costs 2-4 us, in which one core does ~40k simple element operations in cache.
inline constexpr index_t parallel_work_threshold = index_t(1) << 16;

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

// ---- building cursors ---------------------------------------------------------------------------

// The leaves of an expression in tree order: their layouts (for planning and alias checks) and the
// temporaries that materialized sub-reductions live in.
struct leaf_info {
  const char* data = nullptr;
  shape_t shape;
  strides_t strides;
  std::size_t elem = 0;
};

template <int N>
struct leaf_table {
  leaf_info leaves[N > 0 ? N : 1];
  std::shared_ptr<const void> keep[N > 0 ? N : 1];
  int count = 0;

  template <class T>
  void add(const T* data, const shape_t& shape, const strides_t& strides,
           std::shared_ptr<const void> owner = nullptr) {
    leaves[count] = {reinterpret_cast<const char*>(data), shape, strides, sizeof(T)};
    keep[count++] = std::move(owner);
  }
};

// cursor_of<E>: the cursor type of expression E and how to make it (a class template, so that
// nested nodes find each other's specializations whatever their order).
template <class E>
struct cursor_of;

// flat(e, shape, ptrs, elems, k): when every leaf is contiguous with exactly `shape` (or a scalar),
// records the leaves' data pointers and element sizes and returns true: the flat fast path then
// reads them in place, skipping the planner (small tensors pay almost no overhead).
template <class T, class B>
struct cursor_of<tensor_ref<T, B>> {
  using type = leaf_cursor<T>;
  MELD_INLINE static bool flat(const tensor_ref<T, B>& e, const shape_t& s, char** ptrs,
                               std::size_t* elems, int& k) {
    if (!(e.shape() == s)) return false;
    elems[k] = sizeof(T);
    ptrs[k++] = const_cast<char*>(reinterpret_cast<const char*>(e.raw_data()));
    return true;
  }
  template <class Table>
  static type make(const tensor_ref<T, B>& e, Table& table) {
    table.add(e.raw_data(), e.shape(), e.strides());
    return {};
  }
};
template <class T, class B>
struct cursor_of<tensor_view<T, B>> {
  using type = leaf_cursor<std::remove_const_t<T>>;
  MELD_INLINE static bool flat(const tensor_view<T, B>& e, const shape_t& s, char** ptrs,
                               std::size_t* elems, int& k) {
    if (!(e.shape() == s) || !e.is_contiguous()) return false;
    elems[k] = sizeof(T);
    ptrs[k++] = const_cast<char*>(reinterpret_cast<const char*>(e.raw_data()));
    return true;
  }
  template <class Table>
  static type make(const tensor_view<T, B>& e, Table& table) {
    table.add(e.raw_data(), e.shape(), e.strides());
    return {};
  }
};
template <class T, class B>
struct cursor_of<tensor<T, B>> {
  using type = leaf_cursor<T>;
  MELD_INLINE static bool flat(const tensor<T, B>& e, const shape_t& s, char** ptrs,
                               std::size_t* elems, int& k) {
    if (!(e.shape() == s)) return false;
    elems[k] = sizeof(T);
    ptrs[k++] = const_cast<char*>(reinterpret_cast<const char*>(e.raw_data()));
    return true;
  }
  template <class Table>
  static type make(const tensor<T, B>& e, Table& table) {
    table.add(e.raw_data(), e.shape(), e.strides());
    return {};
  }
};
template <class T>
struct cursor_of<scalar_expr<T>> {
  using type = scalar_cursor<T>;
  MELD_INLINE static bool flat(const scalar_expr<T>&, const shape_t&, char**, std::size_t*, int&) {
    return true;
  }
  template <class Table>
  static type make(const scalar_expr<T>& e, Table&) {
    return type{e.value()};
  }
};
template <class Op, class A>
struct cursor_of<unary_expr<Op, A>> {
  using type = node_cursor<Op, typename cursor_of<A>::type>;
  MELD_INLINE static bool flat(const unary_expr<Op, A>& e, const shape_t& s, char** p,
                               std::size_t* z, int& k) {
    return cursor_of<A>::flat(e.operand(), s, p, z, k);
  }
  template <class Table>
  static type make(const unary_expr<Op, A>& e, Table& table) {
    return type{e.op(), cursor_of<A>::make(e.operand(), table)};
  }
};
template <class Op, class A, class B>
struct cursor_of<binary_expr<Op, A, B>> {
  using type = node_cursor<Op, typename cursor_of<A>::type, typename cursor_of<B>::type>;
  MELD_INLINE static bool flat(const binary_expr<Op, A, B>& e, const shape_t& s, char** p,
                               std::size_t* z, int& k) {
    return cursor_of<A>::flat(e.lhs(), s, p, z, k) && cursor_of<B>::flat(e.rhs(), s, p, z, k);
  }
  template <class Table>
  static type make(const binary_expr<Op, A, B>& e, Table& table) {
    auto a = cursor_of<A>::make(e.lhs(), table);
    return type{e.op(), a, cursor_of<B>::make(e.rhs(), table)};
  }
};
template <class Op, class A, class B, class C>
struct cursor_of<ternary_expr<Op, A, B, C>> {
  using type = node_cursor<Op, typename cursor_of<A>::type, typename cursor_of<B>::type,
                           typename cursor_of<C>::type>;
  MELD_INLINE static bool flat(const ternary_expr<Op, A, B, C>& e, const shape_t& s, char** p,
                               std::size_t* z, int& k) {
    return cursor_of<A>::flat(e.first(), s, p, z, k) &&
           cursor_of<B>::flat(e.second(), s, p, z, k) && cursor_of<C>::flat(e.third(), s, p, z, k);
  }
  template <class Table>
  static type make(const ternary_expr<Op, A, B, C>& e, Table& table) {
    auto a = cursor_of<A>::make(e.first(), table);
    auto b = cursor_of<B>::make(e.second(), table);
    return type{e.op(), a, b, cursor_of<C>::make(e.third(), table)};
  }
};
// A sub-reduction is evaluated once, into a temporary (defined below, after reduce_axis).
template <class R, class A>
struct cursor_of<reduce_expr<R, A>> {
  using type = leaf_cursor<typename reduce_expr<R, A>::value_type>;
  MELD_INLINE static bool flat(const reduce_expr<R, A>&, const shape_t&, char**, std::size_t*,
                               int&) {
    return false;
  }
  template <class Table>
  static type make(const reduce_expr<R, A>& e, Table& table);
};

// A matrix product inside a larger expression is computed once, into a temporary (below).
template <class A, class B>
struct cursor_of<matmul_expr<A, B>> {
  using type = leaf_cursor<typename matmul_expr<A, B>::value_type>;
  MELD_INLINE static bool flat(const matmul_expr<A, B>&, const shape_t&, char**, std::size_t*,
                               int&) {
    return false;
  }
  template <class Table>
  static type make(const matmul_expr<A, B>& e, Table& table);
};

template <class E>
using cursor_t = typename cursor_of<E>::type;

// A leaf table that records nothing, for the flat path.
struct no_table {
  template <class T>
  void add(const T*, const shape_t&, const strides_t&, std::shared_ptr<const void> = nullptr) {}
};

// Operands 0 .. N-1 of a flat evaluation of n elements: each contiguous from ptrs[k].
template <int N>
plan<N> flat_plan(index_t n, char* const* ptrs, const std::size_t* elems) {
  plan<N> p;
  p.shape[0] = n;
  p.size = n;
  for (int k = 0; k < N; ++k) {
    p.base[k] = ptrs[k];
    p.elem[k] = static_cast<index_t>(elems[k]);
    p.strides[k][0] = p.elem[k];
    p.inner[k] = 1;
  }
  return p;
}

template <class E>
inline constexpr int leaf_count_v = cursor_t<E>::leaf_count;

template <class E>
inline constexpr bool is_reduce_expr = false;
template <class R, class A>
inline constexpr bool is_reduce_expr<reduce_expr<R, A>> = true;
template <class E>
inline constexpr bool is_matmul_expr = false;
template <class A, class B>
inline constexpr bool is_matmul_expr<matmul_expr<A, B>> = true;

// ---- aliasing -----------------------------------------------------------------------------------

struct byte_span {
  std::uintptr_t lo, hi;  // [lo, hi)
};

inline byte_span span_of(const char* data, const shape_t& shape, const strides_t& strides,
                         std::size_t elem) {
  index_t lo = 0, hi = 0;
  for (int d = 0; d < shape.size(); ++d) {
    const index_t reach = (shape[d] - 1) * strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const auto e = static_cast<index_t>(elem);
  return {base + static_cast<std::uintptr_t>(lo * e),
          base + static_cast<std::uintptr_t>((hi + 1) * e)};
}

inline bool overlaps(const byte_span& a, const byte_span& b) {
  return a.lo < b.hi && b.lo < a.hi;
}

// Whether one pass that writes dst while reading the leaves could read an element it has already
// overwritten. Reading exactly the element being written (x = x + 1) is safe.
inline bool needs_temporary(const leaf_info& dst, const leaf_info* leaves, int count) {
  const byte_span d = span_of(dst.data, dst.shape, dst.strides, dst.elem);
  for (int i = 0; i < count; ++i) {
    const leaf_info& leaf = leaves[i];
    if (!overlaps(span_of(leaf.data, leaf.shape, leaf.strides, leaf.elem), d)) continue;
    if (leaf.elem != dst.elem || leaf.data != dst.data) return true;
    const strides_t b = broadcast_strides(leaf.shape, leaf.strides, dst.shape);
    for (int a = 0; a < dst.shape.size(); ++a)
      if (dst.shape[a] != 1 && b[a] != dst.strides[a]) return true;
  }
  return false;
}

// Whether the destination overlaps any leaf at all.
inline bool needs_temporary_any(const leaf_info& dst, const leaf_info* leaves, int count) {
  const byte_span d = span_of(dst.data, dst.shape, dst.strides, dst.elem);
  for (int i = 0; i < count; ++i)
    if (overlaps(span_of(leaves[i].data, leaves[i].shape, leaves[i].strides, leaves[i].elem), d))
      return true;
  return false;
}

// ---- parallel splitting -------------------------------------------------------------------------

MELD_INLINE index_t chunk_count(index_t elements, int cost) {
  const index_t work = elements * (cost + 2);
  // Small work is decided before touching the pool (a function-local static and a thread-local).
  if (work < 2 * parallel_work_threshold) return 1;
  const int threads = thread_pool::global().size();
  if (threads == 1 || thread_pool::in_task()) return 1;
  return std::clamp<index_t>(work / parallel_work_threshold, 1, index_t(threads) * 4);
}

// Boundary i of `chunks` pieces of [0, n), moved down to a cache-line boundary of the destination
// (which starts at byte address `dst`, elements of `elem` bytes) so that no two threads write
// one line.
inline index_t chunk_boundary(index_t i, index_t chunks, index_t n, const void* dst,
                              std::size_t elem) {
  if (i >= chunks) return n;
  const index_t per_line = std::max<index_t>(1, index_t(cache_line / elem));
  const index_t misalign =
      static_cast<index_t>(reinterpret_cast<std::uintptr_t>(dst) % cache_line) /
      static_cast<index_t>(elem);
  const index_t raw = n / chunks * i + (n % chunks) * i / chunks;
  return std::clamp<index_t>((raw + misalign) / per_line * per_line - misalign, 0, n);
}

// Runs fn over [0, n) of a plan in `chunks` pieces on the pool. Each piece gets its own copy of
// the row state `ctx` (cursors are trivially copyable; they are not shared between threads).
// Not a template: compiled once, whatever the expression.
inline void run_chunks(const plan_ref& p, index_t n, index_t chunks, const void* dst,
                       std::size_t elem, row_fn fn, const void* ctx, std::size_t ctx_bytes) {
  auto run = [&](index_t begin, index_t end) {
    alignas(64) unsigned char local[512];
    std::unique_ptr<unsigned char[]> big(ctx_bytes > sizeof(local) ? new unsigned char[ctx_bytes]
                                                                   : nullptr);
    void* copy = big ? static_cast<void*>(big.get()) : static_cast<void*>(local);
    std::memcpy(copy, ctx, ctx_bytes);
    run_rows(p, begin, end, fn, copy);
  };
  if (chunks == 1) return run(0, n);
  thread_pool::global().parallel_for(chunks, [&](index_t i) {
    run(chunk_boundary(i, chunks, n, dst, elem), chunk_boundary(i + 1, chunks, n, dst, elem));
  });
}

// The SIMD batch of T. In files compiled by nvcc the CPU evaluator runs scalar loops (vectorized
// by the host compiler where it can): nvcc would also compile the __host__ __device__ functors for
// xsimd's vector types as device code, which it cannot.
#if defined(__CUDACC__)
template <class T>
using batch_for = void;
#else
template <class T>
using batch_for = xsimd::batch<T, simd_arch>;
#endif

// ---- assign -------------------------------------------------------------------------------------

template <class View, class E>
void assign(const View& dst, const E& e);

template <class R, class View, class E>
void reduce_axis(const View& dst, const E& e, int axis);

template <class T, class A, class B, class C>
void gemm_into(T alpha, const A& a, const B& b, T beta, const C& c);

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
    if (cursor_of<E>::flat(e, dst.shape(), ptrs, elems, k)) {
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
        C src = cursor_of<E>::make(e, none);
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

  const leaf_info out{reinterpret_cast<const char*>(dst.raw_data()), dst.shape(), dst.strides(),
                      sizeof(T)};
  if constexpr (is_matmul_expr<E>) {
    // Multiply straight into the destination when it has the product's shape and is not an operand.
    if (e.shape() == dst.shape() && std::is_same_v<T, typename E::value_type>) {
      leaf_table<leaf_count_v<typename E::lhs_type> + leaf_count_v<typename E::rhs_type>> probe;
      cursor_of<typename E::lhs_type>::make(e.lhs(), probe);
      cursor_of<typename E::rhs_type>::make(e.rhs(), probe);
      if (!needs_temporary_any(out, probe.leaves, probe.count))
        return gemm_into(T(1), e.lhs(), e.rhs(), T(0), dst);
    }
  }
  if constexpr (is_reduce_expr<E>) {
    // Reduce straight into the destination when the operand does not read it.
    if (e.shape() == dst.shape()) {
      leaf_table<leaf_count_v<typename E::operand_type>> probe;
      cursor_of<typename E::operand_type>::make(e.operand(), probe);
      const byte_span d = span_of(out.data, out.shape, out.strides, out.elem);
      bool clash = false;
      for (int i = 0; i < probe.count; ++i) {
        const leaf_info& l = probe.leaves[i];
        clash = clash || overlaps(span_of(l.data, l.shape, l.strides, l.elem), d);
      }
      if (!clash) return reduce_axis<typename E::reducer_type>(dst, e.operand(), e.axis());
    }
  }
  leaf_table<leaf_count_v<E>> table;
  auto src = cursor_of<E>::make(e, table);
  if (needs_temporary(out, table.leaves, table.count)) {
    tensor<T, cpu<>> tmp(dst.shape(), uninitialized);
    assign_cursor<E>(tmp.raw_data(), tmp.shape(), tmp.strides(), src, table);
    assign(dst, tensor_ref<T, cpu<>>(tmp));
    return;
  }
  assign_cursor<E>(const_cast<T*>(dst.raw_data()), dst.shape(), dst.strides(), src, table);
}

// ---- matrix products ----------------------------------------------------------------------------

// An operand of a product as strided memory: leaves are used in place, other expressions are
// evaluated into a temporary first.
template <class T>
struct strided_operand {
  const T* data;
  shape_t shape;
  strides_t strides;
  tensor<T, cpu<>> temporary;
};

template <class T, class E>
strided_operand<T> as_strided(const E& e) {
  if constexpr (requires {
                  e.raw_data();
                  e.strides();
                } &&
                std::is_same_v<value_t<E>, T>) {
    return {e.raw_data(), e.shape(), e.strides(), tensor<T, cpu<>>()};
  } else {
    tensor<T, cpu<>> t(e.shape(), uninitialized);
    assign(t, e);
    const T* data = t.raw_data();
    return {data, t.shape(), t.strides(), std::move(t)};
  }
}

// c = alpha a b + beta c for rank-2 or rank-3 (batched) operands; c does not overlap a or b.
template <class T, class A, class B, class C>
void gemm_into(T alpha, const A& a_expr, const B& b_expr, T beta, const C& c_view) {
  const strided_operand<T> a = as_strided<T>(a_expr), b = as_strided<T>(b_expr);
  const shape_t& cs = c_view.shape();
  const int rc = cs.size();
  const index_t batches = rc == 3 ? cs[0] : 1;
  auto matrix = [](const auto* data, const shape_t& s, const strides_t& st, index_t batch) {
    const int r = s.size();
    const index_t offset = r == 3 ? batch * st[0] : 0;
    using P = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
    return matrix_ref<std::add_const_t<P>>{data + offset, s[r - 2], s[r - 1], st[r - 2], st[r - 1]};
  };
  T* c_data = const_cast<T*>(c_view.raw_data());
  auto one = [&](index_t batch) {
    const index_t c_off = rc == 3 ? batch * c_view.strides()[0] : 0;
    matrix_ref<T> c{c_data + c_off, cs[rc - 2], cs[rc - 1], c_view.strides()[rc - 2],
                    c_view.strides()[rc - 1]};
    gemm(alpha, matrix(a.data, a.shape, a.strides, batch),
         matrix(b.data, b.shape, b.strides, batch), beta, c);
  };
  // A batch of products too small to use the threads one by one runs one product per task (each
  // on one thread; the results do not depend on the thread count either way).
  const index_t k = a.shape.back(), work = cs[rc - 2] * cs[rc - 1] * k;
  const int threads = thread_pool::global().size();
  if (batches > 1 && threads > 1 && work < gemm_parallel_work * threads &&
      work * batches >= gemm_parallel_work && !thread_pool::in_task()) {
    const index_t tasks = std::min<index_t>(batches, index_t(threads) * 4);
    thread_pool::global().parallel_for(tasks, [&](index_t t) {
      for (index_t batch = batches * t / tasks; batch < batches * (t + 1) / tasks; ++batch)
        one(batch);
    });
    return;
  }
  for (index_t batch = 0; batch < batches; ++batch) one(batch);
}

template <class A, class B>
template <class Table>
auto cursor_of<matmul_expr<A, B>>::make(const matmul_expr<A, B>& e, Table& table) -> type {
  using V = typename matmul_expr<A, B>::value_type;
  tensor<V, cpu<>> t(e.shape(), uninitialized);
  gemm_into(V(1), e.lhs(), e.rhs(), V(0), t);
  const V* data = t.raw_data();
  const shape_t shape = t.shape();
  const strides_t strides = t.strides();
  table.add(data, shape, strides, std::move(t).release().storage_ptr());
  return {};
}

// ---- reduce (all elements) ----------------------------------------------------------------------

// The accumulator type of a full reduction of elements V.
template <class R, class V>
using accumulator_t =
    std::conditional_t<std::is_same_v<R, reducers::mean>,
                       std::conditional_t<std::is_floating_point_v<V>, V, std::int64_t>,
                       typename R::template result<V>>;

template <class R>
inline constexpr bool is_arg_reducer =
    std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;

// The reduction of n elements of the cursor `src`, whose leaves are contiguous from base[i]
// (`planned` null: the flat path) or walked by the plan `planned`.
template <class R, class E, class C, int N>
auto reduce_run(const C& src, index_t n, char* const* base, const std::size_t* elem,
                const plan_ref* planned) {
  using V = value_t<E>;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Fold = std::conditional_t<is_mean, reducers::sum, R>;
  using A = accumulator_t<R, V>;
  using Result = typename R::template result<V>;
  const index_t chunks = chunk_count(n, detail::cost_of<E>::value + C::leaf_count);

  if constexpr (is_arg_reducer<R>) {
    using State = arg_state<R, C>;
    const row_fn fn = &arg_row<R, C>;
    std::vector<State> best(static_cast<std::size_t>(chunks), State{src});
    auto piece = [&](index_t i) { return n / chunks * i + (n % chunks) * i / chunks; };
    thread_pool::global().parallel_for(chunks, [&](index_t i) {
      best[i].linear = piece(i);
      run_rows(*planned, piece(i), piece(i + 1), fn, &best[i]);
    });
    State out = best[0];
    for (const State& b : best)  // pieces in order: the first extreme wins ties
      if (b.index >= 0 && (out.index < 0 || R::better(b.value, out.value))) out = b;
    return static_cast<Result>(out.index);
  } else {
    constexpr bool simd = std::is_same_v<V, A> && detail::simd_capable<E, A>::value;
    using Batch = std::conditional_t<simd, batch_for<A>, void>;
    using State = reduce_state<Fold, A, Batch, C>;
    const row_fn fn = &reduce_row<Fold, A, Batch, C>;
    const index_t supers = (n + reduce_superblock - 1) / reduce_superblock;
    auto super = [&](index_t s) {
      State state{src, {}};
      const index_t b = s * reduce_superblock, e_ = std::min(n, (s + 1) * reduce_superblock);
      if (!planned) {
        char* rows[N];
        for (int i = 0; i < N; ++i) rows[i] = base[i] + b * static_cast<index_t>(elem[i]);
        fn(&state, rows, 0, e_ - b);
      } else {
        run_rows(*planned, b, e_, fn, &state);
      }
      return state.acc.finish();
    };
    pairwise_stack<Fold, A> total;
    if (chunks == 1 || supers == 1) {
      for (index_t s = 0; s < supers; ++s) total.push(super(s));
    } else {
      std::vector<A> partial(static_cast<std::size_t>(supers));
      const index_t tasks = std::min(chunks, supers);
      thread_pool::global().parallel_for(tasks, [&](index_t t) {
        for (index_t s = supers * t / tasks; s < supers * (t + 1) / tasks; ++s)
          partial[s] = super(s);
      });
      for (const A& v : partial) total.push(v);
    }
    const A folded = total.result(Fold::template identity<A>());
    if constexpr (is_mean)
      return static_cast<Result>(static_cast<Result>(folded) / Result(n));
    else
      return static_cast<Result>(folded);
  }
}

template <class R, class E>
auto reduce(const E& e) {
  using V = value_t<E>;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using A = accumulator_t<R, V>;
  using Result = typename R::template result<V>;
  using C = cursor_t<E>;

  const shape_t& shape = e.shape();
  const index_t n = shape.product();
  if (n == 0) {
    if constexpr (R::needs_elements) {
      throw shape_error(cat(R::name, ": the expression of shape ", shape,
                            " is empty, and an empty ", R::name, " has no value"));
    } else if constexpr (is_mean) {
      return std::numeric_limits<Result>::quiet_NaN();
    } else {
      return static_cast<Result>(R::template identity<A>());
    }
  }

  constexpr int N = std::max(1, C::leaf_count);
  char* base[N] = {};
  std::size_t elem[N] = {1};
  int k = 0;
  // The flat fast path reads contiguous leaves in place, without a leaf table or a plan (zeroing
  // and copying those costs as much as summing 1000 floats); otherwise plan the iteration.
  if (cursor_of<E>::flat(e, shape, base, elem, k)) {
    no_table none;
    const C src = cursor_of<E>::make(e, none);
    if constexpr (is_arg_reducer<R>) {
      const plan<N> p = flat_plan<N>(n, base, elem);
      const plan_ref ref = p.ref();
      return reduce_run<R, E, C, N>(src, n, base, elem, &ref);
    } else {
      return reduce_run<R, E, C, N>(src, n, base, elem, nullptr);
    }
  }
  leaf_table<C::leaf_count> table;
  const C src = cursor_of<E>::make(e, table);
  strides_t in[N];
  if constexpr (C::leaf_count == 0) in[0] = dims::filled(shape.size(), 0);
  for (int i = 0; i < C::leaf_count; ++i) {
    const leaf_info& leaf = table.leaves[i];
    base[i] = const_cast<char*>(leaf.data);
    elem[i] = leaf.elem;
    in[i] = broadcast_strides(leaf.shape, leaf.strides, shape);
  }
  const plan<N> p = make_plan<N>(shape, base, elem, in);
  const plan_ref ref = p.ref();
  return reduce_run<R, E, C, N>(src, n, base, elem, &ref);
}

// ---- reduce along an axis -----------------------------------------------------------------------

// Reduces rows along the axis (in one or more pieces) and writes each output element.
template <class R, class A, class Batch, class C>
struct axis_row_state {
  using V = typename C::value_type;
  C src;
  index_t extent;  // of the axis
  using Fold = std::conditional_t<std::is_same_v<R, reducers::mean>, reducers::sum, R>;
  std::conditional_t<is_arg_reducer<R>, char, block_reducer<Fold, A, Batch>> acc;
  V best_v{};
  index_t best = 0;
};

template <class R, class A, class Batch, class T, class C>
void reduce_axis_row(void* ctx, char* const* rows, index_t j, index_t n) {
  auto& s = *static_cast<axis_row_state<R, A, Batch, C>*>(ctx);
  C src = s.src;
  int k = 1;
  src.set_rows(rows, k);
  if constexpr (is_arg_reducer<R>) {
    for (index_t i = 0; i < n; ++i) {
      const auto v = src.get(i);
      if ((j == 0 && i == 0) || R::better(v, s.best_v)) s.best_v = v, s.best = j + i;
    }
  } else {
    s.acc.consume(src, 0, n);
  }
  if (j + n < s.extent) return;  // more pieces of this row follow
  using Result = typename R::template result<typename C::value_type>;
  Result out;
  if constexpr (is_arg_reducer<R>) {
    out = s.best;
  } else {
    out = static_cast<Result>(s.acc.finish());
    if constexpr (std::is_same_v<R, reducers::mean>) out /= Result(s.extent);
    s.acc.clear();
  }
  *reinterpret_cast<T*>(rows[0]) = static_cast<T>(out);
}

// Output-major accumulation: one call per row of outputs for one position k along the axis.
template <class R, class W, class C>
struct column_state {
  using V = typename C::value_type;
  C src;
  W* acc;     // per output of the block
  V* best_v;  // argmax / argmin: the best value so far
  index_t* best;
  index_t k = 0;  // position along the axis
  index_t i = 0;  // output within the block
};

template <class R, class W, class C>
void column_row(void* ctx, char* const* rows, index_t, index_t n) {
  auto& s = *static_cast<column_state<R, W, C>*>(ctx);
  C src = s.src;
  int k = 1;
  src.set_rows(rows, k);
  for (index_t j = 0; j < n; ++j, ++s.i) {
    const auto v = src.get(j);
    if constexpr (is_arg_reducer<R>) {
      if (s.k == 0 || R::better(v, s.best_v[s.i])) s.best_v[s.i] = v, s.best[s.i] = s.k;
    } else {
      using F = std::conditional_t<std::is_same_v<R, reducers::mean>, reducers::sum, R>;
      s.acc[s.i] = s.k == 0 ? static_cast<W>(v) : F{}(s.acc[s.i], static_cast<W>(v));
    }
  }
}

template <class R, class W, class V, class T>
struct column_output {
  const W* acc;
  const index_t* best;
  index_t count;  // extent of the axis
  index_t i = 0;
};

template <class R, class W, class V, class T>
void column_store(void* ctx, char* const* rows, index_t, index_t n) {
  auto& s = *static_cast<column_output<R, W, V, T>*>(ctx);
  T* row = reinterpret_cast<T*>(rows[0]);
  using Result = typename R::template result<V>;
  for (index_t j = 0; j < n; ++j, ++s.i) {
    Result out;
    if constexpr (is_arg_reducer<R>)
      out = s.best[s.i];
    else if constexpr (std::is_same_v<R, reducers::mean>)
      out = static_cast<Result>(s.acc[s.i]) / Result(s.count);
    else
      out = static_cast<Result>(s.acc[s.i]);
    row[j] = static_cast<T>(out);
  }
}

template <class R, class View, class E>
void reduce_axis(const View& dst, const E& e, int axis) {
  using T = typename View::value_type;
  using V = value_t<E>;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Result = typename R::template result<V>;
  using A = accumulator_t<R, V>;
  // Float sums over a strided axis accumulate in double (there is no pairwise tree there).
  using W = std::conditional_t<std::is_same_v<A, float> && !R::needs_elements, double, A>;
  using C = cursor_t<E>;
  constexpr int N = 1 + C::leaf_count;

  if (dst.size() == 0) return;
  const shape_t& in_shape = e.shape();
  const int r = in_shape.size();
  const index_t L = in_shape[axis];

  leaf_table<C::leaf_count> table;
  C src = cursor_of<E>::make(e, table);

  // The iteration space: the operand's axes with `axis` moved last.
  auto move_last = [&](const strides_t& s) {
    strides_t out;
    for (int d = 0; d < r; ++d)
      if (d != axis) out.push_back(s[d]);
    out.push_back(s[axis]);
    return out;
  };
  const shape_t space = move_last(in_shape);
  char* base[N];
  std::size_t elem[N];
  strides_t in[N];
  {
    // The destination has the operand's axes without `axis` (or with extent 1 there).
    strides_t ds;
    const bool keep = dst.rank() == r;
    for (int d = 0, j = 0; d < r; ++d) {
      if (d == axis) {
        j += keep;
        continue;
      }
      ds.push_back(dst.strides()[j++]);
    }
    ds.push_back(0);
    base[0] = reinterpret_cast<char*>(const_cast<T*>(dst.raw_data()));
    elem[0] = sizeof(T);
    in[0] = ds;
  }
  for (int k = 1; k < N; ++k) {
    const leaf_info& leaf = table.leaves[k - 1];
    base[k] = const_cast<char*>(leaf.data);
    elem[k] = leaf.elem;
    in[k] = move_last(broadcast_strides(leaf.shape, leaf.strides, in_shape));
  }
  plan<N> p = make_plan<N>(space, base, elem, in, /*separate_last=*/true);
  p.modes[0] = access::pointer;  // the output element, written once per row
  const index_t M = dst.size();  // outputs
  bool along_contiguous = true;  // every operand is contiguous along the axis
  for (int i = 1; i < N; ++i) along_contiguous = along_contiguous && p.inner[i] == 1;

  if (L == 0) {  // an empty sum / product / mean (max and min refused it already)
    Result fill;
    if constexpr (is_mean)
      fill = std::numeric_limits<Result>::quiet_NaN();
    else if constexpr (is_arg_reducer<R>)
      fill = 0;
    else
      fill = static_cast<Result>(R::template identity<A>());
    tensor<T, cpu<>> filled({1}, uninitialized);
    filled.fill(static_cast<T>(fill));
    assign(dst, tensor_view<const T, cpu<>>(filled.view()).broadcast_to(dst.shape()));
    return;
  }

  const index_t chunks =
      std::min(chunk_count(p.size, detail::cost_of<E>::value + C::leaf_count), M);

  if (along_contiguous || M < 64) {
    // One output at a time, reducing a row of the operand (packed when it is strided).
    constexpr bool simd =
        !is_arg_reducer<R> && std::is_same_v<V, A> && detail::simd_capable<E, A>::value;
    using Batch = std::conditional_t<simd, batch_for<A>, void>;
    using State = axis_row_state<R, A, Batch, C>;
    auto piece = [&](index_t i) { return (M / chunks * i + (M % chunks) * i / chunks) * L; };
    thread_pool::global().parallel_for(chunks, [&](index_t i) {
      State state{src, L, {}};
      run_rows(p.ref(), piece(i), piece(i + 1), &reduce_axis_row<R, A, Batch, T, C>, &state);
    });
    return;
  }

  // Output-major: for each block of outputs, walk the axis in the outer loop so that the operand
  // is read in memory order. The plan of outputs is p without its last axis.
  plan<N> out_plan = p;  // p.rank >= 2 here: M > 1
  out_plan.rank = p.rank - 1;
  out_plan.size = M;
  access store_modes[N];
  for (int o = 0; o < N; ++o) store_modes[o] = o == 0 ? access::write : access::pointer;
  constexpr index_t block = 512;
  const index_t blocks = (M + block - 1) / block;
  const index_t tasks = std::min(blocks, chunks);
  thread_pool::global().parallel_for(tasks, [&](index_t t) {
    W acc[block];
    V best_v[is_arg_reducer<R> ? block : 1];
    index_t best[is_arg_reducer<R> ? block : 1];
    for (index_t b = blocks * t / tasks; b < blocks * (t + 1) / tasks; ++b) {
      const index_t m0 = b * block, m1 = std::min(M, m0 + block);
      column_state<R, W, C> state{src, acc, best_v, best};
      char* shifted[N];
      plan_ref at_k = out_plan.ref();
      at_k.base = shifted;
      for (index_t kk = 0; kk < L; ++kk) {
        for (int o = 0; o < N; ++o) shifted[o] = p.base[o] + kk * p.strides[o][p.rank - 1];
        state.k = kk;
        state.i = 0;
        run_rows(at_k, m0, m1, &column_row<R, W, C>, &state);
      }
      column_output<R, W, V, T> store{acc, best, L};
      plan_ref out_ref = out_plan.ref();
      out_ref.modes = store_modes;
      run_rows(out_ref, m0, m1, &column_store<R, W, V, T>, &store);
    }
  });
}

template <class R, class A>
template <class Table>
auto cursor_of<reduce_expr<R, A>>::make(const reduce_expr<R, A>& e, Table& table) -> type {
  using V = typename reduce_expr<R, A>::value_type;
  tensor<V, cpu<>> t(e.shape(), uninitialized);
  reduce_axis<R>(t.view(), e.operand(), e.axis());
  const V* data = t.raw_data();
  const shape_t shape = t.shape();
  const strides_t strides = t.strides();
  table.add(data, shape, strides, std::move(t).release().storage_ptr());
  return {};
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

}  // namespace detail::cpu_eval

template <class Policy>
struct executor<cpu<Policy>> {
  // Fills a contiguous tensor.
  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    detail::cpu_eval::fill(const_cast<T*>(dst.raw_data()), dst.size(), value);
  }
  // dst: a tensor or a tensor_view of this backend.
  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e) {
    detail::cpu_eval::assign(dst, e);
  }
  template <class R, class E>
  static auto reduce(const E& e) {
    return detail::cpu_eval::reduce<R>(e);
  }
  // c = alpha a b + beta c (shapes checked by meld::gemm). c may not overlap a or b.
  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c) {
    detail::cpu_eval::gemm_into(alpha, a, b, beta, c);
  }
  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis) {
    detail::cpu_eval::reduce_axis<R>(dst, e, axis);
  }
};

}  // namespace meld

#include "gcc12_warnings.hpp"  // pop
