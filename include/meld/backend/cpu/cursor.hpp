// Cursors: the CPU evaluator's mirror of an expression tree. A cursor tree is built on the stack
// for one evaluation; each leaf cursor holds a raw pointer to the current row and the strides of
// the coalesced iteration space, so that after inlining the inner loop works on registers only
// (no reloads through the expression tree, which is what makes xtensor's loops slow).
//
// Every cursor offers, for the current row of the iteration space:
//   get<Mode>(j)         the scalar value at inner index j
//   load<Mode, Batch>(j) a SIMD batch of the values at j .. j + Batch::size
//   seek(idx)            move to the row whose outer indices are idx[0 .. outer)
//   step(d) / rewind(d, n)   move +1 / -n along outer axis d
// Modes tell what the inner strides are, so that the common cases compile to plain loads:
#pragma once

#include <cstring>
#include <type_traits>
#include <utility>

#include "simd.hpp"

#include "../../core/config.hpp"
#include "../../core/shape.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld::detail::cpu_eval {

struct mode_aligned {};     // inner stride 1 everywhere, rows aligned to the batch size
struct mode_contiguous {};  // inner stride 1 everywhere
struct mode_strided {};     // any inner strides (0: broadcast splat, other: gathered)

template <class M>
inline constexpr bool is_contiguous_mode =
    std::is_same_v<M, mode_aligned> || std::is_same_v<M, mode_contiguous>;

// Strides of every operand in the coalesced iteration space, outer axes first.
struct axis_strides {
  index_t s[max_rank] = {};
};

// ---- leaves -------------------------------------------------------------------------------------

template <class T>
struct leaf_cursor {
  using value_type = T;
  static constexpr int leaf_count = 1;

  const T* base = nullptr;  // element (0, ..., 0)
  shape_t shape;            // the operand's own layout, before broadcasting
  strides_t strides;
  const T* row = nullptr;  // start of the current row
  index_t inner = 0;       // stride along the innermost axis
  axis_strides outer;      // strides along the outer axes

  leaf_cursor(const T* data, const shape_t& s, const strides_t& st)
      : base(data), shape(s), strides(st) {}

  template <class F>
  void for_each_leaf(F&& f) {
    f(*this);
  }
  void bind(const axis_strides& st, int rank) {
    outer = st;
    inner = st.s[rank - 1];
    row = base;
  }
  MELD_INLINE void seek(const index_t* idx, int outer_rank) {
    row = base;
    for (int d = 0; d < outer_rank; ++d) row += idx[d] * outer.s[d];
  }
  MELD_INLINE void step(int d) { row += outer.s[d]; }
  MELD_INLINE void rewind(int d, index_t n) { row -= n * outer.s[d]; }

  template <class Mode>
  MELD_INLINE T get(index_t j) const {
    if constexpr (is_contiguous_mode<Mode>) return row[j];
    else return row[j * inner];
  }

  template <class Mode, class Batch>
  MELD_INLINE Batch load(index_t j) const {
    if constexpr (std::is_same_v<Mode, mode_aligned>) {
      return Batch::load_aligned(row + j);
    } else if constexpr (std::is_same_v<Mode, mode_contiguous>) {
      return Batch::load_unaligned(row + j);
    } else {
      if (inner == 1) return Batch::load_unaligned(row + j);
      if (inner == 0) return Batch(*row);
      alignas(64) T lanes[Batch::size];
      for (std::size_t l = 0; l < Batch::size; ++l) lanes[l] = row[(j + index_t(l)) * inner];
      return Batch::load_aligned(lanes);
    }
  }

  // The `count` (< Batch::size) values at j .. j + count, padded with zeros: the tail of a row
  // goes through the same SIMD code as the rest, so each element's value does not depend on
  // where a row or a thread's chunk ends.
  template <class Mode, class Batch>
  MELD_INLINE Batch load_tail(index_t j, index_t count) const {
    alignas(64) T lanes[Batch::size] = {};
    for (index_t l = 0; l < count; ++l) lanes[l] = get<Mode>(j + l);
    return Batch::load_aligned(lanes);
  }
};

template <class T>
struct scalar_cursor {
  using value_type = T;
  static constexpr int leaf_count = 0;
  T value;

  template <class F>
  void for_each_leaf(F&&) {}
  MELD_INLINE void seek(const index_t*, int) {}
  MELD_INLINE void step(int) {}
  MELD_INLINE void rewind(int, index_t) {}
  template <class Mode>
  MELD_INLINE T get(index_t) const {
    return value;
  }
  template <class Mode, class Batch>
  MELD_INLINE Batch load(index_t) const {
    return Batch(value);
  }
  template <class Mode, class Batch>
  MELD_INLINE Batch load_tail(index_t, index_t) const {
    return Batch(value);
  }
};

// ---- nodes --------------------------------------------------------------------------------------

template <class Op, class A>
struct unary_cursor {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>()))>;
  static constexpr int leaf_count = A::leaf_count;
  [[no_unique_address]] Op op;
  A a;

  template <class F>
  void for_each_leaf(F&& f) {
    a.for_each_leaf(f);
  }
  MELD_INLINE void seek(const index_t* idx, int r) { a.seek(idx, r); }
  MELD_INLINE void step(int d) { a.step(d); }
  MELD_INLINE void rewind(int d, index_t n) { a.rewind(d, n); }
  template <class Mode>
  MELD_INLINE value_type get(index_t j) const {
    return op(a.template get<Mode>(j));
  }
  template <class Mode, class Batch>
  MELD_INLINE auto load(index_t j) const {
    return op(a.template load<Mode, Batch>(j));
  }
  template <class Mode, class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return op(a.template load_tail<Mode, Batch>(j, n));
  }
};

template <class Op, class A, class B>
struct binary_cursor {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>(), std::declval<typename B::value_type>()))>;
  static constexpr int leaf_count = A::leaf_count + B::leaf_count;
  [[no_unique_address]] Op op;
  A a;
  B b;

  template <class F>
  void for_each_leaf(F&& f) {
    a.for_each_leaf(f);
    b.for_each_leaf(f);
  }
  MELD_INLINE void seek(const index_t* idx, int r) {
    a.seek(idx, r);
    b.seek(idx, r);
  }
  MELD_INLINE void step(int d) {
    a.step(d);
    b.step(d);
  }
  MELD_INLINE void rewind(int d, index_t n) {
    a.rewind(d, n);
    b.rewind(d, n);
  }
  template <class Mode>
  MELD_INLINE value_type get(index_t j) const {
    return op(a.template get<Mode>(j), b.template get<Mode>(j));
  }
  template <class Mode, class Batch>
  MELD_INLINE auto load(index_t j) const {
    return op(a.template load<Mode, Batch>(j), b.template load<Mode, Batch>(j));
  }
  template <class Mode, class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return op(a.template load_tail<Mode, Batch>(j, n), b.template load_tail<Mode, Batch>(j, n));
  }
};

template <class Op, class A, class B, class C>
struct ternary_cursor {
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<typename A::value_type>(), std::declval<typename B::value_type>(),
      std::declval<typename C::value_type>()))>;
  static constexpr int leaf_count = A::leaf_count + B::leaf_count + C::leaf_count;
  [[no_unique_address]] Op op;
  A a;
  B b;
  C c;

  template <class F>
  void for_each_leaf(F&& f) {
    a.for_each_leaf(f);
    b.for_each_leaf(f);
    c.for_each_leaf(f);
  }
  MELD_INLINE void seek(const index_t* idx, int r) {
    a.seek(idx, r);
    b.seek(idx, r);
    c.seek(idx, r);
  }
  MELD_INLINE void step(int d) {
    a.step(d);
    b.step(d);
    c.step(d);
  }
  MELD_INLINE void rewind(int d, index_t n) {
    a.rewind(d, n);
    b.rewind(d, n);
    c.rewind(d, n);
  }
  template <class Mode>
  MELD_INLINE value_type get(index_t j) const {
    return op(a.template get<Mode>(j), b.template get<Mode>(j), c.template get<Mode>(j));
  }
  template <class Mode, class Batch>
  MELD_INLINE auto load(index_t j) const {
    return op(a.template load<Mode, Batch>(j), b.template load<Mode, Batch>(j),
              c.template load<Mode, Batch>(j));
  }
  template <class Mode, class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return op(a.template load_tail<Mode, Batch>(j, n), b.template load_tail<Mode, Batch>(j, n),
              c.template load_tail<Mode, Batch>(j, n));
  }
};

// ---- the destination ----------------------------------------------------------------------------

template <class T>
struct dest_cursor {
  T* base;
  T* row = nullptr;
  index_t inner = 0;
  axis_strides outer;

  void bind(const axis_strides& st, int rank) {
    outer = st;
    inner = st.s[rank - 1];
    row = base;
  }
  MELD_INLINE void seek(const index_t* idx, int outer_rank) {
    row = base;
    for (int d = 0; d < outer_rank; ++d) row += idx[d] * outer.s[d];
  }
  MELD_INLINE void step(int d) { row += outer.s[d]; }
  MELD_INLINE void rewind(int d, index_t n) { row -= n * outer.s[d]; }

  template <class Mode, class V>
  MELD_INLINE void put(index_t j, const V& v) const {
    if constexpr (is_contiguous_mode<Mode>) row[j] = static_cast<T>(v);
    else row[j * inner] = static_cast<T>(v);
  }

  // Stores a batch of values, or of comparison results (stored as 1 / 0).
  template <class Mode, class Batch, class V>
  MELD_INLINE void store(index_t j, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>) {
      store<Mode, Batch>(j, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    } else if constexpr (std::is_same_v<Mode, mode_aligned>) {
      v.store_aligned(row + j);
    } else if constexpr (std::is_same_v<Mode, mode_contiguous>) {
      v.store_unaligned(row + j);
    } else if (inner == 1) {
      v.store_unaligned(row + j);
    } else {
      alignas(64) T lanes[Batch::size];
      v.store_aligned(lanes);
      for (std::size_t l = 0; l < Batch::size; ++l) row[(j + index_t(l)) * inner] = lanes[l];
    }
  }

  // Stores the first `count` lanes.
  template <class Mode, class Batch, class V>
  MELD_INLINE void store_tail(index_t j, index_t count, const V& v) const {
    if constexpr (!std::is_same_v<V, Batch>) {
      store_tail<Mode, Batch>(j, count, xsimd::select(v, Batch(T(1)), Batch(T(0))));
    } else {
      alignas(64) T lanes[Batch::size];
      v.store_aligned(lanes);
      for (index_t l = 0; l < count; ++l) put<Mode>(j + l, lanes[l]);
    }
  }
};

}  // namespace meld::detail::cpu_eval

#include "gcc12_warnings.hpp"  // pop
