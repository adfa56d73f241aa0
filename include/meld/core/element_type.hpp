// Element types a tensor may hold, their names, and how scalars combine with them.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "bfloat16.hpp"
#include "half.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// The element types a tensor stores. Backends may add storage-only types by specializing this
/// trait.
template <class T>
struct is_element_type
    : std::bool_constant<std::is_same_v<T, float> || std::is_same_v<T, double> ||
                         std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
                         std::is_same_v<T, bfloat16> || std::is_same_v<T, half>> {};

/// A type a tensor stores (const or not): float, double, std::int32_t, std::int64_t, bfloat16 and
/// half (core/bfloat16.hpp, core/half.hpp: stored in 16 bits, computed in float), and what a
/// backend adds through is_element_type. The kernels, and the element codes that communicators
/// and checkpoints record, exist for these only.
template <class T>
concept element_type = is_element_type<std::remove_const_t<T>>::value;

/// A scalar that mixes with expressions (`2.f * x`, `x + 1`): any arithmetic type, bool
/// included. It takes the element type of the expression it meets.
template <class S>
concept scalar_type = std::is_arithmetic_v<std::remove_cvref_t<S>>;

/// The name of element type T in messages ("float", "int64", ...).
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
  else if constexpr (std::is_same_v<T, bfloat16>)
    return "bfloat16";
  else if constexpr (std::is_same_v<T, half>)
    return "float16";
  else
    return "unknown";
}

/// A stable number per element type for what leaves the process: checkpoint files and the call
/// descriptions that ranks exchange. 0 is never a valid code; the numbers never change.
template <class T>
constexpr std::uint8_t element_code() {
  if constexpr (std::is_same_v<T, float>)
    return 1;
  else if constexpr (std::is_same_v<T, double>)
    return 2;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return 3;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return 4;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return 5;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return 6;
  else if constexpr (std::is_same_v<T, half>)
    return 7;
  else
    return 0;
}

/// The name of an element code (as element_code gives), "?" for an unknown one.
constexpr const char* element_code_name(std::uint32_t code) {
  switch (code) {
    case 1:
      return "float32";
    case 2:
      return "float64";
    case 3:
      return "int32";
    case 4:
      return "int64";
    case 5:
      return "uint8";
    case 6:
      return "bfloat16";
    case 7:
      return "float16";
    default:
      return "an unknown element type";
  }
}

/// Bytes per element of a code (0 for an unknown code).
constexpr std::size_t element_code_size(std::uint32_t code) {
  switch (code) {
    case 1:
    case 3:
      return 4;
    case 2:
    case 4:
      return 8;
    case 5:
      return 1;
    case 6:
    case 7:
      return 2;
    default:
      return 0;
  }
}

namespace detail {
// The type kernels compute in for a stored element type: float for the 16-bit floating types.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<bfloat16> {
  using type = float;
};
template <>
struct compute_type<half> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;
}  // namespace detail

/// A scalar combined with an expression of element type T is "weak", as in numpy: it takes T's type
/// (2.0 * float tensor stays float, 2 * int32 tensor stays int32), except that a floating scalar
/// with an integer expression gives the scalar's floating type (int tensor * 0.5 is not truncated).
template <class T, class S>
using scalar_promote_t =
    std::conditional_t<std::is_floating_point_v<S> && !std::is_floating_point_v<T>, S,
                       std::conditional_t<std::is_same_v<T, bool>, S, T>>;

/// Whether an expression of element type From may be assigned to a tensor of type To without
/// meld::cast: the same type, or one that keeps every value's category and range. Categories
/// rank bool < integer < floating (PyTorch's promotion order); within one, the wider type holds
/// the narrower. So int32 -> int64, float32 -> float64, bool or integers -> floats are implicit;
/// floating -> integer (truncation) and float64 -> float32 or int64 -> int32 (range) need
/// meld::cast<To>. Into the 16-bit floating types (bfloat16, half) every number converts: rounding
/// is what they are for.
template <class From, class To>
inline constexpr bool converts_without_loss = [] {
  if constexpr (std::is_same_v<From, To> || std::is_same_v<From, bool> ||
                !std::is_arithmetic_v<From> || !std::is_arithmetic_v<To>)
    return true;
  else if constexpr (std::is_floating_point_v<From>)
    return std::is_floating_point_v<To> && sizeof(To) >= sizeof(From);
  else if constexpr (std::is_floating_point_v<To>)
    return true;
  else
    return !std::is_same_v<To, bool> && sizeof(To) >= sizeof(From) &&
           std::is_signed_v<To> == std::is_signed_v<From>;
}();

/// @}

}  // namespace meld
