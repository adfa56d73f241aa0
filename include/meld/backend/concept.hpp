// meld::backend<B>: everything a backend provides, in one place. Every backend states
// `static_assert(meld::backend<its tag>)` after its definitions; docs/backends.md walks through
// writing one.
//
// A backend is a tag type B (cpu<Policy>, sim<Policy>, cuda<Policy>) with
//   B::policy           meld::sync (an operation has finished when the call returns) or
//                       meld::async (it is enqueued; host access waits for it)
//   B::name             for messages
//   B::host_accessible  whether the host may address the elements (data(), element access, ...)
// and specializations of
//   memory<B>           allocate(bytes) -> void*, deallocate(p, bytes, access) (noexcept),
//                       device_count(), current_device(), set_current_device(d)
//   access_tracking<B>  ::type, the ordering state kept per storage, with wait_host(write)
//   executor<B>         the operations, on tensors and views of B, expressions of B:
//     fill(dst, value)                      dst = value (a contiguous tensor)
//     assign(dst, e)                        dst = e (e broadcasts to dst; overlaps handled)
//     assign_each(tuple(dst...), tuple(e...))  each dst = its e, as one assignment after another
//                                           (in one pass where the backend can)
//     reduce<R>(e) -> scalar_result_t<B, reduce_result_t<R, E>>      over all elements
//     reduce_axis<R>(dst, e, axis)          along one axis into dst
//     gemm(alpha, a, b, beta, c)            c = alpha a b + beta c (c overlaps neither)
//     copy_from_host(dst, const T* src)     a contiguous tensor from host memory
//     copy_to_host(T* dst, src)             ... into host memory (waits for src)
//     copy(dst, src)                        between tensors of B, on any devices of B
//     generate(dst, g)                      dst[i] = g(i) for each flat index i of a contiguous
//                                           dst; g is a host-and-device (MELD_HD) callable
//     host_kernel(fn, args...)              fn(host views of args...) for the operations that
//                                           are not expressions (indexing, scans, sorts)
//   window_ops<B>       convolution's and pooling's sliding windows (backend/window.hpp):
//                       im2col, col2im_add, max_pool, max_unpool_add, avg_pool, avg_unpool_add,
//                       avg_unpool
// and, optionally, memory<B>::host_alias(p): a host address of device memory (sim's readable
// mapping), with which host communicators move B's tensors in place (distributed/buffer.hpp).
// Mixing devices in one operation is an error that names both. Nothing above backend/ may assume
// more than this (host access compiles only where B::host_accessible).
#pragma once

#include <concepts>
#include <cstddef>
#include <tuple>

#include "../expr/reduce.hpp"
#include "../tensor/tensor.hpp"
#include "backend.hpp"
#include "window.hpp"

namespace meld {

/// \addtogroup backends
/// @{

namespace detail {
// What generate is checked with: a callable of the flat index.
struct generator_archetype {
  MELD_HD float operator()(index_t i) const { return static_cast<float>(i); }
};
// What host_kernel is checked with: a function of host views.
struct host_kernel_archetype {
  template <class... Views>
  void operator()(const Views&...) const {}
};
}  // namespace detail

/// What a backend tag B provides: B::policy (meld::sync or meld::async), B::name and
/// B::host_accessible, and specializations of `memory<B>`, `access_tracking<B>`, `executor<B>`
/// and `window_ops<B>` (this header's opening comment lists their operations; docs/backends.md
/// explains them).
/// Every backend checks itself with `static_assert(meld::backend<its tag>)`.
template <class B>
concept backend = requires(std::size_t bytes, void* p, int device, float* host, const float* chost,
                           float value, tensor<float, B>& t, const tensor<float, B>& ct,
                           const tensor_view<float, B>& dst, const tensor_view<const float, B>& src,
                           typename access_tracking<B>::type& access, index_t n,
                           const detail::planes& planes, const detail::window2d& window,
                           const tensor_view<std::int32_t, B>& argmax,
                           const tensor_view<const std::int32_t, B>& cargmax) {
  typename B::policy;
  requires std::same_as<typename B::policy, sync> || std::same_as<typename B::policy, async>;
  { B::name } -> std::convertible_to<const char*>;
  { B::host_accessible } -> std::convertible_to<bool>;

  { memory<B>::allocate(bytes) } -> std::same_as<void*>;
  { memory<B>::deallocate(p, bytes, access) }
  noexcept;
  { memory<B>::device_count() } -> std::same_as<int>;
  { memory<B>::current_device() } -> std::same_as<int>;
  memory<B>::set_current_device(device);

  access.wait_host(true);

  executor<B>::fill(t, value);
  executor<B>::assign(dst, src);
  executor<B>::assign_each(std::tuple{dst, dst}, std::tuple{src, src});
  { executor<B>::template reduce<reducers::sum>(src) } -> std::same_as<scalar_result_t<B, float>>;
  executor<B>::template reduce_axis<reducers::sum>(dst, src, device);
  executor<B>::gemm(value, src, src, value, dst);
  executor<B>::copy_from_host(t, chost);
  executor<B>::copy_to_host(host, ct);
  executor<B>::copy(t, ct);
  executor<B>::generate(t, detail::generator_archetype{});
  executor<B>::host_kernel(detail::host_kernel_archetype{}, dst, src);

  window_ops<B>::template im2col<float>(src, n, planes, window, dst);
  window_ops<B>::template col2im_add<float>(src, n, planes, window, dst);
  window_ops<B>::template max_pool<float>(src, n, planes, window, dst, argmax);
  window_ops<B>::template max_unpool_add<float>(src, cargmax, n, planes, window, dst);
  window_ops<B>::template avg_pool<float>(src, n, planes, window, dst);
  window_ops<B>::template avg_unpool_add<float>(src, n, planes, window, dst);
  window_ops<B>::template avg_unpool<float>(src, n, planes, window, dst);
};

/// @}

}  // namespace meld
