// The sim executors. sim<sync> translates the leaves of each operation to host views of the same
// memory (memory.hpp) and runs the CPU backend's synchronous evaluation on them; sim<async> queues
// exactly that on the stream of the tensor written (backend/queued.hpp), each device having a
// default stream of its own, as CUDA devices do.
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "../../core/trace.hpp"
#include "../../expr/walk.hpp"
#include "../../runtime/stream.hpp"
#include "../../tensor/tensor.hpp"
#include "../concept.hpp"
#include "../host.hpp"
#include "../lowering.hpp"
#include "../queued.hpp"
#include "memory.hpp"
#include "sim.hpp"
#include "window.hpp"

namespace meld {

namespace detail::sim_eval {

// The host view of a sim tensor, view or lvalue tensor's reference: the same layout, over the
// readable range, without ownership (the sim operand outlives the operation).
template <strided_leaf L>
auto host_view(const L& leaf) {
  using E = typename L::element_type;
  return tensor_view<E, cpu<>>(nullptr, sim_host(leaf.raw_data()),
                               layout{leaf.shape(), leaf.strides(), 0});
}

// The expression over host views: what the CPU evaluator runs.
template <class E>
auto on_host(const E& e) {
  return transform_leaves(e, [](const auto& leaf) {
    if constexpr (strided_leaf<std::remove_cvref_t<decltype(leaf)>>) {
      using T = value_t<decltype(leaf)>;
      return tensor_view<const T, cpu<>>(host_view(leaf));
    } else {
      return leaf;
    }
  });
}

// An argument of a host kernel: views become host views, anything else is passed on.
template <class A>
decltype(auto) kernel_argument(const A& a) {
  if constexpr (strided_leaf<A>)
    return host_view(a);
  else
    return (a);
}

}  // namespace detail::sim_eval

template <>
struct executor<sim<sync>> {
  template <class Dst, class T>
  static void fill(const Dst& dst, T value) {
    executor<cpu<sync>>::fill(detail::sim_eval::host_view(dst), value);
  }
  template <class Dst, class E>
  static void assign(const Dst& dst, const E& e) {
    detail::check_devices("assignment", dst, e);
    detail::trace_scope traced("assign", "sim", {"elements", dst.size()});
    detail::cpu_eval::assign(detail::sim_eval::host_view(dst), detail::sim_eval::on_host(e));
  }
  template <class... Dst, class... E>
  static void assign_each(const std::tuple<Dst...>& dsts, const std::tuple<E...>& es) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (detail::check_devices("assignment", std::get<I>(dsts), std::get<I>(es)), ...);
      detail::trace_scope traced("assign_each", "sim", {"elements", std::get<0>(dsts).size()});
      detail::cpu_eval::assign_each(
          std::make_tuple(detail::sim_eval::host_view(std::get<I>(dsts))...),
          std::make_tuple(detail::sim_eval::on_host(std::get<I>(es))...));
    }
    (std::index_sequence_for<E...>{});
  }
  // The value comes back to the host: counted as a transfer, as a GPU copies it back.
  template <class R, class E>
  static reduce_result_t<R, E> reduce(const E& e) {
    detail::check_devices(R::name, e);
    detail::sim_counters::get().count(detail::to_host, sizeof(reduce_result_t<R, E>));
    detail::trace_scope traced("reduce", "sim", {"elements", e.shape().product()});
    return detail::cpu_eval::reduce<R>(detail::sim_eval::on_host(e));
  }
  template <class R, class Dst, class E>
  static void reduce_axis(const Dst& dst, const E& e, int axis) {
    detail::check_devices(R::name, dst, e);
    detail::trace_scope traced("reduce_axis", "sim", {"elements", e.shape().product()});
    detail::cpu_eval::reduce_axis<R>(detail::sim_eval::host_view(dst), detail::sim_eval::on_host(e),
                                     axis);
  }
  template <class T, class A, class B, class C>
  static void gemm(T alpha, const A& a, const B& b, T beta, const C& c) {
    detail::check_devices("gemm", c, a, b);
    detail::trace_scope traced("gemm", "sim", {"elements", c.size()});
    detail::cpu_eval::gemm_into(alpha, detail::sim_eval::on_host(a), detail::sim_eval::on_host(b),
                                beta, detail::sim_eval::host_view(c));
  }
  template <class Dst, class T>
  static void copy_from_host(const Dst& dst, const T* src) {
    const std::size_t bytes = static_cast<std::size_t>(dst.size()) * sizeof(T);
    detail::sim_counters::get().count(detail::to_device, bytes);
    detail::trace_scope traced("copy to device", "sim", {"elements", dst.size()});
    if (bytes) std::memcpy(detail::sim_host(const_cast<T*>(dst.raw_data())), src, bytes);
  }
  template <class T, class Src>
  static void copy_to_host(T* dst, const Src& src) {
    const std::size_t bytes = static_cast<std::size_t>(src.size()) * sizeof(T);
    detail::sim_counters::get().count(detail::to_host, bytes);
    detail::trace_scope traced("copy to host", "sim", {"elements", src.size()});
    if (bytes) std::memcpy(dst, detail::sim_host(src.raw_data()), bytes);
  }
  template <class Dst, class Src>
  static void copy(const Dst& dst, const Src& src) {
    using T = typename Dst::value_type;
    const std::size_t bytes = static_cast<std::size_t>(dst.size()) * sizeof(T);
    detail::sim_counters::get().count(detail::device_to_device, bytes);
    detail::trace_scope traced("copy device to device", "sim", {"elements", dst.size()});
    if (bytes)
      std::memcpy(detail::sim_host(const_cast<T*>(dst.raw_data())),
                  detail::sim_host(src.raw_data()), bytes);
  }
  template <class Dst, class G>
  static void generate(const Dst& dst, const G& g) {
    executor<cpu<sync>>::generate(detail::sim_eval::host_view(dst), g);
  }
  // Runs fn with host views of the views among args (see executor<cpu<sync>>::host_kernel).
  template <class F, class... Args>
  static void host_kernel(F&& fn, const Args&... args) {
    detail::check_devices("host_kernel", args...);
    fn(detail::sim_eval::kernel_argument(args)...);
  }
};

static_assert(backend<sim<sync>>);

namespace detail {
// Work on sim<async> tensors runs on the stream current on the creating thread (stream_guard),
// else on the default stream of the current sim device.
struct sim_home {
  static std::shared_ptr<stream_state> current() {
    if (current_stream) return current_stream->state();
    static std::mutex mutex;
    static std::unique_ptr<stream> streams[sim_max_devices];
    std::lock_guard lock(mutex);
    auto& s = streams[sim_current_device];
    if (!s) s = std::make_unique<stream>("sim:" + std::to_string(sim_current_device));
    return s->state();
  }
};
}  // namespace detail

template <>
struct access_tracking<sim<async>> {
  using type = detail::stream_access<detail::sim_home>;
};

template <>
struct executor<sim<async>> : detail::queued_executor<sim<async>, executor<sim<sync>>> {};

static_assert(backend<sim<async>>);

}  // namespace meld
