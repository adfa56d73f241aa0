// What tensors and views share: a strided window onto shared storage, its shape queries, checked
// element access, and the operations that make views of it.
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "../expr/expression.hpp"
#include "layout.hpp"
#include "storage.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

/// A non-owning, strided view of a tensor's elements.
template <class T, class Backend>
class tensor_view;
/// An owning tensor.
template <class T, class Backend>
class tensor;

namespace detail {

template <class X>
inline constexpr bool is_tensor = false;
template <class T, class B>
inline constexpr bool is_tensor<tensor<T, B>> = true;

/// The members that meld::tensor and meld::tensor_view share (their pages list them as their
/// own): shape queries, checked element access, and the operations that make views.
///
/// Derived is tensor<T, B> (deep constness: a const tensor gives read-only views) or
/// tensor_view<T, B> (shallow constness, like std::span: a const view still writes through).
template <class Derived, class T, class Backend>
class strided_tensor : public expression_tag {
 public:
  /// The element type without const (float for a tensor_view<const float>).
  using value_type = std::remove_const_t<T>;
  /// The element type as accessed: const T for read-only views.
  using element_type = T;
  /// Where the elements live and how work on them runs (meld::cpu<meld::sync>, ...).
  using backend_type = Backend;
  /// The reference-counted memory that a tensor and its views share.
  using storage_type = storage<value_type, Backend>;

  /// The extent of each axis ({} for a rank-0 tensor).
  const shape_t& shape() const { return shape_; }
  /// The shape, as every expression reports it to the evaluation (expression nodes give the shape
  /// their operands share, or none).
  const shape_t* uniform_shape() const { return &shape_; }
  /// The step between consecutive elements of each axis, in elements (0 where broadcast).
  const strides_t& strides() const { return strides_; }
  /// The number of axes.
  int rank() const { return shape_.size(); }
  /// The number of elements.
  index_t size() const { return shape_.product(); }
  /// Whether there are no elements (some extent is 0).
  bool empty() const { return size() == 0; }
  /// Whether the elements are contiguous in row-major order (a tensor always; a view may not be).
  bool is_contiguous() const { return is_row_major(shape_, strides_); }

  /// The storage this tensor or view reads (shared with every view of it).
  const std::shared_ptr<storage_type>& storage_ptr() const { return storage_; }

  /// The pointer to element (0, ..., 0) in the backend's memory, without waiting for queued work:
  /// the accessor of executors, kernels and communicators, which run in stream order and know
  /// where the memory is (on a device backend, the host must not dereference it). Host code uses
  /// data() and element access, which wait, and compile only for host-accessible backends.
  element_type* raw_data() const { return data_; }

  /// The device of the backend that the elements live on (0 for the CPU).
  int device() const { return storage_ ? storage_->device() : memory<Backend>::current_device(); }

  /// Waits until queued work that writes this tensor has run, and rethrows an error it raised
  /// (asynchronous backends; returns at once for synchronous ones).
  void wait() const {
    if (storage_) storage_->access().wait_host(false);
  }

  /// The element at the given indices (one per axis; negative counts from the end): t(1, 2).
  /// Checked: a wrong count or an index out of range throws index_error. For bulk work use
  /// expressions, not this. (Only for backends whose memory the host can read; copy device
  /// tensors with meld::to first.)
  template <std::integral... I>
  decltype(auto) operator()(I... idx) {
    return derived().data()[offset_of(idx...)];
  }
  /// The element at the given indices (see the non-const overload).
  template <std::integral... I>
  decltype(auto) operator()(I... idx) const {
    return derived().data()[offset_of(idx...)];
  }

  /// The value of a one-element tensor (any rank); throws shape_error for any other size.
  /// Host-accessible backends only.
  value_type item() const {
    if (size() != 1)
      detail::raise<shape_error>("item: tensor of shape ", shape_, " has ", size(),
                                 " elements, not 1");
    return *derived().data();
  }

  // ---- views ------------------------------------------------------------------------------------
  // Each returns a tensor_view sharing this storage; see layout.hpp for the rules.

  /// A view of all the elements, with this shape and strides.
  auto view() { return make_view(layout{shape_, strides_, 0}); }
  /// A view of all the elements (read-only for a const tensor).
  auto view() const { return make_cview(layout{shape_, strides_, 0}); }

  /// A view of part of the elements: slice(meld::all, meld::range(0, 10, 2), 3) takes one spec
  /// per leading axis (the rest are all); an integer index drops its axis, meld::range(start,
  /// stop, step) keeps it (negative steps too).
  template <slice_spec... S>
  auto slice(const S&... specs) {
    return make_view(slice_layout(shape_, strides_, specs...));
  }
  /// A view of part of the elements (see the non-const overload).
  template <slice_spec... S>
  auto slice(const S&... specs) const {
    return make_cview(slice_layout(shape_, strides_, specs...));
  }

  /// A view with the axes reversed (no copy).
  auto transpose() { return make_view(transpose_layout(shape_, strides_)); }
  /// A view with the axes reversed (read-only for a const tensor).
  auto transpose() const { return make_cview(transpose_layout(shape_, strides_)); }

  /// A view whose axis i is axis axes[i] of this.
  auto permute(const dims& axes) { return make_view(permute_layout(shape_, strides_, axes)); }
  /// A view whose axis i is axis axes[i] of this (read-only for a const tensor).
  auto permute(const dims& axes) const {
    return make_cview(permute_layout(shape_, strides_, axes));
  }

  /// A view with another shape of the same element count (one extent may be -1). Throws
  /// shape_error when the strides do not allow it without a copy.
  auto reshape(const shape_t& to) { return make_view(reshape_layout(shape_, strides_, to)); }
  /// A view with another shape (see the non-const overload; read-only for a const tensor).
  auto reshape(const shape_t& to) const { return make_cview(reshape_layout(shape_, strides_, to)); }
  /// A rank-1 view of all the elements (reshape({-1})).
  auto flatten() { return reshape({-1}); }
  /// A rank-1 view of all the elements (read-only for a const tensor).
  auto flatten() const { return reshape({-1}); }

  /// A read-only view with the shape `to`, which this shape broadcasts to (numpy's rules), without
  /// copying: read-only, since a broadcast view repeats elements and writing through it would be
  /// ambiguous.
  auto broadcast_to(const shape_t& to) const {
    return tensor_view<const value_type, Backend>(storage_, data_,
                                                  broadcast_layout(shape_, strides_, to));
  }

  /// A view without the axes of extent 1.
  auto squeeze() { return make_view(squeeze_layout(shape_, strides_, std::nullopt)); }
  /// A view without the axes of extent 1 (read-only for a const tensor).
  auto squeeze() const { return make_cview(squeeze_layout(shape_, strides_, std::nullopt)); }
  /// A view without axis `axis`, which must have extent 1 (shape_error otherwise).
  auto squeeze(long axis) { return make_view(squeeze_layout(shape_, strides_, axis)); }
  /// A view without axis `axis`, of extent 1 (read-only for a const tensor).
  auto squeeze(long axis) const { return make_cview(squeeze_layout(shape_, strides_, axis)); }

  /// A view with an axis of extent 1 inserted before `axis` (-1 appends).
  auto unsqueeze(long axis) { return make_view(unsqueeze_layout(shape_, strides_, axis)); }
  /// A view with an axis of extent 1 inserted before `axis` (read-only for a const tensor).
  auto unsqueeze(long axis) const { return make_cview(unsqueeze_layout(shape_, strides_, axis)); }

  // The members below are the implementation's, left out of the reference.
  //! \cond
 protected:
  strided_tensor() = default;
  strided_tensor(std::shared_ptr<storage_type> st, T* data, shape_t shape, strides_t strides)
      : storage_(std::move(st)), data_(data), shape_(shape), strides_(strides) {}

  // Before the host reads (write = false) or writes the elements: waits for queued work.
  void host_access(bool write) const {
    detail::require_host_access<Backend>();
    if (storage_) storage_->access().wait_host(write);
  }

  Derived& derived() { return static_cast<Derived&>(*this); }
  const Derived& derived() const { return static_cast<const Derived&>(*this); }

  template <class... I>
  index_t offset_of(I... idx) const {
    if (static_cast<int>(sizeof...(I)) != rank())
      detail::raise<index_error>("element access: ", sizeof...(I), " indices for a tensor of rank ",
                                 rank(), " ", shape_);
    index_t offset = 0;
    int axis = 0;
    auto add = [&](index_t i) {
      const index_t n = shape_[axis];
      const index_t k = i < 0 ? i + n : i;
      if (k < 0 || k >= n)
        detail::raise<index_error>("element access: index ", i, " is out of range for axis ", axis,
                                   " of shape ", shape_);
      offset += k * strides_[axis++];
    };
    (add(static_cast<index_t>(idx)), ...);
    (void)add;  // rank 0: no indices
    return offset;
  }

  tensor_view<T, Backend> make_view(const layout& l) {
    return tensor_view<T, Backend>(storage_, data_, l);
  }
  auto make_cview(const layout& l) const {
    using E = std::conditional_t<Derived::shallow_const, T, const value_type>;
    return tensor_view<E, Backend>(storage_, data_, l);
  }

  std::shared_ptr<storage_type> storage_;
  T* data_ = nullptr;
  shape_t shape_;
  strides_t strides_;
  //! \endcond
};

}  // namespace detail

/// @}

}  // namespace meld
