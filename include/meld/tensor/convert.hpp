// Copies between backends: meld::to<Backend>(t).
#pragma once

#include <algorithm>

#include "tensor.hpp"

namespace meld {

template <class To, class T, class From>
tensor<T, To> to(const tensor<T, From>& t) {
  tensor<T, To> out(t.shape(), uninitialized);
  if constexpr (requires { executor<To>::copy_from(out, t); }) {
    executor<To>::copy_from(out, t);  // to a device
  } else if constexpr (requires { executor<From>::copy_to(out, t); }) {
    executor<From>::copy_to(out, t);  // from a device
  } else {
    const T* src = t.data();  // waits for queued writes of t
    std::copy(src, src + t.size(), out.data());
  }
  return out;
}

}  // namespace meld
