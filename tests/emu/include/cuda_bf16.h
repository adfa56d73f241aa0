// The emulated device's __nv_bfloat16: the upper half of a float, rounded to nearest even, as
// CUDA's host-side conversions. Arithmetic goes through float.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

struct __nv_bfloat16 {
  std::uint16_t bits = 0;
  __nv_bfloat16() = default;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  __nv_bfloat16(T v) {
    const float f = static_cast<float>(v);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN (quiet)
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<std::uint16_t>(u >> 16);
  }
  operator float() const {
    const std::uint32_t u = std::uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
