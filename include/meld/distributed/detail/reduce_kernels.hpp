// The element-wise work of collectives: reductions of one buffer into another through meld's
// SIMD evaluation (one fused, vectorized loop per call), and plain copies.
#pragma once

#include <cstring>

#include "../../backend/host.hpp"
#include "../../expr/operators.hpp"
#include "../../tensor/tensor.hpp"
#include "../../tensor/tensor_view.hpp"
#include "../communicator.hpp"

namespace meld::detail::distributed {

// A contiguous 1-d view of raw memory (no owner: the memory outlives the view).
template <class T>
tensor_view<T> raw_view(T* p, index_t n) {
  return tensor_view<T>(nullptr, p, layout{shape_t{n}, strides_t{1}, 0});
}

// dst[i] = op(dst[i], src[i]) for i < n.
template <class T>
void reduce_into(T* dst, const T* src, index_t n, reduce_op op) {
  if (n <= 0) return;
  const auto d = raw_view(dst, n);
  const auto s = raw_view(src, n);
  switch (op) {
    case reduce_op::sum:
      d = d + s;
      break;
    case reduce_op::max:
      d = maximum(d, s);
      break;
    case reduce_op::min:
      d = minimum(d, s);
      break;
  }
}

// dst[i] = op(a[i], b[i]) for i < n (dst may be a or b).
template <class T>
void reduce_to(T* dst, const T* a, const T* b, index_t n, reduce_op op) {
  if (n <= 0) return;
  const auto d = raw_view(dst, n);
  const auto x = raw_view(a, n);
  const auto y = raw_view(b, n);
  switch (op) {
    case reduce_op::sum:
      d = x + y;
      break;
    case reduce_op::max:
      d = maximum(x, y);
      break;
    case reduce_op::min:
      d = minimum(x, y);
      break;
  }
}

template <class T>
void copy_elements(T* dst, const T* src, index_t n) {
  if (n > 0 && dst != src) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
}

// Bounds of part i of n parts of [0, count): the first count % n parts get one more element.
inline index_t part_begin(index_t count, index_t parts, index_t i) {
  return count / parts * i + std::min(i, count % parts);
}

}  // namespace meld::detail::distributed
