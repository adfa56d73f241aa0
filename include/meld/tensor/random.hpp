// Seeded random tensors that give the same numbers on every machine, compiler and thread count.
//
// Element i of a draw is a pure function of (seed, counter + i) through the Philox4x32-10
// counter-based generator (Salmon et al., SC'11), converted to floating point with integer
// arithmetic (uniform) and Box-Muller (normal). Nothing depends on std:: distributions, whose
// output differs between standard libraries. Draws run where the tensor lives (the backend's
// generate operation: a loop on the CPU, a kernel on a GPU), and give the same numbers on every
// backend for the same seed (exactly for uniform draws and integers; normal draws to the last bit
// of double-precision log and cos, which a GPU's math library may round differently).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "factories.hpp"
#include "tensor.hpp"

namespace meld {

/// \addtogroup tensors
/// @{

namespace detail {

struct philox_words {
  std::uint32_t w[4];
};

// Philox4x32-10 of a 128-bit counter and a 64-bit key (checked against Random123's known-answer
// vectors in tests/core/test_random.cpp).
MELD_HD inline philox_words philox4x32(philox_words counter, std::uint32_t k0, std::uint32_t k1) {
  std::uint32_t c0 = counter.w[0], c1 = counter.w[1], c2 = counter.w[2], c3 = counter.w[3];
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t(0xD2511F53u) * c0;
    const std::uint64_t p1 = std::uint64_t(0xCD9E8D57u) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<std::uint32_t>(p1);
    c3 = static_cast<std::uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

MELD_HD inline philox_words philox4x32(std::uint64_t counter, std::uint64_t key) {
  return philox4x32(
      {{static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), 0, 0}},
      static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
}

// A uniform value in [0, 1) from random bits: 24 bits for float, 53 for double.
template <class T>
MELD_HD T unit_uniform(std::uint32_t a, std::uint32_t b) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(a >> 8) * 0x1.0p-24f;
  } else {
    const std::uint64_t bits = (std::uint64_t(a) << 21) ^ (b >> 11);
    return static_cast<T>(static_cast<double>(bits & ((std::uint64_t(1) << 53) - 1)) * 0x1.0p-53);
  }
}

// The draws, element i of a tensor from (seed, counter + i): what the backends' generate runs.
template <class T>
struct uniform_draw {
  std::uint64_t seed, counter;
  T low, high;
  MELD_HD T operator()(index_t i) const {
    const auto r = philox4x32(counter + static_cast<std::uint64_t>(i), seed);
    return low + (high - low) * unit_uniform<T>(r.w[0], r.w[1]);
  }
};

template <class T>
struct normal_draw {
  std::uint64_t seed, counter;
  T mean, stddev;
  MELD_HD T operator()(index_t i) const {
    const auto r = philox4x32(counter + static_cast<std::uint64_t>(i), seed);
    // Box-Muller in double; u1 in (0, 1] so that log(u1) is finite.
    const double u1 = 1.0 - unit_uniform<double>(r.w[0], r.w[1]);
    const double u2 = unit_uniform<double>(r.w[2], r.w[3]);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    return static_cast<T>(static_cast<double>(mean) + static_cast<double>(stddev) * z);
  }
};

template <class T>
struct integer_draw {
  std::uint64_t seed, counter;
  T low;
  std::uint64_t span;
  MELD_HD T operator()(index_t i) const {
    const auto r = philox4x32(counter + static_cast<std::uint64_t>(i), seed);
    const std::uint64_t bits = (std::uint64_t(r.w[0]) << 32) | r.w[1];
    return static_cast<T>(static_cast<std::uint64_t>(low) + bits % span);
  }
};

}  // namespace detail

/// A stream of random tensors: each draw continues where the last one stopped.
class rng {
 public:
  /// A generator whose draws are a pure function of the seed and how much was drawn before.
  explicit rng(std::uint64_t seed) : seed_(seed) {}

  /// The seed.
  std::uint64_t seed() const { return seed_; }
  /// How many numbers were drawn so far.
  std::uint64_t counter() const { return counter_; }

  /// Uniform in [low, high).
  template <class T, class Backend = cpu<>>
  tensor<T, Backend> uniform(const shape_t& shape, T low = T(0), T high = T(1)) {
    static_assert(std::is_floating_point_v<T>, "rng::uniform: T must be float or double");
    return draw<T, Backend>(shape, detail::uniform_draw<T>{seed_, counter_, low, high});
  }

  /// Normal with the given mean and standard deviation.
  template <class T, class Backend = cpu<>>
  tensor<T, Backend> normal(const shape_t& shape, T mean = T(0), T stddev = T(1)) {
    static_assert(std::is_floating_point_v<T>, "rng::normal: T must be float or double");
    return draw<T, Backend>(shape, detail::normal_draw<T>{seed_, counter_, mean, stddev});
  }

  /// Integers uniform in [low, high).
  template <class T, class Backend = cpu<>>
  tensor<T, Backend> integers(const shape_t& shape, T low, T high) {
    static_assert(std::is_integral_v<T>, "rng::integers: T must be an integer type");
    if (high <= low)
      detail::raise<shape_error>("rng::integers: empty range [", low, ", ", high, ")");
    const std::uint64_t span = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
    return draw<T, Backend>(shape, detail::integer_draw<T>{seed_, counter_, low, span});
  }

 private:
  // A tensor of the draws of Draw, computed on the backend; the stream moves past them.
  template <class T, class Backend, class Draw>
  tensor<T, Backend> draw(const shape_t& shape, const Draw& d) {
    tensor<T, Backend> t(shape, uninitialized);
    executor<Backend>::generate(t, d);
    counter_ += static_cast<std::uint64_t>(t.size());
    return t;
  }

  std::uint64_t seed_;
  std::uint64_t counter_ = 0;
};

/// One-shot draws: the same seed always gives the same tensor.
template <class T, class Backend = cpu<>>
tensor<T, Backend> uniform(const shape_t& shape, T low, T high, std::uint64_t seed) {
  return rng(seed).uniform<T, Backend>(shape, low, high);
}

/// One-shot normal draw: the same seed always gives the same tensor.
template <class T, class Backend = cpu<>>
tensor<T, Backend> normal(const shape_t& shape, T mean, T stddev, std::uint64_t seed) {
  return rng(seed).normal<T, Backend>(shape, mean, stddev);
}

/// @}

}  // namespace meld
