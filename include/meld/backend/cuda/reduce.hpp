// CUDA reductions: over all elements (one grid of meld's fold kernels evaluates the expression,
// with vector loads where it can, into a partial per thread, and CUB folds the partials; argmax and
// argmin are one CUB reduction over an iterator that evaluates it; the value comes back through
// pinned memory, waited for only when read) and along an axis (a segmented CUB reduction into a
// contiguous buffer, then one kernel that writes it into the destination's layout).
//
// var's moments (reducers::squared_deviations) take the same paths with detail::moments<double>
// as the accumulator: each element becomes the moments of one value, which a thread's fold merges
// into its partial (Welford's update, one division in double per element), and CUB merges the
// partials, or a segment's elements, with Chan's formula. One pass over the data; the relative
// error of M2 is O((n / threads + log2 threads) eps kappa), kappa = |mean| / std.
//
// A part of executor.hpp, which includes it once executor<cuda<P>> is declared: include that.
#pragma once

#include "platform.hpp"

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "../../expr/reduce.hpp"
#include "../future.hpp"

namespace meld {

namespace detail::cuda_eval {

template <class T, class V>
struct cuda_future_state : future_state<T> {
  cudaEvent_t done = nullptr;
  V* host = nullptr;  // pinned
  index_t divide = 0;
  ~cuda_future_state() override {
    if (done) (void)cudaEventDestroy(done);
    if (host) (void)cudaFreeHost(host);
  }
  void wait() override {
    if (!done) return;
    MELD_CUDA_CHECK(cudaEventSynchronize(done));
    finish();
  }
  bool ready() override { return !done || cudaEventQuery(done) == cudaSuccess; }
  void finish() {
    if (!host) return;
    const T v = static_cast<T>(detail::fold_result(*host));  // var's moments: their M2
    this->value = divide ? static_cast<T>(v / static_cast<T>(divide)) : v;
    (void)cudaFreeHost(host);
    host = nullptr;
  }
};

// (value, index) pairs for argmax / argmin: the first extreme wins, NaN counts as the extreme. An
// index of -1 is the empty pair (the reductions' initial value), which loses to any other.
template <class V>
struct arg_pair {
  V value;
  index_t index;
};

template <class Arg, class V>
struct arg_combine {
  MELD_HD arg_pair<V> operator()(const arg_pair<V>& a, const arg_pair<V>& b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if (Arg::better(b.value, a.value)) return b;
    if (Arg::better(a.value, b.value)) return a;
    return b.index < a.index ? b : a;
  }
};

template <class At, class V>
struct arg_at {
  At at;
  MELD_HD arg_pair<V> operator()(index_t i) const { return {static_cast<V>(at(i)), i}; }
};

// (value, index within its segment of `length`) for argmax / argmin along an axis.
template <class At, class V>
struct arg_in_segment {
  At at;
  index_t length;
  MELD_HD arg_pair<V> operator()(index_t i) const { return {static_cast<V>(at(i)), i % length}; }
};

template <class R, class V>
struct fold_op {
  MELD_HD V operator()(const V& a, const V& b) const { return R{}(a, b); }
};

// Offsets of segment s: s * length.
struct segment_offset {
  index_t length;
  MELD_HD index_t operator()(index_t s) const { return s * length; }
};

template <class R>
inline constexpr bool is_arg =
    std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;

// The accumulator of reducer R over elements V.
template <class R, class V>
using accumulator_t = std::conditional_t<
    std::is_same_v<R, reducers::mean>, std::conditional_t<std::is_floating_point_v<V>, V, double>,
    std::conditional_t<is_arg<R>, V,
                       std::conditional_t<std::is_same_v<R, reducers::squared_deviations>,
                                          moments<double>, typename R::template result<V>>>>;

// The ordering state of the first tensor leaf of an expression, or null.
template <class E>
cuda_access* first_access(const E& e) {
  cuda_access* first = nullptr;
  for_each_leaf(e, [&](const auto& leaf) {
    if constexpr (strided_leaf<std::remove_cvref_t<decltype(leaf)>>)
      if (!first && leaf.storage_ptr()) first = &leaf.storage_ptr()->access();
  });
  return first;
}

}  // namespace detail::cuda_eval

template <class Policy>
template <class R, class E>
scalar_result_t<cuda<Policy>, reduce_result_t<R, E>> executor<cuda<Policy>>::reduce(const E& e) {
  using namespace detail::cuda_eval;
  detail::trace_scope traced("reduce", "cuda", {"elements", e.shape().product()});
  using V = detail::compute_t<value_t<E>>;  // 16-bit leaves read as float
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using Result = reduce_result_t<R, E>;
  using A = accumulator_t<R, V>;
  using Fold = std::conditional_t<is_mean, reducers::sum, R>;
  auto result_of = [](future<Result> f) {
    if constexpr (synchronous)
      return f.get();
    else
      return f;
  };

  auto state =
      std::make_shared<cuda_future_state<Result, std::conditional_t<is_arg<R>, index_t, A>>>();
  const shape_t shape = e.shape();
  const index_t n = shape.product();
  if (n == 0) {
    if constexpr (R::needs_elements)
      throw shape_error(detail::cat(R::name, ": the expression of shape ", shape,
                                    " is empty, and an empty ", R::name, " has no value"));
    else if constexpr (is_mean)
      state->value = std::numeric_limits<Result>::quiet_NaN();
    else
      state->value = static_cast<Result>(detail::fold_result(R::template identity<A>()));
    return result_of(future<Result>(state));
  }
  detail::check_devices(R::name, e);

  // On the stream of the first operand (its temporaries, if any, are made there too).
  detail::cuda_access* first = first_access(e);
  const int device = first ? first->device() : detail::require_device();
  cuda_device_guard guard(device);
  cudaStream_t s = first ? first->home()->handle : cuda_stream::current().handle();
  input_table<input_count<E>> table;
  auto expr = lower(e, make_input<input_table<input_count<E>>>{table});
  constexpr int N = input_count<E>;
  const auto plan = plan_for<N>(shape, nullptr, table);
  set_strides(expr, plan.st);
  using D = decltype(expr);
  table.before(s);

  using Out = std::conditional_t<is_arg<R>, arg_pair<V>, A>;
  Out* d_out = nullptr;
  MELD_CUDA_CHECK(cudaMallocAsync(&d_out, sizeof(Out), s));
  // CUB's two-call protocol over `in` (a pointer or an iterator) into d_out.
  auto cub_reduce = [&](auto in, index_t items, auto op, Out init) {
    void* temp = nullptr;
    std::size_t temp_bytes = 0;
    MELD_CUDA_CHECK(cub::DeviceReduce::Reduce(temp, temp_bytes, in, d_out, items, op, init, s));
    MELD_CUDA_CHECK(cudaMallocAsync(&temp, std::max<std::size_t>(temp_bytes, 1), s));
    MELD_CUDA_CHECK(cub::DeviceReduce::Reduce(temp, temp_bytes, in, d_out, items, op, init, s));
    MELD_CUDA_CHECK(cudaFreeAsync(temp, s));
  };
  if constexpr (is_arg<R>) {
    const thrust::counting_iterator<index_t> positions(0);
    auto arg_reduce = [&](auto at) {
      cub_reduce(thrust::make_transform_iterator(positions, arg_at<decltype(at), V>{at}), n,
                 arg_combine<R, V>{}, arg_pair<V>{V{}, index_t(-1)});
    };
    if (plan.contiguous)
      arg_reduce(evaluate_at<D, true>{expr, plan.shape});
    else
      arg_reduce(evaluate_at<D, false>{expr, plan.shape});
  } else {
    // Every thread of one grid folds its share into a partial (vector loads where the operands
    // are contiguous and aligned, as assignments); CUB folds the partials.
    constexpr int W = sizeof(V) <= 16 ? int(16 / sizeof(V)) : 1;
    bool aligned = true;
    for (int i = 0; i < table.count; ++i)
      aligned = aligned && reinterpret_cast<std::uintptr_t>(table.leaves[i].layout.data) %
                                   (W * table.leaves[i].layout.elem) ==
                               0;
    const bool vector = plan.contiguous && aligned;
    const unsigned grid = grid_for(vector ? n / W + 1 : n, device);
    const index_t count = index_t(grid) * threads_per_block;
    A* partials = nullptr;
    MELD_CUDA_CHECK(cudaMallocAsync(&partials, sizeof(A) * static_cast<std::size_t>(count), s));
    constexpr const char* what = "meld::cuda reduction kernel";
    if (vector)
      launch_grid(what, fold_flat<W, A, Fold, D>, grid, s, partials, expr, n);
    else if (plan.contiguous)
      launch_grid(what, fold_flat<1, A, Fold, D>, grid, s, partials, expr, n);
    else
      launch_grid(what, fold_strided<A, Fold, D>, grid, s, partials, plan.shape, expr, n);
    cub_reduce(partials, count, fold_op<Fold, A>{}, Fold::template identity<A>());
    MELD_CUDA_CHECK(cudaFreeAsync(partials, s));
  }
  table.after(s);

  // The result goes to pinned host memory; the future waits for the copy.
  using Host = std::conditional_t<is_arg<R>, index_t, A>;
  MELD_CUDA_CHECK(cudaMallocHost(&state->host, sizeof(Host)));
  if constexpr (is_arg<R>) {
    MELD_CUDA_CHECK(
        cudaMemcpyAsync(state->host, &d_out->index, sizeof(index_t), cudaMemcpyDeviceToHost, s));
  } else {
    MELD_CUDA_CHECK(cudaMemcpyAsync(state->host, d_out, sizeof(A), cudaMemcpyDeviceToHost, s));
  }
  MELD_CUDA_CHECK(cudaFreeAsync(d_out, s));
  if constexpr (is_mean) state->divide = n;
  MELD_CUDA_CHECK(cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming));
  MELD_CUDA_CHECK(cudaEventRecord(state->done, s));
  return result_of(future<Result>(state));
}

template <class Policy>
template <class R, class Dst, class E>
void executor<cuda<Policy>>::reduce_axis(const Dst& dst, const E& e, int axis) {
  using namespace detail::cuda_eval;
  detail::trace_scope traced("reduce_axis", "cuda", {"elements", e.shape().product()});
  using T = typename Dst::value_type;
  using V = detail::compute_t<value_t<E>>;  // 16-bit leaves read as float
  constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
  using A = accumulator_t<R, V>;
  using Fold = std::conditional_t<is_mean, reducers::sum, R>;
  const index_t M = dst.size();
  if (M == 0) return;
  detail::check_devices(R::name, dst, e);
  auto& out_access = dst.storage_ptr()->access();
  const int device = out_access.device();
  cuda_device_guard guard(device);
  cudaStream_t s = out_access.home()->handle;

  const shape_t in_shape = e.shape();
  const int r = in_shape.size();
  const index_t L = in_shape[axis];
  input_table<input_count<E>> table;
  auto expr = lower(e, make_input<input_table<input_count<E>>>{table});
  // The operand's axes with `axis` moved last, as a permuted view of each leaf.
  auto move_last = [&](const dims& d) {
    dims o;
    for (int a = 0; a < r; ++a)
      if (a != axis) o.push_back(d[a]);
    o.push_back(d[axis]);
    return o;
  };
  const shape_t space = move_last(in_shape);
  for (int i = 0; i < table.count; ++i) {
    auto& leaf = table.leaves[i].layout;
    leaf.strides = move_last(broadcast_strides(leaf.shape, leaf.strides, in_shape));
    leaf.shape = space;
  }
  constexpr int N = input_count<E>;
  const auto plan = plan_for<N>(space, nullptr, table);
  set_strides(expr, plan.st);
  using D = decltype(expr);
  table.before(s);
  out_access.before(s, true);

  using Out = std::conditional_t<is_arg<R>, arg_pair<V>, A>;
  Out* buffer = nullptr;
  MELD_CUDA_CHECK(cudaMallocAsync(&buffer, sizeof(Out) * static_cast<std::size_t>(M), s));
  if (L == 0) {
    // An empty sum / product / mean (max, min, argmax refused it already).
    Out fill_value{};
    if constexpr (is_mean)
      fill_value = std::numeric_limits<A>::quiet_NaN();
    else if constexpr (!is_arg<R>)
      fill_value = Fold::template identity<A>();
    launch("meld::cuda fill kernel", fill_kernel<Out>, M, device, s, buffer, fill_value, M);
  } else {
    const thrust::counting_iterator<index_t> positions(0);
    auto offsets = thrust::make_transform_iterator(positions, segment_offset{L});
    auto segmented = [&](auto in, auto op, Out init) {
      void* temp = nullptr;
      std::size_t bytes = 0;
      MELD_CUDA_CHECK(cub::DeviceSegmentedReduce::Reduce(temp, bytes, in, buffer, M, offsets,
                                                         offsets + 1, op, init, s));
      MELD_CUDA_CHECK(cudaMallocAsync(&temp, std::max<std::size_t>(bytes, 1), s));
      MELD_CUDA_CHECK(cub::DeviceSegmentedReduce::Reduce(temp, bytes, in, buffer, M, offsets,
                                                         offsets + 1, op, init, s));
      MELD_CUDA_CHECK(cudaFreeAsync(temp, s));
    };
    // (Names qualified: nvcc does not apply the function's using-directive inside this lambda.)
    auto run = [&](auto at) {
      namespace ce = detail::cuda_eval;
      using At = decltype(at);
      if constexpr (ce::is_arg<R>)
        segmented(thrust::make_transform_iterator(positions, ce::arg_in_segment<At, V>{at, L}),
                  ce::arg_combine<R, V>{}, ce::arg_pair<V>{V{}, index_t(-1)});
      else
        segmented(thrust::make_transform_iterator(positions, ce::evaluate_as<At, A>{at}),
                  ce::fold_op<Fold, A>{}, Fold::template identity<A>());
    };
    if (plan.contiguous)
      run(evaluate_at<D, true>{expr, plan.shape});
    else
      run(evaluate_at<D, false>{expr, plan.shape});
  }
  // Scatter into the destination (whose axes are the operand's without `axis`).
  shape_t out_shape;
  for (int a = 0; a < r; ++a)
    if (a != axis) out_shape.push_back(in_shape[a]);
  strides_t out_strides;
  for (int a = 0, j = 0; a < r; ++a) {
    if (a == axis) {
      j += dst.rank() == r;
      continue;
    }
    out_strides.push_back(dst.strides()[j++]);
  }
  launch_shape ls;
  ls.rank = std::max(1, out_shape.size());
  T* out_data = const_cast<T*>(dst.raw_data());
  dstrides layout{};
  for (int a = 0; a < out_shape.size(); ++a) {
    ls.shape[a] = out_shape[a];
    layout.st[a] = out_strides[a];
  }
  if (out_shape.size() == 0) ls.shape[0] = 1;
  if constexpr (is_arg<R>) {
    index_t* indices = nullptr;
    MELD_CUDA_CHECK(cudaMallocAsync(&indices, sizeof(index_t) * static_cast<std::size_t>(M), s));
    launch("meld::cuda argmax kernel", copy_indices<Out>, M, device, s, buffer, indices, M);
    launch("meld::cuda reduction kernel", scatter_segments<T, index_t>, M, device, s, out_data, ls,
           layout, indices, M, index_t(0));
    MELD_CUDA_CHECK(cudaFreeAsync(indices, s));
  } else {
    launch("meld::cuda reduction kernel", scatter_segments<T, Out>, M, device, s, out_data, ls,
           layout, buffer, M, is_mean ? L : index_t(0));
  }
  MELD_CUDA_CHECK(cudaFreeAsync(buffer, s));
  table.after(s);
  out_access.after(s, true);
  finish(s);
}

}  // namespace meld
