// Element types a tensor may hold, their names, and how scalars combine with them.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

namespace meld {

// The element types a tensor stores. Backends may add storage-only types (e.g. half) by
// specializing this trait.
template <class T>
struct is_element_type
    : std::bool_constant<std::is_same_v<T, float> || std::is_same_v<T, double> ||
                         std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>> {};

template <class T>
concept element_type = is_element_type<std::remove_const_t<T>>::value;

// Scalars that mix with expressions: any arithmetic type, bool included.
template <class S>
concept scalar_type = std::is_arithmetic_v<std::remove_cvref_t<S>>;

template <class T>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float32";
  else if constexpr (std::is_same_v<T, double>)
    return "float64";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "int64";
  else if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else
    return "unknown";
}

// A scalar combined with an expression of element type T is "weak", as in numpy: it takes T's type
// (2.0 * float tensor stays float, 2 * int32 tensor stays int32), except that a floating scalar
// with an integer expression gives the scalar's floating type (int tensor * 0.5 is not truncated).
template <class T, class S>
using scalar_promote_t =
    std::conditional_t<std::is_floating_point_v<S> && !std::is_floating_point_v<T>, S,
                       std::conditional_t<std::is_same_v<T, bool>, S, T>>;

}  // namespace meld
