// Tensors from data the caller has: copies of a range or a span (from_range, from_span), and
// non-owning views of the caller's memory (borrow).
#pragma once

#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "../backend/backend.hpp"
#include "../core/checked.hpp"
#include "tensor.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {

template <class T, class Backend>
tensor<T, Backend> copy_host_values(const T* values, index_t n, const std::optional<shape_t>& shape,
                                    const char* what) {
  const shape_t s = shape ? *shape : shape_t{n};
  const index_t need = checked_size(s, what);
  if (need != n)
    raise<shape_error>(what, ": ", n, " values cannot fill shape ", s, " (", need, " elements)");
  tensor<T, Backend> out(s, uninitialized);
  if (n) executor<Backend>::copy_from_host(out, values);
  return out;
}

// The element type of a braced list of T: T's compute type (float for bfloat16, whose
// conversion from float is explicit); never void (from_range<void>(range) is the range overload,
// and a list of void cannot even be named while that is worked out).
struct not_a_list_element {};
template <class T>
using list_element = std::conditional_t<std::is_void_v<T>, not_a_list_element, compute_t<T>>;

template <class Range>
using range_value = std::remove_cvref_t<decltype(*std::begin(std::declval<const Range&>()))>;

}  // namespace detail

/// A tensor holding a copy of the values of any range (std::vector, std::array, a C array, a
/// std::list, ...), converted to T (by default the range's own element type), of shape {n} or the
/// given shape, on Backend (copied to the device for device backends). Throws shape_error when the
/// shape's element count is not the range's: from_range<float>(v, {2, 3}) needs 6 values.
template <class T = void, class Backend = cpu<>, class Range>
requires requires(const Range& r) {
  std::begin(r);
  std::end(r);
}
auto from_range(const Range& values, std::optional<shape_t> shape = std::nullopt) {
  using V = std::conditional_t<std::is_void_v<T>, detail::range_value<Range>, T>;
  static_assert(element_type<V>,
                "meld::from_range: the range's elements are not a tensor element type; name one: "
                "meld::from_range<float>(values)");
  std::vector<V> flat;
  for (const auto& v : values) flat.push_back(static_cast<V>(v));
  return detail::copy_host_values<V, Backend>(flat.data(), static_cast<index_t>(flat.size()), shape,
                                              "from_range");
}

/// A rank-1 tensor (or one of the given shape) of the listed values converted to T:
/// meld::from_range<float>({1, 2.5, 3}). (The literal of rank 1; tensor<float>({2, 3}) is a shape.)
template <class T, class Backend = cpu<>>
requires element_type<T> tensor<T, Backend> from_range(
    std::type_identity_t<std::initializer_list<detail::list_element<T>>> values,
    std::optional<shape_t> shape = std::nullopt) {
  if constexpr (std::is_same_v<detail::list_element<T>, T>) {
    return detail::copy_host_values<T, Backend>(values.begin(), static_cast<index_t>(values.size()),
                                                shape, "from_range");
  } else {
    const std::vector<T> converted(values.begin(), values.end());  // explicit conversions
    return detail::copy_host_values<T, Backend>(
        converted.data(), static_cast<index_t>(converted.size()), shape, "from_range");
  }
}

/// A tensor holding a copy of the span's elements, of shape {n} or the given shape, on Backend.
/// (For a raw pointer: from_span(std::span(ptr, n), shape).) Throws shape_error when the shape's
/// element count is not the span's.
template <class Backend = cpu<>, class T, std::size_t N>
tensor<std::remove_const_t<T>, Backend> from_span(std::span<T, N> values,
                                                  std::optional<shape_t> shape = std::nullopt) {
  using V = std::remove_const_t<T>;
  static_assert(element_type<V>,
                "meld::from_span: the span's elements are not a tensor element "
                "type (float, double, std::int32_t, std::int64_t)");
  return detail::copy_host_values<V, Backend>(values.data(), static_cast<index_t>(values.size()),
                                              shape, "from_span");
}

/// A view of memory that the caller owns, without copying: element (i, j, ...) is
/// data[i * strides[0] + j * strides[1] + ...] (strides in elements, row-major by default; they
/// may be negative or 0). The view, every view taken of it and every expression that reads it
/// use the caller's memory, which must stay valid until the last of them is gone (and, on
/// cpu<async>, until work queued on them has run: view.wait()). Writing through the view writes
/// the caller's memory; a view of const T is read-only. Host backends only (cpu<sync>,
/// cpu<async>): a device backend's memory is not the host's. Throws shape_error for a bad shape,
/// strides of another rank, or a null pointer with elements.
template <class Backend = cpu<>, class T>
tensor_view<T, Backend> borrow(T* data, const shape_t& shape,
                               std::optional<strides_t> strides = std::nullopt) {
  static_assert(Backend::host_accessible,
                "meld::borrow: only host backends can view the caller's memory; copy it to a "
                "device with meld::from_span<Backend>(...) instead");
  using V = std::remove_const_t<T>;
  static_assert(element_type<V>,
                "meld::borrow: T must be float, double, std::int32_t or "
                "std::int64_t");
  const index_t n = checked_size(shape, "borrow");
  const strides_t s = strides ? *strides : row_major_strides(shape);
  if (s.size() != shape.size())
    detail::raise<shape_error>("borrow: strides ", s, " do not match the rank of shape ", shape);
  if (n == 0) return tensor_view<T, Backend>(nullptr, nullptr, layout{shape, s, 0});
  if (!data) detail::raise<shape_error>("borrow: a null pointer for shape ", shape);
  // The number of elements the view spans (its storage's size; only informative).
  index_t reach = 1;
  for (int a = 0; a < shape.size(); ++a) {
    index_t step = 0;
    if (s[a] == std::numeric_limits<index_t>::min() ||
        !detail::mul_fits(shape[a] - 1, s[a] < 0 ? -s[a] : s[a], step) ||
        !detail::add_fits(reach, step, reach))
      detail::raise<shape_error>("borrow: shape ", shape, " with strides ", s,
                                 " spans more elements than an index can count");
  }
  auto st = detail::make_borrowed_storage<storage<V, Backend>>(const_cast<V*>(data), reach);
  return tensor_view<T, Backend>(std::move(st), data, layout{shape, s, 0});
}

/// @}

}  // namespace meld
