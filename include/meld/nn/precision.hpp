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
  /// Mixed precision: the products read the weights, the input and the output gradient rounded
  /// to bfloat16, and accumulate in float (linear keeps a bfloat16 copy of its input for backward,
  /// in half the memory; the weights and gradients are rounded as the products read them). On a
  /// CPU with AVX512_BF16 the products run AMX tiles where the CPU has them, else vdpbf16ps
  /// (backend/cpu/gemm_bf16.hpp); elsewhere they widen the operands to float, and only the numbers
  /// and the saved memory change, not the speed.
  bfloat16,
};

/// @}

}  // namespace meld::nn
