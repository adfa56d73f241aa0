// meld::bfloat16: the upper 16 bits of an IEEE float (8 exponent bits, 7 mantissa bits), a storage
// type on every backend. It stores; arithmetic reads it as float (an implicit, exact conversion)
// and writes back with round-to-nearest-even (explicit: it loses precision), so expressions over
// bfloat16 tensors compute in float and matrix products accumulate in float. The layout is that
// of CUDA's __nv_bfloat16 and of the AVX-512 BF16 instructions' operands.
#pragma once

#include <cstdint>
#include <type_traits>

#include "float_bits.hpp"

namespace meld {

/// \addtogroup core
/// @{

/// A bfloat16 value: float's sign, exponent and upper 7 mantissa bits.
struct bfloat16 {
  /// The 16 bits: sign, 8 exponent bits, 7 mantissa bits.
  std::uint16_t bits = 0;

  bfloat16() = default;
  /// Rounds to the nearest bfloat16, ties to even; a NaN stays a (quiet) NaN, infinities stay.
  MELD_HD constexpr explicit bfloat16(float f) : bits(round(detail::bits_of(f))) {}
  /// From any other number, through float.
  template <class N, class = std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, float>>>
  MELD_HD constexpr explicit bfloat16(N v) : bfloat16(static_cast<float>(v)) {}

  /// The exact float value.
  MELD_HD constexpr operator float() const { return detail::float_of(std::uint32_t(bits) << 16); }

  /// The bfloat16 with these bits.
  MELD_HD static constexpr bfloat16 from_raw(std::uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  /// The bits of the float whose bits are u, rounded to bfloat16 (the conversion above).
  MELD_HD static constexpr std::uint16_t round(std::uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

/// @}

}  // namespace meld
