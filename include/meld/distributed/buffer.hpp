// Contiguous buffers that collectives accept: std::span, std::vector, meld::tensor, and
// contiguous meld::tensor_view. as_span turns each into a std::span over its elements.
#pragma once

#include <span>
#include <type_traits>
#include <vector>

#include "../backend/cpu/executor.hpp"
#include "../tensor/tensor.hpp"
#include "../tensor/tensor_view.hpp"
#include "communicator.hpp"

namespace meld::detail::dist {

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
template <class T, class B>
std::span<T> as_span(tensor<T, B>& t) {
  return std::span<T>(t.data(), static_cast<std::size_t>(t.size()));
}
template <class T, class B>
std::span<const T> as_span(const tensor<T, B>& t) {
  return std::span<const T>(t.data(), static_cast<std::size_t>(t.size()));
}
template <class T, class B>
std::span<T> as_span(const tensor_view<T, B>& v) {
  if (!v.is_contiguous())
    throw shape_error(cat("collective: a view of shape ", v.shape(), " and strides ", v.strides(),
                          " is not contiguous; copy it into a tensor first"));
  return std::span<T>(v.data(), static_cast<std::size_t>(v.size()));
}

// Anything as_span accepts.
template <class X>
concept buffer = requires(X&& x) {
  as_span(std::forward<X>(x));
};

template <class X>
using buffer_element_t = typename decltype(as_span(std::declval<X&>()))::element_type;

}  // namespace meld::detail::dist
