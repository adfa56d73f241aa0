// meld::half: IEEE 754 binary16 (5 exponent bits, 10 mantissa bits, subnormals), a storage type on
// every backend, as bfloat16 (core/bfloat16.hpp) is: arithmetic reads it as float (exactly) and
// writes back with round-to-nearest-even (explicitly). The layout is that of CUDA's __half and of
// the F16C / AVX-512 conversion instructions, whose results the conversions here equal (NaNs
// included: quieted, payload kept where it fits).
#pragma once

#include <cstdint>
#include <type_traits>

#include "float_bits.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// An IEEE binary16 value.
struct half {
  /// The 16 bits: sign, 5 exponent bits, 10 mantissa bits.
  std::uint16_t bits = 0;

  half() = default;
  /// Rounds to the nearest half, ties to even: beyond 65504 to infinity, below 2^-14 to the
  /// subnormals (or zero); a NaN stays a quiet NaN.
  MELD_HD constexpr explicit half(float f) : bits(round(detail::bits_of(f))) {}
  /// From any other number, through float.
  template <class N, class = std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, float>>>
  MELD_HD constexpr explicit half(N v) : half(static_cast<float>(v)) {}

  /// The exact float value (a signalling NaN becomes quiet, as the hardware's conversion does).
  MELD_HD constexpr operator float() const { return detail::float_of(widen(bits)); }

  /// The half with these bits.
  MELD_HD static constexpr half from_raw(std::uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }

  /// The bits of the float whose bits are u, rounded to half (the conversion above).
  MELD_HD static constexpr std::uint16_t round(std::uint32_t u) {
    const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)  // NaN: quiet, the upper payload bits kept
      return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // from 65520, halfway past 65504: infinity
    if (a >= 0x38800000u) {                       // a normal half: rebias the exponent, round
      const std::uint32_t v = a - 0x38000000u;    // (127 - 15) << 23
      return static_cast<std::uint16_t>(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
    }
    const std::uint32_t e = a >> 23;  // a subnormal half, or zero: units of 2^-24
    if (e < 102) return sign;         // below 2^-25 (the tie at 2^-25 also goes to 0, even)
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;  // 14 .. 24
    const std::uint32_t r = m >> shift, rest = m & ((1u << shift) - 1), tie = 1u << (shift - 1);
    return static_cast<std::uint16_t>(sign | (r + (rest > tie || (rest == tie && (r & 1u)))));
  }
  /// The float bits of half bits h.
  MELD_HD static constexpr std::uint32_t widen(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);  // inf, NaN
    if (e != 0) return sign | ((e + 112) << 23) | (m << 13);
    if (m == 0) return sign;
    std::uint32_t k = 0, n = m;  // a subnormal: normalize
    while (!(n & 0x400u)) {
      n <<= 1;
      ++k;
    }
    return sign | ((113 - k) << 23) | ((n & 0x3ffu) << 13);
  }
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);

/// @}

}  // namespace meld
