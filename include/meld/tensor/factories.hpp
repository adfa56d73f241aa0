// Tensors made from a shape and a rule: zeros, ones, full, arange, linspace.
#pragma once

#include <cmath>
#include <type_traits>

#include "convert.hpp"
#include "tensor.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {
// Elements computed from their index, where the tensor lives (the backends' generate operation).
template <class T>
struct arange_values {
  T start, step;
  MELD_HD T operator()(index_t i) const { return static_cast<T>(start + static_cast<T>(i) * step); }
};
template <class T>
struct linspace_values {
  double start, stop;
  index_t n;
  T last;
  MELD_HD T operator()(index_t i) const {
    if (n > 1 && i == n - 1) return last;
    return static_cast<T>(n == 1 ? start
                                 : start + (stop - start) * static_cast<double>(i) /
                                               static_cast<double>(n - 1));
  }
};
template <class T, class Backend, class G>
tensor<T, Backend> generated(index_t n, const G& g) {
  tensor<T, Backend> t({n}, uninitialized);
  executor<Backend>::generate(t, g);
  return t;
}
}  // namespace detail

/// A tensor of the shape, filled with zeros.
template <class T, class Backend = cpu<>>
tensor<T, Backend> zeros(const shape_t& shape) {
  return tensor<T, Backend>(shape);
}

/// A tensor of the shape, filled with value.
template <class T, class Backend = cpu<>>
tensor<T, Backend> full(const shape_t& shape, T value) {
  tensor<T, Backend> t(shape, uninitialized);
  t.fill(value);
  return t;
}

/// A tensor of the shape, filled with ones.
template <class T, class Backend = cpu<>>
tensor<T, Backend> ones(const shape_t& shape) {
  return full<T, Backend>(shape, T(1));
}

/// start, start + step, ... while below stop (above it for a negative step), as numpy.arange.
template <class T, class Backend = cpu<>>
tensor<T, Backend> arange(T start, T stop, T step = T(1)) {
  if (step == T(0)) throw shape_error("arange: step is 0");
  const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                 static_cast<double>(step));
  if (!(count < 9.2e18)) detail::raise<shape_error>("arange: ", count, " elements are too many");
  const index_t n = count > 0 ? static_cast<index_t>(count) : 0;
  return detail::generated<T, Backend>(n, detail::arange_values<T>{start, step});
}

/// arange(0, stop, 1).
template <class T, class Backend = cpu<>>
tensor<T, Backend> arange(T stop) {
  return arange<T, Backend>(T(0), stop, T(1));
}

/// n evenly spaced values from start to stop, both included (n >= 2) or start alone (n == 1).
template <class T, class Backend = cpu<>>
tensor<T, Backend> linspace(T start, T stop, index_t n) {
  if (n < 0) detail::raise<shape_error>("linspace: negative count ", n);
  return detail::generated<T, Backend>(
      n,
      detail::linspace_values<T>{static_cast<double>(start), static_cast<double>(stop), n, stop});
}

/// @}

}  // namespace meld
