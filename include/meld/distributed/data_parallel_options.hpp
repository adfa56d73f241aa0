// What data_parallel is told and what it reports: its settings (data_parallel_options) and where
// the time of a step went (step_timing).
#pragma once

#include <cstddef>

namespace meld {

/// \addtogroup distributed
/// @{

/// Settings of data_parallel.
struct data_parallel_options {
  std::size_t bucket_bytes = std::size_t(25) << 20;  ///< gradient bucket cap
  bool broadcast_buffers = false;  ///< copy rank 0's buffers to every rank at each window start
  /// ZeRO stage 1: reduce-scatter the gradients so that each rank holds 1/k of them, for a
  /// meld::sharded_optimizer that keeps 1/k of the optimizer state and allgathers the parameters.
  bool shard_optimizer = false;
};

/// Where the time of the last step went, on the first local worker.
struct step_timing {
  double total_s = 0;      ///< the whole step
  double forward_s = 0;    ///< forward and loss
  double backward_s = 0;   ///< backward (with the bucket packing and launches inside it)
  double comm_wait_s = 0;  ///< blocked after backward, waiting for the allreduces to finish
  /// Gradient buckets allreduced in the step.
  int buckets = 0;
  int buckets_during_backward = 0;  ///< launched before backward returned (overlapped)
};

/// @}

}  // namespace meld
