// The buffers collectives accept, and the one place where a user's argument becomes what a
// communicator moves: a comm_buffer (a pointer and an element count in the communicator's memory).
//   host memory (thread_comm, mpi_comm): std::span, std::vector, meld::tensor, and contiguous
//     meld::tensor_view; as_span turns each into a std::span over its elements, after the queued
//     work that touches them (asynchronous backends). Tensors of a device backend whose memory
//     the host can alias (memory<B>::host_alias: sim's readable mapping, what peer access is to
//     NCCL on GPUs) are moved in place, device to device, never copied to the host. Tensors of a
//     device backend without an alias (CUDA through thread_comm or mpi_comm: workers sharing a GPU,
//     clusters without NCCL) are staged: the collective moves a host copy (one counted transfer
//     each way), written back into the tensor when its request completes (staged_request).
//   device memory (nccl_comm): tensors and contiguous views of a backend it declares
//     (device_comm_backend: cuda), moved in place and ordered by the storage's events; or
//     std::span over device memory (the caller vouches for it).
// A communicator that reaches another kind of memory, or a tensor of a device backend, is one
// more case of to_buffer (and of buffer_for), not a change of the communicators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/host.hpp"
#include "../tensor/convert.hpp"
#include "../tensor/tensor.hpp"
#include "../tensor/tensor_view.hpp"
#include "communicator.hpp"

namespace meld {

/// \addtogroup distributed
/// @{

/// Where a communicator's collectives read and write.
enum class comm_memory : std::uint8_t { host, device };

/// What a collective moves: size() contiguous elements at data(), in the memory of the
/// communicator that takes it (a device pointer for a device communicator: never read it on the
/// host). Communicators implement their collectives on comm_buffers (see collectives.hpp).
template <class T>
class comm_buffer {
 public:
  /// The element type.
  using element_type = T;

  /// size elements at data; `order`: the ordering state of the storage they belong to, for a
  /// device communicator that enqueues on its own stream (access_tracking<B>::type*), or null.
  constexpr comm_buffer(T* data, std::size_t size, void* order = nullptr) noexcept
      : data_(data), size_(size), order_(order) {}
  /// A buffer of const elements from one of mutable elements.
  template <class U>
  requires(std::is_same_v<const U, T> &&
           !std::is_same_v<U, T>) constexpr comm_buffer(const comm_buffer<U>& b) noexcept
      : data_(b.data()), size_(b.size()), order_(b.order()) {}

  /// The first element.
  constexpr T* data() const noexcept { return data_; }
  /// The number of elements.
  constexpr std::size_t size() const noexcept { return size_; }
  /// The storage's ordering state (see the constructor), or null.
  constexpr void* order() const noexcept { return order_; }

 private:
  T* data_;
  std::size_t size_;
  void* order_;
};

/// A collective's argument that the communicator moves through a host copy (copied to the host
/// before, and back after, if written) although it could reach its memory in place: what a host
/// communicator does by itself with a CUDA tensor. For a test of that path on the simulated device:
/// `comm.allreduce(meld::through_host(t))`.
template <class X>
struct through_host_arg {
  X& arg;  ///< the tensor or view
};
/// Wraps a tensor or view of any backend for a collective that stages it through host memory.
template <class X>
through_host_arg<X> through_host(X& x) {
  return {x};
}

/// Whether device communicators take tensors of backend B: its memory, and its ordering state in
/// comm_buffer::order (nccl_comm.hpp says so for cuda).
template <class B>
inline constexpr bool device_comm_backend = false;

/// @}

}  // namespace meld

namespace meld::detail::distributed {

template <class T, std::size_t E>
std::span<T> as_span(std::span<T, E> s) {
  return std::span<T>(s.data(), s.size());
}
template <class T, class A>
std::span<T> as_span(std::vector<T, A>& v) {
  return std::span<T>(v.data(), v.size());
}
template <class T, class A>
std::span<const T> as_span(const std::vector<T, A>& v) {
  return std::span<const T>(v.data(), v.size());
}
// Whether communicators on host memory can move B's tensors: host memory, or device memory the
// host can alias.
template <class B>
concept host_reachable = B::host_accessible || requires(float* p) {
  { memory<B>::host_alias(p) } -> std::same_as<float*>;
};

// A tensor or view of a device backend that host memory cannot reach, or an argument wrapped in
// through_host: host communicators stage it through a host copy (collectives.hpp).
template <class X>
concept device_tensor_like = requires(const X& x) {
  typename X::backend_type;
  typename X::value_type;
  x.storage_ptr();
  x.shape();
};
template <class X>
inline constexpr bool is_through_host = false;
template <class X>
inline constexpr bool is_through_host<through_host_arg<X>> =
    device_tensor_like<std::remove_cvref_t<X>>;
template <class X>
concept staged_tensor_arg = is_through_host<X> ||
    (device_tensor_like<X> && !host_reachable<typename X::backend_type>);

// The tensor or view a staged argument stands for.
template <class X>
auto& staged_target(X& x) {
  if constexpr (is_through_host<std::remove_cvref_t<X>>)
    return x.arg;
  else
    return x;
}

// The request of a collective on a staged host copy: wait() finishes the collective, then copies
// the result back into the device tensor it was made from (none for an input). A collective that
// fails leaves the tensor as it was. A view written back is held by value: an asynchronous
// collective may outlive the view it was given (`comm.reduce_scatter_async(in, out.slice(...))`).
template <class Request, class Target, class T>
class staged_request {
  static constexpr bool by_value = !is_tensor<std::remove_const_t<Target>>;

 public:
  staged_request() = default;
  staged_request(Request inner, tensor<T> host, Target* back)
      : inner_(std::move(inner)), host_(std::move(host)) {
    if (!back) return;
    if constexpr (by_value)
      back_.emplace(*back);
    else
      back_ = back;
  }

  void wait() {
    inner_.wait();
    if constexpr (by_value) {
      if (back_) meld::copy(*back_, host_);
      back_.reset();
    } else {
      if (Target* b = std::exchange(back_, nullptr)) meld::copy(*b, host_);
    }
    host_ = tensor<T>();
  }
  bool ready() { return inner_.ready(); }

 private:
  Request inner_;
  tensor<T> host_;
  std::conditional_t<by_value, std::optional<std::remove_const_t<Target>>, Target*> back_{};
};

// The elements of a tensor or view of a host-reachable backend, once the queued work that
// touches them has run (all of it before a collective writes them, the writes before it reads).
template <class E, class X>
std::span<E> elements_of(const X& x, bool written) {
  using B = typename X::backend_type;  // host_reachable: as_span's constraint
  if (x.storage_ptr()) x.storage_ptr()->access().wait_host(written);
  E* p = x.raw_data();
  if constexpr (!B::host_accessible) p = memory<B>::host_alias(p);
  return std::span<E>(p, static_cast<std::size_t>(x.size()));
}

template <class T, host_reachable B>
std::span<T> as_span(tensor<T, B>& t) {
  return elements_of<T>(t, true);
}
template <class T, host_reachable B>
std::span<const T> as_span(const tensor<T, B>& t) {
  return elements_of<const T>(t, false);
}
template <class T, host_reachable B>
std::span<T> as_span(const tensor_view<T, B>& v) {
  if (!v.is_contiguous())
    throw shape_error(cat("collective: a view of shape ", v.shape(), " and strides ", v.strides(),
                          " is not contiguous; copy it into a tensor first"));
  return elements_of<T>(v, !std::is_const_v<T>);
}

// Anything as_span accepts.
template <class X>
concept buffer = requires(X&& x) {
  as_span(std::forward<X>(x));
};

template <class X>
using buffer_element_t = typename decltype(as_span(std::declval<X&>()))::element_type;

template <class X>
inline constexpr bool is_span = false;
template <class T, std::size_t E>
inline constexpr bool is_span<std::span<T, E>> = true;

// A tensor or view of a backend whose memory device communicators move.
template <class X>
concept device_tensor_arg = requires(const X& x) {
  typename X::backend_type;
  x.raw_data();
  x.storage_ptr();
}
&&device_comm_backend<typename X::backend_type>;

// The arguments a communicator of memory M takes.
template <class X, comm_memory M>
concept buffer_for = (M == comm_memory::host &&
                      (buffer<X> || staged_tensor_arg<std::remove_cvref_t<X>>)) ||
                     (M == comm_memory::device && (is_span<std::remove_cvref_t<X>> ||
                                                   device_tensor_arg<std::remove_cvref_t<X>>));

// The one conversion from a collective's argument to what the communicator moves.
template <comm_memory M, class X>
requires buffer_for<X, M>
auto to_buffer(X& x) {
  using A = std::remove_cvref_t<X>;
  if constexpr (M == comm_memory::host) {
    const auto s = as_span(x);
    return comm_buffer<typename decltype(s)::element_type>(s.data(), s.size());
  } else if constexpr (device_tensor_arg<A>) {
    // In place on the device; the communicator orders its stream after the storage's work.
    using E = std::remove_pointer_t<decltype(x.raw_data())>;
    if (!x.is_contiguous())
      throw shape_error(cat("collective: a view of shape ", x.shape(), " and strides ", x.strides(),
                            " is not contiguous; copy it into a tensor first"));
    void* order = x.storage_ptr() ? static_cast<void*>(&x.storage_ptr()->access()) : nullptr;
    return comm_buffer<E>(x.raw_data(), static_cast<std::size_t>(x.size()), order);
  } else {
    return comm_buffer<typename A::element_type>(x.data(), x.size());
  }
}

}  // namespace meld::detail::distributed
