// The CPU executor: evaluates expressions into views and reduces them, with xsimd on every core.
//
//   assign       one pass over the destination: cursors over the operands, a coalesced iteration
//                plan, the widest loop the operands allow (aligned / contiguous / strided SIMD, or
//                scalar for mixed element types), split into cache-line-aligned chunks over the
//                thread pool when the work is large enough to pay for it.
//   reduce       blocked pairwise reduction over fixed superblocks (bit-identical for any thread
//                count).
//   reduce_axis  along one axis: per output element along a contiguous axis, else output-major.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "../../expr/nodes.hpp"
#include "../../expr/reduce.hpp"
#include "../../tensor/tensor.hpp"
#include "cpu.hpp"
#include "cursor.hpp"
#include "loops.hpp"
#include "memory.hpp"
#include "plan.hpp"
#include "thread_pool.hpp"

#include "gcc12_warnings.hpp"  // push

namespace meld {

namespace detail::cpu_eval {

// Work (elements x operation cost) below which an evaluation stays on the calling thread.
// Chosen from benchmarks/bench_threshold on the 2-core development machine: waking the pool
// costs about 2-4 us, which one thread spends on ~40k simple element operations in cache.
inline constexpr index_t parallel_work_threshold = index_t(1) << 16;

// ---- building cursors ---------------------------------------------------------------------------

// A leaf over a temporary (a materialized sub-reduction) that it keeps alive.
template <class T>
struct owning_leaf_cursor : leaf_cursor<T> {
  std::shared_ptr<const void> keep;
};

// cursor_of<E>: the cursor type of expression E and how to make it (a class template, so that
// nested nodes find each other's specializations whatever their order).
template <class E>
struct cursor_of;

template <class T, class B>
struct cursor_of<tensor_ref<T, B>> {
  using type = leaf_cursor<T>;
  static type make(const tensor_ref<T, B>& e) { return type(e.data(), e.shape(), e.strides()); }
};
template <class T, class B>
struct cursor_of<tensor_view<T, B>> {
  using type = leaf_cursor<std::remove_const_t<T>>;
  static type make(const tensor_view<T, B>& e) { return type(e.data(), e.shape(), e.strides()); }
};
template <class T, class B>
struct cursor_of<tensor<T, B>> {
  using type = leaf_cursor<T>;
  static type make(const tensor<T, B>& e) { return type(e.data(), e.shape(), e.strides()); }
};
template <class T>
struct cursor_of<scalar_expr<T>> {
  using type = scalar_cursor<T>;
  static type make(const scalar_expr<T>& e) { return type{e.value()}; }
};
template <class Op, class A>
struct cursor_of<unary_expr<Op, A>> {
  using type = unary_cursor<Op, typename cursor_of<A>::type>;
  static type make(const unary_expr<Op, A>& e) { return type{e.op(), cursor_of<A>::make(e.operand())}; }
};
template <class Op, class A, class B>
struct cursor_of<binary_expr<Op, A, B>> {
  using type = binary_cursor<Op, typename cursor_of<A>::type, typename cursor_of<B>::type>;
  static type make(const binary_expr<Op, A, B>& e) {
    return type{e.op(), cursor_of<A>::make(e.lhs()), cursor_of<B>::make(e.rhs())};
  }
};
template <class Op, class A, class B, class C>
struct cursor_of<ternary_expr<Op, A, B, C>> {
  using type = ternary_cursor<Op, typename cursor_of<A>::type, typename cursor_of<B>::type,
                              typename cursor_of<C>::type>;
  static type make(const ternary_expr<Op, A, B, C>& e) {
    return type{e.op(), cursor_of<A>::make(e.first()), cursor_of<B>::make(e.second()),
                cursor_of<C>::make(e.third())};
  }
};
// A sub-reduction is evaluated once, into a temporary (defined below, after reduce_axis).
template <class R, class A>
struct cursor_of<reduce_expr<R, A>> {
  using type = owning_leaf_cursor<typename reduce_expr<R, A>::value_type>;
  static type make(const reduce_expr<R, A>& e);
};

template <class E>
auto make_cursor(const E& e) {
  return cursor_of<E>::make(e);
}

template <class E>
inline constexpr bool is_reduce_expr = false;
template <class R, class A>
inline constexpr bool is_reduce_expr<reduce_expr<R, A>> = true;

// ---- aliasing -----------------------------------------------------------------------------------

struct byte_span {
  std::uintptr_t lo, hi;  // [lo, hi)
};

template <class T>
byte_span span_of(const T* data, const shape_t& shape, const strides_t& strides) {
  index_t lo = 0, hi = 0;
  for (int d = 0; d < shape.size(); ++d) {
    const index_t reach = (shape[d] - 1) * strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  return {base + static_cast<std::uintptr_t>(lo * index_t(sizeof(T))),
          base + static_cast<std::uintptr_t>((hi + 1) * index_t(sizeof(T)))};
}

// Whether one pass that writes dst while reading the leaves could read an element it has already
// overwritten. Reading exactly the element being written (x = x + 1) is safe.
template <class T, class C>
bool needs_temporary(const T* dst, const shape_t& shape, const strides_t& strides, C& src) {
  const byte_span d = span_of(dst, shape, strides);
  bool unsafe = false;
  src.for_each_leaf([&](const auto& leaf) {
    const byte_span s = span_of(leaf.base, leaf.shape, leaf.strides);
    if (s.hi <= d.lo || d.hi <= s.lo) return;  // disjoint
    using L = std::remove_cvref_t<decltype(*leaf.base)>;
    if (!std::is_same_v<L, T> || static_cast<const void*>(leaf.base) != dst) {
      unsafe = true;
      return;
    }
    const strides_t b = broadcast_strides(leaf.shape, leaf.strides, shape);
    for (int i = 0; i < shape.size(); ++i)
      if (shape[i] != 1 && b[i] != strides[i]) unsafe = true;
  });
  return unsafe;
}

// ---- parallel splitting -------------------------------------------------------------------------

inline index_t chunk_count(index_t elements, int cost) {
  const index_t work = elements * (cost + 2);
  const int threads = thread_pool::global().size();
  if (threads == 1 || work < 2 * parallel_work_threshold || thread_pool::in_task()) return 1;
  return std::clamp<index_t>(work / parallel_work_threshold, 1, index_t(threads) * 4);
}

// Boundary i of `chunks` pieces of [0, n), moved down to a cache-line boundary of the destination
// so that no two threads write one line.
template <class T>
index_t chunk_boundary(index_t i, index_t chunks, index_t n, const T* dst) {
  if (i >= chunks) return n;
  constexpr index_t per_line = cache_line / sizeof(T) > 0 ? cache_line / sizeof(T) : 1;
  const index_t misalign =
      static_cast<index_t>(reinterpret_cast<std::uintptr_t>(dst) % cache_line) / index_t(sizeof(T));
  const index_t raw = n / chunks * i + (n % chunks) * i / chunks;
  const index_t b = (raw + misalign) / per_line * per_line - misalign;
  return std::clamp<index_t>(b, 0, n);
}

template <class T>
using batch_for = xsimd::batch<T>;

// ---- assign -------------------------------------------------------------------------------------

template <class T, class E, class View, class C>
void assign_cursor(const View& dst, C& src) {
  constexpr int N = 1 + C::leaf_count;
  const shape_t& shape = dst.shape();
  strides_t in[N];
  in[0] = dst.strides();
  int k = 1;
  src.for_each_leaf([&](const auto& leaf) {
    in[k++] = broadcast_strides(leaf.shape, leaf.strides, shape);
  });
  const plan<N> p = make_plan<N>(shape, in);
  dest_cursor<T> d{dst.data(), nullptr, 0, {}};
  d.bind(p.strides[0], p.rank);
  k = 1;
  src.for_each_leaf([&](auto& leaf) { leaf.bind(p.strides[k++], p.rank); });

  constexpr bool simd = detail::simd_capable<E, T>::value;
  using Batch = std::conditional_t<simd, batch_for<T>, void>;
  bool contiguous = d.inner == 1;
  bool aligned = p.rank == 1;
  constexpr std::size_t batch_bytes = sizeof(T) * batch_size<Batch>;
  auto check_aligned = [&](const void* ptr) {
    return reinterpret_cast<std::uintptr_t>(ptr) % batch_bytes == 0;
  };
  aligned = aligned && check_aligned(d.base);
  src.for_each_leaf([&](const auto& leaf) {
    contiguous = contiguous && leaf.inner == 1;
    aligned = aligned && check_aligned(leaf.base);
  });

  const index_t n = p.size;
  const index_t chunks = chunk_count(n, detail::cost_of<E>::value + C::leaf_count);
  auto run = [&]<class Mode>(Mode) {
    if (chunks == 1) return assign_range<Mode, Batch>(d, src, p, 0, n);
    thread_pool::global().parallel_for(chunks, [&](index_t i) {
      assign_range<Mode, Batch>(d, src, p, chunk_boundary(i, chunks, n, d.base),
                                chunk_boundary(i + 1, chunks, n, d.base));
    });
  };
  if (contiguous && aligned && simd) run(mode_aligned{});
  else if (contiguous) run(mode_contiguous{});
  else run(mode_strided{});
}

template <class View, class E>
void assign(const View& dst, const E& e);

template <class R, class View, class E>
void reduce_axis(const View& dst, const E& e, int axis);

template <class R, class A>
auto cursor_of<reduce_expr<R, A>>::make(const reduce_expr<R, A>& e) -> type {
  using V = typename reduce_expr<R, A>::value_type;
  tensor<V, cpu<>> t(e.shape(), uninitialized);
  reduce_axis<R>(t.view(), e.operand(), e.axis());
  owning_leaf_cursor<V> c{leaf_cursor<V>(t.data(), t.shape(), t.strides()), nullptr};
  c.keep = std::move(t).release().storage_ptr();
  return c;
}

template <class View, class E>
void assign(const View& dst, const E& e) {
  using T = typename View::value_type;
  if (dst.size() == 0) return;
  if constexpr (is_reduce_expr<E>) {
    // Reduce straight into the destination when the operand does not read it.
    if (e.shape() == dst.shape()) {
      auto operand = make_cursor(e.operand());
      const byte_span d = span_of(dst.data(), dst.shape(), dst.strides());
      bool overlaps = false;
      operand.for_each_leaf([&](const auto& leaf) {
        const byte_span s = span_of(leaf.base, leaf.shape, leaf.strides);
        overlaps = overlaps || !(s.hi <= d.lo || d.hi <= s.lo);
      });
      if (!overlaps) return reduce_axis<typename E::reducer_type>(dst, e.operand(), e.axis());
    }
  }
  auto src = make_cursor(e);
  if (needs_temporary(dst.data(), dst.shape(), dst.strides(), src)) {
    tensor<T, cpu<>> tmp(dst.shape(), uninitialized);
    assign_cursor<T, E>(tmp.view(), src);
    auto copy = make_cursor(tmp);
    assign_cursor<T, tensor<T, cpu<>>>(dst, copy);
    return;
  }
  assign_cursor<T, E>(dst, src);
}

// ---- reduce (all elements) ----------------------------------------------------------------------

// The accumulator type of a full reduction of elements V.
template <class R, class V>
using accumulator_t =
    std::conditional_t<std::is_same_v<R, reducers::mean>,
                       std::conditional_t<std::is_floating_point_v<V>, V, std::int64_t>,
                       typename R::template result<V>>;

template <class R, class E>
auto reduce(const E& e) {
  using V = value_t<E>;
  constexpr bool is_arg = std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Fold = std::conditional_t<is_mean, reducers::sum, R>;
  using A = accumulator_t<R, V>;
  using Result = typename R::template result<V>;

  const index_t n = e.shape().product();
  if (n == 0) {
    if constexpr (R::needs_elements) {
      throw shape_error(cat(R::name, ": the expression of shape ", e.shape(),
                            " is empty, and an empty ", R::name, " has no value"));
    } else if constexpr (is_mean) {
      return std::numeric_limits<Result>::quiet_NaN();
    } else {
      return static_cast<Result>(R::template identity<A>());
    }
  }

  auto c = make_cursor(e);
  constexpr int N = std::max(1, decltype(c)::leaf_count);
  strides_t in[N];
  if constexpr (decltype(c)::leaf_count == 0) in[0] = dims::filled(e.shape().size(), 0);
  int k = 0;
  c.for_each_leaf([&](const auto& leaf) {
    in[k++] = broadcast_strides(leaf.shape, leaf.strides, e.shape());
  });
  const plan<N> p = make_plan<N>(e.shape(), in);
  k = 0;
  c.for_each_leaf([&](auto& leaf) { leaf.bind(p.strides[k++], p.rank); });
  bool contiguous = true;
  c.for_each_leaf([&](const auto& leaf) { contiguous = contiguous && leaf.inner == 1; });

  const index_t chunks = chunk_count(n, detail::cost_of<E>::value + decltype(c)::leaf_count);

  if constexpr (is_arg) {
    using Best = decltype(arg_range<R, mode_strided>(c, p, 0, 1));
    auto run = [&]<class Mode>(Mode) {
      std::vector<Best> best(static_cast<std::size_t>(chunks));
      thread_pool::global().parallel_for(chunks, [&](index_t i) {
        best[i] = arg_range<R, Mode>(c, p, n / chunks * i + (n % chunks) * i / chunks,
                                     n / chunks * (i + 1) + (n % chunks) * (i + 1) / chunks);
      });
      Best out = best[0];
      for (const Best& b : best)
        if (b.index >= 0 && R::better(b.value, out.value)) out = b;
      return static_cast<Result>(out.index);
    };
    return contiguous ? run(mode_contiguous{}) : run(mode_strided{});
  } else {
    constexpr bool simd = std::is_same_v<V, A> && detail::simd_capable<E, A>::value;
    using Batch = std::conditional_t<simd, batch_for<A>, void>;
    const index_t supers = (n + reduce_superblock - 1) / reduce_superblock;
    auto run = [&]<class Mode>(Mode) {
      pairwise_stack<Fold, A> total;
      if (chunks == 1 || supers == 1) {
        for (index_t s = 0; s < supers; ++s)
          total.push(reduce_range<Fold, A, Mode, Batch>(
              c, p, s * reduce_superblock, std::min(n, (s + 1) * reduce_superblock)));
      } else {
        std::vector<A> partial(static_cast<std::size_t>(supers));
        const index_t tasks = std::min(chunks, supers);
        thread_pool::global().parallel_for(tasks, [&](index_t t) {
          for (index_t s = supers * t / tasks; s < supers * (t + 1) / tasks; ++s)
            partial[s] = reduce_range<Fold, A, Mode, Batch>(
                c, p, s * reduce_superblock, std::min(n, (s + 1) * reduce_superblock));
        });
        for (const A& v : partial) total.push(v);
      }
      return total.result(Fold::template identity<A>());
    };
    const A folded = contiguous ? run(mode_contiguous{}) : run(mode_strided{});
    if constexpr (is_mean) return static_cast<Result>(static_cast<Result>(folded) / Result(n));
    else return static_cast<Result>(folded);
  }
}

// ---- reduce along an axis -----------------------------------------------------------------------

// Calls f() at every position in [begin, end) of the first `rank` axes of p, with the cursors
// moved there.
template <int N, class Cursors, class F>
MELD_INLINE void for_each_position(Cursors& cursors, const plan<N>& p, int rank, index_t begin,
                                   index_t end, F&& f) {
  index_t idx[max_rank] = {};
  index_t linear = begin;
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = linear % p.shape[d];
    linear /= p.shape[d];
  }
  cursors.seek(idx, rank);
  for (index_t m = begin; m < end; ++m) {
    f();
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < p.shape[d]) {
        cursors.step(d);
        break;
      }
      idx[d] = 0;
      cursors.rewind(d, p.shape[d] - 1);
    }
  }
}

template <class R, class View, class E>
void reduce_axis(const View& dst, const E& e, int axis) {
  using T = typename View::value_type;
  using V = value_t<E>;
  constexpr bool is_arg = std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Fold = std::conditional_t<is_mean, reducers::sum, R>;
  using Result = typename R::template result<V>;
  // Accumulate float sums over a strided axis in double (no pairwise tree there).
  using A = accumulator_t<R, V>;
  using Wide = std::conditional_t<std::is_same_v<A, float> && !R::needs_elements, double, A>;

  const shape_t& in_shape = e.shape();
  const int r = in_shape.size();
  const index_t L = in_shape[axis];
  if (dst.size() == 0) return;

  // The iteration space: the operand's axes with `axis` moved last.
  shape_t space;
  for (int d = 0; d < r; ++d)
    if (d != axis) space.push_back(in_shape[d]);
  space.push_back(L);
  auto permute_last = [&](const strides_t& s) {
    strides_t out;
    for (int d = 0; d < r; ++d)
      if (d != axis) out.push_back(s[d]);
    out.push_back(s[axis]);
    return out;
  };

  auto c = make_cursor(e);
  constexpr int N = 1 + decltype(c)::leaf_count;
  strides_t in[N];
  {
    // The destination, read over the space: its axes are the operand's without `axis`.
    strides_t ds;
    const bool keep = dst.rank() == r;
    for (int d = 0, j = 0; d < r; ++d) {
      if (d == axis) {
        if (keep) ++j;
        continue;
      }
      ds.push_back(dst.strides()[j++]);
    }
    ds.push_back(0);
    in[0] = ds;
  }
  int k = 1;
  c.for_each_leaf([&](const auto& leaf) {
    in[k++] = permute_last(broadcast_strides(leaf.shape, leaf.strides, in_shape));
  });
  const plan<N> p = make_plan<N>(space, in, /*separate_last=*/true);
  dest_cursor<T> d{dst.data(), nullptr, 0, {}};
  d.bind(p.strides[0], p.rank);
  k = 1;
  c.for_each_leaf([&](auto& leaf) { leaf.bind(p.strides[k++], p.rank); });

  const int outer = p.rank - 1;
  const index_t M = dst.size();  // outputs
  bool along_contiguous = true;  // every operand is contiguous along the axis
  c.for_each_leaf([&](const auto& leaf) { along_contiguous = along_contiguous && leaf.inner == 1; });

  if (L == 0) {  // an empty sum / product / mean
    const Result fill = [] {
      if constexpr (is_mean) return std::numeric_limits<Result>::quiet_NaN();
      else if constexpr (is_arg) return Result(0);
      else return static_cast<Result>(R::template identity<A>());
    }();
    cursor_pair<dest_cursor<T>, decltype(c)> both{d, c};
    for_each_position(both, p, outer, 0, M, [&] { both.dst.template put<mode_strided>(0, fill); });
    return;
  }

  const index_t chunks = chunk_count(p.size, detail::cost_of<E>::value + decltype(c)::leaf_count);
  const index_t tasks = std::min(chunks, M);
  auto split = [&](index_t t) { return M / tasks * t + (M % tasks) * t / tasks; };

  if (along_contiguous || M == 1) {
    // One output at a time, reducing a row of the operand.
    constexpr bool simd = !is_arg && std::is_same_v<V, A> && detail::simd_capable<E, A>::value;
    using Batch = std::conditional_t<simd, batch_for<A>, void>;
    auto run = [&]<class Mode>(Mode) {
      thread_pool::global().parallel_for(tasks, [&](index_t t) {
        cursor_pair<dest_cursor<T>, decltype(c)> both{d, c};
        for_each_position(both, p, outer, split(t), split(t + 1), [&] {
          if constexpr (is_arg) {
            index_t best = 0;
            V best_v = both.src.template get<Mode>(0);
            for (index_t j = 1; j < L; ++j) {
              const V v = both.src.template get<Mode>(j);
              if (R::better(v, best_v)) best_v = v, best = j;
            }
            both.dst.template put<mode_strided>(0, best);
          } else {
            block_reducer<Fold, A, Mode, Batch> acc;
            acc.consume(both.src, 0, L);
            const A v = acc.finish();
            if constexpr (is_mean) both.dst.template put<mode_strided>(0, static_cast<Result>(v) / Result(L));
            else both.dst.template put<mode_strided>(0, static_cast<Result>(v));
          }
        });
      });
    };
    if (along_contiguous) run(mode_contiguous{});
    else run(mode_strided{});
    return;
  }

  // Output-major: for each block of outputs, walk the axis in the outer loop so that the operand is
  // read in memory order.
  constexpr index_t block = 512;
  const index_t blocks = (M + block - 1) / block;
  thread_pool::global().parallel_for(std::min(blocks, std::max<index_t>(tasks, 1)), [&](index_t t) {
    const index_t workers = std::min(blocks, std::max<index_t>(tasks, 1));
    for (index_t b = blocks * t / workers; b < blocks * (t + 1) / workers; ++b) {
      const index_t m0 = b * block, m1 = std::min(M, m0 + block);
      Wide acc[block];
      V best_v[is_arg ? block : 1];
      index_t best[is_arg ? block : 1];
      auto src = c;
      for (index_t j = 0; j < L; ++j) {
        index_t i = 0;
        for_each_position(src, p, outer, m0, m1, [&] {
          const V v = src.template get<mode_strided>(j);
          if constexpr (is_arg) {
            if (j == 0 || R::better(v, best_v[i])) best_v[i] = v, best[i] = j;
          } else {
            acc[i] = j == 0 ? static_cast<Wide>(v) : Fold{}(acc[i], static_cast<Wide>(v));
          }
          ++i;
        });
      }
      index_t i = 0;
      auto out = d;
      for_each_position(out, p, outer, m0, m1, [&] {
        if constexpr (is_arg) out.template put<mode_strided>(0, best[i]);
        else if constexpr (is_mean) out.template put<mode_strided>(0, static_cast<Result>(acc[i]) / Result(L));
        else out.template put<mode_strided>(0, static_cast<Result>(acc[i]));
        ++i;
      });
    }
  });
}

}  // namespace detail::cpu_eval

template <class Policy>
struct executor<cpu<Policy>> {
  template <class T, class E>
  static void assign(const tensor_view<T, cpu<Policy>>& dst, const E& e) {
    detail::cpu_eval::assign(dst, e);
  }
  template <class R, class E>
  static auto reduce(const E& e) {
    return detail::cpu_eval::reduce<R>(e);
  }
  template <class R, class T, class E>
  static void reduce_axis(const tensor_view<T, cpu<Policy>>& dst, const E& e, int axis) {
    detail::cpu_eval::reduce_axis<R>(dst, e, axis);
  }
};

}  // namespace meld

#include "gcc12_warnings.hpp"  // pop
