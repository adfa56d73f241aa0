// Operations that are not expressions and have no CUDA kernel of their own (indexing through
// index tensors, scans and sorts along an axis: tensor/indexing.hpp, tensor/scan_sort.hpp) run on
// the CUDA backend through host_kernel, as they do on the host backends: each view among the
// arguments is copied to host memory once (contiguous), the function runs on host views of the
// copies, and the views it writes (those of non-const elements) are copied back in stream order.
// The host waits for the operands' streams, as reading a value does; the work costs what it costs
// on one CPU thread plus a transfer each way, and gives the same bits as the host backends.
//
// A part of executor.hpp, which includes it once executor<cuda<P>> is declared: include that.
#pragma once

#include "platform.hpp"

#include <tuple>
#include <type_traits>

#include "../../tensor/tensor.hpp"

namespace meld {

namespace detail::cuda_eval {

// A contiguous host copy of a view of device memory; any other argument as it is.
template <class A>
auto stage_to_host(const A& a) {
  if constexpr (strided_leaf<A>) {
    using T = std::remove_const_t<typename A::element_type>;
    using B = typename A::backend_type;
    tensor<T, cpu<sync>> host(a.shape(), uninitialized);
    if (host.size() == 0) return host;
    if (a.is_contiguous()) {
      executor<B>::copy_to_host(host.data(), a);
    } else {
      const tensor<T, B> packed(a);
      executor<B>::copy_to_host(host.data(), packed.view());
    }
    return host;
  } else {
    return a;
  }
}

// What the function receives for argument A staged as h: a host view (read-only for views of
// const elements), or the argument.
template <class A, class H>
decltype(auto) host_argument(H& h) {
  if constexpr (strided_leaf<A>) {
    using E = typename A::element_type;
    return tensor_view<E, cpu<sync>>(h.view());
  } else {
    return (h);
  }
}

// Copies the host copy of a written view back to the device.
template <class A, class H>
void write_back(const A& a, const H& h) {
  if constexpr (strided_leaf<A> && !std::is_const_v<typename A::element_type>) {
    using T = typename A::element_type;
    using B = typename A::backend_type;
    if (h.size() == 0) return;
    if (a.is_contiguous()) {
      executor<B>::copy_from_host(a, h.data());
    } else {
      tensor<T, B> packed(a.shape(), uninitialized);
      executor<B>::copy_from_host(packed.view(), h.data());
      executor<B>::assign(a, packed.view());
    }
  }
}

}  // namespace detail::cuda_eval

template <class Policy>
template <class F, class... Args>
void executor<cuda<Policy>>::host_kernel(F&& fn, const Args&... args) {
  detail::check_devices("host_kernel", args...);
  detail::trace_scope traced("host kernel", "cuda");
  auto staged = std::make_tuple(detail::cuda_eval::stage_to_host(args)...);
  std::apply([&](auto&... h) { fn(detail::cuda_eval::host_argument<Args>(h)...); }, staged);
  std::apply([&](const auto&... h) { (detail::cuda_eval::write_back(args, h), ...); }, staged);
}

}  // namespace meld
