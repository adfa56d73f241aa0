// The activation a layer can apply to its own output (nn::conv2d_options::activation).
#pragma once

namespace meld::nn {

/// \addtogroup nn
/// @{

/// An activation that a layer applies to its output as it writes it, in place of an activation
/// layer after it: forward writes the output once instead of twice, and backward applies the
/// activation's derivative as it reads the output gradient. The numbers are the separate layers'.
enum class activation {
  /// No activation (the default).
  none,
  /// max(x, 0); the gradient passes where the output is positive (nn::relu).
  relu,
};

/// @}

}  // namespace meld::nn
