// Seeded weight initialization: Xavier (Glorot) and Kaiming (He), uniform or normal, for one
// tensor from a meld::rng stream, or for a whole model from one seed.
//
//   nn::kaiming_uniform{}(w, gen);                      // one tensor, drawing from gen
//   nn::initialize(model, nn::kaiming_normal{}, 42);    // every weight of a model, from seed 42
//
// initialize() visits the parameters in the model's fixed order and draws every weight (each
// parameter of rank >= 2) from one stream, so the same seed gives the same model on every
// machine, compiler and thread count. Parameters of rank 1 (biases, batch-norm scales and
// shifts) keep the values their layers gave them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "../tensor/random.hpp"
#include "require_model.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// Fan-in and fan-out of a weight: {out, in} for a linear layer, {out, in, k...} for a
/// convolution (each multiplied by the kernel's size), {n} counts n both ways.
struct fans {
  /// Fan-in.
  double in = 1, out = 1;  ///< Fan-out.
};

/// The fans of a weight of shape s (see fans).
inline fans fans_of(const shape_t& s) {
  if (s.size() == 0) return {};
  if (s.size() == 1) return {static_cast<double>(s[0]), static_cast<double>(s[0])};
  double receptive = 1;
  for (int i = 2; i < s.size(); ++i) receptive *= static_cast<double>(s[i]);
  return {static_cast<double>(s[1]) * receptive, static_cast<double>(s[0]) * receptive};
}

/// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
struct xavier_uniform {
  /// Multiplies the bound.
  double gain = 1;
  /// Fills w from gen.
  template <class T, class B>
  void operator()(tensor<T, B>& w, rng& gen) const {
    const fans f = fans_of(w.shape());
    const T a = static_cast<T>(gain * std::sqrt(6.0 / (f.in + f.out)));
    w = gen.uniform<T, B>(w.shape(), -a, a);
  }
};

/// N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out)).
struct xavier_normal {
  /// Multiplies the standard deviation.
  double gain = 1;
  /// Fills w from gen.
  template <class T, class B>
  void operator()(tensor<T, B>& w, rng& gen) const {
    const fans f = fans_of(w.shape());
    w = gen.normal<T, B>(w.shape(), T(0), static_cast<T>(gain * std::sqrt(2.0 / (f.in + f.out))));
  }
};

/// U(-a, a) with a = gain * sqrt(3 / fan_in); gain sqrt(2) suits ReLU (He et al.). With gain
/// 1 / sqrt(3) it is PyTorch's default for linear and convolution weights: U(+-1 / sqrt(fan_in)).
struct kaiming_uniform {
  /// Multiplies the bound.
  double gain = std::sqrt(2.0);
  /// Fills w from gen.
  template <class T, class B>
  void operator()(tensor<T, B>& w, rng& gen) const {
    const T a = static_cast<T>(gain * std::sqrt(3.0 / fans_of(w.shape()).in));
    w = gen.uniform<T, B>(w.shape(), -a, a);
  }
};

/// N(0, s^2) with s = gain / sqrt(fan_in).
struct kaiming_normal {
  /// Multiplies the standard deviation.
  double gain = std::sqrt(2.0);
  /// Fills w from gen.
  template <class T, class B>
  void operator()(tensor<T, B>& w, rng& gen) const {
    w = gen.normal<T, B>(w.shape(), T(0), static_cast<T>(gain / std::sqrt(fans_of(w.shape()).in)));
  }
};

/// Re-initializes every weight (parameter of rank >= 2) of a model with `init` (any of the above,
/// or a callable init(tensor&, meld::rng&)), drawing from one stream seeded with `seed`.
template <class M, class Init>
void initialize(M& model, const Init& init, std::uint64_t seed) {
  static_assert(require_model<M>(), "meld::nn::initialize: see the messages above");
  rng gen(seed);
  model.visit_parameters([&](std::string_view, auto& param, auto&) {
    if (param.rank() >= 2) init(param, gen);
  });
}

/// @}

}  // namespace meld::nn
