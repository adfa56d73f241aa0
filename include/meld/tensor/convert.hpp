// Copies between backends: meld::to<Backend>(x). The only way elements cross between host and
// device memory (the backends count it where they can: sim's transfer counters).
#pragma once

#include <algorithm>
#include <type_traits>

#include "../backend/backend.hpp"
#include "../backend/device.hpp"
#include "../backend/lowering.hpp"
#include "tensor.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// A contiguous copy of a tensor, a view or any expression, on backend To (on its current device
/// for device backends). Waits for queued work on the source where the host must read it.
template <class To, class T, class From>
tensor<T, To> to(const tensor<T, From>& t) {
  tensor<T, To> out(t.shape(), uninitialized);
  if (t.size() == 0) return out;
  if constexpr (From::host_accessible && To::host_accessible) {
    const T* src = t.data();  // waits for queued writes of t
    std::copy(src, src + t.size(), out.data());
  } else if constexpr (From::host_accessible) {
    executor<To>::copy_from_host(out, t.data());
  } else if constexpr (To::host_accessible) {
    executor<From>::copy_to_host(out.data(), t);
  } else if constexpr (std::is_same_v<From, To>) {
    executor<To>::copy(out, t);  // between devices of one backend
  } else {
    return to<To>(to<cpu<>>(t));  // between device backends: through the host
  }
  return out;
}

/// Evaluates an expression (a view, say) and copies the result to backend To. On a device
/// backend the expression is evaluated on its operands' device, whichever is current.
template <class To, expression E>
requires(!detail::is_tensor<std::remove_cvref_t<E>>) tensor<value_t<E>, To> to(const E& e) {
  using From = backend_t<E>;
  if constexpr (!From::host_accessible) {
    const int device = detail::operand_device(e);
    if (device >= 0 && device != memory<From>::current_device()) {
      tensor<value_t<E>, From> staged = [&] {
        device_guard<From> on(device);
        return tensor<value_t<E>, From>(e);
      }();
      return to<To>(staged);
    }
  }
  return to<To>(tensor<value_t<E>, From>(e));
}

namespace detail {
// The elements of a tensor or view of any backend, contiguous on the host: a view is gathered
// where it lives first, so that a device view costs one transfer of its own elements.
template <class X>
tensor<std::remove_const_t<value_t<X>>, cpu<>> host_elements(const X& x) {
  if constexpr (is_tensor<X>) {
    return to<cpu<>>(x);
  } else {
    return to<cpu<>>(tensor<std::remove_const_t<value_t<X>>, typename X::backend_type>(x));
  }
}
}  // namespace detail

/// Copies the elements of src into dst, which has src's shape: between devices of one backend
/// (device to device: replicas of a model on several GPUs), between the host and a device, or
/// within one device (where any layouts work). Across devices or backends both must be contiguous.
/// Throws shape_error for different shapes.
template <class Dst, class Src>
void copy(Dst&& dst, const Src& src) {
  using D = std::remove_cvref_t<Dst>;
  using To = typename D::backend_type;
  using From = typename Src::backend_type;
  if (!(dst.shape() == src.shape()))
    detail::raise<shape_error>("copy: a source of shape ", src.shape(),
                               " into a destination of shape ", dst.shape());
  if (src.size() == 0) return;
  if constexpr (std::is_same_v<To, From>) {
    if (dst.device() == src.device()) {
      dst.view() = src;
      return;
    }
  }
  if (!dst.is_contiguous() || !src.is_contiguous())
    detail::raise<shape_error>("copy: between devices, source (strides ", src.strides(),
                               ") and destination (strides ", dst.strides(),
                               ") must be contiguous");
  if constexpr (std::is_same_v<To, From>) {
    executor<To>::copy(dst, src);
  } else if constexpr (From::host_accessible && To::host_accessible) {
    dst.view() = to<To>(src);
  } else if constexpr (From::host_accessible) {
    executor<To>::copy_from_host(dst, src.data());
  } else if constexpr (To::host_accessible) {
    executor<From>::copy_to_host(dst.data(), src);
  } else {
    meld::copy(dst, to<cpu<>>(src));  // between device backends: through the host
  }
}

/// @}

}  // namespace meld
