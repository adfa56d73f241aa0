// Copies between backends: meld::to<Backend>(x). The only way elements cross between host and
// device memory (the backends count it where they can: sim's transfer counters).
#pragma once

#include <algorithm>
#include <type_traits>

#include "../backend/backend.hpp"
#include "tensor.hpp"

namespace meld {

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

/// Evaluates an expression and copies the result to backend To.
template <class To, expression E>
requires(!detail::is_tensor<std::remove_cvref_t<E>>) tensor<value_t<E>, To> to(const E& e) {
  return to<To>(tensor<value_t<E>, backend_t<E>>(e));
}

}  // namespace meld
