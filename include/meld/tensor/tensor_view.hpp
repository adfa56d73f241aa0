// tensor_view: a non-owning, strided window onto a tensor's storage. Cheap to copy (copies share
// the window); assigning to a view writes through into the viewed elements.
#pragma once

#include <type_traits>
#include <utility>

#include "../backend/cpu/cpu.hpp"
#include "../expr/operators.hpp"
#include "tensor_base.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {
template <class Dst, class E>
void assign_to_view(const Dst& dst, E&& e, const char* what);
}

/// A non-owning, strided view of elements of a tensor: slices, transposes, reshapes and broadcasts
/// of a tensor are views. Assigning to a view writes the viewed elements (the expression must
/// broadcast to the view's shape, which never changes). The view keeps the storage alive.
template <class T, class Backend = cpu<>>
class tensor_view : public detail::strided_tensor<tensor_view<T, Backend>, T, Backend> {
  using base = detail::strided_tensor<tensor_view<T, Backend>, T, Backend>;
  friend base;

 public:
  /// The reference-counted memory that the view shares with its tensor.
  using typename base::storage_type;
  /// The element type without const.
  using typename base::value_type;
  /// Whether a const object can still write the elements (views: yes; tensors: no).
  static constexpr bool shallow_const = true;

  /// A view without storage: a null data pointer and an empty shape.
  tensor_view() = default;
  /// A view of storage st, at base_data plus the layout's offset, with its shape and strides.
  /// (An empty tensor has no storage: its views keep the null pointer, whatever their offset,
  /// since arithmetic on a null pointer is undefined.)
  tensor_view(std::shared_ptr<storage_type> st, T* base_data, const layout& l)
      : base(std::move(st), base_data ? base_data + l.offset : base_data, l.shape, l.strides) {}
  /// Views copy cheaply; a copy views the same elements.
  tensor_view(const tensor_view&) = default;

  // A view of mutable elements converts to a view of const ones.
  /// A view of mutable elements converts to a view of const ones.
  template <class U>
  requires(std::is_const_v<T>&& std::is_same_v<U, value_type>)
      tensor_view(const tensor_view<U, Backend>& other)
      : base(other.storage_ptr(), other.raw_data(), other.shape(), other.strides()) {}

  /// Pointer to element (0, ..., 0); the rest are at the offsets given by strides(). With an
  /// asynchronous backend it waits for queued work on the elements first.
  T* data() const {
    this->host_access(!std::is_const_v<T>);
    return this->data_;
  }

  // Writes the expression into the viewed elements. Its shape must broadcast to the view's;
  // the view's shape never changes. A scalar fills.
  /// Writes the expression into the viewed elements. Its shape must broadcast to the view's; the
  /// view's shape never changes. A scalar fills.
  template <class E>
  requires(expression<E> || scalar_type<E>) &&
      (!std::is_const_v<T>) const tensor_view& operator=(E&& e) const {
    detail::assign_to_view(*this, std::forward<E>(e), "assignment");
    return *this;
  }
  /// Writes other's elements into the viewed ones (element copy, not rebinding).
  const tensor_view& operator=(const tensor_view& other) const requires(!std::is_const_v<T>) {
    detail::assign_to_view(*this, other, "assignment");
    return *this;
  }

#define MELD_VIEW_COMPOUND(OP)                                                      \
  template <class E>                                                                \
  requires(expression<E> || scalar_type<E>) &&                                      \
      (!std::is_const_v<T>) const tensor_view& operator OP##=(E&& e) const {        \
    detail::assign_to_view(*this, *this OP std::forward<E>(e), "operator" #OP "="); \
    return *this;                                                                   \
  }
  /// Adds e (an expression or a number) to the viewed elements; e broadcasts to the view's shape.
  MELD_VIEW_COMPOUND(+)
  /// Subtracts e (an expression or a number) from the viewed elements (e broadcasts to the view).
  MELD_VIEW_COMPOUND(-)
  /// Multiplies the viewed elements by e (an expression or a number; e broadcasts to the view).
  MELD_VIEW_COMPOUND(*)
  /// Divides the viewed elements by e (an expression or a number; e broadcasts to the view).
  MELD_VIEW_COMPOUND(/)
#undef MELD_VIEW_COMPOUND
};

// A view held in an expression is copied (it is a cheap, shared window).
template <class T, class B>
struct operand_closure<tensor_view<T, B>> {
  using type = tensor_view<const std::remove_const_t<T>, B>;
  static type make(const tensor_view<T, B>& v) { return type(v); }
};
template <class T, class B>
struct operand_closure<tensor_view<T, B>&> : operand_closure<tensor_view<T, B>> {};
template <class T, class B>
struct operand_closure<const tensor_view<T, B>&> : operand_closure<tensor_view<T, B>> {};
template <class T, class B>
struct operand_closure<const tensor_view<T, B>> : operand_closure<tensor_view<T, B>> {};

namespace detail {

// Whether values of E's type are stored into Dst without loss: checked where assignments reach
// the backend.
template <class Dst, class E>
constexpr void check_lossless() {
  static_assert(converts_without_loss<value_t<E>, typename Dst::value_type>,
                "meld: this assignment would lose values (a floating expression into an integer "
                "tensor, or float64 into float32, or int64 into int32): convert explicitly with "
                "meld::cast<T>(expression), T the tensor's element type (README, \"Element types "
                "and promotion\")");
}

// Evaluates the expression e into dst, once e's shape is known to broadcast to dst's: the one
// place where assignments reach the backend. The backend takes care of operands that overlap dst.
template <class Dst, class E>
void assign_checked(const Dst& dst, const E& e) {
  check_lossless<Dst, E>();
  using B = common_backend_t<typename Dst::backend_type, backend_t<E>>;
  executor<B>::assign(dst, e);
}

// Throws shape_error naming `what` unless the expression e broadcasts to dst's shape.
template <class Dst, class E>
void check_broadcasts_to(const Dst& dst, const E& e, const char* what) {
  const shape_t* u = e.uniform_shape();
  if (!u || (u != &any_shape && !(*u == dst.shape()))) {
    const shape_t shape = e.shape();
    if (!broadcasts_to(shape, dst.shape()))
      raise<shape_error>(what, ": an expression of shape ", shape,
                         " cannot be assigned to a tensor of shape ", dst.shape());
  }
}

// Evaluates e into dst (a tensor or a view): e's shape must broadcast to dst's.
template <class Dst, class E>
void assign_to_view(const Dst& dst, E&& e, const char* what) {
  if constexpr (scalar_type<E>) {
    assign_to_view(
        dst, scalar_expr<typename Dst::value_type>(static_cast<typename Dst::value_type>(e)), what);
  } else {
    // Evaluated where it is: no closure is needed, as nothing outlives this call.
    check_broadcasts_to(dst, e, what);
    assign_checked(dst, e);
  }
}

}  // namespace detail

/// @}

}  // namespace meld
