// A float's IEEE bits and back, in host and device code: the conversions of the 16-bit floating
// types (bfloat16.hpp, half.hpp) are integer operations on these.
#pragma once

#include <bit>
#include <cstdint>

#include "config.hpp"

namespace meld::detail {

MELD_HD constexpr std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

MELD_HD constexpr float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

}  // namespace meld::detail
