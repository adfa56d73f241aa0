// tensor<T, Backend>: an owning, contiguous, row-major array of rank 0..max_rank.
//
// Copies are explicit and deep: `tensor<float> b(a)` or `a.clone()` copy the elements, while
// `auto b = a;` and passing by value do not compile, so an accidental O(n) copy cannot hide in
// innocent-looking code. Assignment `b = a` (or `b = expr`) writes values into b, taking the shape
// of the right-hand side. Views (tensor_view) are the cheap, shared handles.
#pragma once

#include <algorithm>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/cpu/cpu.hpp"
#include "../core/element_type.hpp"
#include "nested_list.hpp"
#include "tensor_view.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// The type of meld::uninitialized, the tag of constructors that leave the elements uninitialized.
struct uninitialized_t {};
/// Tag value for constructors that leave the elements uninitialized: tensor<float>(shape,
/// meld::uninitialized).
inline constexpr uninitialized_t uninitialized{};

namespace detail {
// A tensor holding x's elements under another shape of the same count (one extent may be -1),
// sharing them instead of copying: what is written through one, the other reads. For handles
// that read only, where a copy would be the one cost: autograd's reshaped variables and
// module's input leaf. Throws shape_error as tensor::reshape does.
template <class T, class B>
tensor<T, B> share_elements(const tensor<T, B>& x, const shape_t& shape);
}  // namespace detail

/// An owning, contiguous, row-major tensor of T (float, double, std::int32_t, std::int64_t) on a
/// backend (default: cpu<sync>). Assigning an expression evaluates it in one pass; the shape
/// follows the expression. Views (slices, transpose, reshape, broadcast_to) share its elements.
/// Throws shape_error for shapes that do not broadcast and allocation_error when memory runs out.
template <class T, class Backend = cpu<>>
class tensor : public detail::strided_tensor<tensor<T, Backend>, T, Backend> {
  static_assert(element_type<T> && !std::is_const_v<T>,
                "meld::tensor<T>: T must be float, double, std::int32_t or std::int64_t");
  using base = detail::strided_tensor<tensor<T, Backend>, T, Backend>;
  friend base;

 public:
  /// The reference-counted memory that the tensor and its views share.
  using typename base::storage_type;
  /// Whether a const object can still write the elements (views: yes; tensors: no).
  static constexpr bool shallow_const = false;

  /// An empty tensor of shape {0}.
  tensor() : tensor(shape_t{0}, uninitialized) {}

  /// A zero-filled tensor: tensor<float> t({2, 3}).
  explicit tensor(const shape_t& shape) : tensor(shape, uninitialized) { fill(T(0)); }

  /// A tensor whose elements are not initialized (for outputs that are written next).
  tensor(const shape_t& shape, uninitialized_t) { allocate(shape); }

  /// Tensors of rank 2, 3 and 4 from nested lists: tensor<float>{{1, 2}, {3, 4}} has shape
  /// {2, 2}. Throws shape_error naming the axis when the lists are ragged. (Rank 1 is
  /// meld::from_range<float>({1, 2, 3}): tensor<float>({2, 3}) is the shape {2, 3}. At rank 3 and
  /// 4, innermost lists of one element are ambiguous with a lower rank, since {1} also
  /// initializes a number: reshape a literal of lower rank instead.)
  tensor(detail::nested_list<T, 2> rows) { from_nested<2>(rows); }
  /// See the rank-2 constructor: tensor<float>{{{1}, {2}}, {{3}, {4}}} has shape {2, 2, 1}.
  tensor(detail::nested_list<T, 3> blocks) { from_nested<3>(blocks); }
  /// See the rank-2 constructor.
  tensor(detail::nested_list<T, 4> blocks) { from_nested<4>(blocks); }

  /// Evaluates an expression. Implicit for expressions (tensor<float> y = a * x + b), explicit
  /// from another tensor (a deep copy).
  template <expression E>
  requires(!std::is_same_v<std::remove_cvref_t<E>, tensor>) explicit(
      detail::is_tensor<std::remove_cvref_t<E>>) tensor(E&& e) {
    allocate(e.shape());  // e.shape() checks that e's operands broadcast
    detail::assign_checked(*this, e);
  }

  /// A deep copy (explicit: copies are never silent).
  explicit tensor(const tensor& other) : tensor(other.shape(), uninitialized) {
    detail::assign_to_view(*this, other, "tensor copy");
  }
  /// Takes other's elements; other is left empty, of shape {0}.
  tensor(tensor&& other) noexcept {
    this->shape_.resize(1, 0);  // leaves `other` empty, of shape {0}
    this->strides_.resize(1, 1);
    swap(other);
  }

  /// Takes the shape and values of the right-hand side (reusing this storage when the shape is the
  /// same). Safe when the right-hand side reads this tensor.
  tensor& operator=(const tensor& other) {
    if (this != &other) assign(other);
    return *this;
  }
  /// Takes other's elements; other is left empty, of shape {0}.
  tensor& operator=(tensor&& other) noexcept {
    tensor(std::move(other)).swap(*this);
    return *this;
  }
  /// Evaluates the expression into this tensor, taking its shape (reallocating only if it changes).
  template <expression E>
  requires(!std::is_same_v<std::remove_cvref_t<E>, tensor>) tensor& operator=(E&& e) {
    assign(e);
    return *this;
  }
  /// A plain number fills every element (the shape stays).
  template <scalar_type S>
  tensor& operator=(S value) {
    fill(static_cast<T>(value));
    return *this;
  }

  // Compound assignment: the result must have this tensor's shape (the right-hand side
  // broadcasts to it, never the reverse).
#define MELD_TENSOR_COMPOUND(OP)                                                    \
  template <class E>                                                                \
  requires(expression<E> || scalar_type<E>) tensor& operator OP##=(E&& e) {         \
    detail::assign_to_view(*this, *this OP std::forward<E>(e), "operator" #OP "="); \
    return *this;                                                                   \
  }
  /// Adds e (an expression or a number) elementwise; e broadcasts to this tensor's shape.
  MELD_TENSOR_COMPOUND(+)
  /// Subtracts e (an expression or a number) elementwise; e broadcasts to this tensor's shape.
  MELD_TENSOR_COMPOUND(-)
  /// Multiplies by e (an expression or a number) elementwise; e broadcasts to this tensor's shape.
  MELD_TENSOR_COMPOUND(*)
  /// Divides by e (an expression or a number) elementwise; e broadcasts to this tensor's shape.
  MELD_TENSOR_COMPOUND(/)
#undef MELD_TENSOR_COMPOUND

  /// A deep copy.
  tensor clone() const {
    return tensor(*this);
  }

  /// Sets every element to value.
  void fill(T value) {
    executor<Backend>::fill(*this, value);
  }

  /// Pointer to the first element. With an asynchronous backend these wait for queued work on the
  /// tensor first (the const ones for its last write, the others for every access). They compile
  /// only for backends whose memory the host can address (not sim, not cuda: use meld::to).
  T* data() {
    this->host_access(true);
    return this->data_;
  }
  /// Pointer to the first element (see data()).
  const T* data() const {
    this->host_access(false);
    return this->data_;
  }
  /// Iteration over the elements in order (host-accessible backends; see data()).
  T* begin() {
    return data();
  }
  /// Iteration over the elements in order (host-accessible backends; see data()).
  T* end() {
    return data() + this->size();
  }
  /// Iteration over the elements in order (host-accessible backends; see data()).
  const T* begin() const {
    return data();
  }
  /// Iteration over the elements in order (host-accessible backends; see data()).
  const T* end() const {
    return data() + this->size();
  }

  /// Exchanges the elements and shapes of two tensors.
  void swap(tensor& other) noexcept {
    std::swap(this->storage_, other.storage_);
    std::swap(this->data_, other.data_);
    std::swap(this->shape_, other.shape_);
    std::swap(this->strides_, other.strides_);
  }

  /// Gives up the storage to a view (used when a temporary tensor becomes part of an expression).
  tensor_view<const T, Backend> release() && {
    tensor_view<const T, Backend> v(this->storage_, this->data_,
                                    layout{this->shape_, this->strides_, 0});
    tensor().swap(*this);
    return v;
  }

 private:
  friend tensor detail::share_elements<T, Backend>(const tensor&, const shape_t&);
  // Another handle to `st`'s elements, contiguous, of `shape` (see detail::share_elements).
  tensor(std::shared_ptr<storage_type> st, T* data, const shape_t& shape)
      : base(std::move(st), data, shape, row_major_strides(shape)) {}

  // Out of line: one copy per tensor type, not one at every construction.
  MELD_NOINLINE void allocate(const shape_t& shape) {
    const index_t n = checked_size(shape, "tensor");
    try {
      this->storage_ = n ? detail::make_storage<storage_type>(n) : nullptr;
    } catch (const allocation_error& e) {
      detail::raise<allocation_error>("tensor<", type_name<T>(), "> of shape ", shape, ": ",
                                      e.what());
    }
    this->data_ = n ? this->storage_->data() : nullptr;
    this->shape_ = shape;
    this->strides_ = row_major_strides(shape);
  }

  // Writes size() elements from host memory, wherever this tensor lives (staged for queued work).
  void write_from_host(const T* values) {
    if (this->size()) executor<Backend>::copy_from_host(*this, values);
  }

  template <int Rank>
  void from_nested(const detail::nested_list<T, Rank>& list) {
    std::vector<T> flat;
    const shape_t shape = detail::nested_list_elements<T, Rank>(list, flat);
    allocate(shape);
    write_from_host(flat.data());
  }

  template <class E>
  void assign(const E& e) {
    const shape_t* u = e.uniform_shape();
    if (u && (u == &detail::any_shape || *u == this->shape())) {
      detail::assign_checked(*this, e);  // the shape is checked: skip assign_to_view's walk
      return;
    }
    const shape_t shape = e.shape();
    if (shape == this->shape()) {
      detail::assign_to_view(*this, e, "assignment");
    } else {
      tensor fresh = on_own_device(shape);
      detail::assign_to_view(fresh, e, "assignment");
      swap(fresh);
    }
  }

  // A tensor of `shape` on this tensor's device: a resized tensor stays where it lives (new
  // tensors go to the current device).
  tensor on_own_device(const shape_t& shape) const {
    const int current = memory<Backend>::current_device();
    const int home = this->storage_ ? this->storage_->device() : current;
    if (home == current) return tensor(shape, uninitialized);
    struct restore {
      int device;
      ~restore() { memory<Backend>::set_current_device(device); }
    } back{current};
    memory<Backend>::set_current_device(home);
    return tensor(shape, uninitialized);
  }
};

namespace detail {
template <class T, class B>
tensor<T, B> share_elements(const tensor<T, B>& x, const shape_t& shape) {
  const shape_t to = x.reshape(shape).shape();  // checks the count, resolves -1
  return tensor<T, B>(x.storage_, x.data_, to);
}
}  // namespace detail

/// tensor t = a + b: the element type and backend of the expression (evaluated once).
template <expression E>
requires(!detail::is_tensor<std::remove_cvref_t<E>>) tensor(E&&)
->tensor<value_t<E>, backend_t<E>>;

// A tensor in an expression is held as a view of its storage, so that an expression never
// outlives the elements it reads: an lvalue tensor shares its storage with the view (it reads
// the values at evaluation time; a tensor later reassigned to another shape gets new storage,
// which the expression does not see), a temporary hands its storage over.
template <class T, class B>
struct operand_closure<tensor<T, B>&> {
  using type = tensor_view<const T, B>;
  static type make(const tensor<T, B>& t) { return t.view(); }
};
template <class T, class B>
struct operand_closure<const tensor<T, B>&> : operand_closure<tensor<T, B>&> {};
template <class T, class B>
struct operand_closure<tensor<T, B>> {
  using type = tensor_view<const T, B>;
  static type make(tensor<T, B>&& t) { return std::move(t).release(); }
};
template <class T, class B>
struct operand_closure<const tensor<T, B>> : operand_closure<tensor<T, B>&> {};

/// @}

}  // namespace meld
