// What an expression is: a lazy tree whose nodes know their shape and element type, and nothing
// about where or how they are evaluated (that is the backend's evaluator).
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

#include "../core/element_type.hpp"
#include "../core/shape.hpp"

namespace meld {

/// \addtogroup expressions
/// @{

/// Base of every expression node and of tensors and views (which are leaf expressions).
struct expression_tag {};

/// An expression: a tensor, a view, or a node built from them by meld's operators and functions
/// (anything derived from expression_tag). meld's operators and math functions apply only where
/// an operand is an expression, so that they never capture `a + b` over other types.
template <class E>
concept expression = std::derived_from<std::remove_cvref_t<E>, expression_tag>;

/// The backend of a scalar: it combines with any other backend.
struct no_backend {};

namespace detail {

// The backend that two operands share. Operands on different backends cannot meet in one
// expression: that would hide a transfer.
template <class A, class B>
struct common_backend {
  static_assert(std::is_same_v<A, B>,
                "meld: operands of one expression live on different backends; copy one of them "
                "explicitly with meld::to<Backend>(t) first");
  using type = A;
};
template <class A>
struct common_backend<A, no_backend> {
  using type = A;
};
template <class B>
struct common_backend<no_backend, B> {
  using type = B;
};
template <>
struct common_backend<no_backend, no_backend> {
  using type = no_backend;
};

}  // namespace detail

template <class... Bs>
struct common_backend;
template <class B>
struct common_backend<B> {
  using type = B;
};
template <class A, class B, class... Rest>
struct common_backend<A, B, Rest...>
    : common_backend<typename detail::common_backend<A, B>::type, Rest...> {};

template <class... Bs>
using common_backend_t = typename common_backend<Bs...>::type;

// How an operand is held inside a node. The default: by value (nodes are small and hold their
// leaves as pointers or views). Tensors specialize it: an lvalue tensor is held by pointer, an
// rvalue tensor gives its storage to a view, so that `auto e = x + f();` never dangles.
template <class E>
struct operand_closure {
  using type = std::remove_cvref_t<E>;
  template <class U>
  static type make(U&& e) {
    return type(std::forward<U>(e));
  }
};

template <class E>
using closure_t = typename operand_closure<E>::type;

template <class E>
closure_t<E> make_closure(E&& e) {
  return operand_closure<E>::make(std::forward<E>(e));
}

namespace detail {
// The uniform shape of a scalar: it matches any shape (see expr/map.hpp).
inline const shape_t any_shape{};
}  // namespace detail

// A scalar held in an expression: broadcast to every position.
template <class T>
class scalar_expr : public expression_tag {
 public:
  using value_type = T;
  using backend_type = no_backend;
  static constexpr int cost = 0;

  explicit scalar_expr(T v) : value_(v) {}
  const shape_t& shape() const { return detail::any_shape; }
  const shape_t* uniform_shape() const { return &detail::any_shape; }
  T value() const { return value_; }

 private:
  T value_;
};

template <class E>
inline constexpr bool is_scalar_expr = false;
template <class T>
inline constexpr bool is_scalar_expr<scalar_expr<T>> = true;

/// The seam between expressions and backends: each backend specializes `executor<Backend>` (see
/// backend/concept.hpp for what it provides).
template <class Backend>
struct executor;

/// The element type of an expression or tensor E.
template <class E>
using value_t = typename std::remove_cvref_t<E>::value_type;

namespace detail {
template <class E, class = void>
struct backend_of {
  using type = no_backend;  // scalars, and the inputs of lowered trees (cursors, device leaves)
};
template <class E>
struct backend_of<E, std::void_t<typename E::backend_type>> {
  using type = typename E::backend_type;
};
}  // namespace detail

/// The backend of an expression or tensor E (no_backend for scalars).
template <class E>
using backend_t = typename detail::backend_of<std::remove_cvref_t<E>>::type;

/// @}

}  // namespace meld
