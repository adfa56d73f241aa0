// Tensors made from a shape and a rule: zeros, ones, full, arange, linspace.
#pragma once

#include <cmath>
#include <type_traits>

#include "convert.hpp"
#include "tensor.hpp"

namespace meld {

namespace detail {
// Factories that compute elements on the host build device tensors through a host tensor.
template <class Backend, class T>
tensor<T, Backend> on_backend(tensor<T, cpu<>>&& host) {
  if constexpr (std::is_same_v<Backend, cpu<>>)
    return std::move(host);
  else
    return to<Backend>(host);
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
  if (!(count < 9.2e18))
    throw shape_error(detail::cat("arange: ", count, " elements are too many"));
  const index_t n = count > 0 ? static_cast<index_t>(count) : 0;
  tensor<T, cpu<>> t({n}, uninitialized);
  T* p = t.data();
  for (index_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<T>(i) * step);
  return detail::on_backend<Backend>(std::move(t));
}

/// arange(0, stop, 1).
template <class T, class Backend = cpu<>>
tensor<T, Backend> arange(T stop) {
  return arange<T, Backend>(T(0), stop, T(1));
}

/// n evenly spaced values from start to stop, both included (n >= 2) or start alone (n == 1).
template <class T, class Backend = cpu<>>
tensor<T, Backend> linspace(T start, T stop, index_t n) {
  if (n < 0) throw shape_error(detail::cat("linspace: negative count ", n));
  tensor<T, cpu<>> t({n}, uninitialized);
  T* p = t.data();
  const double a = static_cast<double>(start), b = static_cast<double>(stop);
  for (index_t i = 0; i < n; ++i)
    p[i] = static_cast<T>(
        n == 1 ? a : a + (b - a) * static_cast<double>(i) / static_cast<double>(n - 1));
  if (n > 1) p[n - 1] = stop;
  return detail::on_backend<Backend>(std::move(t));
}

}  // namespace meld
