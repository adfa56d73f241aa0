// The loops: an elementwise loop over a range of the iteration space, and the blocked pairwise
// accumulator that every full reduction uses.
#pragma once

#include <algorithm>
#include <type_traits>

#include "plan.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld::detail::cpu_eval {

// Batch is an xsimd batch, or void for the scalar loop (mixed element types).
template <class Batch>
inline constexpr index_t batch_size = [] {
  if constexpr (std::is_void_v<Batch>) return index_t(1);
  else return index_t(Batch::size);
}();

// ---- elementwise --------------------------------------------------------------------------------

template <class Mode, class Batch, class D, class C>
MELD_INLINE void row_kernel(const D& dst, const C& src, index_t j, index_t end) {
  if constexpr (!std::is_void_v<Batch>) {
    constexpr index_t W = Batch::size;
    for (; j + W <= end; j += W)
      dst.template store<Mode, Batch>(j, src.template load<Mode, Batch>(j));
    if (j < end)
      dst.template store_tail<Mode, Batch>(j, end - j, src.template load_tail<Mode, Batch>(j, end - j));
  } else {
    for (; j < end; ++j) dst.template put<Mode>(j, src.template get<Mode>(j));
  }
}

// Calls row(j_begin, j_end) for each row segment of the linear range [begin, end), with the
// cursors positioned on that row.
template <int N, class Cursors, class Row>
MELD_INLINE void for_each_row(Cursors& cursors, const plan<N>& p, index_t begin, index_t end,
                              Row&& row) {
  const int outer = p.outer_rank();
  if (outer == 0) {
    cursors.seek(nullptr, 0);
    row(begin, end);
    return;
  }
  index_t idx[max_rank];
  p.unravel(begin, idx);
  cursors.seek(idx, outer);
  const index_t inner = p.inner_extent();
  index_t j = idx[outer];
  for (;;) {
    const index_t stop = std::min(inner, j + (end - begin));
    row(j, stop);
    begin += stop - j;
    if (begin >= end) return;
    j = 0;
    for (int d = outer - 1; d >= 0; --d) {
      if (++idx[d] < p.shape[d]) {
        cursors.step(d);
        break;
      }
      idx[d] = 0;
      cursors.rewind(d, p.shape[d] - 1);
    }
  }
}

// Moves a destination and a source cursor together.
template <class D, class C>
struct cursor_pair {
  D dst;
  C src;
  MELD_INLINE void seek(const index_t* idx, int r) {
    dst.seek(idx, r);
    src.seek(idx, r);
  }
  MELD_INLINE void step(int d) {
    dst.step(d);
    src.step(d);
  }
  MELD_INLINE void rewind(int d, index_t n) {
    dst.rewind(d, n);
    src.rewind(d, n);
  }
};

// dst = src over the linear range [begin, end). Takes copies: each thread moves its own cursors.
template <class Mode, class Batch, int N, class D, class C>
void assign_range(D dst, C src, const plan<N>& p, index_t begin, index_t end) {
  if (p.outer_rank() == 0) {  // the flat fast path
    dst.seek(nullptr, 0);
    src.seek(nullptr, 0);
    row_kernel<Mode, Batch>(dst, src, begin, end);
    return;
  }
  cursor_pair<D, C> both{dst, src};
  for_each_row(both, p, begin, end, [&](index_t j, index_t e) {
    row_kernel<Mode, Batch>(both.dst, both.src, j, e);
  });
}

// ---- reductions ---------------------------------------------------------------------------------

// Elements per block. A block is summed with four SIMD accumulators (each lane sees
// block / (4 * lanes) elements in order), blocks are combined pairwise.
inline constexpr index_t reduce_block = 256;
// Blocks per superblock: the unit of parallel work. Superblock boundaries depend only on the
// element count, so a reduction gives the same bits for any thread count.
inline constexpr index_t reduce_superblock = reduce_block * 128;

// Pairwise combination of a stream of values: a binary counter of partial results, so that value
// i meets others in a balanced tree (error O(log n) instead of O(n)).
template <class R, class A>
struct pairwise_stack {
  A values[64];
  int levels[64];
  int top = 0;

  void push(A v) {
    int level = 0;
    while (top > 0 && levels[top - 1] == level) {
      v = R{}(values[--top], v);
      ++level;
    }
    values[top] = v;
    levels[top++] = level;
  }
  A result(A empty) const {
    if (top == 0) return empty;
    A r = values[top - 1];
    for (int i = top - 2; i >= 0; --i) r = R{}(values[i], r);
    return r;
  }
};

// Horizontal reduction of a batch in a fixed tree order.
template <class R, class A, class Batch>
A horizontal(const Batch& b) {
  alignas(64) A lanes[Batch::size];
  b.store_aligned(lanes);
  for (std::size_t width = Batch::size / 2; width >= 1; width /= 2)
    for (std::size_t l = 0; l < width; ++l) lanes[l] = R{}(lanes[l], lanes[l + width]);
  return lanes[0];
}

// Folds a stream of row segments with reducer R into accumulators of type A: blocks of
// reduce_block elements, four independent accumulators per block, blocks combined pairwise.
template <class R, class A, class Mode, class Batch>
struct block_reducer {
  static constexpr index_t W = batch_size<Batch>;
  using acc_type = std::conditional_t<std::is_void_v<Batch>, A, Batch>;

  acc_type acc[4];
  A tail;
  index_t filled = 0;
  pairwise_stack<R, A> blocks;

  block_reducer() { reset(); }

  void reset() {
    for (auto& a : acc) a = acc_type(R::template identity<A>());
    tail = R::template identity<A>();
    filled = 0;
  }

  template <class C>
  MELD_INLINE void consume(const C& c, index_t j, index_t end) {
    while (j < end) {
      const index_t take = std::min(end - j, reduce_block - filled);
      accumulate(c, j, j + take);
      filled += take;
      j += take;
      if (filled == reduce_block) flush();
    }
  }

  A finish() {
    if (filled) flush();
    return blocks.result(R::template identity<A>());
  }

 private:
  template <class C>
  MELD_INLINE void accumulate(const C& c, index_t j, index_t e) {
    const R op{};
    if constexpr (std::is_void_v<Batch>) {
      for (; j + 4 <= e; j += 4)
        for (int u = 0; u < 4; ++u) acc[u] = op(acc[u], static_cast<A>(c.template get<Mode>(j + u)));
    } else {
      for (; j + 4 * W <= e; j += 4 * W)
        for (int u = 0; u < 4; ++u) acc[u] = op(acc[u], c.template load<Mode, Batch>(j + u * W));
      for (; j + W <= e; j += W) acc[0] = op(acc[0], c.template load<Mode, Batch>(j));
      if (j < e) {  // the tail through the same SIMD code, other lanes set to the identity
        alignas(64) A iota[W];
        for (index_t l = 0; l < W; ++l) iota[l] = static_cast<A>(l);
        const auto in_tail = Batch::load_aligned(iota) < Batch(static_cast<A>(e - j));
        acc[1] = op(acc[1], xsimd::select(in_tail, c.template load_tail<Mode, Batch>(j, e - j),
                                           Batch(R::template identity<A>())));
        j = e;
      }
    }
    for (; j < e; ++j) tail = op(tail, static_cast<A>(c.template get<Mode>(j)));
  }

  void flush() {
    const R op{};
    const acc_type both = op(op(acc[0], acc[1]), op(acc[2], acc[3]));
    A v;
    if constexpr (std::is_void_v<Batch>) v = both;
    else v = horizontal<R, A>(both);
    blocks.push(op(v, tail));
    reset();
  }
};

// Reduces the linear range [begin, end) of a cursor's iteration space.
template <class R, class A, class Mode, class Batch, int N, class C>
A reduce_range(C c, const plan<N>& p, index_t begin, index_t end) {
  block_reducer<R, A, Mode, Batch> acc;
  for_each_row(c, p, begin, end, [&](index_t j, index_t e) { acc.consume(c, j, e); });
  return acc.finish();
}

// The first position of the extreme value (per Arg::better) in [begin, end).
template <class Arg, class T>
struct arg_result {
  T value;
  index_t index = -1;
};

template <class Arg, class Mode, int N, class C>
auto arg_range(C c, const plan<N>& p, index_t begin, index_t end) {
  using T = typename C::value_type;
  arg_result<Arg, T> best;
  index_t linear = begin;
  for_each_row(c, p, begin, end, [&](index_t j, index_t e) {
    for (; j < e; ++j, ++linear) {
      const T v = c.template get<Mode>(j);
      if (best.index < 0 || Arg::better(v, best.value)) best = {v, linear};
    }
  });
  return best;
}

}  // namespace meld::detail::cpu_eval

#include "gcc12_warnings.hpp"  // pop
