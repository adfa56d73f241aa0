// Reductions along one axis on the CPU: one output at a time along a contiguous axis (or when
// there are few outputs), else output-major, so that the operand is read in memory order.
#pragma once

#include <algorithm>
#include <limits>
#include <type_traits>

#include "../../core/gcc12_warnings.hpp"
#include "../../expr/reduce.hpp"
#include "../../tensor/tensor.hpp"
#include "assign.hpp"
#include "reduce.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

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
    out = static_cast<Result>(fold_result(s.acc.finish()));
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
  W* acc;     // per output of the block (var: one set of arrays for the block)
  V* best_v;  // argmax / argmin: the best value so far
  index_t* best;
  index_t extent;  // of the axis
  index_t k = 0;   // position along the axis
  index_t i = 0;   // output within the block
};

template <class R, class W, class C>
void column_row(void* ctx, char* const* rows, index_t, index_t n) {
  auto& s = *static_cast<column_state<R, W, C>*>(ctx);
  C src = s.src;
  int k = 1;
  src.set_rows(rows, k);
  if constexpr (is_moments_reducer<R>) {
    using Batch = fold_batch_t<R, typename C::value_type, moments<double>, C>;
    column_moments_row<Batch>(*s.acc, s.i, src, n, s.k, s.extent);
    s.i += n;
  } else {
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
    else if constexpr (is_moments_reducer<R>)
      out = static_cast<Result>(s.acc->m2[s.i]);
    else
      out = static_cast<Result>(s.acc[s.i]);
    row[j] = static_cast<T>(out);
  }
}

// The reduction of the cursor src (over in_shape; leaves in `table`) along `axis` into dst, which
// has dst_rank axes (in_shape's without `axis`, or with extent 1 there) and M elements. Depends on
// the cursor, not on the expression (see assign.hpp).
template <class R, class T, class C>
MELD_NOINLINE void reduce_axis_cursor(T* dst, int dst_rank, const strides_t& dst_strides, index_t M,
                                      const shape_t& in_shape, int axis, const C& src,
                                      const leaf_table<C::leaf_count>& table) {
  using V = typename C::value_type;
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Result = typename R::template result<V>;
  using A = accumulator_t<R, V>;
  // Outputs per block of the output-major path. Its accumulators: float sums over a strided axis
  // accumulate in double (there is no pairwise tree there); var's moments are a block's arrays.
  constexpr index_t block = 512;
  using W = std::conditional_t<
      is_moments_reducer<R>, column_moments<block>,
      std::conditional_t<std::is_same_v<A, float> && !R::needs_elements, double, A>>;
  constexpr int N = 1 + C::leaf_count;
  const int r = in_shape.size();
  const index_t L = in_shape[axis];

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
    const bool keep = dst_rank == r;
    for (int d = 0, j = 0; d < r; ++d) {
      if (d == axis) {
        j += keep;
        continue;
      }
      ds.push_back(dst_strides[j++]);
    }
    ds.push_back(0);
    base[0] = reinterpret_cast<char*>(dst);
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
  bool along_contiguous = true;  // every operand is contiguous along the axis
  for (int i = 1; i < N; ++i) along_contiguous = along_contiguous && p.inner[i] == 1;

  if (L == 0) {  // an empty sum / product / mean (max and min refused it already)
    Result fill;
    if constexpr (is_mean)
      fill = std::numeric_limits<Result>::quiet_NaN();
    else if constexpr (is_arg_reducer<R>)
      fill = 0;
    else
      fill = static_cast<Result>(fold_result(R::template identity<A>()));
    // Every output gets the fill: a plan over the outputs alone (the axis with extent 1).
    shape_t outputs = space;
    outputs[r - 1] = 1;
    char* out_base[1] = {base[0]};
    const std::size_t out_elem[1] = {sizeof(T)};
    const strides_t out_in[1] = {in[0]};
    plan<1> q = make_plan<1>(outputs, out_base, out_elem, out_in);
    q.modes[0] = access::write;
    T value = static_cast<T>(fill);
    run_rows(q.ref(), 0, q.size, &fill_row<T>, &value);
    return;
  }

  const index_t chunks = std::min(chunk_count(p.size, cursor_cost<C>), M);

  if (along_contiguous || M < 64) {
    // One output at a time, reducing a row of the operand (packed when it is strided).
    using Fold = std::conditional_t<is_mean, reducers::sum, R>;
    using Batch = std::conditional_t<is_arg_reducer<R>, void, fold_batch_t<Fold, V, A, C>>;
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
  const index_t blocks = (M + block - 1) / block;
  const index_t tasks = std::min(blocks, chunks);
  thread_pool::global().parallel_for(tasks, [&](index_t t) {
    W acc[is_moments_reducer<R> ? 1 : block];
    V best_v[is_arg_reducer<R> ? block : 1];
    index_t best[is_arg_reducer<R> ? block : 1];
    for (index_t b = blocks * t / tasks; b < blocks * (t + 1) / tasks; ++b) {
      const index_t m0 = b * block, m1 = std::min(M, m0 + block);
      column_state<R, W, C> state{src, acc, best_v, best, L};
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

template <class R, class View, class E>
void reduce_axis(const View& dst, const E& e, int axis) {
  using T = typename View::value_type;
  using C = cursor_t<E>;
  if (dst.size() == 0) return;
  leaf_table<C::leaf_count> table;
  const C src = make_cursor(e, table);
  reduce_axis_cursor<R>(const_cast<T*>(dst.raw_data()), dst.rank(), dst.strides(), dst.size(),
                        e.shape(), axis, src, table);
}

template <class R, class A>
tensor<typename reduce_expr<R, A>::value_type, cpu<>> materialize(const reduce_expr<R, A>& e) {
  tensor<typename reduce_expr<R, A>::value_type, cpu<>> t(e.shape(), uninitialized);
  reduce_axis<R>(t.view(), e.operand(), e.axis());
  return t;
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
