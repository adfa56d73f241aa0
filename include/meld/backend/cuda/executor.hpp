// The CUDA executor: one fused kernel per assignment, CUB reductions over an iterator that
// evaluates the expression (no temporary for it), cuBLAS products, stream-ordered memory.
//
// Every operation runs on the destination's stream (or, for reductions, the first operand's),
// after the work of other streams on its operands (cudaStreamWaitEvent); under cuda<sync> the call
// then waits for the stream, under cuda<async> it returns at once.
#pragma once

#include <cuda_runtime.h>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "../../expr/matmul.hpp"
#include "../../expr/nodes.hpp"
#include "../../expr/reduce.hpp"
#include "../../tensor/tensor.hpp"
#include "../cpu/plan.hpp"
#include "../future.hpp"
#include "blas.hpp"
#include "cuda.hpp"
#include "kernels.hpp"
#include "memory.hpp"
#include "stream.hpp"

namespace meld {

namespace detail::cuda_eval {

// ---- launch configuration -----------------------------------------------------------------------

// Blocks for a grid-stride loop over `items` work items of 256 threads: enough to fill the
// device (32 blocks per multiprocessor), no more. Device properties are read once per device.
inline unsigned grid_for(index_t items, int device) {
  static std::mutex mutex;
  static std::vector<int> sms;
  int count;
  {
    std::lock_guard lock(mutex);
    if (static_cast<int>(sms.size()) <= device) sms.resize(static_cast<std::size_t>(device) + 1, 0);
    if (!sms[device])
      MELD_CUDA_CHECK(cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device));
    count = sms[device];
  }
  const index_t wanted = (items + 255) / 256;
  return static_cast<unsigned>(std::clamp<index_t>(wanted, 1, index_t(count) * 32));
}

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, what, __FILE__, __LINE__);
}

// ---- leaves and device trees --------------------------------------------------------------------

// A leaf's layout and ordering state (pass 1), in tree order.
struct leaf_entry {
  const char* data = nullptr;
  shape_t shape;
  strides_t strides;
  std::size_t elem = 0;
  cuda_access* access = nullptr;
};

template <int N>
struct leaf_table {
  leaf_entry leaves[N > 0 ? N : 1];
  std::shared_ptr<const void> keep[N > 0 ? N : 1];  // temporaries of materialized sub-expressions
  int count = 0;
};

template <class Policy>
struct executor_impl;

// device_of<E>: the device tree of expression E; collect() records the leaves (evaluating
// sub-reductions and products into temporaries on stream s), build() makes the tree with the
// plan's strides.
template <class E>
struct device_of;

template <class Leaf, class T>
struct leaf_device_of {
  using type = dleaf<T>;
  static constexpr int leaf_count = 1;
  template <class Table>
  static void collect(const Leaf& e, Table& t, cudaStream_t) {
    t.leaves[t.count++] = {reinterpret_cast<const char*>(e.raw_data()), e.shape(), e.strides(),
                           sizeof(T), e.storage_ptr() ? &e.storage_ptr()->access() : nullptr};
  }
  template <class Table>
  static type build(const Leaf&, const Table& t, const index_t (*st)[max_rank], int& k) {
    type d{reinterpret_cast<const T*>(t.leaves[k].data), {}};
    for (int a = 0; a < max_rank; ++a) d.st[a] = st[k][a];
    ++k;
    return d;
  }
};

template <class T, class B>
struct device_of<tensor_ref<T, B>> : leaf_device_of<tensor_ref<T, B>, T> {
  template <class Table>
  static void collect(const tensor_ref<T, B>& e, Table& t, cudaStream_t s) {
    leaf_device_of<tensor<T, B>, T>::collect(e.get(), t, s);
  }
};
template <class T, class B>
struct device_of<tensor<T, B>> : leaf_device_of<tensor<T, B>, T> {};
template <class T, class B>
struct device_of<tensor_view<T, B>> : leaf_device_of<tensor_view<T, B>, std::remove_const_t<T>> {};

template <class T>
struct device_of<scalar_expr<T>> {
  using type = dscalar<T>;
  static constexpr int leaf_count = 0;
  template <class Table>
  static void collect(const scalar_expr<T>&, Table&, cudaStream_t) {}
  template <class Table>
  static type build(const scalar_expr<T>& e, const Table&, const index_t (*)[max_rank], int&) {
    return type{e.value()};
  }
};

template <class Op, class A>
struct device_of<unary_expr<Op, A>> {
  using type = dunary<Op, typename device_of<A>::type>;
  static constexpr int leaf_count = device_of<A>::leaf_count;
  template <class Table>
  static void collect(const unary_expr<Op, A>& e, Table& t, cudaStream_t s) {
    device_of<A>::collect(e.operand(), t, s);
  }
  template <class Table>
  static type build(const unary_expr<Op, A>& e, const Table& t, const index_t (*st)[max_rank],
                    int& k) {
    return type{e.op(), device_of<A>::build(e.operand(), t, st, k)};
  }
};

template <class Op, class A, class B>
struct device_of<binary_expr<Op, A, B>> {
  using type = dbinary<Op, typename device_of<A>::type, typename device_of<B>::type>;
  static constexpr int leaf_count = device_of<A>::leaf_count + device_of<B>::leaf_count;
  template <class Table>
  static void collect(const binary_expr<Op, A, B>& e, Table& t, cudaStream_t s) {
    device_of<A>::collect(e.lhs(), t, s);
    device_of<B>::collect(e.rhs(), t, s);
  }
  template <class Table>
  static type build(const binary_expr<Op, A, B>& e, const Table& t, const index_t (*st)[max_rank],
                    int& k) {
    auto a = device_of<A>::build(e.lhs(), t, st, k);
    return type{e.op(), a, device_of<B>::build(e.rhs(), t, st, k)};
  }
};

template <class Op, class A, class B, class C>
struct device_of<ternary_expr<Op, A, B, C>> {
  using type = dternary<Op, typename device_of<A>::type, typename device_of<B>::type,
                        typename device_of<C>::type>;
  static constexpr int leaf_count =
      device_of<A>::leaf_count + device_of<B>::leaf_count + device_of<C>::leaf_count;
  template <class Table>
  static void collect(const ternary_expr<Op, A, B, C>& e, Table& t, cudaStream_t s) {
    device_of<A>::collect(e.first(), t, s);
    device_of<B>::collect(e.second(), t, s);
    device_of<C>::collect(e.third(), t, s);
  }
  template <class Table>
  static type build(const ternary_expr<Op, A, B, C>& e, const Table& t,
                    const index_t (*st)[max_rank], int& k) {
    auto a = device_of<A>::build(e.first(), t, st, k);
    auto b = device_of<B>::build(e.second(), t, st, k);
    return type{e.op(), a, b, device_of<C>::build(e.third(), t, st, k)};
  }
};

// Sub-reductions and products inside an expression are evaluated first, into a temporary.
template <class E>
struct materialized_device_of {
  using V = typename E::value_type;
  using type = dleaf<V>;
  static constexpr int leaf_count = 1;
  template <class Table>
  static void collect(const E& e, Table& t, cudaStream_t);
  template <class Table>
  static type build(const E&, const Table& t, const index_t (*st)[max_rank], int& k) {
    type d{reinterpret_cast<const V*>(t.leaves[k].data), {}};
    for (int a = 0; a < max_rank; ++a) d.st[a] = st[k][a];
    ++k;
    return d;
  }
};
template <class R, class A>
struct device_of<reduce_expr<R, A>> : materialized_device_of<reduce_expr<R, A>> {};
template <class A, class B>
struct device_of<matmul_expr<A, B>> : materialized_device_of<matmul_expr<A, B>> {};

template <class E>
using device_t = typename device_of<E>::type;

// The ordering state of the first tensor leaf of an expression, or null.
template <class E>
cuda_access* first_access(const E& e) {
  if constexpr (requires { e.get(); }) {
    return first_access(e.get());
  } else if constexpr (requires { e.storage_ptr(); }) {
    return e.storage_ptr() ? &e.storage_ptr()->access() : nullptr;
  } else if constexpr (requires { e.operand(); }) {
    return first_access(e.operand());
  } else if constexpr (requires { e.first(); }) {
    if (auto* a = first_access(e.first())) return a;
    if (auto* b = first_access(e.second())) return b;
    return first_access(e.third());
  } else if constexpr (requires { e.lhs(); }) {
    if (auto* a = first_access(e.lhs())) return a;
    return first_access(e.rhs());
  } else {
    return nullptr;
  }
}

// ---- plans -------------------------------------------------------------------------------------

// The coalesced iteration over `shape` for operands `out` (when given) and the leaves; strides in
// elements, per operand.
template <int N>
struct device_plan {
  launch_shape shape;
  index_t st[N > 0 ? N : 1][max_rank] = {};
  bool contiguous = true;
  index_t size = 0;
};

template <int N, int L>
device_plan<N> plan_for(const shape_t& shape, const leaf_entry* out, const leaf_table<L>& table) {
  constexpr int P = N > 0 ? N : 1;
  char* base[P] = {};
  std::size_t elem[P];
  strides_t in[P];
  int k = 0;
  if (out) {
    base[k] = const_cast<char*>(out->data);
    elem[k] = out->elem;
    in[k++] = out->strides;
  }
  for (int i = 0; i < table.count; ++i, ++k) {
    base[k] = const_cast<char*>(table.leaves[i].data);
    elem[k] = table.leaves[i].elem;
    in[k] = broadcast_strides(table.leaves[i].shape, table.leaves[i].strides, shape);
  }
  if (k == 0) {
    elem[0] = 1;
    in[0] = dims::filled(shape.size(), 0);
  }
  const auto p = cpu_eval::make_plan<P>(shape, base, elem, in);
  device_plan<N> d;
  d.shape.rank = p.rank;
  d.size = p.size;
  for (int a = 0; a < p.rank; ++a) d.shape.shape[a] = p.shape[a];
  for (int o = 0; o < P; ++o)
    for (int a = 0; a < p.rank; ++a) d.st[o][a] = p.strides[o][a] / static_cast<index_t>(elem[o]);
  d.contiguous = p.rank == 1 && p.contiguous();
  return d;
}

inline void check_devices(int device, const leaf_entry* leaves, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (leaves[i].access && leaves[i].access->device() != device)
      throw shape_error(cat(what, ": operands live on CUDA devices ", device, " and ",
                            leaves[i].access->device(), "; copy one of them explicitly first"));
}

// ---- pinned staging buffers for transfers ------------------------------------------------------

// Page-locked host buffers, reused: a transfer stages through one so that cudaMemcpyAsync is
// truly asynchronous; a buffer returns to the pool once the copy that used it has completed.
class pinned_pool {
 public:
  static pinned_pool& get() {
    static pinned_pool p;
    return p;
  }
  void* acquire(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    reap();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->bytes >= bytes) {
        void* p = it->ptr;
        free_.erase(it);
        return p;
      }
    void* p = nullptr;
    MELD_CUDA_CHECK(cudaMallocHost(&p, std::max<std::size_t>(bytes, 4096)));
    sizes_.push_back({p, std::max<std::size_t>(bytes, 4096)});
    return p;
  }
  // Returns the buffer once the work enqueued so far on `stream` (the copy) has completed.
  void release_after(void* p, cudaStream_t stream) {
    cudaEvent_t e;
    MELD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MELD_CUDA_CHECK(cudaEventRecord(e, stream));
    std::lock_guard lock(mutex_);
    pending_.push_back({p, e});
  }

 private:
  struct block {
    void* ptr;
    std::size_t bytes;
  };
  struct pending {
    void* ptr;
    cudaEvent_t done;
  };
  void reap() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (cudaEventQuery(it->done) == cudaSuccess) {
        (void)cudaEventDestroy(it->done);
        for (const block& b : sizes_)
          if (b.ptr == it->ptr) free_.push_back(b);
        it = pending_.erase(it);
      } else {
        (void)cudaGetLastError();  // cudaErrorNotReady is not an error
        ++it;
      }
    }
  }
  std::mutex mutex_;
  std::vector<block> sizes_, free_;
  std::vector<pending> pending_;
};

template <class T, class V>
struct cuda_future_state : future_state<T> {
  cudaEvent_t done = nullptr;
  V* host = nullptr;  // pinned
  index_t divide = 0;
  bool is_index = false;
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
    if (divide)
      this->value = static_cast<T>(static_cast<T>(*host) / static_cast<T>(divide));
    else
      this->value = static_cast<T>(*host);
    (void)cudaFreeHost(host);
    host = nullptr;
  }
};

// (value, index) pairs for argmax / argmin: the first extreme wins, NaN counts as the extreme.
template <class V>
struct arg_pair {
  V value;
  index_t index;
};

template <class Arg, class V>
struct arg_combine {
  MELD_HD arg_pair<V> operator()(const arg_pair<V>& a, const arg_pair<V>& b) const {
    if (Arg::better(b.value, a.value)) return b;
    if (Arg::better(a.value, b.value)) return a;
    return b.index < a.index ? b : a;
  }
};

template <class D, class V>
struct arg_at {
  evaluate_at<D> at;
  MELD_HD arg_pair<V> operator()(index_t i) const { return {static_cast<V>(at(i)), i}; }
};

// (value, index within its segment of `length`) for argmax / argmin along an axis.
template <class D, class V>
struct arg_in_segment {
  evaluate_at<D> at;
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

}  // namespace detail::cuda_eval

template <class Policy>
struct executor<cuda<Policy>> {
  static constexpr bool synchronous = std::is_same_v<Policy, sync>;

  static void finish(cudaStream_t s) {
    if constexpr (synchronous) MELD_CUDA_CHECK(cudaStreamSynchronize(s));
  }

  // dst = e: one kernel.
  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e) {
    using namespace detail::cuda_eval;
    using T = typename Dst::value_type;
    const index_t n = dst.size();
    if (n == 0) return;
    auto& out_access = dst.storage_ptr()->access();
    const int device = out_access.device();
    cuda_device_guard guard(device);
    cudaStream_t s = out_access.home()->handle;

    leaf_table<device_of<E>::leaf_count> table;
    device_of<E>::collect(e, table, s);
    check_devices(device, table.leaves, table.count, "assignment");
    const leaf_entry out{reinterpret_cast<const char*>(dst.raw_data()), dst.shape(), dst.strides(),
                         sizeof(T), &out_access};

    // A source that overlaps the destination other than element for element: through a temporary.
    detail::cpu_eval::leaf_info infos[device_of<E>::leaf_count > 0 ? device_of<E>::leaf_count : 1];
    for (int i = 0; i < table.count; ++i)
      infos[i] = {table.leaves[i].data, table.leaves[i].shape, table.leaves[i].strides,
                  table.leaves[i].elem};
    if (detail::cpu_eval::needs_temporary({out.data, out.shape, out.strides, out.elem}, infos,
                                          table.count)) {
      tensor<T, cuda<Policy>> tmp(dst.shape(), uninitialized);
      assign(tmp, e);
      assign(dst, tensor_ref<T, cuda<Policy>>(tmp));
      return;
    }

    constexpr int N = 1 + device_of<E>::leaf_count;
    const auto plan = plan_for<N>(dst.shape(), &out, table);
    int k = 0;
    const auto expr = device_of<E>::build(e, table, plan.st + 1, k);

    for (int i = 0; i < table.count; ++i)
      if (table.leaves[i].access) table.leaves[i].access->before(s, false);
    out_access.before(s, true);

    T* data = const_cast<T*>(dst.raw_data());
    bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
    for (int i = 0; i < table.count; ++i)
      aligned = aligned && reinterpret_cast<std::uintptr_t>(table.leaves[i].data) % 16 == 0;
    constexpr int V = sizeof(T) <= 16 ? int(16 / sizeof(T)) : 1;
    if (plan.contiguous && aligned) {
      assign_flat<V><<<grid_for(n / V + 1, device), 256, 0, s>>>(data, expr, n);
    } else if (plan.contiguous) {
      assign_flat<1><<<grid_for(n, device), 256, 0, s>>>(data, expr, n);
    } else {
      dstrides layout{};
      for (int a = 0; a < max_rank; ++a) layout.st[a] = plan.st[0][a];
      assign_strided<<<grid_for(n, device), 256, 0, s>>>(data, plan.shape, layout, expr, n);
    }
    check_launch("meld::cuda assignment kernel");
    for (int i = 0; i < table.count; ++i)
      if (table.leaves[i].access) table.leaves[i].access->after(s, false);
    out_access.after(s, true);
    finish(s);
  }

  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    using namespace detail::cuda_eval;
    const index_t n = dst.size();
    if (n == 0) return;
    auto& access = dst.storage_ptr()->access();
    cuda_device_guard guard(access.device());
    cudaStream_t s = access.home()->handle;
    access.before(s, true);
    T* data = const_cast<T*>(dst.raw_data());
    if (value == T(0)) {
      MELD_CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<std::size_t>(n) * sizeof(T), s));
    } else {
      fill_kernel<<<grid_for(n, access.device()), 256, 0, s>>>(data, value, n);
      check_launch("meld::cuda fill kernel");
    }
    access.after(s, true);
    finish(s);
  }

  // A reduction over all elements: a scalar (cuda<sync>) or a future of it (cuda<async>).
  template <class R, class E>
  static auto reduce(const E& e) {
    using namespace detail::cuda_eval;
    using V = value_t<E>;
    constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
    constexpr bool is_arg =
        std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;
    using Result = typename R::template result<V>;
    using A =
        std::conditional_t<is_mean, std::conditional_t<std::is_floating_point_v<V>, V, double>,
                           std::conditional_t<is_arg, V, Result>>;
    using Fold = std::conditional_t<is_mean, reducers::sum, R>;

    auto state =
        std::make_shared<cuda_future_state<Result, std::conditional_t<is_arg, index_t, A>>>();
    const shape_t shape = e.shape();
    const index_t n = shape.product();
    if (n == 0) {
      if constexpr (R::needs_elements)
        throw shape_error(detail::cat(R::name, ": the expression of shape ", shape,
                                      " is empty, and an empty ", R::name, " has no value"));
      else if constexpr (is_mean)
        state->value = std::numeric_limits<Result>::quiet_NaN();
      else
        state->value = static_cast<Result>(R::template identity<A>());
      return result_of(future<Result>(state));
    }

    const int device = detail::require_device();
    leaf_table<device_of<E>::leaf_count> table;
    cudaStream_t s = cuda_stream::current().handle();
    if constexpr (device_of<E>::leaf_count > 0) {
      // On the stream of the first operand (its temporaries, if any, are made there too).
      const auto first = first_access(e);
      if (first) s = first->home()->handle;
    }
    device_of<E>::collect(e, table, s);
    check_devices(device, table.leaves, table.count, R::name);
    constexpr int N = device_of<E>::leaf_count;
    const auto plan = plan_for<N>(shape, nullptr, table);
    int k = 0;
    const auto expr = device_of<E>::build(e, table, plan.st, k);
    const evaluate_at<device_t<E>> at{expr, plan.shape, plan.contiguous};
    for (int i = 0; i < table.count; ++i)
      if (table.leaves[i].access) table.leaves[i].access->before(s, false);

    using Out = std::conditional_t<is_arg, arg_pair<V>, A>;
    Out* d_out = nullptr;
    MELD_CUDA_CHECK(cudaMallocAsync(&d_out, sizeof(Out), s));
    void* temp = nullptr;
    std::size_t temp_bytes = 0;
    const thrust::counting_iterator<index_t> positions(0);
    auto run = [&](void* t, std::size_t& bytes) {
      if constexpr (is_arg) {
        auto it = thrust::make_transform_iterator(positions, arg_at<device_t<E>, V>{at});
        return cub::DeviceReduce::Reduce(t, bytes, it, d_out, n, arg_combine<R, V>{},
                                         arg_pair<V>{at(0), 0}, s);
      } else {
        auto it = thrust::make_transform_iterator(positions, evaluate_as<device_t<E>, A>{at});
        return cub::DeviceReduce::Reduce(t, bytes, it, d_out, n, fold_op<Fold, A>{},
                                         Fold::template identity<A>(), s);
      }
    };
    MELD_CUDA_CHECK(run(nullptr, temp_bytes));
    MELD_CUDA_CHECK(cudaMallocAsync(&temp, std::max<std::size_t>(temp_bytes, 1), s));
    MELD_CUDA_CHECK(run(temp, temp_bytes));
    MELD_CUDA_CHECK(cudaFreeAsync(temp, s));
    for (int i = 0; i < table.count; ++i)
      if (table.leaves[i].access) table.leaves[i].access->after(s, false);

    // The result goes to pinned host memory; the future waits for the copy.
    using Host = std::conditional_t<is_arg, index_t, A>;
    MELD_CUDA_CHECK(cudaMallocHost(&state->host, sizeof(Host)));
    if constexpr (is_arg) {
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

  // Reduces `operand` along `axis` into dst (any layout): a segmented CUB reduction into a
  // contiguous buffer, then one kernel that writes it into dst.
  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis) {
    using namespace detail::cuda_eval;
    using T = typename Dst::value_type;
    using V = value_t<E>;
    constexpr bool is_mean = std::is_same_v<R, reducers::mean>;
    constexpr bool is_arg =
        std::is_same_v<R, reducers::argmax> || std::is_same_v<R, reducers::argmin>;
    using Result = typename R::template result<V>;
    using A =
        std::conditional_t<is_mean, std::conditional_t<std::is_floating_point_v<V>, V, double>,
                           std::conditional_t<is_arg, V, Result>>;
    using Fold = std::conditional_t<is_mean, reducers::sum, R>;
    const index_t M = dst.size();
    if (M == 0) return;
    auto& out_access = dst.storage_ptr()->access();
    const int device = out_access.device();
    cuda_device_guard guard(device);
    cudaStream_t s = out_access.home()->handle;

    const shape_t in_shape = e.shape();
    const int r = in_shape.size();
    const index_t L = in_shape[axis];
    leaf_table<device_of<E>::leaf_count> table;
    device_of<E>::collect(e, table, s);
    check_devices(device, table.leaves, table.count, R::name);
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
      auto& leaf = table.leaves[i];
      leaf.strides = move_last(broadcast_strides(leaf.shape, leaf.strides, in_shape));
      leaf.shape = space;
    }
    constexpr int N = device_of<E>::leaf_count;
    const auto plan = plan_for<N>(space, nullptr, table);
    int k = 0;
    const auto expr = device_of<E>::build(e, table, plan.st, k);
    const evaluate_at<device_t<E>> at{expr, plan.shape, plan.contiguous};
    for (int i = 0; i < table.count; ++i)
      if (table.leaves[i].access) table.leaves[i].access->before(s, false);
    out_access.before(s, true);

    using Out = std::conditional_t<is_arg, arg_pair<V>, A>;
    Out* buffer = nullptr;
    MELD_CUDA_CHECK(cudaMallocAsync(&buffer, sizeof(Out) * static_cast<std::size_t>(M), s));
    if (L == 0) {
      // An empty sum / product / mean (max, min, argmax refused it already).
      Out fill_value{};
      if constexpr (!is_arg)
        fill_value = is_mean ? std::numeric_limits<A>::quiet_NaN() : Fold::template identity<A>();
      fill_kernel<<<grid_for(M, device), 256, 0, s>>>(buffer, fill_value, M);
      check_launch("meld::cuda fill kernel");
    } else {
      const thrust::counting_iterator<index_t> positions(0);
      auto offsets = thrust::make_transform_iterator(positions, segment_offset{L});
      void* temp = nullptr;
      std::size_t temp_bytes = 0;
      auto run = [&](void* t, std::size_t& bytes) {
        if constexpr (is_arg) {
          auto it =
              thrust::make_transform_iterator(positions, arg_in_segment<device_t<E>, V>{at, L});
          return cub::DeviceSegmentedReduce::Reduce(t, bytes, it, buffer, M, offsets, offsets + 1,
                                                    arg_combine<R, V>{},
                                                    arg_pair<V>{V{}, index_t(-1)}, s);
        } else {
          auto it = thrust::make_transform_iterator(positions, evaluate_as<device_t<E>, A>{at});
          return cub::DeviceSegmentedReduce::Reduce(t, bytes, it, buffer, M, offsets, offsets + 1,
                                                    fold_op<Fold, A>{},
                                                    Fold::template identity<A>(), s);
        }
      };
      MELD_CUDA_CHECK(run(nullptr, temp_bytes));
      MELD_CUDA_CHECK(cudaMallocAsync(&temp, std::max<std::size_t>(temp_bytes, 1), s));
      MELD_CUDA_CHECK(run(temp, temp_bytes));
      MELD_CUDA_CHECK(cudaFreeAsync(temp, s));
    }
    // Scatter into the destination (whose axes are the operand's without `axis`).
    const shape_t out_shape = [&] {
      shape_t o;
      for (int a = 0; a < r; ++a)
        if (a != axis) o.push_back(in_shape[a]);
      return o;
    }();
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
    if constexpr (is_arg) {
      index_t* indices = nullptr;
      MELD_CUDA_CHECK(cudaMallocAsync(&indices, sizeof(index_t) * static_cast<std::size_t>(M), s));
      copy_indices<<<grid_for(M, device), 256, 0, s>>>(buffer, indices, M);
      check_launch("meld::cuda argmax kernel");
      scatter_segments<<<grid_for(M, device), 256, 0, s>>>(out_data, ls, layout, indices, M,
                                                           index_t(0));
      MELD_CUDA_CHECK(cudaFreeAsync(indices, s));
    } else {
      scatter_segments<<<grid_for(M, device), 256, 0, s>>>(out_data, ls, layout, buffer, M,
                                                           is_mean ? L : index_t(0));
    }
    check_launch("meld::cuda reduction kernel");
    MELD_CUDA_CHECK(cudaFreeAsync(buffer, s));
    for (int i = 0; i < table.count; ++i)
      if (table.leaves[i].access) table.leaves[i].access->after(s, false);
    out_access.after(s, true);
    finish(s);
  }

  // c = alpha a b + beta c through cuBLAS.
  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c);

  // Copies a tensor from the host or another device (meld::to).
  template <class T, class From>
  static void copy_from(tensor<T, cuda<Policy>>& out, const tensor<T, From>& in);
  // Copies a device tensor to a host tensor (meld::to), waiting for it.
  template <class T, class To>
  static void copy_to(tensor<T, To>& out, const tensor<T, cuda<Policy>>& in);

 private:
  template <class F>
  static auto result_of(F f) {
    if constexpr (synchronous)
      return f.get();
    else
      return f;
  }
};

}  // namespace meld
