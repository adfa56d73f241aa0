// The CUDA executor: one fused kernel per assignment, reductions that evaluate the expression as
// they read it (no temporary for it: reduce.hpp), cuBLAS products (gemm.hpp), transfers through
// pinned buffers (copy.hpp), stream-ordered memory (memory.hpp), operations without kernels of
// their own on host copies (host_kernel.hpp).
//
// Every operation runs on the destination's stream (or, for reductions to a value, the first
// operand's), after the work of other streams on its operands (cudaStreamWaitEvent); under
// cuda<sync> the call then waits for the stream, under cuda<async> it returns at once.
#pragma once

#include "platform.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../../core/trace.hpp"
#include "../../expr/walk.hpp"
#include "../../tensor/tensor.hpp"
#include "../aliasing.hpp"
#include "../backend.hpp"
#include "../lowering.hpp"
#include "cuda.hpp"
#include "kernels.hpp"
#include "launch.hpp"
#include "lower.hpp"
#include "memory.hpp"
#include "stream.hpp"

namespace meld {

namespace detail::cuda_eval {}  // namespace detail::cuda_eval

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
    detail::trace_scope traced("assign", "cuda", {"elements", n});
    detail::check_devices("assignment", dst, e);
    auto& out_access = dst.storage_ptr()->access();
    const int device = out_access.device();
    cuda_device_guard guard(device);
    cudaStream_t s = out_access.home()->handle;

    // A source that overlaps the destination other than element for element: through a temporary.
    const detail::leaf_info out{reinterpret_cast<const char*>(dst.raw_data()), dst.shape(),
                                dst.strides(), sizeof(T)};
    {
      const auto leaves = detail::leaf_layouts(e);
      if (detail::needs_temporary(out, leaves.leaves, leaves.count)) {
        tensor<T, cuda<Policy>> tmp(dst.shape(), uninitialized);
        assign(tmp, e);
        assign(dst, tmp.view());
        return;
      }
    }

    input_table<input_count<E>> table;
    auto expr = lower(e, make_input<input_table<input_count<E>>>{table});
    constexpr int N = 1 + input_count<E>;
    const auto plan = plan_for<N>(dst.shape(), &out, table);
    set_strides(expr, plan.st + 1);

    table.before(s);
    out_access.before(s, true);
    T* data = const_cast<T*>(dst.raw_data());
    bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
    for (int i = 0; i < table.count; ++i)
      aligned = aligned && reinterpret_cast<std::uintptr_t>(table.leaves[i].layout.data) % 16 == 0;
    constexpr int V = sizeof(T) <= 16 ? int(16 / sizeof(T)) : 1;
    using D = decltype(expr);
    constexpr const char* what = "meld::cuda assignment kernel";
    if (plan.contiguous && aligned) {
      launch(what, assign_flat<V, T, D>, n / V + 1, device, s, data, expr, n);
    } else if (plan.contiguous) {
      launch(what, assign_flat<1, T, D>, n, device, s, data, expr, n);
    } else {
      dstrides layout{};
      for (int a = 0; a < max_rank; ++a) layout.st[a] = plan.st[0][a];
      launch(what, assign_strided<T, D>, n, device, s, data, plan.shape, layout, expr, n);
    }
    table.after(s);
    out_access.after(s, true);
    finish(s);
  }
  // dsts[i] = es[i] for each i: one kernel each, in order (a kernel writing several
  // destinations is not written).
  template <class... Dst, class... E>
  static void assign_each(const std::tuple<Dst...>& dsts, const std::tuple<E...>& es) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (assign(std::get<I>(dsts), std::get<I>(es)), ...);
    }
    (std::index_sequence_for<E...>{});
  }

  template <class Dst, class T>
  static void fill(const Dst& dst, T value_) {
    using namespace detail::cuda_eval;
    using V = typename Dst::value_type;
    const V value = static_cast<V>(value_);
    const index_t n = dst.size();
    if (n == 0) return;
    detail::trace_scope traced("fill", "cuda", {"elements", n});
    auto& access = dst.storage_ptr()->access();
    cuda_device_guard guard(access.device());
    cudaStream_t s = access.home()->handle;
    access.before(s, true);
    V* data = const_cast<V*>(dst.raw_data());
    if (value == V(0)) {
      MELD_CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<std::size_t>(n) * sizeof(V), s));
    } else {
      launch("meld::cuda fill kernel", fill_kernel<V>, n, access.device(), s, data, value, n);
    }
    access.after(s, true);
    finish(s);
  }

  // dst[i] = g(i) for every flat index of a contiguous dst (g: a host-and-device callable).
  template <class Dst, class G>
  static void generate(const Dst& dst, const G& g) {
    using namespace detail::cuda_eval;
    using V = typename Dst::value_type;
    const index_t n = dst.size();
    if (n == 0) return;
    if (!dst.is_contiguous()) throw std::logic_error("meld: generate needs a contiguous tensor");
    detail::trace_scope traced("generate", "cuda", {"elements", n});
    auto& access = dst.storage_ptr()->access();
    cuda_device_guard guard(access.device());
    cudaStream_t s = access.home()->handle;
    access.before(s, true);
    launch("meld::cuda generate kernel", generate_kernel<V, G>, n, access.device(), s,
           const_cast<V*>(dst.raw_data()), g, n);
    access.after(s, true);
    finish(s);
  }

  // A reduction over all elements: a scalar (cuda<sync>) or a future of it (cuda<async>).
  template <class R, class E>
  static scalar_result_t<cuda<Policy>, reduce_result_t<R, E>> reduce(const E& e);

  // Reduces e along `axis` into dst (any layout).
  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis);

  // c = alpha a b + beta c through cuBLAS.
  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c);

  // Transfers (copy.hpp): from host memory (staged through a pinned buffer), to host memory
  // (waits for the device), and between tensors on any devices.
  template <class Dst, class T>
  static void copy_from_host(const Dst& dst, const T* src);
  template <class T, class Src>
  static void copy_to_host(T* dst, const Src& src);
  template <class Dst, class Src>
  static void copy(const Dst& dst, const Src& src);

  // Runs fn on host copies of the views among args, and copies back those it writes
  // (host_kernel.hpp): operations without a CUDA kernel of their own.
  template <class F, class... Args>
  static void host_kernel(F&& fn, const Args&... args);
};

namespace detail::cuda_eval {

// A reduction along an axis, or a product, inside a larger expression: evaluated once into a
// temporary on its device, which lives until the kernels that read it have run (stream-ordered
// free).
template <class E>
tensor<value_t<E>, typename E::backend_type> materialize(const E& e) {
  using B = typename E::backend_type;
  using V = value_t<E>;
  tensor<V, B> tmp(e.shape(), uninitialized);
  if constexpr (is_reduce_expr<E>)
    executor<B>::template reduce_axis<typename E::reducer_type>(tmp, e.operand(), e.axis());
  else
    executor<B>::gemm(V(1), e.lhs(), e.rhs(), V(0), tmp);
  return tmp;
}

}  // namespace detail::cuda_eval
}  // namespace meld

#include "copy.hpp"
#include "gemm.hpp"
#include "host_kernel.hpp"
#include "reduce.hpp"
#include "window.hpp"

namespace meld {
static_assert(backend<cuda<sync>>);
static_assert(backend<cuda<async>>);
}  // namespace meld
