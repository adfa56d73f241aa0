// Reductions over all elements on the CPU: blocked pairwise sums over fixed superblocks, so that
// a reduction gives the same bits for any thread count (var's moments the same way, with their
// own block reducer: moments.hpp); argmax / argmin per piece, the first extreme winning.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../core/gcc12_warnings.hpp"
#include "../../expr/reduce.hpp"
#include "assign.hpp"
#include "chunks.hpp"
#include "loops.hpp"
#include "lower.hpp"
#include "moments.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

template <class R>
inline constexpr bool is_moments_reducer = std::is_same_v<R, reducers::squared_deviations>;

// The accumulator type of a full reduction of elements V.
template <class R, class V>
using accumulator_t = std::conditional_t<
    std::is_same_v<R, reducers::mean>,
    std::conditional_t<std::is_floating_point_v<V>, V, std::int64_t>,
    std::conditional_t<is_moments_reducer<R>, moments<double>, typename R::template result<V>>>;

template <class R>
inline constexpr bool is_arg_reducer =
    std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;

// The SIMD batch in which block_reducer<Fold, A, Batch> reads elements V through cursor C, or
// void for the scalar loop: batches of A when the elements are A; for moments (accumulated in
// double) batches of the elements, which it widens (moments.hpp).
template <class Fold, class V, class A, class C>
inline constexpr bool simd_fold = [] {
  if constexpr (is_moments_reducer<Fold>)
    return widens_to_double<V> && simd_cursor<C, V>;
  else
    return std::is_same_v<V, A> && simd_cursor<C, A>;
}();
template <class Fold, class V, class A, class C>
using fold_batch_t = std::conditional_t<simd_fold<Fold, V, A, C>, batch_for<V>, void>;

// The reduction of n elements of the cursor `src`, whose leaves are contiguous from base[i]
// (`planned` null: the flat path) or walked by the plan `planned`.
template <class R, class C, int N>
MELD_NOINLINE auto reduce_run(const C& src, index_t n, char* const* base, const std::size_t* elem,
                              const plan_ref* planned) {
  using V = typename C::value_type;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Fold = std::conditional_t<is_mean, reducers::sum, R>;
  using A = accumulator_t<R, V>;
  using Result = typename R::template result<V>;
  const index_t chunks = chunk_count(n, cursor_cost<C>);

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
    using Batch = fold_batch_t<Fold, V, A, C>;
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
      return static_cast<Result>(fold_result(folded));
  }
}

template <class R, class E>
auto reduce(const E& e) {
  using V = compute_t<value_t<E>>;  // 16-bit leaves read as float
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using A = accumulator_t<R, V>;
  using Result = typename R::template result<V>;
  using C = cursor_t<E>;

  // The operands' common shape in place where they share one (no call, no copy: a 1000-element
  // dot product costs ~90 ns in all), else the broadcast one.
  shape_t broadcast;
  const shape_t* uniform = e.uniform_shape();
  const shape_t& shape = uniform ? *uniform : (broadcast = e.shape());
  const index_t n = shape.product();
  if (n == 0) {
    if constexpr (R::needs_elements) {
      raise<shape_error>(R::name, ": the expression of shape ", shape, " is empty, and an empty ",
                         R::name, " has no value");
    } else if constexpr (is_mean) {
      return std::numeric_limits<Result>::quiet_NaN();
    } else {
      return static_cast<Result>(fold_result(R::template identity<A>()));
    }
  }

  constexpr int N = std::max(1, C::leaf_count);
  char* base[N] = {};
  std::size_t elem[N] = {1};
  int k = 0;
  // The flat fast path reads contiguous leaves in place, without a leaf table or a plan (zeroing
  // and copying those costs as much as summing 1000 floats); otherwise plan the iteration.
  if (flat_inputs(e, shape, base, elem, k)) {
    no_table none;
    const C src = make_cursor(e, none);
    if constexpr (is_arg_reducer<R>) {
      const plan<N> p = flat_plan<N>(n, base, elem);
      const plan_ref ref = p.ref();
      return reduce_run<R, C, N>(src, n, base, elem, &ref);
    } else {
      return reduce_run<R, C, N>(src, n, base, elem, nullptr);
    }
  }
  leaf_table<C::leaf_count> table;
  const C src = make_cursor(e, table);
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
  return reduce_run<R, C, N>(src, n, base, elem, &ref);
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
