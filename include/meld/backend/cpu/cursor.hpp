// Cursors: the CPU evaluator's mirror of an expression tree, for one contiguous row. A leaf cursor
// is just the pointer to its row; the row kernel copies the cursor tree into locals, so that after
// inlining the inner loop works on registers only (no reloads through the expression tree, which
// is what makes xtensor's loops slow).
//
// Rows are always contiguous: the shared driver in loops.hpp replicates broadcast operands and
// packs strided ones into small buffers (as numpy's buffered ufunc loops do), so each expression
// compiles to exactly one SIMD kernel.
//
// Every cursor offers, for its current row:
//   get(j)                  the scalar value at index j
//   load<Batch>(j)          a SIMD batch of the values at j .. j + Batch::size
//   load_tail<Batch>(j, n)  the n < Batch::size values at j .., zero-padded
//   set_rows(rows, k)       take row pointers rows[k], rows[k + 1], ... (one per leaf)
#pragma once

#include <type_traits>
#include <utility>

#include "../../core/config.hpp"
#include "simd.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld::detail::cpu_eval {

// ---- leaves -------------------------------------------------------------------------------------

template <class T>
struct leaf_cursor {
  using value_type = T;
  static constexpr int leaf_count = 1;

  const T* row = nullptr;

  MELD_INLINE void set_rows(char* const* rows, int& k) {
    row = reinterpret_cast<const T*>(rows[k++]);
  }
  MELD_INLINE T get(index_t j) const { return row[j]; }
  template <class Batch>
  MELD_INLINE Batch load(index_t j) const {
    return Batch::load_unaligned(row + j);
  }
  // The tail of a row goes through the same SIMD code as the rest, so that each element's value
  // does not depend on where a row or a thread's chunk ends.
  template <class Batch>
  MELD_INLINE Batch load_tail(index_t j, index_t count) const {
    alignas(64) T lanes[Batch::size] = {};
    for (index_t l = 0; l < count; ++l) lanes[l] = row[j + l];
    return Batch::load_aligned(lanes);
  }
};

template <class T>
struct scalar_cursor {
  using value_type = T;
  static constexpr int leaf_count = 0;
  T value;

  MELD_INLINE void set_rows(char* const*, int&) {}
  MELD_INLINE T get(index_t) const { return value; }
  template <class Batch>
  MELD_INLINE Batch load(index_t) const {
    return Batch(value);
  }
  template <class Batch>
  MELD_INLINE Batch load_tail(index_t, index_t) const {
    return Batch(value);
  }
};

// ---- nodes --------------------------------------------------------------------------------------

template <class Op, class... C>
struct node_cursor;

template <class Op, class A>
struct node_cursor<Op, A> {
  using value_type =
      std::remove_cvref_t<decltype(std::declval<Op>()(std::declval<typename A::value_type>()))>;
  static constexpr int leaf_count = A::leaf_count;
  [[no_unique_address]] Op op;
  A a;

  MELD_INLINE void set_rows(char* const* rows, int& k) { a.set_rows(rows, k); }
  MELD_INLINE value_type get(index_t j) const { return op(a.get(j)); }
  template <class Batch>
  MELD_INLINE auto load(index_t j) const {
    return op(a.template load<Batch>(j));
  }
  template <class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return op(a.template load_tail<Batch>(j, n));
  }
};

template <class Op, class A, class B>
struct node_cursor<Op, A, B> {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>(), std::declval<typename B::value_type>()))>;
  static constexpr int leaf_count = A::leaf_count + B::leaf_count;
  [[no_unique_address]] Op op;
  A a;
  B b;

  MELD_INLINE void set_rows(char* const* rows, int& k) {
    a.set_rows(rows, k);
    b.set_rows(rows, k);
  }
  MELD_INLINE value_type get(index_t j) const { return op(a.get(j), b.get(j)); }
  template <class Batch>
  MELD_INLINE auto load(index_t j) const {
    return op(a.template load<Batch>(j), b.template load<Batch>(j));
  }
  template <class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return op(a.template load_tail<Batch>(j, n), b.template load_tail<Batch>(j, n));
  }
};

template <class Op, class A, class B, class C>
struct node_cursor<Op, A, B, C> {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>(), std::declval<typename B::value_type>(),
      std::declval<typename C::value_type>()))>;
  static constexpr int leaf_count = A::leaf_count + B::leaf_count + C::leaf_count;
  [[no_unique_address]] Op op;
  A a;
  B b;
  C c;

  MELD_INLINE void set_rows(char* const* rows, int& k) {
    a.set_rows(rows, k);
    b.set_rows(rows, k);
    c.set_rows(rows, k);
  }
  MELD_INLINE value_type get(index_t j) const { return op(a.get(j), b.get(j), c.get(j)); }
  template <class Batch>
  MELD_INLINE auto load(index_t j) const {
    return op(a.template load<Batch>(j), b.template load<Batch>(j), c.template load<Batch>(j));
  }
  template <class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return op(a.template load_tail<Batch>(j, n), b.template load_tail<Batch>(j, n),
              c.template load_tail<Batch>(j, n));
  }
};

// ---- the destination ----------------------------------------------------------------------------

template <class T>
struct dest_cursor {
  T* row = nullptr;

  template <class V>
  MELD_INLINE void put(index_t j, const V& v) const {
    row[j] = static_cast<T>(v);
  }
  // Stores a batch of values, or of comparison results (stored as 1 / 0).
  template <class Batch, class V>
  MELD_INLINE void store(index_t j, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>)
      store<Batch>(j, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    else
      v.store_unaligned(row + j);
  }
  // Stores the first `count` lanes.
  template <class Batch, class V>
  MELD_INLINE void store_tail(index_t j, index_t count, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>) {
      store_tail<Batch>(j, count, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    } else {
      alignas(64) T lanes[Batch::size];
      v.store_aligned(lanes);
      for (index_t l = 0; l < count; ++l) row[j + l] = lanes[l];
    }
  }
};

}  // namespace meld::detail::cpu_eval

#include "gcc12_warnings.hpp"  // pop
