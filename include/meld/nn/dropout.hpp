// dropout(p): in training mode zeroes each element with probability p and scales the others by
// 1 / (1 - p) (inverted dropout), so evaluation mode is the identity. The masks come from a
// seeded meld::rng stream: the same seed and the same sequence of calls give the same masks.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "../expr/operators.hpp"
#include "../tensor/random.hpp"
#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// Inverted dropout's mask applied to e (an expression or tensor): e times 1 / (1 - p) where the
/// uniform draw u (of e's shape) is >= p, else 0. Forward applies it to the input and backward to
/// the output gradient, with the same draws; nn::dropout and autograd::dropout share it.
template <class E, class U>
tensor<value_t<U>, backend_t<U>> dropout_mask(E&& e, const U& u, double p) {
  using T = value_t<U>;
  const T keep_from = static_cast<T>(p), scale = static_cast<T>(1 / (1 - p));
  return tensor<T, backend_t<U>>(where(u >= keep_from, std::forward<E>(e) * scale, T(0)));
}

/// Dropout: in training mode zeroes each element with probability p and scales the rest by
/// 1 / (1 - p); in evaluation mode passes the input through. Seeded, so runs repeat.
template <class T = float, class B = cpu<>>
class dropout : public stateless_layer<T, B> {
 public:
  using typename layer_base<T, B>::tensor_type;

  /// Throws std::invalid_argument unless 0 <= p < 1.
  explicit dropout(double p, std::uint64_t seed = 0)
      : p_(p), gen_(seed), name_(detail::cat("dropout(", p, ")")) {
    if (!(p >= 0 && p < 1))
      throw std::invalid_argument(detail::cat("dropout: probability ", p, " is not in [0, 1)"));
  }

  /// x of any shape -> the same shape.
  tensor_type forward(const tensor_type& x) {
    forwarded_ = true;
    if (!this->training_ || p_ == 0) {
      keep_.clear();
      return tensor_type(x);
    }
    // keep_ holds uniform draws; an element is kept where its draw is >= p.
    tensor_type u = gen_.template uniform<T, B>(x.shape());
    tensor_type y = dropout_mask(x, u, p_);
    keep_.save(u);
    return y;
  }

  /// grad_output times the last forward's mask (and scale).
  tensor_type backward(const tensor_type& grad_output) {
    if (!forwarded_)
      throw std::logic_error(name_ + ": backward called without a forward pass before it");
    if (!keep_.saved()) return tensor_type(grad_output);  // evaluation mode: the identity
    const auto& u = keep_.get(name_);
    detail::expect_shape(name_, "the output gradient", grad_output.shape(), u.shape());
    return dropout_mask(grad_output, u, p_);
  }

  /// Restarts the mask stream (e.g. to give data-parallel replicas different masks).
  void seed(std::uint64_t s) { gen_ = rng(s); }
  /// The probability p of dropping an element.
  double probability() const { return p_; }

  /// The replica continues the same mask stream.
  dropout replica() const {
    dropout r(p_);
    r.gen_ = gen_;
    r.training_ = this->training_;
    return r;
  }

 private:
  double p_;
  rng gen_;
  std::string name_;
  bool forwarded_ = false;
  detail::saved_tensor<T, B> keep_;  // the uniform draws of the last training forward
};

/// @}

}  // namespace meld::nn
