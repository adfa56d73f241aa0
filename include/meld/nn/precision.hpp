// The precision in which a layer's matrix products read their operands.
#pragma once

namespace meld::nn {

/// \addtogroup nn
/// @{

/// What a layer's products read. Parameters, their gradients and the optimizer's state stay float
/// (the master weights) either way.
enum class precision {
  /// Float operands (the default).
  float32,
  /// Mixed precision: the products read bfloat16 copies of the weights (rounded once per forward
  /// pass), of the input (which backward keeps, in half the memory) and of the output gradient,
  /// and accumulate in float. Where the CPU has no bfloat16 arithmetic (AVX512_BF16) the products
  /// widen the operands to float first, so only the numbers and the saved memory change, not
  /// the speed.
  bfloat16,
};

/// @}

}  // namespace meld::nn
