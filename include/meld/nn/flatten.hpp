// flatten: {batch, d1, d2, ...} -> {batch, d1 * d2 * ...} (between convolutional and dense layers).
#pragma once

#include <stdexcept>

#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// {batch, d1, d2, ...} -> {batch, d1 d2 ...}.
template <class T = float, class B = cpu<>>
class flatten : public stateless_layer<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// x: {batch, ...} -> {batch, product of the rest}, a copy. Throws shape_error for a scalar.
  tensor_type forward(const tensor_type& x) { return tensor_type(forward_view(x)); }
  /// The same as a view of x's elements, without the copy (a view holds x's storage).
  /// nn::sequential hands it so to a next layer whose forward takes views (linear).
  tensor_view<const T, B> forward_view(const tensor_type& x) {
    if (x.rank() < 1) throw shape_error("flatten: the input is a scalar, it has no batch axis");
    input_shape_ = x.shape();
    forwarded_ = true;
    return x.reshape(flat_shape());
  }
  /// grad_output reshaped to the last forward's input shape; std::logic_error without a forward.
  tensor_type backward(const tensor_type& grad_output) {
    if (!forwarded_)
      throw std::logic_error("flatten: backward called without a forward pass before it");
    detail::expect_shape("flatten", "the output gradient", grad_output.shape(), flat_shape());
    return tensor_type(grad_output.reshape(input_shape_));
  }
  /// A new layer in the same mode.
  flatten replica() const {
    flatten r;
    r.training_ = this->training_;
    return r;
  }

 private:
  shape_t flat_shape() const {
    index_t rest = 1;
    for (int i = 1; i < input_shape_.size(); ++i) rest *= input_shape_[i];
    return {input_shape_[0], rest};
  }

  shape_t input_shape_;
  bool forwarded_ = false;
};

/// @}

}  // namespace meld::nn
