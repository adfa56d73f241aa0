// What every layer shares: its element type and backend, the training flag, the input it keeps
// for backward, and the checks that name the layer in error messages.
//
// Every layer is itself an nn::model (forward, backward, visit_parameters, visit_buffers,
// zero_grad, train, replica), so layers compose in nn::sequential and in models of your own.
//
// Layers keep what backward needs as views that share storage with the tensors forward received
// or returned (no copies). As in PyTorch, those tensors must not be modified in place between
// forward and backward; replacing them (assigning a new shape, moving, destroying) is fine.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../backend/host.hpp"  // the host backend (tensors alone do not bring it)
#include "../tensor/convert.hpp"
#include "../tensor/tensor.hpp"
#include "../tensor/tensor_view.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// What every layer has: its element type and backend, and the training / evaluation mode.
template <class T, class B>
class layer_base {
  static_assert(std::is_floating_point_v<T>, "meld::nn layers: T must be float or double");

 public:
  /// The element type.
  using value_type = T;
  /// The backend.
  using backend_type = B;
  /// The tensors the layer takes and returns.
  using tensor_type = tensor<T, B>;

  // Layers are moved, not copied: replica() makes the deep copy (parameters, buffers and
  // gradients; never what a forward pass saved).
  layer_base() = default;
  /// Layers move.
  layer_base(layer_base&&) noexcept = default;
  /// Layers move.
  layer_base& operator=(layer_base&&) noexcept = default;
  layer_base(const layer_base&) = delete;
  layer_base& operator=(const layer_base&) = delete;

  /// Training mode (the default) or evaluation mode: dropout and batch normalization differ.
  void train(bool on = true) { training_ = on; }
  /// Switches to evaluation mode (train(false)).
  void eval() { training_ = false; }
  /// Whether the layer is in training mode (the default).
  bool training() const { return training_; }

 protected:
  /// The mode.
  bool training_ = true;
};

/// A layer without parameters or buffers.
/// A layer without parameters or buffers.
template <class T, class B>
class stateless_layer : public layer_base<T, B> {
 public:
  /// No parameters.
  template <class F>
  void visit_parameters(F&&) {}
  /// No buffers.
  template <class F>
  void visit_buffers(F&&) {}
  /// No gradients to zero.
  void zero_grad() {}
};

namespace detail {

using meld::detail::cat;

// A tensor that forward keeps for backward, as a view sharing the tensor's storage.
// (Views cannot be re-pointed by assignment, which writes elements; this rebinds them.)
template <class T, class B>
class saved_tensor {
 public:
  saved_tensor() = default;
  saved_tensor(const saved_tensor&) = default;
  saved_tensor(saved_tensor&&) noexcept = default;
  saved_tensor& operator=(const saved_tensor& other) {
    if (this != &other) rebind(other.view_);
    return *this;
  }
  saved_tensor& operator=(saved_tensor&& other) noexcept {
    if (this != &other) rebind(other.view_);
    return *this;
  }

  void save(const tensor<T, B>& t) { view_.emplace(t.view()); }
  void save(const tensor_view<const T, B>& v) { view_.emplace(v); }
  // The saved view; throws std::logic_error naming `layer` when forward has not run.
  const tensor_view<const T, B>& get(const std::string& layer) const {
    if (!view_)
      throw std::logic_error(cat(layer, ": backward called without a forward pass before it"));
    return *view_;
  }
  bool saved() const { return view_.has_value(); }
  void clear() { view_.reset(); }

 private:
  void rebind(const std::optional<tensor_view<const T, B>>& v) {
    view_.reset();
    if (v) view_.emplace(*v);
  }
  std::optional<tensor_view<const T, B>> view_;
};

// Throws shape_error("<layer>: <what> has shape <s>, expected <expected>") unless s == expected.
inline void expect_shape(const std::string& layer, const char* what, const shape_t& s,
                         const shape_t& expected) {
  if (!(s == expected))
    throw shape_error(cat(layer, ": ", what, " has shape ", s, ", expected ", expected));
}

}  // namespace detail

/// @}

}  // namespace meld::nn
